-- joulestep SQLite schema, migration 002: jobs are keyed by when they were
-- first seen, not by their submit time.
--
-- The plugin no longer asks slurmctld for the submit time (a storm of RPCs,
-- and a slow controller split jobs).  A record now carries job.first_seen_ns
-- (the job prolog on its node, else the step start) and submit_time_ns only
-- from older plugins.  `joulestep ingest` groups the records of one
-- (cluster, job_id) whose windows [first seen, step end] overlap or lie
-- within job_gap_hours of each other into one job (docs/cli.md, "Which
-- records are one job"); each row keeps the window of all its records:
--   first_seen_ns  the earliest window start of its records (for rows made
--                  by migration 001-era ingests: their submit time, which
--                  was the start of their records' windows)
--   last_seen_ns   the latest step end of its records
-- Natural key: (cluster, job_id, first_seen_ns).  submit_time_ns is kept
-- (old records), NULL when no record had one.
--
-- SQLite cannot change a column's constraints in place: the table is
-- rebuilt (https://www.sqlite.org/lang_altertable.html, "other kinds of
-- table schema changes").  store.migrate runs migrations with foreign keys
-- OFF (so dropping the old table does not cascade into steps) and checks
-- PRAGMA foreign_key_check before it commits.  job_pk values are kept, so
-- steps.job_pk still points at the same jobs.  On PostgreSQL the DROP keeps
-- the other tables' foreign keys the same way (db.pg_rebuild_fks), and the
-- last-seen expression avoids SQLite's two-argument max().

CREATE TABLE jobs_new (
    job_pk          INTEGER PRIMARY KEY,
    cluster         TEXT NOT NULL,
    job_id          INTEGER NOT NULL CHECK (job_id >= 0),
    first_seen_ns   INTEGER NOT NULL,
    last_seen_ns    INTEGER NOT NULL,
    submit_time_ns  INTEGER,
    start_time_ns   INTEGER,
    name            TEXT,
    user_name       TEXT,
    uid             INTEGER,
    gid             INTEGER,
    account         TEXT,
    partition       TEXT,
    CHECK (last_seen_ns >= first_seen_ns),
    UNIQUE (cluster, job_id, first_seen_ns)
);

INSERT INTO jobs_new (job_pk, cluster, job_id, first_seen_ns, last_seen_ns,
                      submit_time_ns, start_time_ns, name, user_name, uid, gid,
                      account, partition)
SELECT j.job_pk, j.cluster, j.job_id, j.submit_time_ns,
       coalesce((SELECT max(s.end_ns) FROM steps s WHERE s.job_pk = j.job_pk
                 AND s.end_ns > j.submit_time_ns), j.submit_time_ns),
       j.submit_time_ns, j.start_time_ns, j.name, j.user_name, j.uid, j.gid,
       j.account, j.partition
FROM jobs j;

DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;
CREATE INDEX jobs_by_job_id ON jobs (job_id);
CREATE INDEX jobs_by_user ON jobs (user_name);

PRAGMA user_version = 2;
