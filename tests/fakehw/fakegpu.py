"""Fake GPUs for the NVML stand-in (tests/fakehw/gpu/fake_nvml.c).

A GPU is a directory gpuN under a root that $FAKEHW_GPU_ROOT names; its `vendor`
("nvidia" or "amd") says which stand-in shows it (tests/fakehw/gpu: libnvidia-ml.so.1,
libamd_smi.so, which share the model). Tests set
its utilisation over time (`load`), make the driver reload (`reset`), and ask
for the truth: the energy the model drew between two CLOCK_MONOTONIC times,
with the clock locks the library under test applied (`locks`, written by the
stand-in). The model (README.md, "GPUs"):

    P(u, f) = idle_mw + (max_mw - idle_mw) * u * (f / max_mhz) ** 2

f is max_mhz, or the locked maximum while a lock is in force.
"""
from __future__ import annotations

import os
import pathlib
import time

DEFAULTS = {"vendor": "nvidia", "resolution_uj": 15.259, "idle_mw": 60000, "max_mw": 700000, "max_mhz": 1980, "min_mhz": 345,
            "mem_mhz": 2619, "period_ms": 10, "counter": 1, "mig": 0,
            "lock_permission": 1, "offset_mj": 0, "wrap_mj": 0}


def gpu_dir(root, i) -> pathlib.Path:
    return pathlib.Path(root) / f"gpu{i}"


def create(root, n=1, first=0, **params) -> pathlib.Path:
    """n fake GPUs gpu<first>.. under root (created), idle since now; params override
    DEFAULTS (vendor="amd" for AMD GPUs)."""
    root = pathlib.Path(root)
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic_ns()
    for i in range(first, first + n):
        d = gpu_dir(root, i)
        d.mkdir()
        (d / "uuid").write_text(f"GPU-fake0000-0000-0000-0000-{i:012d}\n")
        (d / "name").write_text("Fake H100 (fakehw)\n")
        (d / "t0_ns").write_text(f"{t0}\n")
        for k, v in {**DEFAULTS, **params}.items():
            (d / k).write_text(f"{v}\n")
        for f in ("load", "locks", "resets"):
            (d / f).write_text("")
    return root


def _append(path: pathlib.Path, line: str):
    with open(path, "a") as f:
        f.write(line + "\n")


def load(root, i, util, t_ns=None) -> int:
    """Set GPU i's utilisation (0..1) from now (or t_ns) on; returns the time."""
    t = time.monotonic_ns() if t_ns is None else t_ns
    _append(gpu_dir(root, i) / "load", f"{t} {util}")
    return t


def reset(root, i, t_ns=None) -> int:
    """A driver reload: GPU i's energy counter starts again from 0."""
    t = time.monotonic_ns() if t_ns is None else t_ns
    _append(gpu_dir(root, i) / "resets", f"{t}")
    return t


def _events(path):
    out = []
    for line in pathlib.Path(path).read_text().splitlines():
        parts = [float(x) for x in line.split()]
        if parts:
            out.append(parts + [0.0] * (3 - len(parts)))
    return out


def _param(d, name):
    return float((d / name).read_text())


def locks(root, i):
    """[(t_ns, min_mhz, max_mhz)] as the library under test set them (0, 0 = reset)."""
    return [tuple(e) for e in _events(gpu_dir(root, i) / "locks")]


def energy_mj(root, i, t0_ns, t1_ns) -> float:
    """The truth: the model's energy of GPU i over [t0_ns, t1_ns], in mJ."""
    d = gpu_dir(root, i)
    idle, pmax, fmax = _param(d, "idle_mw"), _param(d, "max_mw"), _param(d, "max_mhz")
    loads, lks = _events(d / "load"), _events(d / "locks")

    def last(ev, t, col):
        v = 0.0
        for e in ev:
            if e[0] <= t:
                v = e[col]
        return v

    cuts = sorted({t0_ns, t1_ns} | {e[0] for e in loads + lks if t0_ns < e[0] < t1_ns})
    total = 0.0
    for a, b in zip(cuts, cuts[1:]):
        lmax = last(lks, a, 2)
        f = (lmax if 0 < lmax < fmax else fmax) / fmax
        total += (idle + (pmax - idle) * last(loads, a, 1) * f * f) * (b - a) / 1e9
    return total


def env(root) -> dict:
    """The environment that makes a process load this tree's GPUs."""
    return {**os.environ, "FAKEHW_GPU_ROOT": str(root)}
