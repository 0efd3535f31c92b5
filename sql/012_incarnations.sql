-- A requeued job's incarnations (issue 23, defect 5; docs/design.md, "A
-- requeued job's incarnations").
--
-- A requeued job runs again under the same job ID, and may run the same
-- steps again on the same nodes.  Each run (incarnation) is its own set of
-- records, told apart by a trusted marker: the job prolog's time on the node
-- (record field job.incarnation_ns, default job.first_seen_ns), which root
-- takes in the prolog of each incarnation and the user cannot set.
--   steps.incarnation_ns         the step's incarnation; part of the step's
--                                natural key, which becomes (job_pk, node_pk,
--                                step_id, het_component, incarnation_ns).
--                                0: a step stored before this migration
--                                (its incarnation unknown): ingest takes a
--                                record of that key for a copy of it, as
--                                before, so ingesting an old spool again
--                                still changes nothing.
--   lost_records.incarnation_ns  the same for a lost step (from the
--                                record's name; 0: unknown), in its key.
--
-- SQLite cannot change a table's UNIQUE constraint or primary key in place:
-- both tables are rebuilt as migration 002 rebuilt jobs (store.migrate runs
-- with foreign keys OFF and checks PRAGMA foreign_key_check; step_pk values
-- are kept, so the children still point at their steps).  On PostgreSQL the
-- DROP keeps the children's foreign keys (db.pg_rebuild_fks), which also
-- sets the identity of step_pk past the copied rows.
-- Engine-neutral SQL (SQLite and PostgreSQL).

CREATE TABLE steps_new (
    step_pk          INTEGER PRIMARY KEY,
    job_pk           INTEGER NOT NULL REFERENCES jobs (job_pk) ON DELETE CASCADE,
    step_id          TEXT NOT NULL,          -- "0", "batch", "extern", ...
    het_component    INTEGER NOT NULL DEFAULT 0,
    node_pk          INTEGER NOT NULL REFERENCES nodes (node_pk),
    node_model       TEXT,
    ntasks           INTEGER,
    nnodes           INTEGER,
    cpus             TEXT,
    ncpus            INTEGER,
    exclusive        INTEGER CHECK (exclusive IN (0, 1)),
    policy           TEXT,
    -- 1 when the policy may change the clock (not monitor/none/off/base):
    -- what `joulestep report` counts as policy adoption
    policy_active    INTEGER NOT NULL DEFAULT 0 CHECK (policy_active IN (0, 1)),
    base_freq_khz    INTEGER,
    freq_min_ratio   REAL,
    start_ns         INTEGER NOT NULL,
    end_ns           INTEGER NOT NULL,
    duration_ns      INTEGER NOT NULL CHECK (duration_ns >= 0),
    -- NULL energies: not measured (see errors_json); DRAM NULL: no DRAM zone
    energy_cpu_uj    INTEGER CHECK (energy_cpu_uj >= 0),
    energy_dram_uj   INTEGER CHECK (energy_dram_uj >= 0),
    energy_total_uj  INTEGER CHECK (energy_total_uj >= 0),
    exit_code        INTEGER,
    backend          TEXT,
    wrap_uncertain   INTEGER NOT NULL DEFAULT 0 CHECK (wrap_uncertain IN (0, 1)),
    sample_period_ns INTEGER,
    errors_json      TEXT NOT NULL DEFAULT '[]',
    plugin_version   TEXT,
    -- steps inside other steps (migration 001, nesting.py)
    inside_step_pk      INTEGER,
    counted_cpu_uj      INTEGER CHECK (counted_cpu_uj >= 0),
    counted_dram_uj     INTEGER CHECK (counted_dram_uj >= 0),
    counted_total_uj    INTEGER CHECK (counted_total_uj >= 0),
    counted_duration_ns INTEGER NOT NULL CHECK (counted_duration_ns >= 0),
    -- migration 003
    nominal_freq_khz     INTEGER CHECK (nominal_freq_khz > 0),
    fixed_freq_khz       INTEGER CHECK (fixed_freq_khz > 0),
    freq_control         TEXT,
    min_phase_ns         INTEGER CHECK (min_phase_ns >= 0),
    -- migration 004
    energy_resolution_uj INTEGER CHECK (energy_resolution_uj > 0),
    -- migration 008
    source               TEXT,
    record_digest        TEXT,
    -- migration 009
    energy_gpu_uj        INTEGER CHECK (energy_gpu_uj >= 0),
    total_includes       TEXT,
    gpu_backend          TEXT,
    gpus_unmeasured      TEXT,
    gpu_clock_control    TEXT,
    -- migration 010
    dram_not_measured    TEXT,
    energy_node_uj       BIGINT CHECK (energy_node_uj >= 0),
    node_meter_sources   TEXT,
    node_meter_integrated INTEGER,
    -- this migration
    incarnation_ns       INTEGER NOT NULL DEFAULT 0 CHECK (incarnation_ns >= 0),
    -- node before step: the (job_pk, node_pk) prefix serves the nesting
    -- lookups at ingest; job_pk alone serves `joulestep job`
    UNIQUE (job_pk, node_pk, step_id, het_component, incarnation_ns)
);

INSERT INTO steps_new (step_pk, job_pk, step_id, het_component, node_pk, node_model,
    ntasks, nnodes, cpus, ncpus, exclusive, policy, policy_active, base_freq_khz,
    freq_min_ratio, start_ns, end_ns, duration_ns, energy_cpu_uj, energy_dram_uj,
    energy_total_uj, exit_code, backend, wrap_uncertain, sample_period_ns, errors_json,
    plugin_version, inside_step_pk, counted_cpu_uj, counted_dram_uj, counted_total_uj,
    counted_duration_ns, nominal_freq_khz, fixed_freq_khz, freq_control, min_phase_ns,
    energy_resolution_uj, source, record_digest, energy_gpu_uj, total_includes,
    gpu_backend, gpus_unmeasured, gpu_clock_control, dram_not_measured, energy_node_uj,
    node_meter_sources, node_meter_integrated, incarnation_ns)
SELECT step_pk, job_pk, step_id, het_component, node_pk, node_model,
    ntasks, nnodes, cpus, ncpus, exclusive, policy, policy_active, base_freq_khz,
    freq_min_ratio, start_ns, end_ns, duration_ns, energy_cpu_uj, energy_dram_uj,
    energy_total_uj, exit_code, backend, wrap_uncertain, sample_period_ns, errors_json,
    plugin_version, inside_step_pk, counted_cpu_uj, counted_dram_uj, counted_total_uj,
    counted_duration_ns, nominal_freq_khz, fixed_freq_khz, freq_control, min_phase_ns,
    energy_resolution_uj, source, record_digest, energy_gpu_uj, total_includes,
    gpu_backend, gpus_unmeasured, gpu_clock_control, dram_not_measured, energy_node_uj,
    node_meter_sources, node_meter_integrated, 0
FROM steps;

DROP TABLE steps;
ALTER TABLE steps_new RENAME TO steps;
CREATE INDEX steps_by_start ON steps (start_ns);
CREATE INDEX steps_by_node ON steps (node_pk, start_ns);

CREATE TABLE lost_records_new (
    cluster          TEXT NOT NULL,
    job_id           BIGINT NOT NULL CHECK (job_id >= 0),
    step_id          TEXT NOT NULL,
    het_component    INTEGER NOT NULL DEFAULT 0,
    node             TEXT NOT NULL,
    lost_at_ns       BIGINT NOT NULL CHECK (lost_at_ns >= 0),
    reason           TEXT,
    step_start_ns    BIGINT CHECK (step_start_ns >= 0),
    first_reading_ns BIGINT CHECK (first_reading_ns >= 0),
    incarnation_ns   BIGINT NOT NULL DEFAULT 0 CHECK (incarnation_ns >= 0),
    PRIMARY KEY (cluster, job_id, step_id, het_component, node, incarnation_ns)
);

INSERT INTO lost_records_new (cluster, job_id, step_id, het_component, node, lost_at_ns,
    reason, step_start_ns, first_reading_ns, incarnation_ns)
SELECT cluster, job_id, step_id, het_component, node, lost_at_ns, reason, step_start_ns,
    first_reading_ns, 0
FROM lost_records;

DROP TABLE lost_records;
ALTER TABLE lost_records_new RENAME TO lost_records;

PRAGMA user_version = 12;
