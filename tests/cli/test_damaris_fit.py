"""`joulestep model damaris --fit-where`: the Dorier calibration fitted from
recorded runs without I/O (recgen.damaris_study), checked by hand."""
import pytest

import recgen
from conftest import jrun

CAL = recgen.DAMARIS
# measured runs on 4 nodes (J per node): DC(1) 4 x 13000, DN(3:1) 3 x 14000 + 6000
MEASURED = {"DC(1)": [13000] * 4, "DN(3:1)": [14000, 14000, 14000, 6000]}
ARGS = ("model", "damaris", "--fit-where", "io=none", "--nodes", 4,
        "--cores-per-node", 4, "--approach", "DC(1)", "--approach", "DN(3:1)",
        "--where", "study=damaris")
REL = 1e-6      # durations are whole ns, energies whole uJ


@pytest.fixture
def dstudy(run, tmp_path):
    sp = tmp_path / "damaris"
    for r in recgen.damaris_study(measured=MEASURED):
        recgen.write(sp, r)
    run("ingest", sp)
    return run


def _cal(doc):
    return {x["parameter"]: x for x in doc["calibration"]}


def test_fit_recovers_the_generating_calibration(dstudy):
    r = jrun(dstudy, *ARGS, "--idle-where", "state=idle")
    cal = _cal(r)
    # T_base: the 1x1 runs took 1188 s and 1212 s (the batch step around
    # job 8001 is ignored: numbered steps only)
    assert cal["t_base_s"]["value"] == pytest.approx(1200.0, rel=REL)
    for n, s in CAL["s_cores"].items():
        assert cal[f"s_cores({n})"]["value"] == pytest.approx(s, rel=REL)
    for n, s in CAL["s_nodes"].items():
        assert cal[f"s_nodes({n})"]["value"] == pytest.approx(s, rel=REL)
    # P_max: node power of the 4-cores-per-node runs; P_idle: the idle runs
    assert cal["p_max_w"]["value"] == pytest.approx(100.0, rel=REL)
    assert cal["p_idle_w"]["value"] == pytest.approx(30.0, rel=REL)
    assert cal["p_max_w"]["source"] == "fitted, 6 runs at 4 cores/node, 14 node samples"
    assert cal["p_idle_w"]["source"] == "fitted, 2 idle runs, 3 node samples"
    runs = {(x["nodes"], x["cores_per_node"]): x for x in r["calibration_runs"]}
    assert set(runs) == {(1, 1), (1, 2), (1, 4), (2, 4), (4, 4)}
    assert runs[(1, 2)]["runs"] == 2
    assert runs[(1, 2)]["node_power_w"] == pytest.approx(60.0, rel=REL)   # 20 + 20*2
    assert runs[(1, 1)]["duration_std_s"] == pytest.approx(12 * 2 ** 0.5, rel=REL)

    # predictions, by hand from eqs. 1-4 with the generating calibration
    pred = {x["config"]: x for x in r["prediction"]}
    s3 = 0.9 + (0.75 - 0.9) * (3 - 2) / (4 - 2)              # s_cores(3) = 0.825
    t_dc = 1200 / ((3 * s3) * (4 * 0.9))                     # 134.68 s
    e_dc = t_dc * 100 * 4                                    # 53872 J
    sn3 = 0.95 + (0.9 - 0.95) * (3 - 2) / (4 - 2)            # s_nodes(3) = 0.925
    t_dn = 1200 / ((4 * 0.75) * (3 * sn3))                   # 144.14 s
    p_dn = (3 * 100 + 0.5 * (30 + 100) * 1) / 4              # 91.25 W
    e_dn = t_dn * p_dn * 4                                   # 52613 J
    assert pred["DC(1)"]["t_sim_s"] == pytest.approx(t_dc, rel=REL)
    assert pred["DC(1)"]["energy_j"] == pytest.approx(e_dc, rel=REL)
    assert pred["DN(3:1)"]["p_sim_w"] == pytest.approx(p_dn, rel=REL)
    assert pred["DN(3:1)"]["energy_j"] == pytest.approx(e_dn, rel=REL)
    assert r["pick"] == "DN(3:1)"
    acc = {x["config"]: x for x in r["accuracy"]}
    assert acc["DC(1)"]["measured_j"] == pytest.approx(52000)
    assert acc["DC(1)"]["accuracy_pct"] == pytest.approx(100 * (1 - (e_dc - 52000) / 52000),
                                                         rel=REL)
    assert acc["DN(3:1)"]["accuracy_pct"] == pytest.approx(100 * (1 - (e_dn - 48000) / 48000),
                                                           rel=REL)


def test_fit_same_as_options_path(dstudy):
    """The fitted calibration predicts exactly what the same numbers given
    as options predict."""
    fitted = jrun(dstudy, *ARGS, "--idle-where", "state=idle")
    given = jrun(dstudy, "model", "damaris", "--t-base", 1200, "--s-cores",
                 "1:1,2:0.9,4:0.75", "--s-nodes", "1:1,2:0.95,4:0.9", "--p-idle", 30,
                 "--p-max", 100, *ARGS[4:])
    for a, b in zip(fitted["prediction"], given["prediction"]):
        assert a["config"] == b["config"]
        assert a["energy_j"] == pytest.approx(b["energy_j"], rel=REL)
    assert "calibration" not in given


def test_options_override_fitted_values(dstudy):
    r = jrun(dstudy, *ARGS, "--p-idle", 20, "--p-max", 120, "--s-nodes", "1:1,4:0.8")
    cal = _cal(r)
    assert cal["p_idle_w"] == {"parameter": "p_idle_w", "value": 20.0, "source": "option"}
    assert cal["p_max_w"]["value"] == 120.0 and cal["p_max_w"]["source"] == "option"
    assert "s_nodes(2)" not in cal and cal["s_nodes(4)"]["value"] == 0.8
    assert cal["t_base_s"]["value"] == pytest.approx(1200.0, rel=REL)
    assert cal["t_base_s"]["source"] == "fitted, 10 runs"
    pred = {x["config"]: x for x in r["prediction"]}
    sn3 = 1 + (0.8 - 1) * (3 - 1) / (4 - 1)
    t_dn = 1200 / ((4 * 0.75) * (3 * sn3))
    assert pred["DN(3:1)"]["energy_j"] == pytest.approx(
        t_dn * (3 * 120 + 0.5 * (20 + 120)) / 4 * 4, rel=REL)
    t_dc = 1200 / ((3 * 0.825) * (4 * 0.8))
    assert pred["DC(1)"]["energy_j"] == pytest.approx(t_dc * 120 * 4, rel=REL)
    # n_iter divides the fitted T_base (T_base is one iteration)
    r = jrun(dstudy, *ARGS, "--p-idle", 30, "--n-iter", 10)
    assert _cal(r)["t_base_s"]["value"] == pytest.approx(120.0, rel=REL)
    assert r["prediction"][0]["t_sim_s"] == pytest.approx(1200 / ((3 * 0.825) * 3.6),
                                                          rel=REL)


def test_table_output_shows_the_calibration(dstudy):
    out = dstudy(*ARGS, "--idle-where", "state=idle").stdout
    assert "calibration runs (without I/O):" in out
    assert "t_base_s     1200  fitted, 10 runs" in out
    assert "The model picks DN(3:1)." in out
    assert max(map(len, out.splitlines())) <= 80


def test_too_few_runs_and_other_errors(dstudy):
    # without the 1-node 1-core run there is no T_base
    r = dstudy("model", "damaris", "--fit-where", "io=none", "--fit-where", "ncpus=4",
               "--p-idle", 30, *ARGS[4:], ok=False)
    assert "too few runs to fit: no run on 1 node with 1 core" in r.output
    assert "have (nodes x cores): 1x4, 2x4, 4x4" in r.output
    r = dstudy("model", "damaris", "--fit-where", "io=bogus", "--p-idle", 30,
               *ARGS[4:], ok=False)
    assert "no recorded run matches --fit-where io=bogus" in r.output
    r = dstudy(*ARGS, ok=False)
    assert "give --p-idle W or select recorded idle runs with --idle-where" in r.output
    r = dstudy(*ARGS, "--idle-where", "state=asleep", ok=False)
    assert "no recorded run matches --idle-where state=asleep" in r.output
    # a configuration outside the measured core counts is not extrapolated
    r = dstudy("model", "damaris", "--fit-where", "io=none", "--p-idle", 30,
               "--nodes", 4, "--cores-per-node", 8, "--approach", "DC(1)", ok=False)
    assert "s_cores(7): outside the measured range [1, 4]" in r.output
    r = dstudy(*ARGS, "--p-idle", 30, "--cores-column", "tag:cores", ok=False)
    assert "--cores-column tag:cores: not recorded here" in r.output
    r = dstudy("model", "damaris", "--idle-where", "state=idle", *ARGS[4:], ok=False)
    assert "--idle-where needs --fit-where" in r.output
    # P_idle above the fitted P_max is refused
    r = dstudy(*ARGS, "--p-idle", 150, ok=False)
    assert "must not exceed p_max_w" in r.output


def test_fit_without_calibration_runs(loaded):
    """A database without calibration runs: the errors say what is needed."""
    args = ("model", "damaris", "--fit-where", "io=none", "--p-idle", 30, *ARGS[4:8])
    r = loaded(*args, "--approach", "DC(1)", ok=False)
    assert "--fit-where io=none: no column or tag 'io'" in r.output
    r = loaded("model", "damaris", "--fit-where", "strategy=none", "--p-idle", 30,
               *ARGS[4:8], "--approach", "DC(1)", ok=False)
    assert "no recorded run matches --fit-where strategy=none: the fit needs " \
        "recorded runs without I/O: one on 1 node with 1 core (T_base)" in r.output
