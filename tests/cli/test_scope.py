"""Issue 9, defect 5: what kWh, CO2 and cost cover.

RAPL measures CPU packages and DRAM only.  By default the figures say so
("scope": "cpu+dram"); a site may add the rest of the node with
node_overhead_w (W per node, times the node-seconds counted) or node_factor
(a multiplier calibrated against a node meter), and the figures are then a
"node estimate".  Truths below are worked out from the fixture
(recgen.fixture_records): job 43 is one 10 s step on node02 with 200 + 20 J,
its checkpoint phase 4 s with 80 + 8 J; job 42 (alice) is step 0 (10 s, 120
J) inside batch (12 s, 156 J) on node01, i.e. 156 J over 12 node-seconds.
The whole fixture: 436 J over 10 + 2 + 10 + 5 = 27 counted step-seconds.
"""
import csv
import io

import pytest

from conftest import jrun
from recgen import T0

CO2, PRICE = 360.0, 0.25
ALICE = ["--first-seen", T0]


def approx(x):
    return pytest.approx(x, rel=1e-9)


def _conf(tmp_path, extra: str):
    p = tmp_path / "scope.conf"
    p.write_text("[site]\ncluster =\nco2_g_per_kwh = 360\nprice_per_kwh = 0.25\n"
                 f"currency = CHF\n{extra}\n")
    return p


def test_default_scope_is_cpu_dram(loaded):
    s = jrun(loaded, "job", 43)
    assert s["scope"] == "cpu+dram"
    assert s["totals"]["kwh"] == approx(220 / 3.6e6)
    r = jrun(loaded, "report")
    assert r["scope"] == "cpu+dram" and r["totals"]["kwh"] == approx(436 / 3.6e6)
    for out in (loaded("job", 43).stdout, loaded("report").stdout):
        flat = " ".join(out.split())
        assert "CPU packages and DRAM only" in flat
    rows = list(csv.DictReader(io.StringIO(loaded("job", 43, "--format", "csv").stdout)))
    assert {r["scope"] for r in rows} == {"cpu+dram"}
    rows = list(csv.DictReader(io.StringIO(loaded("report", "--format", "csv").stdout)))
    assert {r["scope"] for r in rows} == {"cpu+dram"}


def test_node_overhead_adds_watts_per_node_second(loaded, tmp_path):
    conf = _conf(tmp_path, "node_overhead_w = 50")
    s = jrun(loaded, "--config", conf, "job", 43)
    assert s["scope"] == "node estimate"
    node_j = 220 + 50 * 10                      # 720 J
    assert s["totals"]["kwh"] == approx(node_j / 3.6e6)
    assert s["totals"]["co2_g"] == approx(node_j / 3.6e6 * CO2)
    assert s["totals"]["cost"] == approx(node_j / 3.6e6 * PRICE)
    assert s["totals"]["energy_total_j"] == 220     # measured figure unchanged
    ck = s["steps"][0]["phases"][1]
    assert ck["kwh"] == approx((88 + 50 * 4) / 3.6e6)
    # step 0 inside batch on node01: the node's 12 s are counted once
    s = jrun(loaded, "--config", conf, "job", 42, *ALICE)
    assert s["totals"]["kwh"] == approx((156 + 50 * 12) / 3.6e6)
    r = jrun(loaded, "--config", conf, "report")
    assert r["scope"] == "node estimate"
    assert r["totals"]["kwh"] == approx((436 + 50 * 27) / 3.6e6)
    g = {x["key"]: x for x in r["groups"]}
    assert g["alice"]["cost"] == approx((156 + 50 * 12) / 3.6e6 * PRICE)
    out = " ".join(loaded("--config", conf, "job", 43).stdout.split())
    assert "node estimate" in out and "50 W per node" in out
    out = " ".join(loaded("--config", conf, "report").stdout.split())
    assert "node estimate" in out and "50 W per node" in out


def test_node_factor_multiplies(loaded, tmp_path):
    conf = _conf(tmp_path, "node_factor = 1.5")
    s = jrun(loaded, "--config", conf, "job", 43)
    assert s["scope"] == "node estimate"
    assert s["totals"]["kwh"] == approx(1.5 * 220 / 3.6e6)
    r = jrun(loaded, "--config", conf, "report", "--since",
             "2025-11-22T12:00:00+00:00")       # carol's 60 J only
    assert r["totals"]["cost"] == approx(1.5 * 60 / 3.6e6 * PRICE)
    assert "x 1.5" in " ".join(loaded("--config", conf, "report").stdout.split())


@pytest.mark.parametrize("extra,msg", [
    ("node_overhead_w = 50\nnode_factor = 1.5", "not both"),
    ("node_factor = 0.8", "node_factor"),
    ("node_factor = 0", "node_factor"),
    ("node_overhead_w = -5", "node_overhead_w"),
    ("node_overhead_w = lots", "expected a number"),
    ("node_factor = nan", "node_factor"),
])
def test_bad_node_settings_are_refused(loaded, tmp_path, extra, msg):
    r = loaded("--config", _conf(tmp_path, extra), "report", ok=False)
    assert msg in r.output and "Error" in r.output
    assert "Traceback" not in r.output
