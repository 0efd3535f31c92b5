"""joulestep: energy accounting and frequency control for Slurm clusters.

``joulestep.phase`` is both the phase-marker module (``joulestep.phase.begin``,
``.end``, ``.ping``) and, called, its context manager::

    import joulestep
    with joulestep.phase("checkpoint", "ckpt-3", nbytes=n):
        write_checkpoint()

It is imported on first use (it loads socket and threading, which the
`joulestep` command does not need: `joulestep job` starts faster).
"""
import importlib as _importlib

__version__ = "0.4.0"


def __getattr__(name):
    if name == "phase":     # binds joulestep.phase as a side effect
        return _importlib.import_module(__name__ + ".phase")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
