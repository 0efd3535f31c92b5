"""Multi-node steps on a live two-node cluster: one record per (job, step, node).

The cluster runs two slurmd on this host (harness `Cluster(..., nodes=2)`: node1 and
node2, one CPU each). Each node has its own fake RAPL/cpufreq tree (manual mode),
its own frequency journal and socket directory: plugstack.conf is shared by both
slurmd, so the plugin is given `sysfs=.../hw/%n state=.../state/%n socket_dir=.../sock/%n`
and expands %n to the node name. Every task advances its own node's fake hardware
(`fakehw.py ctl .../<node>.ctl advance S`) and prints the reply tagged with the step
and node ("ADV <step>@<node> <json>"), so each node's ground truth is known and the
two nodes are advanced by different amounts (node2 twice node1) to catch swapped records.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import sqlite3
import subprocess
import time

import pytest

import fakehw
import spool
from harness import Cluster, make_workdir
from test_plugin import adv_truth, close, freq_lines

pytestmark = pytest.mark.cluster

FMAX = 4000000
FMIN = 800000
USER = "jsuser"
NODES = ("node1", "node2")
SECONDS = {"node1": 1, "node2": 2}  # how far each node's hardware is advanced per ADV


class MultiNode:
    def __init__(self, cluster: Cluster, repo: pathlib.Path, build: pathlib.Path):
        self.c = cluster
        self.repo = repo
        self.root = cluster.workdir / "jsplug"
        self.root.mkdir(mode=0o755, exist_ok=True)
        os.chmod(self.root, 0o755)
        (self.root / "hw").mkdir(mode=0o755, exist_ok=True)
        self.hw = {n: self.root / "hw" / n for n in NODES}
        self.ctl = {n: self.root / f"{n}.ctl" for n in NODES}
        self.servers = []
        for n in NODES:
            fakehw.create(str(self.hw[n]), packages=1, cpus_per_package=cluster.cpus,
                          fmax_khz=FMAX, fmin_khz=FMIN)
            self.servers.append(fakehw.serve_background(str(self.hw[n]), manual=True,
                                                        ctl=str(self.ctl[n])))
        self.spool = self.root / "spool"
        self.fakehw_py = cluster.public_path(repo / "tests" / "fakehw" / "fakehw.py")
        self.build = cluster.public_path(build)
        self.so = build / "spank" / "joulestep.so"
        self.c.write_plugstack(self.so, {
            "spool": self.spool, "state": self.root / "state" / "%n",
            "sysfs": self.root / "hw" / "%n", "socket_dir": self.root / "sock" / "%n",
            "backend": "sysfs", "sample_ms": 200})
        self.c.restart_slurmd()  # slurmd looks for plugins' job epilogs only at start
        self.orig = {n: fakehw.read_cpufreq(str(self.hw[n]), 0) for n in NODES}

    def close(self):
        for s in self.servers:
            s.terminate()
            s.wait(10)

    def adv(self, step: str) -> str:
        """Shell line for a task: advance this node's hardware (node1 1 s, node2 2 s) and
        print the reply tagged <step>@<node>. Runs in the task, where slurmstepd has set
        SLURMD_NODENAME to the task's node."""
        secs = " ".join(f"{n}) S={s};;" for n, s in SECONDS.items())
        return (f'case $SLURMD_NODENAME in {secs} *) S=0;; esac; '
                f'echo "ADV {step}@$SLURMD_NODENAME $(python3 {self.fakehw_py} ctl '
                f'{self.root}/$SLURMD_NODENAME.ctl advance $S --util 1 | tr -d "\\n")"')

    def cat_freq(self, tag: str) -> str:
        hw = f"{self.root}/hw/$SLURMD_NODENAME/devices/system/cpu/cpu0/cpufreq"
        return (f'echo "FREQ {tag}@$SLURMD_NODENAME 0 $(cat {hw}/scaling_governor) '
                f'$(cat {hw}/scaling_max_freq)"')

    def phase(self, *args) -> str:
        return f"{self.build}/bin/joulestep-phase " + " ".join(str(a) for a in args)

    def records(self, job) -> dict:
        """(step_id, node) -> record."""
        return spool.records(self.spool, job, by_node=True)

    def wait_records(self, job, keys, timeout=20) -> dict:
        return spool.wait_records(self.spool, job, keys, self.c.logs, timeout, by_node=True)

    def assert_restored(self):
        for n in NODES:
            now = fakehw.read_cpufreq(str(self.hw[n]), 0)
            for k in ("scaling_governor", "scaling_max_freq", "scaling_min_freq", "effective_khz"):
                assert now[k] == self.orig[n][k], (n, k, now[k], self.orig[n][k])


@pytest.fixture(scope="module")
def mn(request, cluster_users, repo, build_dir):
    workdir = make_workdir("pytest-mn-")
    c = Cluster(workdir, nodes=2, cpus=1)
    failed_before = request.session.testsfailed
    env = None
    try:
        c.start()
        env = MultiNode(c, repo, build_dir)
        yield env
    finally:
        if env:
            env.close()
        c.stop()
        if request.session.testsfailed == failed_before and not os.environ.get("JOULESTEP_KEEP_CLUSTER"):
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"\n[multinode cluster] logs kept in {workdir}/log")


@pytest.fixture
def plug(mn):
    mn.c.wait_idle()
    yield mn
    mn.c.wait_idle()
    mn.assert_restored()


def _check_common(rec, job, step, node):
    assert rec["cluster"] == "jstest"
    assert rec["job"]["job_id"] == int(job) and rec["job"]["user"] == USER
    assert rec["step"]["step_id"] == step and rec["step"]["node"] == node
    assert rec["provenance"]["backend"] == "sysfs"
    assert rec["provenance"]["errors"] == []
    assert rec["step"]["exit_code"] == 0
    assert rec["step"]["energy_total_uj"] == rec["step"]["energy_cpu_uj"] + rec["step"]["energy_dram_uj"]


def _check_energy(rec, truth, tag):
    assert tag in truth, (tag, truth)
    assert close(rec["step"]["energy_cpu_uj"], truth[tag][0]), (tag, rec["step"], truth[tag])
    assert close(rec["step"]["energy_dram_uj"], truth[tag][1]), (tag, rec["step"], truth[tag])


def test_cluster_has_two_nodes(mn):
    res = mn.c.srun(["-N2", "-n2", "sh", "-c", "echo NODE $SLURMD_NODENAME"], user=USER)
    assert res.returncode == 0, res.stderr
    assert sorted(re.findall(r"^NODE (\S+)$", res.stdout, re.M)) == list(NODES)


def test_srun_two_nodes_one_record_per_node(plug):
    res = plug.c.srun(["-N2", "-n2", "--energy-tag=run=mn", "sh", "-c",
                       f'echo "JOB $SLURM_JOB_ID"; {plug.adv("0")}'], user=USER)
    assert res.returncode == 0, res.stderr
    job = re.search(r"^JOB (\d+)$", res.stdout, re.M).group(1)
    truth = adv_truth(res.stdout)
    recs = plug.wait_records(job, [("0", n) for n in NODES])
    assert set(recs) == {("0", n) for n in NODES}
    for n in NODES:
        r = recs[("0", n)]
        _check_common(r, job, "0", n)
        assert r["step"]["nnodes"] == 2
        assert r["job"]["tags"] == {"run": "mn"}
        _check_energy(r, truth, f"0@{n}")
    # node2 was advanced twice as far as node1: the records are not swapped or shared
    e1, e2 = (recs[("0", n)]["step"]["energy_cpu_uj"] for n in NODES)
    assert close(e2, 2 * e1, 0.01)
    # each node's job prolog saw the job (ingest groups the nodes' records by time)
    for n in NODES:
        r = recs[("0", n)]
        assert r["provenance"]["job_source"] == "prolog"
        assert r["job"]["first_seen_ns"] <= r["step"]["start_ns"]
    seen = [recs[("0", n)]["job"]["first_seen_ns"] for n in NODES]
    assert abs(seen[0] - seen[1]) < 60 * 10**9
    # %n was expanded, never used literally
    for d in ("state", "sock"):
        assert not (plug.root / d / "%n").exists()
        assert sorted(p.name for p in (plug.root / d).iterdir()) == list(NODES)


def _cli(repo, *args):
    res = subprocess.run([str(repo / ".venv" / "bin" / "joulestep"), *map(str, args)],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def test_batch_job_on_two_nodes_records_ingest(plug, tmp_path):
    script = f"""#!/bin/sh
#SBATCH -N2 -n2
#SBATCH --energy-tag=strategy=mn
{plug.adv("batch")}
srun -N2 -n2 -o mn-%j-%s-%t.out sh -c '{plug.adv("0")}'
srun -N2 -n2 -o mn-%j-%s-%t.out --energy-policy=io-dvfs sh -c '{plug.phase("begin", "write")}; {plug.cat_freq("write")}; {plug.adv("1")}; {plug.phase("end", "--bytes", 100)}; {plug.cat_freq("after")}'
cat mn-$SLURM_JOB_ID-*.out
"""  # (one output file per step and task: two nodes appending to one file interleave bytes; %N would be the host name, the same for both)
    res, job = plug.c.sbatch(script, user=USER)
    assert res.returncode == 0 and job, res.stderr
    st = plug.c.wait_job(job, 120)
    out = plug.c.job_output(job)
    assert st == "COMPLETED", f"{st}\n{out}\n{plug.c.logs()}"
    truth = adv_truth(out)
    want = [("batch", "node1")] + [(s, n) for s in ("0", "1") for n in NODES]
    recs = plug.wait_records(job, want)
    assert set(recs) == set(want)  # the batch step runs on the first node only
    for (step, node), r in recs.items():
        _check_common(r, job, step, node)
        assert r["job"]["tags"] == {"strategy": "mn"}
        if step != "batch":
            assert r["step"]["nnodes"] == 2
            _check_energy(r, truth, f"{step}@{node}")
    # the batch step measured everything node1 did, its srun tasks included
    b = recs[("batch", "node1")]["step"]
    n1 = [t for t in truth if t.endswith("@node1")]
    assert close(b["energy_cpu_uj"], sum(truth[t][0] for t in n1))
    assert close(b["energy_dram_uj"], sum(truth[t][1] for t in n1))
    assert "batch@node1" in truth and "batch@node2" not in truth
    # io-dvfs on both nodes, each on its own hardware; restored afterwards (plug fixture)
    fl = freq_lines(out)
    for n in NODES:
        # clocks are capped (scaling_max_freq), the governor never changes
        assert fl[f"write@{n}"][0] == ("schedutil", str(int(0.85 * FMAX)))
        assert fl[f"after@{n}"][0] == ("schedutil", str(FMAX))
        ph = recs[("1", n)]["phases"]
        assert [(p["kind"], p["freq_khz"], p["bytes"]) for p in ph] == [("write", int(0.85 * FMAX), 100)]
        assert close(ph[0]["energy_cpu_uj"], truth[f"1@{n}"][0])
    # the job epilog ran on both nodes with its own state directory
    for n in NODES:
        jobs = plug.root / "state" / n / "jobs"
        assert jobs.is_dir()
        deadline = time.monotonic() + 20
        while (jobs / str(job)).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not (jobs / str(job)).exists(), f"epilog did not clean {jobs / str(job)}"

    # into the CLI: one job, steps on both nodes
    db = tmp_path / "js.db"
    first = _cli(plug.repo, "--db", db, "ingest", plug.spool / "jstest" / job)
    assert "5 new steps" in first and "0 quarantined" in first, first
    assert sqlite3.connect(db).execute("SELECT count(*) FROM jobs").fetchone()[0] == 1
    s = json.loads(_cli(plug.repo, "--db", db, "--format", "json", "job", job))
    assert s["job"]["tags"] == {"strategy": "mn"}
    steps = {(st["step_id"], st["node"]): st for st in s["steps"]}
    assert set(steps) == set(want)
    for key, st in steps.items():
        assert st["energy_cpu_j"] == pytest.approx(recs[key]["step"]["energy_cpu_uj"] / 1e6)
    # node1's srun steps ran inside its batch step; node2's did not (no batch step there)
    for step in ("0", "1"):
        assert steps[(step, "node1")]["inside_step"] == "batch"
        assert steps[(step, "node2")]["inside_step"] is None
    counted = (recs[("batch", "node1")]["step"]["energy_total_uj"]
               + sum(recs[(st, "node2")]["step"]["energy_total_uj"] for st in ("0", "1")))
    assert s["totals"]["energy_total_j"] == pytest.approx(counted / 1e6, rel=1e-9)
