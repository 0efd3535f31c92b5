"""joulestep intensity: the grid's carbon intensity and price over time.

Loaded only when the command runs (cli.LazyGroup): see docs/cli.md,
"Start-up".
"""
from __future__ import annotations

import click

from ..options import db_options, emit, format_option, merge


@click.group()
def intensity():
    """The grid's CO2 intensity and electricity price over time, per zone.

    `job`, `report` and the exporter compute CO2 and cost from these values
    when asked (docs/admin-guide.md, "Carbon intensity and prices over
    time"); where none covers a time, the site's static factor.
    """


@intensity.command("import")
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
@click.option("--zone", required=True, help="The grid zone the values are for "
                                             "(as named in [site] zone / [zones]).")
@click.option("--what", type=click.Choice(["co2", "price"]), required=True,
              help="co2: grams CO2-eq per kWh; price: the site's currency per kWh.")
@click.option("--format", "layout", type=click.Choice(["csv", "emaps", "neso"]),
              default="csv", show_default=True,
              help="csv: time_utc,value; emaps: the Electricity Maps data portal's "
                   "hourly CSV; neso: the UK NESO historic carbon intensity CSV.")
@click.option("--replace", is_flag=True,
              help="Replace stored values the file disagrees with (default: "
                   "keep them and report a conflict).")
@click.option("--output", "fmt", type=click.Choice(["table", "json"]),
              help="Report format (default table).")
@db_options
@click.pass_context
def import_(ctx, file, zone, what, layout, replace, fmt, **kw):
    """Import FILE's values for --zone.  Importing the same file twice
    changes nothing.  Bad rows are refused with their line number and the
    reason; overlaps, gaps, negative values and times out of order are
    reported; the rest of the file is kept.  Exit status 1 when a row was
    refused or a stored value conflicts (use --replace to take the file's)."""
    from .. import intensity_files as inf
    from ..output import to_json
    from ..store import intensity as sto
    zone = zone.strip()
    if not zone:
        raise click.BadParameter("an empty zone name", param_hint="--zone")
    c = merge(ctx, kw)
    try:
        with open(file, encoding="utf-8", newline="") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as e:
        raise click.ClickException(f"cannot read {file}: {e}") from None
    try:
        ivs, problems = inf.read(text, layout, what, file)
    except inf.FileError as e:
        raise click.ClickException(f"{file}: {e}") from None
    conn = c.connect(write=True)
    try:
        res = sto.import_intervals(conn, zone, inf.KINDS[what], ivs,
                                   __import__("os").path.basename(file), replace)
    finally:
        conn.close()
    refused = [p for p in problems if not p.kept]
    if (fmt or c.fmt) == "json":
        emit(to_json({"file": str(file), "zone": zone, "kind": inf.KINDS[what],
                      "format": layout, "rows_read": len(ivs), **res.as_dict(),
                      "problems": [p.as_dict() for p in problems]}))
    else:
        click.echo(f"{file}: {len(ivs)} values for {zone} {inf.KINDS[what]}: "
                   f"{res.new} new, {res.unchanged} unchanged, {res.replaced} "
                   f"replaced, {len(res.conflicts)} conflicting, {len(refused)} "
                   "rows refused")
        for p in problems:
            click.echo(f"{file}:{p.line}: {p.what}: {p.message}", err=True)
        for line, _, old, new in res.conflicts:
            click.echo(f"{file}:{line}: conflict: stored {_iv(old)} differs from "
                       f"the file's {_iv(new)}; kept the stored value (--replace "
                       "takes the file's)", err=True)
    if refused or res.conflicts:
        ctx.exit(1)


def _iv(t) -> str:
    from ..intensity_files import iso_z
    return f"{iso_z(t[0])} .. {iso_z(t[1])} = {t[2]:g}"


@intensity.command("list")
@db_options
@format_option
@click.pass_context
def list_(ctx, **kw):
    """The imported values per zone and kind: rows, first and last time."""
    from ..intensity_files import iso_z
    from ..output import to_csv, to_json
    from ..store import intensity as sto
    c = merge(ctx, kw)
    conn = c.connect()
    try:
        rows = [{"zone": z, "kind": k, "rows": n, "first": iso_z(a), "last": iso_z(b),
                 "sources": s} for z, k, n, a, b, s in sto.summary(conn)]
    finally:
        conn.close()
    cols = ["zone", "kind", "rows", "first", "last", "sources"]
    if c.fmt == "json":
        emit(to_json({"series": rows}))
    elif c.fmt == "csv":
        emit(to_csv(cols, rows))
    else:
        from ..output import table
        emit(table([x.upper() for x in cols], [[str(r[x]) for x in cols] for r in rows])
             + "\n")
