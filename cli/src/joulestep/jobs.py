"""`joulestep jobs`: a user's recent jobs with their energy, sacct-style.

Each job's figures are `joulestep job`'s totals (jobsummary.py), in its
user view for a caller who is not an admin: one rule for what a user sees
(docs/security.md).  Who may list whom (:func:`who`) is pure; the job list is
one query on the jobs table (cluster, job ID, first seen: a recycled ID is
another job); `--state` asks sacct, which the store does not mirror.
"""
from __future__ import annotations

from . import jobsummary
from .report import iso
from .store import read_jobs

DEFAULT_DAYS = 7
MAX_JOBS = 1000


class JobsError(ValueError):
    """A request that cannot be answered (message says why)."""


def who(requested: list[str] | None, caller: str, admin: bool) -> list[str]:
    """The users to list: the caller by default; others only for admins."""
    users = list(dict.fromkeys(requested)) if requested else [caller]
    if not admin and users != [caller]:
        raise JobsError(f"only admins list other users' jobs; you are {caller} "
                        "(without --user: your own)")
    return users


def list_jobs(conn, settings, users: list[str], since_ns: int, until_ns=None,
              cluster=None, user_view: bool = False, only_ids=None) -> list[dict]:
    """One dict per job: identity, and `job`'s totals (energy, kWh, CO2,
    cost), in the user view when ``user_view``.  only_ids: keep these job
    IDs (from sacct --state)."""
    out = []
    for cl, job_id, first, user, account, partition, steps_n in read_jobs.user_jobs(
            conn, users, since_ns, until_ns, cluster, MAX_JOBS):
        if only_ids is not None and job_id not in only_ids:
            continue
        t = jobsummary.summary(conn, job_id, settings, cl, first,
                               user_view=user_view)["totals"]
        out.append({"cluster": cl, "job_id": job_id, "user": user,
                    "account": account, "partition": partition,
                    "first_seen_ns": first, "first_seen": iso(first),
                    "steps": steps_n, "energy_total_j": t["energy_total_j"],
                    "energy_cpu_j": t["energy_cpu_j"],
                    "energy_dram_j": t["energy_dram_j"],
                    "energy_gpu_j": t["energy_gpu_j"],
                    "total_includes": t["total_includes"], "kwh": t["kwh"],
                    "co2_g": t["co2_g"], "cost": t["cost"]})
    return out


def sacct_ids(users: list[str], since_ns: int, until_ns, states: str,
              cluster=None) -> set[int]:
    """The job IDs (JobIDRaw) sacct has for the users in the period, in the
    states given (sacct -s: COMPLETED, FAILED, TIMEOUT, ...)."""
    import time
    from .slurmacct import Unavailable, _run

    def stamp(ns):
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ns // 10**9))
    argv = ["sacct", "-X", "-n", "-P", "-o", "JobIDRaw", f"--user={','.join(users)}",
            f"--state={states}", f"--starttime={stamp(since_ns)}"]
    if until_ns is not None:
        argv.append(f"--endtime={stamp(until_ns)}")
    if cluster:
        argv.append(f"--clusters={cluster}")
    try:
        out = _run(argv, 60)
    except Unavailable as e:
        raise JobsError(f"--state needs sacct (the store keeps no job state): {e}") \
            from None
    return {int(x) for x in out.split() if x.isdigit()}
