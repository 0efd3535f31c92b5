"""Site-sized sums: no aggregate overflows on either engine.

A group of a 500-node GPU site passes 2**63 µJ (about 2.56 GWh) in some
nine months; SQLite's sum() of integers then raised "integer overflow".
The store here holds a little over 3 GWh in one group (one partition, one
policy, one account): 8-node GPU jobs of two weeks, each node at about
6.6 kW (CPU, DRAM and eight GPUs), ingested as the plugin writes them.
The truths are Python integers over the records."""
from __future__ import annotations

import pytest

import recgen
from conftest import jrun
from recgen import J, S
from joulestep import config, exporter as ex, store

DAYS = 14
NODES_PER_JOB = 8
JOBS = 172               # 1,376 node records of ~2.2 MWh: ~3.07 GWh
CPU_W, DRAM_W, GPU_W, GPUS = 800, 200, 700, 8
LIMIT_UJ = 2 ** 63


def site_records() -> list[dict]:
    out = []
    dur = DAYS * 86400
    for job in range(JOBS):
        for k in range(NODES_PER_JOB):
            r = recgen.record(100 + job, "0", f"g{job:03d}n{k}", user=f"u{job % 4}",
                              account="climate", partition="gpu",
                              policy="io-dvfs", start_s=job * 60, dur_s=dur,
                              cpu_j=CPU_W * dur + k, dram_j=DRAM_W * dur,
                              first_seen_s=job * 60)
            r["version"] = 3
            gpu_uj = [(GPU_W * dur + i) * J for i in range(GPUS)]
            r["gpus"] = [{"index": i, "uuid": f"GPU-{job}-{k}-{i}", "model": "H100",
                          "energy_uj": e, "reason": None, "integrated": False,
                          "resets": 0} for i, e in enumerate(gpu_uj)]
            st = r["step"]
            st["energy_gpu_uj"] = sum(gpu_uj)
            st["energy_total_uj"] = st["energy_cpu_uj"] + st["energy_dram_uj"] + sum(gpu_uj)
            st["total_includes"] = "cpu+dram+gpu"
            r["provenance"]["gpu_backend"] = "nvml"
            out.append(r)
    return out


RECORDS = site_records()
TOTAL_UJ = sum(r["step"]["energy_total_uj"] for r in RECORDS)
GPU_UJ = sum(r["step"]["energy_gpu_uj"] for r in RECORDS)
CPU_UJ = sum(r["step"]["energy_cpu_uj"] for r in RECORDS)


def test_the_store_is_site_sized():
    assert TOTAL_UJ > LIMIT_UJ and TOTAL_UJ / 3.6e15 >= 3.0   # >= 3 GWh
    assert CPU_UJ < LIMIT_UJ          # the parts alone would not show it


@pytest.fixture
def site(run, db):
    conn = store.connect(db)
    try:
        res = store.ingest_records(conn, RECORDS)
    finally:
        conn.close()
    assert res.new_steps == len(RECORDS) and not res.errors, res.errors[:3]
    return run


@pytest.mark.parametrize("by", ["policy", "partition", "account", "user", "node",
                                "qos", "tag:none"])
def test_report_sums_a_site(site, by):
    for since in ("2000-01-01", recgen.T0 // S + 3600):   # whole jobs, cut jobs
        since = since if isinstance(since, str) else _iso(since)
        r = jrun(site, "report", "--by", by, "--since", since)
        t = r["totals"]
        if since == "2000-01-01":
            want_total, want_gpu = TOTAL_UJ, GPU_UJ
        else:
            kept = [x for x in RECORDS if x["step"]["start_ns"] >= recgen.T0 + 3600 * S]
            want_total = sum(x["step"]["energy_total_uj"] for x in kept)
            want_gpu = sum(x["step"]["energy_gpu_uj"] for x in kept)
        assert t["energy_total_j"] == pytest.approx(want_total / J, rel=1e-12)
        assert t["energy_gpu_j"] == pytest.approx(want_gpu / J, rel=1e-12)
        assert t["kwh"] == pytest.approx(want_total / J / 3.6e6, rel=1e-12)
        assert sum(g["energy_total_j"] for g in r["groups"]) == \
            pytest.approx(want_total / J, rel=1e-12)
        if by in ("policy", "partition", "account"):      # one group: all of it
            (g,) = r["groups"]
            assert g["energy_total_j"] == pytest.approx(want_total / J, rel=1e-12)
            assert g["policy_energy_pct"] == pytest.approx(100.0)


def _iso(sec: int) -> str:
    import datetime as dt
    return dt.datetime.fromtimestamp(sec, dt.timezone.utc).isoformat()


def test_jobs_and_job_of_a_site(site):
    rows = jrun(site, "jobs", "--user", "u0", "--starttime", "2000-01-01")["jobs"]
    assert len(rows) == JOBS // 4
    one = jrun(site, "job", "100")
    want = sum(x["step"]["energy_total_uj"] for x in RECORDS
               if x["job"]["job_id"] == 100)
    assert one["totals"]["energy_total_j"] == pytest.approx(want / J, rel=1e-12)


def test_exporter_sums_a_site(site, db):
    v = ex.StoreView(lambda: store.connect(db, write=False), config.load())
    v.refresh()
    text = ex.text(v)
    text = text.decode() if isinstance(text, bytes) else text
    got = sum(float(ln.split()[-1]) for ln in text.splitlines()
              if ln.startswith("joulestep_energy_joules_total{"))
    assert got == pytest.approx(TOTAL_UJ / J, rel=1e-12)


def test_compare_sums_a_site(site):
    """compare's figures over the site's runs (pandas) are right: per run
    (a job), its CPU + DRAM and its GPUs, the mean over the runs."""
    r = jrun(site, "compare", "--by", "partition", "--what", "io")
    (row,) = r["table"]
    runs: dict = {}
    for x in RECORDS:
        st = x["step"]
        a = runs.setdefault(x["job"]["job_id"], [0, 0])
        a[0] += st["energy_cpu_uj"] + st["energy_dram_uj"]
        a[1] += st["energy_gpu_uj"]
    assert row["runs"] == JOBS
    assert row["energy_j"] == pytest.approx(sum(v[0] for v in runs.values()) / JOBS / J,
                                            rel=1e-12)
    assert row["gpu_j"] == pytest.approx(sum(v[1] for v in runs.values()) / JOBS / J,
                                         rel=1e-12)
