"""Strategy comparisons from recorded steps and phases (pure pandas).

docs/science.md: checkpointing (Wilkins et al. 2022), TP/DC/DN (Dorier et al.
2016, Yildiz et al. 2014), compressed dumps (Wilkins 2023 Fig. 2.6). Every function takes DataFrames
whose columns are named as in docs/record-format.md and returns a DataFrame
ready to print. Units are in column names: *_j joules, *_s seconds, *_w
watts, *_gib GiB (2**30 bytes), *_gibs GiB/s. Spread is the sample standard
deviation (ddof=1; NaN with a single value).

Interface summary:
  attach_tags(jobs, df, on=None) -> df with one 'tag:KEY' column per job tag
  derived(df) -> df + energy_cpu_j, energy_dram_j, energy_j, duration_s,
                 gib, throughput_gibs, j_per_gib, power_w
  checkpoint_runs(phases, by="tag:strategy", ...) -> one row per run x part
  compare_checkpointing(phases, by="tag:strategy", scaling="weak", ...)
  strategy_ratios(table, by, baseline, metrics=..., on=...)
  compare_io_approaches(steps, by="tag:approach", run="job_id")
  compare_dumps(phases, compressor="tag:compressor", error_bound="tag:error_bound", ...)
  policy_saving(dumps, base_policy="monitor", policy="policy")
  compare_generic(df, by, metrics=("energy_j", "duration_s"), baseline=None)

A "run" is one repetition of an experiment: one job. The `run` parameter
names its column; default job_pk when the frame has it, else job_id.
Which column names the strategy is a parameter (`by`), so `--by tag:KEY`
maps straight onto it after attach_tags.
"""
from __future__ import annotations

import json
from typing import Iterable, Optional, Sequence

import numpy as np
import pandas as pd

from . import nesting

GIB = float(1 << 30)
_JOB_KEYS = ("job_pk", "cluster", "job_id", "first_seen_ns")

__all__ = ["attach_tags", "derived", "checkpoint_runs", "compare_checkpointing",
           "strategy_ratios", "compare_io_approaches", "compare_dumps", "policy_saving",
           "compare_generic", "GIB"]


def _need(df: pd.DataFrame, cols: Iterable[str], what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: missing column(s) {', '.join(missing)} "
                         f"(have: {', '.join(map(str, df.columns))})")


def attach_tags(jobs: pd.DataFrame, df: pd.DataFrame, on: Optional[Sequence[str]] = None
                ) -> pd.DataFrame:
    """Copy each job's tags onto df's rows as columns 'tag:KEY'.

    jobs: a `tags` column holding a dict or a JSON object string (NULL = no
    tags), and the key columns. on: join columns; default those of job_pk,
    cluster, job_id, first_seen_ns present in both frames (job_pk alone
    when both have it). Rows of df whose job has no such tag get a missing value (None/NaN)."""
    _need(jobs, ["tags"], "jobs")
    if on is None:
        on = ["job_pk"] if "job_pk" in jobs.columns and "job_pk" in df.columns else \
            [k for k in _JOB_KEYS[1:] if k in jobs.columns and k in df.columns]
    if not on:
        raise ValueError("attach_tags: no common key column (job_pk, cluster, job_id, "
                         "first_seen_ns) between jobs and the other frame")

    def parse(v):
        if v is None or (isinstance(v, float) and np.isnan(v)):
            return {}
        if isinstance(v, dict):
            return v
        try:
            d = json.loads(v)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"jobs.tags: not a JSON object: {v!r}") from exc
        if not isinstance(d, dict):
            raise ValueError(f"jobs.tags: not a JSON object: {v!r}")
        return d

    tags = [parse(v) for v in jobs["tags"]]
    keys = sorted({k for t in tags for k in t})
    t = jobs[list(on)].copy()
    for k in keys:
        t[f"tag:{k}"] = [d.get(k) for d in tags]
    t = t.drop_duplicates(subset=list(on))
    drop = [c for c in t.columns if c in df.columns and c not in on]
    return df.drop(columns=drop).merge(t, on=list(on), how="left")


def derived(df: pd.DataFrame) -> pd.DataFrame:
    """Add unit-converted and derived columns to a copy of steps or phases:
    energy_cpu_j, energy_dram_j (NULL DRAM -> 0), energy_j (CPU + DRAM),
    duration_s, power_w = energy_j/duration_s; when `bytes` exists: gib,
    throughput_gibs = gib/duration_s, j_per_gib = energy_j/gib (NaN without
    bytes); when energy_gpu_uj exists: gpu_j (_gpu_j)."""
    _need(df, ["energy_cpu_uj", "duration_ns"], "energy")
    d = df.copy()
    d["energy_cpu_j"] = d["energy_cpu_uj"].astype(float) / 1e6
    d["energy_dram_j"] = (d["energy_dram_uj"].astype(float).fillna(0.0) / 1e6
                          if "energy_dram_uj" in d.columns else 0.0)
    d["energy_j"] = d["energy_cpu_j"] + d["energy_dram_j"]
    if "energy_gpu_uj" in d.columns:
        d["gpu_j"] = _gpu_j(d)
    d["duration_s"] = d["duration_ns"].astype(float) / 1e9
    with np.errstate(divide="ignore", invalid="ignore"):
        d["power_w"] = d["energy_j"] / d["duration_s"].where(d["duration_s"] > 0)
        if "bytes" in d.columns:
            d["gib"] = d["bytes"].astype(float) / GIB
            d["throughput_gibs"] = d["gib"] / d["duration_s"].where(d["duration_s"] > 0)
            d["j_per_gib"] = d["energy_j"] / d["gib"].where(d["gib"] > 0)
    return d


def _gpu_j(d: pd.DataFrame) -> pd.Series:
    """The GPUs' energy (J) of each row: NaN where its step had GPUs without
    a figure (MIG, shared, uncertain, not measured: never summed as 0), 0
    where its step had none."""
    e = pd.to_numeric(d["energy_gpu_uj"], errors="coerce").astype(float) / 1e6
    had = pd.Series(False, index=d.index)
    for c in ("gpu_backend", "gpus_unmeasured"):
        if c in d.columns:
            had |= d[c].notna()
    return e.where(e.notna() | had, 0.0)


def with_gpus(d: pd.DataFrame) -> bool:
    """Do the rows (derived) hold any GPU: a GPU figure or a GPU without one?"""
    return "gpu_j" in d.columns and bool((d["gpu_j"].isna() | (d["gpu_j"] != 0)).any())


def _nan_sum(s: pd.Series) -> float:
    """Sum, NaN when a part is NaN (a GPU without a figure is not 0 J)."""
    return float(s.sum()) if s.notna().all() else np.nan


def _nan_mean(s: pd.Series) -> float:
    return float(s.mean()) if s.notna().all() else np.nan


def _run_col(df: pd.DataFrame, run: Optional[str]) -> str:
    """The column that identifies a run: `run` when given, else job_pk when
    present (unique across clusters and recycled job IDs), else job_id."""
    if run is not None:
        return run
    return "job_pk" if "job_pk" in df.columns else "job_id"


def _agg_mean_std(g, metrics: Sequence[str]) -> pd.DataFrame:
    out = g[list(metrics)].agg(["mean", "std"])
    out.columns = [m if s == "mean" else f"{m}_std" for m, s in out.columns]
    out.insert(0, "runs", g.size())
    return out.reset_index()


# ---------------------------------------------------------------- nesting

#: columns that identify one record (the phases of one step on one node)
_RECORD_KEYS = ("job_pk", "cluster", "job_id", "first_seen_ns", "node", "step_id",
                "het_component")
COUNTED = ("counted_cpu_uj", "counted_dram_uj", "counted_total_uj", "counted_duration_ns")


def _uj(v):
    return None if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA \
        else int(v)


def _count_record(g: pd.DataFrame, kinds) -> dict:
    """index -> (cpu, dram, total, duration, outer seq[, gpu]) for one
    record; gpu (with an energy_gpu_uj column): the same rule on the GPUs'
    figure alone, so a phase inside another counts its GPU energy once."""
    dram = g["energy_dram_uj"] if "energy_dram_uj" in g.columns else [None] * len(g)
    ph = [nesting.Phase(i, _uj(q), _uj(par), k, int(d), _uj(c), _uj(m))
          for i, q, par, k, d, c, m in zip(g.index, g["seq"], g["parent_seq"], g["kind"],
                                           g["duration_ns"], g["energy_cpu_uj"], dram)]
    out = {i: (c.cpu_uj, c.dram_uj, c.total_uj, c.duration_ns, o)
           for i, (c, o) in nesting.count_phases(ph, kinds).items()}
    if "energy_gpu_uj" not in g.columns:
        return out
    gp = [nesting.Phase(i, _uj(q), _uj(par), k, int(d), _uj(e), None)
          for i, q, par, k, d, e in zip(g.index, g["seq"], g["parent_seq"], g["kind"],
                                        g["duration_ns"], g["energy_gpu_uj"])]
    gpu = {i: c.cpu_uj for i, (c, _o) in nesting.count_phases(gp, kinds).items()}
    return {i: v + (gpu.get(i),) for i, v in out.items()}


def counted_phases(phases: pd.DataFrame, kinds: Optional[Iterable[str]] = None
                   ) -> pd.DataFrame:
    """The phases (of `kinds`, default all) with what each adds to a sum:
    counted_cpu_uj, counted_dram_uj, counted_total_uj, counted_duration_ns,
    and _outer_seq (seq of the outermost enclosing phase of those kinds,
    itself when outermost).  A phase inside another one (parent_seq, within
    one record: step_pk, else job/node/step columns) is part of its
    measurement (RAPL measures the node): the enclosing phase counts its own
    figures minus those of the phases of `kinds` inside it, which count
    their own (nesting.exclusive, the rule for steps inside steps).  With
    `kinds`, a phase's parent is its nearest enclosing phase of those kinds:
    a phase of another kind stays inside the figure of the phase holding it.
    Without seq/parent_seq columns every phase counts its own figures."""
    if not phases.index.is_unique:
        phases = phases.reset_index(drop=True)
    d = _own_counted(phases if kinds is None else
                     phases[phases["kind"].isin(list(kinds))])
    if d.empty or not {"seq", "parent_seq"} <= set(phases.columns) \
            or not phases["parent_seq"].notna().any():
        return d
    res: dict = {}
    for g in _nested_records(phases):
        res.update(_count_record(g, kinds))
    cols = list(COUNTED) + ["_outer_seq"] + (
        ["counted_gpu_uj"] if "energy_gpu_uj" in phases.columns else [])
    upd = pd.DataFrame.from_dict(res, orient="index", columns=cols)
    for c in cols:
        d.loc[upd.index, c] = upd[c].astype("Int64")
    return d


def _own_counted(p: pd.DataFrame) -> pd.DataFrame:
    """A copy of p whose counted_* are its own figures (nothing nested)."""
    d = p.copy()
    cpu = d["energy_cpu_uj"].astype("Int64")
    dram = d["energy_dram_uj"].astype("Int64") if "energy_dram_uj" in d.columns else \
        pd.Series(pd.NA, index=d.index, dtype="Int64")
    d["counted_cpu_uj"], d["counted_dram_uj"] = cpu, dram
    d["counted_total_uj"] = cpu + dram.fillna(0)
    d["counted_duration_ns"] = d["duration_ns"].astype("Int64")
    if "energy_gpu_uj" in d.columns:
        d["counted_gpu_uj"] = d["energy_gpu_uj"].astype("Int64")
    d["_outer_seq"] = d["seq"].astype("Int64") if "seq" in d.columns else pd.NA
    return d


def _nested_records(phases: pd.DataFrame):
    """The phases of each record (step_pk, else job/node/step columns) that
    has a nested phase, one frame per record."""
    rec = ["step_pk"] if "step_pk" in phases.columns else \
        [c for c in _RECORD_KEYS if c in phases.columns]
    if not rec:
        yield phases
        return
    key = pd.MultiIndex.from_frame(phases[rec].astype(str))
    src = phases[key.isin(key[phases["parent_seq"].notna().to_numpy()])]
    for _, g in src.groupby(rec, dropna=False, sort=False):
        yield g


def _as_counted(d: pd.DataFrame) -> pd.DataFrame:
    """Counted figures in place of the measured ones (for sums)."""
    if "counted_gpu_uj" in d.columns:
        d = d.drop(columns=["energy_gpu_uj"], errors="ignore")
    d = d.drop(columns=["energy_cpu_uj", "energy_dram_uj", "duration_ns"], errors="ignore")
    return d.rename(columns={"counted_cpu_uj": "energy_cpu_uj",
                             "counted_dram_uj": "energy_dram_uj",
                             "counted_gpu_uj": "energy_gpu_uj",
                             "counted_duration_ns": "duration_ns"})


# ---------------------------------------------------------------- checkpoint

def checkpoint_runs(phases: pd.DataFrame, by: str = "tag:strategy", run: Optional[str] = None,
                    local_kind: str = "checkpoint", flush_kind: str = "flush") -> pd.DataFrame:
    """One row per (run, part) for checkpoint experiments (Wilkins et al. 2022 Alg. 1).

    phases: columns `by`, `run`, kind, energy_cpu_uj, energy_dram_uj,
    duration_ns, bytes, nranks; label or seq (optional, to tell repeated
    checkpoints apart). Rows of other kinds are ignored.
    For each run and phase instance (kind, label) the energies, bytes and
    nranks (each node's record counts its own ranks) are summed over nodes
    and the duration is the longest node's; then per kind energies, bytes
    and durations are summed (nranks: the largest instance). part 'local' = local_kind (the blocking phase;
    for synchronous C/R it is the direct write to the PFS), 'flush' =
    flush_kind (asynchronous flush), 'total' = local + flush: energies add,
    bytes = the larger of the two (the same checkpoint data), i.e.
    throughput "until checkpoints are written to the PFS" (Fig. 4).
    Every joule and second is counted once (counted_phases): a flush marked
    inside its checkpoint phase (parent_seq) is part of the checkpoint's
    measurement, so 'local' is the checkpoint's figure minus the flush's and
    'total' the checkpoint's own.  total's duration spans the instance's
    first start to its last end (checkpoint start to flush end; slowest
    node; summed over instances) when start_ns/end_ns are given, else the
    parts' durations add.  An instance is a label, else the outermost
    checkpoint/flush phase enclosing the phase.
    Columns: by, run, part, nranks, energy_cpu_j, energy_dram_j, energy_j
    (CPU + DRAM), gpu_j (only when a phase's step had GPUs: the GPUs'
    energy, counted once like the rest; NaN when a GPU had no figure),
    duration_s, gib, throughput_gibs, j_per_gib, gib_per_rank."""
    run = _run_col(phases, run)
    _need(phases, [by, run, "kind", "energy_cpu_uj", "duration_ns", "bytes", "nranks"],
          "checkpoint comparison")
    if not phases["kind"].isin([local_kind, flush_kind]).any():
        raise ValueError(f"no phase of kind {local_kind!r} or {flush_kind!r}")
    p = derived(_as_counted(counted_phases(phases, (local_kind, flush_kind))))
    p["_inst"] = _instances(p)
    gpu = {"gpu_j": ("gpu_j", _nan_sum)} if with_gpus(p) else {}
    per_inst = p.groupby([by, run, "kind", "_inst"], dropna=False).agg(
        energy_cpu_j=("energy_cpu_j", "sum"), energy_dram_j=("energy_dram_j", "sum"),
        duration_s=("duration_s", "max"), gib=("gib", lambda s: s.sum(min_count=1)),
        nranks=("nranks", "sum"), **gpu).reset_index()
    per_kind = per_inst.groupby([by, run, "kind"], dropna=False).agg(
        energy_cpu_j=("energy_cpu_j", "sum"), energy_dram_j=("energy_dram_j", "sum"),
        duration_s=("duration_s", "sum"), gib=("gib", lambda s: s.sum(min_count=1)),
        nranks=("nranks", "max"), **gpu).reset_index()
    per_kind["part"] = per_kind["kind"].map({local_kind: "local", flush_kind: "flush"})
    tot = per_kind.groupby([by, run], dropna=False).agg(
        energy_cpu_j=("energy_cpu_j", "sum"), energy_dram_j=("energy_dram_j", "sum"),
        duration_s=("duration_s", "sum"), gib=("gib", "max"),
        nranks=("nranks", "max"), **gpu).reset_index()
    span = _span_s(p, by, run)
    if span is not None:
        tot = tot.drop(columns="duration_s").merge(span, on=[by, run], how="left")
    tot["part"] = "total"
    out = pd.concat([per_kind.drop(columns="kind"), tot], ignore_index=True)
    out["energy_j"] = out["energy_cpu_j"] + out["energy_dram_j"]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["throughput_gibs"] = out["gib"] / out["duration_s"].where(out["duration_s"] > 0)
        out["j_per_gib"] = out["energy_j"] / out["gib"].where(out["gib"] > 0)
        out["gib_per_rank"] = out["gib"] / out["nranks"].where(out["nranks"] > 0)
    cols = [by, run, "part", "nranks", "energy_cpu_j", "energy_dram_j", "energy_j",
            *gpu, "duration_s", "gib", "throughput_gibs", "j_per_gib", "gib_per_rank"]
    order = {"local": 0, "flush": 1, "total": 2}
    out = out[cols].sort_values([by, run, "part"], key=lambda s: s.map(order) if s.name == "part"
                                else s).reset_index(drop=True)
    return out


def _instances(p: pd.DataFrame) -> list:
    """Checkpoint instance of each phase row: its label, else '#<seq of its
    outermost enclosing checkpoint/flush phase>'."""
    lab = p["label"] if "label" in p.columns else pd.Series(None, index=p.index)
    return [f"#{o}" if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v))
            else str(v) for v, o in zip(lab, p["_outer_seq"])]


def _span_s(p: pd.DataFrame, by: str, run: str):
    """Per (by, run): sum over instances of the slowest record's span (last
    end - first start) in s; None without start_ns/end_ns."""
    if not {"start_ns", "end_ns"} <= set(p.columns) or \
            p[["start_ns", "end_ns"]].isna().any().any():
        return None
    rec = [c for c in ("node", "step_id", "het_component") if c in p.columns]
    g = p.groupby([by, run, "_inst"] + rec, dropna=False).agg(
        s=("start_ns", "min"), e=("end_ns", "max"))
    g["duration_s"] = (g["e"] - g["s"]).astype(float) / 1e9
    per = g.groupby(level=[0, 1, 2], dropna=False)["duration_s"].max()
    return per.groupby(level=[0, 1], dropna=False).sum().reset_index()


CKPT_METRICS = ("energy_cpu_j", "energy_dram_j", "energy_j", "duration_s",
                "throughput_gibs", "j_per_gib")


def compare_checkpointing(phases: pd.DataFrame, by: str = "tag:strategy",
                          scaling: str = "weak", run: Optional[str] = None,
                          local_kind: str = "checkpoint", flush_kind: str = "flush",
                          size_decimals: int = 2) -> pd.DataFrame:
    """Weak- or strong-scaling table: mean and spread over repetitions.

    scaling='weak': rows grouped by (by, part, gib_per_rank, nranks);
    scaling='strong': by (by, part, total_gib, nranks). Sizes are rounded
    to `size_decimals` GiB so repetitions group together. Columns: the
    group columns, runs, then for each of energy_cpu_j, energy_dram_j,
    energy_j, duration_s, throughput_gibs, j_per_gib its mean and <m>_std;
    gpu_j (the GPUs' mean, NaN when a run's GPUs lack a figure) when the
    phases' steps had GPUs. Parts without bytes (NULL) show NaN throughput
    and J/GiB."""
    if scaling not in ("weak", "strong"):
        raise ValueError(f"scaling {scaling!r}: allowed 'weak', 'strong'")
    run = _run_col(phases, run)
    r = checkpoint_runs(phases, by=by, run=run, local_kind=local_kind, flush_kind=flush_kind)
    # size of the experiment: taken from the run's total row for every part
    size = r[r["part"] == "total"].set_index([by, run])[["gib", "gib_per_rank"]]
    r = r.drop(columns=["gib_per_rank"]).join(
        size.rename(columns={"gib": "total_gib"}), on=[by, run])
    r["total_gib"] = r["total_gib"].round(size_decimals)
    r["gib_per_rank"] = r["gib_per_rank"].round(size_decimals)
    sizecol = "gib_per_rank" if scaling == "weak" else "total_gib"
    keys = [by, "part", sizecol, "nranks"]
    g = r.groupby(keys, dropna=False)
    out = _agg_mean_std(g, CKPT_METRICS)
    if "gpu_j" in r.columns:    # a group with a run whose GPUs have no figure: NaN
        out.insert(out.columns.get_loc("energy_j_std") + 1, "gpu_j",
                   g["gpu_j"].apply(_nan_mean).to_numpy())
    order = {"local": 0, "flush": 1, "total": 2}
    return out.sort_values(keys, key=lambda s: s.map(order) if s.name == "part" else s
                           ).reset_index(drop=True)


def strategy_ratios(table: pd.DataFrame, by: str, baseline,
                    metrics: Sequence[str] = ("energy_j", "throughput_gibs", "j_per_gib"),
                    on: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """Ratio of each strategy's mean metrics to the baseline strategy's, row
    by row on the other key columns `on` (default: part, the size column and
    nranks, whichever exist). Columns: on, by, <metric>_ratio. The baseline's
    own rows are left out; rows without a matching baseline are dropped."""
    _need(table, [by] + list(metrics), "ratios")
    if on is None:
        on = [c for c in ("part", "gib_per_rank", "total_gib", "nranks") if c in table.columns]
    if baseline not in set(table[by]):
        raise ValueError(f"baseline {baseline!r} not among {by} values "
                         f"{sorted(map(str, set(table[by])))}")
    base = table[table[by] == baseline][list(on) + list(metrics)]
    other = table[table[by] != baseline][list(on) + [by] + list(metrics)]
    m = other.merge(base, on=list(on), suffixes=("", "_base"))
    out = m[list(on) + [by]].copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in metrics:
            out[f"{k}_ratio"] = m[k] / m[f"{k}_base"]
    return out.reset_index(drop=True)


# ---------------------------------------------------------------- TP/DC/DN

_AUX_STEPS = {"batch", "extern", "interactive"}


def compare_io_approaches(steps: pd.DataFrame, by: str = "tag:approach",
                          run: Optional[str] = None) -> pd.DataFrame:
    """Dorier Table 2 / Fig. 2 per I/O approach, mean over runs.

    steps: columns `by`, `run`, node, energy_cpu_uj, energy_dram_uj,
    duration_ns; optional start_ns/end_ns (run time = last end - first
    start over the run's steps, else the longest step), step_id (when a run
    has numbered steps, batch/extern/interactive steps are left out: they
    measure the same node packages again), cpu_usage (0..1, mean) or
    cpu_time_ns with ncpus (usage = cpu_time/(duration*ncpus)).
    Per run: energy_j = sum over steps; per-node energy = sum per node, then
    node_mean_j, node_min_j, node_max_j, node_std_j over nodes; runtime_s;
    avg_power_w = energy_j/runtime_s. Output: one row per approach with
    runs, each of those means, energy_j_std and runtime_s_std (over runs),
    and cpu_usage when recorded."""
    run = _run_col(steps, run)
    _need(steps, [by, run, "node", "energy_cpu_uj", "duration_ns"], "I/O approach comparison")
    gpus = "energy_gpu_uj" in steps.columns and bool(
        steps["energy_gpu_uj"].notna().any()
        or steps.get("gpu_not_measured", pd.Series(dtype=bool)).any())
    s = steps
    if "step_id" in s.columns:
        sid = s["step_id"].astype(str)
        numbered = ~sid.isin(_AUX_STEPS)
        has_num = numbered.groupby(s[run]).transform("any")
        s = s[numbered | ~has_num]
    s = derived(s)
    if "cpu_usage" not in s.columns and {"cpu_time_ns", "ncpus"} <= set(s.columns):
        s["cpu_usage"] = s["cpu_time_ns"].astype(float) / (
            s["duration_ns"].astype(float) * s["ncpus"].astype(float))
    rows = []
    for (key, rid), g in s.groupby([by, run], dropna=False):
        per_node = g.groupby("node")["energy_j"].sum()
        if {"start_ns", "end_ns"} <= set(g.columns):
            rt = (g["end_ns"].max() - g["start_ns"].min()) / 1e9
        else:
            rt = g["duration_s"].max()
        e = per_node.sum()
        row = {by: key, run: rid, "energy_j": e, "runtime_s": rt,
               "avg_power_w": e / rt if rt > 0 else np.nan, "nodes": per_node.size,
               "node_mean_j": per_node.mean(), "node_min_j": per_node.min(),
               "node_max_j": per_node.max(), "node_std_j": per_node.std()}
        if "cpu_usage" in g.columns:
            row["cpu_usage"] = g["cpu_usage"].astype(float).mean()
        if gpus:
            row["gpu_j"] = _run_gpu_j(g)
        rows.append(row)
    r = pd.DataFrame(rows)
    metrics = ["energy_j", "runtime_s", "avg_power_w", "nodes", "node_mean_j", "node_min_j",
               "node_max_j", "node_std_j"] + (["cpu_usage"] if "cpu_usage" in r.columns else [])
    g = r.groupby(by, dropna=False)
    out = g[metrics].mean()
    if gpus:        # an approach with a run whose GPUs were not all measured: NaN
        out["gpu_j"] = g["gpu_j"].apply(lambda x: x.mean(skipna=False))
    out["energy_j_std"] = g["energy_j"].std()
    out["runtime_s_std"] = g["runtime_s"].std()
    out.insert(0, "runs", g.size())
    return out.reset_index()


def _run_gpu_j(g: pd.DataFrame) -> float:
    """A run's GPU energy (J): its steps' energy_gpu_uj (counted, studies.
    counted_steps), NaN when a step of it had GPUs not measured (never
    summed as 0); 0 for a run without GPUs."""
    if "gpu_not_measured" in g.columns and g["gpu_not_measured"].astype(bool).any():
        return np.nan
    return float(g["energy_gpu_uj"].astype(float).fillna(0.0).sum()) / 1e6


# ---------------------------------------------------------------- dumps

_RAW = {"none", "raw", "", "None"}


def compare_dumps(phases: pd.DataFrame, compressor: str = "tag:compressor",
                  error_bound: str = "tag:error_bound", policy: Optional[str] = "policy",
                  run: Optional[str] = None, compress_kind: str = "compress",
                  write_kind: str = "write") -> pd.DataFrame:
    """Compressed vs raw dumps (Wilkins 2023 §2.6.2, Fig. 2.6), mean over runs.

    phases: columns compressor, error_bound, run, kind, energy_cpu_uj,
    energy_dram_uj, duration_ns; `policy` (e.g. merged from steps) is
    optional and splits the rows when present. A run whose compressor is
    NULL, 'none' or 'raw' is a raw (uncompressed) dump.
    Per run: compress_j and write_j = energy summed over phases of that kind
    (and nodes), total_j = compress_j + write_j, duration_s likewise; a
    phase inside another (parent_seq) counts once (counted_phases): a write
    marked inside the compress phase is taken out of compress_j.
    Output per compressor x error bound (x policy): runs, compress_j,
    write_j, total_j, total_j_std, duration_s, raw_write_j (mean write
    energy of the raw runs under the same policy), total_vs_raw =
    total_j/raw_write_j (< 1: compressing first saved energy), ratio (mean
    compression ratio: per run the compress phases' bytes, the raw field,
    over the write phases' bytes, what was written; 1 for raw runs) and
    max_err (largest error any run achieved, from `maxerr:<e>` in the phase
    labels, as bench/dump writes them: `cr:<ratio>:maxerr:<e>`); both NaN
    where the phases do not say (no `bytes` / `label` column, or no value).
    The energies are CPU + DRAM; gpu_j (when the phases' steps had GPUs) is
    the GPUs' energy of compress + write, NaN when a GPU had no figure.
    Raw runs appear as compressor 'raw'."""
    run = _run_col(phases, run)
    _need(phases, [compressor, error_bound, run, "kind", "energy_cpu_uj", "duration_ns"],
          "dump comparison")
    if not phases["kind"].isin([compress_kind, write_kind]).any():
        raise ValueError(f"no phase of kind {compress_kind!r} or {write_kind!r}")
    p = derived(_as_counted(counted_phases(phases, (compress_kind, write_kind))))
    p["_comp"] = p[compressor].map(lambda v: "raw" if v is None or
                                   (isinstance(v, float) and np.isnan(v)) or str(v) in _RAW
                                   else str(v))
    p["_eb"] = np.where(p["_comp"] == "raw", "-", p[error_bound].astype(str))
    pol = [policy] if policy and policy in p.columns else []
    keys = ["_comp", "_eb"] + pol + [run]
    e = p.groupby(keys + ["kind"], dropna=False)["energy_j"].sum().unstack("kind")
    e = e.reindex(columns=[compress_kind, write_kind]).fillna(0.0)
    d = p.groupby(keys, dropna=False)["duration_s"].sum()
    r = pd.DataFrame({"compress_j": e[compress_kind], "write_j": e[write_kind]})
    r["total_j"] = r["compress_j"] + r["write_j"]
    r["duration_s"] = d
    r["ratio"], r["max_err"] = _dump_figures(p, keys, compress_kind, write_kind)
    gpus = with_gpus(p)
    if gpus:    # the GPUs' energy of compress + write, beside total_j (CPU + DRAM)
        r["gpu_j"] = p.groupby(keys, dropna=False)["gpu_j"].agg(_nan_sum)
    r = r.reset_index()
    g = r.groupby(["_comp", "_eb"] + pol, dropna=False)
    out = g[["compress_j", "write_j", "total_j", "duration_s", "ratio"]].mean()
    out["max_err"] = g["max_err"].max()
    out["total_j_std"] = g["total_j"].std()
    if gpus:
        out["gpu_j"] = g["gpu_j"].apply(_nan_mean)
    out.insert(0, "runs", g.size())
    out = out.reset_index()
    raw = r[r["_comp"] == "raw"].groupby(pol, dropna=False)["write_j"].mean() if pol else \
        r.loc[r["_comp"] == "raw", "write_j"].mean()
    if pol:
        out["raw_write_j"] = out[policy].map(raw)
    else:
        out["raw_write_j"] = raw if np.isfinite(raw) else np.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        out["total_vs_raw"] = out["total_j"] / out["raw_write_j"]
    out = out.rename(columns={"_comp": "compressor", "_eb": "error_bound"})
    cols = ["compressor", "error_bound"] + pol + ["runs", "compress_j", "write_j", "total_j",
                                                  "total_j_std", *(["gpu_j"] if gpus else []),
                                                  "duration_s", "raw_write_j",
                                                  "total_vs_raw", "ratio", "max_err"]
    return out[cols].sort_values(["compressor", "error_bound"] + pol).reset_index(drop=True)


def _dump_figures(p: pd.DataFrame, keys: list, compress_kind: str, write_kind: str):
    """Per run (index `keys`): compression ratio = compress bytes / write bytes (raw
    runs: 1 when their write bytes are known) and the largest `maxerr:<e>` of the
    run's phase labels; NaN where unknown."""
    idx = p.groupby(keys, dropna=False).size().index
    ratio = pd.Series(np.nan, index=idx)
    if "bytes" in p.columns:
        b = pd.to_numeric(p["bytes"], errors="coerce").astype(float)
        by = p.assign(_b=b).groupby(keys + ["kind"], dropna=False)["_b"].sum(min_count=1)
        by = by.unstack("kind").reindex(columns=[compress_kind, write_kind])
        w = by[write_kind].where(by[write_kind] > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = by[compress_kind] / w
        raw = by.index.get_level_values(0) == "raw"
        ratio[raw] = np.where(w[raw].notna(), 1.0, np.nan)
    err = pd.Series(np.nan, index=idx)
    if "label" in p.columns:
        e = p["label"].map(lambda v: v if isinstance(v, str) else "").str.extract(
            r"(?:^|:)maxerr:([0-9.]+(?:[eE][+-]?[0-9]+)?)(?::|$)")[0]
        err = p.assign(_e=pd.to_numeric(e, errors="coerce").astype(float)).groupby(
            keys, dropna=False)["_e"].max()
    return ratio.reindex(idx), err.reindex(idx)


def policy_saving(dumps: pd.DataFrame, base_policy: str = "monitor",
                  policy: str = "policy") -> pd.DataFrame:
    """Fig. 2.6: per compressor x error bound, the energy of each policy vs
    the base clock (base_policy). Input: compare_dumps output with a policy
    column. Columns: compressor, error_bound, policy, base_total_j,
    total_j, saving_j = base - policy, saving_pct = 100*(1 - total/base)."""
    _need(dumps, ["compressor", "error_bound", policy, "total_j"], "policy saving")
    if base_policy not in set(dumps[policy]):
        raise ValueError(f"base policy {base_policy!r} not recorded; policies present: "
                         f"{sorted(map(str, set(dumps[policy])))}")
    k = ["compressor", "error_bound"]
    base = dumps[dumps[policy] == base_policy][k + ["total_j"]].rename(
        columns={"total_j": "base_total_j"})
    m = dumps[dumps[policy] != base_policy][k + [policy, "total_j"]].merge(base, on=k)
    m["saving_j"] = m["base_total_j"] - m["total_j"]
    m["saving_pct"] = 100.0 * (1.0 - m["total_j"] / m["base_total_j"])
    return m[k + [policy, "base_total_j", "total_j", "saving_j", "saving_pct"]
             ].reset_index(drop=True)


# ---------------------------------------------------------------- generic

def compare_generic(df: pd.DataFrame, by: str,
                    metrics: Sequence[str] = ("energy_j", "duration_s"),
                    baseline=None) -> pd.DataFrame:
    """Compare any grouping (e.g. 'tag:KEY', 'policy') on steps or phases.

    df: rows with `by` and energy_cpu_uj/duration_ns (derived columns are
    added) or the metric columns themselves. Output per value of `by`: n
    (rows), for each metric its total (<m>_sum), mean, <m>_std, and
    <m>_ratio = mean / baseline's mean.  With counted_cpu_uj,
    counted_dram_uj, counted_total_uj and counted_duration_ns columns
    (frames.steps; counted_phases) the totals, means and spreads are of
    those: a step or phase inside another is counted once in each, so mean
    x n is the total (baseline default: the first value in sorted order).  energy_j is CPU + DRAM; with a counted_gpu_uj column
    (frames.phases; steps: studies.counted_gpu_uj) rows that had GPUs add
    the metric gpu_j, the GPUs' energy (NaN where a GPU had no figure,
    never 0)."""
    if "energy_cpu_uj" in df.columns and "duration_ns" in df.columns:
        d = derived(df)
        if "counted_gpu_uj" in df.columns and with_gpus(d) and "gpu_j" not in metrics:
            metrics = [*metrics, "gpu_j"]
        if set(COUNTED) <= set(df.columns):
            c = derived(_as_counted(df))
            d = d.assign(**{f"counted_{m}": c[m] for m in metrics if m in c.columns})
        df = d
    _need(df, [by] + list(metrics), "comparison")
    g = df.groupby(by, dropna=False)
    out = pd.DataFrame({"n": g.size()})
    for m in metrics:
        col = g[f"counted_{m}" if f"counted_{m}" in df.columns else m]
        out[f"{m}_sum"] = col.agg(_nan_sum) if m == "gpu_j" else col.sum()
        out[m] = col.agg(_nan_mean) if m == "gpu_j" else col.mean()
        out[f"{m}_std"] = col.std()
    out = out.reset_index().sort_values(by).reset_index(drop=True)
    if baseline is None:
        baseline = out[by].iloc[0]
    if baseline not in set(out[by]):
        raise ValueError(f"baseline {baseline!r} not among {by} values")
    b = out.loc[out[by] == baseline].iloc[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        for m in metrics:
            out[f"{m}_ratio"] = out[m] / b[m]
    return out
