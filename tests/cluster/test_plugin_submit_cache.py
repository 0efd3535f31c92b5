"""The plugin's job-scoped submit-time cache (<state>/jobs/<job_id>) on the live cluster.

Only the first step of a job on a node asks slurmctld for the job's submit time; it stores
the answer root-only under the plugin's state dir, later steps of the job read it
(provenance.submit_time_source = "cache"), and the job epilog removes it. Entries that
cannot belong to the job (another owner, submitted after the step started, older than
submit_cache_hours, not a root-only regular file, unparsable) are ignored and replaced.

slurmd decides at start whether any SPANK plugin has a job epilog, so this module restarts
slurmd with the plugin configured (and restores the plugin-free slurmd afterwards).
"""
from __future__ import annotations

import json
import os
import pathlib
import pwd
import subprocess
import time

import pytest

import fakehw
import spool

pytestmark = pytest.mark.cluster

USER = "jsuser"
REPO = pathlib.Path(__file__).resolve().parents[2]
DAY_NS = 86400 * 10**9


class CacheEnv:
    def __init__(self, cluster, build: pathlib.Path):
        self.c = cluster
        self.root = cluster.workdir / "jscache"
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

    def records(self, job) -> dict:
        return spool.records(self.spool, job)

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


def wait_for(cond, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def cenv(cluster, build_dir):
    env = CacheEnv(cluster, build_dir)
    env.configure()
    cluster.restart_slurmd()  # slurmd must see the plugin's job epilog
    try:
        yield env
    finally:
        cluster.write_plugstack(None)
        cluster.restart_slurmd()


@pytest.fixture
def cache(cenv):
    cenv.configure()
    cenv.c.wait_idle()
    return cenv


def paused_script(d: pathlib.Path, tag: str) -> str:
    """Step 0, then wait for the test's go, then step 1 (so step 1 surely starts after the
    test has seen the cache file)."""
    return f"""#!/bin/sh
#SBATCH -n1
srun -n1 true
touch {d}/{tag}.s0
i=0; while [ ! -e {d}/{tag}.go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
srun -n1 true
"""


def test_later_steps_use_the_cache_and_epilog_removes_it(cache):
    c = cache.c
    d = c.user_dir(USER)
    for f in ("a.s0", "a.go"):
        (d / f).unlink(missing_ok=True)
    # leftovers of jobs whose epilog never ran: the old one is swept by any job's epilog
    cache.make_jobs_dir()
    old, fresh = cache.jobs / "999999", cache.jobs / "999998"
    for p in (old, fresh):
        p.write_text("{}")
        os.chmod(p, 0o600)
    os.utime(old, (time.time() - 8 * 86400,) * 2)  # > submit_cache_hours (168 h)

    res, job = c.sbatch(paused_script(d, "a"), user=USER)
    assert res.returncode == 0 and job, res.stderr
    try:
        wait_for(lambda: (d / "a.s0").exists(), "step 0 done")
        f = cache.cache_file(job)
        wait_for(f.exists, f"cache file {f}")
        # root-only file in a root-only directory, holding the job's real submit time
        st, dst = os.lstat(f), os.lstat(cache.jobs)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777, st.st_nlink) == (0, 0, 0o600, 1)
        assert dst.st_uid == 0 and dst.st_mode & 0o777 == 0o700
        entry = json.loads(f.read_text())
        assert entry["job_id"] == int(job) and entry["uid"] == cache.uid
        assert entry["submit_time_ns"] == cache.submit_ns(job)
    finally:
        (d / "a.go").touch()
    assert c.wait_job(job) == "COMPLETED"
    recs = cache.wait_records(job, ["batch", "0", "1"])
    # one job key on every step
    assert {r["job"]["submit_time_ns"] for r in recs.values()} == {entry["submit_time_ns"]}
    # step 1 started after the file existed: it did not ask slurmctld
    assert recs["1"]["provenance"]["submit_time_source"] == "cache"
    assert recs["batch"]["provenance"]["submit_time_source"] in ("slurmctld", "cache")
    assert "slurmctld" in {r["provenance"]["submit_time_source"] for r in recs.values()}
    for r in recs.values():
        assert r["provenance"]["errors"] == [], r["provenance"]["errors"]
    # the job epilog (root, on the node) removed the job's file and swept the old leftover
    wait_for(lambda: not f.exists(), f"epilog removing {f}")
    assert not old.exists()
    assert fresh.exists()
    fresh.unlink()


PLANTS = ["valid", "future", "other_uid", "old_mtime", "symlink", "garbage", "group_readable",
          "hardlink"]


@pytest.mark.parametrize("plant", PLANTS)
def test_planted_cache_entries(cache, plant):
    """Only a fresh root-only entry of this job and owner, submitted before the step, is
    used; anything else is ignored, the job asks slurmctld and the entry is replaced."""
    c = cache.c
    res, job = c.sbatch("#!/bin/sh\n#SBATCH -n1\ntrue\n", user=USER, args=["--hold"])
    assert res.returncode == 0 and job, res.stderr
    real = cache.submit_ns(job)
    f = cache.cache_file(job)
    cache.make_jobs_dir()
    entry = {"job_id": int(job), "uid": cache.uid, "submit_time_ns": real - 7 * 10**9,
             "name": "planted", "account": ""}
    target = cache.root / f"target-{job}"
    if plant == "future":
        entry["submit_time_ns"] = real + DAY_NS
    elif plant == "other_uid":  # a recycled job ID of another user
        entry["uid"] = pwd.getpwnam("jsother").pw_uid
    text = "{not json" if plant == "garbage" else json.dumps(entry)
    if plant in ("symlink", "hardlink"):
        target.write_text(text)
        os.chmod(target, 0o600)
        os.symlink(target, f) if plant == "symlink" else os.link(target, f)
    else:
        f.write_text(text)
        os.chmod(f, 0o640 if plant == "group_readable" else 0o600)
    if plant == "old_mtime":
        os.utime(f, (time.time() - 8 * 86400,) * 2)

    assert c.run(["scontrol", "release", job]).returncode == 0
    assert c.wait_job(job) == "COMPLETED"
    rec = cache.wait_records(job, ["batch"])["batch"]
    if plant == "valid":
        assert rec["provenance"]["submit_time_source"] == "cache"
        assert rec["job"]["submit_time_ns"] == real - 7 * 10**9
    else:
        assert rec["provenance"]["submit_time_source"] == "slurmctld", plant
        assert rec["job"]["submit_time_ns"] == real
        assert rec["job"]["name"] != "planted"
    assert rec["provenance"]["errors"] == []
    wait_for(lambda: not os.path.lexists(f), f"epilog removing {f}")
    if plant in ("symlink", "hardlink"):  # never written or removed through the link
        assert target.read_text() == text
        target.unlink()


def test_cache_disabled_with_zero_hours(cache):
    c = cache.c
    cache.configure(submit_cache_hours=0)
    d = c.user_dir(USER)
    for f in ("z.s0", "z.go"):
        (d / f).unlink(missing_ok=True)
    res, job = c.sbatch(paused_script(d, "z"), user=USER)
    assert res.returncode == 0 and job, res.stderr
    try:
        wait_for(lambda: (d / "z.s0").exists(), "step 0 done")
        assert not cache.cache_file(job).exists()
    finally:
        (d / "z.go").touch()
    assert c.wait_job(job) == "COMPLETED"
    recs = cache.wait_records(job, ["batch", "0", "1"])
    assert {r["provenance"]["submit_time_source"] for r in recs.values()} == {"slurmctld"}
    assert {r["job"]["submit_time_ns"] for r in recs.values()} == {cache.submit_ns(job)}
    assert not cache.cache_file(job).exists()


def test_bad_submit_cache_hours_is_refused(cache):
    cache.configure(submit_cache_hours="week")
    res, job = cache.c.sbatch("#!/bin/sh\ntrue\n", user=USER, args=["--energy-policy=monitor"])
    assert res.returncode != 0 and job is None
    assert "submit_cache_hours=: an integer in [0, 8760] (0 = no cache)" in res.stderr


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
    struct js_jobcache e = {.job_id = 42, .uid = 1000, .submit_ns = 1700000000ULL * S};
    strcpy(e.name, "j\"x\\ \u00e9"); strcpy(e.account, "acct");
    return e;
}
static void roundtrip(void **st) { (void)st;
    struct js_jobcache e = ent(), d; char buf[JS_JOBCACHE_MAX];
    assert_int_equal(js_jobcache_encode(&e, buf, sizeof buf), 0);
    memset(&d, 0x55, sizeof d);
    assert_int_equal(js_jobcache_decode(buf, strlen(buf), &d), 0);
    assert_int_equal(d.job_id, 42); assert_int_equal(d.uid, 1000);
    assert_true(d.submit_ns == e.submit_ns);
    assert_string_equal(d.name, e.name); assert_string_equal(d.account, "acct");
    assert_int_equal(js_jobcache_encode(&e, buf, 20), -ENOSPC);
    e.submit_ns = 0;
    assert_int_equal(js_jobcache_encode(&e, buf, sizeof buf), -EINVAL);
}
static void decode_rejects(void **st) { (void)st;
    static const char *bad[] = {
        "", "[]", "42", "{not json",
        "{\"job_id\":42,\"uid\":1000,\"submit_time_ns\":5,\"name\":\"\"}",                         /* missing */
        "{\"job_id\":42,\"uid\":1000,\"submit_time_ns\":5,\"name\":\"\",\"account\":\"\",\"x\":1}", /* extra */
        "{\"job_id\":\"42\",\"uid\":1000,\"submit_time_ns\":5,\"name\":\"\",\"account\":\"\"}",
        "{\"job_id\":-1,\"uid\":1000,\"submit_time_ns\":5,\"name\":\"\",\"account\":\"\"}",
        "{\"job_id\":4294967296,\"uid\":1000,\"submit_time_ns\":5,\"name\":\"\",\"account\":\"\"}",
        "{\"job_id\":42,\"uid\":-5,\"submit_time_ns\":5,\"name\":\"\",\"account\":\"\"}",
        "{\"job_id\":42,\"uid\":1000,\"submit_time_ns\":0,\"name\":\"\",\"account\":\"\"}",
        "{\"job_id\":42,\"uid\":1000,\"submit_time_ns\":5.5,\"name\":\"\",\"account\":\"\"}",
        "{\"job_id\":42,\"uid\":1000,\"submit_time_ns\":5,\"name\":null,\"account\":\"\"}",
        "{\"job_id\":42,\"uid\":1000,\"submit_time_ns\":5,\"name\":\"a\\u0000b\",\"account\":\"\"}",
        "{\"job_id\":42,\"job_id\":42,\"uid\":1000,\"submit_time_ns\":5,\"name\":\"\",\"account\":\"\"}",
    };
    struct js_jobcache d;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(js_jobcache_decode(bad[i], strlen(bad[i]), &d), -EINVAL);
    char big[400]; /* account longer than the struct holds */
    snprintf(big, sizeof big, "{\"job_id\":1,\"uid\":1,\"submit_time_ns\":5,\"name\":\"\",\"account\":\"%070d\"}", 0);
    assert_int_equal(js_jobcache_decode(big, strlen(big), &d), -EINVAL);
    const char *ok = "{\"job_id\":1,\"uid\":1,\"submit_time_ns\":5,\"name\":\"\",\"account\":\"\"}";
    assert_int_equal(js_jobcache_decode(ok, strlen(ok), &d), 0);
    assert_int_equal(js_jobcache_decode(ok, JS_JOBCACHE_MAX + 1, &d), -EINVAL);
}
static void check_rules(void **st) { (void)st;
    struct js_jobcache e = ent();
    uint64_t sub = e.submit_ns, start = sub + 5 * S, now = start, week = 168 * 3600 * S;
    assert_int_equal(js_jobcache_check(&e, 42, 1000, start, now - S, now, week), 0);
    assert_int_equal(js_jobcache_check(&e, 42, 1000, sub, now, now, week), 0);      /* same second */
    assert_int_equal(js_jobcache_check(&e, 43, 1000, start, now, now, week), -EINVAL);
    assert_int_equal(js_jobcache_check(&e, 42, 1001, start, now, now, week), -EINVAL);
    assert_int_equal(js_jobcache_check(&e, 42, 1000, sub - 1, now, now, week), -ERANGE);
    assert_int_equal(js_jobcache_check(&e, 42, 1000, start, now - week, now, week), 0);
    assert_int_equal(js_jobcache_check(&e, 42, 1000, start, now - week - 1, now, week), -ESTALE);
    assert_int_equal(js_jobcache_check(&e, 42, 1000, start, now, now, 0), -ESTALE);
    assert_int_equal(js_jobcache_check(&e, 42, 1000, start, now + JS_JOBCACHE_FUTURE_NS, now, week), 0);
    assert_int_equal(js_jobcache_check(&e, 42, 1000, start, now + JS_JOBCACHE_FUTURE_NS + 1, now, week), -ESTALE);
    e.submit_ns = 0;
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
