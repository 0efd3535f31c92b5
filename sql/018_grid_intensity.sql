-- joulestep schema, migration 018: the grid's carbon intensity and price
-- over time, per zone (docs/admin-guide.md, "Carbon intensity and prices
-- over time"; written by `joulestep intensity import`, read by `job`,
-- `report` and the exporter through cli/src/joulestep/store/intensity.py).
--   zone           the grid zone a node draws from ([site] zone, [zones])
--   kind           co2_g_per_kwh (grams CO2-eq per kWh) or price_per_kwh
--                  (the site's currency per kWh)
--   start_ns/end_ns  the interval [start, end) the value holds for
--   value_per_kwh  the value, in the kind's unit per kWh
--   source         where it came from: the file's format and its own
--                  source column where it has one ("emaps:entsoe.eu")
--   estimated      1: the source marked the value as estimated; 0: not;
--                  NULL: the source does not say
--   file_name      the file it was imported from (base name)
-- Natural key (zone, kind, start_ns): importing a file twice changes
-- nothing; a different value for a stored interval is a conflict, kept out
-- unless the import says --replace.  Figures are computed from these rows
-- when asked, never stored with the steps: importing a missing day later
-- corrects past reports.
-- Engine-neutral SQL (SQLite and PostgreSQL).

CREATE TABLE grid_intensity (
    zone           TEXT NOT NULL,
    kind           TEXT NOT NULL CHECK (kind IN ('co2_g_per_kwh', 'price_per_kwh')),
    start_ns       INTEGER NOT NULL,
    end_ns         INTEGER NOT NULL,
    value_per_kwh  REAL NOT NULL,
    source         TEXT NOT NULL,
    estimated      INTEGER CHECK (estimated IN (0, 1)),
    file_name      TEXT,
    CHECK (end_ns > start_ns),
    PRIMARY KEY (zone, kind, start_ns)
);

PRAGMA user_version = 18;
