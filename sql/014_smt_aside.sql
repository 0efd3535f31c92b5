-- SMT (issue 24, part 2): a step whose allocation has some but not all of a
-- core's hardware threads (Slurm's CR_CPU on a node given as CPUs= only)
-- leaves that core's clock alone; the record says which CPUs:
--   steps.smt_aside_cpus  a CPU list ("0,4"); NULL: none (or an older record)
-- Engine-neutral SQL (SQLite and PostgreSQL).

ALTER TABLE steps ADD COLUMN smt_aside_cpus TEXT;

PRAGMA user_version = 14;
