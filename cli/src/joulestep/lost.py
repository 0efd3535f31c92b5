"""Records the plugin could not write: "joulestep-lost" files and the
lost_records table (migration 005; docs/reliability.md "Faults: records and
counters").

When neither the spool nor the node's fallback ``<state>/pending`` could
take a step's record, the plugin keeps an empty marker; the node's next job
prolog or epilog turns it into ``<spool>/<cluster>/lost/<job>.<step>.<het>.<node>.json``:

    {"format": "joulestep-lost", "version": 1, "cluster": ..., "job_id": ...,
     "step_id": ..., "het_component": ..., "node": ..., "lost_at_ns": ...,
     "reason": ...}

``joulestep ingest`` stores each once (ON CONFLICT DO NOTHING: ingesting
again changes nothing); ``report`` and ``doctor --db`` show the count.
"""
from __future__ import annotations

from . import store

FORMAT = "joulestep-lost"

_INSERT = ("INSERT INTO lost_records (cluster, job_id, step_id, het_component, "
           "node, lost_at_ns, reason) VALUES (?,?,?,?,?,?,?) "
           "ON CONFLICT (cluster, job_id, step_id, het_component, node) DO NOTHING")


def is_lost(rec) -> bool:
    return isinstance(rec, dict) and rec.get("format") == FORMAT


def parse(rec: dict) -> tuple:
    """Validate a lost document; the lost_records row.  RecordError names
    the bad field."""
    if rec.get("version") != 1:
        raise store.RecordError(f"version: this joulestep reads {FORMAT} version 1")
    step = rec.get("step_id")
    if type(step) is int:
        step = str(step)
    if not isinstance(step, str) or not store._STEP_ID.fullmatch(step):
        raise store.RecordError("step_id: expected a step number, batch or interactive")
    return (store._str(rec.get("cluster"), "cluster"),
            store._int(rec.get("job_id"), "job_id", minimum=0),
            step,
            store._int(rec.get("het_component", 0), "het_component", minimum=0),
            store._str(rec.get("node"), "node"),
            store._int(rec.get("lost_at_ns"), "lost_at_ns", minimum=0),
            store._str(rec.get("reason"), "reason", null=True))


def insert(conn, rows: list) -> int:
    """Store lost rows (one transaction); the number new."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        n = 0
        for r in rows:
            n += conn.execute(_INSERT, r).rowcount
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return n


def count(conn, cluster: str | None = None, since_ns: int | None = None,
          until_ns: int | None = None) -> int:
    """Lost records (of a cluster, lost in [since, until))."""
    where, args = [], []
    for cond, v in (("cluster = ?", cluster), ("lost_at_ns >= ?", since_ns),
                    ("lost_at_ns < ?", until_ns)):
        if v is not None:
            where.append(cond)
            args.append(v)
    sql = "SELECT count(*) FROM lost_records" + (
        f" WHERE {' AND '.join(where)}" if where else "")
    return conn.execute(sql, args).fetchone()[0]
