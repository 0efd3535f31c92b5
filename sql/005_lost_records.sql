-- Records the plugin could not write (issue 11, "Records survive";
-- docs/reliability.md "Faults: records and counters"): when neither the
-- spool nor the node's fallback <state>/pending could take a step's record,
-- the plugin leaves a marker that a later job prolog/epilog turns into a
-- "joulestep-lost" file under <spool>/<cluster>/lost/; ingest stores one row
-- per such file here.  `joulestep report` and `joulestep doctor --db` show
-- the count.  Engine-neutral SQL (SQLite and PostgreSQL).

CREATE TABLE lost_records (
    cluster        TEXT NOT NULL,
    job_id         BIGINT NOT NULL CHECK (job_id >= 0),
    step_id        TEXT NOT NULL,
    het_component  INTEGER NOT NULL DEFAULT 0,
    node           TEXT NOT NULL,
    lost_at_ns     BIGINT NOT NULL CHECK (lost_at_ns >= 0),
    reason         TEXT,
    PRIMARY KEY (cluster, job_id, step_id, het_component, node)
);

PRAGMA user_version = 5;
