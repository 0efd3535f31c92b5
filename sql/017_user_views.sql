-- joulestep schema, migration 017: what a user's own PostgreSQL role reads
-- (docs/security.md, "Who sees which jobs (the store)"; docs/admin-guide.md, "Users'
-- own roles (PostgreSQL)").
--
-- A user's role gets no grant on the tables: it reads views of the same
-- names in the schema joulestep_user, which hold the rows of the user's own
-- jobs only and round and hide energies as `joulestep job` shows them to
-- users (a step or phase shorter than min_phase_ns: no energy; every other
-- energy rounded to energy_resolution_uj).  The views are made from the
-- tables' columns by cli/src/joulestep/store/userviews.py at the end of
-- this and every later migration (a table rebuilt later drops its view;
-- the migration remakes it), and granted to joulestep_users when that
-- role exists.
--
-- PostgreSQL only: sql/postgresql/017_user_views.sql makes the schema.  On
-- SQLite the file's mode decides who reads the store, and this migration
-- only sets the version.

-- step_shares: the estimated share of a shared-node step (its CPU and
-- DRAM energy, and whether the node was shared), stored by ingest for the
-- users' roles, which cannot see the neighbours the estimate needs
-- (cli/src/joulestep/store/shares.py).  On SQLite it is filled the same way
-- and read by nothing yet.
CREATE TABLE step_shares (
    step_pk     INTEGER NOT NULL PRIMARY KEY REFERENCES steps (step_pk) ON DELETE CASCADE,
    cpu_uj      BIGINT CHECK (cpu_uj >= 0),
    dram_uj     BIGINT CHECK (dram_uj >= 0),
    sharing     TEXT NOT NULL
);

PRAGMA user_version = 17;
