"""Shared nodes in the store: the attribution's inputs from the stored rows
(steps.cpu_time_ns, step_packages, step_zones; migrations 013 and 021) and each
job's estimate, by the one rule in :mod:`joulestep.attribution`.

The estimate is worked out when read, not stored: it depends on every step
of the node over the interval, and a record ingested later changes it.  The
unit is a job's outermost step on a node (steps.inside_step_pk NULL), with
the CPU time of every step of the job inside it.  P0, the package's idle
power, is fitted over the node's steps with the inputs (the most recent
FIT_STEPS of them)."""
from __future__ import annotations

import re
from collections import defaultdict

from .. import attribution as at

FIT_STEPS = 2000
CHUNK = 500                  # ids per IN (...) list
_PKG_NAME = re.compile(r"package-(\d+)")
_COLS = "s.step_pk, s.job_pk, s.node_pk, s.start_ns, s.end_ns, s.inside_step_pk, s.cpu_time_ns"


def _in(n: int) -> str:
    return "(" + ", ".join("?" * n) + ")"


def _chunked(conn, sql: str, ids: list, tail: str = "") -> list:
    """Rows of sql + "(?, ...)" + tail over ids, CHUNK at a time."""
    out = []
    for i in range(0, len(ids), CHUNK):
        part = list(ids[i:i + CHUNK])
        out += conn.execute(sql + _in(len(part)) + tail, part).fetchall()
    return out


def _steps(conn, where: str, args: list) -> dict:
    return {r[0]: r for r in conn.execute(f"SELECT {_COLS} FROM steps s WHERE {where}", args)}


def _steps_of(conn, job_pks: list, outer_only: bool) -> dict:
    tail = " AND s.inside_step_pk IS NULL" if outer_only else ""
    return {r[0]: r for r in _chunked(conn, f"SELECT {_COLS} FROM steps s WHERE s.job_pk IN ",
                                      job_pks, tail)}


def _around(conn, outer: dict) -> dict:
    """The outermost steps of any job on the same nodes that overlap them,
    two hops out (what conservation within their intervals needs)."""
    got = dict(outer)
    for _ in range(2):
        by_node = defaultdict(list)
        for r in got.values():
            by_node[r[2]].append(r)
        for node, rs in by_node.items():
            lo, hi = min(r[3] for r in rs), max(r[4] for r in rs)
            got.update(_steps(conn, "s.node_pk = ? AND s.inside_step_pk IS NULL AND "
                                    "s.start_ns < ? AND s.end_ns > ?", [node, hi, lo]))
    return got


def _packages(conn, pks: list) -> dict:
    """{step_pk: {package: Pkg}} from step_packages and step_zones."""
    out, zones = defaultdict(dict), defaultdict(dict)
    if not pks:
        return out
    for spk, zid, name, kind, uj in _chunked(
            conn, "SELECT step_pk, zone_id, name, kind, energy_uj FROM step_zones WHERE "
            "step_pk IN ", pks):
        zones[spk][zid] = (name, kind, uj)
    for spk, p, cpus, mine, busy, total in _chunked(
            conn, "SELECT step_pk, package, cpus, step_cpus, busy_ns, total_ns FROM "
            "step_packages WHERE step_pk IN ", pks):
        e, d = _zone_energy(zones[spk], p)
        out[spk][p] = at.Pkg(cpus, mine, busy, total, e, d)
    return out


def _zone_energy(zones: dict, pkg: int) -> tuple:
    """(package µJ, its DRAM µJ or None) of one package among a step's zones."""
    for zid, (name, kind, uj) in zones.items():
        m = _PKG_NAME.fullmatch(name or "")
        if kind == "package" and m and int(m.group(1)) == pkg:
            dram = [u for z, (_, k, u) in zones.items() if k == "dram" and z.startswith(zid + ":")]
            return uj, (sum(dram) if dram else None)
    return None, None


def _cpu_times(conn, outer: dict) -> dict:
    """{outer step_pk: CPU time (ns) of it and every step of its job inside
    it, None when one of them has none}."""
    rows = _steps_of(conn, sorted({r[1] for r in outer.values()}), False)
    out = {pk: 0 for pk in outer}
    for pk, r in rows.items():
        top = r
        for _ in range(8):
            if top[5] is None or top[5] not in rows:
                break
            top = rows[top[5]]
        if top[0] in out and out[top[0]] is not None:
            out[top[0]] = None if r[6] is None else out[top[0]] + r[6]
    return out


def _cpu_by_pkg(conn, outer: dict) -> dict:
    """{outer step_pk: {package: CPU time (ns)} of it and every step of its
    job inside it, from step_packages.step_cpu_ns (the cgroup's per-CPU
    accounting); None when a step of the unit has CPU time without it}."""
    rows = _steps_of(conn, sorted({r[1] for r in outer.values()}), False)
    per = defaultdict(dict)
    for spk, p, ns in _chunked(conn, "SELECT step_pk, package, step_cpu_ns FROM step_packages "
                               "WHERE step_pk IN ", list(rows)):
        per[spk][p] = ns
    out = {pk: {} for pk in outer}
    for pk, r in rows.items():
        top = r
        for _ in range(8):
            if top[5] is None or top[5] not in rows:
                break
            top = rows[top[5]]
        acc = out.get(top[0])
        if acc is None:
            continue
        mine = per.get(pk, {})
        if (r[6] and not mine) or any(v is None for v in mine.values()):
            out[top[0]] = None
            continue
        for p, ns in mine.items():
            acc[p] = acc.get(p, 0) + ns
    return out


def static_w(conn, node: int) -> dict:
    """{package: P0 (W) or None} of a node, fitted over its recent steps."""
    pts = defaultdict(list)
    rows = conn.execute(
        "SELECT s.step_pk, s.end_ns - s.start_ns FROM steps s WHERE s.node_pk = ? AND "
        "s.cpu_time_ns IS NOT NULL ORDER BY s.end_ns DESC LIMIT ?", (node, FIT_STEPS)).fetchall()
    dur = dict(rows)
    for spk, pk in _packages(conn, list(dur)).items():
        for p, v in pk.items():
            if v.energy_uj is not None:
                pts[p].append((dur[spk], v.busy_ns, v.energy_uj))
    return {p: at.fit_static_w(v) for p, v in pts.items()}


def overlapped(conn, step_pks: list) -> set:
    """The steps of step_pks that an outermost step of another job on the
    same node overlaps in time: the store's rule for a shared node, also
    where the records lack the per-package inputs of :func:`estimates`."""
    return {r[0] for r in _chunked(
        conn, "SELECT s.step_pk FROM steps s WHERE EXISTS (SELECT 1 FROM steps o "
              "WHERE o.node_pk = s.node_pk AND o.job_pk <> s.job_pk AND "
              "o.inside_step_pk IS NULL AND o.start_ns < s.end_ns AND "
              "o.end_ns > s.start_ns) AND s.step_pk IN ", list(step_pks))}


def estimates(conn, job_pks: list) -> dict:
    """{step_pk: Share} of the jobs' outermost steps that have the inputs
    (others: absent; their measurement stands)."""
    outer = _steps_of(conn, list(job_pks), True)
    with_inputs = {r[0] for r in _chunked(
        conn, "SELECT DISTINCT step_pk FROM step_packages WHERE step_pk IN ", list(outer))}
    outer = {k: v for k, v in outer.items() if k in with_inputs}
    if not outer:  # older records: nothing to split, and nothing more to read
        return {}
    near = _around(conn, outer)
    pkgs = _packages(conn, list(near))
    cpu = _cpu_times(conn, near)
    by_pkg = _cpu_by_pkg(conn, near)
    out = {}
    by_node = defaultdict(list)
    for pk, r in near.items():
        if pkgs.get(pk):
            by_node[r[2]].append(at.Unit(pk, r[1], r[3], r[4], cpu.get(pk), pkgs[pk],
                                         by_pkg.get(pk)))
    for node, units in by_node.items():
        got = at.attribute(units, static_w(conn, node))
        out.update({k: v for k, v in got.items() if k in outer})
    return out
