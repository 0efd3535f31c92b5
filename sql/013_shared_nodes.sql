-- joulestep schema, migration 013: the inputs of the shared-node
-- attribution (issue 24 part 1; docs/accounting.md, "Shared nodes").
--   steps.cpu_time_ns   the step's CPU time (its reaped tasks'); NULL: an
--                       older record, or the plugin could not read it
--   step_packages       one row per package the step had a CPU in: the
--                       package's CPUs, the step's CPUs there, and the
--                       package's busy and total CPU time over the step
--                       (/proc/stat)
-- The attributed figures are not stored: they depend on every step of the
-- node over the interval and are worked out from these rows when read
-- (cli/src/joulestep/attribution.py), so a record ingested late changes
-- them without a rewrite.
-- Engine-neutral SQL (SQLite and PostgreSQL).

ALTER TABLE steps ADD COLUMN cpu_time_ns BIGINT CHECK (cpu_time_ns >= 0);

CREATE TABLE step_packages (
    step_pk     INTEGER NOT NULL REFERENCES steps (step_pk) ON DELETE CASCADE,
    package     INTEGER NOT NULL CHECK (package >= 0),
    cpus        INTEGER NOT NULL CHECK (cpus >= 1),
    step_cpus   INTEGER NOT NULL CHECK (step_cpus >= 0 AND step_cpus <= cpus),
    busy_ns     BIGINT NOT NULL CHECK (busy_ns >= 0),
    total_ns    BIGINT NOT NULL CHECK (total_ns >= busy_ns),
    PRIMARY KEY (step_pk, package)
) WITHOUT ROWID;

PRAGMA user_version = 13;
