"""Processes, waits and job-output parsing shared by the live-cluster tests.

Job ids start at 1 in every test cluster, and several clusters may run on one host
(other checkouts' suites, test_multinode.py): stepd_pid and job_pids only return
processes of one cluster, `cluster=` or else DEFAULT_CLUSTER (the session's cluster,
set by conftest.py). A slurmstepd carries its daemons' marker variable, a task its
cluster's SLURM_CONF."""
from __future__ import annotations

import pathlib
import re
import time

from harness import MARKER_VAR

DEFAULT_CLUSTER = None  # harness.Cluster; conftest.py's `cluster` fixture sets it


def wait_for(cond, what, timeout=30.0):
    """Poll cond() every 0.1 s; fail naming `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.1)


def wait_file(p: pathlib.Path, timeout=30):
    wait_for(p.exists, f"{p} appearing", timeout)


def cmdline(pid) -> str:
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _environ(pid) -> list[bytes]:
    try:
        return pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def _in_cluster(pid, cluster, var: str) -> bool:
    """Does pid belong to cluster (or DEFAULT_CLUSTER; any when both are None)?"""
    c = cluster or DEFAULT_CLUSTER
    if c is None:
        return True
    want = f"{MARKER_VAR}={c.id}" if var == "marker" else f"SLURM_CONF={c.conf}"
    return want.encode() in _environ(pid)


def stepd_pid(job, step="batch", cluster=None):
    """The step's main slurmstepd (not one of its forked helpers), or None."""
    for d in pathlib.Path("/proc").iterdir():
        if (d.name.isdigit() and cmdline(d.name).startswith(f"slurmstepd: [{job}.{step}]")
                and _in_cluster(d.name, cluster, "marker")):
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if not cmdline(ppid).startswith("slurmstepd:"):
                return int(d.name)
    return None


def job_pids(job, cluster=None) -> list[int]:
    """Every process whose environment names the job (its tasks and their children)."""
    pids = []
    for d in pathlib.Path("/proc").iterdir():
        if d.name.isdigit():
            env = _environ(d.name)
            if f"SLURM_JOB_ID={job}".encode() in env and _in_cluster(d.name, cluster, "conf"):
                pids.append(int(d.name))
    return pids


def expand_cpus(cpus: str) -> list[int]:
    """"0-2,5" -> [0, 1, 2, 5]"""
    out = []
    for part in cpus.split(","):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


def freq_lines(out: str) -> dict:
    """tag -> {cpu: (field, field)} from the jobs' "FREQ <tag> <cpu> <a> <b>" lines."""
    res = {}
    for m in re.finditer(r"^FREQ (\S+) (\d+) (\S+) (\S+)$", out, re.M):
        res.setdefault(m.group(1), {})[int(m.group(2))] = (m.group(3), m.group(4))
    return res
