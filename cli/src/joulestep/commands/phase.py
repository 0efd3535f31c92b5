"""joulestep phase: mark phases of the running step.

Loaded only when the command runs (cli.LazyGroup): see docs/cli.md,
"Start-up".
"""
from __future__ import annotations

import click


@click.group()
def phase():
    """Mark phases of the running step (same protocol as joulestep-phase).

    Outside a joulestep step (no JOULESTEP_SOCKET) they do nothing.  Like
    every marker they never fail the job: a marker that is not recorded (a
    stale socket, a refusal, a bad kind) says why on stderr and exits 0.
    From Python use the context manager: `with joulestep.phase("write"): ...`.
    """


def _done(rc: int, what: str) -> None:
    if rc < 0:
        import errno
        import os
        why = ("allowed [a-z0-9_-]{1,32}, label [A-Za-z0-9_.:+/-]{1,64}"
               if what == "begin" and rc == -errno.EINVAL else os.strerror(-rc))
        click.echo(f"joulestep phase {what}: not recorded: {why}", err=True)


@phase.command("begin")
@click.argument("kind")
@click.argument("label", required=False)
def phase_begin(kind, label):
    """Begin a phase of KIND ([a-z0-9_-]{1,32}) with an optional LABEL."""
    from .. import phase as ph
    _done(ph.begin(kind, label, sync=True), "begin")


@phase.command("end")
@click.option("--bytes", "nbytes", type=click.IntRange(0),
              help="Bytes written/read in the phase.")
def phase_end(nbytes):
    """End this rank's innermost open phase."""
    from .. import phase as ph
    _done(ph.end(nbytes, sync=True), "end")
