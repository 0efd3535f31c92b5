"""joulestep jobs: the caller's recent jobs with their energy, sacct-style.

Loaded only when the command runs (cli.LazyGroup): see docs/cli.md,
"Start-up".
"""
from __future__ import annotations

import click

from ..options import Ctx, period, emit, query_options


def _caller() -> str:
    import os
    import pwd
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


@click.command()
@click.option("--user", "users", metavar="USER[,USER...]",
              help="Whose jobs (admins only; default: yours).")
@click.option("--starttime", "since", metavar="TIME",
              help="Jobs seen since TIME (ISO date/time or an age like 7d; "
                   "default 7 days ago).")
@click.option("--endtime", "until", metavar="TIME",
              help="Jobs first seen before TIME (default now).")
@click.option("--state", metavar="STATE[,STATE...]",
              help="Only jobs sacct has in these states (COMPLETED, FAILED, "
                   "TIMEOUT, CANCELLED, ...: sacct --state); needs sacct.")
@click.option("--cluster", help="Cluster name (default: config [site] cluster, "
                                "else any).")
@query_options
def jobs(c: Ctx, users, since, until, state, cluster):
    """Your recent jobs with their energy, like sacct: job ID, user,
    account, partition, when first seen (with its UTC offset), steps,
    energy and cost (kWh and CO2 with --format json or csv).

    The figures are `joulestep job`'s totals for each job; who is not an
    admin gets them in `job`'s user view (docs/security.md).  Latest first,
    at most 1000 jobs.
    """
    from .. import jobs as jl
    from ..userview import is_admin
    s = c.settings()
    if since is None:
        since = f"{jl.DEFAULT_DAYS}d"
    since_ns, until_ns = period(since, until)
    cluster = cluster or s.cluster
    conn = c.connect()
    try:
        admin = is_admin(c.db_path(False), conn)
        try:
            who = jl.who(users.split(",") if users else None, _caller(), admin)
            ids = (jl.sacct_ids(who, since_ns, until_ns, state, cluster)
                   if state else None)
            rows = jl.list_jobs(conn, s, who, since_ns, until_ns, cluster,
                                user_view=not admin, only_ids=ids)
        except jl.JobsError as e:
            raise click.ClickException(str(e)) from None
    finally:
        conn.close()
    _emit(c, rows, s.currency)


def _emit(c: Ctx, rows: list[dict], currency: str):
    from ..output import local_time, money_cell, table, to_csv, to_json
    from ..render_units import fmt
    if c.fmt == "json":
        emit(to_json({"jobs": rows}))
    elif c.fmt == "csv":
        emit(to_csv(["cluster", "job_id", "user", "account", "partition",
                     "first_seen_ns", "first_seen", "steps", "energy_total_j",
                     "energy_cpu_j", "energy_dram_j", "energy_gpu_j", "total_includes",
                     "kwh", "co2_g", "cost"], rows))
    else:
        out = [[str(r["job_id"]), r["user"] or "(none)", r["account"] or "(none)",
                r["partition"] or "(none)",
                local_time(r["first_seen"], c.utc) or "-",      # with its offset
                str(r["steps"] or 0), fmt(r["energy_total_j"], "J"),
                money_cell(r["cost"])] for r in rows]
        emit(table(["JOBID", "USER", "ACCOUNT", "PARTITION", "FIRST_SEEN", "STEPS",
                    "ENERGY", "COST_" + currency.upper()], out,
                   right={0, 5, 6, 7}) + "\n")
