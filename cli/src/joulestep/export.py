"""`joulestep export`: database tables to CSV, JSON or Parquet.

Raw tables keep their schema column names (sql/001_init.sql).  Two joined
views are offered for analysis outside joulestep: `steps_full` and
`phases_full` (frames.py: job, node and tag:KEY columns added)."""
from __future__ import annotations

import json
import pathlib
import sys

RAW = ("nodes", "jobs", "steps", "step_tags", "step_zones", "phases",
       "phase_ranks", "power_models")
VIEWS = ("steps_full", "phases_full")
TABLES = RAW + VIEWS
EXT = {"csv": ".csv", "json": ".json", "parquet": ".parquet"}


class ExportError(ValueError):
    pass


def frame(conn, name: str, since_ns=None, until_ns=None):
    from . import frames
    from .store import read_frames
    if name == "steps_full":
        return frames.steps(conn, since_ns, until_ns)
    if name == "phases_full":
        return frames.phases(conn, since_ns, until_ns)
    if name not in RAW:
        raise ExportError(f"unknown table {name!r}: allowed {', '.join(TABLES)}")
    # table name checked against the fixed list above; values are bound
    df = read_frames.table(conn, name, since_ns, until_ns)
    # INTEGER columns with NULLs (e.g. steps.inside_step_pk) would come back
    # as floats ("3.0"): keep them integers, NULL as missing
    for col, ctype in conn.columns(name):
        if ctype == "INTEGER" and df[col].dtype.kind == "f":
            df[col] = df[col].astype("Int64")
    return df


def write(df, fmt: str, out) -> None:
    """Write df to a path (str/Path) or, for csv/json, a text stream."""
    from .frames import records
    if fmt == "csv":
        df.to_csv(out, index=False, lineterminator="\n")
    elif fmt == "json":
        text = json.dumps(records(df), indent=1) + "\n"
        if hasattr(out, "write"):
            out.write(text)
        else:
            pathlib.Path(out).write_text(text, encoding="utf-8")
    elif fmt == "parquet":
        if hasattr(out, "write"):
            raise ExportError("Parquet is binary: give --output FILE or DIR")
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ExportError("Parquet needs pyarrow: pip install 'joulestep[parquet]'") \
                from None
        df.to_parquet(out, index=False)
    else:
        raise ExportError(f"format {fmt!r}: allowed csv, json, parquet")


def export(conn, tables, fmt: str, output=None, since_ns=None, until_ns=None) -> list[str]:
    """Export tables; returns the files written ('-' for stdout)."""
    tables = list(tables) or ["steps_full"]
    for t in tables:
        if t not in TABLES:
            raise ExportError(f"unknown table {t!r}: allowed {', '.join(TABLES)}")
    written = []
    if output is None:
        if len(tables) > 1:
            raise ExportError("several tables: give --output DIR")
        write(frame(conn, tables[0], since_ns, until_ns), fmt, sys.stdout)
        return ["-"]
    out = pathlib.Path(output)
    if len(tables) > 1 or out.is_dir():
        out.mkdir(parents=True, exist_ok=True)
        for t in tables:
            p = out / (t + EXT[fmt])
            write(frame(conn, t, since_ns, until_ns), fmt, p)
            written.append(str(p))
    else:
        write(frame(conn, tables[0], since_ns, until_ns), fmt, out)
        written.append(str(out))
    return written
