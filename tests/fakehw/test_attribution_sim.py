"""Shared-node attribution on the time-faithful simulator (issue 24 part 1).

`fakehw serve --throttle-under` runs real processes ("jobs") and knows each
one's CPU time per tick (truth log: throttle.tree_cpu_s); the package's
energy comes from the utilisation those processes made. Each job's launcher
plays slurmstepd: it reads the package's energy counter and the simulator's
<root>/proc/stat (the plugin's procfs=) before it starts its task and after
it reaped it, and takes the task's CPU time from the reaped child's rusage
(the plugin's RUSAGE_CHILDREN). joulestep.attribution then splits the
package's energy; each job's share is compared with its per-process truth,
worked out here from the simulator's model:

- dynamic: per tick and CPU, the energy above idle the model charged for
  that CPU's utilisation (util * (p_core_max * g(f)/g(fmax) - p_core_idle)
  * seconds), shared among the node's processes by their CPU time on it in
  that tick (the simulator's own split: its energy comes from their CPU
  time);
- static (uncore and idle CPUs): split by allocated CPUs, by definition
  (no process causes it; the same split as the rule's).

Runs: an idle job alone (the fit's low point), then two jobs (CPU-bound on
cpu0, 50 % on cpu1), then three (CPU-bound on cpu0, 60 % and 30 % on cpu1,
sharing it). The node's work stays below the host's two CPUs: the
simulator's daemon must keep its 20 ms ticks (it starved, ticking every
0.3 s, with three CPU-bound jobs on two CPUs, and its per-tick split of the
truth got as coarse). CPU-bound jobs must be within 5 % of their truth; the mixed
jobs' error is printed (docs/accounting.md quotes it). Conservation is
checked in integer µJ: within each job's interval, the shares of the jobs
overlapping it (pro rata of their time there) never exceed its measured
package energy.
"""
import json
import os
import secrets
import subprocess
import sys
import time

import pytest

import fakehw
from joulestep import attribution as at

MARK_VAR = "FAKEHW_ATTR_NODE"
ok, why = fakehw.throttle_available()
needs_throttle = pytest.mark.skipif(not ok, reason=f"no CPU bandwidth control here: {why}")

LAUNCH = r"""
import json, os, subprocess, sys, time
pkg, dram, stat, work = sys.argv[1:5]
def read():
    busy = total = 0
    with open(stat) as fh:
        for line in fh:
            if line.startswith("cpu") and line[3].isdigit():
                v = [int(x) for x in line.split()[1:]]
                t = sum(v[:8]); busy += t - v[3] - v[4]; total += t
    with open(pkg) as a, open(dram) as b:
        return [time.time_ns(), int(a.read()), int(b.read()), busy, total]
env = dict(os.environ); env.pop(%r)
r0 = read()
p = subprocess.Popen([sys.executable, work] + sys.argv[5:], env=env)
_, st, ru = os.wait4(p.pid, 0)
r1 = read()
print(json.dumps({"pid": p.pid, "cpu_ns": int((ru.ru_utime + ru.ru_stime) * 1e9), "r0": r0, "r1": r1}))
""" % MARK_VAR

# duty of each 20 ms slice busy (in its own CPU time), the rest asleep
WORK = r"""
import os, sys, time
cpu, duty, secs = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
os.sched_setaffinity(0, {cpu})
os.nice(10)  # the simulator's daemon first: its ticks are the clock
time.sleep(0.1)
end = time.monotonic() + secs
x = 0
while time.monotonic() < end:
    t = time.process_time() + 0.02 * duty
    while time.process_time() < t:
        x += 1
    if duty < 1:
        time.sleep(0.02 * (1 - duty))
"""

SECONDS = 4.0


class Node:
    def __init__(self, tmp_path):
        self.hw = tmp_path / "hw"
        self.ncpu = len(fakehw.read_proc_stat())
        fakehw.create(str(self.hw), packages=1, cpus_per_package=self.ncpu)
        zs = {z["id"]: z for z in fakehw.zones(str(self.hw))}
        self.pkg = self.hw / zs["intel-rapl:0"]["rel"] / "energy_uj"
        self.dram = self.hw / zs["intel-rapl:0:0"]["rel"] / "energy_uj"
        self.mark = secrets.token_hex(6)
        (tmp_path / "launch.py").write_text(LAUNCH)
        (tmp_path / "work.py").write_text(WORK)
        self.tmp = tmp_path
        self.server = fakehw.serve_background(str(self.hw), tick_ms=20,
                                              throttle_under=f"{MARK_VAR}={self.mark}")

    def run(self, jobs):
        """jobs: [(cpu, duty)], started together; their launchers' reports."""
        env = dict(os.environ, **{MARK_VAR: self.mark})
        procs = [subprocess.Popen(
            [sys.executable, str(self.tmp / "launch.py"), str(self.pkg), str(self.dram),
             str(self.hw / "proc/stat"), str(self.tmp / "work.py"), str(cpu), str(duty),
             str(SECONDS)], env=env, stdout=subprocess.PIPE, text=True) for cpu, duty in jobs]
        out = []
        for p in procs:
            o, _ = p.communicate(timeout=120)
            assert p.returncode == 0
            out.append(json.loads(o))
        time.sleep(0.2)  # the daemon logs the last ticks
        return out

    def stop(self):
        self.server.terminate()
        self.server.wait(20)


def unit(key, rep, cpu_ns, step_cpus, ncpu):
    (t0, e0, d0, b0, tt0), (t1, e1, d1, b1, tt1) = rep["r0"], rep["r1"]
    tick = 10_000_000  # USER_HZ ticks -> ns
    return at.Unit(key, key, t0, t1, cpu_ns, {0: at.Pkg(
        ncpu, step_cpus, (b1 - b0) * tick, (tt1 - tt0) * tick, e1 - e0, d1 - d0)})


def truth_uj(node, rep, u, units):
    """The job's package energy by the simulator's model (module doc)."""
    den = max(node.ncpu, sum(v.packages[0].step_cpus for v in units
                             if v is u or at.overlap_ns(u, v) > 0))
    return fakehw.tree_dynamic_uj(str(node.hw), rep["pid"], u.start_ns, u.end_ns) + \
        fakehw.package_idle_w(str(node.hw)) * (u.end_ns - u.start_ns) / 1e3 / den


def one_attempt(tmp_path):
    """Run the three runs on a fresh node; check conservation; return the
    error per job [(run, job, duty, % vs truth)] and the fitted P0."""
    node = Node(tmp_path)
    try:
        idle = node.run([(0, 0.0)])
        two = node.run([(0, 1.0), (1, 0.5)])
        three = node.run([(0, 1.0), (1, 0.6), (1, 0.3)])
    finally:
        node.stop()
    runs = {"idle": (idle, [0.0]), "two": (two, [1.0, 0.5]), "three": (three, [1.0, 0.6, 0.3])}
    units = {name: [unit(f"{name}{i}", r, r["cpu_ns"], 1, node.ncpu) for i, r in enumerate(reps)]
             for name, (reps, _) in runs.items()}
    points = [(u.end_ns - u.start_ns, u.packages[0].busy_ns, u.packages[0].energy_uj)
              for us in units.values() for u in us]
    p0 = at.fit_static_w(points)
    true_p0 = fakehw.package_idle_w(str(node.hw))
    assert p0 is not None and abs(p0 - true_p0) <= 0.1 * true_p0, (p0, true_p0)
    report = []
    for name in ("two", "three"):
        us = units[name]
        shares = at.attribute(us, {0: p0})
        for u in us:  # conservation, integer µJ, within every job's interval
            assert shares[u.key].sharing == "shared"
            inside = sum(shares[t.key].cpu_uj * at.overlap_ns(t, u) // (t.end_ns - t.start_ns)
                         if t is not u else shares[t.key].cpu_uj for t in us
                         if t is u or at.overlap_ns(t, u) > 0)
            assert inside <= u.packages[0].energy_uj, (name, u.key, inside, u.packages[0].energy_uj)
            dram_in = sum(shares[t.key].dram_uj for t in us)
            assert dram_in <= max(t.packages[0].dram_uj for t in us) * 1.05
        for (rep, duty, u) in zip(runs[name][0], runs[name][1], us):
            err = shares[u.key].cpu_uj / truth_uj(node, rep, u, us) - 1
            report.append((name, u.key, duty, round(err * 100, 2)))
    return report, p0


@needs_throttle
def test_two_and_three_jobs_on_one_node(tmp_path):
    """CPU-bound jobs within 5 % of their truth. Conservation is checked on
    every attempt; the error, which depends on the simulator keeping its
    ticks on a loaded host, gets up to 3 attempts."""
    if len(fakehw.read_proc_stat()) < 2:
        pytest.skip("the jobs run on CPUs 0 and 1")
    tries = []
    for attempt in range(3):
        report, p0 = one_attempt(tmp_path / f"a{attempt}")
        tries.append(report)
        print("attribution error per job (run, job, duty, % vs truth):", report, "P0", p0)
        if all(abs(err) <= 5.0 for _, _, duty, err in report if duty == 1.0):
            break
    else:
        pytest.fail(f"a CPU-bound job off its truth by more than 5 % in 3 attempts: {tries}")
