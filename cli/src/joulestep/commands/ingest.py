"""joulestep ingest: load spool records into the store.

Loaded only when the command runs (cli.LazyGroup): see docs/cli.md,
"Start-up".
"""
from __future__ import annotations


import click

from .. import config, store
from ..options import Ctx, merge, db_options, emit, format_option
from ..options import run_ingest


@click.command()
@click.argument("spool", nargs=-1, type=click.Path())
@click.option("--quarantine", "quarantine_dir", type=click.Path(file_okay=False),
              help="Where bad records go (default <spool>/.quarantine).")
@click.option("--batch", type=click.IntRange(1, 1_000_000), default=store.BATCH_RECORDS,
              show_default=True, help="Records per transaction.")
@click.option("--job-gap-hours", "gap_hours",
              type=click.FloatRange(0, config.MAX_JOB_GAP_HOURS),
              help="Records of one job ID less than this far apart are one job "
                   "(default: config [site] job_gap_hours, else 24).")
@click.option("--sacct", "sacct_mode", type=click.Choice(("auto", "on", "off")),
              default="auto", show_default=True,
              help="Take submit time, account, partition and QOS from Slurm's "
                   "accounting (sacct); auto: when slurm.conf uses slurmdbd.")
@click.option("--sacct-days", type=click.FloatRange(0, 3650), default=2.0,
              show_default=True, help="Look up jobs last seen this many days ago or later.")
@click.option("--admin-comment", is_flag=True,
              help="Write each ended job's energy summary into its Slurm "
                   "AdminComment (sacctmgr; a Slurm admin only).")
@db_options
@format_option
@click.pass_context
def ingest(ctx, spool, quarantine_dir, batch, gap_hours, sacct_mode, sacct_days,
           admin_comment, **kw):
    """Load spool records (files or directories) into the database.

    With no SPOOL, reads the configured spool (default /var/spool/joulestep).
    Only complete *.json records are read (the plugin renames them into place
    atomically), so it is safe while the plugin writes.  Ingesting again
    changes nothing.  A malformed or truncated record is named, moved to the
    quarantine directory, and the rest still land.  Of two copies of one step
    (cluster, job, step, node) the first stored wins: an identical later copy
    is "already present", one that differs is "conflicting" and quarantined
    with both files named.  Exit status 1 when any
    record was quarantined or unreadable.  Records of one job ID whose
    windows (first seen .. step end) overlap or are less than the job gap
    apart are one job; farther apart, the ID was recycled (docs/cli.md).
    """
    c = merge(ctx, kw)
    res = run_ingest(c, spool, quarantine_dir, batch=batch, gap_hours=gap_hours)
    acct = _slurm_acct(c, sacct_mode, sacct_days, admin_comment)
    from ..output import to_csv, to_json
    if c.fmt == "json":
        emit(to_json({**res.as_dict(), "slurm_accounting": acct.as_dict()}))
    elif c.fmt == "csv":
        rows = [{"file": q["file"], "status": "quarantined", "detail": q["reason"],
                 "moved_to": q["moved_to"]} for q in res.as_dict()["quarantined"]]
        rows += [{"file": e["file"], "status": "error", "detail": e["reason"]}
                 for e in res.as_dict()["errors"]]
        emit(to_csv(["file", "status", "detail", "moved_to"], rows))
    else:
        click.echo(f"{res.files_seen} files: {res.new_steps} new steps, "
                   f"{res.duplicate_steps} already present, "
                   f"{res.conflicts} conflicting, "
                   f"{res.files_skipped} unchanged, "
                   f"{len(res.quarantined)} quarantined, {len(res.errors)} errors")
        for src, dst, reason in res.quarantined:
            click.echo(f"quarantined {src} -> {dst}: {reason}", err=True)
        for p, reason in res.errors:
            click.echo(f"error {p}: {reason}", err=True)
    if res.quarantined or res.errors:
        ctx.exit(1)


def _slurm_acct(c: Ctx, mode: str, days: float, admin_comment: bool):
    """ingest's sacct pass (slurmacct.py); says once what it could not fill."""
    from .. import slurmacct
    if admin_comment and mode == "off":
        raise click.UsageError("--admin-comment needs sacct (not --sacct off)")
    if slurmacct.resolve_mode(mode, admin_comment) == "off":
        return slurmacct.AcctResult()
    conn = c.connect(write=True)
    try:
        acct = slurmacct.sync(conn, mode, admin_comment, days)
    except store.sqlite3.OperationalError as e:
        raise click.ClickException(f"database error during the sacct pass: {e}") from None
    finally:
        conn.close()
    if acct.note():
        click.echo(acct.note(), err=True)
    return acct
