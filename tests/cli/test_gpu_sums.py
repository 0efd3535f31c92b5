"""GPU energy in the sums over many steps (issue 26): `report`, `compare`
and the exporter show the GPUs' energy and say what a total includes; a
step whose GPUs were not measured (MIG, shared, uncertain) is counted,
never added as 0; kWh and cost are of the same energy as the total.  The
truths are computed here from the records ingested."""
from __future__ import annotations

import math

import pytest

import promrun
import recgen
from conftest import jrun
from recgen import J
from test_exporter import by_labels, parse
from test_number_format import parse as cell_value
from joulestep import config, exporter as ex, store

PRICE = 0.25                 # tests/cli/conftest.py's site config


def gpus(rec, energies_j):
    """rec as a version 3 record with GPUs of these energies (None: split
    by MIG); the total includes them only when every one has its energy
    (the plugin's rule, js_gpu_step.c)."""
    rec["version"] = 3
    rec["gpus"] = [{"index": i, "uuid": f"GPU-{rec['job']['job_id']}-{i}",
                    "model": "Fake H100 (fakehw)",
                    "energy_uj": None if e is None else int(e * J),
                    "reason": "split by MIG: no per-job counter" if e is None else None,
                    "integrated": False, "resets": 0}
                   for i, e in enumerate(energies_j)]
    st = rec["step"]
    ok = None not in energies_j
    st["energy_gpu_uj"] = sum(g["energy_uj"] for g in rec["gpus"]) if ok else None
    st["energy_total_uj"] = st["energy_cpu_uj"] + st["energy_dram_uj"] + (
        st["energy_gpu_uj"] or 0)
    st["total_includes"] = "cpu+dram+gpu" if ok else "cpu+dram"
    rec["provenance"]["gpu_backend"] = "nvml"
    return rec


def rec(job, step, user, approach, cpu, dram, gpu_j=(), start=1, dur=10):
    r = recgen.record(job, step, f"gn{job}", user=user, cpu_j=cpu, dram_j=dram,
                      start_s=start, dur_s=dur, tags={"approach": approach})
    return gpus(r, list(gpu_j)) if gpu_j else r


# job 7: a step with two GPUs, a step with a GPU split by MIG (not measured)
# job 9: a batch step with its GPU, and step 0 inside it with the same GPU
# (the batch step's measurement includes step 0's: counted once)
# job 8: no GPU; job 10: one GPU
RECORDS = [
    rec(7, "0", "alice", "a", 100, 20, (300, 200)),
    rec(7, "1", "alice", "a", 50, 5, (None,), start=20),
    rec(9, "batch", "carol", "b", 200, 40, (400,), start=0, dur=100),
    rec(9, "0", "carol", "b", 30, 6, (100,), start=5),
    rec(8, "0", "bob", "c", 70, 10),
    rec(10, "0", "dave", "d", 60, 6, (250,)),
]


def truth():
    """Per user: (CPU J, DRAM J, GPU J in the total, total J, GPU steps,
    steps with GPUs not measured), from RECORDS: steps inside job 9's batch
    step are part of its measurement, so each job counts its outermost
    steps' figures."""
    out = {}
    for r in RECORDS:
        s, u = r["step"], r["job"]["user"]
        inner = r["job"]["job_id"] == 9 and s["step_id"] != "batch"
        cpu, dram = s["energy_cpu_uj"] / J, s["energy_dram_uj"] / J
        gpu = (s.get("energy_gpu_uj") or 0) / J
        t = out.setdefault(u, [0.0, 0.0, 0.0, 0.0, 0, 0])
        if not inner:
            t[0] += cpu
            t[1] += dram
            t[2] += gpu
            t[3] += s["energy_total_uj"] / J
        t[4] += s.get("total_includes") == "cpu+dram+gpu"
        t[5] += s.get("total_includes") == "cpu+dram" and "gpus" in r
    return out


@pytest.fixture
def loaded(run, tmp_path):
    for r in RECORDS:
        recgen.write(tmp_path / "spool", r)
    run("ingest", tmp_path / "spool")
    return run


def test_report_shows_gpu_energy_and_what_each_total_includes(loaded, tmp_path):
    want = truth()
    r = jrun(loaded, "report", "--by", "user", "--since", "2000-01-01")
    groups = {g["key"]: g for g in r["groups"]}
    for user, (cpu, dram, gpu, total, gsteps, no_gpu) in want.items():
        g = groups[user]
        assert g["energy_cpu_j"] == pytest.approx(cpu)
        assert g["energy_dram_j"] == pytest.approx(dram)
        assert g["energy_total_j"] == pytest.approx(total)
        assert total == pytest.approx(cpu + dram + gpu)   # every figure agrees
        assert g["energy_gpu_j"] == (pytest.approx(gpu) if gsteps else None)
        assert (g["gpu_steps"], g["gpu_not_measured_steps"]) == (gsteps, no_gpu)
        assert g["kwh"] == pytest.approx(total / 3.6e6)
        assert g["cost"] == pytest.approx(total / 3.6e6 * PRICE)
    assert groups["bob"]["total_includes"] == "CPU + DRAM"
    assert groups["carol"]["total_includes"] == "CPU + DRAM + GPU"
    assert groups["alice"]["total_includes"] == \
        "CPU + DRAM + GPU (GPUs not measured on 1 of 2 GPU steps)"
    t = r["totals"]
    assert t["energy_gpu_j"] == pytest.approx(sum(v[2] for v in want.values()))
    assert t["energy_total_j"] == pytest.approx(sum(v[3] for v in want.values()))
    assert t["kwh"] == pytest.approx(t["energy_total_j"] / 3.6e6)
    assert (t["gpu_steps"], t["gpu_not_measured_steps"]) == (4, 1)
    text = loaded("report", "--by", "user", "--since", "2000-01-01").stdout
    head = next(ln.split() for ln in text.splitlines() if ln.startswith("USER "))
    assert "GPU" in head and "INCLUDES" in head, text
    bob = next(ln.split() for ln in text.splitlines() if ln.startswith("bob "))
    dave = next(ln.split() for ln in text.splitlines() if ln.startswith("dave "))
    assert bob[3] == "-" and bob[5] == "cpu+dram"
    assert cell_value(dave[3], "J") == pytest.approx(want["dave"][2], rel=5e-3)
    assert dave[5] == "cpu+dram+gpu"
    assert "cpu+dram+gpu*" in text          # alice: a GPU step not measured
    assert "plus the GPUs' measured energy" in " ".join(text.split())
    assert "GPUs not measured on 1 of 5 GPU steps" in " ".join(text.split())

    # a node estimate scales the RAPL part only; the GPUs' energy is measured
    conf = tmp_path / "scope.conf"
    conf.write_text("[site]\ncluster =\nco2_g_per_kwh = 360\nprice_per_kwh = 0.25\n"
                    "currency = CHF\nnode_factor = 1.5\n")
    r = jrun(loaded, "--config", conf, "report", "--by", "user", "--since",
             "2000-01-01")
    carol = next(g for g in r["groups"] if g["key"] == "carol")
    cpu, dram, gpu = want["carol"][:3]
    assert carol["kwh"] == pytest.approx((1.5 * (cpu + dram) + gpu) / 3.6e6)


def test_compare_shows_gpu_energy_per_approach(loaded):
    want = truth()
    users = {"a": "alice", "b": "carol", "c": "bob", "d": "dave"}
    r = jrun(loaded, "compare", "--by", "tag:approach", "--what", "io")
    rows = {row["tag:approach"]: row for row in r["table"]}
    for appr, user in users.items():
        cpu, dram, gpu, _, _, no_gpu = want[user]
        assert rows[appr]["energy_j"] == pytest.approx(cpu + dram)
        if no_gpu:      # a run with a GPU not measured: no figure, never 0
            assert rows[appr]["gpu_j"] is None or math.isnan(rows[appr]["gpu_j"])
        else:
            assert rows[appr]["gpu_j"] == pytest.approx(gpu)
    text = loaded("compare", "--by", "tag:approach", "--what", "io").stdout
    assert "gpu_j" in text and "energy_j is CPU + DRAM" in text


def test_exporter_counts_gpu_energy_and_unmeasured_gpu_steps(loaded, db):
    want = truth()
    m = parse(loaded("exporter", "--once").stdout)

    def per_user(name):
        return {k[1]: v for k, v in by_labels(m[name]).items()}
    gpu, n, no = (per_user(f"joulestep_gpu_{x}") for x in
                  ("energy_joules_total", "steps_total", "steps_unmeasured_total"))
    energy, cost = per_user("joulestep_energy_joules_total"), {
        k[1]: v for k, v in by_labels(m["joulestep_cost_total"],
                                      ex.LABELS + ("currency",)).items()}
    for user, (cpu, dram, g, total, gsteps, no_gpu) in want.items():
        assert gpu[user] == pytest.approx(g)
        assert (n[user], no[user]) == (gsteps, no_gpu)
        assert energy[user] == pytest.approx(total)
        assert cost[user] == pytest.approx(total / 3.6e6 * PRICE)
    v = ex.StoreView(lambda: store.connect(db, write=False), config.load())
    v.refresh()
    res = promrun.promtool_check(ex.text(v))
    assert res.returncode == 0, res.stdout + res.stderr


def test_dashboard_shows_gpu_energy(loaded, db, repo):
    """The dashboard's GPU panels query the exporter's GPU families (the
    names and labels themselves: test_grafana.py), and its top jobs
    table's gpu_j is each job's GPU energy in its total."""
    import json
    from test_grafana import sql_for, targets
    dash = json.loads((repo / "etc" / "grafana" / "joulestep.json").read_text())
    exprs = " ".join(t["expr"] for _, t in targets(dash, "promql"))
    for name in ("joulestep_gpu_energy_joules_total", "joulestep_gpu_steps_total",
                 "joulestep_gpu_steps_unmeasured_total"):
        assert name in exprs
    want = {}
    for r in RECORDS:
        s = r["step"]
        if r["job"]["job_id"] != 9 or s["step_id"] == "batch":
            want.setdefault(r["job"]["job_id"], [None, 0])
            if s.get("energy_gpu_uj") is not None:
                want[r["job"]["job_id"]][0] = (want[r["job"]["job_id"]][0] or 0) \
                    + s["energy_gpu_uj"] / J
        if s.get("total_includes") == "cpu+dram" and "gpus" in r:
            want[r["job"]["job_id"]][1] += 1
    (_, t), = targets(dash, "sql")
    conn = store.connect(db)
    try:
        cur = conn.execute(sql_for(t, 0, 2 * recgen.T0, ".*"))
        cols = [d[0] for d in cur.description]
        rows = {r["job_id"]: r for r in (dict(zip(cols, x)) for x in cur.fetchall())}
    finally:
        conn.close()
    for job, (gpu, unmeasured) in want.items():
        assert rows[job]["gpu_j"] == (None if gpu is None else pytest.approx(gpu))
        assert rows[job]["gpu_steps_unmeasured"] == unmeasured
