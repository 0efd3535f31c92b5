"""joulestep phase: mark phases of the running step.

Loaded only when the command runs (cli.LazyGroup): see docs/cli.md,
"Start-up".
"""
from __future__ import annotations

import click



@click.group()
def phase():
    """Mark phases of the running step (same protocol as joulestep-phase).

    Outside a joulestep step (no JOULESTEP_SOCKET) they do nothing.  From
    Python use the context manager: `with joulestep.phase("write"): ...`.
    """


@phase.command("begin")
@click.argument("kind")
@click.argument("label", required=False)
def phase_begin(kind, label):
    """Begin a phase of KIND ([a-z0-9_-]{1,32}) with an optional LABEL."""
    from .. import phase as ph
    try:
        ph.begin(kind, label, sync=True)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    except OSError as e:
        raise click.ClickException(f"phase begin: {e}") from None


@phase.command("end")
@click.option("--bytes", "nbytes", type=click.IntRange(0),
              help="Bytes written/read in the phase.")
def phase_end(nbytes):
    """End this rank's innermost open phase."""
    from .. import phase as ph
    try:
        ph.end(nbytes, sync=True)
    except OSError as e:
        raise click.ClickException(f"phase end: {e}") from None
