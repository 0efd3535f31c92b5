-- DRAM not measured (issue 24, AMD nodes; record version 2).
--
-- A node whose energy source has no dram zone (AMD RAPL, the amd_energy
-- hwmon driver) measures package energy only: its steps' DRAM energy is
-- "not measured", NULL with the reason here, never 0.
--   steps.dram_not_measured  why (NULL: DRAM measured, or unknown for one
--                            step because its counter went back)
-- Steps stored from version 1 records of such nodes (energy_dram_uj 0, no
-- dram zone among their step_zones) are brought to the same shape.
-- Engine-neutral SQL (SQLite and PostgreSQL).

ALTER TABLE steps ADD COLUMN dram_not_measured TEXT;

-- The node's own meter beside RAPL (issue 24 part 3, plugstack node_energy=):
--   steps.energy_node_uj          pm_counters `energy`, or the Grace Module
--                                 sensors (integrated power); NULL: no node
--                                 source, a reset (new generation), a failed read
--   steps.node_meter_sources     the channels that make it (never two that
--                                 overlap), or why it is NULL
--   steps.node_meter_integrated  from power samples (1) or counters (0)
ALTER TABLE steps ADD COLUMN energy_node_uj BIGINT CHECK (energy_node_uj >= 0);
ALTER TABLE steps ADD COLUMN node_meter_sources TEXT;
ALTER TABLE steps ADD COLUMN node_meter_integrated INTEGER;

UPDATE steps SET dram_not_measured = 'no dram zone (a version 1 record wrote 0 J)',
                 energy_dram_uj = NULL, counted_dram_uj = NULL
 WHERE energy_dram_uj = 0
   AND EXISTS (SELECT 1 FROM step_zones z WHERE z.step_pk = steps.step_pk
                AND z.kind = 'package')
   AND NOT EXISTS (SELECT 1 FROM step_zones z WHERE z.step_pk = steps.step_pk
                    AND z.kind = 'dram');

UPDATE phases SET energy_dram_uj = NULL
 WHERE energy_dram_uj = 0
   AND step_pk IN (SELECT step_pk FROM steps
                    WHERE dram_not_measured IS NOT NULL);

PRAGMA user_version = 10;
