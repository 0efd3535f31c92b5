""""CPUs left throttled": the check every frequency test may end with.

The truth is a snapshot of the fake cpufreq tree taken by the test before its job
(`snapshot`), i.e. the values the test wrote; `throttled_cpus` compares the tree with it
now, `assert_no_cpu_throttled` fails naming every difference, and the module counts what
it checked (TALLY, printed by test_faults_freq.py for the report's figures).
"""
from __future__ import annotations

import pathlib

import fakehw

# the settings that must come back exactly (effective_khz follows from them)
KEYS = ("scaling_governor", "scaling_min_freq", "scaling_max_freq", "effective_khz")

TALLY = {"checks": 0, "cpus_checked": 0, "cpus_left_throttled": 0}


def _ncpus(hw) -> int:
    base = pathlib.Path(hw) / "devices/system/cpu"
    return len([d for d in base.glob("cpu[0-9]*") if (d / "cpufreq").exists()])


def snapshot(hw) -> dict:
    """{cpu: cpufreq files} of every fake CPU (the truth to come back to)."""
    return {c: fakehw.read_cpufreq(str(hw), c) for c in range(_ncpus(hw))}


def throttled_cpus(hw, orig: dict) -> list[tuple]:
    """(cpu, file, now, original) for every setting of hw that differs from orig."""
    bad = []
    for c, o in orig.items():
        now = fakehw.read_cpufreq(str(hw), c)
        bad += [(c, k, now[k], o[k]) for k in KEYS if now[k] != o[k]]
    return bad


def assert_no_cpu_throttled(hw, orig: dict, state_dir=None):
    """Every fake CPU at its original governor, min and max; with state_dir, the journal
    holds no backup any more (nothing left for a later restore to do)."""
    bad = throttled_cpus(hw, orig)
    TALLY["checks"] += 1
    TALLY["cpus_checked"] += len(orig)
    TALLY["cpus_left_throttled"] += len({b[0] for b in bad})
    assert not bad, f"CPUs left changed (cpu, file, now, original): {bad}"
    if state_dir is not None:
        left = sorted(p.name for p in pathlib.Path(state_dir).glob("cpu*.orig"))
        assert not left, f"journal backups left in {state_dir}: {left}"
