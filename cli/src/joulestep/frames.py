"""Load steps and phases from the database as pandas DataFrames for the
analysis/model/plot/export commands, with one ``tag:KEY`` column per job tag.
Column names follow docs/record-format.md (job_id, node, step_id, kind,
energy_cpu_uj, ...); ``user`` is the job's user.  Steps also carry
counted_cpu_uj, counted_dram_uj, counted_total_uj, counted_duration_ns (what
the step adds to totals; nesting.py) and inside_step (the step_id of the
step it ran inside on the same node, or null): sum counted_* over steps,
never energy_* (a batch step's energy includes the srun steps inside it).
Phases carry counted_* columns of their own in the same sense (a phase
inside another phase)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import analysis
from .store import read_frames

class FilterError(ValueError):
    pass


def _tags(conn, df: pd.DataFrame) -> pd.DataFrame:
    if df.empty:
        return df
    t = read_frames.tags(conn)
    t = t[t["step_pk"].isin(df["step_pk"].unique())]
    if t.empty:
        return df
    wide = t.pivot(index="step_pk", columns="key", values="value")
    wide.columns = [f"tag:{c}" for c in wide.columns]
    return df.merge(wide, left_on="step_pk", right_index=True, how="left")


def steps(conn, since_ns=None, until_ns=None,
          cluster=None) -> pd.DataFrame:
    return _tags(conn, read_frames.steps(conn, since_ns, until_ns, cluster))


def phases(conn, since_ns=None, until_ns=None,
           cluster=None) -> pd.DataFrame:
    """One row per phase, with its step's and job's columns.  The phase's
    own energy/duration/time columns replace the step's (energy_cpu_uj,
    energy_dram_uj, energy_gpu_uj, duration_ns, start_ns, end_ns are the
    phase's), and counted_cpu_uj, counted_dram_uj, counted_total_uj,
    counted_duration_ns, counted_gpu_uj are what the phase adds to a sum
    over phases (analysis.counted_phases: a phase inside another one is part
    of its measurement)."""
    df = read_frames.phases(conn, since_ns, until_ns, cluster)
    df = df.drop(columns=read_frames.STEP_ONLY)
    df = df.rename(columns={"phase_energy_cpu_uj": "energy_cpu_uj",
                            "phase_energy_dram_uj": "energy_dram_uj",
                            "phase_energy_gpu_uj": "energy_gpu_uj",
                            "phase_duration_ns": "duration_ns",
                            "phase_start_ns": "start_ns",
                            "phase_end_ns": "end_ns"})
    if not df.empty:
        df = analysis.counted_phases(df).drop(columns="_outer_seq")
    return _tags(conn, df)


def parse_where(items) -> list[tuple[str, str]]:
    out = []
    for it in items or ():
        if "=" not in it or it.startswith("="):
            raise FilterError(f"--where {it!r}: expected KEY=VALUE, e.g. tier=dram "
                              "or policy=io-dvfs")
        k, v = it.split("=", 1)
        out.append((k.strip(), v))
    return out


def apply_where(df: pd.DataFrame, where: list[tuple[str, str]]) -> pd.DataFrame:
    """Keep rows where column KEY (or tag:KEY) equals VALUE (as text)."""
    for k, v in where:
        col = k if k in df.columns else f"tag:{k}" if f"tag:{k}" in df.columns else None
        if col is None:
            if df.empty:
                continue
            tags = sorted(c[4:] for c in df.columns if c.startswith("tag:"))
            raise FilterError(f"--where {k}={v}: no column or tag {k!r} (tags present:"
                              f" {', '.join(tags) or 'none'})")
        df = df[df[col].astype(str) == v]
    return df


def column(df: pd.DataFrame, by: str) -> str:
    """Resolve a --by value (a column or tag:KEY) to a column of df."""
    if by in df.columns:
        return by
    if not by.startswith("tag:") and f"tag:{by}" in df.columns:
        return f"tag:{by}"
    tags = sorted(c for c in df.columns if c.startswith("tag:"))
    raise FilterError(f"--by {by}: not recorded here; use one of: "
                      f"{', '.join(tags + ['policy', 'user', 'node', 'node_model'])}")


def records(df: pd.DataFrame) -> list[dict]:
    """JSON-ready rows: NaN/NA -> None, numpy scalars -> Python."""
    out = []
    for row in df.to_dict(orient="records"):
        r = {}
        for k, v in row.items():
            if isinstance(v, (np.integer,)):
                v = int(v)
            elif isinstance(v, (np.floating, float)):
                v = None if not np.isfinite(v) else float(v)
            elif isinstance(v, np.bool_):
                v = bool(v)
            elif v is pd.NA or v is pd.NaT:
                v = None
            r[str(k)] = v
        out.append(r)
    return out


def header(col: str) -> str:
    """A table's header for a column: its name in JSON and CSV (issue 25:
    the table wrote energy_j_sd for energy_j_std and gib/s for
    throughput_gibs, two names for one figure), upper case like every other
    table header of the CLI (`job`, `report`) and of sacct's."""
    return str(col).upper()


def frame_table(df: pd.DataFrame, prefer: list[str] | None = None,
                width: int = 80) -> str:
    """Render a DataFrame in <= width columns: the preferred columns first,
    as many as fit; the rest are named in a footnote."""
    from .output import table
    from .render_units import column_unit, fmt
    units = {c: column_unit(c) for c in df.columns}
    cols = list(dict.fromkeys(c for c in (prefer or list(df.columns))
                              if c in df.columns))
    recs = records(df)

    def cell(v, c):
        if v is None:
            return "-"
        if isinstance(v, bool):
            return "yes" if v else ""
        if isinstance(v, (int, float)):
            unit, factor = units[c]
            return fmt(v * factor if unit else v, unit)
        return str(v)
    chosen, used = [], 0
    for c in cols:
        w = max([len(header(c))] + [len(cell(r[c], c)) for r in recs]) + 1
        if used + w > width and chosen:
            continue
        chosen.append(c)
        used += w
    text = table([header(c) for c in chosen],
                 [[cell(r[c], c) for c in chosen] for r in recs],
                 right={i for i, c in enumerate(chosen)
                        if df[c].dtype.kind in "iuf"}, width=width)
    rest = [c for c in df.columns if c not in chosen]
    if rest:
        import textwrap
        text += "\n" + textwrap.fill("more columns with --format json|csv: "
                                     + ", ".join(map(str, rest)), width)
    return text
