#!/usr/bin/env python3
"""The node simulator: a fake RAPL/cpufreq/uncore/pm_counters/hwmon sysfs
tree (and GPUs, through the stand-ins of tests/fakehw/gpu) whose energy
follows a power model of the clock, for machines without the hardware
(a laptop, a VM, CI).  Usage and model: sim/README.md.

    python3 sim/fakehw.py create /tmp/fake
    build/bin/joulestep-run --sysfs /tmp/fake --json -- ./my_app

Standard library only.  The simulator itself is the module the tests
import (tests/fakehw/fakehw.py); this is its command.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests" / "fakehw"))
import fakehw  # noqa: E402

if __name__ == "__main__":
    sys.exit(fakehw.main())
