-- joulestep SQLite schema, migration 003: the clocks a step ran at.
--
-- Plugins since issue 8 record, beside step.base_freq_khz (now the
-- original clock: scaling_max_freq before the step changed anything, also
-- under fixed:R), the nominal non-turbo clock, fixed:R's clock and who
-- controlled the clocks (docs/record-format.md).  The CLI needs them to
-- show what a fixed:R step saved against its original clock, and to tell a
-- monitor run (the governor's default) from a run pinned at the nominal
-- clock (`compare`):
--   nominal_freq_khz  step.nominal_freq_khz      (NULL: unknown)
--   fixed_freq_khz    step.fixed_freq_khz        (NULL: not fixed:R, or no
--                                                 clock could be set)
--   freq_control      provenance.freq_control    (joulestep | monitor |
--                                                 slurm-cpu-freq | none;
--                                                 NULL: a record of a
--                                                 plugin before issue 8,
--                                                 whose base_freq_khz under
--                                                 fixed:R was R x fmax)
-- Steps ingested before this migration keep NULL in all three (their spool
-- files are not read again; rebuild the database from the spool to fill
-- them).  Adding nullable columns needs no table rebuild.

ALTER TABLE steps ADD COLUMN nominal_freq_khz INTEGER CHECK (nominal_freq_khz > 0);
ALTER TABLE steps ADD COLUMN fixed_freq_khz INTEGER CHECK (fixed_freq_khz > 0);
ALTER TABLE steps ADD COLUMN freq_control TEXT;

PRAGMA user_version = 3;
