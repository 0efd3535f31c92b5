"""The papers' energy models, as pure functions (no database, no printing).

Dorier et al. 2016 §3 (docs/science.md): energy of dedicated-core
(DC) and dedicated-node (DN) I/O configurations, eqs. (1)-(4).

Wilkins 2023 ch. 2, §2.4-2.5 (docs/science.md): DVFS power model
P(f) = a*f^b + c (eq. 2.2), power scaled by the power at fmax, f in GHz, and
the frequency that minimises E(f) = P(f)*t(f) (eq. 2.1) under a slowdown cap.

Summary of the public interface (see each docstring, and docs/models.md):

Dorier
  parse_config("DC(1)" | "DN(15:1)") -> Config
  interpolate_scalability(table, n, name) -> float
  DamarisCalibration(t_base_s, s_cores, s_nodes, p_idle_w, p_max_w, n_iter=1)
  predict_damaris(cal, configs, nodes, cores_per_node) -> DataFrame
  damaris_accuracy(pred, measured) -> DataFrame
  fit_damaris_calibration(runs, power, n_iter=1) -> DamarisCalibration
DVFS
  sweep_samples(df, power_ref_w=None, fmax_khz=None) -> DataFrame
  fit_dvfs(df, power_ref_w=None, fmax_khz=None) -> DvfsFit
  reps_needed(rel_se, reps, target=0.10) -> int | None
  fit_dvfs_groups(df, by=("node_model", "kind"), ...) -> DataFrame
  recommend_frequency(fit, max_slowdown=0.10, freqs_khz=None) -> Recommendation
  energy_saving(fit, freq_khz, base_freq_khz) -> float
  policy_file(recommendations, node_model=None, path=None) -> str (JSON)
  synthetic_sweep(a, b, c, fmax_ghz, alpha, ...) -> DataFrame
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
from scipy.optimize import curve_fit

__all__ = [
    "Config", "parse_config", "interpolate_scalability", "DamarisCalibration",
    "predict_damaris", "damaris_accuracy", "fit_damaris_calibration",
    "node_power_w", "DvfsFit", "Recommendation", "sweep_samples", "fit_dvfs",
    "fit_dvfs_groups", "recommend_frequency", "energy_saving", "policy_file",
    "synthetic_sweep", "reps_needed", "A_REL_SE_TARGET", "TABLE_2_4", "TABLE_2_5",
]

# --------------------------------------------------------------------------
# Dorier et al.: TP / DC / DN energy model
# --------------------------------------------------------------------------

_CONFIG_RE = re.compile(r"^\s*(DC)\s*\(\s*(\d+)\s*\)\s*$|^\s*(DN)\s*\(\s*(\d+)\s*:\s*(\d+)\s*\)\s*$",
                        re.IGNORECASE)
# the same in the forms a job tag can carry (no parentheses: the plugin's tag values are
# [A-Za-z0-9_.:+-]): dc<k>, dn<c>:<d>, e.g. --energy-tag=approach=dn2:1
_CONFIG_TAG_RE = re.compile(r"^\s*(DC)(\d+)\s*$|^\s*(DN)(\d+):(\d+)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Config:
    """An I/O configuration. kind 'DC': `k` dedicated cores per node.
    kind 'DN': `c`:`d` compute nodes to dedicated I/O nodes."""
    kind: str
    k: int = 0
    c: int = 0
    d: int = 0

    @property
    def name(self) -> str:
        return f"DC({self.k})" if self.kind == "DC" else f"DN({self.c}:{self.d})"


def parse_config(text: str) -> Config:
    """Parse 'DC(k)' (k >= 1 dedicated cores per node) or 'DN(c:d)' (c:d
    compute:I/O nodes, c, d >= 1), or their tag forms 'dck' and 'dnc:d' (a job
    tag cannot hold parentheses). Raises ValueError naming what is allowed.
    TP is not accepted: the model does not cover it (Dorier et al. 2016 §3.2)."""
    if isinstance(text, Config):
        return text
    m = _CONFIG_RE.match(str(text)) or _CONFIG_TAG_RE.match(str(text))
    if not m:
        hint = " (TP is not modelled: its I/O time is too variable, Dorier et al. 2016 §3.2)" \
            if str(text).strip().upper() == "TP" else ""
        raise ValueError(f"bad configuration {text!r}: allowed DC(k) with k >= 1 "
                         f"dedicated cores per node, or DN(c:d) with c:d compute:I/O "
                         f"nodes, e.g. DC(1), DN(15:1) (in a tag: dc1, dn15:1){hint}")
    if m.group(1):
        k = int(m.group(2))
        if k < 1:
            raise ValueError(f"bad configuration {text!r}: DC(k) needs k >= 1")
        return Config("DC", k=k)
    c, d = int(m.group(4)), int(m.group(5))
    if c < 1 or d < 1:
        raise ValueError(f"bad configuration {text!r}: DN(c:d) needs c >= 1 and d >= 1")
    return Config("DN", c=c, d=d)


def interpolate_scalability(table: Mapping[int, float], n: float, name: str = "s") -> float:
    """Scalability s(n) from a table {n: s}: the value itself at a tabulated n,
    linear interpolation between the two nearest tabulated points, and a
    ValueError outside [min n, max n] (no extrapolation). Values must be in
    (0, 2] (CM1 scales super-linearly on a node, Dorier et al. 2016 §3.3.1)."""
    if not table:
        raise ValueError(f"{name}: empty scalability table")
    pts = sorted((float(k), float(v)) for k, v in table.items())
    for k, v in pts:
        if not (0 < v <= 2):
            raise ValueError(f"{name}({k:g}) = {v:g}: scalability must be in (0, 2]")
    xs = [p[0] for p in pts]
    if n < xs[0] or n > xs[-1]:
        raise ValueError(f"{name}({n:g}): outside the measured range "
                         f"[{xs[0]:g}, {xs[-1]:g}]; measure that point or give it in the table")
    return float(np.interp(n, xs, [p[1] for p in pts]))


@dataclass
class DamarisCalibration:
    """Calibration of the Dorier model.

    t_base_s: time of one iteration on one core of one node (s);
    s_cores, s_nodes: scalability tables {n: s(n)} (eq. 2);
    p_idle_w, p_max_w: per-node power idle / running the simulation (W);
    n_iter: iterations of the run (T_sim = n_iter*T_base/(...)); 1 when
    t_base_s already is the whole run on one core."""
    t_base_s: float
    s_cores: Mapping[int, float]
    s_nodes: Mapping[int, float]
    p_idle_w: float
    p_max_w: float
    n_iter: int = 1

    def __post_init__(self):
        for nm in ("t_base_s", "p_idle_w", "p_max_w"):
            v = getattr(self, nm)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{nm} must be a positive number, got {v!r}")
        if self.p_idle_w > self.p_max_w:
            raise ValueError(f"p_idle_w ({self.p_idle_w:g}) must not exceed p_max_w ({self.p_max_w:g})")
        if int(self.n_iter) < 1:
            raise ValueError("n_iter must be >= 1")

    def t_sim(self, n_cores: int, n_nodes: int) -> float:
        """Eq. (2): n_iter*T_base / ((n_cores*s_cores(n_cores)) * (n_nodes*s_nodes(n_nodes)))."""
        sc = interpolate_scalability(self.s_cores, n_cores, "s_cores")
        sn = interpolate_scalability(self.s_nodes, n_nodes, "s_nodes")
        return self.n_iter * self.t_base_s / ((n_cores * sc) * (n_nodes * sn))

    def p_sim_dn(self, c_n: int, d_n: int) -> float:
        """Eq. (3): (c_n*P_max + (P_idle+P_max)/2*d_n) / (c_n+d_n), W per node."""
        return (c_n * self.p_max_w + 0.5 * (self.p_idle_w + self.p_max_w) * d_n) / (c_n + d_n)

    def p_sim_dc(self) -> float:
        """Eq. (4): P_max, W per node."""
        return self.p_max_w


def predict_damaris(cal: DamarisCalibration, configs: Iterable, nodes: int,
                    cores_per_node: int) -> pd.DataFrame:
    """Predict energy for each configuration on an allocation of `nodes`
    nodes with `cores_per_node` cores each.

    DC(k): n_nodes = nodes, n_cores = cores_per_node - k, P_sim = eq. (4).
    DN(c:d): d_n = nodes*d/(c+d) dedicated nodes (must be a whole number),
    c_n = nodes - d_n compute nodes using all cores, P_sim = eq. (3).
    energy_j = T_sim * P_sim * nodes: eq. (1) with P_sim the mean power per
    node, times the node count (the allocation's energy, as in Table 3).

    Returns one row per configuration: config, kind, compute_nodes, io_nodes,
    cores_per_node (used by the simulation), t_sim_s, p_sim_w, energy_j, best
    (True on the minimum-energy row; the model's pick)."""
    if int(nodes) != nodes or nodes < 1:
        raise ValueError(f"nodes must be a positive integer, got {nodes!r}")
    if int(cores_per_node) != cores_per_node or cores_per_node < 1:
        raise ValueError(f"cores_per_node must be a positive integer, got {cores_per_node!r}")
    rows = []
    for cfg in configs:
        cfg = parse_config(cfg)
        if cfg.kind == "DC":
            n_cores = cores_per_node - cfg.k
            if n_cores < 1:
                raise ValueError(f"{cfg.name}: {cores_per_node} cores per node leave no "
                                 f"compute core (k must be < {cores_per_node})")
            c_n, d_n = nodes, 0
            t = cal.t_sim(n_cores, c_n)
            p = cal.p_sim_dc()
        else:
            d_exact = nodes * cfg.d / (cfg.c + cfg.d)
            if abs(d_exact - round(d_exact)) > 1e-9 or round(d_exact) < 1:
                raise ValueError(f"{cfg.name}: {nodes} nodes do not split {cfg.c}:{cfg.d}; "
                                 f"nodes must be a multiple of {cfg.c + cfg.d}")
            d_n = int(round(d_exact))
            c_n = nodes - d_n
            n_cores = cores_per_node
            t = cal.t_sim(n_cores, c_n)
            p = cal.p_sim_dn(c_n, d_n)
        rows.append(dict(config=cfg.name, kind=cfg.kind, compute_nodes=c_n, io_nodes=d_n,
                         cores_per_node=n_cores, t_sim_s=t, p_sim_w=p,
                         energy_j=t * p * nodes))
    df = pd.DataFrame(rows, columns=["config", "kind", "compute_nodes", "io_nodes",
                                     "cores_per_node", "t_sim_s", "p_sim_w", "energy_j"])
    if df.empty:
        raise ValueError("no configuration given: allowed DC(k), DN(c:d)")
    df["best"] = False
    df.loc[df["energy_j"].idxmin(), "best"] = True
    return df


def damaris_accuracy(pred: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per configuration as in Dorier et al. 2016 Table 3:
    accuracy_pct = 100*(1 - |predicted - measured| / measured), with measured
    the mean over repetitions.

    pred: output of predict_damaris. measured: columns config (e.g. 'DC(1)';
    parsed, so 'dc(1)' matches) and energy_j, one row per run.
    Returns pred's config, energy_j (as predicted_j), measured_j (mean),
    measured_std_j, runs, accuracy_pct; configurations never measured are
    dropped."""
    if not {"config", "energy_j"} <= set(measured.columns):
        raise ValueError("measured needs columns config, energy_j")
    m = measured.copy()
    m["config"] = [parse_config(c).name for c in m["config"]]
    g = m.groupby("config")["energy_j"].agg(measured_j="mean", measured_std_j="std",
                                             runs="count").reset_index()
    out = pred[["config", "energy_j"]].rename(columns={"energy_j": "predicted_j"}).merge(
        g, on="config", how="inner")
    out["accuracy_pct"] = 100.0 * (1.0 - (out["predicted_j"] - out["measured_j"]).abs()
                                   / out["measured_j"])
    return out


def node_power_w(df: pd.DataFrame) -> pd.Series:
    """Average power (W) of each row from energy_cpu_uj (+ energy_dram_uj when
    present; NaN counts as 0) and duration_ns: uJ/ns * 1e3 = W."""
    if not {"energy_cpu_uj", "duration_ns"} <= set(df.columns):
        raise ValueError("need columns energy_cpu_uj, duration_ns (and optionally energy_dram_uj)")
    e = df["energy_cpu_uj"].astype(float)
    if "energy_dram_uj" in df.columns:
        e = e + df["energy_dram_uj"].astype(float).fillna(0.0)
    d = df["duration_ns"].astype(float)
    if (d <= 0).any():
        raise ValueError("duration_ns must be > 0 on every row")
    return e / d * 1e3


def _duration_s(df: pd.DataFrame) -> pd.Series:
    if "duration_s" in df.columns:
        return df["duration_s"].astype(float)
    if "duration_ns" in df.columns:
        return df["duration_ns"].astype(float) / 1e9
    raise ValueError("need a duration_s or duration_ns column")


def fit_damaris_calibration(runs: pd.DataFrame, power: pd.DataFrame,
                            n_iter: int = 1) -> DamarisCalibration:
    """Fit the Dorier calibration from recorded runs (Dorier et al. 2016 §3.3).

    runs: runs of the application WITHOUT I/O; columns nodes, cores_per_node,
    duration_s (or duration_ns). Repetitions are averaged (mean).
      T_base        = T(1 node, 1 core) / n_iter
      s_cores(k)    = T(1 node, 1 core) / (k * T(1 node, k cores))
      s_nodes(m)    = T(1 node, c) / (m * T(m nodes, c)), c the largest
                      cores-per-node count measured both on 1 and on m nodes
    power: columns state ('idle' or 'busy') and power_w, or energy_cpu_uj,
    [energy_dram_uj], duration_ns; P_idle = mean idle, P_max = mean busy."""
    need = {"nodes", "cores_per_node"}
    if not need <= set(runs.columns):
        raise ValueError("runs need columns nodes, cores_per_node, duration_s|duration_ns")
    r = pd.DataFrame({"nodes": runs["nodes"].astype(int),
                      "cores": runs["cores_per_node"].astype(int),
                      "t": _duration_s(runs)})
    t = r.groupby(["nodes", "cores"])["t"].mean()
    if (1, 1) not in t.index:
        raise ValueError("calibration needs a run on 1 node with 1 core (T_base)")
    t11 = t[(1, 1)]
    one = t.xs(1, level="nodes")
    s_cores = {int(k): float(t11 / (k * one[k])) for k in one.index}
    s_nodes = {1: 1.0}
    for m in sorted(set(t.index.get_level_values("nodes")) - {1}):
        common = sorted(set(t.xs(m, level="nodes").index) & set(one.index))
        if not common:
            raise ValueError(f"runs on {m} nodes need a 1-node run with the same cores_per_node")
        c = common[-1]
        s_nodes[int(m)] = float(one[c] / (m * t[(m, c)]))
    if "state" not in power.columns:
        raise ValueError("power needs a state column ('idle' or 'busy')")
    pw = power["power_w"].astype(float) if "power_w" in power.columns else node_power_w(power)
    st = power["state"].astype(str).str.lower()
    bad = sorted(set(st) - {"idle", "busy"})
    if bad:
        raise ValueError(f"power state {bad[0]!r}: allowed 'idle', 'busy'")
    if not (st == "idle").any() or not (st == "busy").any():
        raise ValueError("power needs both 'idle' and 'busy' samples")
    return DamarisCalibration(t_base_s=float(t11 / n_iter), s_cores=s_cores, s_nodes=s_nodes,
                              p_idle_w=float(pw[st == "idle"].mean()),
                              p_max_w=float(pw[st == "busy"].mean()), n_iter=n_iter)


# --------------------------------------------------------------------------
# Wilkins ch. 2: DVFS power model and frequency recommendation
# --------------------------------------------------------------------------

#: Table 2.4 (compression) and 2.5 (data writing) of Wilkins 2023: (a, b, c).
TABLE_2_4 = {"Total": (0.0086, 4.038, 0.757), "SZ": (0.0107, 3.788, 0.754),
             "ZFP": (0.0062, 4.414, 0.7589), "Broadwell": (0.0064, 5.315, 0.7429),
             "Skylake": (2.235e-9, 23.31, 0.7941)}
TABLE_2_5 = {"Total": (0.0133, 3.379, 0.7985), "Broadwell": (0.0261, 3.395, 0.7097),
             "Skylake": (9.095e-9, 20.9, 0.888)}


@dataclass
class DvfsFit:
    """A fitted P(f) = a*f^b + c (f in GHz, power scaled by power at fmax) and
    runtime model t(f) = t_max*(alpha*fmax/f + 1 - alpha).

    sse, rmse, r2: goodness of fit of the power model over all n samples
    (rmse = sqrt(sse/(n - 3)), the thesis' (MATLAB's) definition: 3 fitted
    parameters; r2 = 1 - sse/sst). se_a, se_b, se_c: standard errors
    from the fit's covariance (delta method for a). amp = a*fmax^b, the same curve
    written P = amp*(f/fmax)^b + c, which is how it is fitted (well
    conditioned; `a` alone is not when b is large)."""
    a: float
    b: float
    c: float
    fmax_ghz: float
    sse: float
    rmse: float
    r2: float
    n: int
    alpha: float
    t_max_s: float
    se_a: float = float("nan")
    se_b: float = float("nan")
    se_c: float = float("nan")
    freqs_khz: tuple = field(default_factory=tuple)

    @property
    def amp(self) -> float:
        return self.a * self.fmax_ghz ** self.b

    def power(self, f_ghz):
        """Scaled power P(f) (eq. 2.2)."""
        x = np.asarray(f_ghz, dtype=float) / self.fmax_ghz
        return self.amp * x ** self.b + self.c

    def runtime_ratio(self, f_ghz):
        """t(f)/t(fmax) = alpha*fmax/f + 1 - alpha."""
        return self.alpha * self.fmax_ghz / np.asarray(f_ghz, dtype=float) + 1.0 - self.alpha

    def energy(self, f_ghz):
        """E(f) = P(f)*t(f)/t(fmax) (eq. 2.1), scaled like P."""
        return self.power(f_ghz) * self.runtime_ratio(f_ghz)

    @property
    def reps(self) -> float:
        """Samples per swept frequency (mean when they differ)."""
        return self.n / len(self.freqs_khz) if self.freqs_khz else float("nan")

    @property
    def rel_se_a(self) -> float:
        """se_a / |a|: how well the sweep determines a."""
        return self.se_a / abs(self.a) if self.a else float("nan")

    def as_dict(self) -> dict:
        return dict(a=self.a, b=self.b, c=self.c, se_a=self.se_a, se_b=self.se_b,
                    se_c=self.se_c, rel_se_a=self.rel_se_a, fmax_ghz=self.fmax_ghz,
                    sse=self.sse, rmse=self.rmse, r2=self.r2, n=self.n, reps=self.reps,
                    reps_needed=reps_needed(self.rel_se_a, self.reps),
                    alpha=self.alpha, t_max_s=self.t_max_s)


#: relative standard error of `a` above which `model dvfs` warns
A_REL_SE_TARGET = 0.10


def reps_needed(rel_se: float, reps: float, target: float = A_REL_SE_TARGET):
    """Repetitions per frequency that would bring a relative standard error
    of rel_se (measured with `reps` repetitions) down to `target`: standard
    errors shrink as 1/sqrt(reps), so ceil(reps * (rel_se/target)^2).  None
    when rel_se is already <= target (or unknown)."""
    if not (math.isfinite(rel_se) and math.isfinite(reps)) or rel_se <= target:
        return None
    return int(math.ceil(reps * (rel_se / target) ** 2 - 1e-9))


@dataclass
class Recommendation:
    """Outcome of recommend_frequency. ratio = freq/fmax; power_saving =
    1 - P(f)/P(fmax); slowdown = t(f)/t(fmax) - 1; energy_saving =
    1 - E(f)/E(fmax)."""
    freq_khz: int
    ratio: float
    power_saving: float
    slowdown: float
    energy_saving: float
    max_slowdown: float

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def sweep_samples(df: pd.DataFrame, power_ref_w: Optional[float] = None,
                  fmax_khz: Optional[int] = None) -> pd.DataFrame:
    """Turn sweep rows into samples (freq_ghz, power, duration_s).

    Input columns: freq_khz; power either as power_scaled (already scaled,
    used as is), power_w, or energy_cpu_uj [+ energy_dram_uj] with
    duration_ns; duration_ns or duration_s is needed for the runtime model.
    Rows with freq_khz NULL (clock left alone) are dropped: fill them with
    the step's base_freq_khz first if they belong to the sweep.
    Scaling: by power_ref_w when given, else by the mean power measured at
    fmax (fmax_khz, default the highest swept frequency), as in Wilkins 2023
    §2.5.1."""
    if "freq_khz" not in df.columns:
        raise ValueError("sweep needs a freq_khz column")
    d = df[df["freq_khz"].notna()]
    if d.empty:
        raise ValueError("sweep has no row with a frequency (freq_khz)")
    f = d["freq_khz"].astype(float).to_numpy()
    if (f <= 0).any():
        raise ValueError("freq_khz must be > 0")
    fmax = float(fmax_khz) if fmax_khz is not None else float(f.max())
    if "power_scaled" in d.columns:
        p = d["power_scaled"].astype(float).to_numpy()
    else:
        p = (d["power_w"].astype(float) if "power_w" in d.columns else node_power_w(d)).to_numpy()
        if power_ref_w is not None:
            if not power_ref_w > 0:
                raise ValueError("power_ref_w must be > 0")
            p = p / power_ref_w
        else:
            at = np.isclose(f, fmax)
            if not at.any():
                raise ValueError(f"no sample at fmax {fmax:g} kHz to scale power by; "
                                 f"give power_ref_w or sweep up to fmax")
            p = p / p[at].mean()
    try:
        t = _duration_s(d).to_numpy()
    except ValueError:
        t = np.full(len(d), np.nan)
    return pd.DataFrame({"freq_khz": f, "freq_ghz": f / 1e6, "power": p, "duration_s": t,
                         "fmax_ghz": fmax / 1e6})


def _power_model(x, amp, b, c):
    return amp * np.power(x, b) + c


def _fit_power(x: np.ndarray, p: np.ndarray):
    """Least-squares fit of p = amp*x^b + c, x = f/fmax. Start: for each b on
    a log grid in [0.5, 60] solve (amp, c) by linear least squares and keep
    the best; then refine all three with curve_fit (trust-region, bounds
    amp > 0, 0.1 <= b <= 100)."""
    best = None
    for b in np.geomspace(0.5, 60, 200):
        A = np.column_stack([x ** b, np.ones_like(x)])
        coef, *_ = np.linalg.lstsq(A, p, rcond=None)
        if coef[0] <= 0:
            continue
        sse = float(np.sum((A @ coef - p) ** 2))
        if best is None or sse < best[0]:
            best = (sse, coef[0], b, coef[1])
    if best is None:
        raise ValueError("power does not rise with frequency: cannot fit a*f^b + c with a > 0")
    p0 = [best[1], best[2], best[3]]
    popt, pcov = curve_fit(_power_model, x, p, p0=p0,
                           bounds=([1e-12, 0.1, -10.0], [100.0, 100.0, 10.0]),
                           method="trf", x_scale="jac", ftol=1e-14, xtol=1e-14, gtol=1e-14,
                           max_nfev=20000)
    return popt, pcov


def fit_dvfs(df: pd.DataFrame, power_ref_w: Optional[float] = None,
             fmax_khz: Optional[int] = None) -> DvfsFit:
    """Fit P(f) = a*f^b + c and t(f) = t_max*(alpha*fmax/f + 1 - alpha) on a
    frequency sweep (rows as in sweep_samples). Needs >= 4 distinct
    frequencies. The runtime model is linear in 1/f (t = p + q/f) and is
    fitted by ordinary least squares; alpha = (q/fmax)/t_max. Without
    durations alpha is NaN and recommend_frequency refuses."""
    s = sweep_samples(df, power_ref_w=power_ref_w, fmax_khz=fmax_khz)
    if s["freq_khz"].nunique() < 4:
        raise ValueError("a sweep needs at least 4 distinct frequencies to fit a*f^b + c")
    fmax = float(s["fmax_ghz"].iloc[0])
    f = s["freq_ghz"].to_numpy()
    p = s["power"].to_numpy()
    (amp, b, c), cov = _fit_power(f / fmax, p)
    a = amp / fmax ** b
    # delta method: a = amp * fmax^-b -> grad (fmax^-b, -a ln fmax, 0)
    g = np.array([fmax ** -b, -a * math.log(fmax), 0.0])
    var_a = float(g @ cov @ g) if np.all(np.isfinite(cov)) else float("nan")
    resid = p - _power_model(f / fmax, amp, b, c)
    sse = float(np.sum(resid ** 2))
    sst = float(np.sum((p - p.mean()) ** 2))
    alpha, tmax = float("nan"), float("nan")
    t = s["duration_s"].to_numpy()
    ok = np.isfinite(t)
    if ok.sum() >= 2 and len(np.unique(f[ok])) >= 2:
        A = np.column_stack([np.ones(ok.sum()), 1.0 / f[ok]])
        (pp, qq), *_ = np.linalg.lstsq(A, t[ok], rcond=None)
        tmax = float(pp + qq / fmax)
        alpha = float((qq / fmax) / tmax) if tmax > 0 else float("nan")
    return DvfsFit(a=float(a), b=float(b), c=float(c), fmax_ghz=fmax, sse=sse,
                   rmse=math.sqrt(sse / (len(p) - 3)), r2=1.0 - sse / sst if sst > 0 else float("nan"),
                   n=len(p), alpha=alpha, t_max_s=tmax,
                   se_a=math.sqrt(var_a) if var_a >= 0 else float("nan"),
                   se_b=float(math.sqrt(cov[1, 1])), se_c=float(math.sqrt(cov[2, 2])),
                   freqs_khz=tuple(int(round(v)) for v in sorted(s["freq_khz"].unique())))


def recommend_frequency(fit: DvfsFit, max_slowdown: float = 0.10,
                        freqs_khz: Optional[Sequence[int]] = None) -> Recommendation:
    """The frequency that minimises E(f) = P(f)*t(f) among the available
    frequencies (default: those swept) with t(f)/t(fmax) - 1 <= max_slowdown.
    fmax always qualifies. Ties go to the higher frequency."""
    if not (max_slowdown >= 0 and math.isfinite(max_slowdown)):
        raise ValueError(f"max_slowdown must be a number >= 0 (0.1 = 10 %), got {max_slowdown!r}")
    if not math.isfinite(fit.alpha):
        raise ValueError("no runtime model (the sweep had no durations): cannot recommend")
    fr = np.array(sorted(set(int(v) for v in (freqs_khz if freqs_khz is not None
                                               else fit.freqs_khz))), dtype=float)
    fmax_khz = fit.fmax_ghz * 1e6
    fr = fr[fr <= fmax_khz * (1 + 1e-9)]
    if fr.size == 0:
        raise ValueError("no available frequency at or below fmax")
    g = fr / 1e6
    slow = fit.runtime_ratio(g) - 1.0
    e = fit.energy(g)
    e = np.where(slow <= max_slowdown + 1e-12, e, np.inf)
    if not np.isfinite(e).any():
        raise ValueError("no frequency satisfies max_slowdown")
    i = int(np.flatnonzero(e == e.min())[-1])
    e_max = float(fit.energy(fit.fmax_ghz))
    p_max = float(fit.power(fit.fmax_ghz))
    return Recommendation(freq_khz=int(round(fr[i])), ratio=float(g[i] / fit.fmax_ghz),
                          power_saving=float(1 - fit.power(g[i]) / p_max),
                          slowdown=float(slow[i]), energy_saving=float(1 - e[i] / e_max),
                          max_slowdown=float(max_slowdown))


def energy_saving(fit: DvfsFit, freq_khz: float, base_freq_khz: float) -> float:
    """Estimated saving of running a phase at freq_khz instead of
    base_freq_khz: 1 - P(f)t(f) / (P(f_base)t(f_base)). Positive = saved.
    Needs a runtime model (fit.alpha finite)."""
    if not (freq_khz > 0 and base_freq_khz > 0):
        raise ValueError("frequencies must be > 0 kHz")
    if not math.isfinite(fit.alpha):
        raise ValueError("no runtime model (the sweep had no durations)")
    return float(1.0 - fit.energy(freq_khz / 1e6) / fit.energy(base_freq_khz / 1e6))


_KIND_RE = re.compile(r"^[a-z0-9_-]{1,32}$")


def policy_file(recommendations: Mapping[str, Recommendation], node_model: Optional[str] = None,
                path: Optional[str] = None) -> str:
    """A `tuned` policy: JSON text mapping phase kind -> ratio of fmax, plus the
    plugin's policy string `phase:KIND=R,...` (see docs/models.md). Written
    to `path` when given (atomically: temp file + rename). Ratios are
    rounded to 3 decimals; kinds must match [a-z0-9_-]{1,32}."""
    if not recommendations:
        raise ValueError("no recommendation to write")
    phases = {}
    for kind in sorted(recommendations):
        if not _KIND_RE.match(kind):
            raise ValueError(f"phase kind {kind!r} invalid (allowed [a-z0-9_-]{{1,32}})")
        r = recommendations[kind]
        ratio = round(min(max(r.ratio, 0.001), 1.0), 3)
        phases[kind] = {"ratio": ratio, "freq_khz": r.freq_khz,
                        "max_slowdown": r.max_slowdown,
                        "est_energy_saving": round(r.energy_saving, 4),
                        "est_slowdown": round(r.slowdown, 4)}
    doc = {"format": "joulestep-policy", "version": 1, "node_model": node_model,
           "policy": "phase:" + ",".join(f"{k}={v['ratio']:g}" for k, v in phases.items()),
           "phases": phases}
    text = json.dumps(doc, indent=2, sort_keys=False) + "\n"
    if path is not None:
        tmp = f"{path}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    return text


def fit_dvfs_groups(df: pd.DataFrame, by: Sequence[str] = ("node_model", "kind"),
                    max_slowdown: float = 0.10, power_ref_w: Optional[float] = None) -> pd.DataFrame:
    """Fit one model per group (default per node model and phase kind) and
    recommend a frequency for each. Returns one row per group: the group
    columns, a, b, c, se_a, se_b, se_c, rel_se_a (se_a/a), sse, rmse, r2, n,
    reps (samples per frequency), reps_needed (reps_needed(); NaN when a is
    known to 10 %), fmax_ghz, alpha, t_max_s, rec_freq_khz,
    rec_ratio, power_saving, slowdown, energy_saving, error (message when
    that group could not be fitted; the other columns are then NaN)."""
    by = [c for c in by if c in df.columns]
    rows = []
    groups = df.groupby(by, dropna=False) if by else [((), df)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        try:
            fit = fit_dvfs(g, power_ref_w=power_ref_w)
            row.update(fit.as_dict())
            rec = recommend_frequency(fit, max_slowdown=max_slowdown)
            row.update(rec_freq_khz=rec.freq_khz, rec_ratio=rec.ratio,
                       power_saving=rec.power_saving, slowdown=rec.slowdown,
                       energy_saving=rec.energy_saving, error=None)
        except (ValueError, RuntimeError) as exc:
            row["error"] = str(exc)
        rows.append(row)
    cols = list(by) + ["a", "b", "c", "se_a", "se_b", "se_c", "rel_se_a", "sse", "rmse", "r2",
                       "n", "reps", "reps_needed", "fmax_ghz", "alpha", "t_max_s",
                       "rec_freq_khz", "rec_ratio", "power_saving", "slowdown", "energy_saving",
                       "error"]
    return pd.DataFrame(rows).reindex(columns=cols)


def synthetic_sweep(a: float, b: float, c: float, fmax_ghz: float, alpha: float,
                    noise: float = 0.01, reps: int = 10, fmin_ghz: float = 0.8,
                    step_ghz: float = 0.05, seed: int = 0, power_ref_w: float = 40.0,
                    t_max_s: float = 10.0, kind: str = "compress",
                    node_model: str = "synthetic") -> pd.DataFrame:
    """A synthetic frequency sweep as the plugin would record it (Wilkins 2023
    §2.3.2 method): frequencies fmin, fmin+step, ... up to fmax, `reps`
    repetitions each. Power = power_ref_w*(a*f^b + c)*(1 + noise*N(0,1)),
    duration = t_max*(alpha*fmax/f + 1 - alpha)*(1 + noise*N(0,1)),
    energy_cpu_uj = power*duration. Seeded (numpy default_rng(seed))."""
    rng = np.random.default_rng(seed)
    n = int(round((fmax_ghz - fmin_ghz) / step_ghz))
    f = np.round(fmin_ghz + step_ghz * np.arange(n + 1), 6)
    f = np.repeat(f, reps)
    p = power_ref_w * (a * f ** b + c) * (1 + noise * rng.standard_normal(f.size))
    t = t_max_s * (alpha * fmax_ghz / f + 1 - alpha) * (1 + noise * rng.standard_normal(f.size))
    return pd.DataFrame({"node_model": node_model, "kind": kind,
                         "freq_khz": np.round(f * 1e6).astype(np.int64),
                         "duration_ns": np.round(t * 1e9).astype(np.int64),
                         "energy_cpu_uj": np.round(p * t * 1e6).astype(np.int64),
                         "energy_dram_uj": 0})
