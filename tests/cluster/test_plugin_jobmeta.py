"""The job's identity and accounting fields on the live cluster (issue: trust nothing the
job sets; no slurmctld RPC from slurmstepd).

The job prolog (root, slurmd's environment) caches the job's account, partition and
cluster with the time it ran (first_seen_ns) root-only in <state>/jobs/<job_id>; every
step of the job on the node reads it (provenance.job_source = "prolog"); the job epilog
removes it. Nothing comes from the job's environment, and no step asks slurmctld: a
stopped or slow controller cannot stall or crash slurmstepd, and cannot change a record.

slurmd decides at start whether any SPANK plugin has a job prolog/epilog, so this module
restarts slurmd with the plugin configured (and restores the plugin-free slurmd afterwards).
"""
from __future__ import annotations

import json
import os
import pathlib
import pwd
import signal
import subprocess
import time

import pytest

import fakehw
import spool
from procs import stepd_pid, wait_for

pytestmark = pytest.mark.cluster

USER = "jsuser"
ACCOUNT = "physics"
REPO = pathlib.Path(__file__).resolve().parents[2]


class MetaEnv:
    def __init__(self, cluster, build: pathlib.Path):
        self.c = cluster
        self.root = cluster.workdir / "jsmeta"
        self.root.mkdir(mode=0o755, exist_ok=True)
        os.chmod(self.root, 0o755)
        self.hw = self.root / "hw"
        if not self.hw.exists():
            fakehw.create(str(self.hw), packages=1, cpus_per_package=max(1, cluster.cpus))
        self.spool = self.root / "spool"
        self.state = self.root / "state"
        self.jobs = self.state / "jobs"
        self.so = build / "spank" / "joulestep.so"
        self.uid = pwd.getpwnam(USER).pw_uid

    def configure(self, **extra):
        args = {"spool": self.spool, "state": self.state, "sysfs": self.hw,
                "socket_dir": self.root / "sock", "backend": "sysfs"}
        args.update(extra)
        self.c.write_plugstack(self.so, args)

    def records(self, job, cluster="jstest") -> dict:
        d = self.spool / cluster / str(job)
        return {json.loads(f.read_text())["step"]["step_id"]: json.loads(f.read_text())
                for f in sorted(d.glob("*.json"))} if d.exists() else {}

    def wait_records(self, job, steps, timeout=30):
        return spool.wait_records(self.spool, job, steps, self.c.logs, timeout)

    def submit_ns(self, job) -> int:
        """The job's submit time according to slurmctld (scontrol, local time, 1 s)."""
        st = self.c.job_info(job)["SubmitTime"]
        return int(time.mktime(time.strptime(st, "%Y-%m-%dT%H:%M:%S"))) * 10**9

    def cache_file(self, job) -> pathlib.Path:
        return self.jobs / str(job)

    def make_jobs_dir(self):
        """<state>/jobs as the plugin makes it (root, 0700), to plant files in."""
        for p in (self.state, self.jobs):
            p.mkdir(mode=0o700, exist_ok=True)
            os.chmod(p, 0o700)


@pytest.fixture(scope="module")
def menv(cluster, build_dir):
    env = MetaEnv(cluster, build_dir)
    env.configure()
    cluster.restart_slurmd()  # slurmd must see the plugin's job prolog and epilog
    try:
        yield env
    finally:
        cluster.write_plugstack(None)
        cluster.restart_slurmd()


@pytest.fixture
def meta(menv):
    menv.configure()
    menv.c.wait_idle()
    return menv


def paused_script(d: pathlib.Path, tag: str, env: str = "") -> str:
    """Step 0, then wait for the test's go, then step 1."""
    return f"""#!/bin/sh
#SBATCH -n1
{env}
srun -n1 true
touch {d}/{tag}.s0
i=0; while [ ! -e {d}/{tag}.go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
srun -n1 true
"""


def _check_trusted(recs, job, first_seen):
    for step, r in recs.items():
        assert r["cluster"] == "jstest", step
        assert r["job"]["account"] == ACCOUNT, step
        assert r["job"]["partition"] == "debug", step
        assert r["job"]["name"] is None, step
        assert r["job"]["submit_time_ns"] is None, step
        assert r["job"]["first_seen_ns"] == first_seen, step
        assert r["step"]["het_component"] == 0, step
        assert r["provenance"]["job_source"] == "prolog", step
        assert r["provenance"]["errors"] == [], (step, r["provenance"]["errors"])


def test_prolog_caches_trusted_fields_and_epilog_removes_it(meta):
    c = meta.c
    d = c.user_dir(USER)
    for f in ("a.s0", "a.go"):
        (d / f).unlink(missing_ok=True)
    # leftovers of jobs whose epilog never ran: the old one is swept by any job's epilog
    meta.make_jobs_dir()
    old, fresh = meta.jobs / "999999", meta.jobs / "999998"
    for p in (old, fresh):
        p.write_text("{}")
        os.chmod(p, 0o600)
    os.utime(old, (time.time() - 8 * 86400,) * 2)  # > job_cache_hours (168 h)

    res, job = c.sbatch(paused_script(d, "a"), user=USER, args=[f"--account={ACCOUNT}"])
    assert res.returncode == 0 and job, res.stderr
    try:
        wait_for(lambda: (d / "a.s0").exists(), "step 0 done")
        f = meta.cache_file(job)
        assert f.exists()
        st, dst = os.lstat(f), os.lstat(meta.jobs)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777, st.st_nlink) == (0, 0, 0o600, 1)
        assert dst.st_uid == 0 and dst.st_mode & 0o777 == 0o700
        entry = json.loads(f.read_text())
        assert entry["job_id"] == int(job) and entry["uid"] == meta.uid
        assert (entry["account"], entry["partition"], entry["cluster"]) == (ACCOUNT, "debug", "jstest")
        # the prolog ran after the submission and before step 0 ended
        assert meta.submit_ns(job) - 10**9 <= entry["first_seen_ns"] <= time.time_ns()
    finally:
        (d / "a.go").touch()
    assert c.wait_job(job) == "COMPLETED"
    recs = meta.wait_records(job, ["batch", "0", "1"])
    _check_trusted(recs, job, entry["first_seen_ns"])
    wait_for(lambda: not f.exists(), f"epilog removing {f}")
    assert not old.exists()
    assert fresh.exists()
    fresh.unlink()


def test_spoofed_environment_is_ignored(meta):
    """A user who sets Slurm's variables before srun gets nothing filed elsewhere."""
    spoof = ("export SLURM_JOB_ACCOUNT=evil SLURM_JOB_PARTITION=evilpart "
             "SLURM_JOB_NAME=evilname SLURM_CLUSTER_NAME=othercluster SLURM_HET_JOB_OFFSET=7")
    c = meta.c
    d = c.user_dir(USER)
    (d / "s.go").touch()
    res, job = c.sbatch(paused_script(d, "s", spoof), user=USER, args=[f"--account={ACCOUNT}"])
    assert res.returncode == 0 and job, res.stderr
    assert c.wait_job(job) == "COMPLETED"
    recs = meta.wait_records(job, ["batch", "0", "1"])
    _check_trusted(recs, job, recs["batch"]["job"]["first_seen_ns"])
    assert not (meta.spool / "othercluster").exists()


@pytest.mark.parametrize("plant", ["other_uid", "symlink", "garbage", "future"])
def test_planted_cache_entries_are_replaced_by_the_prolog(meta, plant):
    """Whatever sits in the job's cache file before the job runs, the prolog replaces it
    (never writing through a link) and the records carry slurmd's values."""
    c = meta.c
    res, job = c.sbatch("#!/bin/sh\n#SBATCH -n1\ntrue\n", user=USER,
                        args=["--hold", f"--account={ACCOUNT}"])
    assert res.returncode == 0 and job, res.stderr
    f = meta.cache_file(job)
    meta.make_jobs_dir()
    entry = {"job_id": int(job), "uid": meta.uid, "first_seen_ns": time.time_ns() - 10**12,
             "account": "planted", "partition": "planted", "cluster": "planted"}
    if plant == "other_uid":
        entry["uid"] = pwd.getpwnam("jsother").pw_uid
    elif plant == "future":
        entry["first_seen_ns"] = time.time_ns() + 86400 * 10**9
    text = "{not json" if plant == "garbage" else json.dumps(entry)
    target = meta.root / f"target-{job}"
    if plant == "symlink":
        target.write_text(text)
        os.chmod(target, 0o600)
        os.symlink(target, f)
    else:
        f.write_text(text)
        os.chmod(f, 0o600)
    assert c.run(["scontrol", "release", job]).returncode == 0
    assert c.wait_job(job) == "COMPLETED"
    rec = meta.wait_records(job, ["batch"])["batch"]
    assert rec["job"]["account"] == ACCOUNT and rec["cluster"] == "jstest"
    assert rec["provenance"]["job_source"] == "prolog"
    assert abs(rec["job"]["first_seen_ns"] - rec["step"]["start_ns"]) < 60 * 10**9
    wait_for(lambda: not os.path.lexists(f), f"epilog removing {f}")
    if plant == "symlink":
        assert target.read_text() == text
        target.unlink()


def test_no_job_cache_keys_the_step_by_its_start(meta):
    """job_cache_hours=0: no cache; each step is keyed by its own start, account and
    partition unknown, and still nothing from the job's environment."""
    c = meta.c
    meta.configure(job_cache_hours=0, cluster="jstest")
    res, job = c.sbatch("#!/bin/sh\n#SBATCH -n1\nexport SLURM_JOB_ACCOUNT=evil\nsrun -n1 true\n",
                        user=USER, args=[f"--account={ACCOUNT}"])
    assert res.returncode == 0 and job, res.stderr
    assert c.wait_job(job) == "COMPLETED"
    recs = meta.wait_records(job, ["batch", "0"])
    assert not meta.cache_file(job).exists()
    for r in recs.values():
        assert r["provenance"]["job_source"] == "step"
        assert r["job"]["first_seen_ns"] == r["step"]["start_ns"]
        assert r["job"]["account"] is None and r["job"]["partition"] is None
        assert r["provenance"]["errors"] == []


@pytest.mark.parametrize("key", ["job_cache_hours", "submit_cache_hours"])
def test_bad_job_cache_hours_is_refused(meta, key):
    meta.configure(**{key: "week"})
    res, job = meta.c.sbatch("#!/bin/sh\ntrue\n", user=USER, args=["--energy-policy=monitor"])
    assert res.returncode != 0 and job is None
    assert f"{key}=: an integer in [0, 8760] (0 = no job cache)" in res.stderr


def test_papi_backend_is_refused_in_the_plugin(meta):
    meta.configure(backend="papi,sysfs")
    res, job = meta.c.sbatch("#!/bin/sh\ntrue\n", user=USER, args=["--energy-policy=monitor"])
    assert res.returncode != 0 and job is None
    assert "backend=: papi is not used inside slurmstepd" in res.stderr


@pytest.fixture
def stopping_prolog(meta):
    """A site Prolog that SIGSTOPs slurmctld for jobs of account 'stopctld', so that the
    batch step starts while the controller answers nothing; and a short MessageTimeout,
    so that an RPC from slurmstepd would give up (and crash the old plugin) in ~10 s."""
    c = meta.c
    conf = c.conf.read_text()
    script = meta.root / "stop-ctld.sh"
    script.write_text(f"""#!/bin/sh
[ "$SLURM_JOB_ACCOUNT" = stopctld ] && kill -STOP $(cat {c.workdir}/run/slurmctld.pid)
exit 0
""")
    os.chmod(script, 0o755)
    c.conf.write_text(conf.replace("MessageTimeout=20", "MessageTimeout=5") + f"Prolog={script}\n")
    c.run(["scontrol", "reconfigure"])
    c.restart_slurmd()
    try:
        yield meta
    finally:
        pid = int((c.workdir / "run" / "slurmctld.pid").read_text())
        os.kill(pid, signal.SIGCONT)
        c.conf.write_text(conf)
        c.run(["scontrol", "reconfigure"])
        c.restart_slurmd()


def test_slurmctld_stopped_as_the_job_starts(stopping_prolog):
    """The reproduction of the SIGSEGV: the job cache is off (so the old plugin asked
    slurmctld from a thread it then abandoned), and slurmctld is stopped just as the batch
    step starts. The step ends, its record is complete, and slurmstepd stays alive
    (waiting for the controller) until it is resumed; then the job completes."""
    meta = stopping_prolog
    c = meta.c
    meta.configure(submit_cache_hours=0, cluster="jstest")  # the key's old name: also 0.1
    pid_file = c.workdir / "run" / "slurmctld.pid"
    res, job = c.sbatch("#!/bin/sh\n#SBATCH -n1\nsleep 1\n", user=USER,
                        args=["--account=stopctld"])
    assert res.returncode == 0 and job, res.stderr
    try:
        recs = meta.wait_records(job, ["batch"], timeout=40)
        rec = recs["batch"]
        assert rec["provenance"]["errors"] == []
        assert rec["step"]["duration_ns"] < 30 * 10**9
        stepd = stepd_pid(job)
        assert stepd, "the batch slurmstepd should wait for the stopped controller"
        # an RPC made at step start would have timed out (2 x MessageTimeout) by now
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            assert pathlib.Path(f"/proc/{stepd}").exists(), "slurmstepd died"
            time.sleep(0.5)
    finally:
        os.kill(int(pid_file.read_text()), signal.SIGCONT)
    assert c.wait_job(job, 90) == "COMPLETED"
    assert "Segmentation" not in c.logs(tail=400)


# ------------------------------------------------------------------ pure logic (cmocka)
LOGIC_TEST_C = r"""
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "js_jobcache.h"

#define S 1000000000ULL
static struct js_jobcache ent(void) {
    struct js_jobcache e = {.job_id = 42, .uid = 1000, .first_seen_ns = 1700000000ULL * S};
    strcpy(e.partition, "p\"x\\ \u00e9"); strcpy(e.account, "acct"); strcpy(e.cluster, "c1");
    return e;
}
static void roundtrip(void **st) { (void)st;
    struct js_jobcache e = ent(), d; char buf[JS_JOBCACHE_MAX];
    assert_int_equal(js_jobcache_encode(&e, buf, sizeof buf), 0);
    memset(&d, 0x55, sizeof d);
    assert_int_equal(js_jobcache_decode(buf, strlen(buf), &d), 0);
    assert_int_equal(d.job_id, 42); assert_int_equal(d.uid, 1000);
    assert_true(d.first_seen_ns == e.first_seen_ns);
    assert_string_equal(d.partition, e.partition); assert_string_equal(d.account, "acct");
    assert_string_equal(d.cluster, "c1");
    assert_int_equal(js_jobcache_encode(&e, buf, 20), -ENOSPC);
    e.first_seen_ns = 0;
    assert_int_equal(js_jobcache_encode(&e, buf, sizeof buf), -EINVAL);
}
static void decode_rejects(void **st) { (void)st;
    static const char *bad[] = {
        "",
        "[]",
        "42",
        "{not json",
        "{\"job_id\":42,\"uid\":1000,\"first_seen_ns\":5,\"account\":\"\",\"partition\":\"\"}",
        "{\"job_id\":42,\"uid\":1000,\"first_seen_ns\":5,\"account\":\"\",\"partition\":\"\",\"cluster\":\"\",\"x\":1}",
        "{\"job_id\":\"42\",\"uid\":1000,\"first_seen_ns\":5,\"account\":\"\",\"partition\":\"\",\"cluster\":\"\"}",
        "{\"job_id\":-1,\"uid\":1000,\"first_seen_ns\":5,\"account\":\"\",\"partition\":\"\",\"cluster\":\"\"}",
        "{\"job_id\":4294967296,\"uid\":1000,\"first_seen_ns\":5,\"account\":\"\",\"partition\":\"\",\"cluster\":\"\"}",
        "{\"job_id\":42,\"uid\":-5,\"first_seen_ns\":5,\"account\":\"\",\"partition\":\"\",\"cluster\":\"\"}",
        "{\"job_id\":42,\"uid\":1000,\"first_seen_ns\":0,\"account\":\"\",\"partition\":\"\",\"cluster\":\"\"}",
        "{\"job_id\":42,\"uid\":1000,\"first_seen_ns\":5.5,\"account\":\"\",\"partition\":\"\",\"cluster\":\"\"}",
        "{\"job_id\":42,\"uid\":1000,\"first_seen_ns\":5,\"account\":null,\"partition\":\"\",\"cluster\":\"\"}",
        "{\"job_id\":42,\"uid\":1000,\"first_seen_ns\":5,\"account\":\"a\\u0000b\",\"partition\":\"\",\"cluster\":\"\"}",
        "{\"job_id\":42,\"job_id\":42,\"uid\":1000,\"first_seen_ns\":5,\"account\":\"\",\"partition\":\"\",\"cluster\":\"\"}",
    };
    struct js_jobcache d;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(js_jobcache_decode(bad[i], strlen(bad[i]), &d), -EINVAL);
    char big[400]; /* account longer than the struct holds */
    snprintf(big, sizeof big, "{\"job_id\":1,\"uid\":1,\"first_seen_ns\":5,\"account\":\"%070d\",\"partition\":\"\",\"cluster\":\"\"}", 0);
    assert_int_equal(js_jobcache_decode(big, strlen(big), &d), -EINVAL);
    const char *ok = "{\"job_id\":1,\"uid\":1,\"first_seen_ns\":5,\"account\":\"\",\"partition\":\"\",\"cluster\":\"\"}";
    assert_int_equal(js_jobcache_decode(ok, strlen(ok), &d), 0);
    assert_int_equal(js_jobcache_decode(ok, JS_JOBCACHE_MAX + 1, &d), -EINVAL);
}
static void check_rules(void **st) { (void)st;
    struct js_jobcache e = ent();
    uint64_t sub = e.first_seen_ns, start = sub + 5 * S, now = start, week = 168 * 3600 * S;
    assert_int_equal(js_jobcache_check(&e, 42, 1000, start, now - S, now, week), 0);
    assert_int_equal(js_jobcache_check(&e, 42, 1000, sub, now, now, week), 0);      /* same second */
    assert_int_equal(js_jobcache_check(&e, 43, 1000, start, now, now, week), -EINVAL);
    assert_int_equal(js_jobcache_check(&e, 42, 1001, start, now, now, week), -EINVAL);
    assert_int_equal(js_jobcache_check(&e, 42, 1000, sub - JS_JOBCACHE_FUTURE_NS, now, now, week), 0);
    assert_int_equal(js_jobcache_check(&e, 42, 1000, sub - JS_JOBCACHE_FUTURE_NS - 1, now, now, week), -ERANGE);
    assert_int_equal(js_jobcache_check(&e, 42, 1000, start, now - week, now, week), 0);
    assert_int_equal(js_jobcache_check(&e, 42, 1000, start, now - week - 1, now, week), -ESTALE);
    assert_int_equal(js_jobcache_check(&e, 42, 1000, start, now, now, 0), -ESTALE);
    assert_int_equal(js_jobcache_check(&e, 42, 1000, start, now + JS_JOBCACHE_FUTURE_NS, now, week), 0);
    assert_int_equal(js_jobcache_check(&e, 42, 1000, start, now + JS_JOBCACHE_FUTURE_NS + 1, now, week), -ESTALE);
    e.first_seen_ns = 0;
    assert_int_equal(js_jobcache_check(&e, 42, 1000, start, now, now, week), -EINVAL);
}
static void job_files(void **st) { (void)st;
    assert_true(js_jobcache_is_job_file("42", 42));
    assert_true(js_jobcache_is_job_file("42.tmp.123", 42));
    assert_false(js_jobcache_is_job_file("421", 42));
    assert_false(js_jobcache_is_job_file("4", 42));
    assert_false(js_jobcache_is_job_file("42.tmp.", 42));
    assert_false(js_jobcache_is_job_file("42.tmp.1x", 42));
    assert_false(js_jobcache_is_job_file("42.old", 42));
    assert_false(js_jobcache_is_job_file(".42", 42));
}
int main(void) {
    const struct CMUnitTest t[] = {cmocka_unit_test(roundtrip), cmocka_unit_test(decode_rejects),
                                   cmocka_unit_test(check_rules), cmocka_unit_test(job_files)};
    return cmocka_run_group_tests(t, NULL, NULL);
}
"""


def test_cache_logic_unit(repo, tmp_path):
    src = tmp_path / "test_jobcache.c"
    src.write_text(LOGIC_TEST_C)
    exe = tmp_path / "test_jobcache"
    subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-g",
                    f"-I{repo}/spank", str(src), str(repo / "spank/js_jobcache_logic.c"),
                    "-o", str(exe), "-lcmocka", "-ljansson"], check=True)
    res = subprocess.run([str(exe)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "4 test(s) run" in res.stdout + res.stderr and "PASSED" in res.stdout + res.stderr
