-- The auto policy's learner (docs/design.md, "The auto policy") needs the
-- ratio each phase ran at: phases.freq_khz over the clock ratios are taken
-- of.  The record's step.fmax_khz (the step CPUs' cpuinfo_max_freq, read at
-- step start) is kept here:
--   steps.fmax_khz         kHz; NULL: an older record, or no cpufreq
--   steps.policy_baseline  1: an auto baseline job (its app's settled kinds
--                          ran at fmax); NULL: not auto, or an older record
-- Engine-neutral SQL (SQLite and PostgreSQL).

ALTER TABLE steps ADD COLUMN fmax_khz BIGINT CHECK (fmax_khz >= 1);
ALTER TABLE steps ADD COLUMN policy_baseline INTEGER CHECK (policy_baseline IN (0, 1));

PRAGMA user_version = 20;
