"""GPU energy in `compare --what checkpoint/dump/phases` (issue 26): a GPU
column beside the CPU + DRAM figures wherever the phases' steps had GPUs,
counted once for nested phases (a flush inside its checkpoint), NaN (never
0) for a run with a GPU that has no figure, and a header that says what each
figure includes.  The truths are computed here from the records' numbers."""
from __future__ import annotations

import math

import pytest

import recgen
from conftest import jrun
from recgen import GIB, J, phase, record
from test_gpu_sums import gpus


def gphase(p, energies_j, uuid_of):
    """Phase p with its GPUs' energies (None: no figure, split by MIG)."""
    p["gpus"] = [{"uuid": uuid_of(i), "energy_uj": None if e is None else int(e * J),
                  "reason": "split by MIG: no per-job counter" if e is None else None,
                  "integrated": False} for i, e in enumerate(energies_j)]
    p["energy_gpu_uj"] = None if None in energies_j else sum(
        g["energy_uj"] for g in p["gpus"])
    return p


def rec(job, tags, phases, step_gpus_j):
    """A step whose phases are (phase, [GPU J]) pairs; step_gpus_j: the step's
    GPUs (None: split by MIG); () for a step without GPUs."""
    uuid = lambda i: f"GPU-{job}-{i}"      # noqa: E731
    ph = [gphase(p, g, uuid) if step_gpus_j else p
          for p, g in recgen.shifted(phases, job - 1)]
    r = record(job, "0", f"gn{job}", start_s=job, submit_s=job, dur_s=10, cpu_j=100,
               dram_j=10, tags=tags, phases=ph)
    return gpus(r, list(step_gpus_j)) if step_gpus_j else r


# checkpoint (12 J CPU + DRAM, 50 J GPU) with a flush inside it (5 J, 20 J GPU)
CKPT = dict(cpu=10, dram=2, gpu=50)
FLUSH = dict(cpu=4, dram=1, gpu=20)


def ckpt_phases(gpu_ckpt, gpu_flush):
    return [(phase(0, "checkpoint", 1, 4, CKPT["cpu"], CKPT["dram"], nbytes=GIB,
                   nranks=1, label="c1"), [gpu_ckpt]),
            (phase(1, "flush", 2, 2, FLUSH["cpu"], FLUSH["dram"], nbytes=GIB, nranks=1,
                   label="c1", depth=1, parent=0), [gpu_flush])]


CKPT_RECORDS = [
    rec(21, {"strategy": "gpu"}, ckpt_phases(CKPT["gpu"], FLUSH["gpu"]), (60,)),
    rec(22, {"strategy": "mig"}, ckpt_phases(None, None), (None,)),
    rec(23, {"strategy": "cpu"}, ckpt_phases(None, None), ()),
]


@pytest.fixture
def ckpt(run, tmp_path):
    for r in CKPT_RECORDS:
        recgen.write(tmp_path / "spool", r)
    run("ingest", tmp_path / "spool")
    return run


def nan(v):
    return v is None or math.isnan(v)


def test_checkpoint_comparison_shows_the_gpus_counted_once(ckpt):
    r = jrun(ckpt, "compare", "--by", "tag:strategy", "--what", "checkpoint")
    rows = {(x["tag:strategy"], x["part"]): x for x in r["table"]}
    own = lambda d: d["cpu"] + d["dram"]    # noqa: E731
    for strat in ("gpu", "mig", "cpu"):     # CPU + DRAM: the flush counted once
        assert rows[(strat, "local")]["energy_j"] == pytest.approx(own(CKPT) - own(FLUSH))
        assert rows[(strat, "flush")]["energy_j"] == pytest.approx(own(FLUSH))
        assert rows[(strat, "total")]["energy_j"] == pytest.approx(own(CKPT))
    assert rows[("gpu", "local")]["gpu_j"] == pytest.approx(CKPT["gpu"] - FLUSH["gpu"])
    assert rows[("gpu", "flush")]["gpu_j"] == pytest.approx(FLUSH["gpu"])
    assert rows[("gpu", "total")]["gpu_j"] == pytest.approx(CKPT["gpu"])
    for part in ("local", "flush", "total"):
        assert nan(rows[("mig", part)]["gpu_j"]), part      # no figure, never 0
        assert rows[("cpu", part)]["gpu_j"] == 0            # no GPUs at all
    text = ckpt("compare", "--by", "tag:strategy", "--what", "checkpoint").stdout
    head = " ".join(text.split())
    assert "energy_j is CPU + DRAM; gpu_j the GPUs'" in head, text
    assert "GPU_J" in text.splitlines()[1].split(), text


def test_checkpoint_comparison_without_gpus_has_no_gpu_column(run, tmp_path):
    recgen.write(tmp_path / "spool", CKPT_RECORDS[2])
    run("ingest", tmp_path / "spool")
    r = jrun(run, "compare", "--by", "tag:strategy", "--what", "checkpoint")
    assert all("gpu_j" not in x for x in r["table"])
    assert "gpu_j" not in run("compare", "--by", "tag:strategy", "--what",
                              "checkpoint").stdout


def test_phases_comparison_sums_the_gpus_once(ckpt):
    r = jrun(ckpt, "compare", "--by", "tag:strategy", "--what", "phases")
    rows = {x["tag:strategy"]: x for x in r["table"]}
    # counted: the checkpoint's GPU less the flush's, plus the flush's
    assert rows["gpu"]["gpu_j_sum"] == pytest.approx(CKPT["gpu"])
    # the mean counts the nested flush once too (mean x n = the sum)
    assert rows["gpu"]["gpu_j"] == pytest.approx(CKPT["gpu"] / 2)
    assert rows["gpu"]["energy_j_sum"] == pytest.approx(CKPT["cpu"] + CKPT["dram"])
    assert nan(rows["mig"]["gpu_j_sum"]) and nan(rows["mig"]["gpu_j"])
    assert rows["cpu"]["gpu_j_sum"] == 0
    text = ckpt("compare", "--by", "tag:strategy", "--what", "phases").stdout
    assert "CPU + DRAM; gpu_j the GPUs'" in " ".join(text.split()), text


def test_dump_comparison_shows_the_gpus_of_compress_and_write(run, tmp_path):
    # (compressor, error bound, [(kind, CPU J, GPU J)], the step's GPUs)
    runs = [(31, "sz", "1e-3", [("compress", 30, 15), ("write", 10, 5)], (40,)),
            (32, "raw", None, [("write", 40, 8)], (40,)),
            (33, "zfp", "1e-3", [("compress", 20, None), ("write", 8, None)], (None,))]
    for job, comp, eb, phs, sg in runs:
        tags = {"compressor": comp, **({"error_bound": eb} if eb else {})}
        ph = [(phase(i, kind, 1 + i, 1, cpu, 0, nbytes=GIB), [g])
              for i, (kind, cpu, g) in enumerate(phs)]
        recgen.write(tmp_path / "spool", rec(job, tags, ph, sg))
    run("ingest", tmp_path / "spool")
    r = jrun(run, "compare", "--by", "tag:compressor", "--what", "dump")
    rows = {x["compressor"]: x for x in r["table"]}
    assert rows["sz"]["total_j"] == pytest.approx(30 + 10)
    assert rows["sz"]["gpu_j"] == pytest.approx(15 + 5)
    assert rows["raw"]["gpu_j"] == pytest.approx(8)
    assert nan(rows["zfp"]["gpu_j"])
    text = run("compare", "--by", "tag:compressor", "--what", "dump").stdout
    assert "total_j are CPU + DRAM; gpu_j the GPUs'" in " ".join(text.split()), text


def test_steps_comparison_sums_the_gpus_once(run, tmp_path):
    """test_gpu_sums's records: job 9's batch step measured its GPU (400 J)
    with step 0 (100 J) inside it, so the sum counts 400 J, not 500 J."""
    from test_gpu_sums import RECORDS
    for r in RECORDS:
        recgen.write(tmp_path / "spool", r)
    run("ingest", tmp_path / "spool")
    r = jrun(run, "compare", "--by", "tag:approach", "--what", "steps")
    rows = {x["tag:approach"]: x for x in r["table"]}
    gpu_j = {a: [(s["step"].get("energy_gpu_uj") or 0) / J for s in RECORDS
                 if s["job"]["tags"]["approach"] == a] for a in "abcd"}
    assert rows["b"]["gpu_j_sum"] == pytest.approx(max(gpu_j["b"]))     # the batch step's
    assert rows["b"]["gpu_j"] == pytest.approx(max(gpu_j["b"]) / 2)     # counted once
    assert nan(rows["a"]["gpu_j_sum"])          # a GPU split by MIG: no figure
    assert rows["c"]["gpu_j_sum"] == 0          # no GPUs
    assert rows["d"]["gpu_j_sum"] == pytest.approx(sum(gpu_j["d"]))
    text = run("compare", "--by", "tag:approach", "--what", "steps").stdout
    assert "CPU + DRAM; gpu_j the GPUs'" in " ".join(text.split()), text
