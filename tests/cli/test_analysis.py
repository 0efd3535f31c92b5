"""Tests of joulestep.analysis on small hand-built frames (numbers hand-checked)."""
import math

import numpy as np
import pandas as pd
import pytest

from joulestep import analysis as A

GIB = 1 << 30


def ph(job, strategy, kind, dur_s, cpu_j, dram_j, gib, nranks, node="node01", label="ckpt-1"):
    return {"job_id": job, "tag:strategy": strategy, "kind": kind, "label": label, "node": node,
            "duration_ns": int(dur_s * 1e9), "energy_cpu_uj": int(cpu_j * 1e6),
            "energy_dram_uj": None if dram_j is None else int(dram_j * 1e6),
            "bytes": None if gib is None else int(gib * GIB), "nranks": nranks}


@pytest.fixture
def ckpt():
    rows = [
        # VELOC, 4 ranks x 1 GiB: local 2 s 100+20 J; flush 6 s 150+30 J
        ph(1, "veloc", "checkpoint", 2, 100, 20, 4, 4), ph(1, "veloc", "flush", 6, 150, 30, 4, 4),
        ph(2, "veloc", "checkpoint", 2, 110, 20, 4, 4), ph(2, "veloc", "flush", 6, 170, 30, 4, 4),
        # GenericIO: one synchronous phase, 16 s
        ph(3, "gio", "checkpoint", 16, 800, 100, 4, 4), ph(4, "gio", "checkpoint", 16, 900, 100, 4, 4),
        # VELOC on two nodes, 4 ranks each: node durations 2/3 s and 5/6 s, no DRAM zone
        ph(5, "veloc", "checkpoint", 2, 100, None, 4, 4, "node01"),
        ph(5, "veloc", "checkpoint", 3, 100, None, 4, 4, "node02"),
        ph(5, "veloc", "flush", 5, 50, None, 4, 4, "node01"),
        ph(5, "veloc", "flush", 6, 50, None, 4, 4, "node02"),
        # a phase of another kind is ignored
        ph(5, "veloc", "compute", 100, 9999, 0, None, 8),
    ]
    return pd.DataFrame(rows)


def test_checkpoint_runs(ckpt):
    r = A.checkpoint_runs(ckpt).set_index(["job_id", "part"])
    # job 1 local: 120 J in 2 s of 4 GiB -> 2 GiB/s, 30 J/GiB
    loc = r.loc[(1, "local")]
    assert (loc.energy_cpu_j, loc.energy_dram_j, loc.energy_j) == (100, 20, 120)
    assert loc.throughput_gibs == pytest.approx(2.0)
    assert loc.j_per_gib == pytest.approx(30.0)
    # job 1 flush: 180 J in 6 s -> 4/6 GiB/s, 45 J/GiB
    fl = r.loc[(1, "flush")]
    assert fl.throughput_gibs == pytest.approx(4 / 6)
    assert fl.j_per_gib == pytest.approx(45.0)
    # total until on the PFS: 300 J, 8 s, 4 GiB -> 0.5 GiB/s, 75 J/GiB, 1 GiB/rank
    tot = r.loc[(1, "total")]
    assert (tot.energy_j, tot.duration_s, tot.gib) == (300, 8, 4)
    assert tot.throughput_gibs == pytest.approx(0.5)
    assert tot.j_per_gib == pytest.approx(75.0)
    assert tot.gib_per_rank == pytest.approx(1.0)
    # GenericIO: only a local (direct) part; total = 900 J / 4 GiB in 16 s
    assert (3, "flush") not in r.index
    assert r.loc[(3, "total")].j_per_gib == pytest.approx(225.0)
    assert r.loc[(3, "total")].throughput_gibs == pytest.approx(0.25)
    # two nodes: energies and bytes add, the duration is the slower node's
    j5 = r.loc[(5, "local")]
    assert (j5.energy_j, j5.duration_s, j5.gib, j5.nranks) == (200, 3, 8, 8)
    t5 = r.loc[(5, "total")]
    assert (t5.energy_j, t5.duration_s, t5.gib, t5.gib_per_rank) == (300, 9, 8, 1.0)
    assert t5.energy_dram_j == 0


def test_compare_checkpointing_weak_and_strong(ckpt):
    w = A.compare_checkpointing(ckpt, scaling="weak")
    row = w[(w["tag:strategy"] == "veloc") & (w.part == "total") & (w.nranks == 4)].iloc[0]
    assert row.gib_per_rank == 1.0 and row.runs == 2
    assert row.energy_j == pytest.approx(315.0)            # (300 + 330)/2
    assert row.energy_j_std == pytest.approx(math.sqrt(2 * 15 ** 2))  # 21.213
    assert row.throughput_gibs == pytest.approx(0.5) and row.throughput_gibs_std == 0
    assert row.energy_cpu_j == pytest.approx(265.0)        # (250 + 280)/2
    g = w[(w["tag:strategy"] == "gio") & (w.part == "total")].iloc[0]
    assert (g.energy_j, g.runs) == (950.0, 2)
    assert g.j_per_gib == pytest.approx(237.5)
    # job 5 is its own weak-scaling point at 8 ranks, 1 GiB/rank
    assert w[(w["tag:strategy"] == "veloc") & (w.part == "total")].nranks.tolist() == [4, 8]
    assert list(w.columns[:4]) == ["tag:strategy", "part", "gib_per_rank", "nranks"]
    s = A.compare_checkpointing(ckpt, scaling="strong")
    vt = s[(s["tag:strategy"] == "veloc") & (s.part == "total")]
    assert vt.total_gib.tolist() == [4.0, 8.0]
    with pytest.raises(ValueError, match="allowed 'weak', 'strong'"):
        A.compare_checkpointing(ckpt, scaling="both")


def test_strategy_ratios(ckpt):
    w = A.compare_checkpointing(ckpt)
    r = A.strategy_ratios(w, "tag:strategy", "gio")
    tot = r[(r.part == "total") & (r.nranks == 4)].iloc[0]
    assert tot["tag:strategy"] == "veloc"
    assert tot.energy_j_ratio == pytest.approx(315 / 950)      # ~ a third, as in Wilkins 2022
    assert tot.throughput_gibs_ratio == pytest.approx(0.5 / 0.25)
    assert tot.j_per_gib_ratio == pytest.approx(78.75 / 237.5)
    assert r[(r.part == "total")].shape[0] == 1   # no gio run at 8 ranks to compare with
    with pytest.raises(ValueError, match="baseline 'scr' not among"):
        A.strategy_ratios(w, "tag:strategy", "scr")


def test_checkpoint_errors(ckpt):
    with pytest.raises(ValueError, match="missing column"):
        A.checkpoint_runs(ckpt.drop(columns=["bytes"]))
    with pytest.raises(ValueError, match="no phase of kind"):
        A.checkpoint_runs(ckpt.assign(kind="compute"))


def step(job, approach, node, cpu_j, dram_j, start_s, end_s, step_id="0", usage=None):
    return {"job_id": job, "tag:approach": approach, "node": node, "step_id": step_id,
            "energy_cpu_uj": int(cpu_j * 1e6), "energy_dram_uj": int(dram_j * 1e6),
            "start_ns": int(start_s * 1e9), "end_ns": int(end_s * 1e9),
            "duration_ns": int((end_s - start_s) * 1e9), "cpu_usage": usage}


def test_compare_io_approaches_table2():
    s = pd.DataFrame([
        step(10, "TP", "n1", 900, 100, 0, 100, usage=0.5),
        step(10, "TP", "n2", 1100, 100, 0, 110, usage=0.5),
        step(10, "TP", "n1", 99999, 0, 0, 120, step_id="batch"),   # same packages again
        step(11, "TP", "n1", 1000, 100, 0, 100, usage=0.6),
        step(11, "TP", "n2", 1200, 100, 0, 100, usage=0.6),
        step(12, "DC(1)", "n1", 550, 50, 0, 60, usage=0.9),
        step(12, "DC(1)", "n2", 570, 50, 0, 60, usage=0.9),
    ])
    t = A.compare_io_approaches(s).set_index("tag:approach")
    tp = t.loc["TP"]
    # run 10: 2200 J in 110 s (20 W), nodes 1000/1200; run 11: 2400 J in 100 s (24 W)
    assert tp.runs == 2
    assert tp.energy_j == pytest.approx(2300)
    assert tp.energy_j_std == pytest.approx(math.sqrt(2 * 100 ** 2))
    assert tp.runtime_s == pytest.approx(105)
    assert tp.avg_power_w == pytest.approx(22)
    assert (tp.node_mean_j, tp.node_min_j, tp.node_max_j) == (1150, 1050, 1250)
    assert tp.node_std_j == pytest.approx(math.sqrt(2 * 100 ** 2))  # 141.42 in each run
    assert tp.cpu_usage == pytest.approx(0.55)
    dc = t.loc["DC(1)"]
    assert dc.energy_j == 1220 and dc.avg_power_w == pytest.approx(1220 / 60)
    assert dc.node_std_j == pytest.approx(math.sqrt(2 * 10 ** 2))
    assert math.isnan(dc.energy_j_std)      # a single run has no spread
    assert dc.cpu_usage == pytest.approx(0.9)
    # TP: lowest power per node-second is not the lowest energy (Dorier 2016 finding)
    assert tp.energy_j > dc.energy_j


def ds(job, comp, eb, policy, kind, cpu_j, dram_j=0, dur=10):
    return {"job_id": job, "tag:compressor": comp, "tag:error_bound": eb, "policy": policy,
            "kind": kind, "energy_cpu_uj": int(cpu_j * 1e6), "energy_dram_uj": int(dram_j * 1e6),
            "duration_ns": int(dur * 1e9)}


@pytest.fixture
def dumps():
    return pd.DataFrame([
        ds(20, "sz", "1e-2", "monitor", "compress", 250, 50), ds(20, "sz", "1e-2", "monitor", "write", 200),
        ds(21, "sz", "1e-2", "monitor", "compress", 320), ds(21, "sz", "1e-2", "monitor", "write", 180),
        ds(22, "none", None, "monitor", "write", 1000),
        ds(23, "sz", "1e-2", "io-dvfs", "compress", 260), ds(23, "sz", "1e-2", "io-dvfs", "write", 170),
        ds(24, None, None, "io-dvfs", "write", 900),
        ds(25, "zfp", "1e-3", "monitor", "compress", 400), ds(25, "zfp", "1e-3", "monitor", "write", 300),
    ])


def test_compare_dumps(dumps):
    t = A.compare_dumps(dumps).set_index(["compressor", "error_bound", "policy"])
    sz = t.loc[("sz", "1e-2", "monitor")]
    assert (sz.runs, sz.compress_j, sz.write_j, sz.total_j) == (2, 310, 190, 500)
    assert sz.total_j_std == 0
    assert sz.raw_write_j == 1000 and sz.total_vs_raw == pytest.approx(0.5)
    szp = t.loc[("sz", "1e-2", "io-dvfs")]
    assert szp.total_j == 430 and szp.raw_write_j == 900
    assert szp.total_vs_raw == pytest.approx(430 / 900)
    assert t.loc[("zfp", "1e-3", "monitor")].total_vs_raw == pytest.approx(0.7)
    raw = t.loc[("raw", "-", "monitor")]
    assert (raw.compress_j, raw.write_j, raw.total_vs_raw) == (0, 1000, 1.0)


def test_policy_saving(dumps):
    s = A.policy_saving(A.compare_dumps(dumps), base_policy="monitor").set_index("compressor")
    assert s.loc["sz", "saving_j"] == 70
    assert s.loc["sz", "saving_pct"] == pytest.approx(14.0)      # 1 - 430/500
    assert s.loc["raw", "saving_pct"] == pytest.approx(10.0)     # 1 - 900/1000
    assert "zfp" not in s.index                                   # no io-dvfs run
    with pytest.raises(ValueError, match="base policy 'fixed' not recorded"):
        A.policy_saving(A.compare_dumps(dumps), base_policy="fixed")


def test_compare_dumps_without_policy(dumps):
    t = A.compare_dumps(dumps.drop(columns=["policy"]), policy=None).set_index("compressor")
    # raw write mean over both raw runs: (1000 + 900)/2 = 950
    assert (t["raw_write_j"] == 950).all()
    assert t.loc["sz", "total_j"] == pytest.approx((500 + 500 + 430) / 3)


def test_compare_generic_and_derived():
    s = pd.DataFrame({"policy": ["monitor", "monitor", "io-dvfs", "io-dvfs"],
                      "energy_cpu_uj": [80e6, 180e6, 90e6, 150e6],
                      "energy_dram_uj": [20e6, 20e6, np.nan, 0],
                      "duration_ns": [10e9, 20e9, 11e9, 21e9]})
    d = A.derived(s)
    assert d.energy_j.tolist() == [100, 200, 90, 150]
    assert d.power_w.tolist() == pytest.approx([10, 10, 90 / 11, 150 / 21])
    g = A.compare_generic(s, "policy", baseline="monitor").set_index("policy")
    assert g.loc["monitor", "energy_j"] == 150 and g.loc["monitor", "energy_j_sum"] == 300
    assert g.loc["io-dvfs", "energy_j"] == 120
    assert g.loc["io-dvfs", "energy_j_ratio"] == pytest.approx(0.8)
    assert g.loc["io-dvfs", "duration_s_ratio"] == pytest.approx(16 / 15)
    assert g.loc["monitor", "n"] == 2
    with pytest.raises(ValueError, match="baseline"):
        A.compare_generic(s, "policy", baseline="fixed")


def test_derived_throughput():
    d = A.derived(pd.DataFrame({"energy_cpu_uj": [30e6, 5e6], "duration_ns": [2e9, 1e9],
                                "bytes": [4 * GIB, None]}))
    assert d.throughput_gibs[0] == pytest.approx(2.0)
    assert d.j_per_gib[0] == pytest.approx(7.5)
    assert np.isnan(d.j_per_gib[1]) and np.isnan(d.throughput_gibs[1])


def test_attach_tags():
    jobs = pd.DataFrame({"cluster": ["c", "c", "c"], "job_id": [1, 2, 3],
                         "tags": [{"strategy": "veloc", "tier": "dram"}, '{"strategy": "gio"}', None]})
    steps = pd.DataFrame({"cluster": ["c"] * 4, "job_id": [1, 1, 2, 3], "energy_cpu_uj": [1, 2, 3, 4]})
    out = A.attach_tags(jobs, steps)
    assert out["tag:strategy"].tolist()[:3] == ["veloc", "veloc", "gio"]
    assert pd.isna(out["tag:strategy"][3])
    assert out["tag:tier"].tolist()[:2] == ["dram", "dram"]
    assert out["tag:tier"][2:].isna().all()
    assert len(out) == 4
    with pytest.raises(ValueError, match="not a JSON object"):
        A.attach_tags(jobs.assign(tags=["[1]", None, None]), steps)
    with pytest.raises(ValueError, match="no common key"):
        A.attach_tags(jobs, pd.DataFrame({"x": [1]}))


def test_runs_default_to_job_pk():
    """A recycled job ID (same job_id, another job_pk) is another run."""
    s = pd.DataFrame([step(7, "TP", "n1", 100, 0, 0, 10), step(7, "TP", "n1", 300, 0, 0, 10)])
    assert A.compare_io_approaches(s).loc[0, "runs"] == 1
    t = A.compare_io_approaches(s.assign(job_pk=[1, 2])).iloc[0]
    assert t.runs == 2 and t.energy_j == 200 and t.energy_j_std == pytest.approx(math.sqrt(2e4))
