"""The one compiled part of the CLI: joulestep._speedups, store's record
check in C (docs/design.md, "Ingest speed", sixth round).  Optional: where it
cannot be built (no compiler or Python headers), joulestep works the same on
its pure-Python paths, only slower to ingest.  Everything else is in
pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "joulestep._speedups", ["src/joulestep/_speedups.c"], optional=True,
    extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers"])])
