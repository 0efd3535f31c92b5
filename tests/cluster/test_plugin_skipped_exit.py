"""The plugin is safe whichever of its callbacks Slurm skips (issue 23, defect 1), on the
live Slurm cluster with fake RAPL/cpufreq (manual mode).

Slurm 22.05's `_do_call_stack` stops at the first *required* plugin whose callback
fails, and `spank_fini` then dlcloses every plugin anyway: a site plugin listed before
joulestep whose `slurm_spank_exit` fails makes slurmstepd skip joulestep's. The plugin
must still stop its thread before its code is unmapped, put the clocks back and leave a
record (or a counted `.lost`). The environment (fake hardware, spool, state, socket
dir) is this module's own.
"""
from __future__ import annotations

import os
import pathlib
import re
import subprocess

import pytest

from nodeenv import NodeEnv

pytestmark = pytest.mark.cluster

USER = "jsuser"
FMAX = 4000000
FMIN = 800000

# A site plugin that fails one callback in slurmstepd. Its plugstack argument says
# which: `exit` (listed `required` before joulestep: Slurm calls no later plugin's
# slurm_spank_exit, then dlcloses them all), or `post_opt` (listed `required` after
# joulestep, failing for srun steps only: slurmstepd gives up the step after
# joulestep's init_post_opt started it, without calling any exit callback).
FAIL_C = r'''
#include <string.h>
#include <slurm/slurm.h>
#include <slurm/spank.h>
SPANK_PLUGIN(jstest_fail, 1);
static int fails(spank_t sp, int ac, char **av, const char *what)
{
	uint32_t step = 0;
	if (spank_context() != S_CTX_REMOTE || ac < 1 || strcmp(av[0], what))
		return 0;
	if (!strcmp(what, "post_opt") &&
	    (spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS || step == SLURM_BATCH_SCRIPT))
		return 0;
	return -1;
}
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av) { return fails(sp, ac, av, "post_opt"); }
int slurm_spank_exit(spank_t sp, int ac, char **av) { return fails(sp, ac, av, "exit"); }
'''


class SkipEnv(NodeEnv):
    job_timeout = 120
    record_timeout = 30

    def __init__(self, cluster, build: pathlib.Path, fail_so: pathlib.Path):
        super().__init__(cluster, build, "jsskipexit", FMAX, FMIN)
        self.fail_so = fail_so
        self.snapshot_clocks()

    def args(self, **extra) -> dict:
        return super().args(**{"cluster": "jstest", **extra})

    def configure(self, fail: str = "exit", **extra):
        """The failing plugin's line before joulestep's (fail="exit") or after it."""
        super().configure(**extra)
        lines = self.c.plugstack.read_text().splitlines()
        at = next(i for i, l in enumerate(lines) if "joulestep.so" in l)
        lines.insert(at if fail == "exit" else at + 1, f"required {self.fail_so} {fail}")
        self.c.plugstack.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def senv(cluster, build_dir, tmp_path_factory):
    src = tmp_path_factory.mktemp("failexit") / "fail.c"
    src.write_text(FAIL_C)
    env = None
    try:
        so = cluster.workdir / "jstest_fail.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", str(src), "-o", str(so)], check=True)
        os.chmod(so, 0o755)
        env = SkipEnv(cluster, build_dir, so)
        yield env
    finally:
        cluster.write_plugstack(None)
        cluster.wait_idle()
        if env:
            env.close()


def _clock_poll(env: SkipEnv, tag: str, want: str, tries: int = 300) -> str:
    """Shell lines: wait (up to tries x 0.1 s) until every CPU's scaling_max_freq reads
    `want` (all CPUs, space-separated), then print them tagged."""
    files = " ".join(f"{env.hw}/devices/system/cpu/cpu{i}/cpufreq/scaling_max_freq"
                     for i in range(env.ncpus))
    return (f'i=0; while [ "$(cat {files} | tr "\\n" " ")" != "{want} " ] && [ $i -lt {tries} ]; '
            f'do sleep 0.1; i=$((i+1)); done; echo "CLOCKS {tag} $(cat {files} | tr "\\n" " ")"\n')


def _lost(env: SkipEnv, job) -> list[str]:
    """The job's `.lost` markers and `joulestep-lost` documents, wherever they are."""
    return sorted(p.name for root in (env.spool, env.state) if root.exists()
                  for p in root.rglob(f"{job}.*") if "lost" in str(p))


def _kernel_segfaults() -> list[str] | None:
    """The kernel log's segfaults of slurmstepd or a thread of it (the plugin's is
    `js-step`; other processes' are not ours: tests elsewhere crash tasks on purpose),
    or None where the log cannot be read."""
    r = subprocess.run(["dmesg"], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return [l for l in r.stdout.splitlines()
            if "segfault" in l and re.search(r"slurmstepd|js-step|joulestep", l)]


def test_skipped_exit_restores_clocks_and_keeps_the_record(senv):
    """A required plugin before joulestep fails its slurm_spank_exit: joulestep's own
    exit is never called and slurmstepd dlcloses it. The srun step under fixed:0.5 still
    gives the clocks back (seen from the batch script, while the job runs: before the
    job epilog could restore them), slurmstepd does not crash, and every step of the
    job has its record, with the fixed clock it was held at."""
    env = senv
    env.configure(fail="exit")
    env.c.wait_idle()
    orig = " ".join(str(env.orig[i]["scaling_max_freq"]) for i in range(env.ncpus))
    half = round(0.5 * FMAX)
    lowered = " ".join(str(half) for _ in range(env.ncpus))
    step = (f"{env.phase('begin', 'write')}; "
            + "; ".join(f'echo "INSTEP $(cat {env.hw}/devices/system/cpu/cpu{i}/cpufreq/scaling_max_freq)"'
                        for i in range(env.ncpus))
            + f"; {env.phase('end', '--bytes', 5)}")
    cpus = f"-n1 -c{env.ncpus}"  # every CPU of the node: each one is lowered
    script = (f"#!/bin/sh\n#SBATCH {cpus}\n"
              f"srun {cpus} --energy-policy=fixed:0.5 sh -c '{step}'\n"
              f'echo "SRUN_RC $?"\n'
              + _clock_poll(env, "after", orig))
    seg0 = _kernel_segfaults()
    job, out = env.run_job(script)
    assert "SRUN_RC 0" in out, out
    # the step ran at half clock (the truth: fixed:0.5 of the fake tree's fmax)...
    assert re.findall(r"^INSTEP (\d+)$", out, re.M) == [str(half)] * env.ncpus, (out, lowered)
    # ...and gave it back itself, while the job still ran
    assert f"CLOCKS after {orig} " in out + " ", out
    recs = env.wait_records(job, ["batch", "0"])
    r0 = recs["0"]
    assert r0["step"]["fixed_freq_khz"] == half, r0["step"]
    assert [(p["kind"], p["bytes"]) for p in r0["phases"]] == [("write", 5)], r0["phases"]
    assert not _lost(env, job), _lost(env, job)
    for r in recs.values():  # each record says that its step was ended at unload
        assert any("slurm_spank_exit was not called" in e for e in r["provenance"]["errors"]), r["provenance"]
    env.assert_restored()
    # no slurmstepd crashed: nothing in the daemons' logs says so
    bad = re.compile(r"segfault|Segmentation|signal 11|SIGSEGV|core dumped", re.I)
    for f in env.c.log_dir.glob("*"):
        hits = [l for l in f.read_text(errors="replace").splitlines() if bad.search(l)]
        assert not hits, (f.name, hits[:5])
    seg1 = _kernel_segfaults()
    if seg0 is not None and seg1 is not None:
        assert seg1[len(seg0):] == [], seg1[len(seg0):]


def test_failed_setup_after_joulestep_restores_clocks(senv):
    """A required plugin after joulestep fails its init_post_opt in an srun step:
    joulestep had already started the step (fixed:0.5 applied, thread running) when
    slurmstepd gave the step up without calling any exit callback. The step fails, but
    its CPUs are back while the job still runs, slurmstepd does not crash, and the step
    has a record or a counted `.lost`."""
    env = senv
    env.configure(fail="post_opt")
    env.c.wait_idle()
    orig = " ".join(str(env.orig[i]["scaling_max_freq"]) for i in range(env.ncpus))
    cpus = f"-n1 -c{env.ncpus}"
    script = (f"#!/bin/sh\n#SBATCH {cpus}\n"
              f"srun {cpus} --energy-policy=fixed:0.5 true\n"
              + _clock_poll(env, "after", orig))
    seg0 = _kernel_segfaults()
    job, out = env.run_job(script)
    assert "launch failed" in out, out   # the step was given up (srun still exits 0)
    assert f"CLOCKS after {orig} " in out + " ", out
    if not _lost(env, job):
        recs = env.wait_records(job, ["batch", "0"])
        assert any("slurm_spank_exit was not called" in e for e in recs["0"]["provenance"]["errors"])
    env.assert_restored()
    seg1 = _kernel_segfaults()
    if seg0 is not None and seg1 is not None:
        assert seg1[len(seg0):] == [], seg1[len(seg0):]
