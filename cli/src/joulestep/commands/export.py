"""joulestep export: tables to CSV, JSON or Parquet.

Loaded only when the command runs (cli.LazyGroup): see docs/cli.md,
"Start-up".
"""
from __future__ import annotations

import click

from ..options import merge, period, db_options, period_options
from ..options import run_ingest


@click.command()
@click.argument("tables", nargs=-1)
@click.option("--format", "efmt", type=click.Choice(["csv", "json", "parquet"]),
              default="csv", show_default=True, help="File format.")
@click.option("-o", "--output", type=click.Path(),
              help="File (one table) or directory (one file per table); "
                   "default stdout for csv/json.")
@period_options
@db_options
@click.option("--ingest", "ingest_first", is_flag=True,
              help="Ingest the default spool before exporting.")
@click.pass_context
def export(ctx, tables, efmt, output, since, until, ingest_first, **kw):
    """Write tables to CSV, JSON or Parquet.

    TABLES: nodes, jobs, steps, step_tags, step_zones, phases, phase_ranks,
    power_models (schema columns), or the joined views steps_full and
    phases_full (job, node and tag:KEY columns); default steps_full.
    """
    from .. import export as ex
    kw.pop("fmt", None)
    c = merge(ctx, kw)
    if ingest_first:
        c.db = str(c.db_path(True))
        run_ingest(c, [], None, quiet=True)
    since_ns, until_ns = period(since, until)
    conn = c.connect()
    try:
        files = ex.export(conn, tables, efmt, output, since_ns, until_ns)
    except ex.ExportError as e:
        raise click.ClickException(str(e)) from None
    except OSError as e:        # -o in a folder that does not exist, or not writable
        raise click.ClickException(f"cannot write {output}: {e}") from None
    finally:
        conn.close()
    if output is not None:
        for f in files:
            click.echo(f"wrote {f}", err=True)
