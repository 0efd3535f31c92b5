"""What the step's cgroup tells the plugin (spank/js_cgroup_step.c; docs/design.md,
"The step's cgroup"), on the live cluster in each configuration (`site` tests:
linuxproc and cgroup, tests/cluster/conftest.py).

The truths are computed here, never taken from the plugin: the cpuset Slurm wrote for
the step (read by the job from its own cgroup, or its Cpus_allowed_list where there is
no cgroup), and the CPU time each workload process measured for itself (getrusage),
on a CPU it pinned itself to.
"""
from __future__ import annotations

import os
import pathlib
import pwd

import pytest

from nodeenv import NodeEnv
from procs import expand_cpus, freq_lines

pytestmark = [pytest.mark.cluster, pytest.mark.site]

FMAX, FMIN = 4000000, 800000
USER = "jsuser"
S = 1_000_000_000

# the step's cpuset as Slurm wrote it (cgroup v1: the cpuset hierarchy's
# cpuset.cpus; v2: cpuset.cpus.effective), else the task's affinity
TRUTH_CPUSET = r"""cs=$(sed -n 's/^[0-9]*:cpuset:\(.*\)/\1/p' /proc/self/cgroup)
u=$(sed -n 's/^0:://p' /proc/self/cgroup)
if [ -n "$cs" ] && [ "$cs" != / ] && [ -r "/sys/fs/cgroup/cpuset$cs/cpuset.cpus" ]; then
  echo "CPUSET $(cat /sys/fs/cgroup/cpuset$cs/cpuset.cpus)"
elif [ -n "$u" ] && [ "$u" != / ] && [ -r "/sys/fs/cgroup$u/cpuset.cpus.effective" ]; then
  echo "CPUSET $(cat /sys/fs/cgroup$u/cpuset.cpus.effective)"
else
  echo "CPUSET $(sed -n 's/^Cpus_allowed_list:\s*//p' /proc/self/status)"
fi
"""


def truth_cpuset(out: str) -> list[int]:
    line = next(l for l in out.splitlines() if l.startswith("CPUSET "))
    return expand_cpus(line.split()[1])


class CgEnv(NodeEnv):
    def __init__(self, cluster, build, name, **hw):
        super().__init__(cluster, build, name, FMAX, FMIN, **hw)
        self.configure()

    def configure(self, **extra):
        super().configure(cluster="jstest", **extra)
        self.snapshot_clocks()


@pytest.fixture
def cg(cluster, build_dir, slurm_config, request):
    if cluster.cpus < 2:
        pytest.skip("needs two CPUs")
    env = CgEnv(cluster, build_dir, f"jscg-{request.node.name.split('[')[0][-20:]}")
    try:
        yield env
        cluster.wait_idle()
        env.assert_restored()
    finally:
        cluster.write_plugstack(None)
        env.close()


def test_two_jobs_each_lower_exactly_their_own_cpuset(cg, slurm_config):
    """Two one-CPU io-dvfs jobs on the node at once, one in a write phase
    (0.85 fmax), the other in a compress phase (0.875 fmax): each job's CPU, the
    one Slurm's cpuset (or affinity) gave it, has exactly its job's clock, in
    both jobs' views; the records name those CPUs; with task/cgroup the plugin's
    cross-check agrees."""
    d = cg.c.user_dir(USER)
    for n in ("a.in", "b.in"):
        (d / n).unlink(missing_ok=True)

    def script(me, other, kind):
        return f"""#!/bin/sh
#SBATCH -n1 -c1
#SBATCH --energy-policy=io-dvfs
{TRUTH_CPUSET}
{cg.phase('begin', kind)}; touch {d}/{me}.in
i=0; while [ ! -e {d}/{other}.in ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
{cg.cat_freq(me)}; sleep 1; {cg.phase('end')}
"""
    jobs = {}
    for me, other, kind in (("a", "b", "write"), ("b", "a", "compress")):
        res, job = cg.c.sbatch(script(me, other, kind), user=USER)
        assert res.returncode == 0 and job, res.stderr
        jobs[me] = job
    for job in jobs.values():
        assert cg.c.wait_job(job, timeout=120) == "COMPLETED", cg.c.logs()
    out = {me: cg.c.job_output(j) for me, j in jobs.items()}
    cpus = {me: truth_cpuset(o) for me, o in out.items()}
    assert len(cpus["a"]) == 1 and len(cpus["b"]) == 1 and cpus["a"] != cpus["b"], cpus
    ca, cb = cpus["a"][0], cpus["b"][0]
    for me in ("a", "b"):
        fl = freq_lines(out[me])[me]
        assert fl[ca][1] == str(int(0.85 * FMAX)), (me, fl)
        assert fl[cb][1] == str(int(0.875 * FMAX)), (me, fl)
    for me, job in jobs.items():
        st = cg.wait_records(job, ["batch"])["batch"]["step"]
        assert expand_cpus(st["cpus"]) == cpus[me]
        assert st["cpuset_check"] == ("agrees" if slurm_config == "cgroup" else None), st


def test_cpuset_disagreement_changes_no_clock(cluster, build_dir, slurm_config):
    """The node's topology as the plugin reads it (the fake tree: cpu0 and cpu1
    two threads of one core) is not Slurm's (two cores): the plugin maps the
    job's core 0 to CPUs 0-1 where Slurm's cpuset is CPU 0. With task/cgroup it
    must trust neither: no clock changes in the write phase, not even CPU 0's,
    the record says why. (Without a cpuset there is nothing to check.)"""
    if slurm_config != "cgroup":
        pytest.skip("no step cpuset without task/cgroup")
    if cluster.cpus != 2:
        pytest.skip("the disagreement is built for a node of two CPUs")
    env = CgEnv(cluster, build_dir, "jscg-smt")
    try:
        topo = env.hw / "devices" / "system" / "cpu"
        for c in (0, 1):  # one package, one core of two threads
            for name, value in (("thread_siblings_list", "0-1"), ("physical_package_id", "0"),
                                ("core_id", "0")):
                f = topo / f"cpu{c}" / "topology" / name
                if f.exists():
                    os.chmod(f, 0o644)
                f.write_text(value + "\n")
        env.configure()
        script = f"""#!/bin/sh
#SBATCH -n1 -c1
#SBATCH --energy-policy=io-dvfs
{TRUTH_CPUSET}
{env.phase('begin', 'write')}; {env.cat_freq('in')}; {env.phase('end')}
"""
        job, out = env.run_job(script)
        assert truth_cpuset(out) == [0], out
        fl = freq_lines(out)["in"]
        for i in range(env.ncpus):  # nothing lowered, in the phase
            assert fl[i][1] == str(env.orig[i]["scaling_max_freq"]), fl
        st = env.wait_records(job, ["batch"])["batch"]["step"]
        assert st["cpuset_check"].startswith("disagrees: cgroup cpuset 0, mapped from Slurm's cores 0-1"), st
        log = cluster.log_dir.glob("slurmd*.log")
        assert sum(p.read_text(errors="replace").count(f"job {job} step batch: the step's cpuset")
                   for p in log) == 1
        cluster.wait_idle()
        env.assert_restored()
    finally:
        cluster.write_plugstack(None)
        env.close()


# a process that leaves the step's process tree (setsid, its parent exits at
# once: slurmstepd never reaps it) and burns ~1.5 s of CPU on the CPU it pins
# itself to, then writes the CPU time it measured for itself
ORPHAN = r"""python3 - {cpu} {out} <<'PY'
import os, sys, time, resource
cpu, out = int(sys.argv[1]), sys.argv[2]
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
os.sched_setaffinity(0, {{cpu}})
end = time.process_time() + 1.5
while time.process_time() < end:
    pass
ru = resource.getrusage(resource.RUSAGE_SELF)
open(out + ".tmp", "w").write("%d" % round((ru.ru_utime + ru.ru_stime) * 1e9))
os.rename(out + ".tmp", out)
PY
"""


def test_step_cpu_time_from_the_cgroup_per_package(cg, slurm_config):
    """A two-CPU job (one CPU on each fake package) whose work is done by a
    process slurmstepd never reaps, pinned to the step's second CPU. With a
    cgroup that counts CPU time per CPU (v1's cpuacct), the step's CPU time is at
    least the process's own, and all of it is on that CPU's package; without
    one, the reaped children's time (which misses it) is what there is, and the
    record says so."""
    d = cg.c.user_dir(USER)
    done = d / "orphan.ns"
    done.unlink(missing_ok=True)
    # pinned to the second CPU of the step's (the affinity Slurm gave the task)
    second = "$(sed -n 's/^Cpus_allowed_list:[[:space:]]*[0-9]*[-,]//p' /proc/self/status)"
    script = f"""#!/bin/sh
#SBATCH -n1 -c2
{TRUTH_CPUSET}
{ORPHAN.format(cpu=second, out=done)}
i=0; while [ ! -e {done} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
"""
    job, out = cg.run_job(script)
    cpus = truth_cpuset(out)
    assert len(cpus) == 2, out
    truth_ns = int(done.read_text())
    assert truth_ns > 1.2 * S
    rec = cg.wait_records(job, ["batch"])["batch"]
    st = rec["step"]
    pk = {p["package"]: p for p in rec["packages"]}
    assert len(pk) == 2, rec["packages"]  # one CPU on each package
    if slurm_config != "cgroup":
        assert st["cpu_time_source"] == "children", st
        return
    assert st["cpu_time_source"] in ("cgroup-percpu", "cgroup"), st
    # the orphan's own time, plus the shell's and python's start (well under 0.5 s)
    assert truth_ns <= st["cpu_time_ns"] <= truth_ns + 0.5 * S, (st["cpu_time_ns"], truth_ns)
    if st["cpu_time_source"] == "cgroup-percpu":
        # the fake tree: CPU c on package c (one CPU per package); pinned to cpus[1]
        busy, other = pk[cpus[1]], pk[cpus[0]]
        assert busy["step_cpu_ns"] >= truth_ns, rec["packages"]
        assert other["step_cpu_ns"] <= 0.5 * S, rec["packages"]
        assert busy["step_cpu_ns"] + other["step_cpu_ns"] == st["cpu_time_ns"]


def test_where_slurm_puts_the_task_in_the_cpuset_tree(cg, slurm_config):
    """Slurm 22.05 (cgroup/v1) puts a step's tasks in the step's cpuset itself,
    26.05 in a cpuset per task under it (step_S/task_N), and warns that cgroup/v1
    is deprecated. The plugin reads the step's own cpuset, which both have, and
    agrees with it on both."""
    if slurm_config != "cgroup":
        pytest.skip("no cpuset tree without task/cgroup")
    from harness import cgroup_support, slurm_version
    if cgroup_support()[0] != "cgroup/v1":
        pytest.skip("the layouts compared are cgroup v1's")
    job, out = cg.run_job("#!/bin/sh\n#SBATCH -n1 -c1\ngrep :cpuset: /proc/self/cgroup\n")
    path = out.strip().split(":", 2)[2]
    want = f"/slurm_{cg.c.node}/uid_{pwd.getpwnam(USER).pw_uid}/job_{job}/step_batch"
    new = not slurm_version().startswith("22.")
    assert path == want + ("/task_0" if new else ""), (slurm_version(), path)
    assert cg.wait_records(job, ["batch"])["batch"]["step"]["cpuset_check"] == "agrees"
    logs = "".join(f.read_text(errors="replace") for f in cg.c.log_dir.glob("slurmd*.log"))
    assert ("cgroup/v1 plugin is deprecated" in logs) == new
