"""The store's aggregates over a period, as `joulestep report` (and `report
--what-if`) read them: the groupings, the window, the sums per group, the
steps that shared a package, the steps without DRAM or with GPUs.

Sums never overflow (a 500-node site passes 2**63 µJ, about 2.56 GWh, in
some nine months, and SQLite's sum() of integers then fails): every sum
of energies or times is taken as two sums, of the value's high and low 32
bits, each far from any limit, and put together in Python integers
(:func:`wide_sum`, :func:`unwide`): exact on both engines, whatever the
site's size."""
from __future__ import annotations

from .. import gpus as gpumod
from .ingest import JOB_TOTAL_SQL

GROUPS = {
    "user": "j.user_name",
    "account": "j.account",
    "partition": "j.partition",
    "qos": "j.qos",        # from sacct at ingest (slurmacct.py); NULL without slurmdbd
    "node": "n.name",
    "policy": "s.policy",
}

#: groupings by an attribute of the job, so that all of a job's steps fall in
#: one group: report reads the jobs' totals (migration 007) for them
JOB_GROUPS = ("user", "account", "partition", "qos")

#: the figures report sums per group, after the jobs count: steps, CPU,
#: DRAM, total, time, policy steps, policy energy, node time (the jobs'
#: totals of migration 007, store.JOB_TOTAL_SQL)
SUMS = ("steps_n", "counted_cpu_uj", "counted_dram_uj", "counted_total_uj",
        "counted_duration_ns", "policy_steps_n", "policy_total_uj",
        "measured_duration_ns")
#: the SUMS that are counts (one plain sum each; the rest are wide)
_COUNTS = frozenset({"steps_n", "policy_steps_n"})
_LOW = (1 << 32) - 1


class QueryError(Exception):
    """A query the user asked for cannot be answered (message says why)."""


def wide_sum(expr: str) -> str:
    """SQL: the sum of an integer expression as two aggregates, of its high
    and its low 32 bits (see the module's doc); :func:`unwide` joins them."""
    return f"sum(({expr}) >> 32), sum(({expr}) & {_LOW})"


def unwide(hi, lo):
    """The exact sum from wide_sum's two aggregates (None: a sum over no value)."""
    return None if hi is None else (int(hi) << 32) + int(lo)


def unwide_floats(his, los):
    """unwide over many rows at once, as float64 (exact to a part in 2**52;
    None: NaN), for figures that go on in numpy."""
    import numpy as np
    return np.asarray(his, dtype=float) * 4294967296.0 + np.asarray(los, dtype=float)


def window_conditions(since_ns, until_ns, cluster):
    """SQL conditions (on steps s joined with jobs j) and their arguments for
    a report window: steps started in [since_ns, until_ns) on cluster."""
    where, args = [], []
    if since_ns is not None:
        where.append("s.start_ns >= ?")
        args.append(since_ns)
    if until_ns is not None:
        where.append("s.start_ns < ?")
        args.append(until_ns)
    if cluster:
        where.append("j.cluster = ?")
        args.append(cluster)
    return where, args


def group_clause(by: str) -> tuple[str, str, list]:
    """(group expression, joins from steps s, their arguments) of a report
    grouping: user, account, partition, qos, node, policy or tag:KEY."""
    joins = "JOIN jobs j ON j.job_pk = s.job_pk"
    args: list = []
    if by.startswith("tag:"):
        key = by[4:]
        if not key:
            raise QueryError("--by tag:KEY needs a tag name, e.g. tag:strategy")
        joins += " LEFT JOIN step_tags t ON t.step_pk = s.step_pk AND t.key = ?"
        return "t.value", joins, [key]
    if by not in GROUPS:
        raise QueryError(f"cannot group by {by!r}: use user, account, partition,"
                       " qos, node, policy or tag:KEY")
    if by == "node":
        joins += " JOIN nodes n ON n.node_pk = s.node_pk"
    return GROUPS[by], joins, args


def _inner(total_sql: str) -> str:
    """EXPR of a JOB_TOTAL_SQL "sum(EXPR)"."""
    assert total_sql.startswith("sum(") and total_sql.endswith(")"), total_sql
    return total_sql[4:-1]


def _sums(with_node: bool, count, value) -> str:
    """SUMS as SQL: count(column) the aggregate of a count, value(column)
    the expression a wide sum adds up.  Every aggregate costs time per step:
    the node-seconds of measured steps only count with_node
    (node_overhead_w, Settings.scoped_j)."""
    cols = SUMS if with_node else SUMS[:-1]
    out = [count(c) if c in _COUNTS else wide_sum(value(c)) for c in cols]
    return ", ".join(out + ["NULL, NULL"] * (len(SUMS) - len(cols)))


def _step_sums(with_node: bool) -> str:
    """SUMS over steps s, as JOB_TOTAL_SQL defines each."""
    return _sums(with_node, JOB_TOTAL_SQL.__getitem__,
                 lambda c: _inner(JOB_TOTAL_SQL[c]))


def _job_sums(with_node: bool) -> str:
    """SUMS from the jobs' totals j (each job's sums over its steps)."""
    return _sums(with_node, "sum(j.{})".format, "j.{}".format)


def report_queries(by: str, since_ns, until_ns, cluster,
                   with_node: bool = False) -> list[tuple[str, list]]:
    """(SQL, arguments) of the aggregates report adds up, each row (key,
    jobs, then the SUMS, wide; group_rows reads them); also run bare by
    bench/bench_cli.py.

    Grouped by a job attribute (JOB_GROUPS): the totals of the jobs whose
    steps all started in [since, until), one row per job; and the steps in
    the window of the jobs that straddle an end of it.  A job is in one of
    the two or in neither.  Otherwise (node, policy, tag:KEY: a job's steps
    may fall in several groups) one scan of the steps in the window."""
    gexpr, joins, args = group_clause(by)
    where, wargs = window_conditions(since_ns, until_ns, cluster)
    steps_sql = (f"SELECT {gexpr} AS g, count(DISTINCT s.job_pk), "
                 f"{_step_sums(with_node)} FROM steps s {joins} ")
    if by not in JOB_GROUPS:
        return [(steps_sql + (f"WHERE {' AND '.join(where)} " if where else "")
                 + "GROUP BY g", args + wargs)]
    inside, iargs = ["j.steps_last_start_ns IS NOT NULL"], []
    straddle, sargs = [], []
    for end, cond in ((since_ns, "j.steps_first_start_ns >= ?"),
                      (until_ns, "j.steps_last_start_ns < ?")):
        if end is not None:
            inside.append(cond)
            iargs.append(end)
            straddle.append("SELECT job_pk FROM jobs WHERE steps_last_start_ns >= ? "
                            "AND steps_first_start_ns < ?")
            sargs += [end, end]
    if since_ns is not None:        # lets the index find the window's jobs
        inside.append("j.steps_last_start_ns >= ?")
        iargs.append(since_ns)
    if cluster:
        inside.append("j.cluster = ?")
        iargs.append(cluster)
    out = [(f"SELECT {gexpr} AS g, count(*), {_job_sums(with_node)} FROM jobs j "
            f"WHERE {' AND '.join(inside)} GROUP BY g", iargs)]
    if straddle:
        out.append((steps_sql + f"WHERE s.job_pk IN ({' UNION ALL '.join(straddle)}) "
                    f"AND {' AND '.join(where)} GROUP BY g", sargs + wargs))
    return out


def _narrow(r: tuple) -> tuple:
    """A report_queries row with its wide sums joined: (key, jobs, SUMS)."""
    out, i = [r[0], r[1]], 2
    for c in SUMS:
        if c in _COUNTS:
            out.append(r[i])
            i += 1
        else:
            out.append(unwide(r[i], r[i + 1]))
            i += 2
    return tuple(out)


def group_rows(conn, by: str, since_ns, until_ns, cluster,
               with_node: bool = False) -> list[tuple]:
    """report_queries' rows, one per key, (key, jobs, SUMS): the parts'
    figures added up; a sum over no value stays None, as in SQL."""
    merged: dict = {}
    for sql, qargs in report_queries(by, since_ns, until_ns, cluster, with_node):
        for r in conn.execute(sql, qargs).fetchall():
            r = _narrow(r)
            have = merged.get(r[0])
            merged[r[0]] = r if have is None else (r[0],) + tuple(
                b if a is None else a if b is None else a + b
                for a, b in zip(have[1:], r[1:]))
    return list(merged.values())


def distinct_jobs(conn, by: str, since_ns, until_ns, cluster) -> int:
    """The jobs with a step in the window (a job in several groups once)."""
    _, joins, args = group_clause(by)
    where, wargs = window_conditions(since_ns, until_ns, cluster)
    jq = (f"SELECT count(DISTINCT s.job_pk) FROM steps s {joins} "
          + (f"WHERE {' AND '.join(where)}" if where else ""))
    return conn.execute(jq, args + wargs).fetchone()[0]


def shared_steps(conn, by: str, since_ns, until_ns, cluster) -> list[tuple]:
    """(group key, step_pk, job_pk, CPU µJ, DRAM µJ, policy_active) of the
    window's outermost steps that have shared-node inputs (step_packages)."""
    gexpr, joins, args = group_clause(by)
    where, wargs = window_conditions(since_ns, until_ns, cluster)
    where = where + ["s.inside_step_pk IS NULL"]
    return conn.execute(
        f"SELECT {gexpr}, s.step_pk, s.job_pk, s.energy_cpu_uj, s.energy_dram_uj, "
        f"s.policy_active FROM (SELECT DISTINCT step_pk FROM step_packages) sp "
        f"JOIN steps s ON s.step_pk = sp.step_pk {joins} WHERE {' AND '.join(where)}",
        args + wargs).fetchall()


def dram_gpu_counts(conn, by: str, since_ns, until_ns, cluster) -> tuple:
    """One scan of the steps in the window that lack DRAM or have GPU
    figures: ({group key: steps whose DRAM is not measured}, {group key:
    (GPU uJ in the counted totals, steps whose total has their GPUs, steps
    with GPUs not measured)}) (gpus.py's rule); only keys with such steps
    ({}, {} on nodes that all measure DRAM and have no GPUs)."""
    gexpr, joins, args = group_clause(by)
    where, wargs = window_conditions(since_ns, until_ns, cluster)
    where = where + [f"(s.dram_not_measured IS NOT NULL OR {gpumod.IN_TOTAL_SQL} "
                     "OR s.gpu_backend IS NOT NULL OR s.gpus_unmeasured IS NOT NULL)"]
    no_dram, gpu = {}, {}
    for g, nd, hi, lo, *rest in conn.execute(
            f"SELECT {gexpr} AS g, "
            "sum(CASE WHEN s.dram_not_measured IS NOT NULL THEN 1 ELSE 0 END), "
            f"{wide_sum(gpumod.COUNTED_SQL)}, "
            f"sum(CASE WHEN {gpumod.IN_TOTAL_SQL} THEN 1 ELSE 0 END), "
            f"sum(CASE WHEN {gpumod.UNMEASURED_SQL} THEN 1 ELSE 0 END) "
            f"FROM steps s {joins} WHERE {' AND '.join(where)} GROUP BY g",
            args + wargs).fetchall():
        if nd:
            no_dram[g] = nd
        if rest[0] or rest[1]:
            gpu[g] = (unwide(hi, lo), *rest)
    return no_dram, gpu


#: the columns of fleet_rows after the group key
FLEET_COLS = (
    "s.step_pk, s.job_pk, s.node_model, s.policy, s.freq_control, "
    "coalesce(s.base_freq_khz, s.nominal_freq_khz), s.freq_min_ratio, p.seq, "
    "p.kind, p.parent_seq, p.duration_ns, p.energy_cpu_uj, p.energy_dram_uj")


def fleet_rows(conn, by: str, since_ns, until_ns, cluster):
    """(group key, FLEET_COLS) of every phase of the window's steps whose
    clock no policy changed, in step and seq order (`report --what-if`)."""
    gexpr, joins, args = group_clause(by)
    where, wargs = window_conditions(since_ns, until_ns, cluster)
    where.append("s.policy_active = 0")
    return conn.execute(
        f"SELECT {gexpr}, {FLEET_COLS} FROM steps s {joins} "
        f"JOIN phases p ON p.step_pk = s.step_pk WHERE {' AND '.join(where)} "
        "ORDER BY s.step_pk, p.seq", args + wargs)
