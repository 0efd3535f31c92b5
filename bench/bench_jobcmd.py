#!/usr/bin/env python3
"""`joulestep job JOBID` and `joulestep jobs` against seff and sacct (issue 25,
"Benchmarks"; figures, not tests).  Run as root:

    python3 bench/bench_jobcmd.py [--reps 30] [--filler 3000]

Starts its own Slurm cluster with slurmdbd on a private MariaDB
(tests/cluster/harness.py, Cluster(accounting=True)) and Slurm's own
acct_gather_energy/pm_counters on a fake node, runs one job with a batch
step and an srun step, ingests it (with its sacct fields, `--sacct on`)
into a SQLite store that also holds --filler older synthetic records, then
times, each in a new process, round-robin on the same job in the same run:

    joulestep --db DB job JOBID
    joulestep --db DB jobs --user jsuser
    seff JOBID                  (where installed)
    sacct -j JOBID

and prints each one's median and p99 wall time.  Goal: `job` and `jobs` no
slower than seff (median).  Debian 12 packages no seff (Slurm's
contribs/seff: a Perl script that makes one Slurmdb::jobs_get query to
slurmdbd, as sacct does, and then formats it); where it is missing the
figure compared with is sacct's, which makes the same query from C
without Perl's start-up, so seff is slower than it, and says so.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests" / "cluster"), str(REPO / "tests" / "fakehw"),
                str(REPO / "tests" / "cli")]

from harness import Cluster, ensure_user, make_workdir  # noqa: E402
from nodeenv import NodeEnv, USER  # noqa: E402

JOULESTEP = REPO / ".venv" / "bin" / "joulestep"


def pct(xs, p):
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def start(build):
    workdir = make_workdir("bench-jobcmd-")
    c = Cluster(workdir, accounting=True)
    env = NodeEnv(c, build, "jsbjob", 2_400_000, 1_200_000, pm_counters=True)
    c.pm_counters = env.hw / "cray" / "pm_counters"
    env.configure(cluster="jstest", node_energy="pm_counters")
    c.start()
    c.dbd.add_account("jsbench", users=[USER])
    return workdir, c, env


def one_job(c, env) -> int:
    inner = f"sleep 1; {env.adv('s', 3)}; sleep 1"
    job, _ = env.run_job(f"#!/bin/sh\n#SBATCH -n1\nsleep 1\n{env.adv('b', 4)}\n"
                         f"srun -n1 sh -c '{inner}'\nsleep 1\n", args=["--account=jsbench"])
    env.wait_records(job, ["batch", "0"])
    for _ in range(200):
        out = c.run(["sacct", "-X", "-n", "-P", "-j", str(job), "-o", "State,Partition"],
                    timeout=60, check=True).stdout.strip()
        if out.startswith("COMPLETED|") and out.split("|")[1]:
            return job
        time.sleep(0.3)
    raise RuntimeError(f"sacct does not show job {job} ended")


def fill(db, n: int, workdir) -> None:
    """n older synthetic step records of other jobs (a store with history)."""
    import recgen
    sp = workdir / "filler"
    for i in range(n):
        recgen.write(sp, recgen.record(100000 + i // 2, str(i % 2), f"n{i % 16:02d}",
                                       user=("alice", "bob", USER)[i % 3],
                                       start_s=i * 20, submit_s=i * 20 - 1))
    subprocess.run([str(JOULESTEP), "--db", str(db), "ingest", str(sp), "--sacct", "off"],
                   check=True, capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--filler", type=int, default=3000)
    a = ap.parse_args()
    build = REPO / "build"
    ensure_user(USER)
    workdir, c, env = start(build)
    try:
        job = one_job(c, env)
        db = workdir / "js.db"
        fill(db, a.filler, workdir)
        res = subprocess.run([str(JOULESTEP), "--db", str(db), "--format", "json", "ingest",
                              str(env.spool), "--sacct", "on"], env=c.env, check=True,
                             capture_output=True, text=True)
        acct = json.loads(res.stdout)["slurm_accounting"]
        assert acct["filled"] >= 1, acct
        seff = shutil.which("seff", path=c.env.get("PATH"))
        cmds = {
            "joulestep job JOBID": [str(JOULESTEP), "--db", str(db), "job", str(job)],
            "joulestep jobs": [str(JOULESTEP), "--db", str(db), "jobs", "--user", USER],
            "sacct -j JOBID": ["sacct", "-j", str(job)],
        }
        if seff:
            cmds["seff JOBID"] = [seff, str(job)]
        # every command once, checked, before timing
        for name, argv in cmds.items():
            r = subprocess.run(argv, env=c.env, capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                raise RuntimeError(f"{name}: exit {r.returncode}: "
                                   f"{(r.stderr + r.stdout).strip()[-300:]}")
        text = subprocess.run(cmds["joulestep job JOBID"], env=c.env, capture_output=True,
                              text=True).stdout
        assert re.search(r"Node meter \(Slurm", text), text
        times: dict = {k: [] for k in cmds}
        for _ in range(a.reps):
            for name, argv in cmds.items():
                t0 = time.perf_counter()
                subprocess.run(argv, env=c.env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, check=True)
                times[name].append(time.perf_counter() - t0)
        print(f"job {job}; store: {a.filler} filler records + the job; {a.reps} runs "
              "each, round-robin, each a new process")
        if not seff:
            print("seff: not installed (Debian 12 packages none): compared with "
                  "sacct -j JOBID, which makes seff's slurmdbd query without Perl")
        for name, xs in times.items():
            print(f"  {name:<36} median {statistics.median(xs) * 1e3:8.1f} ms   "
                  f"p99 {pct(xs, 99) * 1e3:8.1f} ms")
        ref_name = "seff JOBID" if seff else "sacct -j JOBID"
        ref = times[ref_name]
        for name in ("joulestep job JOBID", "joulestep jobs"):
            r = statistics.median(times[name]) / statistics.median(ref)
            print(f"  {name} / {ref_name}: {r:.2f}x (median)   goal <= 1: "
                  f"{'met' if r <= 1 else 'MISSED'}")
        return 0
    finally:
        env.close()
        c.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
