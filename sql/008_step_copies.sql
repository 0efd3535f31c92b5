-- Two copies of one step (issue 21; docs/cli.md "Two copies of one step").
--
-- For one natural key (cluster, job, step, het component, node) the first
-- stored copy wins.  A later copy with the same content is "already
-- present"; one that differs is a conflict: quarantined, with both sources
-- in its reason, and kept here so that `doctor --db` and the exporter
-- report it.  It never changes the stored row.
--   steps.source         the spool file the step was read from (NULL:
--                        ingested from memory, or before this migration)
--   steps.record_digest  what tells two copies apart: a hash of the
--                        record's checked rows (store/records.py digest);
--                        NULL before this migration, where the window
--                        (start_ns, end_ns) tells them apart instead
-- Engine-neutral SQL (SQLite and PostgreSQL).

ALTER TABLE steps ADD COLUMN source TEXT;
ALTER TABLE steps ADD COLUMN record_digest TEXT;

CREATE TABLE step_conflicts (
    cluster        TEXT NOT NULL,
    job_id         BIGINT NOT NULL CHECK (job_id >= 0),
    step_id        TEXT NOT NULL,
    het_component  INTEGER NOT NULL DEFAULT 0,
    node           TEXT NOT NULL,
    record_digest  TEXT NOT NULL,
    source         TEXT,
    stored_source  TEXT,
    seen_ns        BIGINT NOT NULL,
    reason         TEXT NOT NULL,
    PRIMARY KEY (cluster, job_id, step_id, het_component, node, record_digest)
);

PRAGMA user_version = 8;
