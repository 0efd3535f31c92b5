"""Rendering: 80-column tables, stable JSON and CSV."""
from __future__ import annotations

import io
import json
import math
import re

WIDTH = 80

#: what textwrap's replace_whitespace turns into spaces
_WS_TO_SPACE = str.maketrans("\t\n\x0b\x0c\r", "     ")


def wrap(text: str, width: int = WIDTH, initial_indent: str = "",
         subsequent_indent: str = "") -> list[str]:
    """The lines of textwrap.wrap(text, width, initial_indent=...,
    subsequent_indent=..., break_on_hyphens=False), without importing
    textwrap: its TextWrapper compiles a large pattern when the module
    loads, a start-up cost `joulestep job` would pay for a few lines of
    prose (docs/cli.md, "Start-up"; tests/cli/test_output.py checks it
    against textwrap)."""
    text = text.expandtabs().translate(_WS_TO_SPACE)
    chunks = [c for c in re.split("( +)", text) if c]
    chunks.reverse()
    lines: list[str] = []
    while chunks:
        indent = subsequent_indent if lines else initial_indent
        room = width - len(indent)
        if lines and chunks[-1].strip() == "":
            chunks.pop()
        line, used = [], 0
        while chunks and used + len(chunks[-1]) <= room:
            used += len(chunks[-1])
            line.append(chunks.pop())
        if chunks and len(chunks[-1]) > room:       # a word longer than a line
            cut = 1 if room < 1 else room - used       # as textwrap
            line.append(chunks[-1][:cut])
            chunks[-1] = chunks[-1][cut:]
        if line and line[-1].strip() == "":
            line.pop()
        if line:
            lines.append(indent + "".join(line))
    return lines


def local_time(iso: str | None, utc: bool = False) -> str | None:
    """An ISO time (as report.py writes them, UTC) in the local time zone,
    or in UTC with ``utc``; to the second, with its offset."""
    if not iso or utc:
        return iso
    import datetime as dt
    try:
        t = dt.datetime.fromisoformat(iso)
    except ValueError:
        return iso
    return t.astimezone().isoformat(timespec="seconds")


def _fixed(v: float) -> str:
    """v >= 0 in fixed notation, about 3 significant digits, never below
    0.001 (what text output shows of energy, CO2 and the like)."""
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def _scaled(v: float, units) -> str:
    """v in the first unit of ``units`` [(name, size)], shown in the largest
    unit it reaches 1 of; fixed notation; under 0.001 of the first unit
    "< 0.001"."""
    if v == 0:
        return f"0 {units[0][0]}"
    if 0 < v < 0.0005:
        return f"< 0.001 {units[0][0]}"
    name, size = units[0]
    for n, sz in units[1:]:
        if abs(v) >= sz:
            name, size = n, sz
    return f"{_fixed(v / size)} {name}"


def energy_text(kwh: float) -> str:
    """Energy for text output: Wh, kWh or MWh, never in scientific notation
    (0.017 Wh, not 1.667e-05 kWh)."""
    return _scaled(kwh * 1000, (("Wh", 1), ("kWh", 1e3), ("MWh", 1e6)))


def co2_text(g: float) -> str:
    """CO2 mass for text output: g, kg or t."""
    return _scaled(g, (("g", 1), ("kg", 1e3), ("t", 1e6)))


def money_text(x: float, currency: str) -> str:
    """Money with cents; a positive amount under half a cent is "< 0.01"."""
    if 0 < x < 0.005:
        return f"< 0.01 {currency}"
    return f"{x:.2f} {currency}"


def num_fixed(x, digits: int = 3) -> str:
    """num() without scientific notation: what it shows as 1.23e-04 is
    "0.000123" down to 6 decimals, "<0.000001" below (tables of energy and
    money in large units)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    ax = abs(x)
    if ax == 0 or ax >= 0.01:
        return num(x, digits)
    if ax < 5e-7:
        return "<0.000001"
    return f"{x:.6f}".rstrip("0")


def money_cell(x) -> str:
    """Money in a table: cents; a positive amount under half a cent "<0.01"."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if 0 < x < 0.005:
        return "<0.01"
    return f"{x:.2f}"


def num(x, digits: int = 3) -> str:
    """Compact human number for tables: 3 significant digits, k/M/G/T."""
    if type(x) is float and 0.01 <= abs(x) < 100 and not x.is_integer():
        # the common case, first (a job's table calls this hundreds of times)
        ax = abs(x)
        return f"{x:.3f}" if ax < 1 else f"{x:.{max(digits - (ax >= 10) - 1, 0)}f}"
    if x is None:
        return "-"
    if isinstance(x, float) and math.isnan(x):
        return "-"
    ax = abs(x)
    if ax == 0:
        return "0"
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer()):
        if ax < 1e7:
            return str(int(x))
    for lim, div, suf in ((1e12, 1e12, "T"), (1e9, 1e9, "G"), (1e6, 1e6, "M"),
                          (1e4, 1e3, "k")):
        if ax >= lim:
            v = x / div
            return f"{v:.{max(digits - len(str(int(abs(v)))), 0)}f}{suf}"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 0.01:
        return f"{x:.{max(digits - len(str(int(ax))), 0)}f}" if ax >= 1 else f"{x:.3f}"
    return f"{x:.2e}"


def table(headers: list[str], rows: list[list], right: set[int] | None = None,
          width: int = WIDTH) -> str:
    """Plain-text table; cells are str already.  Columns after the first are
    right-aligned unless listed otherwise; the widest text column is cut to
    keep the line within ``width``."""
    if right is None:
        right = set(range(1, len(headers)))
    cells = [list(map(str, r)) for r in rows]
    widths = [max(map(len, col)) for col in zip(headers, *cells)]
    sep = 2
    total = sum(widths) + sep * (len(widths) - 1)
    if total > width:
        sep = 1
        total = sum(widths) + sep * (len(widths) - 1)
    cut = None      # the one column that may be too narrow for its cells
    if total > width:
        left = [i for i in range(len(headers)) if i not in right]
        if left:
            cut = max(left, key=lambda k: widths[k])
            widths[cut] = max(len(headers[cut]), widths[cut] - (total - width), 4)
    fmt = (" " * sep).join(f"{{:{'>' if i in right else '<'}{w}}}"
                           for i, w in enumerate(widths))
    out = []
    for r in [headers] + cells:
        if cut is not None and len(r[cut]) > widths[cut]:
            r = r[:cut] + [r[cut][: widths[cut] - 1] + "~"] + r[cut + 1:]
        out.append(fmt.format(*r).rstrip())
    return "\n".join(out)


def to_json(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, allow_nan=False,
                      default=str) + "\n"


def to_csv(columns: list[str], rows: list[dict]) -> str:
    import csv      # here: only --format csv needs it
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore",
                       lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
    return buf.getvalue()
