"""Glue between the database and analysis.py / models.py / plot.py: pick
the rows, call the pure functions, return DataFrames for the CLI to render.
"""
from __future__ import annotations

import re
import time

import numpy as np
import pandas as pd

from . import analysis, frames, models

CKPT_KINDS = {"checkpoint", "flush"}
DUMP_KINDS = {"compress"}
WHATS = ("auto", "checkpoint", "io", "dump", "steps", "phases")


class StudyError(ValueError):
    pass


def _filtered(df, where):
    try:
        return frames.apply_where(df, where)
    except frames.FilterError as e:
        raise StudyError(str(e)) from None


def _col(df, by):
    try:
        return frames.column(df, by)
    except frames.FilterError as e:
        raise StudyError(str(e)) from None


def _auto_what(ph: pd.DataFrame, by: str) -> str:
    """--what auto: from the kinds of the phases that have a --by value
    (checkpoint, flush: checkpoint; compress: dump; none: io, which compares
    steps), so that --by tag:approach on a store that also holds a
    checkpoint study (tagged strategy, not approach) is the io comparison."""
    try:
        col = frames.column(ph, by)
    except frames.FilterError:
        return "io"
    kinds = set(ph.loc[ph[col].notna(), "kind"]) if not ph.empty else set()
    return ("checkpoint" if kinds & CKPT_KINDS else
            "dump" if kinds & DUMP_KINDS else "io")


def counted_gpu_uj(st: pd.DataFrame) -> pd.Series:
    """Each step's counted GPU energy (gpus.counted_uj): its counted total
    less its counted CPU and DRAM where its total includes its GPUs, else
    NaN."""
    has = st["total_includes"].fillna("").str.endswith("gpu")
    gpu = (st["counted_total_uj"].astype(float) - st["counted_cpu_uj"].astype(float)
           - st["counted_dram_uj"].astype(float).fillna(0.0))
    return gpu.where(has)


def counted_steps(st: pd.DataFrame) -> pd.DataFrame:
    """Steps for sums over steps (a run's energy): each step's counted_*
    figures (what it adds to totals, nesting.py) replace its own energies
    and duration, so a step inside another on the same node (srun inside
    batch) is not counted twice.  step_id is dropped so that
    analysis.compare_io_approaches does not leave out batch steps again
    (their counted energy is already only what the steps inside them did
    not measure)."""
    if "total_includes" in st.columns:      # the GPUs' part (gpus.counted_uj)
        has = st["total_includes"].fillna("").str.endswith("gpu")
        st = st.assign(counted_gpu_uj=counted_gpu_uj(st), gpu_not_measured=(~has) & (
            st["gpu_backend"].notna() | st["gpus_unmeasured"].notna()))
        st = st.drop(columns=["energy_gpu_uj"])
    st = st.drop(columns=["energy_cpu_uj", "energy_dram_uj", "energy_total_uj",
                          "duration_ns", "step_id"])
    return st.rename(columns={"counted_cpu_uj": "energy_cpu_uj",
                              "counted_dram_uj": "energy_dram_uj",
                              "counted_total_uj": "energy_total_uj",
                              "counted_gpu_uj": "energy_gpu_uj",
                              "counted_duration_ns": "duration_ns"})


def compare(conn, by: str, where=(), what: str = "auto", scaling: str = "weak",
            baseline=None, since_ns=None, until_ns=None, cluster=None,
            error_bound: str = "tag:error_bound") -> dict:
    """Returns {"what", "by", "table": DataFrame, "ratios": DataFrame|None,
    "policy_saving": DataFrame|None}."""
    if what not in WHATS:
        raise StudyError(f"--what {what}: allowed {', '.join(WHATS)}")
    ph = _filtered(frames.phases(conn, since_ns, until_ns, cluster), where)
    if what == "auto":
        what = _auto_what(ph, by)
    out = {"what": what, "by": by, "ratios": None, "policy_saving": None}
    try:
        if what == "checkpoint":
            if ph.empty:
                raise StudyError("no phases match: nothing to compare")
            col = _col(ph, by)
            t = analysis.compare_checkpointing(ph, by=col, scaling=scaling)
            out["table"] = t
            vals = sorted(set(t[col].dropna().astype(str)))
            if len(vals) > 1:
                base = baseline if baseline is not None else vals[0]
                out["ratios"] = analysis.strategy_ratios(t, by=col, baseline=base)
                out["baseline"] = base
        elif what == "dump":
            if ph.empty:
                raise StudyError("no phases match: nothing to compare")
            col = _col(ph, by)
            eb = error_bound if error_bound in ph.columns else None
            if eb is None:
                ph = ph.assign(**{"tag:error_bound": None})
                eb = "tag:error_bound"
            t = analysis.compare_dumps(ph, compressor=col, error_bound=eb)
            out["table"] = t
            pols = set(t["policy"].dropna()) if "policy" in t.columns else set()
            base = baseline or "monitor"
            if len(pols) > 1 and base in pols:
                out["policy_saving"] = analysis.policy_saving(t, base_policy=base)
                out["baseline"] = base
                out["baseline_clock"] = baseline_clock(ph[ph["policy"] == base])
        elif what == "io":
            st = _filtered(frames.steps(conn, since_ns, until_ns, cluster), where)
            if st.empty:
                raise StudyError("no steps match: nothing to compare")
            col = _col(st, by)
            if col.startswith("tag:"):
                # a run without the tag is no approach of the study
                st = st[st[col].notna()]
                if st.empty:
                    raise StudyError(f"no steps tagged {col}: nothing to compare")
            out["table"] = analysis.compare_io_approaches(counted_steps(st), by=col)
        else:
            df = ph if what == "phases" else _filtered(
                frames.steps(conn, since_ns, until_ns, cluster), where)
            if df.empty:
                raise StudyError(f"no {what} match: nothing to compare")
            if what == "steps" and "total_includes" in df.columns:
                df = df.assign(counted_gpu_uj=counted_gpu_uj(df))
            col = _col(df, by)
            out["table"] = analysis.compare_generic(df, by=col, baseline=baseline)
    except ValueError as e:
        if isinstance(e, StudyError):
            raise
        raise StudyError(f"{what} comparison: {e}") from None
    return out


def baseline_clock(rows: pd.DataFrame) -> str:
    """What clock the baseline runs had (issue 9): "governor default" for
    monitor runs (the governor ran free under the original cap: not the
    paper's fixed base clock), "base clock" only for runs held at the
    nominal clock (fixed_freq_khz == nominal_freq_khz on every row), else
    the clock they were held at, or "clock not recorded"."""
    if rows.empty:
        return "clock not recorded"
    pol = rows["policy"].astype(str)
    if ((pol == "monitor") | (rows["freq_control"] == "monitor")).all():
        return "governor default"
    fx = pd.to_numeric(rows["fixed_freq_khz"], errors="coerce")
    nom = pd.to_numeric(rows["nominal_freq_khz"], errors="coerce")
    if fx.notna().all() and (fx == nom).all():
        return "base clock"
    if fx.notna().all() and fx.nunique() == 1:
        return f"pinned at {fx.iloc[0] / 1000:g} MHz, not the nominal clock"
    return "clock not recorded"


# ------------------------------------------------------------------ DVFS

_FIXED = re.compile(r"^fixed:([0-9.]+)$")


def fixed_clock_khz(df: pd.DataFrame) -> pd.Series:
    """The clock fixed:R steps ran at: step.fixed_freq_khz; for records of
    plugins before issue 8 (no freq_control), whose base_freq_khz was
    already R x fmax, base_freq_khz.  NaN for other policies, and where a
    current plugin could set no clock."""
    fixed = df["policy"].astype(str).str.match(_FIXED)
    old = df["freq_control"].isna()
    f = pd.to_numeric(df["fixed_freq_khz"], errors="coerce")
    f = f.where(~old, pd.to_numeric(df["base_freq_khz"], errors="coerce"))
    return f.where(fixed)


def sweep_rows(conn, where=(), kind=None, level="phases", since_ns=None,
               until_ns=None, cluster=None) -> pd.DataFrame:
    """Rows of a frequency sweep: phases (or whole steps, kind 'step') with
    the frequency they ran at: the phase's freq_khz, else the step's
    tag:freq_khz (written by `joulestep tune`), else a fixed:R step's clock
    (fixed_clock_khz)."""
    if level == "steps":
        df = frames.steps(conn, since_ns, until_ns, cluster)
        df["kind"] = "step"
        df["freq_khz"] = np.nan
    else:
        df = frames.phases(conn, since_ns, until_ns, cluster)
    df = _filtered(df, where)
    if kind:
        df = df[df["kind"] == kind]
    if df.empty:
        raise StudyError("no sweep rows match (check --where/--kind/--level)")
    f = pd.to_numeric(df["freq_khz"], errors="coerce")
    if "tag:freq_khz" in df.columns:
        f = f.fillna(pd.to_numeric(df["tag:freq_khz"], errors="coerce"))
    f = f.fillna(fixed_clock_khz(df))
    df = df.assign(freq_khz=f.round())
    df = df[df["freq_khz"].notna() & (df["duration_ns"] > 0)]
    if df.empty:
        raise StudyError("no row with a known frequency: sweep steps need a "
                         "phase freq_khz, a freq_khz tag or a fixed:R policy")
    df["node_model"] = df["node_model"].fillna("unknown")
    return df


def model_dvfs(conn, where=(), kind=None, level="phases", max_slowdown=0.10,
               since_ns=None, until_ns=None, cluster=None) -> pd.DataFrame:
    df = sweep_rows(conn, where, kind, level, since_ns, until_ns, cluster)
    try:
        return models.fit_dvfs_groups(df, by=("node_model", "kind"),
                                      max_slowdown=max_slowdown)
    except ValueError as e:
        raise StudyError(str(e)) from None


def dvfs_warnings(fits: pd.DataFrame) -> list[str]:
    """One warning per fit whose `a` the sweep does not determine to
    models.A_REL_SE_TARGET (10 %), with the repetitions per frequency that
    would (standard errors shrink as 1/sqrt(repetitions))."""
    from .render_units import fmt
    out = []
    for r in frames.records(fits):
        if r.get("reps_needed") is None:
            continue
        out.append(
            f"{r['node_model']}/{r['kind']}: a = {fmt(r['a'])} +- {fmt(r['se_a'])} "
            f"({100 * r['rel_se_a']:.0f} %): this sweep cannot determine a to better "
            f"than {100 * models.A_REL_SE_TARGET:.0f} %; about {r['reps_needed']} "
            f"repetitions per frequency (now {r['reps']:g}) would (the standard "
            "error shrinks as 1/sqrt(repetitions)).  The curve P(f), which the "
            "recommendation uses, is determined much better than a and b alone "
            "(docs/models.md)")
    return out


def save_dvfs(conn, fits: pd.DataFrame, path, max_slowdown: float,
              node_model=None) -> str:
    """Write the policy file (models.policy_file) for one node model and
    store the fits in power_models (used by `joulestep job`)."""
    ok = fits[fits["error"].isna()]
    if ok.empty:
        raise StudyError("no successful fit to save")
    nms = sorted(set(ok["node_model"]))
    if node_model is None:
        if len(nms) > 1:
            raise StudyError("fits for several node models (" + ", ".join(nms) +
                             "): pick one with --node-model")
        node_model = nms[0]
    sel = ok[ok["node_model"] == node_model]
    if sel.empty:
        raise StudyError(f"no fit for node model {node_model!r} (have: {', '.join(nms)})")
    recs = {r["kind"]: models.Recommendation(
        freq_khz=int(r["rec_freq_khz"]), ratio=float(r["rec_ratio"]),
        power_saving=float(r["power_saving"]), slowdown=float(r["slowdown"]),
        energy_saving=float(r["energy_saving"]), max_slowdown=float(max_slowdown))
        for r in frames.records(sel) if r.get("rec_freq_khz") is not None}
    text = models.policy_file(recs, node_model=node_model, path=str(path))
    now = time.time_ns()
    conn.execute("BEGIN IMMEDIATE")
    try:
        for r in frames.records(sel):
            conn.execute(
                "INSERT INTO power_models (node_model, phase_kind, a, b, c, "
                "fmax_khz, slowdown_alpha, sse, rmse, r2, n_points, fitted_ns) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (node_model, "
                "phase_kind) DO UPDATE SET a = excluded.a, b = excluded.b, "
                "c = excluded.c, fmax_khz = excluded.fmax_khz, slowdown_alpha = "
                "excluded.slowdown_alpha, sse = excluded.sse, rmse = excluded.rmse, "
                "r2 = excluded.r2, n_points = excluded.n_points, "
                "fitted_ns = excluded.fitted_ns",
                (node_model, r["kind"], r["a"], r["b"], r["c"],
                 int(round(r["fmax_ghz"] * 1e6)), r["alpha"], r["sse"], r["rmse"],
                 r["r2"], r["n"], now))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return text


# ------------------------------------------------------------------ Damaris

def parse_table(text: str, name: str) -> dict:
    """'1:1,2:0.98,4:0.95' -> {1: 1.0, 2: 0.98, 4: 0.95}."""
    out = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        try:
            n, s = part.split(":")
            out[int(n)] = float(s)
        except ValueError:
            raise StudyError(f"{name}: {part!r} is not N:S (e.g. 1:1,2:0.98,4:0.95)") \
                from None
    if not out:
        raise StudyError(f"{name}: give at least one N:S pair")
    return out


def measured_runs(conn, by="tag:approach", where=(), since_ns=None, until_ns=None,
                  cluster=None) -> pd.DataFrame:
    """Energy of each recorded run (job) per I/O configuration: config is
    the `by` column (e.g. tag:approach = DC(1), DN(15:1)); energy_j = sum of
    what the job's steps count (counted_steps: a step inside another on the
    same node is counted once).  Runs whose config is not DC(k)/DN(c:d) are
    skipped."""
    st = _filtered(frames.steps(conn, since_ns, until_ns, cluster), where)
    if st.empty or by not in st.columns:
        return pd.DataFrame(columns=["config", "energy_j", "job_id"])
    st = counted_steps(st)
    e = (st["energy_cpu_uj"].astype(float) + st["energy_dram_uj"].astype(float)
         .fillna(0)) / 1e6
    g = st.assign(energy_j=e).groupby(["job_pk", by], dropna=True)
    runs = g["energy_j"].sum().reset_index().rename(columns={by: "config"})
    ok = []
    for c in runs["config"]:
        try:
            models.parse_config(c)
            ok.append(True)
        except ValueError:
            ok.append(False)
    return runs[ok]


def model_damaris(cal, approaches, nodes, cores_per_node, measured=None) -> dict:
    try:
        pred = models.predict_damaris(cal, approaches, nodes, cores_per_node)
        acc = None
        if measured is not None and not measured.empty:
            acc = models.damaris_accuracy(pred, measured)
            if acc.empty:
                acc = None
    except ValueError as e:
        raise StudyError(str(e)) from None
    return {"prediction": pred, "accuracy": acc,
            "pick": pred.loc[pred["best"], "config"].iloc[0]}


def _is_numbered(step_id) -> bool:
    return str(step_id).isdigit()


def node_runs(conn, where=(), cores="ncpus", since_ns=None, until_ns=None,
              cluster=None, opt="--where") -> pd.DataFrame:
    """One row per (recorded run, node) for calibrating the Dorier model.

    A run is a job; only its numbered (srun) steps are used when it has any,
    else all its steps (a batch step's time and energy include the script
    around the simulation).  Columns: job_pk, job_id, node, nodes (distinct
    nodes of the run), cores_per_node (`cores`: the steps' ncpus on the
    node, or a tag:KEY holding an integer; the largest over the node's
    steps; every node of a run must agree), duration_s (the run's last
    end - first start), energy_j (the node's counted CPU + DRAM energy),
    power_w (energy_j / duration_s)."""
    cols = ["job_pk", "job_id", "node", "nodes", "cores_per_node", "duration_s",
            "energy_j", "power_w"]
    try:
        st = frames.apply_where(frames.steps(conn, since_ns, until_ns, cluster), where)
    except frames.FilterError as e:
        raise StudyError(str(e).replace("--where ", opt + " ", 1)) from None
    if st.empty:
        return pd.DataFrame(columns=cols)
    num = st["step_id"].map(_is_numbered)
    has_num = num.groupby(st["job_pk"]).transform("any")
    st = st[num | ~has_num]
    if cores not in st.columns or not (cores == "ncpus" or cores.startswith("tag:")):
        tags = sorted(c for c in st.columns if c.startswith("tag:"))
        raise StudyError(f"--cores-column {cores}: not recorded here; use ncpus or one "
                         f"of: {', '.join(tags) or '(no tags)'}")
    cc = pd.to_numeric(st[cores], errors="coerce")
    bad = st[cc.isna() | (cc < 1) | (cc != cc.round())]
    if not bad.empty:
        b = bad.iloc[0]
        raise StudyError(f"job {b['job_id']} on {b['node']}: no core count in {cores} "
                         f"(need a positive integer; pick another with --cores-column)")
    cnt = counted_steps(st)
    e = (cnt["energy_cpu_uj"].astype(float).fillna(0)
         + cnt["energy_dram_uj"].astype(float).fillna(0)) / 1e6
    st = st.assign(_cores=cc.astype(int), _e=e.to_numpy())
    rows = []
    for job_pk, g in st.groupby("job_pk", sort=True):
        dur = (g["end_ns"].max() - g["start_ns"].min()) / 1e9
        per_node = g.groupby("node").agg(c=("_cores", "max"), e=("_e", "sum"))
        if per_node["c"].nunique() > 1:
            raise StudyError(f"job {g['job_id'].iloc[0]}: nodes use different core counts "
                             f"({', '.join(map(str, sorted(set(per_node['c']))))}); a "
                             f"calibration run needs the same cores on every node")
        if not dur > 0:
            raise StudyError(f"job {g['job_id'].iloc[0]}: run time is 0")
        for node, r in per_node.iterrows():
            rows.append(dict(job_pk=int(job_pk), job_id=int(g["job_id"].iloc[0]),
                             node=node, nodes=len(per_node), cores_per_node=int(r["c"]),
                             duration_s=dur, energy_j=float(r["e"]),
                             power_w=float(r["e"]) / dur))
    return pd.DataFrame(rows, columns=cols)


CAL_NEEDS = ("recorded runs without I/O: one on 1 node with 1 core (T_base), "
             "1-node runs at other core counts (s_cores) and runs on more nodes "
             "with a core count also run on 1 node (s_nodes)")


def fit_damaris(conn, fit_where, idle_where=(), cores="ncpus", n_iter=1,
                p_idle_w=None, p_max_w=None, since_ns=None, until_ns=None,
                cluster=None) -> dict:
    """Fit the Dorier calibration from recorded runs (models.fit_damaris_calibration).

    Runs without I/O are those matching fit_where.  Durations and node
    counts come from node_runs; P_max is the mean node power (each run x
    node one sample) over the calibration runs at the largest cores-per-node
    count (a node running the simulation on all its cores); P_idle is the
    mean node power of the runs matching idle_where, or p_idle_w when given
    (it overrides them); p_max_w, when given, overrides P_max.  Returns {"calibration": DamarisCalibration,
    "runs": per (nodes, cores_per_node) table, "p_max_from": text,
    "p_idle_from": text}."""
    if not fit_where:
        raise StudyError("give the runs without I/O to fit, e.g. --fit-where io=none")
    nr = node_runs(conn, fit_where, cores, since_ns, until_ns, cluster, "--fit-where")
    sel = " ".join(f"{k}={v}" for k, v in fit_where)
    if nr.empty:
        raise StudyError(f"no recorded run matches --fit-where {sel}: the fit needs "
                         + CAL_NEEDS)
    runs = nr.drop_duplicates("job_pk")[["job_pk", "nodes", "cores_per_node", "duration_s"]]
    if not ((runs["nodes"] == 1) & (runs["cores_per_node"] == 1)).any():
        have = sorted({(int(a), int(b)) for a, b in zip(runs["nodes"], runs["cores_per_node"])})
        raise StudyError("too few runs to fit: no run on 1 node with 1 core; the fit "
                         "needs " + CAL_NEEDS + "; have (nodes x cores): "
                         + ", ".join(f"{a}x{b}" for a, b in have))
    cmax = int(runs["cores_per_node"].max())
    busy = nr[nr["cores_per_node"] == cmax]["power_w"]
    max_from = (f"{int((runs['cores_per_node'] == cmax).sum())} runs at {cmax} "
                f"cores/node, {len(busy)} node samples")
    if p_max_w is not None:
        busy, max_from = pd.Series([float(p_max_w)]), None
    power = [pd.DataFrame({"state": "busy", "power_w": busy})]
    idle_from = None
    if p_idle_w is None:
        if not idle_where:
            raise StudyError("P_idle: give --p-idle W or select recorded idle runs "
                             "with --idle-where KEY=VALUE")
        idle = node_runs(conn, idle_where, "ncpus", since_ns, until_ns, cluster,
                         "--idle-where")
        if idle.empty:
            raise StudyError("no recorded run matches --idle-where "
                             + " ".join(f"{k}={v}" for k, v in idle_where)
                             + ": give --p-idle W instead")
        power.append(pd.DataFrame({"state": "idle", "power_w": idle["power_w"]}))
        idle_from = f"{idle['job_pk'].nunique()} idle runs, {len(idle)} node samples"
    else:
        power.append(pd.DataFrame({"state": ["idle"], "power_w": [float(p_idle_w)]}))
    try:
        cal = models.fit_damaris_calibration(runs, pd.concat(power, ignore_index=True),
                                             n_iter=n_iter)
    except ValueError as e:
        raise StudyError(f"calibration fit: {e}") from None
    table = (runs.groupby(["nodes", "cores_per_node"])["duration_s"]
             .agg(runs="count", duration_s="mean", duration_std_s="std").reset_index())
    pw = nr.groupby(["nodes", "cores_per_node"])["power_w"].mean().rename("node_power_w")
    table = table.merge(pw.reset_index(), on=["nodes", "cores_per_node"])
    return {"calibration": cal, "runs": table,
            "p_max_from": max_from, "p_idle_from": idle_from}


def calibration_table(cal, sources: dict) -> pd.DataFrame:
    """The calibration as rows (parameter, value, source): t_base_s, n_iter,
    p_idle_w, p_max_w, s_cores(N), s_nodes(N).  sources maps t_base_s,
    s_cores, s_nodes, p_idle_w, p_max_w to 'fitted ...' or 'option'."""
    rows = [("t_base_s", cal.t_base_s, sources.get("t_base_s")),
            ("n_iter", float(cal.n_iter), "option"),
            ("p_idle_w", cal.p_idle_w, sources.get("p_idle_w")),
            ("p_max_w", cal.p_max_w, sources.get("p_max_w"))]
    for name in ("s_cores", "s_nodes"):
        for n, s in sorted(getattr(cal, name).items()):
            rows.append((f"{name}({n})", float(s), sources.get(name)))
    return pd.DataFrame(rows, columns=["parameter", "value", "source"])
