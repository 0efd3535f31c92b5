"""The store's rows that `joulestep ingest` compares with Slurm's
accounting (slurmacct.py): the recently seen jobs, and each job's sums
for the summary it writes into AdminComment."""
from __future__ import annotations

_STATS = ("SELECT s.job_pk, count(*), sum(s.counted_total_uj), sum(s.counted_cpu_uj), "
          "sum(s.counted_dram_uj), sum(CASE WHEN s.counted_total_uj IS NULL THEN 0 "
          "ELSE s.counted_duration_ns END), sum(CASE WHEN s.counted_total_uj IS NULL "
          "THEN 1 ELSE 0 END) FROM steps s JOIN jobs j ON j.job_pk = s.job_pk "
          "WHERE j.last_seen_ns >= ? GROUP BY s.job_pk")
_POLICIES = ("SELECT DISTINCT s.job_pk, s.policy FROM steps s JOIN jobs j ON "
             "j.job_pk = s.job_pk WHERE j.last_seen_ns >= ?")


def job_stats(conn, since_ns: int):
    """Per job last seen at or after since_ns: (job_pk, steps, total µJ, CPU
    µJ, DRAM µJ, measured ns, steps not measured); one job's sums."""
    return conn.execute(_STATS, (since_ns,))


def job_policies(conn, since_ns: int):
    """(job_pk, policy) of every policy a recently seen job's steps ran."""
    return conn.execute(_POLICIES, (since_ns,))


def recent_jobs(conn, since_ns: int) -> list:
    """(job_pk, cluster, job_id, first_seen_ns, uid, sacct_ns, admin_comment,
    slurm_state) of the jobs last seen at or after since_ns, latest first."""
    return conn.execute(
        "SELECT job_pk, cluster, job_id, first_seen_ns, uid, sacct_ns, admin_comment, "
        "slurm_state FROM jobs WHERE last_seen_ns >= ? ORDER BY last_seen_ns DESC",
        (since_ns,)).fetchall()
