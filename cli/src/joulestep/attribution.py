"""Shared nodes: each job's share of a package's energy (docs/accounting.md,
"Shared nodes").  The one place the rule lives; pure functions here, the
store's rows in :mod:`joulestep.sharing`.

RAPL measures whole packages: two jobs on one package each measure the
whole package.  The unit of attribution is a job's outermost step on a node
(the batch step, or an srun step outside any): its interval, the CPU time of
every step of the job inside it (each slurmstepd's reaped tasks, disjoint),
and per package the plugin's inputs (``packages[]`` of the record): the
package's CPUs, the job's CPUs there, the package's busy and total CPU time
over the interval (/proc/stat), and the package's measured energy.

The rule, per package p and unit u over u's interval T_u:

- static energy S_u = P0_p * T_u, with P0_p the package's idle power (W):
  fitted over the node's steps (:func:`fit_static_w`, the line
  E/T = P0 + k * busy/T), clamped to [0, E_u / T_u];
- u's share: S_u * step_cpus/cpus  +  (E_u - S_u) * C_u,p / busy_u,p,
  with C_u,p the unit's CPU time on p (split over its packages by its CPUs
  there) and the fraction C/busy at most 1;
- conservation (:func:`conserve`): within every unit's interval, the shares
  of all units that overlap it, each pro rata of its time inside, add up to
  at most that interval's measured energy; where they would exceed it,
  every share in it is scaled down.  For units that ran over one interval
  this is the plain statement: the shares add up to at most the package's
  energy, to the µJ, and the rest is unattributed (idle, the system,
  unallocated CPUs).

A unit is ``exclusive`` when no unit of another job overlaps it in time on a
package it used, else ``shared``; an exclusive unit's figure is measured
(its packages' energy), never estimated.  Whether it had every CPU of its
packages does not decide it: records that say so and still overlap (an
oversubscribed node, clocks that disagree) are split like any other, so
that the sum stays within the measurement.
"""
from __future__ import annotations

from collections import namedtuple

#: one package of a unit: the package's CPUs, the unit's CPUs there, the
#: package's busy and total CPU time (ns) and energy (µJ; dram_uj None: none)
Pkg = namedtuple("Pkg", "cpus step_cpus busy_ns total_ns energy_uj dram_uj")
#: key: hashable; job: the job's key; cpu_time_ns None: not recorded;
#: packages: {package id: Pkg}; cpu_by_pkg: {package id: the unit's CPU time
#: there (ns)} where the step's cgroup counted it per CPU, None: not known
Unit = namedtuple("Unit", "key job start_ns end_ns cpu_time_ns packages cpu_by_pkg",
                  defaults=(None,))
#: a unit's estimate: cpu_uj / dram_uj; sharing 'exclusive' | 'shared' |
#: 'partial'; static_w {package: P0 used, None: none}; cpus (the unit's
#: CPUs, its packages' CPUs) for 'partial'.  Exclusive and alone on the
#: node: None (its measurement stands); exclusive beside other jobs: its
#: packages' measured energy; shared: the attributed share (None: an input
#: is missing).  'partial': alone among the units given, but with only some
#: of its packages' CPUs: cpu_uj None, since no neighbour is known to split
#: with, and its measurement is the whole packages', never its own (the
#: neighbours may not be in the store yet, or not visible to the reader)
Share = namedtuple("Share", "cpu_uj dram_uj sharing static_w cpus", defaults=(None,))

#: fewest points and least spread (mean busy CPUs) for a fit of P0
FIT_MIN_POINTS, FIT_MIN_SPREAD = 2, 0.2


def fit_static_w(points: list) -> float | None:
    """Least-squares intercept P0 (W) of E/T = P0 + k * busy/T over
    (duration_ns, busy_ns, energy_uj) points of one package, each weighted
    by its duration; None when the points do not spread enough to tell the
    idle power from the busy one, or the fit is not physical (P0 < 0 or
    k < 0: the package then is not linear in its busy time)."""
    pts = [(t / 1e9, b / t, e / t * 1e3) for t, b, e in points if t > 0]
    if len(pts) < FIT_MIN_POINTS:
        return None
    xs = [x for _, x, _ in pts]
    if max(xs) - min(xs) < FIT_MIN_SPREAD:
        return None
    w = sum(t for t, _, _ in pts)
    mx = sum(t * x for t, x, _ in pts) / w
    my = sum(t * y for t, _, y in pts) / w
    sxx = sum(t * (x - mx) ** 2 for t, x, _ in pts)
    sxy = sum(t * (x - mx) * (y - my) for t, x, y in pts)
    k = sxy / sxx
    p0 = my - k * mx
    return p0 if p0 >= 0 and k >= 0 else None


def overlap_ns(a: Unit, b: Unit) -> int:
    return max(0, min(a.end_ns, b.end_ns) - max(a.start_ns, b.start_ns))


def sharing(units: list) -> dict:
    """{key: 'exclusive' | 'shared'} (see the module's doc)."""
    return {u.key: "shared" if any(v.job != u.job and overlap_ns(u, v) > 0
                                   and set(u.packages) & set(v.packages) for v in units)
            else "exclusive" for u in units}


def cpu_on(u: Unit, pkg: int) -> float | None:
    """The unit's CPU time on one package (ns): as the step's cgroup counted
    it per CPU where it did (cpu_by_pkg), else split over its packages by
    its CPUs there (exact on one package)."""
    if u.cpu_time_ns is None:
        return None
    if u.cpu_by_pkg is not None:
        return float(u.cpu_by_pkg.get(pkg, 0))
    n = sum(p.step_cpus for p in u.packages.values())
    return u.cpu_time_ns * u.packages[pkg].step_cpus / n if n else 0.0


def raw_share(u: Unit, pkg: int, p0_w: float | None, cpus: int | None = None) -> float | None:
    """The unit's share (µJ, before conservation) of one package's energy
    over its interval; None without CPU time.  cpus: the CPUs the static
    part is split over (default the package's; more where the units
    overlapping it were allocated more, as with CR_CPU or oversubscription)."""
    p = u.packages[pkg]
    c = cpu_on(u, pkg)
    if c is None or p.energy_uj is None:
        return None
    t = u.end_ns - u.start_ns
    static = min(p.energy_uj, max(0.0, (p0_w or 0.0) * t / 1e3))
    used = min(1.0, c / p.busy_ns) if p.busy_ns > 0 else 0.0
    return static * min(1.0, p.step_cpus / max(p.cpus, cpus or 0)) + \
        (p.energy_uj - static) * used


def conserve(units: list, pkg: int, raw: dict, field: str = "energy_uj") -> dict:
    """{key: share} scaled so that within every unit's interval the shares
    of the units overlapping it, each pro rata of its time there, add up to
    at most that interval's measured energy (module doc; field: the Pkg
    figure, energy_uj or dram_uj).  Integer µJ, rounded down: never more
    than measured."""
    on = [u for u in units if pkg in u.packages and raw.get(u.key) is not None
          and getattr(u.packages[pkg], field) is not None]
    factor = {}
    for s in on:
        e = getattr(s.packages[pkg], field)
        load = sum(raw[t.key] * _frac(t, s) for t in on)
        factor[s.key] = min(1.0, e / load) if load > 0 else 1.0
    out = {}
    for t in on:
        f = min(factor[s.key] for s in on if s is t or overlap_ns(s, t) > 0)
        out[t.key] = int(raw[t.key] * f)
    return out


def _frac(t: Unit, s: Unit) -> float:
    """The part of t's interval inside s's (1 for t itself)."""
    if t is s:
        return 1.0
    d = t.end_ns - t.start_ns
    return overlap_ns(t, s) / d if d > 0 else 0.0


def components(units: list) -> list:
    """The units in groups that overlap in time (a chain of overlaps is one
    group): what one unit's share depends on never leaves its group."""
    out, end = [], None
    for u in sorted(units, key=lambda u: (u.start_ns, u.end_ns)):
        if out and u.start_ns < end:
            out[-1].append(u)
            end = max(end, u.end_ns)
        else:
            out.append([u])
            end = u.end_ns
    return out


def attribute(units: list, static_w: dict) -> dict:
    """{key: Share} for the units of one node (every unit that overlaps
    another must be among them); static_w: {package: P0 in W or None}."""
    out = {}
    for group in components(units):
        out.update(_attribute(group, static_w))
    return out


def _dram_raw(u: Unit, pkg: int, share) -> float | None:
    """The unit's raw DRAM share: the package's DRAM in its package share's
    proportion."""
    p = u.packages[pkg]
    if share is None or p.dram_uj is None or not p.energy_uj:
        return None
    return p.dram_uj * share / p.energy_uj


def _attribute(units: list, static_w: dict) -> dict:
    """attribute() over one group of overlapping units."""
    mode = sharing(units)
    pkgs = sorted({p for u in units for p in u.packages})
    cpu = {u.key: 0 for u in units}
    dram = {u.key: 0 for u in units}
    for pkg in pkgs:
        raw = {u.key: raw_share(u, pkg, static_w.get(pkg), _allocated(u, pkg, units))
               for u in units if pkg in u.packages}
        raw_d = {u.key: _dram_raw(u, pkg, raw[u.key]) for u in units if pkg in u.packages}
        got, got_d = conserve(units, pkg, raw), conserve(units, pkg, raw_d, "dram_uj")
        for u in units:
            if pkg not in u.packages:
                continue
            cpu[u.key] = _add(cpu[u.key], got.get(u.key))
            dram[u.key] = _add(dram[u.key], got_d.get(u.key))
    out = {}
    for u in units:
        sw = {p: static_w.get(p) for p in u.packages}
        if mode[u.key] == "exclusive" and not any(
                v.job != u.job and overlap_ns(u, v) > 0 for v in units):
            mine = sum(p.step_cpus for p in u.packages.values())
            allc = sum(p.cpus for p in u.packages.values())
            out[u.key] = Share(None, None, "exclusive", sw) if mine >= allc else \
                Share(None, None, "partial", sw, (mine, allc))  # alone: the measurement
        elif mode[u.key] == "exclusive":  # its packages' own, not the node's
            c = _sum(p.energy_uj for p in u.packages.values())
            d = _sum(p.dram_uj for p in u.packages.values())
            out[u.key] = Share(c, d, "exclusive", sw)
        else:
            out[u.key] = Share(cpu[u.key], dram[u.key], "shared", sw)
    return out


def _allocated(u: Unit, pkg: int, units: list) -> int:
    """CPUs allocated on pkg to u and the units overlapping it."""
    return sum(v.packages[pkg].step_cpus for v in units
               if pkg in v.packages and (v is u or overlap_ns(u, v) > 0))


def _add(a, b):
    return None if a is None or b is None else a + b


def _sum(xs):
    xs = list(xs)
    return None if not xs or any(x is None for x in xs) else sum(xs)
