"""Reading files of grid carbon intensity or electricity prices over time
(pure: text in, intervals and problems out; `joulestep intensity import`
stores them through store/intensity.py).

Three layouts (docs/admin-guide.md, "Carbon intensity and prices over
time", names the columns read):

- ``csv``: a header ``time_utc,value`` (an optional third column
  ``estimated``: 1/0, true/false), then one row per change; each value
  holds from its time until the next row's.  A row with an empty value
  ends the one before it (no value from then: a gap).  The last row holds
  as long as the one before it did.
- ``emaps``: the Electricity Maps data portal's hourly CSV.  Read:
  ``Datetime (UTC)``, ``Carbon Intensity gCO₂eq/kWh (direct)`` (the
  Scope 2, location-based figure), ``Data Estimated`` and ``Data Source``;
  each row holds one hour.  It has no price column.
- ``neso``: the UK NESO "Historic generation mix and carbon intensity" CSV
  (df_fuel_ckan.csv).  Read: ``DATETIME`` (UTC) and ``CARBON_INTENSITY``
  (gCO2/kWh); each row holds half an hour.  No price column either.

Problems are kept per row with the file's line number: a bad row is
refused with its reason; overlaps (a second value for a time already
covered) are refused; negative values are refused for CO2 and kept for
prices (spot prices do go negative), both reported; times out of order
and gaps are reported; everything else in the file is kept.
"""
from __future__ import annotations

import csv
import datetime as dt
import io
import math
import os

KINDS = {"co2": "co2_g_per_kwh", "price": "price_per_kwh"}
FORMATS = ("csv", "emaps", "neso")
HOUR_NS = 3600 * 10**9

#: the columns each format reads: (time, value, estimated or None,
#: source or None), compared without case and spaces
EMAPS_TIME = "Datetime (UTC)"
EMAPS_CO2 = "Carbon Intensity gCO₂eq/kWh (direct)"
EMAPS_EST = "Data Estimated"
EMAPS_SOURCE = "Data Source"
NESO_TIME = "DATETIME"
NESO_CO2 = "CARBON_INTENSITY"
#: how long one row holds, for the formats with a fixed step
STEP_NS = {"emaps": HOUR_NS, "neso": HOUR_NS // 2}


class FileError(Exception):
    """A file that cannot be read at all (no usable header, empty)."""


class Problem:
    """One reported row: line (1 = the header), what (bad row, overlap,
    negative, out of order, gap), kept (whether the row's value was kept)."""
    __slots__ = ("line", "what", "message", "kept")

    def __init__(self, line: int, what: str, message: str, kept: bool):
        self.line, self.what, self.message, self.kept = line, what, message, kept

    def as_dict(self) -> dict:
        return {"line": self.line, "problem": self.what, "message": self.message,
                "kept": self.kept}

    def __repr__(self) -> str:
        return f"Problem({self.line}, {self.what!r}, {self.message!r})"


class Interval:
    """One value: [start_ns, end_ns) at value_per_kwh."""
    __slots__ = ("line", "start_ns", "end_ns", "value_per_kwh", "source", "estimated")

    def __init__(self, line, start_ns, end_ns, value, source, estimated):
        self.line, self.start_ns, self.end_ns = line, start_ns, end_ns
        self.value_per_kwh, self.source, self.estimated = value, source, estimated

    def key(self) -> tuple:
        return (self.start_ns, self.end_ns, self.value_per_kwh, self.source,
                self.estimated)


def _norm(name: str) -> str:
    return "".join(name.split()).lower().replace("co2", "co₂")


def parse_time(text: str) -> int:
    """ISO 8601 time -> ns since the epoch; no offset means UTC."""
    t = text.strip()
    if not t:
        raise ValueError("empty time")
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    try:
        d = dt.datetime.fromisoformat(t)
    except ValueError:
        raise ValueError(f"time {text.strip()!r} is not ISO 8601 (e.g. "
                         "2025-11-01T13:00:00Z)") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=dt.timezone.utc)
    return int(d.timestamp()) * 10**9 + d.microsecond * 1000


def _value(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"value {text.strip()!r} is not a number") from None
    if not math.isfinite(v):
        raise ValueError(f"value {text.strip()!r} is not a finite number")
    return v


_TRUE = {"1", "true", "yes", "t", "y"}
_FALSE = {"0", "false", "no", "f", "n"}


def _flag(text) -> int | None:
    if text is None or not text.strip():
        return None
    t = text.strip().lower()
    if t in _TRUE:
        return 1
    if t in _FALSE:
        return 0
    raise ValueError(f"estimated flag {text.strip()!r} is not true/false or 1/0")


def _columns(header: list, fmt: str, what: str) -> tuple:
    """(time, value, estimated, source) column indexes of a header."""
    names = [_norm(h) for h in header]

    def find(name, required=True):
        n = _norm(name)
        if n in names:
            return names.index(n)
        if required:
            raise FileError(f"{fmt} file: no column {name!r} in the header "
                            f"(found: {', '.join(h.strip() for h in header)})")
        return None
    if fmt == "csv":
        return find("time_utc"), find("value"), find("estimated", False), None
    if what == "price":
        raise FileError(f"the {fmt} layout has no price column: import prices "
                        "with --format csv (time_utc,value)")
    if fmt == "emaps":
        return (find(EMAPS_TIME), find(EMAPS_CO2), find(EMAPS_EST, False),
                find(EMAPS_SOURCE, False))
    return find(NESO_TIME), find(NESO_CO2), None, None


def _rows(text: str, fmt: str, what: str):
    """(line number, cells) of the data rows, and the column indexes."""
    if text.startswith("\ufeff"):
        text = text[1:]
    reader = csv.reader(io.StringIO(text))
    header = None
    for header in reader:
        if any(c.strip() for c in header):
            break
    if not header or not any(c.strip() for c in header):
        raise FileError("the file is empty (a header line is needed)")
    cols = _columns(header, fmt, what)
    out = [(reader.line_num, row) for row in reader if any(c.strip() for c in row)]
    return cols, out


def read(text: str, fmt: str, what: str, file_name: str) -> tuple[list, list]:
    """(intervals, problems) of a file's text.  fmt: csv, emaps or neso;
    what: co2 or price.  The intervals are in time order, never
    overlapping."""
    if fmt not in FORMATS:
        raise FileError(f"unknown format {fmt!r} (allowed: {', '.join(FORMATS)})")
    if what not in KINDS:
        raise FileError(f"unknown kind {what!r} (allowed: co2, price)")
    (ti, vi, ei, si), rows = _rows(text, fmt, what)
    problems: list = []
    parsed = []            # (line, time ns, value or None, estimated, source)
    base = os.path.basename(file_name)
    for line, row in rows:
        try:
            if max(ti, vi) >= len(row):
                raise ValueError(f"{len(row)} column(s), the header has more")
            t = parse_time(row[ti])
            raw = row[vi].strip()
            if not raw and fmt != "csv":
                raise ValueError("no value")
            v = _value(raw) if raw else None
            est = _flag(row[ei]) if ei is not None and ei < len(row) else None
            src = row[si].strip() if si is not None and si < len(row) else ""
        except ValueError as e:
            problems.append(Problem(line, "bad row", str(e), False))
            continue
        if v is not None and v < 0:
            keep = what == "price"
            problems.append(Problem(line, "negative", f"negative value {raw}"
                                    + (" (kept: prices can be negative)" if keep
                                       else " (refused: CO2 intensity cannot be)"),
                                    keep))
            if not keep:
                continue
        source = f"{fmt}:{src}" if src else f"{fmt}:{base}"
        parsed.append((line, t, v, est, source))
    _out_of_order(parsed, problems)
    parsed.sort(key=lambda p: (p[1], p[0]))
    if fmt == "csv":
        ivs = _csv_intervals(parsed, problems)
    else:
        ivs = _fixed_intervals(parsed, STEP_NS[fmt], problems)
    problems.sort(key=lambda p: p.line)
    return ivs, problems


def _out_of_order(parsed: list, problems: list) -> None:
    last = None
    for line, t, *_ in parsed:
        if last is not None and t < last[1]:
            problems.append(Problem(line, "out of order", f"{iso_z(t)} comes after "
                                    f"{iso_z(last[1])} (line {last[0]}); kept, in "
                                    "time order", True))
        else:
            last = (line, t)


def _overlap(line, t, prev, problems) -> None:
    problems.append(Problem(line, "overlap", f"{iso_z(t)} is already covered by "
                            f"line {prev.line} ({iso_z(prev.start_ns)} .. "
                            f"{iso_z(prev.end_ns)}); refused", False))


def _fixed_intervals(parsed: list, step_ns: int, problems: list) -> list:
    out: list = []
    for line, t, v, est, src in parsed:
        if out and t < out[-1].end_ns:
            _overlap(line, t, out[-1], problems)
            continue
        if out and t > out[-1].end_ns:
            _gap(line, out[-1].end_ns, t, problems)
        out.append(Interval(line, t, t + step_ns, v, src, est))
    return out


def _gap(line, a, b, problems) -> None:
    problems.append(Problem(line, "gap", f"no value from {iso_z(a)} to {iso_z(b)} "
                            "(the static [site] factor applies there)", True))


def _csv_intervals(parsed: list, problems: list) -> list:
    """Each value until the next row's time; the last as long as the one
    before it; an empty value ends the one before (a gap)."""
    kept = []
    for p in parsed:
        if kept and p[1] == kept[-1][1]:
            prev = kept[-1]
            problems.append(Problem(p[0], "overlap", f"{iso_z(p[1])} is already "
                                    f"given on line {prev[0]}; refused", False))
            continue
        kept.append(p)
    out: list = []
    for i, (line, t, v, est, src) in enumerate(kept):
        if i + 1 < len(kept):
            end = kept[i + 1][1]
        elif i > 0:
            end = t + (t - kept[i - 1][1])
        else:
            if v is not None:
                problems.append(Problem(line, "bad row", "a single row: how long "
                                        "its value holds is not known (give the "
                                        "next time, with an empty value)", False))
            break
        if v is None:
            if i + 1 < len(kept):
                _gap(line, t, end, problems)
            continue
        out.append(Interval(line, t, end, v, src, est))
    return out


def iso_z(ns: int) -> str:
    """ns since the epoch as UTC to the second, with a Z."""
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
