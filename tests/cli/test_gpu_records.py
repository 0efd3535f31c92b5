"""GPU energy in records (version 2), the store (migration 009) and
`joulestep job` (issue 26): per GPU, per step and per phase; a GPU without a
per-job counter (MIG, shared) is null with its reason and never in a sum;
the output says what the total includes."""
from __future__ import annotations

import json
import sqlite3

import pytest

import recgen
from recgen import J
from joulestep.store import RecordError, parse_record


def gpu(i, energy_j, reason=None, integrated=False):
    return {"index": i, "uuid": f"GPU-fake-{i}", "model": "Fake H100 (fakehw)",
            "energy_uj": None if energy_j is None else int(energy_j * J),
            "reason": reason, "integrated": integrated, "resets": 0}


def v2(rec, gpus, phase_gpus=None):
    """A version 2 record with these GPUs: the total includes them only
    when every one has its energy (the plugin's rule, js_gpu_step.c)."""
    rec["version"] = 2
    rec["gpus"] = gpus
    st = rec["step"]
    ok = bool(gpus) and all(g["energy_uj"] is not None for g in gpus)
    st["energy_gpu_uj"] = sum(g["energy_uj"] for g in gpus) if ok else None
    st["energy_total_uj"] = st["energy_cpu_uj"] + st["energy_dram_uj"] + (
        st["energy_gpu_uj"] or 0)
    st["total_includes"] = "cpu+dram+gpu" if ok else "cpu+dram"
    rec["provenance"]["gpu_backend"] = "nvml"
    for p, pg in zip(rec["phases"], phase_gpus or ()):
        p["gpus"] = [{"uuid": g["uuid"], "energy_uj": None if e is None else int(e * J),
                      "reason": g["reason"], "integrated": False}
                     for g, e in zip(gpus, pg)]
        p["energy_gpu_uj"] = None if None in pg else int(sum(pg) * J)
        p["gpu_clock_mhz"] = 800 if p["kind"] == "checkpoint" else None
    return rec


def records():
    # step 0: two whole GPUs (300 J + 200 J), a phase with 40 J + 10 J
    s0 = v2(recgen.record(7, "0", cpu_j=100, dram_j=20,
                          phases=[recgen.phase(0, "checkpoint", 2, 3, 10, 2)]),
            [gpu(0, 300), gpu(1, 200)], [[40, 10]])
    # step 1: a GPU split by MIG: null with the reason, not in any sum
    s1 = v2(recgen.record(7, "1", start_s=20, cpu_j=50, dram_j=5),
            [gpu(2, None, "split by MIG: no per-job counter")])
    return s0, s1


def test_job_shows_gpu_energy_and_what_the_total_includes(run, db, tmp_path):
    s0, s1 = records()
    for r in (s0, s1):
        recgen.write(tmp_path / "spool", r)
    run("ingest", tmp_path / "spool")
    run("ingest", tmp_path / "spool")          # twice: nothing changes
    out = json.loads(run("job", "7", "--format", "json").stdout)
    t = out["totals"]
    assert t["energy_gpu_j"] == pytest.approx(300 + 200)
    assert t["energy_total_j"] == pytest.approx(100 + 20 + 50 + 5 + 300 + 200)
    assert t["total_includes"] == "CPU + DRAM + GPU"
    assert t["kwh"] == pytest.approx((100 + 20 + 50 + 5 + 300 + 200) / 3.6e6)
    st = {s["step_id"]: s for s in out["steps"]}
    assert [g["energy_j"] for g in st["0"]["gpus"]] == [300, 200]
    assert st["0"]["phases"][0]["energy_gpu_j"] == pytest.approx(50)
    assert st["0"]["total_includes"] == "CPU + DRAM + GPU"
    assert st["1"]["energy_gpu_j"] is None
    assert st["1"]["total_includes"] == "CPU + DRAM"
    assert st["1"]["gpus"][0]["energy_j"] is None
    assert "MIG" in st["1"]["gpus"][0]["reason"]
    text = run("job", "7").stdout
    assert "GPU 500 J); total includes CPU + DRAM + GPU" in text
    assert "GPU 2 Fake H100 (fakehw) GPU-fake-2: no energy: split by MIG" in text
    assert "phase 0 checkpoint: GPU 50.0 J (clock <= 800 MHz)" in text
    assert st["0"]["phases"][0]["gpu_clock_mhz"] == 800
    if not str(db).startswith("postgres"):
        conn = sqlite3.connect(db)
        assert conn.execute("SELECT count(*), count(energy_uj) FROM step_gpus").fetchone() == (3, 2)
        assert conn.execute("SELECT count(*) FROM phase_gpus").fetchone() == (2,)


def test_job_without_gpus_says_cpu_and_dram(run, db, tmp_path):
    recgen.write(tmp_path / "spool", recgen.record(8, "0"))     # version 1
    run("ingest", tmp_path / "spool")
    out = json.loads(run("job", "8", "--format", "json").stdout)
    assert out["totals"]["energy_gpu_j"] is None
    assert out["totals"]["total_includes"] == "CPU + DRAM"
    assert out["steps"][0]["total_includes"] == "CPU + DRAM"
    assert out["steps"][0]["gpus"] == []
    assert "total includes CPU + DRAM" in run("job", "8").stdout


def test_gpu_fields_are_checked_by_path():
    s0, _ = records()
    bad = json.loads(json.dumps(s0))
    bad["gpus"][1]["uuid"] = bad["gpus"][0]["uuid"]
    with pytest.raises(RecordError, match=r"gpus\[1\]\.uuid: GPU 'GPU-fake-0' appears twice"):
        parse_record(bad)
    bad = json.loads(json.dumps(s0))
    bad["phases"][0]["gpus"][0]["energy_uj"] = -1
    with pytest.raises(RecordError, match=r"phases\[0\]\.gpus\[0\]\.energy_uj: must be >= 0"):
        parse_record(bad)
    bad = json.loads(json.dumps(s0))
    del bad["gpus"][0]["uuid"]
    with pytest.raises(RecordError, match=r"gpus\[0\]\.uuid: missing"):
        parse_record(bad)


def test_a_version_1_record_keeps_its_digest_and_reads_as_cpu_dram():
    rec = recgen.record(9, "0")
    p1 = parse_record(rec)
    up = dict(rec, version=2)
    up["step"] = dict(rec["step"], total_includes="cpu+dram")
    assert parse_record(up).digest == p1.digest
    assert p1.gpus == [] and p1.phase_gpus == []
