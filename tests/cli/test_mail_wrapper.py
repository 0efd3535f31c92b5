"""etc/mail/joulestep-mail, the Slurm MailProg wrapper (issue 25).

The real wrapper runs; only `joulestep` and `mail` are stand-ins.  The job's
identity comes from the environment slurmctld gives MailProg (slurm.conf(5),
MailProg: SLURM_JOB_ID, SLURM_JOB_USER, SLURM_JOB_MAIL_TYPE, SLURM_ARRAY_*),
never from the subject, which holds the job name the user chose.  Subjects
below are in the exact form of Slurm's agent.c (mail_job_info)."""
import os
import subprocess

import pytest

#: job id -> owner, as the stand-in `joulestep job` knows them
OWNERS = {42: "alice", 999: "mallory", 1234: "alice", 1237: "alice", 77: "bob"}


@pytest.fixture
def wrapper(repo, tmp_path):
    sent, calls = tmp_path / "sent", tmp_path / "calls"
    mail = tmp_path / "mail"
    mail.write_text(f'#!/bin/sh\nprintf "%s|" "$@" > {sent}\necho >> {sent}\n'
                    f'cat >> {sent}\n')
    js = tmp_path / "joulestep"
    owners = " ".join(f"{j}:{u}" for j, u in OWNERS.items())
    # like `joulestep job ID --user U`: refuses (exit 1) a job of another user
    js.write_text(f"""#!/bin/sh
echo "$*" >> {calls}
[ "$1" = job ] || exit 2
id=$2; shift 2; user=""
while [ $# -gt 0 ]; do
    case "$1" in --user) user=$2; shift ;; esac; shift
done
for p in {owners}; do
    if [ "${{p%%:*}}" = "$id" ]; then
        if [ -n "$user" ] && [ "${{p#*:}}" != "$user" ]; then
            echo "job $id belongs to another user" >&2; exit 1
        fi
        echo "SUMMARY OF JOB $id"; exit 0
    fi
done
echo "no job $id" >&2; exit 1
""")
    for f in (mail, js):
        f.chmod(0o755)
    prog = str(repo / "etc" / "mail" / "joulestep-mail")
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    base.update(JOULESTEP_MAIL=str(mail), JOULESTEP_BIN=str(js),
                JOULESTEP_INGEST_WAIT="0")

    def send(subject, **slurm_env):
        env = dict(base, **slurm_env)
        for p in (sent, calls):
            p.unlink(missing_ok=True)
        subprocess.run([prog, "-s", subject, "someone@example.org"], input="body\n",
                       text=True, env=env, check=True, timeout=30)
        out = sent.read_text()
        assert out.startswith(f"-s|{subject}|someone@example.org|\nbody\n")
        return out, calls.read_text() if calls.exists() else ""
    return send


def test_job_id_from_the_environment_not_the_subject(wrapper):
    subj = ("Slurm Job_id=42 Name=x Job_id=999 Ended Ended, Run time 00:01:02, "
            "COMPLETED, ExitCode 0")
    out, calls = wrapper(subj, SLURM_JOB_ID="42", SLURM_JOB_USER="alice",
                         SLURM_JOB_MAIL_TYPE="Ended")
    assert "SUMMARY OF JOB 42" in out
    assert "999" not in out.split("body\n", 1)[1]
    # and only for the mail's user
    assert calls.split()[:2] == ["job", "42"] and "--user alice" in calls


def test_mail_type_from_the_environment(wrapper):
    # a Began mail of a job whose name holds " Ended": no summary
    subj = "Slurm Job_id=42 Name=x Job_id=999 Ended Began, Queued time 00:00:01"
    out, calls = wrapper(subj, SLURM_JOB_ID="42", SLURM_JOB_USER="alice",
                         SLURM_JOB_MAIL_TYPE="Began")
    assert out.endswith("|\nbody\n") and calls == ""
    # a Failed mail gets one
    out, _ = wrapper("Slurm Job_id=42 Name=x Failed, Run time 00:00:03, FAILED, "
                     "ExitCode 1", SLURM_JOB_ID="42", SLURM_JOB_USER="alice",
                     SLURM_JOB_MAIL_TYPE="Failed")
    assert "SUMMARY OF JOB 42" in out


def test_no_slurm_environment_passes_through(wrapper):
    # called by hand, or by a Slurm that sets no environment: mail unchanged
    out, calls = wrapper("Slurm Job_id=999 Name=x Ended, Run time 00:00:01, "
                         "COMPLETED, ExitCode 0")
    assert out.endswith("|\nbody\n") and calls == ""
    for bad in ("", "42x", "-1", "4_2", "42 999"):
        out, calls = wrapper("Slurm Job_id=42 Name=x Ended", SLURM_JOB_ID=bad,
                             SLURM_JOB_USER="alice", SLURM_JOB_MAIL_TYPE="Ended")
        assert out.endswith("|\nbody\n") and calls == "", bad
    out, calls = wrapper("Slurm Job_id=42 Name=x Ended", SLURM_JOB_ID="42",
                         SLURM_JOB_MAIL_TYPE="Ended")
    assert out.endswith("|\nbody\n") and calls == ""


def test_summary_only_of_the_mails_user(wrapper):
    # SLURM_JOB_USER is alice, job 77 is bob's: nothing of bob's goes out
    out, calls = wrapper("Slurm Job_id=77 Name=x Ended", SLURM_JOB_ID="77",
                         SLURM_JOB_USER="alice", SLURM_JOB_MAIL_TYPE="Ended")
    assert "SUMMARY" not in out and "no energy summary available for job 77" in out
    assert "--user alice" in calls


def test_array_task_is_summarised(wrapper):
    # task 3 of array 1234 is job 1237 (records carry this raw ID); the
    # subject's Job_id=1234_3 names another job, 1234
    subj = ("Slurm Array Task Job_id=1234_3 (1237) Name=arr Ended, Run time "
            "00:00:05, COMPLETED, ExitCode 0")
    out, _ = wrapper(subj, SLURM_JOB_ID="1237", SLURM_ARRAY_JOB_ID="1234",
                     SLURM_ARRAY_TASK_ID="3", SLURM_JOB_USER="alice",
                     SLURM_JOB_MAIL_TYPE="Ended")
    assert "SUMMARY OF JOB 1237" in out and "JOB 1234" not in out
    # the array's summary mail has no single job to summarise
    subj = ("Slurm Array Summary Job_id=1234_* (1234) Name=arr Ended, COMPLETED, "
            "ExitCode [0-0]")
    out, calls = wrapper(subj, SLURM_JOB_ID="1234", SLURM_ARRAY_JOB_ID="1234",
                         SLURM_ARRAY_TASK_ID="3", SLURM_JOB_USER="alice",
                         SLURM_JOB_MAIL_TYPE="Ended")
    assert out.endswith("|\nbody\n") and calls == ""
