"""The auto policy on the live cluster (docs/admin-guide.md, "The auto policy"): the
plugin applies the step's app's map from the admin's auto= file, read at each step
start; an app the file does not list runs the file's default map; a job without an
app tag runs as io-dvfs and says why; baseline jobs run settled kinds at fmax; the
records ingest, and the learner sees each phase at the ratio it ran at."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

from nodeenv import NodeEnv
from procs import expand_cpus, freq_lines

pytestmark = pytest.mark.cluster

FMAX = 4000000   # every ratio used here is a whole 100 MHz step of it
FMIN = 800000
GOV = "schedutil"
REPO = pathlib.Path(__file__).resolve().parents[2]


class AutoEnv(NodeEnv):
    def __init__(self, cluster, build):
        super().__init__(cluster, build, "jsauto", FMAX, FMIN)
        self.auto = self.root / "auto.json"
        self.write_file({"default": {}})
        self.configure()
        self.c.restart_slurmd()  # the plugin's job prolog gives steps their trusted fields
        self.snapshot_clocks()

    def configure(self, **extra):
        super().configure(auto=self.auto, **extra)

    def write_file(self, doc, owner=0, mode=0o644):
        """The admin's file: root-owned, written as the learner writes it (rename)."""
        doc = {"format": "joulestep-auto", "version": 1, "baseline_every": 1000000, **doc}
        tmp = self.root / ".auto.json.tmp"
        tmp.write_text(json.dumps(doc))
        os.chown(tmp, owner, owner)
        os.chmod(tmp, mode)
        os.rename(tmp, self.auto)

    def close(self):
        super().close()
        self.c.write_plugstack(None)
        self.c.restart_slurmd()


@pytest.fixture(scope="module")
def env(cluster, build_dir):
    e = AutoEnv(cluster, build_dir)
    try:
        yield e
    finally:
        e.close()


@pytest.fixture
def plug(env):
    env.configure()
    env.c.wait_idle()
    yield env


def khz(r):
    return int(round(r * FMAX))


def script(plug, tag=None):
    opt = f"#SBATCH --energy-tag=app={tag}\n" if tag else ""
    return f"""#!/bin/sh
#SBATCH -n1
#SBATCH --energy-policy=auto
{opt}{plug.cat_freq("before")}
{plug.phase("begin", "compress")}
{plug.cat_freq("compress")}
{plug.adv("compress", 1)}
{plug.phase("end")}
{plug.phase("begin", "write")}
{plug.cat_freq("write")}
{plug.adv("write", 1)}
{plug.phase("end", "--bytes", 1 << 30)}
{plug.phase("begin", "checkpoint")}
{plug.cat_freq("ckpt")}
{plug.phase("end")}
"""


def run(plug, tag):
    job, out = plug.run_job(script(plug, tag))
    rec = plug.wait_records(job, ["batch"])["batch"]
    fl = freq_lines(out)
    cpus = expand_cpus(rec["step"]["cpus"])
    clocks = {k: {fl[k][c] for c in cpus} for k in ("before", "compress", "write", "ckpt")}
    return job, rec, clocks


def test_two_files_apply_their_ratios_and_an_unlisted_app_uses_the_default(plug, tmp_path):
    default = {"write": 0.85, "compress": 0.875}
    maps = [{"compress": (0.75, "settled"), "write": (0.5, "exploring")},
            {"compress": (0.9, "settled"), "write": (0.6, "guarded")}]
    digests, jobs = [], []
    for m in maps:
        plug.write_file({"default": default, "apps": {"vpic": {"phases": {
            k: {"ratio": r, "state": s} for k, (r, s) in m.items()}}}})
        job, rec, clocks = run(plug, "vpic")
        jobs.append(job)
        for k, (r, _) in m.items():
            assert clocks[k] == {(GOV, str(khz(r)))}, (k, clocks)
        assert clocks["ckpt"] == {(GOV, str(FMAX))}  # a kind in no map: inherits
        st, prov = rec["step"], rec["provenance"]
        assert st["policy"] == "auto" and st["policy_app"] == "vpic" and st["policy_app_listed"]
        assert st["policy_map"] == pytest.approx({k: r for k, (r, _) in m.items()})
        assert st["policy_states"] == {k: s for k, (_, s) in m.items()}
        assert st["policy_baseline"] is False
        assert st["fmax_khz"] == FMAX
        ph = {p["kind"]: p for p in rec["phases"]}
        for k, (r, _) in m.items():
            assert ph[k]["freq_khz"] == khz(r)
        assert prov["auto_file"] == str(plug.auto) and prov["errors"] == []
        digests.append(prov["auto_file_digest"])
    assert digests[0] != digests[1] and all(d.startswith("fnv1a64:") for d in digests)

    # an app the file does not list: the default map, and the record says so
    job, rec, clocks = run(plug, "lammps")
    jobs.append(job)
    assert clocks["compress"] == {(GOV, str(khz(0.875)))}
    assert clocks["write"] == {(GOV, str(khz(0.85)))}
    assert rec["step"]["policy_app_listed"] is False
    assert rec["step"]["policy_states"] == {"write": "default", "compress": "default"}
    plug.c.wait_idle()
    plug.assert_restored()

    # the records ingest, and the learner sees each phase at the ratio it ran at
    db = tmp_path / "js.db"
    cli = [str(REPO / ".venv" / "bin" / "joulestep"), "--db", str(db)]
    subprocess.run(cli + ["ingest", str(plug.spool)], check=True, capture_output=True)
    res = subprocess.run(cli + ["policy", "show", "--app", "vpic", "--ratios", "1,0.9,0.75,0.6,0.5",
                                "--format", "json"], capture_output=True, text=True, check=True)
    kinds = {k["kind"]: k for k in json.loads(res.stdout)["kinds"]}
    seen = {k: {r["ratio"] for r in v["ratios"] if r["samples"]} for k, v in kinds.items()}
    assert seen["compress"] == {0.75, 0.9} and seen["write"] == {0.5, 0.6}
    assert kinds["write"]["unit"] == "GiB"


def test_baseline_jobs_run_settled_kinds_at_fmax(plug):
    plug.write_file({"baseline_every": 1, "default": {}, "apps": {"vpic": {"phases": {
        "compress": {"ratio": 0.75, "state": "settled"},
        "write": {"ratio": 0.5, "state": "exploring"}}}}})
    _, rec, clocks = run(plug, "vpic")
    assert clocks["compress"] == {(GOV, str(FMAX))}       # settled: the baseline run
    assert clocks["write"] == {(GOV, str(khz(0.5)))}      # still exploring: its try
    assert rec["step"]["policy_baseline"] is True
    assert rec["step"]["policy_map"] == pytest.approx({"compress": 1.0, "write": 0.5})


def test_without_an_app_tag_auto_runs_as_io_dvfs_and_says_why(plug):
    plug.write_file({"default": {"write": 0.6}})
    _, rec, clocks = run(plug, None)
    assert clocks["write"] == {(GOV, str(khz(0.85)))}     # io-dvfs's, not the file's
    assert clocks["compress"] == {(GOV, str(khz(0.875)))}
    assert rec["step"]["policy"] == "io-dvfs"
    errs = rec["provenance"]["errors"]
    assert len(errs) == 1 and "auto needs --energy-tag=app=NAME" in errs[0], errs
    assert "runs as io-dvfs" in errs[0]


def test_an_auto_file_a_user_controls_means_monitor(plug):
    plug.write_file({"default": {"write": 0.6}}, mode=0o666)
    try:
        _, rec, clocks = run(plug, "vpic")
    finally:
        plug.write_file({"default": {}})
    assert clocks["write"] == clocks["compress"] == clocks["before"]
    assert rec["step"]["policy"] == "monitor"
    errs = rec["provenance"]["errors"]
    assert len(errs) == 1 and "writable by root only" in errs[0] and "runs as monitor" in errs[0]
    assert rec["step"]["exit_code"] == 0
