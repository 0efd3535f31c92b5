"""The `joulestep` command line: a thin click layer over plain functions.

This module holds the root group and its global options; the context and
the option decorators the commands share are options.py (a command never
imports this module); each command is a module of commands/, imported only
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

import importlib  # noqa: E402
import sys  # noqa: E402

import click  # noqa: E402

from . import __version__  # noqa: E402
from .options import FORMATS, Ctx  # noqa: E402

# --------------------------------------------------------------------------

#: command name -> its module in commands/ (the function has the same name)
COMMANDS = ("ingest", "job", "jobs", "report", "compare", "model", "tune", "plot",
            "export", "exporter", "doctor", "restore", "phase", "policy", "intensity")


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




def main(argv=None):
    """Console-script entry point."""
    return cli.main(args=argv, prog_name="joulestep")


gc.freeze()
if _GC_WAS_ENABLED:
    gc.enable()


if __name__ == "__main__":
    sys.exit(main())
