"""Slurm accounting round trip on a live cluster with slurmdbd (docs/admin-guide.md,
"Slurm accounting (slurmdbd)"): job -> record -> `joulestep ingest --admin-comment`
-> sacct.

The module runs its own cluster with Cluster(accounting=True): slurmdbd on a private
MariaDB (tests/cluster/dbd.py), an account and a QOS created here, and the plugin on
a fake node (nodeenv.NodeEnv: only the job's own `advance` lines move the counters, so
the energy truth is the sum of the replies the job prints).

Truths: the account, QOS and partition are the ones this test created and submitted
to; the submit time is slurmctld's (scontrol show job), not sacct's; the energy is the
fake hardware's replies.
"""
from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

import procs
from harness import Cluster, make_workdir
from nodeenv import NodeEnv, USER

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "cli" / "src"))
from joulestep import slurmacct  # noqa: E402

pytestmark = pytest.mark.cluster

REPO = pathlib.Path(__file__).resolve().parents[2]
ACCOUNT, QOS, PARTITION = "jsacct", "jsqos", "debug"


@pytest.fixture(scope="module")
def dbenv(request, build_dir, cluster_users):
    workdir = make_workdir("pytest-dbd-")
    c = Cluster(workdir, accounting=True)
    env = NodeEnv(c, build_dir, "jsdbd", 2_400_000, 1_200_000)
    env.configure()   # before start: slurmd sees the plugin's job prolog at once
    failed = request.session.testsfailed
    try:
        c.start()
        c.dbd.add_account(ACCOUNT, users=[USER], qos=QOS)
        env.db = workdir / "js.db"
        procs.DEFAULT_CLUSTER = c
        yield env
    finally:
        procs.DEFAULT_CLUSTER = None
        env.close()
        c.stop()
        if request.session.testsfailed == failed:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"\n[dbd cluster] logs kept in {workdir}/log")


def cli(env, *args, ok=True):
    """The joulestep CLI as an admin runs it on the cluster (SLURM_CONF, Slurm on PATH)."""
    res = subprocess.run([str(REPO / ".venv" / "bin" / "joulestep"), "--format", "json",
                          "--db", str(env.db), *map(str, args)],
                         capture_output=True, text=True, env=env.c.env, timeout=300,
                         stdin=subprocess.DEVNULL)
    if ok:
        assert res.returncode == 0, res.stdout + res.stderr
    return res


def sacct(env, job, fields) -> list[str]:
    res = env.c.run(["sacct", "-X", "-n", "-P", "-j", str(job), "-o", fields], timeout=60,
                    check=True)
    return res.stdout.strip().split("|")


def run_energy_job(env, tag: str):
    """A job with a batch step and an srun step that each advance the fake node;
    returns (job id, slurmctld's submit time in s, (cpu_uj, dram_uj) truth)."""
    step_line = env.adv(tag + ".0", 2)
    assert "'" not in step_line
    script = f"""#!/bin/sh
#SBATCH -n1
{env.adv(tag + '.b', 1)}
srun -n1 sh -c '{step_line}'
"""
    job, out = env.run_job(script, args=[f"--account={ACCOUNT}", f"--qos={QOS}",
                                         f"--partition={PARTITION}"])
    advs = [json.loads(m) for m in re.findall(r"^ADV \S+ (\{.*\})$", out, re.M)]
    assert len(advs) == 2, out
    submit = env.c.job_info(job)["SubmitTime"]
    submit_s = int(time.mktime(time.strptime(submit, "%Y-%m-%dT%H:%M:%S")))
    env.wait_records(job, {"batch", "0"})
    truth = (sum(a["energy_cpu_uj"] for a in advs), sum(a["energy_dram_uj"] for a in advs))
    return job, submit_s, truth


def wait_sacct_ended(env, job, timeout=60):
    """slurmctld reports a job to slurmdbd asynchronously, and for a short job the
    end can arrive before the start (a placeholder row: uid 0, no partition, QOS
    Unknown, for about a second; slurmacct.AcctRow.complete): wait for the whole row."""
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        got = sacct(env, job, "State,Partition")
        if got[0] == "COMPLETED" and got[1]:
            return
        time.sleep(0.3)
    raise AssertionError(f"sacct still shows job {job} as {got} after {timeout} s")


def job_row(env, job) -> dict:
    import sqlite3
    con = sqlite3.connect(env.db)
    con.row_factory = sqlite3.Row
    rows = con.execute("SELECT * FROM jobs WHERE job_id = ?", (int(job),)).fetchall()
    assert len(rows) == 1, rows
    return dict(rows[0])


def test_ingest_fills_from_sacct_and_writes_admin_comment(dbenv):
    env = dbenv
    job, submit_s, (cpu, dram) = run_energy_job(env, "a")
    wait_sacct_ended(env, job)
    res = cli(env, "ingest", env.spool, "--admin-comment")
    acct = json.loads(res.stdout)["slurm_accounting"]
    assert acct["mode"] == "on" and acct["error"] is None, (acct, res.stderr)
    assert (acct["filled"], acct["not_found"], acct["comments_written"]) == (1, 0, 1), acct
    assert "slurm accounting" not in res.stderr  # nothing it could not fill

    row = job_row(env, job)
    assert (row["account"], row["partition"], row["qos"]) == (ACCOUNT, PARTITION, QOS)
    assert row["submit_time_ns"] == submit_s * 10**9
    assert row["sacct_ns"] is not None

    jobid, comment = sacct(env, job, "JobID,AdminComment")
    assert jobid == str(job)
    got = slurmacct.parse_summary(comment)
    recs = env.records(job)
    assert got["e_j"] == round((cpu + dram) / 1e6)
    assert got["cpu_j"] == round(cpu / 1e6) and got["dram_j"] == round(dram / 1e6)
    assert got["steps"] == 2 and "unmeasured" not in got
    assert got["policy"] == sorted({r["step"]["policy"] or "none" for r in recs.values()})
    assert row["admin_comment"] == comment

    # again: nothing new to look up, no sacct call, the comment stays
    acct2 = json.loads(cli(env, "ingest", env.spool, "--admin-comment").stdout)[
        "slurm_accounting"]
    assert (acct2["looked_up"], acct2["comments_written"]) == (0, 0), acct2
    assert sacct(env, job, "AdminComment") == [comment]


def test_another_tools_admin_comment_is_left_alone(dbenv):
    env = dbenv
    job, _, _ = run_energy_job(env, "f")
    wait_sacct_ended(env, job)
    env.c.dbd.sacctmgr("modify", "job", "where", f"jobid={job}", "set",
                       "AdminComment=js1:foreign")
    res = cli(env, "ingest", env.spool, "--admin-comment")
    acct = json.loads(res.stdout)["slurm_accounting"]
    assert (acct["filled"], acct["comments_foreign"], acct["comments_written"]) == (1, 1, 0), acct
    assert res.stderr.count("another tool's text") == 1
    assert sacct(env, job, "AdminComment") == ["js1:foreign"]
    assert job_row(env, job)["qos"] == QOS


def array_tasks(env, array_id) -> dict:
    """task id -> (job id, state), from slurmctld (scontrol), not sacct."""
    res = env.c.run(["scontrol", "show", "job", "-o", str(array_id)], timeout=15)
    out = {}
    for line in res.stdout.splitlines():
        info = dict(re.findall(r"(\S+?)=(\S*)", line))
        if info.get("ArrayTaskId", "").isdigit():
            out[int(info["ArrayTaskId"])] = (int(info["JobId"]), info["JobState"])
    return out


def test_job_of_an_array_task_is_that_task(dbenv):
    """`joulestep job A_T` is task T of array A: its own job ID (the records'), which
    is A for one task only (4_2 was read as 42: issue 25); truth from scontrol."""
    env = dbenv
    res, array_id = env.c.sbatch("#!/bin/sh\ntrue\n", user=USER,
                                 args=["--array=1-3", f"--account={ACCOUNT}",
                                       f"--qos={QOS}", f"--partition={PARTITION}"])
    assert res.returncode == 0 and array_id, res.stderr
    deadline = time.monotonic() + 90
    tasks = {}
    while time.monotonic() < deadline:
        tasks = array_tasks(env, array_id)
        if len(tasks) == 3 and all(s == "COMPLETED" for _, s in tasks.values()):
            break
        time.sleep(0.3)
    assert sorted(tasks) == [1, 2, 3] and all(s == "COMPLETED" for _, s in tasks.values()), tasks
    assert len({j for j, _ in tasks.values()}) == 3
    for t, (job, _) in tasks.items():
        env.wait_records(job, {"batch"})
    deadline = time.monotonic() + 60
    while any(sacct(env, f"{array_id}_{t}", "State") != ["COMPLETED"] for t in tasks):
        assert time.monotonic() < deadline, "sacct never showed the tasks as completed"
        time.sleep(0.3)
    cli(env, "ingest", env.spool)
    for t, (job, _) in tasks.items():
        got = json.loads(cli(env, "job", f"{array_id}_{t}").stdout)
        assert got["job"]["job_id"] == job, (t, tasks)
    t, (job, _) = next((t, v) for t, v in tasks.items() if v[0] != int(array_id))
    got = json.loads(cli(env, "job", f"{array_id}_{t}.batch").stdout)
    assert got["job"]["job_id"] == job
    r = cli(env, "job", f"{array_id}_7", ok=False)
    assert r.returncode == 1 and f"sacct knows no job {array_id}_7" in r.stderr


def test_without_slurmdbd_ingest_keeps_record_fields(dbenv):
    """slurmdbd down (last in this module): ingest lands the record, takes the
    prolog's account and partition, and says once what it could not fill."""
    env = dbenv
    job, _, _ = run_energy_job(env, "d")
    env.c._terminate(env.c._procs.pop("slurmdbd"))
    res = cli(env, "ingest", env.spool)
    out = json.loads(res.stdout)
    acct = out["slurm_accounting"]
    assert out["steps_new"] == 2
    assert acct["mode"] == "on" and acct["filled"] == 0 and acct["looked_up"] == 1, acct
    assert "sacct failed" in acct["error"]
    assert res.stderr.count("joulestep: ingest: slurm accounting:") == 1, res.stderr
    row = job_row(env, job)
    assert (row["account"], row["partition"]) == (ACCOUNT, PARTITION)
    assert row["qos"] is None and row["submit_time_ns"] is None and row["sacct_ns"] is None
