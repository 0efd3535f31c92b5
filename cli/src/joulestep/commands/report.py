"""joulestep report: the admin view of a period, and its what-if.

Loaded only when the command runs (cli.LazyGroup): see docs/cli.md,
"Start-up".
"""
from __future__ import annotations

import click

from ..options import Ctx, period, tuned_policy, emit, query_options, tuned_option


@click.command()
@click.option("--since", help="Start: ISO date/time, or an age like 30d "
                              "(default: everything).")
@click.option("--until", help="End (exclusive): ISO date/time, 'now' or an age.")
@click.option("--by", default="user", show_default=True,
              help="Group by user, account, partition, qos, node, policy, tag:KEY, "
                   "or hour (of day, local time unless --utc: when the energy "
                   "was used, and its CO2 and cost).")
@click.option("--top", type=click.IntRange(1), default=10, show_default=True,
              help="Groups listed in the table; the rest are summed.")
@click.option("--cluster", help="Only this cluster (default: config, else all).")
@click.option("--what-if", "what_if", type=click.Choice(["io-dvfs", "ckpt-dvfs",
                                                         "tuned"]),
              help="Instead: what this policy would have saved or cost on "
                   "the steps that ran under monitor with marked phases (an "
                   "estimate from the fitted power models), in MWh, CO2 and "
                   "cost.")
@tuned_option
@query_options
def report(c: Ctx, since, until, by, top, cluster, what_if, tuned_path):
    """Admin view: energy totals, shares, top consumers, policy adoption.

    A step counts in the period when it started in [--since, --until).
    Policy adoption is the share of steps (and of energy) that ran under a
    frequency policy other than none.  A step inside another on the same
    node (srun inside batch) is counted once.  kWh, CO2 and cost cover CPU
    + DRAM (RAPL), or a node estimate (site node_overhead_w or node_factor).
    With --what-if POLICY: the estimated saving of that policy per group
    over the period, counting only jobs that marked phases (docs/cli.md).
    """
    from .. import report as rep
    s = c.settings()
    since_ns, until_ns = period(since, until)
    if what_if:
        return _what_if_report(c, what_if, tuned_policy(tuned_path), by, top,
                               since_ns, until_ns, cluster or s.cluster)
    if by == "hour":
        return _hour_report(c, since_ns, until_ns, cluster or s.cluster)
    conn = c.connect()
    try:
        r = rep.report(conn, s, by, since_ns, until_ns, cluster or s.cluster, top)
    except rep.QueryError as e:
        raise click.ClickException(str(e)) from None
    finally:
        conn.close()
    from ..render import report_text
    _emit_groups(c, r, rep.REPORT_CSV_COLUMNS, lambda r: report_text(r, utc=c.utc))


def _hour_report(c: Ctx, since_ns, until_ns, cluster):
    from .. import gridfigures
    from ..store import read_report
    _, joins, jargs = read_report.group_clause("user")
    where, wargs = read_report.window_conditions(since_ns, until_ns, cluster)
    conn = c.connect()
    try:
        r = gridfigures.hour_report(conn, c.settings(), (joins, jargs, where, wargs),
                                    since_ns, until_ns, cluster, utc=c.utc)
    finally:
        conn.close()
    from ..render import hour_report_text
    _emit_groups(c, r, gridfigures.HOUR_CSV_COLUMNS, hour_report_text)


def _what_if_report(c: Ctx, policy, tuned, by, top, since_ns, until_ns,
                    cluster):
    from .. import report as rep
    from .. import whatif
    conn = c.connect()
    try:
        r = whatif.fleet(conn, c.settings(), policy, by, since_ns, until_ns,
                         cluster, tuned)
    except (rep.QueryError, whatif.WhatIfError) as e:
        raise click.ClickException(str(e)) from None
    finally:
        conn.close()
    from ..render import whatif_report_text
    _emit_groups(c, r, whatif.CSV_COLUMNS, lambda r: whatif_report_text(r, top, utc=c.utc))


def _emit_groups(c: Ctx, r: dict, csv_columns, text):
    """A grouped report: JSON as is, CSV one row per group with the report's scope,
    or text(r)."""
    from ..output import to_csv, to_json
    if c.fmt == "json":
        emit(to_json(r))
    elif c.fmt == "csv":
        emit(to_csv(csv_columns, [{**g, "scope": r["scope"]} for g in r["groups"]]))
    else:
        emit(text(r))
