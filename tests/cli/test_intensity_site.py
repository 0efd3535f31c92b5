"""CO2 and cost over time at a site's size: the sums per cell of the grid
(store/intensity.py: cell_sums, job_cell_sums) never overflow.

One hour of a site that passes 2**63 µJ (about 2.56 GWh) in that hour:
26,500 one-hour steps, each at 97 kW, the most the record checker lets a
node draw being 100 kW.  No site draws 2.5 GW; the point is that a sum
is exact whatever the store holds, as the report's own sums are
(store/read_report.py).  The truths are Python integers over the records."""
from __future__ import annotations

import pytest

import recgen
from conftest import jrun
from recgen import J
from test_intensity import KWH, _two_hours, _zone_conf

from joulestep import store

STEPS = 26_500
CPU_J, DRAM_J = 300_000_000, 50_000_000      # 350 MJ over 3600 s: 97 kW


def site_hour() -> list[dict]:
    """Steps 00:00-01:00 (the first hour of the test's day), one job each,
    one node each (no step shares a node), one user and one policy."""
    return [recgen.record(1000 + i, "0", f"n{i:05d}", start_s=0, dur_s=3600,
                          cpu_j=CPU_J, dram_j=DRAM_J, first_seen_s=0)
            for i in range(STEPS)]


RECORDS = site_hour()
TOTAL_UJ = sum(r["step"]["energy_total_uj"] for r in RECORDS)


@pytest.fixture
def site(run, db, tmp_path, monkeypatch):
    _zone_conf(tmp_path, monkeypatch)
    _two_hours(run, tmp_path)          # 00:00-01:00 at 100 g/kWh, 0.10/kWh
    conn = store.connect(db)
    try:
        res = store.ingest_records(conn, RECORDS)
    finally:
        conn.close()
    assert res.new_steps == STEPS and not res.errors, res.errors[:3]
    return run


def test_one_hour_passes_the_64_bit_limit():
    assert TOTAL_UJ > 2 ** 63
    assert max(r["step"]["energy_total_uj"] for r in RECORDS) < 100_000 * 3600 * J


def test_cell_sums_of_a_site_hour_are_exact(site):
    kwh = TOTAL_UJ / J / KWH
    for by in ("user", "policy"):       # the jobs' cells; the steps' cells
        t = jrun(site, "report", "--by", by)["totals"]
        assert t["energy_total_j"] == pytest.approx(TOTAL_UJ / J, rel=1e-12)
        assert t["co2_method"] == "time-varying"
        assert t["co2_covered_pct"] == pytest.approx(100.0)
        assert t["co2_g"] == pytest.approx(kwh * 100, rel=1e-12)
        assert t["cost"] == pytest.approx(kwh * 0.10, rel=1e-12)
    h = jrun(site, "--utc", "report", "--by", "hour")
    (g,) = h["groups"]
    assert g["key"] == "00"
    assert g["energy_total_j"] == pytest.approx(TOTAL_UJ / J, rel=1e-12)
    assert g["co2_g"] == pytest.approx(kwh * 100, rel=1e-12)
