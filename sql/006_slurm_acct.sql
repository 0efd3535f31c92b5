-- joulestep schema, migration 006: what Slurm's accounting (slurmdbd, read
-- with sacct) says about a job, and the summary joulestep wrote back into it.
--
-- `joulestep ingest` (cli/src/joulestep/slurmacct.py; docs/admin-guide.md,
-- "Slurm accounting (slurmdbd)") looks jobs up in sacct where slurmdbd
-- exists and stores slurmctld's own record of them: submit_time_ns,
-- account and partition (existing columns; sacct's values replace the
-- record's) and:
--   qos            the job's QOS (NULL: not known; records carry none)
--   sacct_ns       when ingest last took the fields from sacct (NULL: never,
--                  the fields are the record's)
--   admin_comment  the energy summary `ingest --admin-comment` last wrote
--                  into the job's AdminComment (NULL: none written)
-- Adding nullable columns needs no table rebuild; plain SQL that SQLite and
-- PostgreSQL both take.

ALTER TABLE jobs ADD COLUMN qos TEXT;
ALTER TABLE jobs ADD COLUMN sacct_ns INTEGER;
ALTER TABLE jobs ADD COLUMN admin_comment TEXT;
-- the jobs one ingest run looks up: those last seen in the lookback window
CREATE INDEX jobs_by_last_seen ON jobs (last_seen_ns);

PRAGMA user_version = 6;
