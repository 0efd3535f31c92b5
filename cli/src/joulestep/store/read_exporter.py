"""The store's rows as the exporter (exporter.py) reads them: each step's
figures for its sums, and the marks its incremental refresh checks."""
from __future__ import annotations

from .read_jobs import PHASE_COLS, STEP_COLS, STEPS_FROM

#: after STEP_COLS in contribution_rows: the job, its labels, the GPU columns
EXTRA_COLS = 8


def phase_rows(conn, where: str, args) -> dict:
    """{step_pk: [PHASE_COLS rows]} of the steps `where` (a condition on
    steps s, the caller's own text) selects."""
    out: dict = {}
    for r in conn.execute(f"SELECT {PHASE_COLS} FROM phases p JOIN steps s "
                          f"ON s.step_pk = p.step_pk WHERE {where} "
                          "ORDER BY p.step_pk, p.seq", args):
        out.setdefault(r[0], []).append(r)
    return out


def contribution_rows(conn, where: str, args):
    """STEP_COLS, then job_pk, cluster, user, account, partition,
    total_includes, gpu_backend, gpus_unmeasured (EXTRA_COLS) of the steps
    `where` selects."""
    return conn.execute(f"SELECT {STEP_COLS}, s.job_pk, j.cluster, "
                        "j.user_name, j.account, j.partition, s.total_includes, "
                        "s.gpu_backend, s.gpus_unmeasured FROM "
                        f"{STEPS_FROM} JOIN jobs j ON j.job_pk = s.job_pk "
                        f"WHERE {where}", args)


_LAST_STEP = "SELECT step_pk, job_pk, node_pk, step_id, start_ns, end_ns FROM steps"
_LAST_JOB = "SELECT job_pk, cluster, job_id, first_seen_ns FROM jobs"


def marks(conn) -> tuple:
    """(steps, jobs, the newest step's row, the newest job's row)."""
    nsteps = conn.execute("SELECT count(*) FROM steps").fetchone()[0]
    njobs = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
    last_step = conn.execute(_LAST_STEP + " ORDER BY step_pk DESC LIMIT 1").fetchone()
    last_job = conn.execute(_LAST_JOB + " ORDER BY job_pk DESC LIMIT 1").fetchone()
    return nsteps, njobs, tuple(last_step or ()), tuple(last_job or ())


def price_mark(conn) -> tuple:
    """(rows, sum of values, sum of durations) of the imported prices: a
    change of any makes the exporter's next refresh a full read."""
    return tuple(conn.execute(
        "SELECT count(*), sum(value_per_kwh), sum(end_ns - start_ns) "
        "FROM grid_intensity WHERE kind = 'price_per_kwh'").fetchone())


def step_mark(conn, step_pk: int):
    return conn.execute(_LAST_STEP + " WHERE step_pk = ?", (step_pk,)).fetchone()


def job_mark(conn, job_pk: int):
    return conn.execute(_LAST_JOB + " WHERE job_pk = ?", (job_pk,)).fetchone()


def newest_end(conn) -> int:
    return conn.execute("SELECT max(end_ns) FROM steps").fetchone()[0] or 0


def jobs_ended_since(conn, cutoff_ns: int) -> set:
    return {r[0] for r in conn.execute(
        "SELECT DISTINCT job_pk FROM steps WHERE end_ns >= ?", (cutoff_ns,))}


def new_steps_jobs(conn, after_step_pk: int) -> list:
    """The job of every step after after_step_pk."""
    return [r[0] for r in conn.execute("SELECT job_pk FROM steps WHERE step_pk > ?",
                                       (after_step_pk,))]


def new_jobs(conn, after_job_pk: int) -> int:
    return conn.execute("SELECT count(*) FROM jobs WHERE job_pk > ?",
                        (after_job_pk,)).fetchone()[0]


def neighbours_of_new(conn, after_step_pk: int, settle_ns: int) -> set:
    """The jobs that ran beside a new step (with shared-node inputs) on its
    node, started within settle_ns before it."""
    return {r[0] for r in conn.execute(
        "SELECT DISTINCT o.job_pk FROM steps n JOIN steps o ON o.node_pk = n.node_pk "
        "AND o.start_ns < n.end_ns AND o.start_ns > n.start_ns - ? AND o.end_ns > "
        "n.start_ns WHERE n.step_pk > ? AND EXISTS (SELECT 1 FROM step_packages p "
        "WHERE p.step_pk = n.step_pk)", (settle_ns, after_step_pk))}
