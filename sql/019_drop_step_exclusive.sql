-- Record version 4 dropped step.exclusive (the step had every online CPU of
-- the node): whether a step shared its packages is decided from the time
-- overlap of other jobs' steps (attribution.sharing), and nothing read the
-- column. Records of versions 1-3 still carry the flag; ingest checks it and
-- keeps it in their digest only (records.digest), so that a copy ingested
-- before this migration is still recognised as the same.
-- Engine-neutral SQL (SQLite 3.35+ and PostgreSQL).

ALTER TABLE steps DROP COLUMN exclusive;

PRAGMA user_version = 19;
