"""The one number formatter of every table and text line: fixed decimals,
the unit scaled to the figure (4.00ms, 3.00d, 450µJ, 1.23MJ, 241KiB/s,
12.3kWh), never scientific notation.

``fmt(x, unit)`` is the only function that turns a figure into text; the
helpers of output.py (num, energy_text, co2_text) call it.  A figure is
shown with three significant digits in the largest unit of its ladder that
it reaches 1 of (below the smallest unit: three decimals, then "<0.001"),
so a column can hold 4 ms and 3 days and each reads right.  Plain numbers
(counts, MHz, percentages, fitted coefficients) have no unit: k/M/G/T for
large values, fixed decimals down to 10^-6, n/p/f/a below (2.12n).
"""
from __future__ import annotations

import math

_SI = (("µ", 1e-6), ("m", 1e-3), ("", 1.0), ("k", 1e3), ("M", 1e6), ("G", 1e9),
       ("T", 1e12), ("P", 1e15))
_BIN = (("", 1.0), ("Ki", 2.0**10), ("Mi", 2.0**20), ("Gi", 2.0**30),
        ("Ti", 2.0**40), ("Pi", 2.0**50))


def _si(base: str, lo: int = 0, hi: int = len(_SI)):
    return tuple((p + base, s) for p, s in _SI[lo:hi])


#: unit -> its ladder [(name, size in the unit)], smallest first
LADDERS = {
    "s": (("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3), ("s", 1.0), ("min", 60.0),
          ("h", 3600.0), ("d", 86400.0)),
    "J": _si("J"),
    "W": _si("W", 1),                       # mW and up
    "Wh": _si("Wh", 2),                     # Wh and up: 0.017 Wh
    "g": (("g", 1.0), ("kg", 1e3), ("t", 1e6), ("kt", 1e9)),
    "B": tuple((p + "B", s) for p, s in _BIN),
    "B/s": tuple((p + "B/s", s) for p, s in _BIN),
    "J/GiB": _si("J/GiB"),
    "Hz": (("Hz", 1.0), ("kHz", 1e3), ("MHz", 1e6), ("GHz", 1e9)),
}


def _digits(v: float) -> str:
    """v >= 0, three significant digits in fixed notation (once rounded:
    9.9996 is 10.0, not 10.00)."""
    for lim, dec in ((99.95, 0), (9.995, 1), (0.9995, 2)):
        if v >= lim:
            return f"{v:.{dec}f}"
    return f"{v:.3f}"


def _pick(ax: float, ladder) -> tuple[str, float]:
    """The largest unit of ``ladder`` that ``ax`` reaches 1 of, once rounded
    to three digits (999.7 J is 1.00kJ, not 1000J)."""
    name, size = ladder[0]
    for n, sz in ladder[1:]:
        if ax >= sz * 0.9995:
            name, size = n, sz
    return name, size


def _plain(x: float, digits: int) -> str:
    """A number without unit (counts, MHz, %): integers exact below 10^7,
    k/M/G/T above 10^4, never scientific notation."""
    ax = abs(x)
    if ax == 0:
        return "0"
    if float(x).is_integer() and ax < 1e7:
        return str(int(x))
    for lim, div, suf in ((1e12, 1e12, "T"), (1e9, 1e9, "G"), (1e6, 1e6, "M"),
                          (1e4, 1e3, "k")):
        if ax >= lim:
            v = x / div
            return f"{v:.{max(digits - len(str(int(abs(v)))), 0)}f}{suf}"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 1:
        return f"{x:.{max(digits - len(str(int(ax))), 0)}f}"
    if ax >= 0.01:
        return f"{x:.3f}"
    if ax < 0.9995e-6:
        # a fitted coefficient such as 2.12e-09: SI suffixes, as k/M/G above
        sign = "-" if x < 0 else ""
        for lim, suf in ((1e-9, "n"), (1e-12, "p"), (1e-15, "f"), (1e-18, "a")):
            if ax >= lim * 0.9995:
                return f"{sign}{_digits(ax / lim)}{suf}"
        return f"{sign}<0.001a"
    # three significant digits, at most six decimals
    dec = min(6, digits - 1 - math.floor(math.log10(ax)))
    return f"{x:.{dec}f}".rstrip("0").rstrip(".")


def fmt(x, unit: str = "", sep: str = "", digits: int = 3) -> str:
    """``x`` (in ``unit``: s, J, W, Wh, g, B, B/s, J/GiB, Hz; "" for none)
    as text; None and NaN are "-".  ``sep`` goes between the number and the
    unit: "" in table cells (one word, like sacct's 1234K), " " in prose."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if not unit:
        return _plain(x, digits)
    ladder = LADDERS[unit]
    if x == 0:
        return f"0{sep}{unit}"
    ax = abs(x)
    sign = "-" if x < 0 else ""
    if ax < ladder[0][1] * 0.0005:
        return f"{sign}<{sep}0.001{sep}{ladder[0][0]}"
    name, size = _pick(ax, ladder)
    return f"{sign}{_digits(ax / size)}{sep}{name}"


def column_unit(col: str) -> tuple[str, float]:
    """The unit of a DataFrame column named as JSON names it (docs/cli.md:
    the unit in every name) and the factor to that unit: energy_j_std -> J,
    runtime_s -> s, throughput_gibs -> B/s (x 2^30), j_per_gib -> J/GiB;
    ("", 1) for names without a unit, and for clocks (MHz/kHz columns keep
    their plain numbers)."""
    words = str(col).lower().split("_")
    if "per" in words and words[-1] == "gib" and words[0] == "j":
        return "J/GiB", 1.0
    for w in reversed(words):
        if w in ("std", "sd", "mean", "min", "max", "median", "p99"):
            continue
        return {"j": ("J", 1.0), "s": ("s", 1.0), "w": ("W", 1.0),
                "gibs": ("B/s", 2.0**30), "gib": ("B", 2.0**30),
                "bytes": ("B", 1.0), "kwh": ("Wh", 1e3), "wh": ("Wh", 1.0),
                "uj": ("J", 1e-6), "g": ("g", 1.0),
                # durations only: start_ns, first_seen_ns are times of day
                "ns": ("s", 1e-9) if {"duration", "time"} & set(words) else ("", 1.0),
                }.get(w, ("", 1.0))
    return "", 1.0
