"""Fault injection, "Frequencies come back" (issue 11, section 2).

Each fault hits a step while a throttled phase holds its CPU down (io-dvfs: a write
phase caps scaling_max_freq at 0.85·fmax). Afterwards every fake CPU must be back at
exactly the governor, scaling_min_freq and scaling_max_freq the test wrote into the tree
before the job (freqcheck.snapshot), the journal must be empty, and a new step must take
the original values as its baseline (record base_freq_khz, its CPUs' files at its start,
and its phase end).

The truth is always the tree as created by the test; nothing is copied from the plugin's
output. Faults: kill -9 of slurmstepd (recovered by the next step, the job epilog or
joulestep-restore), slurmd restarted, scancel, time limit, node drain, a task segfault;
and steps sharing a cpufreq policy or CPUs. docs/reliability.md, "Faults: frequencies".
"""
from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import time

import pytest

import freqcheck
from procs import cmdline, expand_cpus, stepd_pid, wait_for
from test_plugin_freq import FMAX, USER, FreqEnv, cf_lines

pytestmark = pytest.mark.cluster

LOW = int(0.85 * FMAX)     # io-dvfs write phase
LOWER = int(0.6 * FMAX)    # phase:compress=0.6, fixed:0.6


class FaultEnv(FreqEnv):
    """FreqEnv (test_plugin_freq.py) in a directory of its own."""

    def __init__(self, cluster, build):
        super().__init__(cluster, build)
        self.root = cluster.workdir / "jsffreq"
        self.root.mkdir(mode=0o755, exist_ok=True)
        os.chmod(self.root, 0o755)
        self.spool, self.state, self.sock = self.root / "spool", self.root / "state", self.root / "sock"
        self.restore_bin = build / "bin" / "joulestep-restore"
        self.d = cluster.user_dir(USER)

    def use(self, hw, **extra):
        # the records' cluster from plugstack, not from the job prolog's cache (the
        # first job after a slurmd restart was once seen without one)
        super().use(hw, cluster="jstest", **extra)

    def fresh(self, **kw):
        """A new tree and its truth."""
        hw = self.tree(**kw)
        return hw, freqcheck.snapshot(hw)

    def flag(self, name) -> pathlib.Path:
        p = self.d / f"ff.{name}"
        p.unlink(missing_ok=True)
        return p

    @staticmethod
    def wait_sh(p) -> str:
        """Shell: wait (at most 120 s) for the test to create p."""
        return f"i=0; while [ ! -e {p} ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done"

    def lowered(self, khz=LOW) -> list[int]:
        return [c for c in range(self.ncpus) if self.files(c)["effective_khz"] == khz]

    def wait_lowered(self, khz=LOW) -> list[int]:
        wait_for(lambda: self.lowered(khz), f"a CPU at {khz} kHz", 60)
        return self.lowered(khz)

    def submit(self, script, args=()):
        res, job = self.c.sbatch(script, user=USER, args=args)
        assert res.returncode == 0 and job, res.stderr
        return job

    def finish(self, job, state="COMPLETED") -> str:
        st = self.c.wait_job(job, 120)
        out = self.c.job_output(job)
        assert st == state, f"job {job} {st}\n{out}\n{self.c.logs()}"
        return out

    def check_restored(self, hw, orig):
        """All CPUs back (polled: step end and epilog may still run), then exact."""
        wait_for(lambda: not freqcheck.throttled_cpus(hw, orig), "every CPU restored", 60)
        self.c.wait_idle(60)
        freqcheck.assert_no_cpu_throttled(hw, orig, self.state)

    def check_baseline(self, hw, orig):
        """A new step after the fault: its CPUs are at the original values when it
        starts, it records the original clock, its phase lowers from there and ends
        back at the original values."""
        job, out = self.run_job(f"""#!/bin/sh
#SBATCH -n1
{self.cf("in")}
{self.phase("begin", "write")}
{self.cf("w")}
{self.phase("end")}
{self.cf("after")}
""", args=["--energy-policy=io-dvfs"])
        rec = self.records(job, ["batch"])["batch"]
        cf = cf_lines(out)
        assert rec["step"]["base_freq_khz"] == orig[0]["scaling_max_freq"] == FMAX
        for c in range(self.ncpus):
            for tag in ("in", "after"):
                for k in freqcheck.KEYS:
                    assert cf[tag][c][k] == orig[c][k], (tag, c, k)
        for c in expand_cpus(rec["step"]["cpus"]):
            assert cf["w"][c]["scaling_max_freq"] == LOW
        self.check_restored(hw, orig)


def step_pids(job, step) -> list[int]:
    """The tasks (and their children) of one step of the job, in this cluster."""
    want = {f"SLURM_JOB_ID={job}".encode(), f"SLURM_STEP_ID={step}".encode()}
    pids = []
    for d in pathlib.Path("/proc").iterdir():
        try:
            env = set((d / "environ").read_bytes().split(b"\0")) if d.name.isdigit() else set()
        except OSError:
            continue
        if want <= env and not cmdline(d.name).startswith("slurmstepd"):
            pids.append(int(d.name))
    return pids


def kill9_stepd(job, step):
    """SIGKILL the step's slurmstepd (and then its orphaned tasks)."""
    pid = stepd_pid(job, step)
    assert pid, f"no slurmstepd for {job}.{step}"
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: "slurmstepd" not in cmdline(pid), "slurmstepd gone", 20)
    for p in step_pids(job, step):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def fenv(cluster, build_dir):
    env = FaultEnv(cluster, build_dir)
    env.tree()
    cluster.restart_slurmd()  # slurmd must see the plugin's job prolog and epilog
    try:
        yield env
    finally:
        print(f"\n[faults-freq] CPU checks {freqcheck.TALLY['checks']}, CPUs checked "
              f"{freqcheck.TALLY['cpus_checked']}, CPUs left throttled "
              f"{freqcheck.TALLY['cpus_left_throttled']}")
        cluster.write_plugstack(None)
        cluster.restart_slurmd()


@pytest.fixture
def fe(fenv):
    fenv.c.wait_idle(60)
    yield fenv
    fenv.c.wait_idle(60)


# --------------------------------------------------------------- 1. kill -9 of slurmstepd
@pytest.mark.parametrize("route", ["next-step", "epilog", "restore-tool"])
def test_kill9_stepd_in_throttled_phase(fe, route):
    """Step 0's slurmstepd is SIGKILLed inside a write phase: its CPU stays lowered
    until one of the design's routes puts it back: the next step on those CPUs (at its
    start, before its tasks), the job epilog, or joulestep-restore run by an admin."""
    hw, orig = fe.fresh()
    up, go = fe.flag("k9.up"), fe.flag("k9.go")
    nxt = (f"srun --overlap -n1 --energy-policy=phase:compress=0.6 sh -c "
           f"'{fe.cf('in')}; {fe.phase('begin', 'compress')}; {fe.cf('c')}; {fe.phase('end')}; "
           f"{fe.cf('after')}'" if route != "epilog" else "")
    job = fe.submit(f"""#!/bin/sh
#SBATCH -n1
srun --overlap -n1 --energy-policy=io-dvfs sh -c '{fe.phase("begin", "write")}; touch {up}; exec sleep 300' &
{fe.wait_sh(go)}
{nxt}
""")
    wait_for(up.exists, "step 0 in its write phase", 60)
    lowered = fe.wait_lowered()
    kill9_stepd(job, "0")
    assert fe.lowered() == lowered  # nobody restored it yet: the route below must
    if route == "restore-tool":
        res = subprocess.run([str(fe.restore_bin), "--state", str(fe.state), "--sysfs", str(hw)],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == f"restored {len(lowered)} CPU" + ("s" if len(lowered) != 1 else "")
        assert not freqcheck.throttled_cpus(hw, orig)  # at once, while the job still runs
    go.touch()
    out = fe.finish(job)
    if route != "epilog":
        rec = fe.records(job, ["1"])["1"]
        assert rec["step"]["base_freq_khz"] == FMAX  # the original, not step 0's cap
        cf = cf_lines(out)
        for c in range(fe.ncpus):
            for tag in ("in", "after"):
                for k in freqcheck.KEYS:
                    assert cf[tag][c][k] == orig[c][k], (route, tag, c, k)
        for c in expand_cpus(rec["step"]["cpus"]):
            assert cf["c"][c]["scaling_max_freq"] == LOWER
    fe.check_restored(hw, orig)
    fe.check_baseline(hw, orig)


def test_kill9_inner_step_while_the_batch_step_owns_the_cpus(fe):
    """Issue 23, defect 2: `sbatch --energy-policy=io-dvfs`, so the batch step owns every
    CPU of the job; srun step 0's slurmstepd is SIGKILLed inside a write phase. The next
    srun step (its start runs the journal's recovery) finds the dead owner and puts the
    CPUs back to what the live batch step expects, the original: it starts there, records
    it as its base, lowers from there and returns to it; so does the batch script after
    it. Before, recovery skipped the CPUs while the batch step lived, and step 1 took the
    dead step's cap as its base for the rest of the job."""
    hw, orig = fe.fresh()
    up, go = fe.flag("k9b.up"), fe.flag("k9b.go")
    job = fe.submit(f"""#!/bin/sh
#SBATCH -n1
srun --overlap -n1 sh -c '{fe.phase("begin", "write")}; touch {up}; exec sleep 300' &
{fe.wait_sh(go)}
srun --overlap -n1 sh -c '{fe.cf("in")}; {fe.phase("begin", "write")}; {fe.cf("w")}; {fe.phase("end")}; {fe.cf("after")}'
{fe.cf("batch")}
""", args=["--energy-policy=io-dvfs"])
    wait_for(up.exists, "step 0 in its write phase", 60)
    lowered = fe.wait_lowered()
    kill9_stepd(job, "0")
    assert fe.lowered() == lowered
    go.touch()
    out = fe.finish(job)
    rec = fe.records(job, ["1"])["1"]
    assert rec["step"]["base_freq_khz"] == FMAX
    cf = cf_lines(out)
    for c in range(fe.ncpus):
        for tag in ("in", "after", "batch"):
            for k in freqcheck.KEYS:
                assert cf[tag][c][k] == orig[c][k], (tag, c, k)
    for c in expand_cpus(rec["step"]["cpus"]):
        assert cf["w"][c]["scaling_max_freq"] == LOW
    fe.check_restored(hw, orig)


def test_cpu_unplugged_between_two_steps_on_one_policy(fe):
    """Issue 23, defect 8: one cpufreq policy covers cpu0 and cpu1. Step 0 lowers it in a
    write phase; cpu0 is then unplugged (its cpufreq link goes, as the kernel does), and
    step 1 starts on the same CPUs, reading only cpu1. Step 0 ends first, step 1 last.
    The journal must key the domain by its policy for both steps: keyed by the lowest
    readable CPU, step 1 saved step 0's cap as a second "original" under another key and,
    as the last owner of that key, made the cap permanent."""
    if fe.c.cpus < 2:
        pytest.skip("needs a node with 2 CPUs (one policy over both)")
    hw, orig = fe.fresh(cpus_per_policy=2)
    up0, go0, up1, go1 = (fe.flag(n) for n in ("up0.up", "up0.go", "up1.up", "up1.go"))
    job = fe.submit(f"""#!/bin/sh
#SBATCH -n1 -c2
srun --overlap -n1 -c2 --energy-policy=io-dvfs sh -c '{fe.phase("begin", "write")}; touch {up0}; {fe.wait_sh(go0)}; {fe.phase("end")}' &
S0=$!
{fe.wait_sh(up1)}
srun --overlap -n1 -c2 --energy-policy=io-dvfs sh -c 'touch {up1}.in; {fe.wait_sh(go1)}' &
S1=$!
i=0; while [ ! -e {up1}.in ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
touch {go0}; wait $S0; touch {up1}.s0done
wait $S1
""")
    wait_for(up0.exists, "step 0 in its write phase", 60)
    assert fe.wait_lowered() == [0, 1]
    link = hw / "devices/system/cpu/cpu0/cpufreq"
    target = os.readlink(link)
    os.unlink(link)  # cpu0 unplugged
    up1.touch()
    s0done = pathlib.Path(f"{up1}.s0done")
    wait_for(s0done.exists, "step 0 ended while step 1 runs", 60)
    go1.touch()
    fe.finish(job)
    os.symlink(target, link)  # back online, to check the files through both CPUs
    fe.check_restored(hw, orig)  # and no backup left in the journal


# --------------------------------------------------------------- 2. slurmd restarted
def test_slurmd_restart_during_throttled_phase(fe):
    hw, orig = fe.fresh()
    up, go = fe.flag("sd.up"), fe.flag("sd.go")
    job = fe.submit(f"""#!/bin/sh
#SBATCH -n1
{fe.phase("begin", "write")}
touch {up}
{fe.wait_sh(go)}
{fe.cf("mid")}
{fe.phase("end")}
{fe.cf("between")}
{fe.phase("begin", "write")}
{fe.cf("again")}
""", args=["--energy-policy=io-dvfs"])  # ends inside its second write phase
    wait_for(up.exists, "the write phase", 60)
    lowered = fe.wait_lowered()
    stepd = stepd_pid(job)
    fe.c.restart_slurmd(wait_idle=False)
    assert stepd_pid(job) == stepd  # the step lives on without its slurmd
    go.touch()
    out = fe.finish(job)
    cf = cf_lines(out)
    for c in lowered:
        assert cf["mid"][c]["scaling_max_freq"] == LOW
        assert cf["again"][c]["scaling_max_freq"] == LOW
    for c in range(fe.ncpus):
        for k in freqcheck.KEYS:
            assert cf["between"][c][k] == orig[c][k], (c, k)
    fe.check_restored(hw, orig)
    fe.check_baseline(hw, orig)


# --------------------------------------------------------------- 3. scancel, time limit, drain, segfault
@pytest.mark.parametrize("fault", ["scancel", "timelimit", "drain", "segfault"])
def test_fault_during_throttled_phase(fe, fault):
    """The fault hits step 0 inside its write phase; the batch step (monitor) prints the
    files after step 0 (where the job survives the fault)."""
    hw, orig = fe.fresh()
    up, go = fe.flag("f.up"), fe.flag("f.go")
    tail = {"segfault": 'exec python3 -c "import ctypes; ctypes.string_at(0)"',
            "drain": "exit 0"}.get(fault, "exec sleep 300")  # drain: the step ends in its phase
    job = fe.submit(f"""#!/bin/sh
#SBATCH -n1
srun -n1 --energy-policy=io-dvfs sh -c '{fe.phase("begin", "write")}; touch {up}; {fe.wait_sh(go)}; {tail}'
echo "SRUN $?"
{fe.cf("after")}
""")
    wait_for(up.exists, "the write phase", 60)
    fe.wait_lowered()
    state = "COMPLETED"
    try:
        if fault == "scancel":
            fe.c.scancel(job)
            state = "CANCELLED"
        elif fault == "timelimit":
            # the job's end time now (TimeLimit has minutes: 0:01 still waits for 1 min)
            res = fe.c.run(["scontrol", "update", f"JobId={job}",
                            "EndTime=" + time.strftime("%Y-%m-%dT%H:%M:%S")], timeout=30)
            assert res.returncode == 0, res.stderr
            state = "TIMEOUT"
        elif fault == "drain":
            res = fe.c.run(["scontrol", "update", f"NodeName={fe.c.node}", "State=DRAIN",
                            "Reason=ffreq-test"], timeout=30)
            assert res.returncode == 0, res.stderr
            wait_for(lambda: "DRAIN" in fe.c.node_state(), "the node draining", 30)
            go.touch()
        else:
            go.touch()
        out = fe.finish(job, state)
        if fault in ("drain", "segfault"):
            assert ("SRUN 0" in out) == (fault == "drain"), out
            for c in range(fe.ncpus):
                for k in freqcheck.KEYS:
                    assert cf_lines(out)["after"][c][k] == orig[c][k], (c, k)
        if fault != "scancel":
            rec = fe.records(job, ["0"])["0"]
            assert rec["phases"][0]["freq_khz"] == LOW
    finally:
        if fault == "drain":
            fe.c.run(["scontrol", "update", f"NodeName={fe.c.node}", "State=RESUME"], timeout=30)
    fe.check_restored(hw, orig)
    fe.check_baseline(hw, orig)


# --------------------------------------------------------------- 4. shared policies and CPUs
def test_two_steps_on_one_shared_policy(fe):
    """A cpufreq policy covers CPUs 0 and 1; two jobs of one CPU each get them, both in
    a write phase at once. Neither may touch the policy (it is the other's too): the
    files never change, and no backup is taken."""
    if fe.c.cpus < 2:
        pytest.skip("needs 2 CPUs")
    hw, orig = fe.fresh(cpus_per_policy=2)
    jobs, ups = [], []
    go = fe.flag("sp.go")
    for i in range(2):
        up = fe.flag(f"sp.up{i}")
        ups.append(up)
        jobs.append(fe.submit(f"""#!/bin/sh
#SBATCH -n1
{fe.phase("begin", "write")}
touch {up}
{fe.wait_sh(go)}
{fe.cf("w")}
{fe.phase("end")}
""", args=["--energy-policy=io-dvfs"]))
    for up in ups:
        wait_for(up.exists, "both write phases", 60)
    assert not freqcheck.throttled_cpus(hw, orig)
    assert not list(fe.state.glob("cpu*.orig"))
    go.touch()
    mine = []
    for job in jobs:
        out = fe.finish(job)
        rec = fe.records(job, ["batch"])["batch"]
        cpus = expand_cpus(rec["step"]["cpus"])
        assert len(cpus) == 1
        mine += cpus
        pol = cpus[0] - cpus[0] % 2
        assert f"freq: policy {pol} shared with CPUs outside the step" in rec["provenance"]["errors"]
        assert rec["step"]["base_freq_khz"] == FMAX
        for c in range(fe.ncpus):
            for k in freqcheck.KEYS:
                assert cf_lines(out)["w"][c][k] == orig[c][k], (job, c, k)
    assert mine[0] // 2 == mine[1] // 2 and mine[0] != mine[1]  # siblings of one policy
    fe.check_restored(hw, orig)


def test_nested_step_keeps_the_jobs_fixed_clock(fe):
    """sbatch --energy-policy=fixed:0.6: the batch step and the srun inside it own the
    same CPUs. The srun step's end must not restore the CPUs while the batch step, which
    set them to 0.6, still runs: only the last owner restores."""
    hw, orig = fe.fresh()
    job, out = fe.run_job(f"""#!/bin/sh
#SBATCH -n1
{fe.cf("b0")}
srun -n1 sh -c '{fe.cf("s")}'
{fe.cf("b1")}
""", args=["--energy-policy=fixed:0.6"])
    recs = fe.records(job, ["batch", "0"])
    cf = cf_lines(out)
    mine = expand_cpus(recs["batch"]["step"]["cpus"])
    assert expand_cpus(recs["0"]["step"]["cpus"]) == mine
    for c in mine:
        for tag in ("b0", "s", "b1"):
            assert cf[tag][c]["scaling_max_freq"] == LOWER, (tag, c)
    for step in ("batch", "0"):
        assert recs[step]["step"]["base_freq_khz"] == FMAX, step
        assert recs[step]["step"]["fixed_freq_khz"] == LOWER, step
    fe.check_restored(hw, orig)


def test_overlapping_steps_only_the_last_owner_restores(fe):
    """The batch step holds its CPU in a write phase (0.85) when its srun step starts
    on the same CPU with a compress phase (0.6). The srun step takes the original clock
    as its baseline (record), not the batch step's cap; its phase end and its step end
    give the batch step its cap back; the backup stays while the batch step owns the
    CPU; the batch step, the last owner, restores the original."""
    hw, orig = fe.fresh()
    mid, go = fe.flag("ov.mid"), fe.flag("ov.go")
    job = fe.submit(f"""#!/bin/sh
#SBATCH -n1
{fe.phase("begin", "write")}
{fe.cf("b_in")}
srun -n1 --energy-policy=phase:compress=0.6 sh -c '{fe.cf("s_in")}; {fe.phase("begin", "compress")}; {fe.cf("s_c")}; {fe.phase("end")}; {fe.cf("s_end")}'
{fe.cf("b_after")}
touch {mid}
{fe.wait_sh(go)}
{fe.phase("end")}
{fe.cf("b_end")}
""", args=["--energy-policy=io-dvfs"])
    wait_for(mid.exists, "the srun step's end", 90)
    lowered = fe.lowered()
    backups = sorted(p.name for p in fe.state.glob("cpu*.orig"))
    owners = {p.name: sorted(x.name for x in p.iterdir()) for p in fe.state.glob("cpu*.owners")}
    go.touch()
    out = fe.finish(job)
    recs = fe.records(job, ["batch", "0"])
    mine = expand_cpus(recs["batch"]["step"]["cpus"])
    assert lowered == mine  # after the srun step: still the batch step's cap
    assert backups == [f"cpu{mine[0]}.orig"]
    assert owners == {f"cpu{mine[0]}.owners": [f"job{job}.batch"]}, owners
    assert recs["0"]["step"]["base_freq_khz"] == recs["batch"]["step"]["base_freq_khz"] == FMAX
    cf = cf_lines(out)
    for c in mine:
        want = {"b_in": LOW, "s_in": LOW, "s_c": LOWER, "s_end": LOW, "b_after": LOW,
                "b_end": FMAX}
        for tag, khz in want.items():
            assert cf[tag][c]["scaling_max_freq"] == khz, (tag, c)
    fe.check_restored(hw, orig)
