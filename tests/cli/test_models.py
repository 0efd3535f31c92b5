"""Tests of joulestep.models: Dorier eqs. (1)-(4) and the Wilkins DVFS model."""
import json
import math

import numpy as np
import pandas as pd
import pytest

from joulestep import models as M

# --------------------------------------------------------------------------
# Dorier et al. 2016, eqs. (1)-(4)
# --------------------------------------------------------------------------

CAL = M.DamarisCalibration(
    t_base_s=18.1, n_iter=100,
    s_cores={1: 1.0, 4: 0.95, 8: 0.9, 24: 0.8},
    s_nodes={1: 1.0, 8: 0.9, 16: 0.8},
    p_idle_w=100.0, p_max_w=200.0)


def test_dorier_hand_computed_predictions():
    """16 nodes x 24 cores. Arithmetic written out:

    DC(1): n_cores = 23, s_cores(23) = 0.9 + (23-8)/(24-8)*(0.8-0.9) = 0.80625
           T = 100*18.1 / ((23*0.80625) * (16*0.8)) = 1810/237.36 = 7.625548 s
           P = P_max = 200 W (eq. 4); E = T*P*16 nodes = 24401.75 J
    DC(2): s_cores(22) = 0.9 - 14/16*0.1 = 0.8125
           T = 1810 / ((22*0.8125)*(16*0.8)) = 1810/228.8 = 7.910839 s
           E = 7.910839*200*16 = 25314.69 J
    DN(15:1): d_n = 1, c_n = 15, s_nodes(15) = 0.9 - 7/8*0.1 = 0.8125
           T = 1810 / ((24*0.8)*(15*0.8125)) = 1810/234.0 = 7.735043 s
           P = (15*200 + 0.5*(100+200)*1)/16 = 3150/16 = 196.875 W (eq. 3)
           E = 7.735043*196.875*16 = 24365.38 J
    DN(7:1): d_n = 2, c_n = 14, s_nodes(14) = 0.9 - 6/8*0.1 = 0.825
           T = 1810 / ((24*0.8)*(14*0.825)) = 1810/221.76 = 8.161977 s
           P = (14*200 + 150*2)/16 = 3100/16 = 193.75 W
           E = 8.161977*193.75*16 = 25302.13 J
    Minimum: DN(15:1)."""
    p = M.predict_damaris(CAL, ["DC(1)", "DC(2)", "DN(15:1)", "DN(7:1)"], nodes=16,
                          cores_per_node=24).set_index("config")
    exp = {"DC(1)": (7.625548, 200.0, 24401.75, 23, 16, 0),
           "DC(2)": (7.910839, 200.0, 25314.69, 22, 16, 0),
           "DN(15:1)": (7.735043, 196.875, 24365.38, 24, 15, 1),
           "DN(7:1)": (8.161977, 193.75, 25302.13, 24, 14, 2)}
    for cfg, (t, pw, e, cores, cn, dn) in exp.items():
        row = p.loc[cfg]
        assert row["t_sim_s"] == pytest.approx(t, rel=1e-6)
        assert row["p_sim_w"] == pytest.approx(pw, rel=1e-12)
        assert row["energy_j"] == pytest.approx(e, rel=1e-6)
        assert (row["cores_per_node"], row["compute_nodes"], row["io_nodes"]) == (cores, cn, dn)
    assert list(p.index[p["best"]]) == ["DN(15:1)"]


def test_dorier_pick_changes_with_platform():
    """The pick depends on node scalability vs the idle saving of I/O nodes.
    P_idle 190 W, P_max 200 W, s_cores = 1, 16 nodes x 24 cores."""
    cfgs = ["DC(1)", "DN(15:1)", "DN(7:1)"]
    # nodes scale well up to 8 then drop: s_nodes(15) = 1 - 7/8*0.5 = 0.5625
    cal = M.DamarisCalibration(t_base_s=10, s_cores={1: 1, 24: 1}, s_nodes={1: 1, 8: 1, 16: 0.5},
                               p_idle_w=190, p_max_w=200)
    e = M.predict_damaris(cal, cfgs, 16, 24).set_index("config")
    # DC(1): T = 10/((23*1)*(16*0.5)) = 10/184, E = T*200*16 = 173.91 J
    assert e.loc["DC(1)", "energy_j"] == pytest.approx(10 / 184 * 3200)
    # DN(15:1): T = 10/((24*1)*(15*0.5625)) = 10/202.5; P = (15*200 + 195*1)/16
    #           E = 10/202.5 * 3195/16 * 16 = 157.78 J
    assert e.loc["DN(15:1)", "energy_j"] == pytest.approx(10 / 202.5 * 3195)
    # DN(7:1): s_nodes(14) = 1 - 6/8*0.5 = 0.625; T = 10/(24*14*0.625) = 10/210
    #          E = 10/210 * (14*200 + 195*2) = 10/210*3190 = 151.90 J: the pick
    assert e.loc["DN(7:1)", "energy_j"] == pytest.approx(10 / 210 * 3190)
    assert e.index[e["best"]].tolist() == ["DN(7:1)"]
    # nodes scale badly from 14 on: s_nodes(15) = 0.5
    cal2 = M.DamarisCalibration(t_base_s=10, s_cores={1: 1, 24: 1},
                                s_nodes={1: 1, 14: 0.5, 16: 0.5}, p_idle_w=190, p_max_w=200)
    e2 = M.predict_damaris(cal2, cfgs, 16, 24).set_index("config")
    # DC(1): 10/184*3200 = 173.91 J; DN(15:1): 10/(24*15*0.5)*3195 = 177.50 J;
    # DN(7:1): 10/(24*14*0.5) * (14*200 + 195*2) = 10/168*3190 = 189.88 J
    assert e2.loc["DC(1)", "energy_j"] == pytest.approx(10 / 184 * 3200)
    assert e2.loc["DN(15:1)", "energy_j"] == pytest.approx(10 / 180 * 3195)
    assert e2.loc["DN(7:1)", "energy_j"] == pytest.approx(10 / 168 * 3190)
    assert e2.index[e2["best"]].tolist() == ["DC(1)"]


def test_dorier_accuracy_like_table3():
    p = M.predict_damaris(CAL, ["DC(1)", "DN(15:1)", "DN(7:1)"], 16, 24)
    meas = pd.DataFrame({"config": ["DC(1)", "dc(1)", "DN(15:1)"],
                         "energy_j": [25000.0, 26000.0, 24365.38]})
    acc = M.damaris_accuracy(p, meas).set_index("config")
    # DC(1): mean 25500; 100*(1 - |24401.75 - 25500|/25500) = 95.6931 %
    assert acc.loc["DC(1)", "measured_j"] == 25500.0
    assert acc.loc["DC(1)", "runs"] == 2
    assert acc.loc["DC(1)", "accuracy_pct"] == pytest.approx(100 * (1 - 1098.25 / 25500), abs=1e-3)
    assert acc.loc["DN(15:1)", "accuracy_pct"] == pytest.approx(100.0, abs=1e-3)
    assert "DN(7:1)" not in acc.index  # never measured


@pytest.mark.parametrize("bad, msg", [
    ("TP", "TP is not modelled"), ("DC(0)", "k >= 1"), ("DN(15)", "allowed DC"),
    ("DN(0:1)", "c >= 1"), ("XX", "allowed DC")])
def test_config_parse_errors(bad, msg):
    with pytest.raises(ValueError, match=msg):
        M.parse_config(bad)


def test_config_parse_ok():
    assert M.parse_config(" dn( 15 : 1 ) ") == M.Config("DN", c=15, d=1)
    assert M.parse_config("DC(2)").name == "DC(2)"


def test_config_parse_tag_forms():
    """A job's --energy-tag value cannot hold parentheses (the plugin's tag charset is
    [A-Za-z0-9_.:+-]), so the forms a tag can carry name the same configurations:
    dc<k> and dn<c>:<d> (what the real-Damaris jobs are tagged with)."""
    assert M.parse_config("dc1") == M.Config("DC", k=1)
    assert M.parse_config("DC12") == M.Config("DC", k=12)
    assert M.parse_config("dn2:1") == M.Config("DN", c=2, d=1)
    assert M.parse_config("DN15:1").name == "DN(15:1)"
    for bad in ("dn1", "dc", "dn2:", "tp", "dc1x"):  # dn1 (Yildiz's DN(ONE)) has no ratio
        with pytest.raises(ValueError, match="allowed DC"):
            M.parse_config(bad)


def test_interpolation_and_range_errors():
    t = {1: 1.0, 8: 0.9, 16: 0.8}
    assert M.interpolate_scalability(t, 8) == 0.9
    assert M.interpolate_scalability(t, 12) == pytest.approx(0.85)
    with pytest.raises(ValueError, match=r"s_nodes\(17\): outside the measured range \[1, 16\]"):
        M.interpolate_scalability(t, 17, "s_nodes")
    with pytest.raises(ValueError, match="outside"):
        M.interpolate_scalability(t, 0.5)
    with pytest.raises(ValueError, match=r"must be in \(0, 2\]"):
        M.interpolate_scalability({1: 1.0, 2: 0.0}, 1)
    with pytest.raises(ValueError, match="empty"):
        M.interpolate_scalability({}, 1)
    # a configuration needing an unmeasured point fails clearly
    with pytest.raises(ValueError, match="s_cores"):
        M.predict_damaris(CAL, ["DC(1)"], 16, 32)


def test_predict_rejects_bad_allocations():
    with pytest.raises(ValueError, match="multiple of 16"):
        M.predict_damaris(CAL, ["DN(15:1)"], 10, 24)
    with pytest.raises(ValueError, match="no compute core"):
        M.predict_damaris(CAL, ["DC(4)"], 16, 4)
    with pytest.raises(ValueError, match="p_idle_w"):
        M.DamarisCalibration(1, {1: 1}, {1: 1}, p_idle_w=300, p_max_w=200)
    with pytest.raises(ValueError, match="t_base_s must be a positive"):
        M.DamarisCalibration(0, {1: 1}, {1: 1}, p_idle_w=100, p_max_w=200)


def test_fit_damaris_calibration():
    # T(1,1) = 100; T(1,4) = 100/(4*0.95); T(1,8) = 100/(8*0.9); T(2,8) = T(1,8)/(2*0.9)
    t18 = 100 / (8 * 0.9)
    runs = pd.DataFrame({
        "nodes": [1, 1, 1, 1, 2],
        "cores_per_node": [1, 1, 4, 8, 8],
        "duration_ns": [99e9, 101e9, 100 / 3.8 * 1e9, t18 * 1e9, t18 / 1.8 * 1e9]})
    power = pd.DataFrame({"state": ["idle", "idle", "busy", "BUSY"],
                          "energy_cpu_uj": [99e6, 101e6, 190e6, 200e6],
                          "energy_dram_uj": [0, 0, 9e6, np.nan],
                          "duration_ns": [1e9, 1e9, 1e9, 1e9]})
    cal = M.fit_damaris_calibration(runs, power, n_iter=10)
    assert cal.t_base_s == pytest.approx(10.0)
    assert cal.s_cores == pytest.approx({1: 1.0, 4: 0.95, 8: 0.9})
    assert cal.s_nodes == pytest.approx({1: 1.0, 2: 0.9})
    assert cal.p_idle_w == pytest.approx(100.0)      # (99+101)/2 W
    assert cal.p_max_w == pytest.approx(199.5)       # (199+200)/2 W
    with pytest.raises(ValueError, match="1 node with 1 core"):
        M.fit_damaris_calibration(runs[runs.cores_per_node > 1], power)
    with pytest.raises(ValueError, match="allowed 'idle', 'busy'"):
        M.fit_damaris_calibration(runs, power.assign(state="sleep"))


# --------------------------------------------------------------------------
# Wilkins ch. 2: DVFS model
# --------------------------------------------------------------------------

# (table, model, fmax GHz, runtime alpha). fmax: the chip's maximum clock
# (Table 2.2: Broadwell 2.0, Skylake 2.2; models mixing both chips use 2.2).
# alpha (runtime t(f) = t_max*(alpha*fmax/f + 1 - alpha)): 0.525 from the
# paper's +7.5 % runtime at 0.875 fmax (and 0.527 from +9.3 % at 0.85 fmax);
# Skylake writing 0.2 ("runtime is stagnant", §2.5.1.2); Skylake compression
# 0.35 and Total writing 0.425 are assumptions, see docs/models.md.
CURVES = [
    ("2.4", "Total", 2.2, 0.525), ("2.4", "SZ", 2.2, 0.525), ("2.4", "ZFP", 2.2, 0.525),
    ("2.4", "Broadwell", 2.0, 0.525), ("2.4", "Skylake", 2.2, 0.35),
    ("2.5", "Total", 2.2, 0.425), ("2.5", "Broadwell", 2.0, 0.527),
    ("2.5", "Skylake", 2.2, 0.2),
]
IDS = [f"table{t}-{m}" for t, m, _, _ in CURVES]


def _abc(table, model):
    return (M.TABLE_2_4 if table == "2.4" else M.TABLE_2_5)[model]


def _sweep(table, model, fmax, alpha, noise=0.01, seed=7):
    a, b, c = _abc(table, model)
    return M.synthetic_sweep(a, b, c, fmax, alpha, noise=noise, reps=10, seed=seed,
                             kind="compress" if table == "2.4" else "write")


def test_synthetic_sweep_shape():
    df = _sweep("2.4", "Broadwell", 2.0, 0.5)
    # 0.8 .. 2.0 GHz in 50 MHz steps = 25 frequencies, 10 repetitions each
    assert sorted(df["freq_khz"].unique()) == list(range(800000, 2000001, 50000))
    assert len(df) == 250
    assert (df.groupby("freq_khz").size() == 10).all()


@pytest.mark.parametrize("table,model,fmax,alpha", CURVES, ids=IDS)
def test_dvfs_fit_at_1pct_noise(table, model, fmax, alpha):
    """1 % multiplicative noise, 10 repetitions, 50 MHz steps. c comes back
    within 2 %; the curve within 1 % everywhere; a and b within 4 standard
    errors. Within 2 % for a (and b) is below the statistical limit of this
    design (Cramer-Rao: sd(a)/a ~ 5-8 %, Skylake 40-70 %): asserted too, so
    docs/models.md stays true."""
    a, b, c = _abc(table, model)
    fit = M.fit_dvfs(_sweep(table, model, fmax, alpha), power_ref_w=40.0)
    assert fit.c == pytest.approx(c, rel=0.02)
    assert abs(fit.a - a) <= 4 * fit.se_a
    assert abs(fit.b - b) <= 4 * fit.se_b
    f = np.array(fit.freqs_khz) / 1e6
    assert np.max(np.abs(fit.power(f) / (a * f ** b + c) - 1)) < 0.01
    assert fit.fmax_ghz == pytest.approx(fmax)
    assert fit.n == len(f) * 10
    # goodness of fit: residuals are the 1 % noise
    assert 0.005 < fit.rmse < 0.015
    assert fit.sse == pytest.approx(fit.rmse ** 2 * (fit.n - 3))
    assert fit.se_a / a > 0.02  # the statistical limit described above
    assert fit.alpha == pytest.approx(alpha, abs=0.02)


@pytest.mark.parametrize("table,model,fmax,alpha", CURVES, ids=IDS)
def test_dvfs_fit_recovers_abc_within_2pct_at_low_noise(table, model, fmax, alpha):
    """Where the data allow it, a, b and c all come back within 2 %: 0.1 %
    noise for every curve, 0.01 % for the Skylake curves (b ~ 21-23)."""
    noise = 1e-4 if model == "Skylake" else 1e-3
    a, b, c = _abc(table, model)
    fit = M.fit_dvfs(_sweep(table, model, fmax, alpha, noise=noise), power_ref_w=40.0)
    assert fit.a == pytest.approx(a, rel=0.02)
    assert fit.b == pytest.approx(b, rel=0.02)
    assert fit.c == pytest.approx(c, rel=0.02)


@pytest.mark.parametrize("table,model,fmax,alpha", CURVES, ids=IDS)
def test_dvfs_recommendation_in_paper_range(table, model, fmax, alpha):
    """From the 1 %-noise sweep, minimising E = P*t with max slowdown 10 %
    gives 0.85-0.9 fmax (paper eq. 2.3: 0.875 compress, 0.85 write)."""
    fit = M.fit_dvfs(_sweep(table, model, fmax, alpha), power_ref_w=40.0)
    rec = M.recommend_frequency(fit, max_slowdown=0.10)
    assert 0.85 - 1e-9 <= rec.ratio <= 0.9 + 1e-9, rec
    assert rec.freq_khz in fit.freqs_khz
    assert rec.slowdown <= 0.10
    assert rec.energy_saving > 0 and rec.power_saving > 0
    # the pick is the minimum of the model's energy over the allowed grid
    g = np.array(fit.freqs_khz) / 1e6
    ok = fit.runtime_ratio(g) - 1 <= 0.10
    assert rec.freq_khz == int(round(g[ok][np.argmin(fit.energy(g[ok]))] * 1e6))


def test_recommendation_follows_runtime_model_and_slowdown():
    a, b, c = M.TABLE_2_4["Skylake"]
    # with the paper-average alpha 0.525 Skylake's optimum is 2.0 GHz = 0.909 fmax
    fit = M.fit_dvfs(M.synthetic_sweep(a, b, c, 2.2, 0.525, seed=3), power_ref_w=40.0)
    assert M.recommend_frequency(fit, 0.10).freq_khz == 2000000
    # a fully CPU-bound phase (alpha 1) keeps a higher clock than a stagnant one
    a, b, c = M.TABLE_2_4["Broadwell"]
    hi = M.recommend_frequency(M.fit_dvfs(M.synthetic_sweep(a, b, c, 2.0, 1.0, seed=3),
                                          power_ref_w=40.0), 1.0)
    lo = M.recommend_frequency(M.fit_dvfs(M.synthetic_sweep(a, b, c, 2.0, 0.1, seed=3),
                                          power_ref_w=40.0), 1.0)
    assert hi.freq_khz > lo.freq_khz
    # no slowdown allowed: fmax
    fit = M.fit_dvfs(M.synthetic_sweep(a, b, c, 2.0, 0.525, seed=3), power_ref_w=40.0)
    assert M.recommend_frequency(fit, 0.0).freq_khz == 2000000
    # Broadwell's unconstrained optimum is ~0.82 fmax; 5 % caps it higher
    free = M.recommend_frequency(fit, 1.0)
    capped = M.recommend_frequency(fit, 0.05)
    assert free.ratio < 0.85 and capped.ratio > free.ratio and capped.slowdown <= 0.05
    with pytest.raises(ValueError, match="max_slowdown"):
        M.recommend_frequency(fit, -0.1)


def test_fit_scaled_by_power_at_fmax():
    """Without power_ref_w power is scaled by the mean power measured at fmax
    (paper §2.5.1); Broadwell's P(2.0) = 0.998 so a, b, c come back."""
    a, b, c = M.TABLE_2_4["Broadwell"]
    df = M.synthetic_sweep(a, b, c, 2.0, 0.525, noise=1e-3, seed=1, power_ref_w=35.0)
    fit = M.fit_dvfs(df)
    scale = a * 2.0 ** b + c  # true P(fmax)
    assert fit.a == pytest.approx(a / scale, rel=0.02)
    assert fit.b == pytest.approx(b, rel=0.02)
    assert fit.c == pytest.approx(c / scale, rel=0.02)
    assert fit.power(2.0) == pytest.approx(1.0, abs=2e-3)


def test_fit_input_errors():
    with pytest.raises(ValueError, match="freq_khz"):
        M.fit_dvfs(pd.DataFrame({"power_w": [1.0]}))
    df = pd.DataFrame({"freq_khz": [1e6, 2e6, 1e6, 2e6], "power_w": [1, 2, 1, 2],
                       "duration_ns": [1e9] * 4})
    with pytest.raises(ValueError, match="at least 4 distinct"):
        M.fit_dvfs(df)
    flat = pd.DataFrame({"freq_khz": [1e6, 1.5e6, 2e6, 2.5e6], "power_w": [4, 3, 2, 1]})
    with pytest.raises(ValueError, match="does not rise"):
        M.fit_dvfs(flat)
    fit = M.fit_dvfs(pd.DataFrame({"freq_khz": [1e6, 1.5e6, 2e6, 2.5e6],
                                   "power_scaled": [0.8, 0.81, 0.85, 1.0]}))
    with pytest.raises(ValueError, match="no runtime model"):
        M.recommend_frequency(fit)


def test_energy_saving_hand_computed():
    fit = M.DvfsFit(a=0.0064, b=5.315, c=0.7429, fmax_ghz=2.0, sse=0, rmse=0, r2=1, n=1,
                    alpha=0.5, t_max_s=1.0)
    # P(1.7) = 0.0064*1.7^5.315 + 0.7429; t(1.7)/t(2.0) = 0.5*2/1.7 + 0.5
    p17 = 0.0064 * math.exp(5.315 * math.log(1.7)) + 0.7429
    p20 = 0.0064 * math.exp(5.315 * math.log(2.0)) + 0.7429
    want = 1 - p17 * (0.5 * 2 / 1.7 + 0.5) / (p20 * 1.0)
    assert want == pytest.approx(0.0725, abs=5e-4)
    assert M.energy_saving(fit, 1700000, 2000000) == pytest.approx(want, rel=1e-9)
    assert M.energy_saving(fit, 2000000, 2000000) == 0.0
    with pytest.raises(ValueError):
        M.energy_saving(fit, 0, 2000000)


def test_policy_file(tmp_path):
    r1 = M.Recommendation(1925000, 0.875, 0.2, 0.075, 0.14, 0.1)
    r2 = M.Recommendation(1870000, 0.85, 0.11, 0.093, 0.03, 0.1)
    path = tmp_path / "tuned.json"
    text = M.policy_file({"write": r2, "compress": r1}, node_model="skylake", path=str(path))
    doc = json.loads(path.read_text())
    assert doc == json.loads(text)
    assert doc["format"] == "joulestep-policy" and doc["version"] == 1
    assert doc["policy"] == "phase:compress=0.875,write=0.85"
    assert doc["phases"]["compress"]["freq_khz"] == 1925000
    assert doc["node_model"] == "skylake"
    with pytest.raises(ValueError, match=r"\[a-z0-9_-\]"):
        M.policy_file({"Bad Kind": r1})
    with pytest.raises(ValueError, match="no recommendation"):
        M.policy_file({})


def test_fit_dvfs_groups():
    a1, b1, c1 = M.TABLE_2_4["Broadwell"]
    a2, b2, c2 = M.TABLE_2_5["Broadwell"]
    df = pd.concat([
        M.synthetic_sweep(a1, b1, c1, 2.0, 0.525, seed=1, kind="compress", node_model="m510"),
        M.synthetic_sweep(a2, b2, c2, 2.0, 0.527, seed=2, kind="write", node_model="m510"),
        pd.DataFrame({"node_model": "x", "kind": "write", "freq_khz": [1e6, 2e6],
                      "energy_cpu_uj": [1e6, 2e6], "duration_ns": [1e9, 1e9]})])
    out = M.fit_dvfs_groups(df, max_slowdown=0.1, power_ref_w=40.0).set_index(["node_model", "kind"])
    assert out.loc[("m510", "compress"), "c"] == pytest.approx(c1, rel=0.02)
    assert out.loc[("m510", "write"), "c"] == pytest.approx(c2, rel=0.02)
    assert out.loc[("m510", "write"), "rec_ratio"] == pytest.approx(0.85)
    assert pd.isna(out.loc[("m510", "compress"), "error"])
    assert "at least 4 distinct" in out.loc[("x", "write"), "error"]
    assert math.isnan(out.loc[("x", "write"), "a"])


def test_rmse_is_the_papers_sqrt_sse_over_n_minus_3():
    """Issue 9, defect 4: the thesis' fits (Tables 2.4/2.5, MATLAB) report
    RMSE = sqrt(SSE/(n - 3)) (n samples, 3 parameters).  Hand-made sweep:
    two repetitions at each of 4 frequencies, P(f) + d and P(f) - d with
    d = 0.01, on the Table 2.5 'Total' curve.  The means lie on the curve,
    so the least-squares fit is the curve itself, every residual is +-d:
    SSE = 8 d^2 = 8e-4 and RMSE = sqrt(8e-4 / 5) = 0.0126491 (sqrt(SSE/n)
    would be 0.01)."""
    a, b, c = M.TABLE_2_5["Total"]
    d = 0.01
    f = np.repeat([1.0, 1.4, 1.8, 2.2], 2)
    p = a * f ** b + c + np.tile([d, -d], 4)
    fit = M.fit_dvfs(pd.DataFrame({"freq_khz": f * 1e6, "power_scaled": p}))
    assert fit.n == 8
    assert fit.sse == pytest.approx(8e-4, rel=1e-6)
    assert fit.rmse == pytest.approx(math.sqrt(8e-4 / 5), rel=1e-6)
    assert fit.rmse == pytest.approx(0.0126491, rel=1e-5)


def test_reps_needed_hand_computed():
    """Issue 9, defect 6: se shrinks as 1/sqrt(reps), so reaching 10 % from
    45 % with 10 repetitions takes ceil(10 * 4.5^2) = ceil(202.5) = 203."""
    assert M.reps_needed(0.45, 10) == 203
    assert M.reps_needed(0.20, 3) == 12          # 3 * 2^2
    assert M.reps_needed(0.10, 10) is None       # already good enough
    assert M.reps_needed(0.065, 10) is None
    assert M.reps_needed(float("nan"), 10) is None


def _jacobian_se(f, p, a, b, c):
    """Standard errors of (a, b, c) of P = a f^b + c, computed here from the
    Jacobian: cov = s^2 (J'J)^-1, s^2 = SSE/(n - 3)."""
    J = np.column_stack([f ** b, a * f ** b * np.log(f), np.ones_like(f)])
    r = p - (a * f ** b + c)
    s2 = float(r @ r) / (len(p) - 3)
    return np.sqrt(np.diag(s2 * np.linalg.inv(J.T @ J)))


@pytest.mark.parametrize("model,warns", [("Skylake", True), ("Broadwell", False)])
def test_dvfs_groups_report_se_and_reps_needed(model, warns):
    """Issue 9, defect 6: each parameter's standard error, a's relative
    error and, when it exceeds 10 %, the repetitions that would reach 10 %.
    Table 2.5 at 1 % noise, 10 repetitions: Skylake's a cannot be
    determined (Cramer-Rao +-67 %), Broadwell's can (+-5 %)."""
    a0, b0, c0 = M.TABLE_2_5[model]
    fmax = 2.2 if model == "Skylake" else 2.0
    df = M.synthetic_sweep(a0, b0, c0, fmax, 0.3, noise=0.01, reps=10, seed=3,
                           kind="write")
    row = M.fit_dvfs_groups(df).iloc[0]
    # the samples as fit_dvfs sees them: P = E/t scaled by the mean at fmax
    f = df["freq_khz"].to_numpy() / 1e6
    pw = df["energy_cpu_uj"].to_numpy() / df["duration_ns"].to_numpy()
    p = pw / pw[np.isclose(f, fmax)].mean()
    se = _jacobian_se(f, p, row["a"], row["b"], row["c"])
    assert [row["se_a"], row["se_b"], row["se_c"]] == pytest.approx(se, rel=1e-3)
    rel = se[0] / row["a"]
    assert row["rel_se_a"] == pytest.approx(rel, rel=1e-3)
    assert row["reps"] == 10
    if warns:
        assert rel > 0.10
        assert row["reps_needed"] == math.ceil(10 * (rel / 0.10) ** 2)
    else:
        assert rel < 0.10 and pd.isna(row["reps_needed"])
