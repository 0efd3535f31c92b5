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
