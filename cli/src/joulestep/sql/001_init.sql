-- joulestep SQLite schema, migration 001: the initial schema.
--
-- Applied by `joulestep` when it opens a database whose PRAGMA user_version
-- is below 1 (see cli/src/joulestep/store.py).  Every migration file
-- NNN_name.sql ends by setting user_version = NNN; the runner applies each
-- pending file inside one transaction.  Units are part of every column name:
-- *_ns (CLOCK_REALTIME nanoseconds since the epoch, or a duration),
-- *_uj (microjoules), *_khz (kilohertz), bytes.
--
-- Natural keys (what makes ingesting twice a no-op):
--   jobs   (cluster, job_id, submit_time_ns)  -- a recycled job ID is a new job
--   nodes  (cluster, name)
--   steps  (job_pk, node_pk, step_id, het_component)
--   phases (step_pk, seq)
--   step_tags (step_pk, key)
-- Children are deleted with their parents (ON DELETE CASCADE); the CLI turns
-- foreign keys on for every connection.

CREATE TABLE nodes (
    node_pk     INTEGER PRIMARY KEY,
    cluster     TEXT NOT NULL,
    name        TEXT NOT NULL,
    UNIQUE (cluster, name)
);

CREATE TABLE jobs (
    job_pk          INTEGER PRIMARY KEY,
    cluster         TEXT NOT NULL,
    job_id          INTEGER NOT NULL CHECK (job_id >= 0),
    submit_time_ns  INTEGER NOT NULL,
    start_time_ns   INTEGER,
    name            TEXT,
    user_name       TEXT,
    uid             INTEGER,
    gid             INTEGER,
    account         TEXT,
    partition       TEXT,
    UNIQUE (cluster, job_id, submit_time_ns)
);
CREATE INDEX jobs_by_job_id ON jobs (job_id);
CREATE INDEX jobs_by_user ON jobs (user_name);

-- One row per (job, step, het component, node): one spool record.
CREATE TABLE steps (
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
    -- Steps inside other steps (cli/src/joulestep/nesting.py, docs/cli.md):
    -- RAPL measures whole nodes, so an srun step on the batch step's node is
    -- part of the batch step's energy.  Kept by `joulestep ingest` for each
    -- (job, node) whenever one of its steps arrives, in any order.
    -- inside_step_pk: the tightest batch/extern/interactive step of the same
    -- job and node whose window contains this one (NULL: none; no foreign
    -- key: both rows go with their job).  counted_*: what this step adds to
    -- job and report totals: its own energy, minus the energy of the steps
    -- inside it when theirs fits in its own; 0 for a step inside one whose
    -- nested steps did not fit; NULL when not measured.
    inside_step_pk      INTEGER,
    counted_cpu_uj      INTEGER CHECK (counted_cpu_uj >= 0),
    counted_dram_uj     INTEGER CHECK (counted_dram_uj >= 0),
    counted_total_uj    INTEGER CHECK (counted_total_uj >= 0),
    counted_duration_ns INTEGER NOT NULL CHECK (counted_duration_ns >= 0),
    -- node before step: the (job_pk, node_pk) prefix serves the nesting
    -- lookups at ingest; job_pk alone serves `joulestep job`
    UNIQUE (job_pk, node_pk, step_id, het_component)
);
CREATE INDEX steps_by_start ON steps (start_ns);
CREATE INDEX steps_by_node ON steps (node_pk, start_ns);

-- Free-form tags (the plugin's --energy-tag K=V, record field job.tags).
-- Stored per step: srun can set different tags on each step of a job.
CREATE TABLE step_tags (
    step_pk  INTEGER NOT NULL REFERENCES steps (step_pk) ON DELETE CASCADE,
    key      TEXT NOT NULL,
    value    TEXT NOT NULL,
    PRIMARY KEY (step_pk, key)
) WITHOUT ROWID;
CREATE INDEX step_tags_by_key ON step_tags (key, value);

-- Energy of each RAPL zone over the step.
CREATE TABLE step_zones (
    step_pk    INTEGER NOT NULL REFERENCES steps (step_pk) ON DELETE CASCADE,
    zone_id    TEXT NOT NULL,            -- "intel-rapl:0": unique per node
    name       TEXT NOT NULL,            -- "package-0", "dram" (one per package)
    kind       TEXT,                     -- "package" | "dram"
    energy_uj  INTEGER NOT NULL CHECK (energy_uj >= 0),
    wraps      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (step_pk, zone_id)
) WITHOUT ROWID;

-- Phases marked inside a step (checkpoint, flush, compress, write, ...).
CREATE TABLE phases (
    phase_pk        INTEGER PRIMARY KEY,
    step_pk         INTEGER NOT NULL REFERENCES steps (step_pk) ON DELETE CASCADE,
    seq             INTEGER NOT NULL,
    kind            TEXT NOT NULL,
    label           TEXT,
    depth           INTEGER NOT NULL DEFAULT 0,
    parent_seq      INTEGER,
    start_ns        INTEGER NOT NULL,
    end_ns          INTEGER NOT NULL,
    duration_ns     INTEGER NOT NULL CHECK (duration_ns >= 0),
    freq_khz        INTEGER,                 -- NULL: clock left alone
    freq_change_ns  INTEGER,
    energy_cpu_uj   INTEGER CHECK (energy_cpu_uj >= 0),   -- NULL: not measured
    energy_dram_uj  INTEGER CHECK (energy_dram_uj >= 0),
    bytes           INTEGER CHECK (bytes >= 0), -- NULL: no rank gave a count
    nranks          INTEGER,
    UNIQUE (step_pk, seq)
);
CREATE INDEX phases_by_kind ON phases (kind);

-- Per-rank begin/end of a phase.
CREATE TABLE phase_ranks (
    step_pk   INTEGER NOT NULL,
    seq       INTEGER NOT NULL,
    rank      INTEGER NOT NULL,
    start_ns  INTEGER,
    end_ns    INTEGER,
    bytes     INTEGER,
    PRIMARY KEY (step_pk, seq, rank),
    FOREIGN KEY (step_pk, seq) REFERENCES phases (step_pk, seq) ON DELETE CASCADE
) WITHOUT ROWID;

-- Fitted power models P(f)/P(fmax) = a*f^b + c (f in GHz), written by
-- `joulestep model dvfs --save`; `joulestep job` uses them to estimate the
-- saving of a lowered clock.  '*' matches any node model / phase kind.
-- slowdown_alpha (optional): t(f)/t(fmax) = alpha*fmax/f + (1 - alpha).
CREATE TABLE power_models (
    node_model      TEXT NOT NULL,
    phase_kind      TEXT NOT NULL,
    a               REAL NOT NULL,
    b               REAL NOT NULL,
    c               REAL NOT NULL,
    fmax_khz        INTEGER NOT NULL CHECK (fmax_khz > 0),
    slowdown_alpha  REAL,
    sse             REAL,
    rmse            REAL,
    r2              REAL,
    n_points        INTEGER,
    fitted_ns       INTEGER NOT NULL,
    PRIMARY KEY (node_model, phase_kind)
) WITHOUT ROWID;

-- Spool files already ingested (path, size, mtime), so a timer run skips
-- them without parsing.  Purely an optimisation: the natural keys above are
-- what makes a re-ingest a no-op.
CREATE TABLE spool_files (
    path        TEXT PRIMARY KEY,
    size_bytes  INTEGER NOT NULL,
    mtime_ns    INTEGER NOT NULL
) WITHOUT ROWID;

PRAGMA user_version = 1;
