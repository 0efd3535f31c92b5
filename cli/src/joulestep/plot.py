"""Figures like the papers' (matplotlib, Agg backend, no display needed).

The format follows the file extension: .png or .svg (anything else is a
ValueError). Every function writes one file and returns its path. Plotted
artists carry a gid, so an SVG names them (<g id="...">): 'fit-curve',
'samples', 'recommended', 'series-<name>', 'bars-<name>-<i>' (one per bar).

Each figure picks its units from its data (J, kJ or MJ; MiB/s or GiB/s:
render_units, the tables' formatter), labels every group with its value
(an error bound that was not recorded reads "not recorded", never "nan"),
writes each bar's value on it, and sets its limits so every bar, error bar
and reference line lies inside the axes.  The *_figure functions return
the matplotlib Figure (tests read its Axes); the plot_* ones save it.

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

from .render_units import LADDERS, fmt  # noqa: E402

__all__ = ["plot_scaling", "plot_io_approaches", "plot_power_fit", "plot_dump_energy",
           "scaling_figure", "io_approaches_figure", "power_fit_figure",
           "dump_energy_figure", "axis_unit"]

#: head room above the highest bar, for its value label
_HEADROOM = 1.15


def _check_path(path) -> str:
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".png", ".svg"):
        raise ValueError(f"{path}: unsupported figure format {ext or '(none)'}; "
                         f"allowed .png or .svg")
    return path


def axis_unit(values, unit: str) -> tuple[str, float]:
    """The unit of an axis (its name and size in ``unit``) from the largest
    of ``values``: 7-15 J is J, not 0.007-0.015 kJ."""
    v = np.asarray(pd.to_numeric(pd.Series(list(values), dtype=object),
                                 errors="coerce"), float)
    v = np.abs(v[np.isfinite(v)])
    top = v.max() if v.size and v.max() > 0 else 1.0
    ladder = [u for u in LADDERS[unit] if u[1] >= 1.0] or list(LADDERS[unit])
    name, size = ladder[0]
    for n, sz in ladder[1:]:
        if top >= sz * 0.9995:
            name, size = n, sz
    return name, size


def _bar_values(ax, bars, values, unit: str, labels=None) -> None:
    """Each bar's value written above it (in the data's own unit)."""
    ax.bar_label(bars, labels=labels or [fmt(v, unit, " ") if np.isfinite(v) else "n/m"
                                         for v in values], fontsize=7, padding=2,
                 bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8,
                       "pad": 0.5})


def _top(*arrays) -> float:
    """The highest finite value of the arrays (1 when there is none)."""
    vals = np.concatenate([np.asarray(a, float).ravel() for a in arrays])
    vals = vals[np.isfinite(vals)]
    return float(vals.max()) if vals.size and vals.max() > 0 else 1.0


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
    """scaling_figure, saved to ``path``."""
    path = _check_path(path)
    return _save(scaling_figure(table, by, part, x), path)


def scaling_figure(table: pd.DataFrame, by: str = "tag:strategy", part: str = "total",
                   x: str = "nranks"):
    """Energy and throughput vs `x` with ±std error bars, one line per
    strategy (and size, when the table has several); units from the data."""
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
    units = {"energy_j": ("J", 1.0), "throughput_gibs": ("B/s", 2.0**30)}
    scale = {}
    for m, (unit, factor) in units.items():
        err = t[f"{m}_std"].fillna(0) if f"{m}_std" in t.columns else 0
        name, size_ = axis_unit((t[m] + err) * factor, unit)
        scale[m] = (name, factor / size_)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for k, g in t.groupby(keys, dropna=False):
        k = k if isinstance(k, tuple) else (k,)
        name = _label(k[0]) + (f" {k[1]:g} GiB" if len(k) > 1 else "")
        g = g.sort_values(x)
        for ax, m in ((ax1, "energy_j"), (ax2, "throughput_gibs")):
            f = scale[m][1]
            err = g[f"{m}_std"].fillna(0) * f if f"{m}_std" in g.columns else None
            c = ax.errorbar(g[x], g[m] * f, yerr=err, marker="o", capsize=3, label=name)
            c.lines[0].set_gid(f"series-{name}")
    ax1.set(xlabel=x, ylabel=f"energy ({scale['energy_j'][0]})", title=f"energy ({part})")
    ax2.set(xlabel=x, ylabel=f"throughput ({scale['throughput_gibs'][0]})",
            title=f"throughput ({part})")
    for ax in (ax1, ax2):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return fig


def plot_io_approaches(table: pd.DataFrame, path, by: str = "tag:approach") -> str:
    """io_approaches_figure, saved to ``path``."""
    path = _check_path(path)
    return _save(io_approaches_figure(table, by), path)


def io_approaches_figure(table: pd.DataFrame, by: str = "tag:approach"):
    """Bar per approach: mean energy with ±std over runs; per-node
    min-max shown as a second panel when present (Dorier Fig. 2/Table 2)."""
    _need(table, [by, "energy_j"], "I/O approach plot")
    t = table[table[by].notna()].reset_index(drop=True)   # untagged: no approach
    if t.empty:
        raise ValueError(f"I/O approach plot: no run has a value of {by}")
    labels = [_label(v) for v in t[by]]
    e = t["energy_j"].astype(float)
    sd = t["energy_j_std"].fillna(0).astype(float) if "energy_j_std" in t.columns else 0 * e
    has_nodes = {"node_min_j", "node_max_j", "node_mean_j"} <= set(t.columns)
    fig, axes = plt.subplots(1, 2 if has_nodes else 1, figsize=(10 if has_nodes else 6, 4))
    ax = axes[0] if has_nodes else axes
    unit, size = axis_unit(e + sd, "J")
    bars = ax.bar(labels, e / size, yerr=sd / size, capsize=4)
    _gid_bars(bars, "bars-energy")
    _bar_values(ax, bars, e, "J")
    ax.set_ylim(0, _top(e + sd) / size * _HEADROOM)
    ax.set(ylabel=f"energy ({unit})", title="total energy per I/O approach")
    if has_nodes:
        ax2 = axes[1]
        mean, lo_, hi_ = (t[c].astype(float) for c in ("node_mean_j", "node_min_j",
                                                        "node_max_j"))
        unit2, size2 = axis_unit(hi_, "J")
        b2 = ax2.bar(labels, mean / size2, yerr=[(mean - lo_) / size2, (hi_ - mean) / size2],
                     capsize=4, color="tab:orange")
        _gid_bars(b2, "bars-node")
        _bar_values(ax2, b2, mean, "J")
        ax2.set_ylim(0, _top(hi_, mean) / size2 * _HEADROOM)
        ax2.set(ylabel=f"energy per node ({unit2})", title="per node: mean, min-max")
    return fig


def plot_power_fit(samples: pd.DataFrame, fit, path, recommendation=None) -> str:
    """power_fit_figure, saved to ``path``."""
    path = _check_path(path)
    return _save(power_fit_figure(samples, fit, recommendation), path)


def power_fit_figure(samples: pd.DataFrame, fit, recommendation=None):
    """Scaled power samples vs frequency (GHz) and the fitted curve
    P(f) = a f^b + c over the swept range; a dashed vertical line at the
    recommended frequency when given."""
    _need(samples, ["freq_ghz", "power"], "power fit plot")
    fig, ax = plt.subplots(figsize=(6, 4))
    pts = ax.scatter(samples["freq_ghz"], samples["power"], s=8, alpha=0.4, label="samples")
    pts.set_gid("samples")
    f = np.linspace(samples["freq_ghz"].min(), samples["freq_ghz"].max(), 200)
    (line,) = ax.plot(f, fit.power(f), color="tab:red",
                      label=f"{_g(fit.a)} f^{_g(fit.b)} + {_g(fit.c)}")
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
    return fig


def plot_dump_energy(table: pd.DataFrame, path, policy: Optional[str] = None) -> str:
    """dump_energy_figure, saved to ``path``."""
    path = _check_path(path)
    return _save(dump_energy_figure(table, policy), path)


def dump_energy_figure(table: pd.DataFrame, policy: Optional[str] = None):
    """Stacked bars (compress + write energy) per error bound, one group
    of bars per compressor (and policy when `policy` names a column), the
    total written on each, with the raw write energy as a dashed line
    (Wilkins Fig. 2.6)."""
    _need(table, ["compressor", "error_bound", "compress_j", "write_j"], "dump plot")
    t = table[table["compressor"] != "raw"]
    if t.empty:
        raise ValueError("dump plot: no compressed dump in the table")
    t = t.assign(_eb=t["error_bound"].map(_label))
    series = ["compressor"] + ([policy] if policy else [])
    bounds = sorted(t["_eb"].unique(),
                    key=lambda v: (float(v) if _isnum(v) else float("inf"), v))
    groups = list(t.groupby(series, dropna=False))
    raw = (table["raw_write_j"].dropna() if "raw_write_j" in table.columns
           else pd.Series(dtype=float))
    comp, wr = (t[c].astype(float).fillna(0) for c in ("compress_j", "write_j"))
    unit, size = axis_unit(pd.concat([comp + wr, raw]), "J")
    width = 0.8 / len(groups)
    xs = np.arange(len(bounds))
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, (k, g) in enumerate(groups):
        k = k if isinstance(k, tuple) else (k,)
        name = " ".join(map(_label, k))
        g = g.groupby("_eb").mean(numeric_only=True).reindex(bounds)
        c, w = g["compress_j"].astype(float), g["write_j"].astype(float)
        x = xs + (i - (len(groups) - 1) / 2) * width
        b1 = ax.bar(x, c.fillna(0) / size, width, label=f"{name} compress")
        b2 = ax.bar(x, w.fillna(0) / size, width, bottom=c.fillna(0) / size,
                    label=f"{name} write", alpha=0.6, hatch="//", edgecolor="k",
                    linewidth=0.5)
        _gid_bars(b1, f"bars-{name}-compress")
        _gid_bars(b2, f"bars-{name}-write")
        _bar_values(ax, b2, None, "J", [
            "" if np.isnan(cj) and np.isnan(wj) else
            fmt(np.nansum([cj, wj]), "J", " ") + (" (write n/m)" if np.isnan(wj) else "")
            + (" (compress n/m)" if np.isnan(cj) else "") for cj, wj in zip(c, w)])
    if not raw.empty:
        ax.axhline(raw.iloc[0] / size, ls="--", color="k",
                   label=f"raw write {fmt(raw.iloc[0], 'J', ' ')}").set_gid("raw-write")
    ax.set_ylim(0, _top(comp + wr, raw) / size * _HEADROOM)
    ax.set_xticks(xs, bounds)
    ax.set(xlabel="error bound", ylabel=f"energy ({unit})",
           title="dump energy by error bound (compress + write)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def _label(v) -> str:
    """A group's value as its label; one that was not recorded says so
    (it read "nan")."""
    if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA:
        return "not recorded"
    if isinstance(v, (float, np.floating)):
        return f"{v:g}"
    return str(v)


def _g(x: float) -> str:
    """A fitted coefficient: 4 significant digits, fixed notation."""
    return fmt(x, digits=4)


def _gid_bars(container, name: str) -> None:
    for i, patch in enumerate(container.patches):
        patch.set_gid(f"{name}-{i}")


def _isnum(v: str) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False
