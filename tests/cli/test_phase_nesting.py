"""Issue 9, defect 2: a phase inside another phase is counted once.

RAPL measures the whole node, so a phase marked inside another (a flush
inside its checkpoint, as the fixture's job 42 does) is part of the
enclosing phase's measurement.  Rule: every joule and second is counted
once; the enclosing phase's figure includes what it encloses; in the
checkpoint comparison "local" and "flush" are the parts and "total" spans
checkpoint start to flush end.

Fixture job 42 (alice), step 0 on node01 (recgen.fixture_records):
  seq 0 compute      1..5 s  40 + 8 J
  seq 1 checkpoint   5..7 s  20 + 4 J = 24 J, 1 GiB
  seq 2   flush      5..6 s   6 + 2 J =  8 J, 1 GiB, parent 1
So: local = 24 - 8 = 16 J (CPU 14, DRAM 2) in 2 - 1 = 1 s; flush 8 J in
1 s; total 24 J in 2 s, 1 GiB -> 0.5 GiB/s and 24 J/GiB.  The phases of the
step add up to 48 + 24 = 72 J in 4 + 2 = 6 s (not 80 J in 7 s).
"""
import csv
import io

import pandas as pd
import pytest

from conftest import jrun
from joulestep import analysis as A
from joulestep import nesting
from recgen import GIB, T0

ALICE = ["--first-seen", T0]
S = 1_000_000_000


def approx(x):
    return pytest.approx(x, rel=1e-9)


def test_compare_checkpoint_counts_the_nested_flush_once(loaded):
    doc = jrun(loaded, "compare", "--by", "tag:strategy", "--what", "checkpoint",
               "--where", "strategy=veloc")
    t = {r["part"]: r for r in doc["table"]}
    assert t["local"]["energy_j"] == approx(16)
    assert t["local"]["energy_cpu_j"] == approx(14)
    assert t["local"]["energy_dram_j"] == approx(2)
    assert t["local"]["duration_s"] == approx(1)
    assert t["flush"]["energy_j"] == approx(8) and t["flush"]["duration_s"] == approx(1)
    tot = t["total"]
    assert tot["energy_j"] == approx(24) and tot["duration_s"] == approx(2)
    assert tot["throughput_gibs"] == approx(0.5) and tot["j_per_gib"] == approx(24)


def test_compare_phases_sums_count_nested_phases_once(loaded):
    doc = jrun(loaded, "compare", "--by", "tag:strategy", "--what", "phases",
               "--where", "strategy=veloc")
    (row,) = doc["table"]
    assert row["energy_j_sum"] == approx(72) and row["duration_s_sum"] == approx(6)
    assert row["n"] == 3
    # the mean counts the nested flush once too, as the sum does: each
    # phase's own part, 48, 24 - 8 and 8 J (it took 48, 24, 8 J: 80 J / 3,
    # a mean times n that was not the sum)
    assert row["energy_j"] == approx((48 + 16 + 8) / 3)
    assert row["energy_j"] * row["n"] == approx(row["energy_j_sum"])
    assert row["duration_s"] == approx((4 + 1 + 1) / 3)
    assert row["energy_j_std"] == approx(pd.Series([48.0, 16.0, 8.0]).std())


def test_export_phases_full_has_counted_figures(loaded):
    rows = list(csv.DictReader(io.StringIO(loaded(
        "export", "phases_full", "--format", "csv").stdout)))
    mine = {r["seq"]: r for r in rows if r["job_id"] == "42" and r["node"] == "node01"}
    assert int(mine["1"]["energy_cpu_uj"]) == 20_000_000            # measured
    assert int(mine["1"]["counted_cpu_uj"]) == 14_000_000           # 20 - 6
    assert int(mine["1"]["counted_dram_uj"]) == 2_000_000           # 4 - 2
    assert int(mine["1"]["counted_total_uj"]) == 16_000_000
    assert int(mine["1"]["counted_duration_ns"]) == 1 * S
    assert int(mine["2"]["counted_total_uj"]) == 8_000_000
    assert int(mine["0"]["counted_total_uj"]) == 48_000_000
    total = sum(int(r["counted_total_uj"]) for r in mine.values())
    assert total == 72_000_000


def test_job_shows_phase_counted_figures(loaded):
    s = jrun(loaded, "job", 42, *ALICE)
    ph = {p["seq"]: p for p in s["steps"][0]["phases"]}
    assert ph[1]["energy_total_j"] == 24                   # its measurement
    assert ph[1]["counted_energy_total_j"] == approx(16)
    assert ph[1]["counted_energy_cpu_j"] == approx(14)
    assert ph[2]["counted_energy_total_j"] == approx(8)
    assert ph[0]["counted_energy_total_j"] == approx(48)
    flat = " ".join(loaded("job", 42, *ALICE).stdout.split())
    assert "inside checkpoint:ckpt-1 (seq 1)" in flat


def _p(run, node, seq, kind, t0, t1, cpu, dram, parent=None, label="c1", gib=None,
       strategy="veloc"):
    return {"job_id": run, "tag:strategy": strategy, "node": node, "step_id": "0",
            "seq": seq, "parent_seq": parent, "kind": kind, "label": label,
            "start_ns": int(t0 * S), "end_ns": int(t1 * S),
            "duration_ns": int((t1 - t0) * S), "energy_cpu_uj": int(cpu * 1e6),
            "energy_dram_uj": int(dram * 1e6),
            "bytes": None if gib is None else int(gib * GIB), "nranks": 2}


def test_checkpoint_runs_nested_on_two_nodes():
    """node01: checkpoint 0..3 s 24+6 J (2 GiB) holds a compress phase
    (0..0.5 s, 4 J: not a part, so it stays in local) and a flush 2..3 s
    8+2 J.  node02: checkpoint 0..3.5 s 16+4 J holds a flush 2.5..3.5 s
    5+1 J.  local = (30 - 10) + (20 - 6) = 34 J, duration the slower node's
    max(3 - 1, 3.5 - 1) = 2.5 s; flush = 10 + 6 = 16 J in 1 s; total = 30 +
    20 = 50 J over the slower node's span 3.5 s, 4 GiB."""
    df = pd.DataFrame([
        _p(1, "node01", 0, "checkpoint", 0, 3, 24, 6, gib=2),
        _p(1, "node01", 1, "compress", 0, 0.5, 3, 1, parent=0),
        _p(1, "node01", 2, "flush", 2, 3, 8, 2, parent=0, gib=2),
        _p(1, "node02", 0, "checkpoint", 0, 3.5, 16, 4, gib=2),
        _p(1, "node02", 1, "flush", 2.5, 3.5, 5, 1, parent=0, gib=2),
    ])
    r = A.checkpoint_runs(df).set_index("part")
    assert r.loc["local", "energy_j"] == approx(34)
    assert r.loc["local", "energy_cpu_j"] == approx(24 - 8 + 16 - 5)
    assert r.loc["local", "duration_s"] == approx(2.5)
    assert r.loc["flush", "energy_j"] == approx(16)
    assert r.loc["flush", "duration_s"] == approx(1)
    assert r.loc["total", "energy_j"] == approx(50)
    assert r.loc["total", "duration_s"] == approx(3.5)
    assert r.loc["total", "gib"] == approx(4)
    assert r.loc["total", "throughput_gibs"] == approx(4 / 3.5)


def test_checkpoint_total_spans_start_to_flush_end():
    """Sequential (not nested) phases with a 1 s gap: checkpoint 0..2 s,
    flush 3..4 s.  The total spans 0..4 s = 4 s; energies add (12 + 6 J;
    the gap's energy belongs to neither)."""
    df = pd.DataFrame([_p(1, "node01", 0, "checkpoint", 0, 2, 10, 2, gib=1),
                       _p(1, "node01", 1, "flush", 3, 4, 5, 1, gib=1)])
    r = A.checkpoint_runs(df).set_index("part")
    assert r.loc["total", "duration_s"] == approx(4)
    assert r.loc["total", "energy_j"] == approx(18)
    assert r.loc["local", "duration_s"] == approx(2)


def test_compare_dumps_nested_write_counted_once():
    """A write phase (10 J) marked inside the compress phase (30 J) of the
    same dump: compress 20 J, write 10 J, total 30 J (not 40); a raw dump
    writes 25 J."""
    rows = [dict(_p(1, "node01", 0, "compress", 0, 3, 25, 5, label=None),
                 **{"tag:compressor": "sz", "tag:error_bound": "1e-3"}),
            dict(_p(1, "node01", 1, "write", 2, 3, 8, 2, parent=0, label=None),
                 **{"tag:compressor": "sz", "tag:error_bound": "1e-3"}),
            dict(_p(2, "node01", 0, "write", 0, 2, 20, 5, label=None),
                 **{"tag:compressor": "none", "tag:error_bound": None})]
    t = A.compare_dumps(pd.DataFrame(rows), policy=None).set_index("compressor")
    assert t.loc["sz", "compress_j"] == approx(20)
    assert t.loc["sz", "write_j"] == approx(10)
    assert t.loc["sz", "total_j"] == approx(30)
    assert t.loc["sz", "duration_s"] == approx(3)
    assert t.loc["sz", "total_vs_raw"] == approx(30 / 25)


def test_exclusive_with_explicit_parents():
    """nesting.exclusive: the step rule (own minus what is inside, when it
    fits) on an explicit tree: A (100 J, 10 s) holds B (30 J, 4 s), which
    holds C (10 J, 1 s); D (5 J) has a parent that points at itself and
    E/F point at each other (malformed): treated as outermost."""
    P = nesting.Step
    items = [P("A", "A", 0, 0, 0, 10 * S, 80, 20, 100), P("B", "B", 0, 0, 0, 4 * S, 20, 10, 30),
             P("C", "C", 0, 0, 0, 1 * S, 10, None, 10), P("D", "D", 0, 0, 0, S, 5, 0, 5),
             P("E", "E", 0, 0, 0, S, 1, 0, 1), P("F", "F", 0, 0, 0, S, 2, 0, 2)]
    c = nesting.exclusive(items, {"A": None, "B": "A", "C": "B", "D": "D",
                                  "E": "F", "F": "E"})
    assert (c["A"].total_uj, c["A"].duration_ns) == (70, 6 * S)
    assert (c["B"].cpu_uj, c["B"].dram_uj, c["B"].total_uj) == (10, 10, 20)
    assert c["B"].duration_ns == 3 * S
    assert (c["C"].total_uj, c["C"].dram_uj) == (10, None)
    assert c["D"].total_uj == 5 and c["E"].total_uj == 1 and c["F"].total_uj == 2
    assert sum(x.total_uj for x in c.values()) == 100 + 5 + 1 + 2
