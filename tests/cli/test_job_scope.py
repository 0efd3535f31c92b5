"""One scope rule for every figure of a job: each number on one line (the
job's totals, a step, a phase) covers the same parts, CPU, DRAM and the
GPUs when the line's total includes them; the line says which; the user
view, the admin view, JSON and CSV agree; the user view rounds and hides
GPU energy as it does the CPU's.  And JOBID.STEP names a step the job has.

The truths are computed here from the records."""
from __future__ import annotations

import csv
import io
import json

import pytest

import recgen
from recgen import J
from joulestep import userview
from test_gpu_records import gpu, v2
from test_number_format import parse

RES = userview.DEFAULT_RESOLUTION_UJ
SHORT_GPU_J = 1.23457          # a GPU phase shorter than min_phase_ms


def records():
    # step 0: CPU 100 J, DRAM 20 J, two GPUs 300 J + 200 J over 10 s; a 3 s
    # checkpoint phase (GPUs 40 J + 10 J) and a 5 ms flush (GPU 1.23457 J)
    s0 = v2(recgen.record(5001, "0", cpu_j=100, dram_j=20, dur_s=10,
                          phases=[recgen.phase(0, "checkpoint", 2, 3, 10, 2),
                                  recgen.phase(1, "flush", 6, 0.005, 0.5, 0.1)]),
            [gpu(0, 300), gpu(1, 200)], [[40, 10], [SHORT_GPU_J, 0]])
    # step 1: no GPU figure (split by MIG): CPU + DRAM
    s1 = v2(recgen.record(5001, "1", start_s=20, dur_s=10, cpu_j=50, dram_j=5),
            [gpu(2, None, "split by MIG: no per-job counter")])
    return s0, s1


def truth():
    s0, s1 = records()
    gpu_j = (300 + 200)
    total = 100 + 20 + gpu_j + 50 + 5
    return {"total_j": total, "gpu_j": gpu_j,
            "steps": {"0": (100 + 20 + gpu_j, 10.0, True), "1": (55, 10.0, False)}}


@pytest.fixture
def job5001(run, tmp_path):
    for r in records():
        recgen.write(tmp_path / "spool", r)
    run("ingest", tmp_path / "spool")
    return run


def _line_agrees(d: dict):
    """Every figure of one line is of the same energy: its total, which
    holds exactly the parts it says."""
    parts = d["energy_cpu_j"] + (d["energy_dram_j"] or 0)
    if "GPU" in d["total_includes"]:
        parts += d["energy_gpu_j"]
    assert d["energy_total_j"] == pytest.approx(parts)
    if d.get("avg_power_w") is not None:
        assert d["avg_power_w"] == pytest.approx(d["energy_total_j"] / d["duration_s"])
    assert d["kwh"] == pytest.approx(d["energy_total_j"] / 3.6e6)   # RAPL scope
    assert d["cost"] == pytest.approx(d["kwh"] * 0.25)


@pytest.mark.parametrize("view", [[], ["--user-view"]])
def test_every_line_covers_the_parts_it_names(job5001, view):
    want = truth()
    out = json.loads(job5001("job", "5001", *view, "--format", "json").stdout)
    t = out["totals"]
    assert t["total_includes"] == "CPU + DRAM + GPU"
    tol = 0 if not view else 20 * RES / J          # rounded parts
    assert t["energy_total_j"] == pytest.approx(want["total_j"], abs=tol + 1e-9)
    assert t["energy_gpu_j"] == pytest.approx(want["gpu_j"], abs=tol + 1e-9)
    assert t["kwh"] == pytest.approx(t["energy_total_j"] / 3.6e6)
    assert "GPU" in out["scope_note"]          # the footer and the JSON say so
    for st in out["steps"]:
        total, dur, has_gpu = want["steps"][st["step_id"]]
        assert st["total_includes"] == ("CPU + DRAM + GPU" if has_gpu else "CPU + DRAM")
        assert st["energy_total_j"] == pytest.approx(total, abs=tol + 1e-9)
        _line_agrees(st)
        for p in st["phases"]:
            if p["energy_cpu_j"] is not None:
                _line_agrees(p)


def test_user_view_rounds_and_hides_gpu_energy(job5001):
    out = json.loads(job5001("job", "5001", "--user-view", "--format", "json").stdout)
    st = {s["step_id"]: s for s in out["steps"]}
    (long_, short) = st["0"]["phases"]
    assert short["energy_gpu_j"] is None and short["energy_note"]
    assert short["energy_cpu_j"] is None
    assert long_["energy_gpu_j"] is not None
    assert round(long_["energy_gpu_j"] * J) % RES == 0            # rounded
    assert round(st["0"]["energy_gpu_j"] * J) % RES == 0
    assert all(g["energy_j"] is None or round(g["energy_j"] * J) % RES == 0
               for g in st["0"]["gpus"])
    text = job5001("job", "5001", "--user-view").stdout
    assert "1.23457" not in text and "1.235" not in text
    assert "GPU 0 J" not in text


def test_step_line_in_text_is_one_energy(job5001):
    """TOTAL and AVG_POWER of a step line are of the same energy; a phase
    line's TOTAL holds its GPUs', and its J/GIB is of that TOTAL."""
    text = job5001("job", "5001").stdout
    want = truth()["steps"]["0"][0]
    row = next(ln.split() for ln in text.splitlines() if ln.split()[:2] == ["0", "node01"])
    head = next(ln.split() for ln in text.splitlines() if ln.split()[:1] == ["STEP"])
    cell = dict(zip(head, row))
    assert parse(cell["TOTAL"], "J") == pytest.approx(want, rel=1e-2)
    assert parse(cell["AVG_POWER"], "W") == pytest.approx(want / 10, rel=1e-2)
    assert "GPU" in " ".join(text.split()[-40:])       # the footer names the GPUs
    phead = next(ln.split() for ln in text.splitlines() if ln.split()[:1] == ["SEQ"])
    prow = next(ln.split() for ln in text.splitlines()
                if ln.split()[:2] == ["0", "checkpoint"])
    cell = dict(zip(phead, prow))
    assert parse(cell["TOTAL"], "J") == pytest.approx(10 + 2 + 40 + 10, rel=1e-2)
    if cell["J/GIB"] != "-":
        p = json.loads(job5001("job", "5001", "--format", "json").stdout)
        ph = p["steps"][0]["phases"][0]
        assert parse(cell["J/GIB"], "J") == pytest.approx(
            (10 + 2 + 40 + 10) / (ph["bytes"] / 2**30), rel=1e-2)


def test_csv_and_json_agree(job5001):
    doc = json.loads(job5001("job", "5001", "--format", "json").stdout)
    rows = list(csv.DictReader(io.StringIO(job5001("job", "5001", "--format",
                                                   "csv").stdout)))
    assert "energy_gpu_j" in rows[0] and "total_includes" in rows[0]
    steps = {r["step_id"]: r for r in rows if r["level"] == "step"}
    for st in doc["steps"]:
        r = steps[st["step_id"]]
        assert float(r["energy_total_j"]) == pytest.approx(st["energy_total_j"])
        assert float(r["avg_power_w"]) == pytest.approx(st["avg_power_w"])
        assert r["total_includes"] == st["total_includes"]
    jobs = list(csv.DictReader(io.StringIO(job5001(
        "jobs", "--user", "alice", "--starttime", "2000-01-01", "--format", "csv").stdout)))
    (j,) = jobs
    assert float(j["energy_gpu_j"]) == pytest.approx(doc["totals"]["energy_gpu_j"])
    assert float(j["energy_total_j"]) == pytest.approx(doc["totals"]["energy_total_j"])
    assert j["total_includes"] == "CPU + DRAM + GPU"
    listed = json.loads(job5001("jobs", "--user", "alice", "--starttime", "2000-01-01",
                                "--format", "json").stdout)["jobs"][0]
    assert listed["energy_gpu_j"] == pytest.approx(doc["totals"]["energy_gpu_j"])


def test_a_step_the_job_does_not_have_is_an_error(job5001):
    res = job5001("job", "5001.7", ok=False)
    assert res.exit_code == 1
    assert "no step 7" in res.output and "0, 1" in res.output
    assert "Traceback" not in res.output
    ok = json.loads(job5001("job", "5001.1", "--format", "json").stdout)
    assert ok["job"]["job_id"] == 5001
