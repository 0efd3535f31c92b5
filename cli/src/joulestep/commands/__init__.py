"""The commands of `joulestep`, one module each, imported on first use
(cli.LazyGroup)."""
