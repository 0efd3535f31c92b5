"""joulestep: energy accounting and frequency control for Slurm clusters.

``joulestep.phase`` is both the phase-marker module (``joulestep.phase.begin``,
``.end``, ``.ping``) and, called, its context manager::

    import joulestep
    with joulestep.phase("checkpoint", "ckpt-3", nbytes=n):
        write_checkpoint()
"""
import types as _types

from . import phase as _phase_module

__version__ = "0.1.0"


class _CallableModule(_types.ModuleType):
    """Lets ``joulestep.phase(...)`` call ``joulestep.phase.phase(...)``."""

    def __call__(self, *args, **kwargs):
        return self.phase(*args, **kwargs)


_phase_module.__class__ = _CallableModule
