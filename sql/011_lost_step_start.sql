-- A killed slurmstepd's step, counted lost (issue 23, defect 6): the plugin
-- leaves a root-only step-start marker in <state>/pending at step start; the
-- job epilog turns one without a record into a "joulestep-lost" document
-- that carries what is known of the step:
--   lost_records.step_start_ns     when the step started (NULL: a record the
--                                  spool and fallback could not take)
--   lost_records.first_reading_ns  when its first energy reading was taken
--                                  (NULL: none, or not a start marker)
-- Engine-neutral SQL (SQLite and PostgreSQL).

ALTER TABLE lost_records ADD COLUMN step_start_ns BIGINT CHECK (step_start_ns >= 0);
ALTER TABLE lost_records ADD COLUMN first_reading_ns BIGINT CHECK (first_reading_ns >= 0);

PRAGMA user_version = 11;
