"""The store's steps and phases as pandas DataFrames (frames.py shapes
them for the analysis, model, plot and export commands), and its tables
as they are (`joulestep export`).  pandas is imported where used: the
store package is imported by every command."""
from __future__ import annotations

from .read_report import window_conditions

STEP_COLS = (
    "j.job_pk, j.cluster, j.job_id, j.first_seen_ns, j.submit_time_ns, "
    "j.name AS job_name, "
    "j.user_name AS user, j.account, j.partition, s.step_pk, s.step_id, "
    "s.het_component, n.name AS node, s.node_model, s.ntasks, s.nnodes, s.ncpus, "
    "s.policy, s.base_freq_khz, s.start_ns, s.end_ns, "
    "s.duration_ns, s.energy_cpu_uj, s.energy_dram_uj, s.energy_total_uj, "
    "s.exit_code, s.wrap_uncertain, s.counted_cpu_uj, s.counted_dram_uj, "
    "s.counted_total_uj, s.counted_duration_ns, c.step_id AS inside_step, "
    "s.nominal_freq_khz, s.fixed_freq_khz, s.freq_control, s.energy_gpu_uj, "
    "s.total_includes, s.gpu_backend, s.gpus_unmeasured, s.cpu_time_ns")
#: step columns that only make sense per step (dropped from phase rows)
STEP_ONLY = ["energy_cpu_uj", "energy_dram_uj", "energy_total_uj", "duration_ns",
              "start_ns", "end_ns", "counted_cpu_uj", "counted_dram_uj",
              "counted_total_uj", "counted_duration_ns", "energy_gpu_uj", "cpu_time_ns"]
PHASE_COLS = (
    "p.seq, p.kind, p.label, p.depth, p.parent_seq, p.start_ns AS phase_start_ns,"
    " p.end_ns AS phase_end_ns, p.duration_ns AS phase_duration_ns, p.freq_khz, "
    "p.energy_cpu_uj AS phase_energy_cpu_uj, "
    "p.energy_dram_uj AS phase_energy_dram_uj, p.bytes, p.nranks, "
    "p.energy_gpu_uj AS phase_energy_gpu_uj")
FROM = ("FROM steps s JOIN jobs j ON j.job_pk = s.job_pk "
        "JOIN nodes n ON n.node_pk = s.node_pk "
        "LEFT JOIN steps c ON c.step_pk = s.inside_step_pk")




def read_frame(conn, sql: str, params=()):
    """A query's rows as a DataFrame (what pandas.read_sql_query makes of
    a sqlite3 connection), on either engine (db.py)."""
    import pandas as pd
    cur = conn.execute(sql, params)
    return pd.DataFrame.from_records(cur.fetchall(), coerce_float=True,
                                     columns=[d[0] for d in cur.description])


def _where(since_ns, until_ns, cluster):
    w, a = window_conditions(since_ns, until_ns, cluster)
    return (" WHERE " + " AND ".join(w)) if w else "", a


def tags(conn):
    """Every step tag: step_pk, key, value."""
    return read_frame(conn, "SELECT step_pk, key, value FROM step_tags")


def steps(conn, since_ns=None, until_ns=None, cluster=None):
    """STEP_COLS of the steps started in the window, in step order."""
    w, a = _where(since_ns, until_ns, cluster)
    # ORDER BY: the same rows in the same order on both engines
    return read_frame(conn, f"SELECT {STEP_COLS} {FROM}{w} ORDER BY s.step_pk", a)


def phases(conn, since_ns=None, until_ns=None, cluster=None):
    """STEP_COLS and PHASE_COLS of every phase of the window's steps."""
    w, a = _where(since_ns, until_ns, cluster)
    return read_frame(
        conn, f"SELECT {STEP_COLS}, {PHASE_COLS} {FROM} "
        f"JOIN phases p ON p.step_pk = s.step_pk{w} ORDER BY s.step_pk, p.seq", a)


def table(conn, name: str, since_ns=None, until_ns=None):
    """Every row of one table (name: checked by the caller against its
    fixed list; values are bound), a steps table limited to the window."""
    where, args = "", []
    if name in ("steps",) and (since_ns is not None or until_ns is not None):
        where = " WHERE start_ns >= ? AND start_ns < ?"
        args = [since_ns or 0, until_ns if until_ns is not None else 1 << 62]
    return read_frame(conn, f"SELECT * FROM {name}{where} ORDER BY 1, 2, 3", args)
