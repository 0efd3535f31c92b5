"""CO2 and cost from the grid's intensity and price over time (pure: arrays
in, figures out; the rows come from store/intensity.py).

The rule (docs/user-guide.md, "CO2 and cost over time"):

- A step's energy is placed in time by its phases: power is constant
  within a phase, and the step's energy outside its phases is spread, at
  constant power, over the step's time outside them.  Top-level phases
  only: a phase inside another is part of it.  When the phases' energies
  add up to more than the step's (separate counters), they are scaled down
  to it; when the phases cover the whole step, the rest is spread over the
  whole step.
- Time is cut into cells of one grid: the greatest common divisor of the
  imported intervals' boundaries (and of an hour and the local time zone's
  offset, so that hours of day are whole cells); one value holds in each
  cell.  An interval's energy goes to the cells it overlaps in proportion
  to time (a zero-length interval: all to the cell it is in).
- CO2 and cost are then the sum over cells of energy x value; where no
  imported value covers a cell, the site's static factor ([site]
  co2_g_per_kwh, price_per_kwh).  Each figure carries the share of its
  energy that imported values covered and their sources.

What a step's figures apply to is the step's kWh as `job` and `report`
compute it (its scope, its GPUs): the placement gives the average value
the energy met (g/kWh, price/kWh), weighted by energy.
"""
from __future__ import annotations

import datetime as dt
import math

import numpy as np

KINDS = ("co2_g_per_kwh", "price_per_kwh")
HOUR_NS = 3600 * 10**9
MIN_CELL_NS = 60 * 10**9        # boundaries finer than a minute: read at the cell's start
TIME_VARYING, STATIC = "time-varying", "static"


# --------------------------------------------------------------------------
# the grid of cells

def cell_ns(bounds: np.ndarray, offset_s: int = 0) -> int:
    """The cells' length: the gcd of the intervals' boundaries, an hour and
    the local time zone's offset; at least a minute."""
    g = HOUR_NS
    if offset_s:
        g = math.gcd(g, abs(int(offset_s)) * 10**9)
    if len(bounds):
        g = int(np.gcd.reduce(np.append(np.asarray(bounds, dtype=np.int64) % g, g)))
    return max(g, MIN_CELL_NS) if g else HOUR_NS


def step_intervals(steps: dict, phases: dict) -> dict:
    """The intervals a step's energy is placed over (the module's rule).

    steps: arrays key (the owner), start_ns, end_ns, energy_j (own energy;
    NaN: not measured, left out); phases: arrays step (index into steps),
    start_ns, end_ns, energy_j (top-level phases; NaN: not measured, part
    of the rest).  Returns arrays owner (index into steps), start_ns,
    end_ns, energy_j: one interval per step (its rest, at the rest's
    power, over the whole step) and one per phase (its energy less the
    rest's power over it), which add up to the step's energy in every
    cell."""
    n = len(steps["start_ns"])
    s0 = np.asarray(steps["start_ns"], dtype=np.int64)
    s1 = np.maximum(np.asarray(steps["end_ns"], dtype=np.int64), s0)
    e = np.asarray(steps["energy_j"], dtype=float)
    pi = np.asarray(phases["step"], dtype=np.int64)
    pe = np.asarray(phases["energy_j"], dtype=float)
    ok = ~np.isnan(pe) & ~np.isnan(e[pi]) if len(pi) else np.zeros(0, bool)
    pi, pe = pi[ok], pe[ok]
    p0 = np.clip(np.asarray(phases["start_ns"], dtype=np.int64)[ok], s0[pi], s1[pi])
    p1 = np.clip(np.asarray(phases["end_ns"], dtype=np.int64)[ok], p0, s1[pi])
    psum = np.bincount(pi, pe, minlength=n)
    scale = np.where(psum > e, np.divide(e, psum, out=np.ones(n), where=psum > 0), 1.0)
    pe = pe * scale[pi]
    rest = np.maximum(e - psum * scale, 0.0)
    dur = (s1 - s0).astype(float)
    covered = np.bincount(pi, (p1 - p0).astype(float), minlength=n)
    rest_t = dur - covered
    # phases covering the whole step (or overlapping): the rest over it all
    cut = rest_t > 0
    power = np.where(cut, np.divide(rest, rest_t, out=np.zeros(n), where=cut), 0.0)
    keep = ~np.isnan(e)
    own = np.where(cut, power * dur, rest)
    ph = pe - power[pi] * (p1 - p0)
    return {"owner": np.concatenate([np.nonzero(keep)[0], pi]),
            "start_ns": np.concatenate([s0[keep], p0]),
            "end_ns": np.concatenate([s1[keep], p1]),
            "energy_j": np.concatenate([own[keep], ph])}


def split(owner, start_ns, end_ns, energy_j, grid_ns: int) -> tuple:
    """Each interval's energy cut into the cells it overlaps, in
    proportion to time: (owner, cell, energy_j) per piece."""
    a = np.asarray(start_ns, dtype=np.int64)
    b = np.maximum(np.asarray(end_ns, dtype=np.int64), a)
    e = np.asarray(energy_j, dtype=float)
    first = a // grid_ns
    last = np.where(b > a, (b - 1) // grid_ns, first)
    n = (last - first + 1).astype(np.int64)
    idx = np.repeat(np.arange(len(a)), n)
    off = np.arange(len(idx)) - np.repeat(np.cumsum(n) - n, n)
    cell = first[idx] + off
    lo = np.maximum(a[idx], cell * grid_ns)
    hi = np.minimum(b[idx], (cell + 1) * grid_ns)
    span = (b - a)[idx]
    frac = np.where(span > 0, (hi - lo) / np.where(span > 0, span, 1), 1.0)
    return np.asarray(owner)[idx], cell, e[idx] * frac


# --------------------------------------------------------------------------
# values

class Series:
    """The imported values of one zone and kind, in time order."""

    def __init__(self, start_ns, end_ns, value, source, estimated=None):
        self.start = np.asarray(start_ns, dtype=np.int64)
        # whether the source marked each value as estimated (not a measurement)
        self.estimated = np.zeros(len(self.start), bool) if estimated is None else \
            np.asarray(estimated, dtype=bool)
        self.end = np.asarray(end_ns, dtype=np.int64)
        self.value = np.asarray(value, dtype=float)
        ix: dict = {}
        self.source = np.fromiter((ix.setdefault(x, len(ix)) for x in source),
                                  dtype=np.int64, count=len(source))
        self.names = list(ix)

    def at(self, t_ns) -> tuple:
        """(value, source index, estimated) at times t (NaN, -1, False where
        none covers)."""
        t = np.asarray(t_ns, dtype=np.int64)
        i = np.searchsorted(self.start, t, side="right") - 1
        hit = (i >= 0) & (t < self.end[np.maximum(i, 0)]) if len(self.start) else \
            np.zeros(len(t), bool)
        j = np.maximum(i, 0)
        v = np.where(hit, self.value[j] if len(self.value) else np.nan, np.nan)
        return (v, np.where(hit, self.source[j] if len(self.source) else -1, -1),
                hit & (self.estimated[j] if len(self.estimated) else False))


def figures(owner, zone, cell, energy_j, series: dict, zones: list, kind: str,
            static: float, grid_ns: int, n_owners: int) -> dict:
    """Per owner: energy_j, covered_j, value_j (sum of energy x value over
    the covered cells), estimated_j (the covered energy at values the
    source marked estimated), sources (set of names), for one kind.  series:
    {(zone, kind): Series}; zone: index into zones per piece (-1: none)."""
    v = np.full(len(cell), np.nan)
    src = np.full(len(cell), -1, dtype=np.int64)
    est = np.zeros(len(cell), bool)
    names: list = []
    zone = np.asarray(zone)
    for zi, z in enumerate(zones):
        s = series.get((z, kind))
        if s is None:
            continue
        m = zone == zi
        if not m.any():
            continue
        vv, ss, ee = s.at(cell[m] * grid_ns)
        v[m], est[m] = vv, ee
        src[m] = np.where(ss >= 0, ss + len(names), -1)
        names += list(s.names)
    hit = ~np.isnan(v)
    owner = np.asarray(owner, dtype=np.int64)
    e = np.bincount(owner, energy_j, minlength=n_owners)
    cov = np.bincount(owner[hit], energy_j[hit], minlength=n_owners)
    val = np.bincount(owner[hit], energy_j[hit] * v[hit], minlength=n_owners)
    estj = np.bincount(owner[est], energy_j[est], minlength=n_owners)
    sources: list = [set() for _ in range(n_owners)]
    if hit.any():
        ns = max(len(names), 1)
        seen = np.nonzero(np.bincount(owner[hit] * ns + src[hit],
                                      minlength=n_owners * ns))[0]
        for o, si in zip(*np.divmod(seen, ns)):
            sources[o].add(names[si])
    return {"energy_j": e, "covered_j": cov, "value_j": val, "estimated_j": estj,
            "sources": sources, "static": static}


def average(f: dict, i: int) -> dict:
    """The average value owner i's energy met, its method, coverage and
    the share at values the source marked estimated.  Energy not covered
    counts at the static factor."""
    e, cov, val = float(f["energy_j"][i]), float(f["covered_j"][i]), float(f["value_j"][i])
    share = cov / e if e > 0 else 0.0
    if e <= 0 or cov <= 0:
        avg = f["static"]
    else:
        avg = (val + f["static"] * (e - cov)) / e
    return {"per_kwh": avg, "method": TIME_VARYING if share > 0 else STATIC,
            "covered_pct": 100.0 * share,
            "estimated_pct": 100.0 * float(f["estimated_j"][i]) / e if e > 0 else 0.0,
            "sources": "; ".join(sorted(f["sources"][i]))}


def combine(parts: list, static: float) -> dict:
    """The average of several owners' averages, weighted by their weights:
    parts [(weight, average dict)]."""
    w = sum(p[0] for p in parts)
    if w <= 0:
        return {"per_kwh": static, "method": STATIC, "covered_pct": 0.0,
                "estimated_pct": 0.0, "sources": ""}
    avg = sum(p[0] * p[1]["per_kwh"] for p in parts) / w
    share = sum(p[0] * p[1]["covered_pct"] for p in parts) / w
    est = sum(p[0] * p[1]["estimated_pct"] for p in parts) / w
    srcs = sorted({s for p in parts for s in p[1]["sources"].split("; ") if s})
    return {"per_kwh": avg, "method": TIME_VARYING if share > 0 else STATIC,
            "covered_pct": share, "estimated_pct": est, "sources": "; ".join(srcs)}


# --------------------------------------------------------------------------
# a zone's day

def local_hours(cell_start_ns: np.ndarray, utc: bool = False) -> np.ndarray:
    """Hour of day (0..23, local time unless utc) of each time (no pandas:
    `job` would pay its import)."""
    t = np.asarray(cell_start_ns, dtype=np.int64)
    if utc:
        return (t // HOUR_NS) % 24
    secs, inv = np.unique(t // 10**9, return_inverse=True)
    hours = np.array([dt.datetime.fromtimestamp(int(x)).hour for x in secs],
                     dtype=np.int64)
    return hours[inv].reshape(t.shape)


def _local_tz():
    return dt.datetime.now().astimezone().tzinfo


def local_offset_s(t_ns: int | None = None) -> int:
    """The local time zone's offset from UTC, in seconds, at t (now)."""
    t = dt.datetime.now().astimezone() if t_ns is None else \
        dt.datetime.fromtimestamp(t_ns / 1e9).astimezone()
    off = t.utcoffset()
    return int(off.total_seconds()) if off else 0


def day_of(t_ns: int, utc: bool = False) -> tuple[int, int, str]:
    """[start, end) in ns of the (local) day t falls in, and its date."""
    tz = dt.timezone.utc if utc else _local_tz()
    d = dt.datetime.fromtimestamp(t_ns / 1e9, tz).date()
    start = dt.datetime.combine(d, dt.time(), tzinfo=tz)
    if not utc:
        start = start.replace(tzinfo=None).astimezone()
        end = dt.datetime.combine(d + dt.timedelta(days=1), dt.time()).astimezone()
    else:
        end = start + dt.timedelta(days=1)
    return int(start.timestamp()) * 10**9, int(end.timestamp()) * 10**9, d.isoformat()


def day_profile(s: Series | None, day_start: int, day_end: int, grid_ns: int,
                utc: bool = False) -> dict | None:
    """A zone's day from its imported values: the time-weighted average
    over the covered part of the day, and the hours of day whose average is
    the lowest and the highest (None: no value that day)."""
    if s is None:
        return None
    cells = np.arange(day_start // grid_ns, -(-day_end // grid_ns), dtype=np.int64)
    v, _, _ = s.at(cells * grid_ns)
    lo = np.maximum(cells * grid_ns, day_start)
    hi = np.minimum((cells + 1) * grid_ns, day_end)
    w = (hi - lo).astype(float)
    hit = ~np.isnan(v) & (w > 0)
    if not hit.any():
        return None
    hours = local_hours(cells[hit] * grid_ns, utc)
    hw = np.bincount(hours, w[hit], minlength=24)
    hv = np.bincount(hours, w[hit] * v[hit], minlength=24)
    have = hw > 0
    avg_h = np.where(have, hv / np.where(have, hw, 1), np.nan)
    lo_h = int(np.nanargmin(avg_h))
    hi_h = int(np.nanargmax(avg_h))
    return {"day_avg_per_kwh": float((w[hit] * v[hit]).sum() / w[hit].sum()),
            "covered_pct": 100.0 * float(w[hit].sum() / w.sum()),
            "lowest_hour": lo_h, "lowest_per_kwh": float(avg_h[lo_h]),
            "highest_hour": hi_h, "highest_per_kwh": float(avg_h[hi_h])}
