-- joulestep schema, migration 009: GPU energy per step and per phase
-- (record version 2; docs/record-format.md, "Fields ingest reads" (GPUs); docs/design.md, "GPUs").
--   steps.energy_gpu_uj    the step's GPUs' energy; NULL: no GPU, or one of
--                          them has none (step_gpus.reason)
--   steps.total_includes  what energy_total_uj holds: 'cpu+dram' or
--                          'cpu+dram+gpu' (NULL: a record before version 2,
--                          whose total is CPU + DRAM)
--   steps.gpu_backend      nvml | amdsmi; NULL: no GPU measured
--   steps.gpus_unmeasured  why the job's GPUs were not measured
--   steps.gpu_clock_control  joulestep (+gpu-io), slurm-gpu-freq, none
--   phases.energy_gpu_uj   as steps.energy_gpu_uj, over the phase
--   phases.gpu_clock_mhz   +gpu-io: the GPUs' clock cap the phase set
--   step_gpus              one row per GPU of the step, energy NULL with the
--                          reason (split by MIG, shared with another job,
--                          uncertain): never the whole GPU charged to a job
--   phase_gpus             the same per phase (uuid: a GPU of step_gpus)
-- Engine-neutral SQL (SQLite and PostgreSQL).

ALTER TABLE steps ADD COLUMN energy_gpu_uj INTEGER CHECK (energy_gpu_uj >= 0);
ALTER TABLE steps ADD COLUMN total_includes TEXT;
ALTER TABLE steps ADD COLUMN gpu_backend TEXT;
ALTER TABLE steps ADD COLUMN gpus_unmeasured TEXT;
ALTER TABLE steps ADD COLUMN gpu_clock_control TEXT;
ALTER TABLE phases ADD COLUMN energy_gpu_uj INTEGER CHECK (energy_gpu_uj >= 0);
ALTER TABLE phases ADD COLUMN gpu_clock_mhz INTEGER;

CREATE TABLE step_gpus (
    step_pk     INTEGER NOT NULL REFERENCES steps (step_pk) ON DELETE CASCADE,
    gpu_index   INTEGER,
    uuid        TEXT NOT NULL,
    model       TEXT,
    energy_uj   INTEGER CHECK (energy_uj >= 0),  -- NULL: see reason
    reason      TEXT,
    integrated  INTEGER,                         -- 1: power integral, no counter
    resets      INTEGER,
    PRIMARY KEY (step_pk, uuid)
) WITHOUT ROWID;

CREATE TABLE phase_gpus (
    step_pk     INTEGER NOT NULL,
    seq         INTEGER NOT NULL,
    uuid        TEXT NOT NULL,
    energy_uj   INTEGER CHECK (energy_uj >= 0),
    reason      TEXT,
    integrated  INTEGER,
    PRIMARY KEY (step_pk, seq, uuid),
    FOREIGN KEY (step_pk, seq) REFERENCES phases (step_pk, seq) ON DELETE CASCADE
) WITHOUT ROWID;

PRAGMA user_version = 9;
