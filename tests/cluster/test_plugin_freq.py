"""Frequency control of the joulestep SPANK plugin on the live Slurm cluster (issue 8:
defects 2, 3, 9, 10, 11 and 12).

Each test builds its own fake cpufreq tree (tests/fakehw/fakehw.py) so that it knows the
original settings, and checks the files themselves, from inside the job (the job prints
every CPU's cpufreq files with `fakehw.py read-cpufreq`) and after it. slurmd is restarted
once for the module with the plugin in plugstack.conf, so that the plugin's job epilog
runs (slurmd looks for plugins' job epilogs only at its start).
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess

import pytest

import fakehw
import spool
from procs import cmdline, expand_cpus, job_pids, stepd_pid, wait_for

pytestmark = pytest.mark.cluster

FMAX = 4000000   # 0.85·fmax and 0.6·fmax fall on the acpi 100 MHz steps
FMIN = 800000
USER = "jsuser"
REPO = pathlib.Path(__file__).resolve().parents[2]
KEYS = ("scaling_governor", "scaling_max_freq", "scaling_min_freq", "effective_khz")


class FreqEnv:
    def __init__(self, cluster, build: pathlib.Path):
        self.c = cluster
        self.root = cluster.workdir / "jsfreq"
        self.root.mkdir(mode=0o755, exist_ok=True)
        os.chmod(self.root, 0o755)
        self.spool = self.root / "spool"
        self.state = self.root / "state"
        self.sock = self.root / "sock"
        self.bin = cluster.public_path(build) / "bin"
        self.fakehw_py = cluster.public_path(REPO / "tests" / "fakehw" / "fakehw.py")
        self.so = build / "spank" / "joulestep.so"
        # enough fake CPUs for every Slurm core, and an even number (shared policies of 2)
        self.ncpus = max(2, cluster.cpus + cluster.cpus % 2)
        self.n = 0
        self.hw = None

    def tree(self, **kw) -> pathlib.Path:
        """A fresh fake tree (never reused: its original settings are known) that the
        plugin uses from now on."""
        self.n += 1
        hw = self.root / f"hw{self.n}"
        kw.setdefault("fmax_khz", FMAX)
        kw.setdefault("fmin_khz", FMIN)
        fakehw.create(str(hw), packages=1, cpus_per_package=self.ncpus, **kw)
        self.use(hw)
        return hw

    def use(self, hw, **extra):
        self.hw = hw
        args = {"spool": self.spool, "state": self.state, "sysfs": hw, "socket_dir": self.sock,
                "backend": "sysfs", "sample_ms": 200}
        args.update(extra)
        self.c.write_plugstack(self.so, args)

    def files(self, cpu, hw=None) -> dict:
        return fakehw.read_cpufreq(str(hw or self.hw), cpu)

    def snapshot(self, hw=None) -> dict:
        return {c: self.files(c, hw) for c in range(self.ncpus)}

    def set_file(self, cpu, name, value):
        fakehw.write_in_place(str(self.hw / "devices/system/cpu" / f"cpu{cpu}" / "cpufreq" / name),
                              f"{value}\n")

    def cf(self, tag) -> str:
        """Shell line: print every CPU's cpufreq files (JSON), tagged."""
        return "; ".join(f'echo "CF {tag} {c} $(python3 {self.fakehw_py} read-cpufreq {self.hw} {c})"'
                         for c in range(self.ncpus))

    def phase(self, *args) -> str:
        return f"{self.bin}/joulestep-phase " + " ".join(str(a) for a in args)

    def run_job(self, script, args=(), state="COMPLETED", timeout=90):
        return self.c.run_job(script, USER, args, timeout, state)

    def records(self, job, steps):
        return spool.wait_records(self.spool, job, steps, self.c.logs)

    def assert_files(self, orig, hw=None):
        now = self.snapshot(hw)
        for c in range(self.ncpus):
            for k in KEYS:
                assert now[c][k] == orig[c][k], (c, k, now[c][k], orig[c][k])


def cf_lines(out: str) -> dict:
    """tag -> {cpu: files dict} from the job's CF lines."""
    res = {}
    for m in re.finditer(r"^CF (\S+) (\d+) (\{.*\})$", out, re.M):
        res.setdefault(m.group(1), {})[int(m.group(2))] = json.loads(m.group(3))
    return res


@pytest.fixture(scope="module")
def fenv(cluster, build_dir):
    env = FreqEnv(cluster, build_dir)
    env.tree()
    cluster.restart_slurmd()  # slurmd must see the plugin's job epilog
    try:
        yield env
    finally:
        cluster.write_plugstack(None)
        cluster.restart_slurmd()


@pytest.fixture
def fe(fenv):
    fenv.c.wait_idle()
    yield fenv
    fenv.c.wait_idle()


# ------------------------------------------------------------------ defect 9
@pytest.mark.site
def test_phase_end_restores_each_cpus_original_settings(fe):
    """A site caps scaling_max_freq below cpuinfo_max (turbo off). Ending a throttled
    phase puts back exactly what was there: the governor is never changed, the cap is
    neither lost nor raised, and a phase asking for more than the cap gets the cap."""
    hw = fe.tree()
    cap = 3600000
    for c in range(fe.ncpus):
        fe.set_file(c, "scaling_max_freq", cap)
    orig = fe.snapshot()
    script = f"""#!/bin/sh
#SBATCH -n1
{fe.cf("before")}
{fe.phase("begin", "write")}
{fe.cf("write")}
{fe.phase("end")}
{fe.cf("between")}
{fe.phase("begin", "compress")}
{fe.cf("compress")}
{fe.phase("end")}
{fe.cf("after")}
"""
    job, out = fe.run_job(script, args=["--energy-policy=phase:write=0.85,compress=0.95"])
    rec = fe.records(job, ["batch"])["batch"]
    cf = cf_lines(out)
    mine = expand_cpus(rec["step"]["cpus"])
    assert len(mine) >= 1
    for c in range(fe.ncpus):
        o = orig[c]
        assert cf["before"][c]["scaling_governor"] == o["scaling_governor"] == "schedutil"
        for tag in ("between", "after"):
            for k in KEYS:
                assert cf[tag][c][k] == o[k], (tag, c, k)
        if c in mine:
            assert cf["write"][c]["scaling_max_freq"] == int(0.85 * FMAX)
            assert cf["write"][c]["effective_khz"] == int(0.85 * FMAX)
            assert cf["write"][c]["scaling_governor"] == "schedutil"   # never switched
            assert cf["compress"][c]["scaling_max_freq"] == cap         # 0.95·fmax > cap
        else:
            for tag in ("write", "compress"):
                for k in KEYS:
                    assert cf[tag][c][k] == o[k], (tag, c, k)
    assert rec["step"]["base_freq_khz"] == cap
    ph = {p["kind"]: p for p in rec["phases"]}
    assert ph["write"]["freq_khz"] == int(0.85 * FMAX)
    assert ph["compress"]["freq_khz"] == cap
    fe.assert_files(orig, hw)


def test_fixed_policy_records_the_original_clock(fe):
    hw = fe.tree()
    orig = fe.snapshot()
    job, out = fe.run_job(f"#!/bin/sh\n#SBATCH -n1\n{fe.cf('in')}\n",
                          args=["--energy-policy=fixed:0.6"])
    rec = fe.records(job, ["batch"])["batch"]
    assert rec["step"]["base_freq_khz"] == FMAX          # the original clock, not 0.6·fmax
    assert rec["step"]["fixed_freq_khz"] == int(0.6 * FMAX)
    cf = cf_lines(out)["in"]
    for c in expand_cpus(rec["step"]["cpus"]):
        assert cf[c]["effective_khz"] == int(0.6 * FMAX)
        assert cf[c]["scaling_max_freq"] == int(0.6 * FMAX)
        assert cf[c]["scaling_governor"] == orig[c]["scaling_governor"]
    fe.assert_files(orig, hw)


@pytest.mark.parametrize("variant, kw, base, nominal", [
    ("pstate", dict(base_khz=3000000), FMAX, 3000000),        # intel_pstate base_frequency
    ("acpi", dict(acpi_turbo=True), FMAX + 1000, FMAX),       # acpi-cpufreq turbo entry
    ("acpi", dict(), FMAX, FMAX),                              # no turbo entry: the top step
])
@pytest.mark.parametrize("policy", ["monitor", "io-dvfs"])
def test_nominal_clock_recorded(fe, variant, kw, base, nominal, policy):
    fe.tree(variant=variant, **kw)
    job, _ = fe.run_job("#!/bin/sh\n#SBATCH -n1\ntrue\n", args=[f"--energy-policy={policy}"])
    st = fe.records(job, ["batch"])["batch"]["step"]
    assert st["base_freq_khz"] == base
    assert st["nominal_freq_khz"] == nominal


def test_faster_cpu_keeps_its_own_maximum(fe):
    """Hybrid cores: CPU 1's maximum is above CPU 0's. A throttled phase lowers each to
    the ratio of its own maximum, and ending it gives each its own maximum back."""
    if fe.c.cpus < 2:
        pytest.skip("needs a step with 2 CPUs")
    hw = fe.tree(variant="pstate")
    fast = FMAX + 400000
    fe.set_file(1, "cpuinfo_max_freq", fast)
    fe.set_file(1, "scaling_max_freq", fast)
    orig = fe.snapshot()
    script = f"""#!/bin/sh
#SBATCH -n1 -c2
{fe.phase("begin", "write")}
{fe.cf("write")}
{fe.phase("end")}
{fe.cf("after")}
"""
    job, out = fe.run_job(script, args=["--energy-policy=io-dvfs"])
    rec = fe.records(job, ["batch"])["batch"]
    assert {0, 1} <= set(expand_cpus(rec["step"]["cpus"]))
    cf = cf_lines(out)
    assert cf["write"][0]["scaling_max_freq"] == int(0.85 * FMAX)
    assert cf["write"][1]["scaling_max_freq"] == int(0.85 * fast)
    assert cf["after"][0]["scaling_max_freq"] == FMAX
    assert cf["after"][1]["scaling_max_freq"] == fast
    fe.assert_files(orig, hw)


# ------------------------------------------------------ issue 23, defect 3
@pytest.mark.site
def test_smt_siblings_numbered_far_apart_follow_their_core(fe, slurm_config):
    """SMT as on most two-socket servers: the fake tree has twice as many CPUs as Slurm
    has cores, and core k's second thread is CPU k + m (cpu0 and cpu<m>). Slurm gives the
    step its cores in its own numbering; the plugin lowers every thread of each, and no
    other CPU. With task/cgroup, Slurm's cpuset holds the host's real CPUs 0..cpus-1 (it
    has no second threads): the plugin's mapping disagrees with it, so it trusts neither
    and changes no clock, and the record says why."""
    m = fe.ncpus
    hw = fe.root / f"hw-smt{fe.n}"
    fe.n += 1
    fakehw.create(str(hw), packages=1, cpus_per_package=2 * m, fmax_khz=FMAX, fmin_khz=FMIN)
    for c in range(2 * m):
        (hw / "devices/system/cpu" / f"cpu{c}" / "topology" / "thread_siblings_list").write_text(
            f"{c % m},{c % m + m}\n")
    fe.use(hw)
    every = range(2 * m)
    orig = {c: fe.files(c) for c in every}
    show = "; ".join(f'echo "CF in {c} $(python3 {fe.fakehw_py} read-cpufreq {hw} {c})"' for c in every)
    job, out = fe.run_job(f"#!/bin/sh\n#SBATCH -n1 --exclusive\n{show}\n",
                          args=["--energy-policy=fixed:0.6"])
    # the truth: the node's Slurm cores 0..cpus-1 (exclusive), each with both threads
    want = {k for k in range(fe.c.cpus)} | {k + m for k in range(fe.c.cpus)}
    rec = fe.records(job, ["batch"])["batch"]
    assert set(expand_cpus(rec["step"]["cpus"])) == want
    cf = cf_lines(out)["in"]
    lowered = want if slurm_config != "cgroup" else set()
    if slurm_config == "cgroup":
        real = "0" if fe.c.cpus == 1 else f"0-{fe.c.cpus - 1}"  # the step has every core
        assert rec["step"]["cpuset_check"].startswith(f"disagrees: cgroup cpuset {real}, "), rec["step"]
    for c in every:
        khz = int(0.6 * FMAX) if c in lowered else orig[c]["scaling_max_freq"]
        assert cf[c]["scaling_max_freq"] == khz, (c, cf[c])
    for c in every:
        for k in KEYS:
            assert fe.files(c)[k] == orig[c][k], (c, k)


# ------------------------------------------------------------------ defect 10
def test_shared_policy_is_never_lowered(fe):
    """One cpufreq policy covers 2 CPUs. A one-CPU step shares its policy with a CPU
    outside the step: its clock is left alone and the record says why."""
    hw = fe.tree(cpus_per_policy=2)
    orig = fe.snapshot()
    script = f"""#!/bin/sh
#SBATCH -n1
{fe.phase("begin", "write")}
{fe.cf("write")}
{fe.phase("end")}
"""
    job, out = fe.run_job(script, args=["--energy-policy=io-dvfs"])
    rec = fe.records(job, ["batch"])["batch"]
    mine = expand_cpus(rec["step"]["cpus"])
    assert len(mine) == 1
    cf = cf_lines(out)["write"]
    for c in range(fe.ncpus):
        for k in KEYS:
            assert cf[c][k] == orig[c][k], (c, k)
    pol = mine[0] - mine[0] % 2
    assert f"freq: policy {pol} shared with CPUs outside the step" in rec["provenance"]["errors"]
    assert rec["phases"][0]["freq_khz"] is None
    assert rec["step"]["base_freq_khz"] == FMAX
    fe.assert_files(orig, hw)

    # a step holding the whole policy may lower it
    if fe.c.cpus < 2:
        return
    job, out = fe.run_job(script.replace("#SBATCH -n1", "#SBATCH -n1 -c2"),
                          args=["--energy-policy=io-dvfs"])
    rec = fe.records(job, ["batch"])["batch"]
    assert {0, 1} <= set(expand_cpus(rec["step"]["cpus"]))
    cf = cf_lines(out)["write"]
    assert cf[0]["scaling_max_freq"] == cf[1]["scaling_max_freq"] == int(0.85 * FMAX)
    assert not [e for e in rec["provenance"]["errors"] if "shared" in e]
    assert rec["phases"][0]["freq_khz"] == int(0.85 * FMAX)
    fe.assert_files(orig, hw)


# ------------------------------------------------------------------ defect 11
def test_slurm_cpu_freq_request_makes_joulestep_step_aside(fe):
    hw = fe.tree()
    orig = fe.snapshot()
    res = fe.c.srun(["-n1", "--cpu-freq=High", "--energy-policy=fixed:0.6", "sh", "-c",
                     f'echo JOB $SLURM_JOB_ID; {fe.cf("in")}; {fe.phase("begin", "write")}; '
                     f'{fe.cf("write")}; {fe.phase("end")}'], user=USER)
    assert res.returncode == 0, res.stderr + fe.c.logs()
    job = re.search(r"^JOB (\d+)$", res.stdout, re.M).group(1)
    rec = fe.records(job, ["0"])["0"]
    cf = cf_lines(res.stdout)
    for tag in ("in", "write"):
        for c in range(fe.ncpus):
            for k in KEYS:
                assert cf[tag][c][k] == orig[c][k], (tag, c, k)
    assert rec["provenance"]["freq_control"] == "slurm-cpu-freq"
    assert rec["step"]["base_freq_khz"] == FMAX
    assert rec["step"]["fixed_freq_khz"] is None
    assert rec["phases"][0]["freq_khz"] is None
    # sbatch --cpu-freq: the batch step, and the sruns inside it, are Slurm's too
    job, out = fe.run_job(f"#!/bin/sh\n#SBATCH -n1\n{fe.cf('b')}\nsrun -n1 sh -c '{fe.cf('s')}'\n",
                          args=["--cpu-freq=High", "--energy-policy=fixed:0.6"])
    recs = fe.records(job, ["batch", "0"])
    for step in ("batch", "0"):
        assert recs[step]["provenance"]["freq_control"] == "slurm-cpu-freq", step
    cf = cf_lines(out)
    for tag in ("b", "s"):
        for c in range(fe.ncpus):
            for k in KEYS:
                assert cf[tag][c][k] == orig[c][k], (tag, c, k)
    # without --cpu-freq the same step is throttled (the request, not the policy, decided)
    res = fe.c.srun(["-n1", "--energy-policy=fixed:0.6", "sh", "-c",
                     f'echo JOB $SLURM_JOB_ID; {fe.cf("in")}'], user=USER)
    assert res.returncode == 0, res.stderr
    job = re.search(r"^JOB (\d+)$", res.stdout, re.M).group(1)
    rec = fe.records(job, ["0"])["0"]
    assert rec["provenance"]["freq_control"] == "joulestep"
    for c in expand_cpus(rec["step"]["cpus"]):
        assert cf_lines(res.stdout)["in"][c]["scaling_max_freq"] == int(0.6 * FMAX)
    fe.assert_files(orig, hw)


# ------------------------------------------------------------------ defects 2 and 3
def test_clock_changes_open_no_file(fe):
    """Strace the step's slurmstepd while its job sends 10 throttling phases: no
    cpufreq file is opened for a clock change (state read once at step start), and the
    step thread js-step opens nothing at all (it writes through descriptors opened by
    slurmstepd's main thread)."""
    if not shutil.which("strace"):
        pytest.fail("strace is needed (apt-get install strace)")
    hw = fe.tree()
    orig = fe.snapshot()
    d = fe.c.user_dir(USER)
    ready, go, done = d / "oc.ready", d / "oc.go", d / "oc.done"
    for f in (ready, go, done):
        f.unlink(missing_ok=True)
    n = 10
    script = f"""#!/bin/sh
#SBATCH -n1
touch {ready}
i=0; while [ ! -e {go} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
for k in $(seq {n}); do {fe.phase("begin", "write")}; {fe.phase("end")}; done
touch {done}
i=0; while [ ! -e {go}.2 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
"""
    res, job = fe.c.sbatch(script, user=USER, args=["--energy-policy=io-dvfs"])
    assert res.returncode == 0, res.stderr
    wait_for(ready.exists, "job start")
    pid = stepd_pid(job)
    assert pid
    tids = {t.name: (t / "comm").read_text().strip() for t in pathlib.Path(f"/proc/{pid}/task").iterdir()}
    step_tids = [int(t) for t, comm in tids.items() if comm == "js-step"]
    assert len(step_tids) == 1, tids
    trace = fe.root / f"strace.{job}"
    st = subprocess.Popen(["strace", "-f", "-e", "trace=open,openat,openat2,creat", "-o", str(trace),
                           "-p", str(pid)], stderr=subprocess.PIPE, text=True)
    try:
        line = st.stderr.readline()  # "strace: Process N attached with K threads"
        assert "attached" in line, line
        go.touch()
        wait_for(done.exists, "the job's phases", 60)
    finally:
        st.send_signal(signal.SIGINT)
        st.wait(30)
    (d / "oc.go.2").touch()
    assert fe.c.wait_job(job) == "COMPLETED"
    rec = fe.records(job, ["batch"])["batch"]
    assert [p["freq_khz"] for p in rec["phases"]] == [int(0.85 * FMAX)] * n
    lines = trace.read_text().splitlines()
    hw_opens = [l for l in lines if str(hw) in l]
    assert hw_opens == [], hw_opens[:10]
    # the step thread opens nothing but /proc/<pid>/stat, relative to the /proc
    # descriptor opened at step start, to check a connecting peer (js_server.c)
    thread_opens = [l for l in lines if int(l.split()[0]) in step_tids
                    and not re.search(r'openat\(\d+, "\d+/stat", ', l)]
    assert thread_opens == [], thread_opens[:10]
    fe.assert_files(orig, hw)
    (d / "oc.go.2").unlink(missing_ok=True)


def _kill_batch_stepd(fe, job):
    """SIGKILL the batch step's slurmstepd (and the script and sleep it leaves
    behind), then end the job: only the job epilog runs after it."""
    pid = stepd_pid(job)
    assert pid
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not cmdline(pid) or "slurmstepd" not in cmdline(pid), "slurmstepd gone", 10)
    for p in job_pids(job):  # the orphaned script and its sleep
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    fe.c.scancel(job)
    fe.c.wait_job(job)


# ------------------------------------------------------------------ defect 12
@pytest.mark.site
def test_killed_slurmstepd_is_restored_by_the_job_epilog(fe):
    """slurmstepd is SIGKILLed while a write phase holds its CPU down; no other step
    ever runs on the node. The job's epilog restores the CPU from the journal."""
    hw = fe.tree()
    orig = fe.snapshot()
    flag = fe.c.user_dir(USER) / "epi-phase"
    flag.unlink(missing_ok=True)
    script = f"""#!/bin/sh
#SBATCH -n1
#SBATCH --energy-policy=io-dvfs
{fe.phase("begin", "write")}
touch {flag}
sleep 300
"""
    res, job = fe.c.sbatch(script, user=USER)
    assert res.returncode == 0, res.stderr
    wait_for(flag.exists, "the write phase")
    lowered = [c for c in range(fe.ncpus) if fe.files(c)["effective_khz"] == int(0.85 * FMAX)]
    assert len(lowered) == 1
    _kill_batch_stepd(fe, job)
    # no further step: only the epilog can put the clock back
    wait_for(lambda: fe.files(lowered[0])["effective_khz"] == orig[lowered[0]]["effective_khz"],
             "the epilog restoring the CPU", 60)
    fe.c.wait_idle(60)
    fe.assert_files(orig, hw)
    assert not list(fe.state.glob("cpu*.orig"))


# ------------------------------------------------------- issue 24, part 4
UNC_MAX, UNC_MIN, UNC_IO_MHZ = 2400000, 800000, 1200


@pytest.mark.parametrize("layout", ["classic", "tpmi"])
def test_uncore_lowered_in_write_and_flush_of_whole_packages_only(fe, layout):
    """+uncore-io with uncore_io_mhz=1200: an exclusive step owns package 0
    (every Slurm core maps there); package 1's CPUs are outside every step.
    Package 0's uncore max is 1.2 GHz exactly during write and flush phases,
    back to its own value between them, in a compress nested in the flush
    (not an I/O kind: docs/phase-protocol.md, "Blocking and overlapping
    I/O") and after the job; package 1's is never touched; the record says
    which phase set what and why package 1 was left alone."""
    fe.n += 1
    hw = fe.root / f"hw{fe.n}"
    fakehw.create(str(hw), packages=2, cpus_per_package=fe.c.cpus, fmax_khz=FMAX,
                  fmin_khz=FMIN, uncore=layout, uncore_min_khz=UNC_MIN,
                  uncore_max_khz=UNC_MAX)
    fe.use(hw, uncore_io_mhz=UNC_IO_MHZ)
    base = hw / "devices/system/cpu/intel_uncore_frequency"
    doms = sorted(os.listdir(base))
    assert len(doms) == 2
    pkg = {d: (0 if d in ("package_00_die_00", "uncore00") else 1) for d in doms}
    show = lambda tag: "; ".join(f'echo "UNC {tag} {d} $(cat {base}/{d}/max_freq_khz)"'
                                 for d in doms)
    script = f"""#!/bin/sh
#SBATCH --exclusive
{show("before")}
{fe.phase("begin", "checkpoint")}
{show("checkpoint")}
{fe.phase("begin", "flush")}
{show("flush")}
{fe.phase("begin", "compress")}
{show("flush-compress")}
{fe.phase("end")}
{fe.phase("end")}
{show("checkpoint-again")}
{fe.phase("end")}
{fe.phase("begin", "write")}
{show("write")}
{fe.phase("end")}
{show("after")}
"""
    job, out = fe.run_job(script, args=["--energy-policy=io-dvfs+uncore-io"])
    seen = {(m.group(1), m.group(2)): int(m.group(3))
            for m in re.finditer(r"^UNC (\S+) (\S+) (\d+)$", out, re.M)}
    low = {"flush", "write"}
    for tag in ("before", "checkpoint", "flush", "flush-compress", "checkpoint-again", "write",
                "after"):
        for d in doms:
            want = UNC_IO_MHZ * 1000 if pkg[d] == 0 and tag in low else UNC_MAX
            assert seen[(tag, d)] == want, (tag, d, out)
    for d in doms:   # after the job: the original, and nothing left in the journal
        assert int((base / d / "max_freq_khz").read_text()) == UNC_MAX
        assert int((base / d / "min_freq_khz").read_text()) == UNC_MIN
    assert not list(fe.state.glob("uncore-*"))
    rec = fe.records(job, ["batch"])["batch"]
    by_kind = {p["kind"]: p for p in rec["phases"]}
    assert by_kind["write"]["uncore_max_khz"] == UNC_IO_MHZ * 1000
    assert by_kind["flush"]["uncore_max_khz"] == UNC_IO_MHZ * 1000
    assert "uncore_max_khz" not in by_kind["checkpoint"]
    errs = rec["provenance"]["errors"]
    other = [d for d in doms if pkg[d] == 1][0]
    assert any(f"package 1 has CPUs outside the step; its uncore clock ({other}) left alone" in e
               for e in errs), errs


def test_uncore_not_allowed_without_the_admin_bound(fe):
    """Without uncore_io_mhz= the term is refused at submission, naming the key."""
    fe.n += 1
    hw = fe.root / f"hw{fe.n}"
    fakehw.create(str(hw), packages=1, cpus_per_package=fe.c.cpus, fmax_khz=FMAX,
                  fmin_khz=FMIN, uncore="classic")
    fe.use(hw)
    res, job = fe.c.sbatch("#!/bin/sh\ntrue\n", USER, ["--energy-policy=io-dvfs+uncore-io"])
    assert res.returncode != 0 and job is None
    assert "uncore_io_mhz" in res.stderr


def test_killed_slurmstepd_uncore_restored_by_the_job_epilog(fe):
    """As for the cores: slurmstepd is SIGKILLed inside a write phase that
    holds the package's uncore down; the job epilog restores it from the
    journal and removes the entry."""
    fe.n += 1
    hw = fe.root / f"hw{fe.n}"
    fakehw.create(str(hw), packages=1, cpus_per_package=fe.c.cpus, fmax_khz=FMAX,
                  fmin_khz=FMIN, uncore="tpmi", uncore_min_khz=UNC_MIN, uncore_max_khz=UNC_MAX)
    fe.use(hw, uncore_io_mhz=UNC_IO_MHZ)
    f = hw / "devices/system/cpu/intel_uncore_frequency/uncore00/max_freq_khz"
    flag = fe.c.user_dir(USER) / "epi-uncore"
    flag.unlink(missing_ok=True)
    script = f"""#!/bin/sh
#SBATCH --exclusive
#SBATCH --energy-policy=monitor+uncore-io
{fe.phase("begin", "write")}
touch {flag}
sleep 300
"""
    res, job = fe.c.sbatch(script, user=USER)
    assert res.returncode == 0, res.stderr
    wait_for(flag.exists, "the write phase")
    assert int(f.read_text()) == UNC_IO_MHZ * 1000
    assert list(fe.state.glob("uncore-*"))
    _kill_batch_stepd(fe, job)
    wait_for(lambda: int(f.read_text()) == UNC_MAX, "the epilog restoring the uncore", 60)
    fe.c.wait_idle(60)
    assert not list(fe.state.glob("uncore-*"))
