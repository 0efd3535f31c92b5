"""joulestep restore: CPU frequencies back from the plugin's journal.

Loaded only when the command runs (cli.LazyGroup): see docs/cli.md,
"Start-up".
"""
from __future__ import annotations

import os
import pathlib
import sys

import click



def _find_tool(name: str) -> str | None:
    import shutil
    here = pathlib.Path(__file__).resolve()
    for d in [here.parents[4] / "build" / "bin"] if len(here.parents) > 4 else []:
        if (d / name).is_file() and os.access(d / name, os.X_OK):
            return str(d / name)
    return shutil.which(name)


@click.command()
@click.option("--state", default="/var/lib/joulestep", show_default=True,
              help="The plugin's state (journal) directory.")
@click.option("--sysfs", default="/sys", show_default=True, help="sysfs root.")
@click.option("--force", is_flag=True,
              help="Restore CPUs even if their owners still run (drained node).")
@click.option("--list", "list_only", is_flag=True, help="Only list saved CPUs.")
def restore(state, sysfs, force, list_only):
    """Restore CPU frequencies from the plugin's journal (admins, after a crash).

    Runs joulestep-restore (build/bin or PATH).  Without --force only CPUs
    whose owners are all gone are restored.
    """
    import subprocess
    tool = _find_tool("joulestep-restore")
    if tool is None:
        raise click.ClickException("joulestep-restore not found in build/bin or on "
                                   "PATH (make, or make install)")
    args = [tool, "--state", state, "--sysfs", sysfs]
    if force:
        args.append("--force")
    if list_only:
        args.append("--list")
    p = subprocess.run(args)
    sys.exit(p.returncode)
