"""joulestep: energy accounting and frequency control for Slurm clusters."""
__version__ = "0.1.0"
