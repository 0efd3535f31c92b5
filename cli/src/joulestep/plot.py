"""Figures like the papers' (matplotlib, Agg backend, no display needed).

The format follows the file extension: .png or .svg (anything else is a
ValueError). Every function writes one file and returns its path. Plotted
artists carry a gid, so an SVG names them (<g id="...">): 'fit-curve',
'samples', 'recommended', 'series-<name>', 'bars-<name>-<i>' (one per bar).

Interface summary:
  plot_scaling(table, path, by="tag:strategy", part="total", x="nranks") -> path
      energy and throughput vs ranks with error bars (compare_checkpointing
      output; one line per strategy and size)
  plot_io_approaches(table, path, by="tag:approach") -> path
      energy per I/O approach with spread over runs (compare_io_approaches)
  plot_power_fit(samples, fit, path, recommendation=None) -> path
      scaled power vs frequency with the fitted a*f^b + c
      (models.sweep_samples output, models.DvfsFit)
  plot_dump_energy(table, path, policy=None) -> path
      compress + write energy by error bound per compressor, raw write line
      (analysis.compare_dumps output)
"""
from __future__ import annotations

import os
from typing import Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

__all__ = ["plot_scaling", "plot_io_approaches", "plot_power_fit", "plot_dump_energy"]


def _check_path(path) -> str:
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".png", ".svg"):
        raise ValueError(f"{path}: unsupported figure format {ext or '(none)'}; "
                         f"allowed .png or .svg")
    return path


def _save(fig, path: str) -> str:
    fig.tight_layout()
    fig.savefig(path, format=os.path.splitext(path)[1][1:].lower(), dpi=120)
    plt.close(fig)
    return path


def _need(df: pd.DataFrame, cols, what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: missing column(s) {', '.join(missing)}")
    if df.empty:
        raise ValueError(f"{what}: nothing to plot (empty table)")


def plot_scaling(table: pd.DataFrame, path, by: str = "tag:strategy", part: str = "total",
                 x: str = "nranks") -> str:
    """Energy (J) and throughput (GiB/s) vs `x` with ±std error bars, one
    line per strategy (and size, when the table has several)."""
    path = _check_path(path)
    _need(table, [by, "part", x, "energy_j", "throughput_gibs"], "scaling plot")
    t = table[table["part"] == part]
    if t.empty:
        raise ValueError(f"scaling plot: no rows for part {part!r}")
    size = next((c for c in ("gib_per_rank", "total_gib") if c in t.columns), None)
    # a run whose ranks or size were not recorded has no place on the axes
    keep = t[x].notna() & (t[x] > 0)
    if size:
        keep &= t[size].notna()
    t = t[keep]
    if t.empty:
        raise ValueError(f"scaling plot: no rows with a rank count ({x}) and size")
    keys = [by] + ([size] if size and t[size].nunique() > 1 else [])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for k, g in t.groupby(keys, dropna=False):
        k = k if isinstance(k, tuple) else (k,)
        name = str(k[0]) + (f" {k[1]:g} GiB" if len(k) > 1 else "")
        g = g.sort_values(x)
        for ax, m in ((ax1, "energy_j"), (ax2, "throughput_gibs")):
            err = g[f"{m}_std"].fillna(0) if f"{m}_std" in g.columns else None
            c = ax.errorbar(g[x], g[m], yerr=err, marker="o", capsize=3, label=name)
            c.lines[0].set_gid(f"series-{name}")
    ax1.set(xlabel=x, ylabel="energy (J)", title=f"energy ({part})")
    ax2.set(xlabel=x, ylabel="throughput (GiB/s)", title=f"throughput ({part})")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path)


def plot_io_approaches(table: pd.DataFrame, path, by: str = "tag:approach") -> str:
    """Bar per approach: mean energy (kJ) with ±std over runs; per-node
    min-max shown as a second panel when present (Dorier Fig. 2/Table 2)."""
    path = _check_path(path)
    _need(table, [by, "energy_j"], "I/O approach plot")
    t = table[table[by].notna()].reset_index(drop=True)   # untagged: no approach
    if t.empty:
        raise ValueError(f"I/O approach plot: no run has a value of {by}")
    labels = [str(v) for v in t[by]]
    err = t["energy_j_std"].fillna(0) / 1e3 if "energy_j_std" in t.columns else None
    has_nodes = {"node_min_j", "node_max_j", "node_mean_j"} <= set(t.columns)
    fig, axes = plt.subplots(1, 2 if has_nodes else 1, figsize=(10 if has_nodes else 6, 4))
    ax = axes[0] if has_nodes else axes
    bars = ax.bar(labels, t["energy_j"] / 1e3, yerr=err, capsize=4)
    _gid_bars(bars, "bars-energy")
    ax.set(ylabel="energy (kJ)", title="total energy per I/O approach")
    if has_nodes:
        ax2 = axes[1]
        lo = (t["node_mean_j"] - t["node_min_j"]) / 1e3
        hi = (t["node_max_j"] - t["node_mean_j"]) / 1e3
        b2 = ax2.bar(labels, t["node_mean_j"] / 1e3, yerr=[lo, hi], capsize=4, color="tab:orange")
        _gid_bars(b2, "bars-node")
        ax2.set(ylabel="energy per node (kJ)", title="per node: mean, min-max")
    return _save(fig, path)


def plot_power_fit(samples: pd.DataFrame, fit, path, recommendation=None) -> str:
    """Scaled power samples vs frequency (GHz) and the fitted curve
    P(f) = a f^b + c over the swept range; a dashed vertical line at the
    recommended frequency when given."""
    path = _check_path(path)
    _need(samples, ["freq_ghz", "power"], "power fit plot")
    fig, ax = plt.subplots(figsize=(6, 4))
    pts = ax.scatter(samples["freq_ghz"], samples["power"], s=8, alpha=0.4, label="samples")
    pts.set_gid("samples")
    f = np.linspace(samples["freq_ghz"].min(), samples["freq_ghz"].max(), 200)
    (line,) = ax.plot(f, fit.power(f), color="tab:red",
                      label=f"{fit.a:.4g} f^{fit.b:.4g} + {fit.c:.4g}")
    line.set_gid("fit-curve")
    if recommendation is not None:
        v = ax.axvline(recommendation.freq_khz / 1e6, ls="--", color="tab:green",
                       label=f"recommended {recommendation.freq_khz / 1e6:.2f} GHz "
                             f"({recommendation.ratio:.3f} fmax)")
        v.set_gid("recommended")
    ax.set(xlabel="frequency (GHz)", ylabel="power / power at fmax",
           title="power vs frequency")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_dump_energy(table: pd.DataFrame, path, policy: Optional[str] = None) -> str:
    """Stacked bars (compress + write energy, kJ) per error bound, one group
    of bars per compressor (and policy when `policy` names a column), with
    the raw write energy as a dashed line (Wilkins Fig. 2.6)."""
    path = _check_path(path)
    _need(table, ["compressor", "error_bound", "compress_j", "write_j"], "dump plot")
    t = table[table["compressor"] != "raw"]
    if t.empty:
        raise ValueError("dump plot: no compressed dump in the table")
    series = ["compressor"] + ([policy] if policy else [])
    bounds = sorted(t["error_bound"].astype(str).unique(),
                    key=lambda v: (float(v) if _isnum(v) else float("inf"), v))
    groups = list(t.groupby(series, dropna=False))
    width = 0.8 / len(groups)
    xs = np.arange(len(bounds))
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (k, g) in enumerate(groups):
        k = k if isinstance(k, tuple) else (k,)
        name = " ".join(map(str, k))
        g = g.assign(_eb=g["error_bound"].astype(str)).set_index("_eb").reindex(bounds)
        x = xs + (i - (len(groups) - 1) / 2) * width
        b1 = ax.bar(x, g["compress_j"] / 1e3, width, label=f"{name} compress")
        b2 = ax.bar(x, g["write_j"] / 1e3, width, bottom=g["compress_j"].fillna(0) / 1e3,
                    label=f"{name} write", alpha=0.6)
        _gid_bars(b1, f"bars-{name}-compress")
        _gid_bars(b2, f"bars-{name}-write")
    if "raw_write_j" in table.columns and table["raw_write_j"].notna().any():
        ax.axhline(table["raw_write_j"].dropna().iloc[0] / 1e3, ls="--", color="k",
                   label="raw write").set_gid("raw-write")
    ax.set_xticks(xs, bounds)
    ax.set(xlabel="error bound", ylabel="energy (kJ)", title="dump energy by error bound")
    ax.legend(fontsize=7)
    return _save(fig, path)


def _gid_bars(container, name: str) -> None:
    for i, patch in enumerate(container.patches):
        patch.set_gid(f"{name}-{i}")


def _isnum(v: str) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False
