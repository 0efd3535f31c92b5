"""The grid's intensity and price over time in the store (migration 018,
table grid_intensity): importing intervals, and every read the CO2 and
cost figures make (`job`, `report`, the exporter).  The rule that turns
them into figures is carbon.py; the files' layouts intensity_files.py.

Which zone a step's node is in: one SQL expression, built from the site
config ([site] zone, [zones]; config.py), most specific first: a node
list, then the job's partition, then the cluster, then [site] zone.
"""
from __future__ import annotations

import bisect

from .read_report import wide_sum

COLS = ("zone", "kind", "start_ns", "end_ns", "value_per_kwh", "source",
        "estimated", "file_name")


class ImportResult:
    """What one import did: new, unchanged, replaced rows; conflicts
    [(line, start_ns, stored (start, end, value), new (start, end, value))]."""

    def __init__(self):
        self.new = self.unchanged = self.replaced = 0
        self.conflicts: list = []

    def as_dict(self) -> dict:
        return {"new": self.new, "unchanged": self.unchanged,
                "replaced": self.replaced,
                "conflicts": [{"line": c[0], "start_ns": c[1],
                               "stored": {"start_ns": c[2][0], "end_ns": c[2][1],
                                          "value_per_kwh": c[2][2]},
                               "new": {"start_ns": c[3][0], "end_ns": c[3][1],
                                       "value_per_kwh": c[3][2]}}
                              for c in self.conflicts]}


def import_intervals(conn, zone: str, kind: str, intervals: list, file_name: str,
                     replace: bool = False) -> ImportResult:
    """Store intervals (intensity_files.Interval, in time order, not
    overlapping) of one zone and kind, in one transaction.  A stored row
    with the same start, end and value is left as it is; a stored row that
    overlaps with another start, end or value is a conflict: kept, and the
    new one left out, unless replace (then the stored rows it overlaps are
    deleted and the new one written)."""
    res = ImportResult()
    if not intervals:
        return res
    lo, hi = intervals[0].start_ns, max(iv.end_ns for iv in intervals)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.lock_keys([(f"grid_intensity:{zone}:{kind}", 0)])
        stored = conn.execute(
            "SELECT start_ns, end_ns, value_per_kwh FROM grid_intensity WHERE "
            "zone = ? AND kind = ? AND start_ns < ? AND end_ns > ? ORDER BY start_ns",
            (zone, kind, hi, lo)).fetchall()
        starts = [r[0] for r in stored]
        new, drop = [], set()
        for iv in intervals:
            hits = _overlapping(stored, starts, iv.start_ns, iv.end_ns)
            if len(hits) == 1 and tuple(hits[0]) == (iv.start_ns, iv.end_ns,
                                                     iv.value_per_kwh):
                res.unchanged += 1
                continue
            if hits and not replace:
                res.conflicts.append((iv.line, iv.start_ns, tuple(hits[0]),
                                      (iv.start_ns, iv.end_ns, iv.value_per_kwh)))
                continue
            drop.update(h[0] for h in hits)
            res.replaced += bool(hits)
            new.append((zone, kind, iv.start_ns, iv.end_ns, iv.value_per_kwh,
                        iv.source, iv.estimated, file_name))
        if drop:
            conn.executemany("DELETE FROM grid_intensity WHERE zone = ? AND kind = ? "
                             "AND start_ns = ?", [(zone, kind, s) for s in sorted(drop)])
        if new:
            conn.executemany(f"INSERT INTO grid_intensity ({', '.join(COLS)}) "
                             f"VALUES ({', '.join('?' * len(COLS))})", new)
        res.new = len(new) - res.replaced
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return res


def _overlapping(stored: list, starts: list, a: int, b: int) -> list:
    """The stored rows (in start order, not overlapping) that overlap [a, b)."""
    i = max(bisect.bisect_right(starts, a) - 1, 0)
    out = []
    while i < len(stored) and stored[i][0] < b:
        if stored[i][1] > a:
            out.append(stored[i])
        i += 1
    return out


# --------------------------------------------------------------------------
# reads

#: has_values' answer when this role may not read the table (PostgreSQL:
#: a user's own role without SELECT on it; docs/admin-guide.md)
UNREADABLE = "unreadable"


def has_values(conn, kind: str | None = None):
    """Whether any value (of that kind) was imported (without any, every
    figure is static and nothing else here is read); UNREADABLE (false)
    when this role may not read them."""
    q, args = "SELECT 1 FROM grid_intensity LIMIT 1", ()
    if kind is not None:
        q, args = "SELECT 1 FROM grid_intensity WHERE kind = ? LIMIT 1", (kind,)
    try:
        return conn.execute(q, args).fetchone() is not None
    except conn.Error as e:
        if conn.dialect == "postgresql" and getattr(e, "sqlstate", None) == "42501":
            return UNREADABLE    # insufficient privilege: autocommit, nothing aborted
        raise


def series_rows(conn, zones, lo_ns=None, hi_ns=None) -> list:
    """(zone, kind, start_ns, end_ns, value_per_kwh, source, estimated: 1
    where the source marked the value estimated, else 0) of the zones,
    overlapping [lo, hi) when given, in time order."""
    zones = sorted(z for z in set(zones) if z is not None)
    if not zones:
        return []
    q = ("SELECT zone, kind, start_ns, end_ns, value_per_kwh, source, "
         "coalesce(estimated, 0) FROM "
         f"grid_intensity WHERE zone IN ({', '.join('?' * len(zones))})")
    args: list = list(zones)
    if lo_ns is not None:
        q += " AND end_ns > ?"
        args.append(lo_ns)
    if hi_ns is not None:
        q += " AND start_ns < ?"
        args.append(hi_ns)
    return conn.execute(q + " ORDER BY zone, kind, start_ns", args).fetchall()


def summary(conn) -> list:
    """(zone, kind, rows, first start, last end, sources) per zone and kind."""
    return conn.execute(
        "SELECT zone, kind, count(*), min(start_ns), max(end_ns), "
        "count(DISTINCT source) FROM grid_intensity GROUP BY zone, kind "
        "ORDER BY zone, kind").fetchall()


def zone_sql(settings) -> tuple[str, list, bool]:
    """(SQL expression of a step's zone over steps s, jobs j and nodes n,
    its arguments, whether it reads n).  NULL: no zone."""
    parts, args, nodes = [], [], False
    col = {"nodes": "n.name", "partition": "j.partition", "cluster": "j.cluster"}
    for field, names, zone in settings.zone_rules:
        nodes |= field == "nodes"
        parts.append(f"WHEN {col[field]} IN ({', '.join('?' * len(names))}) THEN ?")
        args += [*names, zone]
    if not parts:
        return "?", [settings.zone], False
    return f"CASE {' '.join(parts)} ELSE ? END", args + [settings.zone], nodes


def job_spans(conn, job_pk: int, settings) -> tuple[list, list]:
    """A job's steps (step_pk, zone, start_ns, end_ns, energy_total_uj) and
    their phases (step_pk, seq, parent_seq, start_ns, end_ns, CPU + DRAM
    µJ or None)."""
    zexpr, zargs, _ = zone_sql(settings)
    steps = conn.execute(
        f"SELECT s.step_pk, {zexpr}, s.start_ns, s.end_ns, s.energy_total_uj "
        "FROM steps s JOIN jobs j ON j.job_pk = s.job_pk JOIN nodes n ON "
        "n.node_pk = s.node_pk WHERE s.job_pk = ?", zargs + [job_pk]).fetchall()
    phases = conn.execute(
        "SELECT p.step_pk, p.seq, p.parent_seq, p.start_ns, p.end_ns, "
        "p.energy_cpu_uj + coalesce(p.energy_dram_uj, 0) FROM phases p JOIN "
        "steps s ON s.step_pk = p.step_pk WHERE s.job_pk = ? ORDER BY p.step_pk, "
        "p.seq", (job_pk,)).fetchall()
    return steps, phases


def spans_where(conn, settings, where: str, args) -> tuple[list, list]:
    """job_spans for the steps a condition on steps s selects."""
    zexpr, zargs, _ = zone_sql(settings)
    steps = conn.execute(
        f"SELECT s.step_pk, {zexpr}, s.start_ns, s.end_ns, s.energy_total_uj "
        "FROM steps s JOIN jobs j ON j.job_pk = s.job_pk JOIN nodes n ON "
        f"n.node_pk = s.node_pk WHERE {where}", zargs + list(args)).fetchall()
    phases = conn.execute(
        "SELECT p.step_pk, p.seq, p.parent_seq, p.start_ns, p.end_ns, "
        "p.energy_cpu_uj + coalesce(p.energy_dram_uj, 0) FROM phases p JOIN "
        f"steps s ON s.step_pk = p.step_pk WHERE p.parent_seq IS NULL AND {where}",
        list(args)).fetchall()
    return steps, phases


def cell_sums(conn, settings, gexpr: str, joins: str, jargs: list, where: list,
              wargs: list, grid_ns: int) -> list:
    """The steps of a report window, one scan: (group, zone, cell, step_pk
    or 0, counted µJ's high and low 32 bits (wide_sum: a cell's sum never
    overflows), own µJ, start_ns, end_ns).  Steps within one cell of the
    grid are summed per (group, zone, cell) with step_pk 0 (their energy
    all meets that cell's value); a step across cells is a row of its own
    (own µJ, start and end are its own), placed with its top-level phases
    (top_phases)."""
    zexpr, zargs, nodes = zone_sql(settings)
    if nodes and "JOIN nodes n" not in joins:
        joins += " JOIN nodes n ON n.node_pk = s.node_pk"
    g = int(grid_ns)
    cond = ["s.counted_total_uj > 0"] + where
    # the cell first: the steps come in start order, so the sorter's input
    # is nearly sorted; a zone that is one name for all is not grouped by
    by = "c, g, sp" if not settings.zone_rules else "c, g, z, sp"
    q = (f"SELECT {gexpr} AS g, {zexpr} AS z, s.start_ns / {g} AS c, "
         f"CASE WHEN s.start_ns / {g} = (s.end_ns - 1) / {g} OR s.end_ns <= s.start_ns "
         f"THEN 0 ELSE s.step_pk END AS sp, {wide_sum('s.counted_total_uj')}, "
         "max(s.energy_total_uj), min(s.start_ns), max(s.end_ns) "
         f"FROM steps s {joins} WHERE {' AND '.join(cond)} GROUP BY {by}")
    return conn.execute(q, zargs + jargs + wargs).fetchall()


def job_cell_sums(conn, settings, gexpr: str, joins: str, jargs: list, where: list,
                  wargs: list, grid_ns: int, since_ns, until_ns, cluster) -> list:
    """cell_sums for a grouping by an attribute of the job (user, account,
    partition, qos) where the zone is too (no node list in [zones]): a
    job whose steps all lie in one cell counts its total (the jobs' totals,
    migration 007: jobs.counted_total_uj, steps_first_start_ns,
    last_seen_ns = its last step's end), as `report` itself reads them;
    the steps of the other jobs of the window go through cell_sums."""
    zexpr, zargs, _ = zone_sql(settings)
    g = int(grid_ns)
    one = f"j.steps_first_start_ns / {g} = (j.last_seen_ns - 1) / {g}"
    inside, iargs = ["j.steps_last_start_ns IS NOT NULL", "j.counted_total_uj > 0"], []
    for cond, v in (("j.steps_first_start_ns >= ?", since_ns),
                    ("j.steps_last_start_ns >= ?", since_ns),
                    ("j.steps_last_start_ns < ?", until_ns), ("j.cluster = ?", cluster)):
        if v is not None:
            inside.append(cond)
            iargs.append(v)
    by = "c, g" if not settings.zone_rules else "c, g, z"
    rows = conn.execute(
        f"SELECT {gexpr} AS g, {zexpr} AS z, j.steps_first_start_ns / {g} AS c, 0, "
        f"{wide_sum('j.counted_total_uj')}, NULL, NULL, NULL FROM jobs j WHERE "
        f"{' AND '.join(inside)} AND {one} GROUP BY {by}", zargs + iargs).fetchall()
    rest = (f"s.job_pk IN (SELECT j.job_pk FROM jobs j WHERE "
            f"j.steps_last_start_ns >= ? AND j.steps_first_start_ns < ? AND NOT "
            f"({' AND '.join(inside)} AND {one}))")
    lo = since_ns if since_ns is not None else -(1 << 62)
    hi = until_ns if until_ns is not None else 1 << 62
    return rows + cell_sums(conn, settings, gexpr, joins, jargs, where + [rest],
                            wargs + [lo, hi] + iargs, grid_ns)


def top_phases(conn, step_pks, chunk: int = 900):
    """The steps' top-level phases as one int64 array of rows (step_pk,
    start_ns, end_ns, CPU + DRAM µJ or -1: not measured): what `report`
    places, tens of thousands of steps' worth, without a Python object per
    value."""
    import itertools

    import numpy as np
    parts = []
    pks = sorted(step_pks)
    for i in range(0, len(pks), chunk):
        part = pks[i:i + chunk]
        rows = conn.execute(
            "SELECT step_pk, start_ns, end_ns, coalesce(energy_cpu_uj + "
            "coalesce(energy_dram_uj, 0), -1) FROM phases WHERE parent_seq IS NULL "
            f"AND step_pk IN ({', '.join('?' * len(part))})", part).fetchall()
        parts.append(np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64,
                                 count=4 * len(rows)))
    return (np.concatenate(parts) if parts else np.zeros(0, np.int64)).reshape(-1, 4)
