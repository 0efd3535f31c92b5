"""The ingest run shared by `joulestep ingest`, `export` and every query's
--ingest: the spools of a command's context into its store.  Apart from
commands/ingest.py so that cli.py can use it without importing a command
(which imports cli.py: no import cycle)."""
from __future__ import annotations

import pathlib
import sys

import click

from . import store


def run_ingest(c, spools, quarantine_dir, quiet=False, batch=None,
               gap_hours=None):
    """Ingest the spools (default: the configured one) into the store of
    ``c`` (a cli.Ctx), with a progress bar on a large spool; quiet: one
    line on stderr when records were quarantined."""
    s = c.settings()
    gap_ns = int((s.job_gap_hours if gap_hours is None else gap_hours) * 3600e9)
    spools = [pathlib.Path(p) for p in spools] or [s.spool]
    if quarantine_dir is None and s.quarantine is not None:
        quarantine_dir = s.quarantine
    conn = c.connect(write=True)

    def progress(items):
        if len(items) < 500 or quiet:
            return items
        return click.progressbar(items, label="ingesting", file=sys.stderr,
                                 show_pos=True)

    def bar(items):
        pb = progress(items)
        if pb is items:
            return items

        def gen():
            with pb as it:
                yield from it
        return gen()
    try:
        res = store.ingest_paths(conn, spools, quarantine_dir,
                                 batch=batch or store.BATCH_RECORDS, progress=bar,
                                 gap_ns=gap_ns)
    except conn.Error as e:     # the engine's own error (db.py)
        raise click.ClickException("database error during ingest: "
                                   f"{str(e).strip()}") from None
    finally:
        conn.close()
    if quiet and (res.quarantined or res.errors):
        click.echo(f"joulestep: ingest: {len(res.quarantined)} record(s) "
                   f"quarantined, {len(res.errors)} error(s); run `joulestep "
                   "ingest` for details", err=True)
    return res
