"""Records the plugin could not write: how many the store holds (the
lost_records table, migration 005; docs/reliability.md "Faults: records and
counters").  Ingest checks the "joulestep-lost" documents
(store/records.py, LOST_SCHEMA) and stores them (store/spool.py);
``report``, ``doctor --db`` and the exporter show the count."""
from __future__ import annotations


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
