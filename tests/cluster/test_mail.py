"""joulestep-mail under a real slurmctld (issue 25): the environment Slurm gives
MailProg names the job, its user, the mail type and the array task; the subject,
which holds the job name, is not read.

The cluster's MailProg is a root-owned script that runs the real wrapper with
stand-ins for `mail` (keeps each mail) and `joulestep` (prints which job and user
it was asked for): what is tested is which job the wrapper picks, from what
slurmctld passes.  Truth: job IDs from sbatch and scontrol (ArrayTaskId -> JobId).
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import time

import pytest

import procs
from harness import Cluster, make_workdir
from nodeenv import USER

pytestmark = pytest.mark.cluster

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mailc(request, cluster_users, slurm_config):
    workdir = make_workdir("pytest-mail-")
    box = workdir / "mailbox"
    box.mkdir(mode=0o755)
    (box / "mail").write_text(f"""#!/bin/sh
f=$(mktemp {box}/m.XXXXXX)
{{ printf '%s\\n' "$@"; echo ---; cat; }} > "$f.tmp" && mv "$f.tmp" "$f.msg" && rm -f "$f"
""")
    (box / "joulestep").write_text(f"""#!/bin/sh
echo "$*" >> {box}/calls
[ "$1" = job ] && [ "$3" = --user ] && echo "SUMMARY OF JOB $2 FOR $4"
""")
    prog = box / "mailprog"
    prog.write_text(f"""#!/bin/sh
JOULESTEP_MAIL={box}/mail JOULESTEP_BIN={box}/joulestep JOULESTEP_INGEST_WAIT=0
export JOULESTEP_MAIL JOULESTEP_BIN JOULESTEP_INGEST_WAIT
exec {REPO}/etc/mail/joulestep-mail "$@"
""")
    for f in ("mail", "joulestep", "mailprog"):
        (box / f).chmod(0o755)
    c = Cluster(workdir, mail_prog=str(prog), config=slurm_config)
    failed = request.session.testsfailed
    try:
        c.start()
        procs.DEFAULT_CLUSTER = c
        c.box = box
        yield c
    finally:
        procs.DEFAULT_CLUSTER = None
        c.stop()
        if request.session.testsfailed == failed:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"\n[mail cluster] logs kept in {workdir}/log")


def mails(c, job_id: str, n: int, timeout: float = 60) -> list[str]:
    """The n mails whose subject names job_id (Job_id=ID), waited for."""
    deadline = time.monotonic() + timeout
    got: list[str] = []
    while time.monotonic() < deadline:
        got = [p.read_text() for p in sorted(c.box.glob("*.msg"))]
        got = [m for m in got if re.search(rf"Job_id={job_id}[_ ]", m.split("\n", 2)[1])]
        if len(got) >= n:
            return got
        time.sleep(0.3)
    raise AssertionError(f"{len(got)} of {n} mails for job {job_id}: {got}\n{c.logs()}")


def submit(c, *args) -> str:
    res, job = c.sbatch("#!/bin/sh\ntrue\n", user=USER,
                        args=[f"--mail-user={USER}", *args])
    assert res.returncode == 0 and job, res.stderr
    return job


@pytest.mark.site
def test_job_name_cannot_pick_another_job(mailc):
    job = submit(mailc, "--job-name=x Job_id=999 Ended", "--mail-type=BEGIN,END")
    got = mails(mailc, job, 2)
    began = [m for m in got if " Began" in m.split("\n", 2)[1].rsplit("Ended", 1)[-1]]
    ended = [m for m in got if m not in began]
    assert len(began) == 1 and len(ended) == 1, got
    assert "joulestep" not in began[0]           # a Began mail: no summary
    assert f"SUMMARY OF JOB {job} FOR {USER}" in ended[0]
    assert "999" not in ended[0].split("---", 1)[1]


def test_array_task_mail_summarises_that_task(mailc):
    arr = submit(mailc, "--array=1-2", "--mail-type=END,ARRAY_TASKS")
    got = mails(mailc, arr, 2)
    tasks = {}
    for line in mailc.run(["scontrol", "show", "job", "-o", arr], timeout=15).stdout.splitlines():
        info = dict(re.findall(r"(\S+?)=(\S*)", line))
        tasks[int(info["ArrayTaskId"])] = info["JobId"]
    assert sorted(tasks) == [1, 2]
    for t, job in tasks.items():
        (m,) = [m for m in got if f"Job_id={arr}_{t} " in m]
        assert f"SUMMARY OF JOB {job} FOR {USER}" in m, m


def test_array_summary_mail_has_no_summary(mailc):
    arr = submit(mailc, "--array=1-2", "--mail-type=END")
    (m,) = mails(mailc, arr, 1)
    assert m.split("\n", 2)[1].startswith("Slurm Array Summary ")
    assert "SUMMARY OF JOB" not in m and "joulestep" not in m
