"""The live test cluster itself works: jobs and steps as unprivileged users, scancel,
node back to idle, clean and idempotent teardown. No plugin involved."""
import os
import pathlib
import pwd
import shutil
import socket
import subprocess

import pytest

from harness import MARKER_VAR, Cluster, hardware, make_workdir

pytestmark = pytest.mark.cluster


@pytest.fixture
def plain(cluster):
    """The session cluster with an empty plugstack and an idle node."""
    cluster.write_plugstack(None)
    cluster.wait_idle()
    yield cluster
    cluster.wait_idle()


def user_pids(user, pattern):
    res = subprocess.run(["pgrep", "-u", user, "-f", pattern], capture_output=True, text=True)
    return [int(p) for p in res.stdout.split()]


def test_node_is_idle_with_all_cores(plain):
    res = plain.run(["sinfo", "-h", "-N", "-o", "%N %T %c"], check=True)
    node, state, cpus = res.stdout.split()
    assert node == plain.node
    assert state == "idle"
    assert int(cpus) == plain.cpus == int(hardware()["CPUs"])


def test_single_task_step_is_bound_to_one_allocated_cpu(plain):
    if plain.task_plugin != "task/affinity":  # only chosen in a restricted cpuset
        assert os.sched_getaffinity(0) != set(range(plain.cpus))
    res = plain.srun(["-n1", "-c1", "sh", "-c",
                      "grep Cpus_allowed_list /proc/self/status; echo $SLURM_CPU_BIND_LIST"],
                     user="jsuser")
    assert res.returncode == 0, res.stderr
    if plain.task_plugin != "task/affinity":
        return
    allowed = res.stdout.split("\n")[0].split()[-1]
    assert allowed.isdigit() and 0 <= int(allowed) < plain.cpus


def test_batch_job_as_jsuser(plain):
    script = "#!/bin/sh\necho \"user=$(id -un) job=$SLURM_JOB_ID\"\necho answer=$((6 * 7))\n"
    res, job = plain.sbatch(script, user="jsuser", args=["--job-name=hello"])
    assert res.returncode == 0, res.stderr
    assert job is not None and job.isdigit()
    assert plain.wait_job(job) == "COMPLETED"
    info = plain.job_info(job)
    assert info["UserId"].startswith("jsuser(")
    assert info["ExitCode"] == "0:0"
    out = plain.job_output(job)
    assert f"user=jsuser job={job}" in out
    assert "answer=42" in out
    out_file = pathlib.Path(info["StdOut"])
    assert out_file.stat().st_uid == pwd.getpwnam("jsuser").pw_uid


def test_srun_step_as_jsuser_runs_every_task(plain):
    ntasks = plain.cpus
    res = plain.srun([f"-n{ntasks}", "sh", "-c", 'echo "task=$SLURM_PROCID user=$(id -un)"'],
                     user="jsuser")
    assert res.returncode == 0, res.stderr
    lines = sorted(res.stdout.split("\n")[:-1])
    assert lines == sorted(f"task={i} user=jsuser" for i in range(ntasks))


def test_batch_job_with_steps(plain):
    script = "#!/bin/sh\nsrun -n1 echo step-a\nsrun -n1 sh -c 'echo step-b $SLURM_STEP_ID'\n"
    res, job = plain.sbatch(script, user="jsuser")
    assert res.returncode == 0, res.stderr
    assert plain.wait_job(job) == "COMPLETED"
    out = plain.job_output(job).split("\n")
    assert "step-a" in out
    assert "step-b 1" in out


def test_failing_job_reports_exit_code(plain):
    res, job = plain.sbatch("#!/bin/sh\necho about to fail\nexit 3\n", user="jsother")
    assert res.returncode == 0, res.stderr
    assert plain.wait_job(job) == "FAILED"
    assert plain.job_info(job)["ExitCode"] == "3:0"
    assert "about to fail" in plain.job_output(job)


def test_scancel_kills_the_job_and_frees_the_node(plain):
    marker = f"sleep 3{os.getpid() % 1000:03d}"
    res, job = plain.sbatch(f"#!/bin/sh\necho started\n{marker}\n", user="jsuser")
    assert res.returncode == 0, res.stderr
    plain._wait_for("job to run", lambda: plain.job_state(job) == "RUNNING"
                    and user_pids("jsuser", marker), 30)

    # another unprivileged user may not cancel it
    other = plain.scancel(job, user="jsother")
    assert other.returncode != 0
    assert "denied" in other.stderr.lower() or "permission" in other.stderr.lower()
    assert plain.job_state(job) == "RUNNING"

    assert plain.scancel(job, user="jsuser").returncode == 0
    assert plain.wait_job(job) == "CANCELLED"
    plain.wait_idle()
    assert user_pids("jsuser", marker) == []


def test_write_plugstack_formats_and_clears(cluster, tmp_path):
    so = pathlib.Path("/usr/lib/x86_64-linux-gnu/slurm-wlm/spank_dummy.so")
    cluster.write_plugstack(so if so.exists() else "/bin/true", {"spool": "/x/y", "cluster": "demo"})
    lines = cluster.plugstack.read_text().splitlines()
    assert lines[-1].startswith("optional /")
    assert lines[-1].endswith(" spool=/x/y cluster=demo")
    cluster.write_plugstack(None)
    assert "optional" not in cluster.plugstack.read_text()


def test_public_path_copies_what_users_cannot_read(cluster):
    private = make_workdir("private-")
    try:
        os.chmod(private, 0o700)
        tool = private / "tool.sh"
        tool.write_text("#!/bin/sh\necho tool-ran\n")
        os.chmod(tool, 0o755)
        pub = cluster.public_path(tool)
        assert pub != tool
        res = cluster.run([pub], user="jsuser")
        assert res.returncode == 0 and res.stdout == "tool-ran\n", res.stderr
        assert cluster.public_path("/bin/sh") == pathlib.Path("/bin/sh").resolve()
    finally:
        shutil.rmtree(private)


def test_second_cluster_stops_cleanly_and_idempotently(cluster_users):
    workdir = make_workdir("stoptest-")
    c = Cluster(workdir)
    try:
        c.start()
        assert c.node_state() == "IDLE"
        ports = (c.ctld_port, c.slurmd_port)
        marker = f"sleep 7{os.getpid() % 1000:03d}"
        res, job = c.sbatch(f"#!/bin/sh\n{marker}\n", user="jsuser")
        assert res.returncode == 0, res.stderr
        c._wait_for("job to run", lambda: c.job_state(job) == "RUNNING", 30)
    finally:
        c.stop()
    c.stop()  # idempotent
    leftovers = []
    for d in pathlib.Path("/proc").iterdir():
        try:
            if d.name.isdigit() and f"{MARKER_VAR}={c.id}".encode() in (d / "environ").read_bytes():
                leftovers.append(d.name)
        except OSError:
            pass
    assert leftovers == []
    assert user_pids("jsuser", marker) == []
    for port in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("0.0.0.0", port))  # raises if a daemon still listens
    shutil.rmtree(workdir)
