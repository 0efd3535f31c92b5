"""Rendering: 80-column tables, stable JSON and CSV."""
from __future__ import annotations

import io
import json
import math
import re

from .render_units import fmt

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


def energy_text(kwh: float) -> str:
    """Energy for text output: Wh, kWh or MWh, never in scientific notation
    (0.017 Wh, not 1.667e-05 kWh)."""
    return fmt(kwh * 1000, "Wh", " ")


def co2_text(g: float) -> str:
    """CO2 mass for text output: g, kg or t."""
    return fmt(g, "g", " ")


def money_text(x: float, currency: str) -> str:
    """Money with cents; a positive amount under half a cent is "< 0.01"."""
    if 0 < x < 0.005:
        return f"< 0.01 {currency}"
    return f"{x:.2f} {currency}"


def num_fixed(x, digits: int = 3) -> str:
    """A plain number (render_units.fmt): kept for its callers."""
    return fmt(x, digits=digits)


def money_cell(x) -> str:
    """Money in a table: cents; a positive amount under half a cent "<0.01"."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if 0 < x < 0.005:
        return "<0.01"
    return f"{x:.2f}"


def num(x, digits: int = 3) -> str:
    """A number without unit for tables (counts, MHz, %): render_units.fmt,
    the one formatter; figures with a unit go through fmt(x, unit)."""
    return fmt(x, digits=digits)


def table(headers: list[str], rows: list[list], right: set[int] | None = None,
          width: int = WIDTH) -> str:
    """Plain-text table; cells are str already.  Columns after the first are
    right-aligned unless listed otherwise.  One space between columns where
    two would pass ``width``; no cell is ever cut: a long name widens its
    column (as sacct's %N), since a cut one can make two rows read the same."""
    if right is None:
        right = set(range(1, len(headers)))
    cells = [list(map(str, r)) for r in rows]
    widths = [max(map(len, col)) for col in zip(headers, *cells)]
    sep = 2 if sum(widths) + 2 * (len(widths) - 1) <= width else 1
    fmt_ = (" " * sep).join(f"{{:{'>' if i in right else '<'}{w}}}"
                            for i, w in enumerate(widths))
    return "\n".join(fmt_.format(*r).rstrip() for r in [headers] + cells)


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
