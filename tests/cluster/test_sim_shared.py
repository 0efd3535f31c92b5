"""Shared nodes end to end (issue 24 part 1): two jobs at once on one node of
the live cluster, on the time-faithful simulator (harness serve_fakehw:
the jobs' processes drive the package's energy, and the simulator logs each
one's CPU time). The plugin records the attribution's inputs (its CPU time
from slurmstepd's reaped children, the package's busy time from the tree's
proc/stat under procfs=); `joulestep ingest` and `job` give each job its
estimated share, labelled. Checked: both steps are `shared`, their
estimates stay within each step's measured package energy (pro rata of the
overlap, as the rule bounds them), and the CPU-bound job's estimate is
within 5 % of its per-process truth (fakehw.tree_dynamic_uj, plus the idle
power by allocated CPUs); the half-busy job's error is printed.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

import fakehw
import spool

pytestmark = pytest.mark.cluster

USER = "jsuser"
REPO = pathlib.Path(__file__).resolve().parents[2]
CLI = REPO / ".venv" / "bin" / "joulestep"
S = 1_000_000_000

# the batch script itself becomes the workload (exec): the simulator's tree
# of the job is this pid. It waits until the simulator has placed it: CPU
# time spent before that is in its rusage but not in the simulator's energy
# (sim/README.md, limits), an error of the simulator, not the rule
JOB = """#!/bin/sh
#SBATCH -n1 -c1
echo "PID $$"
exec python3 -c '
import os, sys, time
os.nice(10)
t = time.monotonic()
while "joulestep-fakehw" not in open("/proc/self/cgroup").read() and time.monotonic() - t < 5:
    time.sleep(0.005)
end = time.monotonic() + {secs}
while time.monotonic() < end:
    t = time.process_time() + 0.02 * {duty}
    while time.process_time() < t:
        pass
    if {duty} < 1:
        time.sleep(0.02 * (1 - {duty}))
'
"""


@pytest.fixture(scope="module")
def sim(cluster, build_dir):
    ok, why = fakehw.throttle_available()
    if not ok:
        pytest.skip(f"no CPU bandwidth control on this host: {why}")
    if cluster.cpus < 2:
        pytest.skip("needs two CPUs for two jobs at once")
    root = cluster.workdir / "jsshared"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    hw = root / "hw"
    fakehw.create(str(hw), packages=1, cpus_per_package=cluster.cpus)
    log = root / "fakehw.log"
    server = cluster.serve_fakehw(hw, tick_ms=20, throttle=True, log=log)
    dirs = {k: root / k for k in ("spool", "state", "sock")}
    cluster.write_plugstack(build_dir / "spank" / "joulestep.so",
                            {"spool": dirs["spool"], "state": dirs["state"], "sysfs": hw,
                             "procfs": hw / "proc", "socket_dir": dirs["sock"],
                             "backend": "sysfs", "sample_ms": 200, "cluster": "jstest"})
    try:
        yield dict(root=root, hw=hw, log=log, **dirs)
    finally:
        cluster.write_plugstack(None)
        server.terminate()
        server.wait(20)


def cli(*args, db):
    r = subprocess.run([str(CLI), "--db", str(db), "--format", "json", *map(str, args)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"joulestep {args}: {r.stdout}\n{r.stderr}"
    return json.loads(r.stdout) if r.stdout.strip().startswith("{") else r.stdout


def run_jobs(cluster, jobs):
    ids = []
    for secs, duty in jobs:
        res, job = cluster.sbatch(JOB.format(secs=secs, duty=duty), user=USER)
        assert res.returncode == 0 and job, res.stderr
        ids.append(job)
    for job in ids:
        assert cluster.wait_job(job, timeout=120) == "COMPLETED", cluster.logs()
    return ids


# Not a `site` test (linuxproc only): the simulator's CPU throttle moves the jobs'
# processes into cgroups of its own (v1: its cpu and cpuacct groups; v2: the one
# tree), out of Slurm's, so the step's cgroup would no longer count them. Shared
# nodes under task/cgroup: test_cgroup.py (two jobs, and the cgroup's CPU time).
def test_two_jobs_share_a_node(cluster, sim):
    """Up to 2 attempts for the error (the simulator's daemon keeping its ticks
    on a loaded host); every other check holds on each."""
    tries = []
    for attempt in range(2):
        errs = one_attempt(cluster, sim, sim["root"] / f"store{attempt}.db")
        tries.append(errs)
        if abs(errs[0]) <= 0.05:
            break
    else:
        pytest.fail(f"the CPU-bound job off its truth by more than 5 %: {tries}")


def one_attempt(cluster, sim, db):
    (idle,) = run_jobs(cluster, [(2, 0.0)])       # the fit's low point
    busy, half = run_jobs(cluster, [(4, 1.0), (4, 0.5)])
    recs = {j: spool.wait_records(sim["spool"], j, ["batch"], cluster.logs)["batch"]
            for j in (idle, busy, half)}
    for r in recs.values():
        assert r["step"]["cpu_time_ns"] is not None and r["packages"], r["step"]
    a, b = recs[busy]["step"], recs[half]["step"]
    assert a["start_ns"] < b["end_ns"] and b["start_ns"] < a["end_ns"], "did not overlap"
    cli("ingest", sim["spool"], db=db)
    got = {j: cli("job", j, db=db) for j in (busy, half)}
    for j, d in got.items():
        st = d["steps"][0]
        assert st["sharing"] == "shared" and d["totals"]["energy_basis"] == "estimated", st
        assert d["totals"]["measured_energy_cpu_j"] == recs[j]["step"]["energy_cpu_uj"] / 1e6
    # within each step's interval, the shares (the other's pro rata) <= its measurement
    est = {j: got[j]["steps"][0]["estimated_energy_cpu_j"] * 1e6 for j in got}
    for j, o in ((busy, half), (half, busy)):
        s, t = recs[j]["step"], recs[o]["step"]
        ov = min(s["end_ns"], t["end_ns"]) - max(s["start_ns"], t["start_ns"])
        assert est[j] + est[o] * ov / t["duration_ns"] <= s["energy_cpu_uj"] + 1
    # the per-process truth: the tree's dynamic energy + idle power by allocated CPUs
    errs = {}
    for j in (busy, half):
        pid = int(cluster.job_output(j).split("PID ")[1].split()[0])
        st, pk = recs[j]["step"], recs[j]["packages"][0]
        den = max(pk["cpus"], sum(recs[k]["packages"][0]["step_cpus"] for k in (busy, half)))
        truth = fakehw.tree_dynamic_uj(str(sim["hw"]), pid, st["start_ns"], st["end_ns"]) + \
            fakehw.package_idle_w(
            str(sim["hw"])) * st["duration_ns"] / 1e3 * pk["step_cpus"] / den
        errs[j] = est[j] / truth - 1
    from joulestep import store
    from joulestep.store import read_sharing as sharing
    with store.connect(db) as conn:
        node = conn.execute("SELECT node_pk FROM nodes").fetchone()[0]
        p0 = sharing.static_w(conn, node)
    print("shared-node estimate vs truth (CPU-bound, half busy):",
          [round(errs[j] * 100, 2) for j in (busy, half)], "P0", p0,
          "true", fakehw.package_idle_w(str(sim["hw"])))
    return errs[busy], errs[half]
