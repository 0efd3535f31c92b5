"""The context and the click options the commands share: the global
options merged with a command's own (Ctx), the option decorators, the
ingest run behind `ingest`, `export` and every query's --ingest, and the
output helpers.  The root group (cli.py) and every command (commands/)
import this module; it imports neither, so no command imports the root
group."""
from __future__ import annotations

import functools
import sys

import click

from . import config, store

FORMATS = ("table", "json", "csv")


class Ctx:
    """Global options, merged with per-command ones."""

    def __init__(self, db=None, cfg=None, fmt=None, utc=False):
        self.db, self.cfg, self.fmt, self.utc = db, cfg, fmt, utc
        self._settings = None

    def settings(self) -> config.Settings:
        if self._settings is None:
            try:
                self._settings = config.load(self.cfg)
            except config.ConfigError as e:
                raise click.ClickException(str(e)) from None
        return self._settings

    def db_path(self, write: bool) -> str:
        return config.resolve_db(self.db, self.settings(), write)

    def connect(self, write: bool = False):
        path = self.db_path(write)
        try:
            return store.connect(path, write=write, create=write,
                                 group=self.settings().db_group)
        except store.StoreError as e:
            raise click.ClickException(str(e)) from None


def merge(ctx: click.Context, kw: dict) -> Ctx:
    base = ctx.find_object(Ctx) or Ctx()
    c = Ctx(kw.pop("db", None) or base.db, kw.pop("config_path", None) or base.cfg,
            kw.pop("fmt", None) or base.fmt or "table",
            kw.pop("utc", False) or base.utc)
    return c


def db_options(f):
    """--db and --config on a command (they may also precede the command)."""
    f = click.option("--config", "config_path", type=click.Path(dir_okay=False),
                     help="Site config file (INI; default $JOULESTEP_CONFIG or "
                          "/etc/joulestep/joulestep.conf).")(f)
    f = click.option("--db", type=click.Path(dir_okay=False),
                     help="SQLite database file or postgresql:// URL (default "
                          "$JOULESTEP_DB, then [paths] db, then "
                          "/var/lib/joulestep/joulestep.db, then a per-user file).")(f)
    return f


def format_option(f):
    return click.option("--format", "fmt", type=click.Choice(FORMATS),
                        help="Output format (default table; JSON and CSV are "
                             "stable, see docs/cli.md).")(f)


def query_options(f):
    """Options shared by every command that reads the database:
    --db, --config, --format, --ingest.  Passes a Ctx as first argument."""
    @functools.wraps(f)
    def wrapper(*args, ingest_first=False, **kw):
        ctx = click.get_current_context()
        c = merge(ctx, kw)
        if ingest_first:
            c.db = str(c.db_path(True))   # query the database just loaded
            run_ingest(c, [], None, quiet=True)
        return f(c, *args, **kw)
    wrapper = click.option("--ingest", "ingest_first", is_flag=True,
                           help="Ingest the default spool before answering.")(wrapper)
    wrapper = click.option("--utc", is_flag=True,
                           help="Times in UTC (default: the local time zone; "
                                "JSON and CSV are always UTC).")(wrapper)
    return db_options(format_option(wrapper))


def emit(text: str):
    click.echo(text, nl=False)


def run_ingest(c, spools, quarantine_dir, quiet=False, batch=None,
               gap_hours=None):
    """Ingest the spools (default: the configured one) into the store of
    ``c`` (a Ctx), with a progress bar on a large spool; quiet: one
    line on stderr when records were quarantined."""
    import pathlib
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


def tuned_option(f):
    return click.option(
        "--tuned", "tuned_path", type=click.Path(dir_okay=False),
        help="The tuned policy's file (written by `model dvfs --save`) for "
             "the what-if estimate of `tuned`; without it, tuned is not "
             "estimated.")(f)


def tuned_policy(path):
    from . import whatif
    if path is None:
        return None
    try:
        return whatif.load_tuned(path)
    except whatif.WhatIfError as e:
        raise click.ClickException(str(e)) from None



def period(since, until):
    """[--since, --until) in ns; a reversed or empty period is refused."""
    from . import report as rep
    try:
        s, u = rep.parse_time(since), rep.parse_time(until)
    except rep.QueryError as e:
        raise click.BadParameter(str(e)) from None
    if s is not None and u is not None and s >= u:
        raise click.BadParameter(f"--since {since} is not before --until {until} "
                                 "(the period would be empty; --since is the start, "
                                 "--until the end, after it)")
    return s, u


def where_filter(items):
    from . import frames
    try:
        return frames.parse_where(items)
    except frames.FilterError as e:
        raise click.BadParameter(str(e)) from None


def emit_frames(c: Ctx, parts: list, title_json: dict | None = None):
    """parts: [(name, DataFrame|None, preferred columns, heading)]; the first
    frame is the CSV output; JSON gets all of them by name."""
    from .frames import frame_table, records
    from .output import to_csv, to_json
    parts = [p for p in parts if p[1] is not None]
    if c.fmt == "json":
        doc = dict(title_json or {})
        for name, df, _, _ in parts:
            doc[name] = records(df)
        emit(to_json(doc))
    elif c.fmt == "csv":
        df = parts[0][1]
        emit(to_csv([str(x) for x in df.columns], records(df)))
    else:
        out = []
        for name, df, prefer, heading in parts:
            if heading:
                out.append(heading)
            out.append(frame_table(df, prefer))
            out.append("")
        emit("\n".join(out))


def period_options(f):
    f = click.option("--until", help="Only steps that started before this time.")(f)
    f = click.option("--since", help="Only steps that started at/after this time "
                                     "(ISO date/time or an age like 30d).")(f)
    return f


def where_option(f):
    return click.option("--where", "where", multiple=True, metavar="KEY=VALUE",
                        help="Keep rows whose column or tag KEY equals VALUE "
                             "(repeatable), e.g. --where tier=dram.")(f)
