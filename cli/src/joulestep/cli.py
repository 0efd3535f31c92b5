"""The `joulestep` command line: a thin click layer over plain functions.

This module holds the group, the global options and the option decorators
the commands share; each command is a module of commands/, imported only
when it runs (LazyGroup), so `joulestep job` defines one command, not all
of them.  Commands delegate to store/ (schema, ingest), report.py (job,
report), export.py, doctor.py, tune.py, and the models helper's models.py,
analysis.py and plot.py.  Heavy modules (pandas, scipy, matplotlib) are
imported inside the commands that need them.  User errors are
click.ClickException: one line on stderr, exit status 1.
"""
from __future__ import annotations

import gc

# Start-up (docs/cli.md, "Start-up"): importing click and defining the
# commands creates tens of thousands of objects that live as long as the
# process, and almost no garbage; the cyclic collector would run some 30
# times over them meanwhile, and once more at exit.  It is paused while
# this module (and, in LazyGroup, a command's module) loads; then those
# objects are frozen (gc.freeze: never scanned again, also not at exit)
# and it is resumed.
_GC_WAS_ENABLED = gc.isenabled()
gc.disable()

import functools  # noqa: E402
import importlib  # noqa: E402
import sys  # noqa: E402

import click  # noqa: E402

from . import __version__, config, store  # noqa: E402

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


def _merge(ctx: click.Context, kw: dict) -> Ctx:
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
        c = _merge(ctx, kw)
        if ingest_first:
            c.db = str(c.db_path(True))   # query the database just loaded
            from .spoolrun import run_ingest
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


# --------------------------------------------------------------------------

#: command name -> its module in commands/ (the function has the same name)
COMMANDS = ("ingest", "job", "jobs", "report", "compare", "model", "tune", "plot",
            "export", "exporter", "doctor", "restore", "phase")


class LazyGroup(click.Group):
    """A group whose commands are imported on first use (click's documented
    pattern for lazily loaded subcommands): defining a command's options
    costs start-up time, and a run needs one command.  `--help` and the
    shell completion list them all, and then import them all."""

    def list_commands(self, ctx):
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx, name):
        if name in COMMANDS and name not in self.commands:
            was = gc.isenabled()
            gc.disable()
            try:
                mod = importlib.import_module(f"{__package__}.commands.{name}")
                self.add_command(getattr(mod, name), name)
            finally:
                gc.freeze()
                if was:
                    gc.enable()
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"],
                               "max_content_width": 100})
@click.version_option(__version__, prog_name="joulestep")
@click.option("--db", type=click.Path(dir_okay=False),
              help="SQLite database file or postgresql:// URL (default "
                   "$JOULESTEP_DB, then [paths] db, then "
                   "/var/lib/joulestep/joulestep.db, then a per-user file).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Site config file (INI).")
@click.option("--format", "fmt", type=click.Choice(FORMATS),
              help="Output format for every command (default table).")
@click.option("--utc", is_flag=True,
              help="Times in UTC (default: the local time zone; JSON and CSV "
                   "are always UTC).")
@click.pass_context
def cli(ctx, db, config_path, fmt, utc):
    """Energy accounting and frequency control for Slurm job steps.

    Load the plugin's spool records with `ingest`, then ask `job` (what did my
    job cost?), `report` (who uses the energy?), `compare` (which strategy is
    cheaper?) and `model` (what should the policy be?).  See docs/cli.md.
    """
    ctx.obj = Ctx(db, config_path, fmt, utc)




def tuned_option(f):
    return click.option(
        "--tuned", "tuned_path", type=click.Path(dir_okay=False),
        help="The tuned policy's file (written by `model dvfs --save`) for "
             "the what-if estimate of `tuned`; without it, tuned is not "
             "estimated.")(f)


def _tuned(path):
    from . import whatif
    if path is None:
        return None
    try:
        return whatif.load_tuned(path)
    except whatif.WhatIfError as e:
        raise click.ClickException(str(e)) from None



def _period(since, until):
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


def _where(items):
    from . import frames
    try:
        return frames.parse_where(items)
    except frames.FilterError as e:
        raise click.BadParameter(str(e)) from None


def _emit_frames(c: Ctx, parts: list, title_json: dict | None = None):
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


def main(argv=None):
    """Console-script entry point."""
    return cli.main(args=argv, prog_name="joulestep")


gc.freeze()
if _GC_WAS_ENABLED:
    gc.enable()


if __name__ == "__main__":
    sys.exit(main())
