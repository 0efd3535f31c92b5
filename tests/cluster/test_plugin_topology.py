"""Slurm's own core numbering on a node whose Linux CPU numbers alternate between
sockets and whose SMT siblings are far apart (issue 23, defect 3).

The test slurmd sees a synthetic topology through hwloc's environment
(HWLOC_SYNTHETIC, honoured by Debian's Slurm 22.05 and hwloc 2): 2 sockets x 2 cores x
2 threads, numbered as many two-socket servers are: socket 0 holds cpu0,4 and cpu2,6,
socket 1 cpu1,5 and cpu3,7. slurm.conf takes the layout from `slurmd -C` under that
topology; tasks are not bound (task/none: the host has fewer CPUs). The plugin's fake
tree describes the same topology in cpuN/topology. The truth is Slurm's own
abstract-to-machine map, read from slurmd's log at debug4 ("CPU map[abs]=>mac"), and
Slurm's choice of cores for the job (the first free ones): the plugin must lower
exactly the machine CPUs of the job's cores, never the other socket's.

SMT with two jobs on one node (issue 24, part 2), both under CR_CPU, Slurm's
consumable CPUs:
- the node described as it is (ThreadsPerCore=2): Slurm gives each job whole
  cores even for one CPU (its core bitmap, S_STEP_ALLOC_CORES, has no
  threads), so each job lowers both threads of its own cores;
- the node given as CPUs=8 only (ThreadsPerCore=1 to Slurm, threads_per_core=1
  in plugstack): each Slurm "core" is one thread, and two jobs get the two
  threads of one core. Each job lowers only cores whose every thread is its
  own, and leaves the others alone, saying so in step.smt_aside_cpus.
The truth: Slurm's own choice (scontrol show job -d: CPU_IDs), its
abstract-to-machine map (slurmd's debug4 log) and the sibling table above.
"""
from __future__ import annotations

import os
import re
import shutil
import time

import pytest

import fakehw
import spool
from harness import Cluster, make_workdir
from procs import expand_cpus

pytestmark = pytest.mark.cluster

SYNTHETIC = "pack:2 core:2 pu:2(indexes=0,4,2,6,1,5,3,7)"
PKG = {0: 0, 4: 0, 2: 0, 6: 0, 1: 1, 5: 1, 3: 1, 7: 1}
SIBLINGS = {0: "0,4", 4: "0,4", 2: "2,6", 6: "2,6", 1: "1,5", 5: "1,5", 3: "3,7", 7: "3,7"}
FMAX, FMIN = 4000000, 800000
USER = "jsuser"


class TopoCluster(Cluster):
    """slurmd at debug4, so that its log shows its CPU map; consumable CPUs
    (CR_CPU); cpus_only: the node line gives CPUs=8 alone (each thread a core
    to Slurm)."""
    cpus_only = False

    def _write_conf(self):
        super()._write_conf()
        text = self.conf.read_text().replace("SlurmdDebug=info", "SlurmdDebug=debug4")
        text = text.replace("SelectTypeParameters=CR_Core", "SelectTypeParameters=CR_CPU")
        if self.cpus_only:
            text, n = re.subn(r"CPUs=8 Boards=1 SocketsPerBoard=2 CoresPerSocket=2 ThreadsPerCore=2",
                              "CPUs=8", text)
            assert n == 1, text
        self._write(self.conf, text)


class ThreadsCluster(TopoCluster):
    cpus_only = True


@pytest.fixture(scope="module")
def topo(request, cluster_users, build_dir):
    yield from _topo_cluster(request, build_dir, TopoCluster, {})


@pytest.fixture(scope="module")
def topo_threads(request, cluster_users, build_dir):
    yield from _topo_cluster(request, build_dir, ThreadsCluster, {"threads_per_core": 1})


def _topo_cluster(request, build_dir, cls, extra):
    saved = {k: os.environ.get(k) for k in ("HWLOC_SYNTHETIC", "JOULESTEP_TASK_PLUGIN")}
    os.environ["HWLOC_SYNTHETIC"] = SYNTHETIC
    os.environ["JOULESTEP_TASK_PLUGIN"] = "task/none"
    workdir = make_workdir("pytest-topo-")
    failed_before = request.session.testsfailed
    try:
        c = cls(workdir)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        root = c.workdir / "jstopo"
        root.mkdir(mode=0o755, parents=True, exist_ok=True)
        hw = root / "hw"
        fakehw.create(str(hw), packages=1, cpus_per_package=8, fmax_khz=FMAX, fmin_khz=FMIN)
        for cpu in range(8):
            t = hw / "devices/system/cpu" / f"cpu{cpu}" / "topology"
            (t / "physical_package_id").write_text(f"{PKG[cpu]}\n")
            (t / "thread_siblings_list").write_text(f"{SIBLINGS[cpu]}\n")
        c.write_plugstack(build_dir / "spank" / "joulestep.so", {
            "spool": root / "spool", "state": root / "state", "sysfs": hw,
            "socket_dir": root / "sock", "backend": "sysfs", "sample_ms": 200, **extra})
        c.start()
        yield c, hw, root
    finally:
        c.stop()
        if request.session.testsfailed == failed_before and not os.environ.get("JOULESTEP_KEEP_CLUSTER"):
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"\n[topology cluster] logs kept in {workdir}/log")


def slurm_block_map(log: str) -> dict[int, int]:
    """Slurm's abstract CPU id -> machine CPU id, from slurmd's debug4 lines."""
    return {int(a): int(m) for a, m in re.findall(r"CPU map\[(\d+)\]=>(\d+)", log)}


def test_slurm_numbering_on_alternating_smt_node(topo):
    c, hw, root = topo
    assert "ThreadsPerCore=2" in c.conf.read_text() and "SocketsPerBoard=2" in c.conf.read_text()
    show = "; ".join(f'echo "MAX {cpu} $(cat {hw}/devices/system/cpu/cpu{cpu}/cpufreq/scaling_max_freq)"'
                     for cpu in range(8))
    job, out = c.run_job(f"#!/bin/sh\n#SBATCH -n1 -c4\n{show}\n", USER,
                         ["--energy-policy=fixed:0.6"], 90)
    bmap = slurm_block_map((c.workdir / "log" / "slurmd.log").read_text())
    assert len(bmap) == 8, bmap
    # -c4 on an idle node: Slurm's first two cores (abstract CPUs 0-3: 2 threads each)
    want = {bmap[a] for a in range(4)}
    assert want == {0, 4, 2, 6}  # socket 0 of the synthetic topology, both threads
    rec = spool.wait_records(root / "spool", job, ["batch"], c.logs)["batch"]
    assert set(expand_cpus(rec["step"]["cpus"])) == want, rec["step"]["cpus"]
    seen = {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"^MAX (\d+) (\d+)$", out, re.M)}
    assert seen == {cpu: int(0.6 * FMAX) if cpu in want else FMAX for cpu in range(8)}, out
    for cpu in range(8):
        assert fakehw.read_cpufreq(str(hw), cpu)["scaling_max_freq"] == FMAX


def slurm_cpu_ids(c, job) -> set[int]:
    """The abstract CPU ids Slurm gave the job on the node (scontrol -d)."""
    out = c.run(["scontrol", "show", "job", "-d", str(job)], timeout=15).stdout
    m = re.search(r"CPU_IDs=(\S+)", out)
    assert m, out
    return set(expand_cpus(m.group(1)))


def _jobs_on_one_node(c, hw, root, jobs):
    """Run jobs [(user, sbatch args, policy)] at once on the node; each, once
    all have started and the test has read Slurm's choice of CPUs, prints
    every CPU's scaling_max_freq. Returns per job:
    (its machine CPUs by Slurm, what it saw, its record)."""
    sync = c.workdir / "sync"
    shutil.rmtree(sync, ignore_errors=True)
    sync.mkdir()
    os.chmod(sync, 0o1777)
    show = "; ".join(f'echo "MAX {cpu} $(cat {hw}/devices/system/cpu/cpu{cpu}/cpufreq/scaling_max_freq)"'
                     for cpu in range(8))
    ids = []
    wait = 'for t in $(seq 1200); do [ $(ls {d} | grep -c {what}) -ge {n} ] && echo "SYNC {what}" && break; sleep 0.1; done\n'
    for i, (user, args, pol) in enumerate(jobs):
        # started: the clocks are set (at step start); go: the test has read
        # Slurm's choice; shown: every job has looked (none restores early)
        script = (f"#!/bin/sh\ntouch {sync}/started.{i}\n"
                  + wait.format(d=sync, what="go", n=1) + f"{show}\ntouch {sync}/shown.{i}\n"
                  + wait.format(d=sync, what="shown", n=len(jobs)))
        res, job = c.sbatch(script, user, [*args, f"--energy-policy={pol}"])
        assert job, res.stderr
        ids.append(job)
    deadline = time.monotonic() + 120
    while len(list(sync.glob("started.*"))) < len(jobs):
        assert time.monotonic() < deadline, c.logs()
        time.sleep(0.2)
    cpus = {j: slurm_cpu_ids(c, j) for j in ids}
    (sync / "go").touch()
    for j in ids:
        assert c.wait_job(j, 180) == "COMPLETED", c.logs()
    bmap = slurm_block_map((c.workdir / "log" / "slurmd.log").read_text())
    assert len(bmap) == 8, bmap
    out = []
    for j in ids:
        text = c.job_output(j)
        seen = {int(m.group(1)): int(m.group(2))
                for m in re.finditer(r"^MAX (\d+) (\d+)$", text, re.M)}
        assert len(seen) == 8 and "SYNC go" in text and "SYNC shown" in text, text
        rec = spool.wait_records(root / "spool", j, ["batch"], c.logs)["batch"]
        out.append(({bmap[a] for a in cpus[j]}, seen, rec))
    return out


def _sibling_set(cpu) -> set[int]:
    return set(expand_cpus(SIBLINGS[cpu]))


def test_cr_cpu_whole_cores_two_jobs(topo):
    """CR_CPU on a node described with its threads: one CPU asked, a whole
    core given; job A (fixed) lowers both threads of its core and nothing of
    job B's (monitor) core, though both run at once."""
    c, hw, root = topo
    (a_cpus, a_seen, a_rec), (b_cpus, b_seen, b_rec) = _jobs_on_one_node(
        c, hw, root, [("jsuser", ["-n1"], "fixed:0.6"), ("jsother", ["-n1"], "monitor")])
    for cpus in (a_cpus, b_cpus):   # whole cores, as Slurm's core bitmap has no threads
        assert len(cpus) == 2 and all(_sibling_set(x) == cpus for x in cpus), cpus
    assert not a_cpus & b_cpus
    want = {cpu: int(0.6 * FMAX) if cpu in a_cpus else FMAX for cpu in range(8)}
    assert a_seen == want and b_seen == want, (a_cpus, b_cpus, a_seen, b_seen)
    assert set(expand_cpus(a_rec["step"]["cpus"])) == a_cpus
    assert set(expand_cpus(b_rec["step"]["cpus"])) == b_cpus
    assert "smt_aside_cpus" not in a_rec["step"] and "smt_aside_cpus" not in b_rec["step"]
    for cpu in range(8):
        assert fakehw.read_cpufreq(str(hw), cpu)["scaling_max_freq"] == FMAX


def test_cr_cpu_single_threads_step_aside(topo_threads):
    """The node given as CPUs=8: Slurm hands out single threads, so two jobs
    of one CPU each share a core. Every job asks fixed:0.6; only cores whose
    every thread is one job's are lowered, by that job; each job records the
    CPUs it left alone."""
    c, hw, root = topo_threads
    runs = _jobs_on_one_node(c, hw, root, [("jsuser", ["-n1"], "fixed:0.6"),
                                           ("jsother", ["-n1"], "fixed:0.6"),
                                           ("jsuser", ["-n2"], "fixed:0.6")])
    lowered, shared = set(), 0
    for cpus, seen, rec in runs:
        whole = {x for x in cpus if _sibling_set(x) <= cpus}
        aside = cpus - whole
        lowered |= whole
        shared += bool(aside)
        assert set(expand_cpus(rec["step"]["cpus"])) == cpus, rec["step"]
        got_aside = rec["step"].get("smt_aside_cpus")
        assert (set(expand_cpus(got_aside)) if got_aside else set()) == aside, rec["step"]
    assert shared >= 2 and lowered, runs   # the test shows both cases
    want = {cpu: int(0.6 * FMAX) if cpu in lowered else FMAX for cpu in range(8)}
    for cpus, seen, rec in runs:
        assert seen == want, (cpus, seen, want)
    for cpu in range(8):
        assert fakehw.read_cpufreq(str(hw), cpu)["scaling_max_freq"] == FMAX
