-- SMT (issue 24, part 2): a step whose allocation has some but not all of a
-- core's hardware threads (Slurm's CR_CPU on a node given as CPUs= only)
-- leaves that core's clock alone; the record says which CPUs:
--   steps.smt_aside_cpus  a CPU list ("0,4"); NULL: none (or an older record)
-- Uncore clocks in I/O phases (issue 24, part 4): a phase under +uncore-io
-- that capped the uncore of the step's whole packages says at what:
--   phases.uncore_max_khz  the max_freq_khz it set; NULL: left alone
-- Engine-neutral SQL (SQLite and PostgreSQL).

ALTER TABLE steps ADD COLUMN smt_aside_cpus TEXT;
ALTER TABLE phases ADD COLUMN uncore_max_khz BIGINT CHECK (uncore_max_khz >= 1);

PRAGMA user_version = 14;
