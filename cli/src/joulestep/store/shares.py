"""The estimated shares of shared-node steps, stored (table step_shares,
migration 017) for the users' own PostgreSQL roles (docs/security.md, "Who
sees which jobs (the store)").

A user's role cannot work out its job's share of a shared package: the
estimate needs every step of the node over the interval, which are other
users' (read_sharing.py, by the one rule of attribution.py).  So ingest, which
sees every row, stores each outermost step's estimate after every run that
added steps with the attribution's inputs, for their jobs and every job
that overlapped them on a node (a record ingested later changes its
neighbours' shares).  The users' views (userviews.py) show a user the rows
of their own steps only, rounded and hidden as their energies are.  The
reports, `job` and the exporter still work the estimate out when read; the
stored rows are for the users' roles.
"""
from __future__ import annotations

CHUNK = 500


def top(conn) -> int:
    """The highest step key so far: the steps of this run come after it."""
    return conn.execute("SELECT COALESCE(max(step_pk), 0) FROM steps").fetchone()[0]


def _in(n: int) -> str:
    return "(" + ", ".join("?" * n) + ")"


def _chunked(conn, sql: str, ids: list) -> set:
    out = set()
    for i in range(0, len(ids), CHUNK):
        part = ids[i:i + CHUNK]
        out |= {r[0] for r in conn.execute(sql + _in(len(part)), part).fetchall()}
    return out


def refresh_after(conn, since_pk: int) -> int:
    """Store the shares of the jobs whose steps (after ``since_pk``) have
    the attribution's inputs, and of every job that overlapped them on a
    node; returns the rows written."""
    new = [r[0] for r in conn.execute(
        "SELECT DISTINCT step_pk FROM step_packages WHERE step_pk > ?", (since_pk,))]
    if not new:
        return 0
    jobs = sorted(_chunked(conn, "SELECT DISTINCT s2.job_pk FROM steps s JOIN steps s2 ON "
                                 "s2.node_pk = s.node_pk AND s2.start_ns < s.end_ns AND "
                                 "s2.end_ns > s.start_ns WHERE s.step_pk IN ", new))
    from . import read_sharing
    est = read_sharing.estimates(conn, jobs)
    outer = sorted(_chunked(conn, "SELECT step_pk FROM steps WHERE inside_step_pk IS NULL "
                                  "AND job_pk IN ", jobs))
    def uj(v):
        return None if v is None else int(round(v))
    rows = [(pk, uj(s.cpu_uj), uj(s.dram_uj), s.sharing) for pk, s in sorted(est.items())
            if s is not None]
    conn.execute("BEGIN IMMEDIATE")
    try:
        for i in range(0, len(outer), CHUNK):
            part = outer[i:i + CHUNK]
            conn.execute("DELETE FROM step_shares WHERE step_pk IN " + _in(len(part)), part)
        if rows:
            conn.executemany("INSERT INTO step_shares (step_pk, cpu_uj, dram_uj, sharing) "
                             "VALUES (?, ?, ?, ?)", rows)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return len(rows)
