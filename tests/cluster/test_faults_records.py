"""Fault injection on the live cluster (issue 11, section 2, "Records survive" and
"Counters"; docs/reliability.md "Faults: records and counters").

- The spool is a small tmpfs mounted in this module's private directory (the suite runs
  as root) and made full, read-only, or made to vanish while a job runs: the job
  completes, the failure is logged ("joulestep: ..." in slurmd.log), no partial or tmp
  file is left, and every record reaches the spool once it can be written (the plugin
  keeps it in <state>/pending; the node's next job prolog/epilog moves it). When the
  fallback is full too, the record is counted as lost, and `joulestep report` and
  `joulestep doctor` show the count after `joulestep ingest`.
- slurmctld hung (SIGSTOP), stopped and restarted while a job's steps start and end:
  the job completes, every step has one complete record, nothing crashed.
- Counters: a zone's counter goes back (a reset, seen by more than one sample), or a
  package goes offline mid-step (CPU hotplug in the fake tree): the zone and the sums it
  is part of have no energy (null, flagged uncertain), the other zones are exact.

slurmd finds the plugin's job prolog/epilog only when it starts: the module restarts
slurmd with the plugin configured, and again without it at the end.
"""
from __future__ import annotations

import json
import re
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

import fakehw
import spool
from nodeenv import NodeEnv
from procs import wait_for

pytestmark = pytest.mark.cluster

USER = "jsuser"
REPO = pathlib.Path(__file__).resolve().parents[2]
JOB = "#!/bin/sh\n#SBATCH -n1\nsrun -n1 true\n"
STEPS = {"batch", "0"}


def _mount_tmpfs(path: pathlib.Path, size: str, mode: str):
    path.mkdir(mode=0o755, parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode={mode}", "jsfault", str(path)],
                   check=True, capture_output=True)


def _umount(path: pathlib.Path):
    if os.path.ismount(path):
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def _fill(path: pathlib.Path) -> pathlib.Path:
    """Fill the file system at path: a root-only filler file until ENOSPC."""
    filler = path / ".filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        for size in (65536, 4096, 1):
            try:
                while os.write(fd, b"\0" * size):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


class FaultEnv(NodeEnv):
    """A fake node whose spool is a tmpfs of this module (mounted per test)."""

    def __init__(self, cluster, build, name):
        super().__init__(cluster, build, name, 2400000, 800000)
        self.log = cluster.log_dir / "slurmd.log"
        self.pending = self.state / "pending"

    def args(self, **extra) -> dict:
        return super().args(cluster="jstest", **extra)

    def log_since(self, pos: int) -> str:
        with open(self.log, "rb") as f:
            f.seek(pos)
            return f.read().decode(errors="replace")

    def log_pos(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def all_files(self, base: pathlib.Path) -> list[str]:
        return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()) \
            if base.exists() else []


@pytest.fixture(scope="module")
def fenv_mod(cluster, build_dir):
    env = FaultEnv(cluster, build_dir, "jsfault")
    env.configure()
    cluster.restart_slurmd()  # the plugin's job prolog/epilog (pending records)
    try:
        yield env
    finally:
        _umount(env.spool)
        _umount(env.pending)
        cluster.write_plugstack(None)
        cluster.restart_slurmd()
        env.close()


@pytest.fixture
def fenv(fenv_mod):
    env = fenv_mod
    _umount(env.spool)
    _umount(env.pending)
    for d in (env.spool, env.pending):
        if d.exists():
            subprocess.run(["rm", "-rf", str(d)], check=True)
    _mount_tmpfs(env.spool, "256k", "0755")
    env.configure()
    env.c.wait_idle()
    try:
        yield env
    finally:
        _umount(env.spool)
        _umount(env.pending)


def _check_complete(recs: dict, job):
    """Every record parses (records() did), names its job, and carries energies."""
    for step, r in recs.items():
        assert r["job"]["job_id"] == int(job), step
        assert r["step"]["energy_cpu_uj"] is not None, (step, r["provenance"])
        assert r["provenance"]["wrap_uncertain"] is False, step


def _no_partial(env):
    left = [f for f in env.all_files(env.spool) + env.all_files(env.pending) if ".tmp." in f]
    assert left == [], left


def _trigger_flush(env):
    """Any job on the node: its prolog and epilog move pending records."""
    env.run_job("#!/bin/sh\ntrue\n")


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_spool_full_or_read_only_record_written_when_space_returns(fenv, fault):
    env = fenv
    pos = env.log_pos()
    filler = None
    if fault == "full":
        filler = _fill(env.spool)
    else:
        subprocess.run(["mount", "-o", "remount,ro", str(env.spool)], check=True)
    job, _ = env.run_job(JOB)                       # the job still runs (COMPLETED)
    wait_for(lambda: len(list(env.pending.glob(f"jstest/{job}/*.json"))) == len(STEPS),
             f"job {job}: records kept in {env.pending}")
    assert env.records(job) == {}
    log = env.log_since(pos)
    why = "No space left on device" if fault == "full" else "Read-only file system"
    assert any(f"joulestep: job {job} step batch: " in l and why in l for l in log.splitlines()), \
        log[-2000:]
    assert f"kept in {env.state}/pending" in log
    _no_partial(env)
    # space returns
    if fault == "full":
        filler.unlink()
    else:
        subprocess.run(["mount", "-o", "remount,rw", str(env.spool)], check=True)
    _trigger_flush(env)
    recs = env.wait_records(job, STEPS)
    _check_complete(recs, job)
    assert list(env.pending.glob(f"jstest/{job}/*")) == []
    assert not (env.spool / "jstest" / "lost").exists()  # none lost
    _no_partial(env)


def test_spool_vanishes_during_the_job(fenv):
    env = fenv
    d = env.c.user_dir(USER)
    for f in ("v.s0", "v.go"):
        (d / f).unlink(missing_ok=True)
    script = f"""#!/bin/sh
#SBATCH -n1
srun -n1 true
touch {d}/v.s0
i=0; while [ ! -e {d}/v.go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
srun -n1 true
"""
    res, job = env.c.sbatch(script, user=USER)
    assert res.returncode == 0 and job, res.stderr
    try:
        wait_for(lambda: (d / "v.s0").exists(), "step 0 done", 60)
        assert set(env.records(job)) == {"0"}
        _umount(env.spool)                          # the spool's file system goes away,
        subprocess.run(["rm", "-rf", str(env.spool)], check=True)  # and its directory
    finally:
        (d / "v.go").touch()
    assert env.c.wait_job(job, 90) == "COMPLETED"
    recs = env.wait_records(job, {"1", "batch"})    # re-created at step end
    _check_complete(recs, job)
    _no_partial(env)


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "joulestep.cli", *map(str, args)],
                          capture_output=True, text=True, **kw)


def test_spool_and_fallback_full_counts_the_records_lost(fenv, tmp_path):
    env = fenv
    env.state.mkdir(mode=0o755, exist_ok=True)
    _mount_tmpfs(env.pending, "64k", "0700")
    fillers = [_fill(env.spool), _fill(env.pending)]
    pos = env.log_pos()
    job, _ = env.run_job(JOB)
    wait_for(lambda: len(list(env.pending.glob(f"jstest/{job}/*.lost"))) == len(STEPS),
             f"job {job}: lost markers in {env.pending}")
    assert "LOST (spool and" in env.log_since(pos)
    _no_partial(env)
    for f in fillers:
        f.unlink()
    _trigger_flush(env)
    lost_dir = env.spool / "jstest" / "lost"
    wait_for(lambda: len(list(lost_dir.glob(f"{job}.*.json"))) == len(STEPS), "lost files")
    assert env.records(job) == {}                   # no record, not even a partial one
    docs = [json.loads(p.read_text()) for p in lost_dir.glob(f"{job}.*.json")]
    assert sorted(x["step_id"] for x in docs) == sorted(STEPS)
    assert all(x["format"] == "joulestep-lost" and x["job_id"] == int(job)
               and x["node"] == env.c.node for x in docs)
    # ingest: the figure doctor and report show
    db = tmp_path / "js.db"
    assert _cli("ingest", "--db", db, env.spool).returncode == 0
    rep = _cli("report", "--db", db, "--format", "json")
    assert rep.returncode == 0, rep.stderr
    assert json.loads(rep.stdout)["totals"]["records_lost"] == len(STEPS)
    assert _cli("ingest", "--db", db, env.spool).returncode == 0     # again: no double count
    doc = _cli("doctor", "--db", db, "--sysfs", env.hw)
    assert f"records lost (spool and fallback not writable): {len(STEPS)}" in doc.stdout, doc.stdout


def test_killed_slurmstepd_counts_its_step_lost(fenv, tmp_path):
    """Issue 23, defect 6: step 0's slurmstepd is SIGKILLed while its task runs; it
    never writes a record. Its root-only step-start marker (<state>/pending) makes the
    job epilog count it: after the job, ingest counts exactly one lost step, step 0,
    with its start time (between the submission and the task's first line); the batch
    step, which ended normally, has its record and is not counted, and no marker is left."""
    from procs import cmdline, stepd_pid
    env = fenv
    up = env.c.user_dir(USER) / f"k9lost.{time.monotonic_ns()}"
    t0 = time.time_ns()
    go = up.with_name(up.name + ".go")   # srun itself waits on: the script ends past it
    res, job = env.c.sbatch(f"#!/bin/sh\n#SBATCH -n1\nsrun -n1 sh -c 'echo $$ > {up}.tmp; mv {up}.tmp {up}; "
                            f"exec sleep 300' &\nwhile [ ! -e {go} ]; do sleep 0.2; done\n", user=USER)
    assert job, res.stderr
    try:
        wait_for(up.exists, "step 0 running", 60)
        t_up = up.stat().st_mtime_ns
        pid = stepd_pid(job, "0")
        assert pid, f"no slurmstepd for {job}.0"
        (marker,) = (env.pending / "jstest" / job).glob(f"{job}.0.0-*.{env.c.node}.json.started")
        st = marker.stat()   # root-only, in the plugin's own state area
        assert (st.st_mode & 0o777, st.st_uid) == (0o600, 0), oct(st.st_mode)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: "slurmstepd" not in cmdline(pid), "slurmstepd gone", 20)
        os.kill(int(up.read_text()), signal.SIGKILL)   # its orphaned task
        go.touch()
        assert env.c.wait_job(job, 120) in ("COMPLETED", "FAILED"), env.c.logs()
    finally:
        env.c.run(["scancel", job])
        env.c.wait_idle()
    lost_dir = env.spool / "jstest" / "lost"
    # named as the record would have been (its incarnation included)
    wait_for(lambda: (lost_dir / marker.name[:-len(".started")]).exists(), "the lost document")
    assert set(env.wait_records(job, ["batch"])) == {"batch"}
    assert not list(env.pending.glob(f"*/{job}/*")), list(env.pending.glob(f"*/{job}/*"))
    db = tmp_path / "js.db"
    assert _cli("ingest", "--db", db, env.spool).returncode == 0
    assert _cli("ingest", "--db", db, env.spool).returncode == 0     # again: no double count
    import sqlite3
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT job_id, step_id, step_start_ns, first_reading_ns FROM "
                            "lost_records").fetchall()
    assert len(rows) == 1 and rows[0][:2] == (int(job), "0"), rows
    assert t0 <= rows[0][2] <= t_up, (t0, rows, t_up)
    assert rows[0][2] <= rows[0][3] <= t_up, rows
    rep = _cli("report", "--db", db, "--format", "json")
    assert json.loads(rep.stdout)["totals"]["records_lost"] == 1


@pytest.mark.site
def test_requeued_job_keeps_each_incarnations_records(fenv, tmp_path):
    """Issue 23, defect 5: a job requeued (`scontrol requeue`) after its step 0 ended
    runs step 0 again in its second incarnation. Each incarnation is its own set of
    records: the spool holds both step-0 records, and ingest stores both steps of the
    job (the truth: two incarnations, one step 0 each)."""
    env = fenv
    flag = env.c.user_dir(USER) / f"requeue.{time.monotonic_ns()}"
    script = (f"#!/bin/sh\n#SBATCH -n1\nsrun -n1 --energy-report sh -c '[ -e {flag} ] && sleep 1 || sleep 3'\n"
              f"if [ ! -e {flag} ]; then touch {flag}; sleep 300; fi\n")
    res, job = env.c.sbatch(script, user=USER, args=["--requeue"])
    assert job, res.stderr
    try:
        wait_for(flag.exists, "the first incarnation past step 0", 60)
        wait_for(lambda: "0" in env.records(job), "step 0's record", 30)
        r = env.c.run(["scontrol", "requeue", job])
        assert r.returncode == 0, r.stderr
        # slurmctld holds a requeued job for the credential's lifetime
        # (cred_expire, 120 s) before it may start again; the admin's release
        # lets the second incarnation start now (slurmd takes the newer
        # credential, "reissued job credential", and, still knowing the job,
        # skips its prolog: run 2's marker is then each step's start). The
        # path with the prolog (no release) was checked by hand: see the
        # issue 23 report.
        requeued_s = time.time()
        wait_for(lambda: env.c.job_state(job) == "PENDING", "the job requeued", 60)
        # slurmd revokes the old credential at the kill and accepts a reissued one
        # only if it was created in a later second (its times are whole seconds):
        # released within the same second, the run is "Job credential revoked"
        # and FAILED. Release from the second after next.
        time.sleep(max(0.0, int(requeued_s) + 2 - time.time()))
        r = env.c.run(["scontrol", "update", f"JobId={job}", "StartTime=now"])
        assert r.returncode == 0, r.stderr
        assert env.c.wait_job(job, 180) == "COMPLETED", env.c.logs()
    finally:
        env.c.run(["scancel", job])
        env.c.wait_idle()
    files = sorted((env.spool / "jstest" / job).glob("*.json"))
    steps0 = [f for f in files if json.loads(f.read_text())["step"]["step_id"] == "0"]
    assert len(steps0) == 2, [f.name for f in files]
    # told apart by a marker root takes on the node: the job prolog's time,
    # or, for a run whose prolog slurmd skipped (released before the old
    # credential expired: slurmd still knows the job), the step's own start.
    # Either way run 2's comes after run 1's step 0 ended: run 1's job cache
    # was removed by its epilog, not carried into run 2.
    recs = sorted((json.loads(f.read_text()) for f in steps0),
                  key=lambda r: r["job"]["incarnation_ns"])
    for r in recs:
        src, inc = r["provenance"]["job_source"], r["job"]["incarnation_ns"]
        assert inc == r["job"]["first_seen_ns"]
        assert (src == "prolog" and inc <= r["step"]["start_ns"]) or \
            (src == "step" and inc == r["step"]["start_ns"]), (r["job"], src)
    assert recs[0]["provenance"]["job_source"] == "prolog"
    assert recs[0]["step"]["end_ns"] < recs[1]["job"]["incarnation_ns"], [r["job"] for r in recs]
    # srun --energy-report in run 2 prints run 2's summary of step 0 only, not
    # also run 1's (left in the spool under a name that differs in the marker)
    out = env.c.job_output(job)
    lines = [ln for ln in out.splitlines() if ln.startswith(f"joulestep: step {job}.0 ")]
    assert len(lines) == 1, out
    # run 1's step 0 took 3 s, run 2's 1 s: the line's duration says whose it is
    m = re.search(r" on \S+: ([0-9.]+) s, ", lines[0])
    assert m, lines[0]
    dur_s = [(r["step"]["end_ns"] - r["step"]["start_ns"]) / 1e9 for r in recs]
    assert dur_s[0] - dur_s[1] > 1.5, dur_s
    assert abs(float(m.group(1)) - dur_s[1]) < 0.5, (lines[0], dur_s)
    db = tmp_path / "js.db"
    assert _cli("ingest", "--db", db, env.spool).returncode == 0
    assert _cli("ingest", "--db", db, env.spool).returncode == 0    # again: no change
    import sqlite3
    with sqlite3.connect(db) as conn:
        got = sorted(conn.execute(
            "SELECT s.incarnation_ns, s.energy_cpu_uj FROM steps s JOIN jobs j ON "
            "j.job_pk = s.job_pk WHERE j.job_id = ? AND s.step_id = '0'", (int(job),)))
    assert got == [(r["job"]["incarnation_ns"], r["step"]["energy_cpu_uj"]) for r in recs], got
    out = _cli("job", "--db", db, job, "--format", "json")
    assert out.returncode == 0, out.stderr
    assert [r["incarnation"] for r in json.loads(out.stdout)["incarnations"]] == [1, 2]


# ------------------------------------------------------------------ slurmctld
def test_slurmctld_hung_stopped_restarted_while_steps_run(fenv):
    env = fenv
    c = env.c
    d = c.user_dir(USER)
    for f in d.glob("ctl.*"):
        f.unlink()
    n = 4
    script = "#!/bin/sh\n#SBATCH -n1\n" + "".join(
        f"srun -n1 sh -c 'touch {d}/ctl.{i}; sleep 1'\n" for i in range(n))
    pos = env.log_pos()
    res, job = c.sbatch(script, user=USER)
    assert res.returncode == 0 and job, res.stderr
    pid_file = c.workdir / "run" / "slurmctld.pid"
    try:
        wait_for(lambda: (d / "ctl.0").exists(), "step 0 started", 60)
        os.kill(int(pid_file.read_text()), signal.SIGSTOP)   # hung: step 0 ends, 1 starts
        time.sleep(3)
    finally:
        os.kill(int(pid_file.read_text()), signal.SIGCONT)
    wait_for(lambda: (d / "ctl.1").exists(), "step 1 started", 60)
    c.restart_slurmctld(down_s=3)                           # stopped, then restarted
    assert c.wait_job(job, 120) == "COMPLETED"
    recs = env.wait_records(job, {"batch", *map(str, range(n))}, timeout=40)
    assert len(recs) == n + 1
    _check_complete(recs, job)
    log = env.log_since(pos) + (c.log_dir / "slurmctld.log").read_text(errors="replace")
    for bad in ("Segmentation", "segfault", "SIGSEGV", "core dumped"):
        assert bad not in log, bad
    errs = [l for l in env.log_since(pos).splitlines() if "error: joulestep" in l]
    assert errs == [], errs


# ------------------------------------------------------------------ counters
def _zone_truth(replies: list[dict], zone: str) -> int:
    return sum(r["zones"][zone]["energy_uj"] for r in replies if zone in r["zones"])


def _adv_replies(out: str, tag: str) -> list[dict]:
    return [json.loads(l.split(" ", 2)[2]) for l in out.splitlines() if l.startswith(f"ADV {tag}")]


def _counter_job(env, d, tag):
    return f"""#!/bin/sh
#SBATCH -n1
srun -n1 sh -c '{env.adv(tag)}; touch {d}/{tag}.s0; i=0; while [ ! -e {d}/{tag}.go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; {env.adv(tag)}'
"""


@pytest.fixture
def cenv(cluster, build_dir, fenv_mod, request):
    """A fresh fake tree per test (the fault changes it), same spool and state."""
    env = FaultEnv(cluster, build_dir, f"jsfault-{request.node.name[5:20]}")
    env.spool, env.state = fenv_mod.spool, fenv_mod.state
    env.configure()
    cluster.wait_idle()
    try:
        yield env
    finally:
        fenv_mod.configure()
        env.close()


def _run_counter_fault(env, tag, fault):
    d = env.c.user_dir(USER)
    for f in (f"{tag}.s0", f"{tag}.go"):
        (d / f).unlink(missing_ok=True)
    res, job = env.c.sbatch(_counter_job(env, d, tag), user=USER)
    assert res.returncode == 0 and job, res.stderr
    try:
        wait_for(lambda: (d / f"{tag}.s0").exists(), "first advance done", 60)
        fault()
    finally:
        (d / f"{tag}.go").touch()
    assert env.c.wait_job(job, 90) == "COMPLETED"
    rec = env.wait_records(job, STEPS)["0"]
    return rec, _adv_replies(env.c.job_output(job), tag)


def _check_uncertain(rec, replies, bad_zones):
    zones = {z["id"]: z for z in rec["zones"]}
    assert rec["provenance"]["wrap_uncertain"] is True
    for zid, z in zones.items():
        if zid in bad_zones:
            # (the plugin before the fix wrote 0 J here for 50 J, and 50 J of 100 in
            # energy_cpu_uj, with only wrap_uncertain set)
            assert z["energy_uj"] is None and z.get("uncertain") is True, z
        else:
            assert z["uncertain"] is False, z
            assert z["energy_uj"] == _zone_truth(replies, zid), (zid, z)
    assert set(bad_zones) <= set(zones)
    kinds = {zones[z]["kind"] for z in bad_zones}
    assert rec["step"]["energy_total_uj"] is None
    if "package" in kinds:
        assert rec["step"]["energy_cpu_uj"] is None
    if "dram" not in kinds:
        assert rec["step"]["energy_dram_uj"] == sum(
            _zone_truth(replies, z) for z in zones if zones[z]["kind"] == "dram")


def test_counter_goes_back_more_than_once(cenv):
    env = cenv

    def reset():
        fakehw.set_counter(str(env.hw), "intel-rapl:0", 1000)
        time.sleep(2.0)  # sample_ms=200: the step thread reads the low value repeatedly

    rec, replies = _run_counter_fault(env, "back", reset)
    assert len(replies) == 2
    _check_uncertain(rec, replies, {"intel-rapl:0"})


def test_zone_disappears_mid_step(cenv):
    env = cenv
    rec, replies = _run_counter_fault(
        env, "hot", lambda: fakehw.remove_zone(str(env.hw), "intel-rapl:1"))
    assert len(replies) == 2
    _check_uncertain(rec, replies, {"intel-rapl:1", "intel-rapl:1:0"})


# ------------------------------------------------------------------ pure logic (cmocka)
LOST_TEST_C = r"""
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>
#include "js_pending.h"

static void lost_doc(void **st) { (void)st;
    char *t = js_pending_lost_json("c1", "42.batch.0.node-7.json", 123, "spool: x", 0, 0);
    assert_non_null(t);
    json_t *o = json_loads(t, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(o, "format")), "joulestep-lost");
    assert_int_equal(json_integer_value(json_object_get(o, "job_id")), 42);
    assert_string_equal(json_string_value(json_object_get(o, "step_id")), "batch");
    assert_int_equal(json_integer_value(json_object_get(o, "het_component")), 0);
    assert_string_equal(json_string_value(json_object_get(o, "node")), "node-7");
    assert_int_equal(json_integer_value(json_object_get(o, "lost_at_ns")), 123);
    assert_string_equal(json_string_value(json_object_get(o, "reason")), "spool: x");
    json_decref(o); free(t);
    t = js_pending_lost_json("c1", "7.3.1.n.json", 1, "", 0, 0);
    o = json_loads(t, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(o, "step_id")), "3");
    assert_non_null(json_string_value(json_object_get(o, "reason")));
    json_decref(o); free(t);
}
static void refused_names(void **st) { (void)st;
    static const char *bad[] = {"", ".json", "42.json", "42.batch.json", "42.batch.0..json",
                                "x.batch.0.n.json", "42.batch.0.n.txt", "42.ba/ch.0.n.json",
                                "42.batch.0.n/../x.json", "42.batch.0.n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_null(js_pending_lost_json("c1", bad[i], 1, "r", 0, 0));
}
/* issue 23, defect 5: the incarnation in the name, the lost document's
 * incarnation_ns; an older plugin's name has none */
static void incarnation_names(void **st) { (void)st;
    char name[256];
    js_record_name_of(42, "batch", 1, 1763770000900000000ULL, "node-7.a", name, sizeof name);
    assert_string_equal(name, "42.batch.1-1763770000900000000.node-7.a.json");
    char other[256];
    js_record_name_of(42, "batch", 1, 1763770000900000001ULL, "node-7.a", other, sizeof other);
    assert_string_not_equal(name, other);      /* another run: another file */
    char *t = js_pending_lost_json("c1", name, 5, "r", 0, 0);
    json_t *o = json_loads(t, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(o, "job_id")), 42);
    assert_string_equal(json_string_value(json_object_get(o, "step_id")), "batch");
    assert_int_equal(json_integer_value(json_object_get(o, "het_component")), 1);
    assert_string_equal(json_string_value(json_object_get(o, "node")), "node-7.a");
    assert_true(json_integer_value(json_object_get(o, "incarnation_ns")) == 1763770000900000000LL);
    json_decref(o); free(t);
    t = js_pending_lost_json("c1", "42.batch.1.node-7.a.json", 5, "r", 0, 0);
    o = json_loads(t, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(o, "node")), "node-7.a");
    assert_null(json_object_get(o, "incarnation_ns"));
    json_decref(o); free(t);
    static const char *bad[] = {"42.batch.0-.n.json", "42.batch.0-x.n.json", "42.batch.0-1.json",
                                "42.batch.0-1..json", "42.batch.0-99999999999999999999.n.json",
                                "42.batch.0-1-2.n.json", "42.batch.0-1.n/x.json"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_null(js_pending_lost_json("c1", bad[i], 1, "r", 0, 0));
}
int main(void) {
    const struct CMUnitTest t[] = {cmocka_unit_test(lost_doc), cmocka_unit_test(refused_names),
                                   cmocka_unit_test(incarnation_names)};
    return cmocka_run_group_tests(t, NULL, NULL);
}
"""


def test_lost_document_logic_unit(repo, tmp_path):
    """js_pending_lost_json: the document of a marker name, and no document for a name
    the plugin never writes (a marker planted with a path in it is dropped);
    js_record_name_of: a requeued job's runs have names of their own (issue 23,
    defect 5), which the lost document keeps apart."""
    src = tmp_path / "test_lost.c"
    src.write_text(LOST_TEST_C)
    exe = tmp_path / "test_lost"
    stub = tmp_path / "stubs.c"  # js_pending.c's I/O helpers, not used by the pure part
    stub.write_text("#include <stdbool.h>\n#include <stddef.h>\n#include <sys/types.h>\n"
                    "int js_root_dirfd(const char *p, mode_t m, bool c) { (void)p; (void)m; (void)c; return -1; }\n"
                    "int js_check_dirfd(int fd) { (void)fd; return -1; }\n"
                    "int js_write_atomicat(int d, const char *n, const char *x, size_t l, mode_t m, bool c)"
                    " { (void)d; (void)n; (void)x; (void)l; (void)m; (void)c; return -1; }\n")
    subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-g",
                    f"-I{repo}/spank", f"-I{repo}/accounting/include", str(src), str(stub),
                    str(repo / "spank/js_pending.c"), str(repo / "spank/js_parse.c"),
                    "-o", str(exe), "-lcmocka", "-ljansson", "-lm"], check=True)
    res = subprocess.run([str(exe)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "3 test(s) run" in res.stdout + res.stderr
