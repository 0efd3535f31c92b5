-- joulestep schema, migration 015: what Slurm's accounting (slurmdbd, read
-- with sacct at ingest; cli/src/joulestep/slurmacct.py) says about how a job
-- ran and what the node's meter gave it (issue 24, "Slurm's node energy at
-- ingest"; docs/admin-guide.md, "Slurm accounting (slurmdbd)").
--   jobs.slurm_state       sacct State of the job at the last lookup
--                          (COMPLETED, FAILED, RUNNING, ...; NULL: never looked
--                          up).  A job not ended is looked up again.
--   jobs.slurm_exit_code   sacct ExitCode ("0:0": exit status:signal)
--   jobs.slurm_elapsed_ns  sacct ElapsedRaw (whole seconds, in ns)
--   jobs.slurm_nnodes      sacct NNodes
--   jobs.slurm_energy_uj   sacct ConsumedEnergyRaw of the job's own row (whole J, in µJ).
--                          Slurm's acct_gather_energy plugin (ipmi,
--                          pm_counters, xcc, ...) reads the node's meter, so
--                          the figure is whole nodes, beside joulestep's CPU +
--                          DRAM (+ GPU), never added to it.  NULL: Slurm has
--                          none (no energy plugin: sacct says 0 or nothing).
--   slurm_steps            the same per step (sacct's step rows: batch,
--                          extern, 0, 1, ...), energy summed over the step's
--                          nodes as Slurm gives it
-- Engine-neutral SQL (SQLite and PostgreSQL).

ALTER TABLE jobs ADD COLUMN slurm_state TEXT;
ALTER TABLE jobs ADD COLUMN slurm_exit_code TEXT;
ALTER TABLE jobs ADD COLUMN slurm_elapsed_ns INTEGER CHECK (slurm_elapsed_ns >= 0);
ALTER TABLE jobs ADD COLUMN slurm_nnodes INTEGER CHECK (slurm_nnodes >= 0);
ALTER TABLE jobs ADD COLUMN slurm_energy_uj INTEGER CHECK (slurm_energy_uj >= 0);

CREATE TABLE slurm_steps (
    job_pk          INTEGER NOT NULL REFERENCES jobs (job_pk) ON DELETE CASCADE,
    step_id         TEXT NOT NULL,                  -- batch, extern, 0, 1, ...
    state           TEXT,
    exit_code       TEXT,
    elapsed_ns      INTEGER CHECK (elapsed_ns >= 0),
    nnodes          INTEGER CHECK (nnodes >= 0),
    energy_uj       INTEGER CHECK (energy_uj >= 0), -- NULL: Slurm has none
    PRIMARY KEY (job_pk, step_id)
) WITHOUT ROWID;

PRAGMA user_version = 15;
