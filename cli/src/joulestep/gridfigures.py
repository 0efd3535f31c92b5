"""CO2 and cost over time for `job`, `report` and the exporter: the rows of
store/intensity.py through the rule of carbon.py.  Computed when asked,
never stored: importing a missing day later corrects past figures.

Without any imported value every figure stays the static one and nothing
here imports numpy (`joulestep job`'s start-up, docs/cli.md).
"""
from __future__ import annotations

from .store import intensity as sto
from .store import read_report
from .store.read_intensity import UNREADABLE_NOTE

KIND_OF = {"co2": "co2_g_per_kwh", "price": "price_per_kwh"}
ESTIMATE_NOTE = ("estimate: the same energy at the zone's lowest and highest "
                 "hour of that day (hourly averages of the imported values); "
                 "not a schedule")


def statics(settings) -> dict:
    return {"co2": settings.co2_g_per_kwh, "price": settings.price_per_kwh}


def static_fields(settings, zone=None) -> dict:
    """The fields every figure carries, for a static figure."""
    out = {"zone": zone}
    for k, v in statics(settings).items():
        out.update({f"{KIND_OF[k]}": v, f"{k}_method": "static",
                    f"{k}_covered_pct": 0.0, f"{k}_estimated_pct": 0.0,
                    f"{k}_sources": ""})
    return out


def fields(avgs: dict, zone=None) -> dict:
    """{co2: average, price: average} (carbon.average) as output fields."""
    out = {"zone": zone}
    for k, a in avgs.items():
        out.update({KIND_OF[k]: a["per_kwh"], f"{k}_method": a["method"],
                    f"{k}_covered_pct": a["covered_pct"],
                    f"{k}_estimated_pct": a["estimated_pct"], f"{k}_sources": a["sources"]})
    return out


def apply(d: dict, f: dict) -> None:
    """Set a figure dict's CO2 and cost from its kWh and the averages."""
    d.update(f)
    for pre in ("", "measured_"):       # measured_*: shared nodes' whole packages
        if d.get(pre + "kwh") is not None:
            d[pre + "co2_g"] = d[pre + "kwh"] * f["co2_g_per_kwh"]
            d[pre + "cost"] = d[pre + "kwh"] * f["price_per_kwh"]


class Loaded:
    """The series of some zones, and the grid of cells over them."""

    def __init__(self, rows, zones, lo_ns=None, utc=False):
        """rows: store/intensity.series_rows of the zones from lo_ns on."""
        import numpy as np
        from . import carbon
        self.zones = sorted({z for z in zones if z is not None})
        by: dict = {}
        for z, k, a, b, v, src, est in rows:
            by.setdefault((z, k), []).append((a, b, v, src, est))
        self.series = {key: carbon.Series(*zip(*vals)) for key, vals in by.items()}
        bounds = np.array([x for vals in by.values() for r in vals for x in r[:2]],
                          dtype=np.int64)
        self.grid_ns = carbon.cell_ns(bounds, 0 if utc else carbon.local_offset_s(lo_ns))
        self.utc = utc

    @classmethod
    def read(cls, conn, zones, lo_ns=None, hi_ns=None, utc=False):
        """The zones' series overlapping [lo_ns, hi_ns) from the store."""
        return cls(sto.series_rows(conn, zones, lo_ns, hi_ns), zones, lo_ns, utc)

    def zone_index(self, zones) -> list:
        if len(self.zones) == 1:        # one zone: a step has it or none
            z0 = self.zones[0]
            if z0 is not None:
                return [0 if z == z0 else -1 for z in zones]
        ix = {z: i for i, z in enumerate(self.zones)}
        return [ix.get(z, -1) for z in zones]

    def figures(self, owner, zone_ix, cell, energy, n, settings) -> dict:
        from . import carbon
        st = statics(settings)
        return {k: carbon.figures(owner, zone_ix, cell, energy, self.series,
                                  self.zones, KIND_OF[k], st[k], self.grid_ns, n)
                for k in st}


# --------------------------------------------------------------------------
# job

def for_job(grid: dict, rows: list, steps: list, totals: dict,
            settings, utc: bool = False) -> dict | None:
    """CO2 and cost of a job's steps and phases (steps: the summary's step
    dicts, in the order of their rows; grid: store/read_intensity.job_grid)
    and totals, time-varying where values cover them; the zone's day and
    the what-if estimate.  Returns the "intensity" part of the summary."""
    have = grid["have"]
    if have is not True or not grid["spans"][0]:
        zone_of = ({r[0]: settings.zone for r in rows} if not settings.zone_rules
                   else {r[0]: r[1] for r in grid["spans"][0]})
        for r, d in zip(rows, steps):
            f = static_fields(settings, zone_of.get(r[0]))
            apply(d, f)
            for p in d["phases"]:
                apply(p, f)
        totals.update(static_fields(settings, _one(zone_of.values())))
        return {"zones": sorted({z for z in zone_of.values() if z}), "days": [],
                "what_if": None,
                "note": UNREADABLE_NOTE if have == sto.UNREADABLE else None}
    span_steps, span_phases = grid["spans"]
    data = Loaded(grid["series"], {r[1] for r in span_steps}, grid["lo_ns"], utc)
    return _job_time_varying(data, rows, steps, totals, settings, span_steps,
                             span_phases, utc)


def _nan(x):
    return float("nan") if x is None else float(x)


def _phase_j(p) -> float:
    """A phase dict's CPU + DRAM energy (NaN: not shown or not measured)."""
    if p is None or p.get("energy_cpu_j") is None:
        return float("nan")
    return p["energy_cpu_j"] + (p.get("energy_dram_j") or 0.0)


def _one(zones):
    zs = sorted({z for z in zones if z})
    return zs[0] if len(zs) == 1 else ("+".join(zs) or None)


def _job_time_varying(data: Loaded, rows, steps, totals, settings, span_steps,
                      span_phases, utc) -> dict:
    import numpy as np
    from . import carbon
    lo = min(r[2] for r in span_steps)
    zone_of = {r[0]: r[1] for r in span_steps}
    pk = [r[0] for r in span_steps]
    ix = {p: i for i, p in enumerate(pk)}
    top = [p for p in span_phases if p[2] is None and p[0] in ix]
    # the energies as the summary shows them (a user's view: rounded, none
    # for a phase too short to show; security.md), the times from the store
    shown = {r[0]: d for r, d in zip(rows, steps)}
    pshown = {(pk_, p["seq"]): p for pk_, d in shown.items() for p in d["phases"]}
    e = np.array([_nan(shown.get(r[0], {}).get("energy_total_j")) for r in span_steps])
    iv = carbon.step_intervals(
        {"start_ns": [r[2] for r in span_steps], "end_ns": [r[3] for r in span_steps],
         "energy_j": e},
        {"step": [ix[p[0]] for p in top], "start_ns": [p[3] for p in top],
         "end_ns": [p[4] for p in top],
         "energy_j": [_phase_j(pshown.get((p[0], p[1]))) for p in top]})
    zix = np.array(data.zone_index([r[1] for r in span_steps]), dtype=np.int64)
    # owners: the steps, then every phase over its own window
    ph = [p for p in span_phases if p[0] in ix]
    own = np.concatenate([iv["owner"], len(pk) + np.arange(len(ph))])
    o, cell, en = carbon.split(
        own, np.concatenate([iv["start_ns"], [p[3] for p in ph]]).astype(np.int64),
        np.concatenate([iv["end_ns"], [p[4] for p in ph]]).astype(np.int64),
        # a phase's own figures: its window at constant power (any energy)
        np.concatenate([iv["energy_j"], np.ones(len(ph))]), data.grid_ns)
    zone_own = np.concatenate([zix, zix[[ix[p[0]] for p in ph]]]) if ph else zix
    f = data.figures(o, zone_own[o], cell, en, len(pk) + len(ph), settings)
    avg = {i: {k: carbon.average(f[k], i) for k in f} for i in range(len(pk) + len(ph))}
    phase_at = {(p[0], p[1]): len(pk) + j for j, p in enumerate(ph)}
    parts = []
    for r, d in zip(rows, steps):
        i = ix[r[0]]
        apply(d, fields(avg[i], zone_of[r[0]]))
        w = d.get("counted_energy_total_j") or 0.0
        parts.append((w, avg[i]))
        for p in d["phases"]:
            apply(p, fields(avg[phase_at[(r[0], p["seq"])]], zone_of[r[0]]))
    tot = {k: carbon.combine([(w, a[k]) for w, a in parts], statics(settings)[k])
           for k in ("co2", "price")}
    apply(totals, fields(tot, _one(zone_of.values())))
    return _days(data, zone_of, lo, totals, utc)


def _days(data: Loaded, zone_of: dict, lo: int, totals: dict, utc: bool) -> dict:
    """The zone's day (the job's first step's day) and the what-if."""
    from . import carbon
    start, end, day = carbon.day_of(lo, utc)
    days, lows, highs = [], {}, {}
    for z in sorted({z for z in zone_of.values() if z}):
        d = {"zone": z, "day": day}
        for k, kind in KIND_OF.items():
            p = carbon.day_profile(data.series.get((z, kind)), start, end,
                                   data.grid_ns, utc)
            d[k] = p
            if p is not None:
                lows.setdefault(k, []).append(p["lowest_per_kwh"])
                highs.setdefault(k, []).append(p["highest_per_kwh"])
        days.append(d)
    what_if = None
    kwh = totals.get("kwh")
    if kwh is not None and (lows or highs) and len(days) == 1:
        what_if = {"estimate": True, "note": ESTIMATE_NOTE, "zone": days[0]["zone"],
                   "day": day}
        for k, unit in (("co2", "co2_g"), ("price", "cost")):
            p = days[0][k]
            if p is None:
                continue
            what_if.update({f"{unit}_at_lowest_hour": kwh * p["lowest_per_kwh"],
                            f"{k}_lowest_hour": p["lowest_hour"],
                            f"{unit}_at_highest_hour": kwh * p["highest_per_kwh"],
                            f"{k}_highest_hour": p["highest_hour"]})
    return {"zones": [d["zone"] for d in days], "days": days, "what_if": what_if}


# --------------------------------------------------------------------------
# report

def group_totals(groups: list, settings) -> dict:
    """The report's totals' fields: the groups' averages weighted by their
    energy."""
    if all(g["co2_method"] == g["price_method"] == "static" for g in groups):
        return static_fields(settings)
    from . import carbon
    parts = [(g["energy_total_j"] or 0.0, g) for g in groups]
    out = {"zone": None}
    for k, kind in KIND_OF.items():
        a = carbon.combine([(w, {"per_kwh": g[kind], "covered_pct": g[f"{k}_covered_pct"],
                                 "estimated_pct": g[f"{k}_estimated_pct"],
                                 "sources": g[f"{k}_sources"]}) for w, g in parts],
                           statics(settings)[k])
        out.update(fields({k: a}))
    return out


def wanted(conn, settings) -> bool:
    """Whether a report's figures can be time-varying: a zone is configured
    and values were imported (readable by this role)."""
    return (settings.zone is not None or bool(settings.zone_rules)) and \
        sto.has_values(conn) is True


def for_groups(conn, settings, gexpr, joins, jargs, where, wargs,
               since_ns, until_ns, utc: bool = False, by_hour: bool = False,
               by_job: bool = False, cluster=None):
    """{group key: {co2: average, price: average}} of a report window's
    steps, each weighted by its counted energy (None: no value imported;
    every figure static).  by_hour: keyed by hour of day (local unless
    utc), with the energy placed in each: {hour: (energy_j, averages)}.
    by_job: the groups are attributes of the job (store.intensity's
    job_cell_sums reads the jobs' totals where it can)."""
    if not by_hour and not wanted(conn, settings):
        return None         # no zone (every figure static), or no value
    import numpy as np
    from . import carbon
    zones = [z for _, _, z in settings.zone_rules] + [settings.zone]
    # the values from the window's start on (a year of hours is small)
    data = Loaded.read(conn, zones, since_ns, None, utc)
    if by_job and not any(f == "nodes" for f, _, _ in settings.zone_rules):
        rows = sto.job_cell_sums(conn, settings, gexpr, joins, jargs, where, wargs,
                                 data.grid_ns, since_ns, until_ns, cluster)
    else:
        rows = sto.cell_sums(conn, settings, gexpr, joins, jargs, where, wargs,
                             data.grid_ns)
    keys = sorted({r[0] for r in rows}, key=repr)
    kix = {k: i for i, k in enumerate(keys)}
    # columns (one transposition; tens of thousands of rows at a site)
    g, z, cells, sp, hi, lo = list(zip(*rows))[:6] if rows else ([] for _ in range(6))
    sp = np.asarray(sp, dtype=np.int64)
    own = np.fromiter((kix[k] for k in g), dtype=np.int64, count=len(g))
    zix = np.asarray(data.zone_index(z), dtype=np.int64)
    cells = np.asarray(cells, dtype=np.int64)
    # steps (and jobs) within one cell: their counted energy, all in that cell
    ens = read_report.unwide_floats(hi, lo) / 1e6
    across = np.nonzero(sp != 0)[0]
    if len(across):
        whole = sp == 0
        o, zc, c, e = _cross(conn, [rows[i] for i in across], own[across],
                             zix[across], data)
        own, zix, cells, ens = (np.concatenate([own[whole], o]),
                                np.concatenate([zix[whole], zc]),
                                np.concatenate([cells[whole], c]),
                                np.concatenate([ens[whole], e]))
    if by_hour:
        hours = carbon.local_hours(cells * data.grid_ns, utc)
        f = data.figures(hours, zix, cells, ens, 24, settings)
        return {h: (float(f["co2"]["energy_j"][h]),
                    {k: carbon.average(f[k], h) for k in f})
                for h in range(24) if f["co2"]["energy_j"][h] > 0}
    f = data.figures(own, zix, cells, ens, len(keys), settings)
    return {k: {kk: carbon.average(f[kk], i) for kk in f} for k, i in kix.items()}


def _cross(conn, cross: list, grp, zix, data: Loaded) -> tuple:
    """Pieces (group, zone, cell, energy) of the steps across cells (cross:
    their cell_sums rows; grp, zix: their group and zone indexes), placed
    with their top-level phases; each step's pieces scaled to its counted
    energy (the profile is its own energy's)."""
    import numpy as np
    from . import carbon
    _, _, _, pks, hi, lo, own_uj, start, end = zip(*cross)
    own_e = np.array(own_uj, dtype=float) / 1e6          # None: NaN
    own_e[own_e == 0] = np.nan
    # the phases as one integer array (step_pk, start, end, µJ or -1)
    ph = sto.top_phases(conn, pks)
    pks = np.asarray(pks, dtype=np.int64)
    order = np.argsort(pks)
    p_e = ph[:, 3].astype(float) / 1e6
    p_e[ph[:, 3] < 0] = np.nan
    iv = carbon.step_intervals(
        {"start_ns": start, "end_ns": end, "energy_j": own_e},
        {"step": order[np.searchsorted(pks[order], ph[:, 0])], "start_ns": ph[:, 1],
         "end_ns": ph[:, 2], "energy_j": p_e})
    o, c, e = carbon.split(iv["owner"], iv["start_ns"], iv["end_ns"], iv["energy_j"],
                           data.grid_ns)
    counted = read_report.unwide_floats(hi, lo) / 1e6
    scale = np.divide(counted, own_e, out=np.zeros(len(cross)),
                      where=~np.isnan(own_e) & (own_e > 0))
    # a step without its own energy (counted only): its whole window
    lost = np.nonzero(np.isnan(own_e) | (own_e <= 0))[0]
    if len(lost):
        o2, c2, e2 = carbon.split(lost, np.asarray(start)[lost], np.asarray(end)[lost],
                                  counted[lost], data.grid_ns)
        o, c = np.concatenate([o, o2]), np.concatenate([c, c2])
        e = np.concatenate([e * scale[o[:len(e)]], e2])
    else:
        e = e * scale[o]
    return grp[o], zix[o], c, e


def hour_report(conn, settings, window: tuple, since_ns, until_ns, cluster,
                utc: bool = False) -> dict:
    """`report --by hour`: the window's energy by hour of day (local time
    unless utc), each hour's CO2 and cost at the values it met.  window:
    (joins from steps s, their arguments, conditions, their arguments) of
    the report's window (store/read_report.py: group_clause, window_conditions)."""
    joins, jargs, where, wargs = window
    hours = for_groups(conn, settings, "0", joins, jargs, where, wargs, since_ns,
                       until_ns, utc, by_hour=True) or {}
    total = sum(e for e, _ in hours.values())
    groups = []
    for h in sorted(hours):
        e, avgs = hours[h]
        kwh = settings.scoped_j(e, 0.0) / 3.6e6
        d = {"key": f"{h:02d}", "energy_total_j": e, "kwh": kwh,
             "share_pct": 100.0 * e / total if total else 0.0}
        apply(d, fields(avgs))
        groups.append(d)
    totals = {"energy_total_j": total, "kwh": settings.scoped_j(total, 0.0) / 3.6e6}
    apply(totals, group_totals(groups, settings))
    return {"by": "hour", "since": _iso(since_ns), "until": _iso(until_ns),
            "cluster": cluster, "currency": settings.currency,
            "hours_in": "UTC" if utc else "local time",
            "scope": settings.scope, "scope_note": settings.scope_note(),
            "totals": totals, "top": groups, "groups": groups}


def _iso(ns):
    import datetime as dt
    return None if ns is None else dt.datetime.fromtimestamp(
        ns / 1e9, dt.timezone.utc).isoformat(timespec="seconds")


HOUR_CSV_COLUMNS = ["key", "energy_total_j", "share_pct", "kwh", "co2_g", "cost",
                    "scope", "co2_g_per_kwh", "co2_method", "co2_covered_pct",
                    "co2_estimated_pct", "co2_sources", "price_per_kwh", "price_method",
                    "price_covered_pct", "price_estimated_pct", "price_sources"]


# --------------------------------------------------------------------------
# exporter

def step_prices(conn, settings, where: str, args) -> dict:
    """{step_pk: the average price its energy met} of the steps `where`
    selects (a condition on steps s): the exporter's cost ({} without
    imported prices: every step at the site's price)."""
    if settings.zone is None and not settings.zone_rules or \
            sto.has_values(conn, "price_per_kwh") is not True:
        return {}
    import numpy as np
    from . import carbon
    steps, phases = sto.spans_where(conn, settings, where, args)
    if not steps:
        return {}
    data = Loaded.read(conn, {r[1] for r in steps}, min(r[2] for r in steps),
                  max(r[3] for r in steps), utc=True)
    pk = [r[0] for r in steps]
    ix = {p: i for i, p in enumerate(pk)}
    top = [p for p in phases if p[2] is None and p[0] in ix]
    iv = carbon.step_intervals(
        {"start_ns": [r[2] for r in steps], "end_ns": [r[3] for r in steps],
         "energy_j": [np.nan if r[4] is None else r[4] / 1e6 for r in steps]},
        {"step": [ix[p[0]] for p in top], "start_ns": [p[3] for p in top],
         "end_ns": [p[4] for p in top],
         "energy_j": [np.nan if p[5] is None else p[5] / 1e6 for p in top]})
    o, cell, en = carbon.split(iv["owner"], iv["start_ns"], iv["end_ns"],
                               iv["energy_j"], data.grid_ns)
    zix = np.array(data.zone_index([r[1] for r in steps]), dtype=np.int64)
    f = carbon.figures(o, zix[o], cell, en, data.series, data.zones, "price_per_kwh",
                       settings.price_per_kwh, data.grid_ns, len(pk))
    return {p: carbon.average(f, i)["per_kwh"] for i, p in enumerate(pk)}
