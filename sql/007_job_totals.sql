-- joulestep schema, migration 007: each job's totals over its steps, kept
-- by `joulestep ingest` (store.Ingester.flush, for every job a batch gave
-- or moved a step), so that `joulestep report` grouped by a job attribute
-- (user, account, partition, qos) reads one row per job instead of one per
-- step (docs/design.md, "Report totals per job").
--   steps_n                 steps of the job
--   steps_first_start_ns,   earliest and latest steps.start_ns: the report
--   steps_last_start_ns     takes a job's totals when both lie in its
--                           window, and the job's steps otherwise
--   counted_cpu_uj, counted_dram_uj, counted_total_uj, counted_duration_ns
--                           sums of the steps' counted_* (each joule once,
--                           nesting.py); NULL when no step has one
--   measured_duration_ns    counted_duration_ns of the steps with a counted
--                           energy (node-seconds for node_overhead_w)
--   policy_steps_n          steps under a frequency policy (policy_active)
--   policy_total_uj         their counted_total_uj
-- Nullable columns added, then filled from the steps: plain SQL that SQLite
-- and PostgreSQL both take (a row-value UPDATE: SQLite >= 3.15).

ALTER TABLE jobs ADD COLUMN steps_n INTEGER;
ALTER TABLE jobs ADD COLUMN steps_first_start_ns INTEGER;
ALTER TABLE jobs ADD COLUMN steps_last_start_ns INTEGER;
ALTER TABLE jobs ADD COLUMN counted_cpu_uj INTEGER;
ALTER TABLE jobs ADD COLUMN counted_dram_uj INTEGER;
ALTER TABLE jobs ADD COLUMN counted_total_uj INTEGER;
ALTER TABLE jobs ADD COLUMN counted_duration_ns INTEGER;
ALTER TABLE jobs ADD COLUMN measured_duration_ns INTEGER;
ALTER TABLE jobs ADD COLUMN policy_steps_n INTEGER;
ALTER TABLE jobs ADD COLUMN policy_total_uj INTEGER;

UPDATE jobs SET (steps_n, steps_first_start_ns, steps_last_start_ns, counted_cpu_uj,
                 counted_dram_uj, counted_total_uj, counted_duration_ns,
                 measured_duration_ns, policy_steps_n, policy_total_uj) = (
    SELECT count(*), min(s.start_ns), max(s.start_ns), sum(s.counted_cpu_uj),
           sum(s.counted_dram_uj), sum(s.counted_total_uj), sum(s.counted_duration_ns),
           sum(CASE WHEN s.counted_total_uj IS NOT NULL THEN s.counted_duration_ns END),
           sum(s.policy_active), sum(s.counted_total_uj * s.policy_active)
    FROM steps s WHERE s.job_pk = jobs.job_pk);

-- the jobs with a step from a time on, and whether one started before it
-- (the jobs that straddle an end of a report's window)
CREATE INDEX jobs_by_steps_start ON jobs (steps_last_start_ns, steps_first_start_ns);

PRAGMA user_version = 7;
