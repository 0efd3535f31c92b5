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
"""
from __future__ import annotations

import os
import re
import shutil

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
    """slurmd at debug4, so that its log shows its CPU map."""

    def _write_conf(self):
        super()._write_conf()
        text = self.conf.read_text().replace("SlurmdDebug=info", "SlurmdDebug=debug4")
        self._write(self.conf, text)


@pytest.fixture(scope="module")
def topo(request, cluster_users, build_dir):
    saved = {k: os.environ.get(k) for k in ("HWLOC_SYNTHETIC", "JOULESTEP_TASK_PLUGIN")}
    os.environ["HWLOC_SYNTHETIC"] = SYNTHETIC
    os.environ["JOULESTEP_TASK_PLUGIN"] = "task/none"
    workdir = make_workdir("pytest-topo-")
    failed_before = request.session.testsfailed
    try:
        c = TopoCluster(workdir)
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
            "socket_dir": root / "sock", "backend": "sysfs", "sample_ms": 200})
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
