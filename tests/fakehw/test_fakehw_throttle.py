"""The simulated clock costs time: live mode throttles the node's processes with
the kernel's CPU bandwidth control (fakehw.Throttle, README "Clock costs time").

The one timed test of the suite (test_cpu_bound_twice_as_long_sleep_bound_not) is
built for a loaded 2-core machine: each attempt runs the loop at r = 1 and at
r = 0.5 back to back, compares their slowdowns wall/CPU-time (so that time lost to
other processes on the host cancels out), and a few attempts are made before failing.
The other tests assert on counts and files, not on time.
"""
import json
import os
import pathlib
import secrets
import signal
import subprocess
import sys
import time

import pytest

import fakehw

FMAX = 2400000
MARK_VAR = "FAKEHW_TEST_NODE"

ok, why = fakehw.throttle_available()
needs_throttle = pytest.mark.skipif(not ok, reason=f"no CPU bandwidth control here: {why}")

# The workload starter: plays slurmstepd's part. It carries the marker; what it
# starts does not (a job's environment is its own), so only the workload is the node's.
LAUNCH = ("import os, subprocess, sys\n"
          f"env = dict(os.environ); env.pop({MARK_VAR!r})\n"
          "sys.exit(subprocess.call(sys.argv[1:], env=env))\n")

# CPU-bound: fixed work on CPU 0; sleep-bound: 100 x (10 ms asleep + a little work).
WORKLOAD = r"""
import json, os, sys, time
os.sched_setaffinity(0, {0})
time.sleep(0.15)              # let the daemon place us (one tick is 20 ms)
kind, n = sys.argv[1], int(sys.argv[2])
w0, c0 = time.perf_counter(), time.process_time()
x = 0
if kind == "cpu":
    for i in range(n):
        x += i * i
else:
    for _ in range(n):
        time.sleep(0.01)
        for i in range(3000):
            x += i * i
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0}))
"""


def cgroup_dirs(pid):
    """Every directory named after a serve daemon's pid in the cgroup mounts."""
    out = []
    for fs, mp, _ in fakehw._cgroup_mounts():
        p = pathlib.Path(mp) / f"{fakehw.CG_PREFIX}{pid}"
        if p.exists():
            out.append(p)
    return out


class Node:
    def __init__(self, tmp_path):
        self.hw = tmp_path / "hw"
        nreal = len(fakehw.read_proc_stat())
        fakehw.create(str(self.hw), packages=1, cpus_per_package=nreal, fmax_khz=FMAX, fmin_khz=800000)
        self.mark = f"{MARK_VAR}={secrets.token_hex(6)}"
        self.script = tmp_path / "work.py"
        self.script.write_text(WORKLOAD)
        self.server = fakehw.serve_background(str(self.hw), tick_ms=20, throttle_under=self.mark)

    def set_ratio(self, r):
        p = self.hw / "devices/system/cpu/cpu0/cpufreq/scaling_max_freq"
        fakehw.write_in_place(str(p), f"{int(FMAX * r)}\n")
        time.sleep(0.1)  # the daemon sets the quota at its next tick

    def run(self, kind, n):
        env = dict(os.environ)
        env[MARK_VAR] = self.mark.split("=", 1)[1]
        p = subprocess.run([sys.executable, "-c", LAUNCH, sys.executable, str(self.script), kind, str(n)],
                           env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    def stop(self):
        self.server.terminate()
        self.server.wait(20)


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    try:
        yield n
    finally:
        n.stop()


def calibrate(node, seconds=0.5):
    """Loop count for about `seconds` of CPU time at full speed."""
    node.set_ratio(1.0)
    r = node.run("cpu", 2_000_000)
    return max(200_000, int(2_000_000 * seconds / max(r["cpu"], 1e-3)))


@needs_throttle
def test_cpu_bound_twice_as_long_sleep_bound_not(node):
    """r = 0.5: a CPU-bound loop takes 2x +- 15 % as long, a sleep-bound one at most
    15 % longer. Slowdown = wall / CPU time of the loop, relative to the same loop at
    r = 1 run just before (contention from the rest of the host cancels out)."""
    n = calibrate(node)
    tries = []
    for attempt in range(5):
        node.set_ratio(1.0)
        full = node.run("cpu", n)
        node.set_ratio(0.5)
        half = node.run("cpu", n)
        ratio = (half["wall"] / half["cpu"]) / (full["wall"] / full["cpu"])
        tries.append((round(ratio, 3), full, half))
        if abs(ratio - 2.0) <= 0.15 * 2.0:
            break
    else:
        pytest.fail(f"CPU-bound slowdown at r=0.5 not 2x +- 15 % in {len(tries)} attempts: {tries}")

    sleeps = []
    for attempt in range(5):
        node.set_ratio(1.0)
        full = node.run("sleep", 100)
        node.set_ratio(0.5)
        half = node.run("sleep", 100)
        ratio = half["wall"] / full["wall"]
        sleeps.append((round(ratio, 3), full, half))
        if ratio <= 1.15:
            break
    else:
        pytest.fail(f"sleep-bound loop slowed by more than 15 % at r=0.5: {sleeps}")


@needs_throttle
def test_throttled_cpu_counts_as_busy_and_costs_energy(node):
    """A CPU-bound loop at r = 0.5 gets half the CPU time, yet the fake CPU is busy:
    the ticks while it runs show the node's CPU time and util near 1 on CPU 0."""
    n = calibrate(node, 0.4)
    node.set_ratio(0.5)
    t0 = time.clock_gettime_ns(time.CLOCK_REALTIME)
    node.run("cpu", n)
    t1 = time.clock_gettime_ns(time.CLOCK_REALTIME)
    ticks = [e for e in fakehw.truth_log(str(node.hw))
             if e["source"] == "tick" and t0 <= e["t_before_ns"] <= t1 and "throttle" in e]
    assert ticks, "no tick carried throttle data"
    assert all(e["throttle"]["ratio"][0] == pytest.approx(0.5) for e in ticks[3:])
    busy = [e for e in ticks if e["throttle"]["node_cpu_s"][0] > 0]
    # node CPU time in fake terms = util * seconds, summed: equal to real CPU time / r
    fake_busy = sum(e["util"][0] * e["seconds"] for e in ticks)
    real_cpu = sum(e["throttle"]["node_cpu_s"][0] for e in ticks)
    assert busy and real_cpu > 0.2
    assert fake_busy == pytest.approx(real_cpu / 0.5, rel=0.25)


@needs_throttle
def test_groups_removed_on_stop_and_after_sigkill(tmp_path):
    hw = tmp_path / "hw"
    fakehw.create(str(hw), packages=1, cpus_per_package=1)
    mark = f"{MARK_VAR}={secrets.token_hex(6)}"
    d = fakehw.serve_background(str(hw), tick_ms=20, throttle_under=mark)
    pid = d.pid
    assert cgroup_dirs(pid), "serve made no cgroup"
    d.terminate()
    d.wait(20)
    assert cgroup_dirs(pid) == []
    # a daemon killed outright leaves its groups; the next one removes them
    d = fakehw.serve_background(str(hw), tick_ms=20, throttle_under=mark)
    dead = d.pid
    d.send_signal(signal.SIGKILL)
    d.wait(20)
    assert cgroup_dirs(dead)
    d = fakehw.serve_background(str(hw), tick_ms=20, throttle_under=mark)
    try:
        assert cgroup_dirs(dead) == []
    finally:
        d.terminate()
        d.wait(20)
    assert cgroup_dirs(d.pid) == []


# ---------------------------------------------------------------- detection (no root needed)

def mountinfo(tmp_path, lines):
    p = tmp_path / "mountinfo"
    p.write_text("".join(l + "\n" for l in lines))
    return str(p)


def test_detect_without_any_cgroup_says_why(tmp_path):
    mi = mountinfo(tmp_path, ["22 1 0:21 / /proc rw,nosuid - proc proc rw"])
    be, why = fakehw.detect_cgroup(mi)
    assert be is None and "no cgroup v1 cpu hierarchy" in why


def test_detect_prefers_v2_with_cpu_then_v1(tmp_path):
    v2 = tmp_path / "unified"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("memory pids\n")
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    lines = [f"30 25 0:26 / {v2} rw - cgroup2 cgroup2 rw",
             f"31 25 0:27 / {cpu} rw - cgroup cgroup rw,cpu",
             f"32 25 0:28 / {tmp_path} rw - cgroup cgroup rw,cpuacct"]
    be, why = fakehw.detect_cgroup(mountinfo(tmp_path, lines))
    assert be.version == 1 and be.cpu_mnt == str(cpu) and be.acct_mnt == str(tmp_path)
    (v2 / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    be, why = fakehw.detect_cgroup(mountinfo(tmp_path, lines))
    assert be.version == 2 and be.cpu_mnt == str(v2)
    # v1 cpu without cpuacct: no usage counter, refused with the reason
    be, why = fakehw.detect_cgroup(mountinfo(tmp_path, [lines[1]]))
    assert be is None and "no cpuacct" in why


def test_throttle_under_refused_in_manual_mode_and_bad_marker(tmp_path):
    hw = tmp_path / "hw"
    fakehw.create(str(hw), packages=1, cpus_per_package=1)
    with pytest.raises(fakehw.FakeHwError, match="live mode"):
        fakehw.serve(str(hw), manual=True, ctl=str(tmp_path / "s"), throttle_under="A=b")
    with pytest.raises(fakehw.FakeHwError, match="NAME=VALUE"):
        fakehw.Throttle("novalue", 1)


def test_parse_cpu_list():
    assert fakehw.parse_cpu_list("0-2,5\n") == [0, 1, 2, 5]
    assert fakehw.parse_cpu_list("3") == [3]
