"""joulestep job: the after-job summary.

Loaded only when the command runs (cli.LazyGroup): see docs/cli.md,
"Start-up".
"""
from __future__ import annotations

import click

from ..options import Ctx, tuned_policy, emit, query_options, tuned_option


@click.command()
@click.argument("jobid", metavar="JOBID")
@click.option("--cluster", help="Cluster name (default: config [site] cluster, "
                                "else any).")
@click.option("--first-seen", "first_seen", metavar="NS|TIME",
              help="When the job was first seen, to pick one of several jobs "
                   "with the same ID (recycled job ID): in ns since the epoch "
                   "(first_seen_ns), or the time `job` shows (first_seen, ISO, "
                   "to the second); default the latest.")
@click.option("--submit-time", "submit_ns", type=int, hidden=True,
              help="Deprecated alias of --first-seen.")
@click.option("--user-view", "user_view", is_flag=True,
              help="Show what a user who is not an admin sees: energies "
                   "rounded to the counter's resolution, none for phases "
                   "shorter than min_phase_ms (the default for anyone who "
                   "cannot write the database; docs/security.md).")
@click.option("--user", "owner", metavar="USER",
              help="Show the job only if it is USER's; an error otherwise "
                   "(the mail wrapper, etc/mail/joulestep-mail, passes the "
                   "mail's user).")
@tuned_option
@query_options
def job(c: Ctx, jobid, cluster, first_seen, submit_ns, tuned_path, user_view,
        owner):
    """After-job summary: energy, power, throughput, cost per step and phase.

    JOBID in Slurm's forms: 12345, 12345_7 (array task), 12345+1 (het job
    component), 12345.0 or 12345.batch (a step: its job is shown; a step
    the job does not have is an error).  An array
    task or het component is looked up with sacct (its own job ID is the
    one the records carry).

    Per step and phase: CPU, DRAM and total energy, duration, average power,
    bytes, GiB/s, J/GiB, the frequency used, kWh, CO2 and cost, and the
    estimated saving against the step's original clock where a policy
    lowered it (from a fitted power model when one exists, else "not
    estimated").  For steps run under monitor with marked phases: what
    io-dvfs, ckpt-dvfs and tuned would have saved or cost per phase kind,
    an estimate from the same models.  Flags a node shared with other jobs.
    A step inside another on the same node (srun inside batch) is shown
    with its own energy but added to the job's total once (docs/cli.md,
    steps inside other steps); so is a phase inside another phase.  kWh,
    CO2 and cost cover CPU + DRAM (RAPL), or the whole node when the site
    sets node_overhead_w or node_factor, plus the GPUs' measured energy
    where a total includes it: every figure on a line is of that line's
    total, and the output says what it includes.  Who cannot
    write the database (not an admin) sees energies rounded to the
    counter's resolution and none for steps and phases shorter than
    min_phase_ms (docs/security.md, "Threat model: RAPL side channels").
    """
    from .. import jobid as jid
    from .. import jobsummary
    from ..report import QueryError
    from ..userview import is_admin
    from ..output import to_csv, to_json
    s = c.settings()
    try:
        ref = jid.parse(jobid)
        jobid = jid.resolve(ref, cluster or s.cluster)
    except jid.JobIdError as e:
        raise click.ClickException(str(e)) from None
    first_seen = _first_seen(first_seen, submit_ns)
    tuned = tuned_policy(tuned_path)
    conn = c.connect()
    try:
        pick = _pick_run(conn, jobid, cluster or s.cluster, first_seen)
        user_view = user_view or not is_admin(c.db_path(False), conn)
        summary = jobsummary.summary(conn, jobid, s, cluster or s.cluster, pick,
                                     tuned, user_view=user_view, step=ref.step)
    except QueryError as e:
        raise click.ClickException(str(e)) from None
    finally:
        conn.close()
    if owner is not None and summary["job"]["user"] != owner:
        raise click.ClickException(f"job {summary['job']['job_id']} is not "
                                   f"{owner}'s")
    if c.fmt == "json":
        emit(to_json(summary))
    elif c.fmt == "csv":
        emit(to_csv(jobsummary.CSV_COLUMNS, jobsummary.csv_rows(summary)))
    else:
        from ..render import job_text
        emit(job_text(summary, utc=c.utc))


def _first_seen(first_seen, submit_ns):
    """--first-seen, or its deprecated alias --submit-time (jobs ingested
    from records with a submit time were first seen at it)."""
    if submit_ns is None:
        return first_seen
    if first_seen is not None and first_seen != str(submit_ns):
        raise click.ClickException("--submit-time is an alias of --first-seen; "
                                   "give only one")
    click.echo("joulestep: --submit-time is deprecated; use --first-seen",
               err=True)
    return str(submit_ns)


def _pick_run(conn, job_id: int, cluster, first_seen: str | None) -> int | None:
    """--first-seen as first_seen_ns: digits are ns; anything else a time
    (report.parse_time), matched to the run of job_id first seen in that
    second (`job` shows first_seen to the second)."""
    from .. import report as rep
    from ..store import read_jobs
    if first_seen is None:
        return None
    if first_seen.isascii() and first_seen.isdigit():
        return int(first_seen)
    try:
        t = rep.parse_time(first_seen)
    except rep.QueryError as e:
        raise click.BadParameter(str(e), param_hint="--first-seen") from None
    runs = read_jobs.first_seen_runs(conn, job_id, cluster)
    hits = [ns for ns in runs if t <= ns < t + 10**9]
    if len(hits) == 1:
        return hits[0]
    known = ", ".join(f"{rep.iso(ns)} ({ns} ns)" for ns in runs) or "none"
    if not hits:
        raise click.ClickException(f"job {job_id} has no run first seen at "
                                   f"{first_seen}; known: {known}")
    raise click.ClickException(f"job {job_id} has several runs first seen in "
                               f"that second: give --first-seen in ns; known: {known}")
