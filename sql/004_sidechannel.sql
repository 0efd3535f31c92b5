-- joulestep schema, migration 004: what the job's user may see of a step.
--
-- Plugins since issue 11 record, in provenance (docs/record-format.md,
-- docs/security.md "Threat model: RAPL side channels"):
--   min_phase_ns          provenance.min_phase_ns: a phase (or step) shorter
--                         than this is shown to users without energy
--   energy_resolution_uj  provenance.energy_resolution_uj: energies shown to
--                         users are rounded to this
-- NULL: a record of an older plugin; the CLI's user view then uses its
-- defaults (10 ms; 61 uJ, the counter's unit).  Admins see every figure
-- whatever these say.  Adding nullable columns needs no table rebuild.

ALTER TABLE steps ADD COLUMN min_phase_ns INTEGER CHECK (min_phase_ns >= 0);
ALTER TABLE steps ADD COLUMN energy_resolution_uj INTEGER CHECK (energy_resolution_uj > 0);

PRAGMA user_version = 4;
