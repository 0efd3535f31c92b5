"""What-if estimates (issue 9, items 7 and 8): what io-dvfs, ckpt-dvfs and
tuned would have saved or cost on monitor steps with marked phases.

The truth is worked out here from the physical curves (CPU+DRAM power
16 + 24 (f/2)^3 W, runtime share alpha = 0.5 scaling with 1/f, fmax 2 GHz)
and the plugin's policy rules (docs/user-guide.md): io-dvfs compress at
0.875 fmax, write at 0.85 fmax; ckpt-dvfs checkpoint at min_ratio, flush at
the original clock; tuned the file's map (ratios below min_ratio raised);
other kinds keep the enclosing clock.  A nested phase's energy is counted
once, under its own kind and clock."""
import json

import pytest

from joulestep import store

import recgen
from conftest import jrun

FMAX = 2.0
ALPHA = 0.5
CO2, PRICE = 360.0, 0.25          # the test config (conftest)
NM = "fake-acpi-2x2"


def power_w(f):
    return 16.0 + 24.0 * (f / FMAX) ** 3


def t_rel(f):
    return ALPHA * FMAX / f + 1.0 - ALPHA


def change(e_j, t_s, f):
    """(saving J, extra s) of running a part measured at FMAX at f GHz."""
    k = power_w(f) / power_w(FMAX) * t_rel(f) / t_rel(FMAX)
    return e_j * (1.0 - k), t_s * (t_rel(f) / t_rel(FMAX) - 1.0)


# (seq, kind, parent, start, dur, cpu J, dram J)
PHASES = [(0, "compute", None, 1, 4, 40, 8), (1, "compress", None, 5, 2, 30, 4),
          (2, "write", None, 7, 3, 24, 6), (3, "checkpoint", None, 10, 2, 20, 4),
          (4, "flush", 3, 10.5, 1, 6, 2)]


def monitor_job(job, start_s, *, user="alice", node_model=NM, scale=1.0,
                policy="monitor", phases=True, node="node01"):
    ph = [recgen.phase(seq, kind, start_s + st, d, c * scale, m * scale,
                       depth=0 if par is None else 1, parent=par)
          for seq, kind, par, st, d, c, m in PHASES] if phases else []
    rec = recgen.record(job, "0", node, start_s=start_s, submit_s=start_s,
                        dur_s=15, cpu_j=200 * scale, dram_j=40 * scale,
                        user=user, policy=policy, base_khz=int(FMAX * 1e6),
                        node_model=node_model, phases=ph)
    rec["step"].update(nominal_freq_khz=int(FMAX * 1e6), fixed_freq_khz=None)
    rec["provenance"]["freq_control"] = "monitor" if policy == "monitor" else "joulestep"
    return rec


def truth(policy, scale=1.0, tuned=None):
    """(saving J, extra s, {kind: saving J}) of one monitor_job."""
    e = {k: (c + m) * scale for _, k, _, _, _, c, m in PHASES}
    t = {k: d for _, k, _, _, d, _, _ in PHASES}
    own_ck_e, own_ck_t = e["checkpoint"] - e["flush"], t["checkpoint"] - t["flush"]
    if policy == "io-dvfs":
        parts = {"compress": change(e["compress"], t["compress"], 0.875 * FMAX),
                 "write": change(e["write"], t["write"], 0.85 * FMAX)}
    elif policy == "ckpt-dvfs":
        parts = {"checkpoint": change(own_ck_e, own_ck_t, 0.5 * FMAX)}
    else:   # tuned = {"write": 0.8, "checkpoint": 0.6, "compress": 0.3}
        parts = {"write": change(e["write"], t["write"], 0.8 * FMAX),
                 "checkpoint": change(own_ck_e, own_ck_t, 0.6 * FMAX),
                 "flush": change(e["flush"], t["flush"], 0.6 * FMAX),  # inherits
                 "compress": change(e["compress"], t["compress"], 0.5 * FMAX)}
    return (sum(s for s, _ in parts.values()), sum(x for _, x in parts.values()),
            {k: s for k, (s, _) in parts.items()})


def add_model(db, node_model=NM):
    """The curves above as a fitted model: P(f)/P(fmax) = 0.075 f^3 + 0.4."""
    conn = store.connect(db)
    conn.execute("INSERT INTO power_models (node_model, phase_kind, a, b, c, "
                 "fmax_khz, slowdown_alpha, fitted_ns) VALUES (?, '*', ?, 3, ?, "
                 "?, ?, 0)", (node_model, 24 / 40 / FMAX ** 3, 16 / 40,
                              int(FMAX * 1e6), ALPHA))
    conn.close()


@pytest.fixture
def tuned_file(tmp_path):
    p = tmp_path / "tuned.json"
    p.write_text(json.dumps({
        "format": "joulestep-policy", "version": 1, "node_model": NM,
        "policy": "phase:checkpoint=0.6,compress=0.3,write=0.8",
        "phases": {"write": {"ratio": 0.8}, "checkpoint": {"ratio": 0.6},
                   "compress": {"ratio": 0.3}}}))
    return p


def test_job_what_if_per_policy_and_kind(run, db, tmp_path, tuned_file):
    recgen.write(tmp_path / "sp", monitor_job(9400, 100))
    run("ingest", tmp_path / "sp")
    add_model(db)
    w = jrun(run, "job", 9400, "--tuned", tuned_file)["what_if"]
    assert w["estimate"] is True and w["scope"] == "cpu+dram"
    pols = {p["policy"]: p for p in w["policies"]}
    for pol in ("io-dvfs", "ckpt-dvfs", "tuned"):
        saving, extra, by_kind = truth(pol)
        t = pols[pol]["totals"]
        assert t["saving_j"] == pytest.approx(saving, rel=1e-9), pol
        assert t["extra_time_s"] == pytest.approx(extra, rel=1e-9), pol
        # every joule once: the outermost phases' energy (the flush is inside)
        assert t["energy_j"] == pytest.approx(
            sum(c + m for _, _, par, _, _, c, m in PHASES if par is None))
        kinds = {k["kind"]: k for k in pols[pol]["kinds"]}
        for kind, s in by_kind.items():
            assert kinds[kind]["saving_j"] == pytest.approx(s, rel=1e-9), (pol, kind)
        assert kinds["compute"]["status"] == "unchanged"
    io = {k["kind"]: k for k in pols["io-dvfs"]["kinds"]}
    assert io["compress"]["freq_mhz"] == 1750 and io["write"]["freq_mhz"] == 1700
    # the checkpoint's own part excludes the flush inside it
    ck = {k["kind"]: k for k in pols["ckpt-dvfs"]["kinds"]}["checkpoint"]
    assert ck["energy_j"] == pytest.approx(24 - 8) and ck["duration_s"] == 1
    out = run("job", 9400, "--tuned", tuned_file).stdout
    assert "ESTIMATE" in out and "not measured" in " ".join(out.split())
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "ckpt-dvfs checkpoint" in " ".join(out.split())


def test_job_what_if_says_why_not(run, db, tmp_path):
    sp = tmp_path / "sp"
    recgen.write(sp, monitor_job(9401, 100, node_model="bare"))
    recgen.write(sp, monitor_job(9402, 200, policy="io-dvfs"))
    recgen.write(sp, monitor_job(9403, 300, phases=False))
    run("ingest", sp)
    add_model(db)
    w = jrun(run, "job", 9401)["what_if"]
    pols = {p["policy"]: p for p in w["policies"]}
    assert pols["tuned"]["status"] == "not estimated"
    assert "--tuned FILE" in pols["tuned"]["why"]
    ck = {k["kind"]: k for k in pols["ckpt-dvfs"]["kinds"]}["checkpoint"]
    assert ck["status"] == "not estimated"
    assert "no power model for node model bare" in ck["why"]
    assert "no power model for node model bare" in run("job", 9401).stdout
    assert jrun(run, "job", 9402)["what_if"] is None      # ran a policy
    assert jrun(run, "job", 9403)["what_if"] is None      # no phases
    r = run("job", 9401, "--tuned", tmp_path / "nope.json", ok=False)
    assert "tuned file" in r.output


# --------------------------------------------------------------------------
# item 8: report --what-if over a synthetic fleet

DAY = 86400


def fleet():
    """(records, {user: [(scale, counted?, estimated?)]}): monitor jobs
    with phases (counted), plus jobs that must not count: no phases, run
    under io-dvfs, started outside the period; one on a node model without
    a power model (counted, not estimated)."""
    recs, truth_rows, job = [], {}, 9500
    users = ("alice", "bob", "carol")
    for i in range(12):
        job += 1
        user, scale = users[i % 3], 1.0 + 0.5 * i
        recs.append(monitor_job(job, 3600 + 600 * i, user=user, scale=scale))
        truth_rows.setdefault(user, []).append((job, scale, True))
        if i % 4 == 0:     # a second step of the same job, on another node
            r = monitor_job(job, 3600 + 600 * i, user=user, scale=scale,
                            node="node02")
            recs.append(r)
            truth_rows[user].append((job, scale, True))
    job += 1
    recs.append(monitor_job(job, 20_000, user="bob", node_model="bare", scale=2))
    truth_rows["bob"].append((job, 2.0, False))
    for extra in (dict(phases=False), dict(policy="io-dvfs"),
                  dict(start_s=2 * DAY)):
        job += 1
        recs.append(monitor_job(job, extra.pop("start_s", 30_000), user="alice",
                                **extra))
    return recs, truth_rows


@pytest.mark.parametrize("policy", ["io-dvfs", "ckpt-dvfs", "tuned"])
def test_report_what_if_over_a_fleet(run, db, tmp_path, tuned_file, policy):
    recs, rows = fleet()
    for r in recs:
        recgen.write(tmp_path / "sp", r)
    run("ingest", tmp_path / "sp")
    add_model(db)
    e_phase = sum(c + m for _, _, par, _, _, c, m in PHASES if par is None)
    args = ["report", "--what-if", policy, "--by", "user", "--tuned", tuned_file,
            "--since", "2025-11-22T00:00:00+00:00",
            "--until", "2025-11-23T00:00:00+00:00"]
    r = jrun(run, *args)
    assert r["what_if"] == policy and r["estimate"] is True
    groups = {g["key"]: g for g in r["groups"]}
    assert set(groups) == {"alice", "bob", "carol"}
    want_total = 0.0
    for user, jobs in rows.items():
        g = groups[user]
        saving = sum(truth(policy, sc)[0] for _, sc, est in jobs if est)
        extra = sum(truth(policy, sc)[1] for _, sc, est in jobs if est)
        want_total += saving
        kwh = saving / 3.6e6
        assert g["jobs"] == len({j for j, _, _ in jobs}), user
        assert g["steps"] == len(jobs), user
        assert g["energy_j"] == pytest.approx(sum(e_phase * sc for _, sc, _ in jobs))
        assert g["saving_j"] == pytest.approx(saving, rel=1e-9), user
        assert g["saving_mwh"] == pytest.approx(kwh / 1000, rel=1e-9)
        assert g["co2_g"] == pytest.approx(kwh * CO2, rel=1e-9)
        assert g["cost"] == pytest.approx(kwh * PRICE, rel=1e-9)
        assert g["extra_time_s"] == pytest.approx(extra, rel=1e-9)
    t = r["totals"]
    assert t["saving_j"] == pytest.approx(want_total, rel=1e-9)
    assert t["jobs"] == 13 and t["steps"] == 16
    # the job on a node model without a power model: its lowered phases
    bare = {k: (c + m) * 2 for _, k, _, _, _, c, m in PHASES}
    not_est = {"io-dvfs": bare["compress"] + bare["write"],
               "ckpt-dvfs": bare["checkpoint"] - bare["flush"],
               "tuned": bare["compress"] + bare["write"] + bare["checkpoint"]}
    assert t["not_estimated_j"] == pytest.approx(not_est[policy])
    out = run(*args).stdout
    assert "ESTIMATE" in out and "no power model for node model bare" in \
        " ".join(out.split())
    assert max(len(line) for line in out.splitlines()) <= 80
    text = run(*args, "--format", "csv").stdout
    assert text.splitlines()[0].startswith("key,jobs,steps,energy_j")


def test_report_what_if_errors(loaded, tmp_path):
    r = loaded("report", "--what-if", "tuned", ok=False)
    assert "--tuned FILE" in r.output
    r = loaded("report", "--what-if", "fixed:0.5", ok=None)
    assert r.exit_code == 2 and "io-dvfs" in r.output
    r = loaded("report", "--what-if", "io-dvfs", "--by", "colour", ok=False)
    assert "cannot group by" in r.output


def test_policy_rules_min_ratio_cap_and_nesting():
    """Pure rules: the plugin's ratios with a site min_ratio of 0.7, the cap
    at the original clock, inheritance, and a malformed parent cycle."""
    from joulestep import whatif as W, store
    assert W.kind_ratio("io-dvfs", "write", 0.7, None) == 0.85
    assert W.kind_ratio("io-dvfs", "compress", 0.9, None) == 0.9
    assert W.kind_ratio("io-dvfs", "checkpoint", 0.7, None) is None
    assert W.kind_ratio("ckpt-dvfs", "checkpoint", 0.7, None) == 0.7
    assert W.kind_ratio("ckpt-dvfs", "flush", 0.7, None) == W.ORIGINAL
    assert W.kind_ratio("tuned", "compress", 0.7, {"compress": 0.3}) == 0.7
    with pytest.raises(W.WhatIfError):
        W.kind_ratio("fixed:0.5", "write", 0.5, None)
    ph = [{"seq": 0, "kind": "checkpoint", "parent_seq": None},
          {"seq": 1, "kind": "compute", "parent_seq": 0},
          {"seq": 2, "kind": "flush", "parent_seq": 1},
          {"seq": 3, "kind": "x", "parent_seq": 4},
          {"seq": 4, "kind": "y", "parent_seq": 3}]
    eff = W.effective_ratios(ph, "ckpt-dvfs", 0.6, None)
    assert eff == {0: 0.6, 1: 0.6, 2: W.ORIGINAL, 3: W.ORIGINAL, 4: W.ORIGINAL}
    model = {"a": 0.075, "b": 3.0, "c": 0.4, "fmax_khz": 2_000_000,
             "slowdown_alpha": ALPHA}
    # a site cap of 1.6 GHz: 0.875 x 2.0 GHz would be above it, so no change
    assert W.estimate(10.0, 1.0, 0.875, 1_600_000, model)["status"] == "unchanged"
    est = W.estimate(10.0, 1.0, 0.5, 1_600_000, model)   # 1.0 GHz from 1.6
    s, _ = change(10.0, 1.0, 1.0)
    s16, _ = change(10.0, 1.0, 1.6)
    k = (1 - s / 10) / (1 - s16 / 10)            # E(1.0)/E(1.6) per unit work
    assert est["saving_j"] == pytest.approx(10.0 * (1 - k), rel=1e-9)
    assert est["extra_time_s"] == pytest.approx(t_rel(1.0) / t_rel(1.6) - 1, rel=1e-9)


# --------------------------------------------------------------------------
# one counting rule (nesting.count_phases) and one scope (Settings.scoped_j)


def test_what_if_counts_nested_phases_by_the_one_rule(run, db, tmp_path):
    """The what-if counts phases as `job` and `compare` do (nesting.py): a
    flush that fits in its checkpoint is taken out of it; one whose
    counters disagree with it (more energy than the checkpoint) leaves the
    checkpoint's whole measurement with the checkpoint and counts 0."""
    ph = [recgen.phase(0, "checkpoint", 101, 2, 10, 2),
          recgen.phase(1, "flush", 101.5, 1, 14, 2, depth=1, parent=0),
          recgen.phase(2, "checkpoint", 104, 2, 20, 4),
          recgen.phase(3, "flush", 104.5, 1, 6, 2, depth=1, parent=2)]
    rec = recgen.record(9410, "0", "node01", start_s=100, submit_s=100, dur_s=10,
                        cpu_j=100, dram_j=20, policy="monitor",
                        base_khz=int(FMAX * 1e6), phases=ph)
    rec["step"].update(nominal_freq_khz=int(FMAX * 1e6), fixed_freq_khz=None)
    rec["provenance"]["freq_control"] = "monitor"
    recgen.write(tmp_path / "sp", rec)
    run("ingest", tmp_path / "sp")
    add_model(db)
    s = jrun(run, "job", 9410)
    # checkpoint 0: 12 J, 2 s, its flush 0; checkpoint 2: 24 - 8 J, 1 s
    s0, x0 = change(12, 2, 0.5 * FMAX)
    s2, x2 = change(16, 1, 0.5 * FMAX)
    w = {p["policy"]: p for p in s["what_if"]["policies"]}["ckpt-dvfs"]
    ck = {k["kind"]: k for k in w["kinds"]}
    assert ck["checkpoint"]["energy_j"] == pytest.approx(12 + 16)
    assert ck["checkpoint"]["duration_s"] == pytest.approx(3)
    assert ck["flush"]["energy_j"] == pytest.approx(0 + 8)
    assert ck["checkpoint"]["saving_j"] == pytest.approx(s0 + s2, rel=1e-9)
    assert ck["checkpoint"]["extra_time_s"] == pytest.approx(x0 + x2, rel=1e-9)
    # the same figures as the job's counted phase energies
    counted = {}
    for p in s["steps"][0]["phases"]:
        counted[p["kind"]] = counted.get(p["kind"], 0) + p["counted_energy_total_j"]
    assert {k: ck[k]["energy_j"] for k in counted} == pytest.approx(counted)


def _conf(tmp_path, extra):
    p = tmp_path / "scope.conf"
    p.write_text(f"[site]\ncluster =\nco2_g_per_kwh = {CO2}\n"
                 f"price_per_kwh = {PRICE}\ncurrency = CHF\n{extra}\n")
    return p


@pytest.mark.parametrize("extra,node_j", [
    ("", lambda e, s: e),
    ("node_overhead_w = 50", lambda e, s: e + 50 * s),
    ("node_factor = 1.5", lambda e, s: 1.5 * e)])
def test_what_if_figures_have_the_site_scope(run, db, tmp_path, extra, node_j):
    """kWh/MWh, CO2 and cost of the what-if go through the site's scope,
    as job and report do: with node_overhead_w the saved (or added)
    node-seconds count at that power; node_factor scales the energy."""
    recgen.write(tmp_path / "sp", monitor_job(9420, 100))
    recgen.write(tmp_path / "sp", monitor_job(9421, 200, scale=2.0))
    run("ingest", tmp_path / "sp")
    add_model(db)
    conf = _conf(tmp_path, extra)
    scope = "node estimate" if extra else "cpu+dram"
    t_phase = sum(d for _, _, par, _, d, _, _ in PHASES if par is None)
    e_phase = sum(c + m for _, _, par, _, _, c, m in PHASES if par is None)
    saving = truth("ckpt-dvfs")[0] * 3              # scales 1 + 2
    extra_s = truth("ckpt-dvfs")[1] * 2             # time does not scale
    kwh = node_j(saving, -extra_s) / 3.6e6
    r = jrun(run, "--config", conf, "report", "--what-if", "ckpt-dvfs")
    assert r["scope"] == scope
    t = r["totals"]
    assert t["saving_j"] == pytest.approx(saving, rel=1e-9)
    assert t["saving_kwh"] == pytest.approx(kwh, rel=1e-9)
    assert t["saving_mwh"] == pytest.approx(kwh / 1000, rel=1e-9)
    assert t["co2_g"] == pytest.approx(kwh * CO2, rel=1e-9)
    assert t["cost"] == pytest.approx(kwh * PRICE, rel=1e-9)
    assert t["energy_mwh"] == pytest.approx(node_j(3 * e_phase, 2 * t_phase) / 3.6e9,
                                            rel=1e-9)
    out = " ".join(run("--config", conf, "report", "--what-if", "ckpt-dvfs")
                   .stdout.split())
    assert ("node estimate" if extra else "CPU packages and DRAM only") in out
    rows = run("--config", conf, "report", "--what-if", "ckpt-dvfs", "--format",
               "csv").stdout.splitlines()
    assert "scope" in rows[0].split(",") and rows[1].count(scope) == 1
    w = jrun(run, "--config", conf, "job", 9421)["what_if"]
    assert w["scope"] == scope
    wt = {p["policy"]: p for p in w["policies"]}["ckpt-dvfs"]["totals"]
    kwh1 = node_j(truth("ckpt-dvfs", 2.0)[0], -truth("ckpt-dvfs")[1]) / 3.6e6
    assert wt["saving_kwh"] == pytest.approx(kwh1, rel=1e-9)
    assert wt["cost"] == pytest.approx(kwh1 * PRICE, rel=1e-9)
