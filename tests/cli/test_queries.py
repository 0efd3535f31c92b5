"""job and report on the hand-checked fixture (recgen.fixture_records)."""
import csv
import io

import pytest

from joulestep import store

import recgen
from conftest import jrun
from recgen import GIB, S, T0

ALICE = ["--first-seen", T0]           # job 42, the first of two
CO2, PRICE = 360.0, 0.25               # from the test config


def approx(x):
    return pytest.approx(x, rel=1e-9)


def test_job_step_and_phase_figures(loaded):
    s = jrun(loaded, "job", 42, *ALICE)
    assert s["job"]["user"] == "alice" and s["job"]["tags"] == {
        "strategy": "veloc", "tier": "dram"}
    assert s["site"] == {"cluster": None, "co2_g_per_kwh": CO2,
                         "price_per_kwh": PRICE, "currency": "CHF"}
    st = {x["step_id"]: x for x in s["steps"]}
    assert [x["step_id"] for x in s["steps"]] == ["0", "batch"]
    s0 = st["0"]
    assert s0["energy_cpu_j"] == 100 and s0["energy_dram_j"] == 20
    assert s0["energy_total_j"] == 120 and s0["duration_s"] == 10
    assert s0["avg_power_w"] == approx(12.0)
    assert s0["kwh"] == approx(120 / 3.6e6)
    assert s0["co2_g"] == approx(120 / 3.6e6 * CO2)     # 0.012 g
    assert s0["cost"] == approx(120 / 3.6e6 * PRICE)
    assert s0["freq_mhz"] == 2400
    ck = s0["phases"][1]
    assert (ck["kind"], ck["label"], ck["freq_mhz"]) == ("checkpoint", "ckpt-1", 1200)
    assert ck["energy_total_j"] == 24 and ck["avg_power_w"] == approx(12.0)
    assert ck["bytes"] == GIB and ck["gib_per_s"] == approx(0.5)
    assert ck["j_per_gib"] == approx(24.0)
    assert ck["saving_status"] == "not estimated" and ck["saving_j"] is None
    fl = s0["phases"][2]
    assert fl["depth"] == 1 and fl["parent_seq"] == 1 and fl["j_per_gib"] == approx(8.0)
    assert s0["phases"][0]["saving_status"] == "base clock"
    assert s0["saving_status"] == "not estimated"
    assert st["batch"]["saving_status"] == "base clock"
    t = s["totals"]
    assert t["energy_total_j"] == 156 and t["energy_cpu_j"] == 130
    assert t["saving_status"] == "not estimated"
    # alone on node01: no other job's step overlaps it in time (the store's
    # rule; the record's step.exclusive, false here, is not read)
    assert not any("node shared" in c for c in s["caveats"])
    assert any("ID recycled" in c and f"--first-seen {T0 + 3 * 86400 * S}" in c
               for c in s["caveats"])
    assert len(s["other_submissions"]) == 1


def test_job_latest_submission_by_default(loaded):
    s = jrun(loaded, "job", 42)
    assert s["job"]["user"] == "carol" and s["totals"]["energy_total_j"] == 60
    assert s["other_submissions"][0]["submit_time_ns"] == T0
    assert s["other_submissions"][0]["first_seen_ns"] == T0
    assert s["job"]["first_seen_ns"] == T0 + 3 * 86400 * S
    assert s["job"]["last_seen_ns"] == T0 + (3 * 86400 + 6) * S


def test_job_submit_time_is_a_deprecated_alias(loaded):
    r = loaded("job", 42, "--submit-time", T0, "--format", "json")
    assert '"user": "alice"' in r.stdout and "deprecated" in r.stderr
    r = loaded("job", 42, "--submit-time", T0, "--first-seen", T0 + 1, ok=False)
    assert "give only one" in r.output
    r = loaded("job", 42, "--first-seen", T0 + 1, ok=False)
    assert f"known: {T0 + 3 * 86400 * S}, {T0}" in r.output


def test_job_without_submit_time_says_first_seen(run, tmp_path):
    sp = tmp_path / "sp"
    recgen.write(sp, recgen.record(77, "0", "node01", first_seen_s=5, start_s=6))
    run("ingest", sp)
    out = run("job", 77, "--utc").stdout     # text: local time unless --utc
    assert "First seen 2025-11-22T00:00:05+00:00" in out and "Submitted" not in out
    s = jrun(run, "job", 77)["job"]
    assert s["submit_time_ns"] is None and s["submit_time"] is None
    assert (s["first_seen_ns"], s["last_seen_ns"]) == (T0 + 5 * S, T0 + 16 * S)


def _add_model(db, a, b, c, alpha):
    conn = store.connect(db)
    conn.execute("INSERT INTO power_models (node_model, phase_kind, a, b, c, "
                 "fmax_khz, slowdown_alpha, fitted_ns) VALUES "
                 "('fake-acpi-2x2', '*', ?, ?, ?, 2400000, ?, 0)", (a, b, c, alpha))
    conn.close()


def test_job_saving_from_power_model(loaded, db):
    # P(f) = 1*f^1 + 0: power (CPU + DRAM, what `model dvfs` fits) halves at
    # 1.2 GHz vs the 2.4 GHz base; same duration assumed.  Each phase's
    # saving is its own part's (the flush inside the checkpoint carries its
    # own): checkpoint 24 - 8 = 16 J measured, base 32 J.
    _add_model(db, 1.0, 1.0, 0.0, None)
    s = jrun(loaded, "job", 42, *ALICE)
    s0 = s["steps"][0]
    ck, fl = s0["phases"][1], s0["phases"][2]
    assert ck["saving_j"] == approx(16.0)
    assert ck["saving_pct"] == approx(50.0)
    assert ck["saving_basis"] == "cpu+dram" and ck["saving_vs"] == "original clock"
    assert ck["saving_status"] == "estimated (same duration assumed)"
    assert ck["saving_model"] == "fake-acpi-2x2/*"
    assert fl["saving_j"] == approx(8.0)          # (6 + 2)*2 - 8
    # the nested flush is inside the checkpoint: the step saves 16 + 8 J
    # (the checkpoint's 24 J measurement once), not 24 + 8
    assert s0["saving_status"] == "estimated" and s0["saving_j"] == approx(24.0)
    assert s["totals"]["saving_j"] == approx(24.0)


def test_job_saving_with_slowdown(loaded, db):
    # alpha = 1: fully clock-bound, t(1.2)=2 t(2.4): base = (20 + 4)*2*0.5
    # = 24 J: power halved, time doubled, nothing saved.
    _add_model(db, 1.0, 1.0, 0.0, 1.0)
    s0 = jrun(loaded, "job", 42, *ALICE)["steps"][0]
    assert s0["phases"][1]["saving_j"] == approx(0.0)
    assert s0["phases"][1]["saving_status"] == "estimated"


def test_job_errors(loaded):
    r = loaded("job", 777, ok=False)
    assert "no job 777" in r.output
    r = loaded("job", 42, "--cluster", "other", ok=False)
    assert "no job 42 on cluster other" in r.output


def test_job_table_fits_80_columns(loaded):
    out = loaded("job", 42, *ALICE).stdout
    assert "checkpoint:ckpt-1" in out and "Caveats" in out
    assert max(len(l) for l in out.splitlines()) <= 80


def test_job_csv(loaded):
    rows = list(csv.DictReader(io.StringIO(loaded("job", 42, *ALICE,
                                                  "--format", "csv").stdout)))
    assert [(r["level"], r["step_id"], r["seq"]) for r in rows] == [
        ("step", "0", ""), ("phase", "0", "0"), ("phase", "0", "1"),
        ("phase", "0", "2"), ("step", "batch", "")]
    assert float(rows[2]["j_per_gib"]) == 24.0 and rows[2]["freq_mhz"] == "1200.0"


def test_report_by_user(loaded):
    r = jrun(loaded, "report")
    g = {x["key"]: x for x in r["groups"]}
    assert [x["key"] for x in r["groups"]] == ["bob", "alice", "carol"]
    assert g["alice"]["energy_total_j"] == 156 and g["alice"]["steps"] == 2
    assert g["alice"]["jobs"] == 1 and g["bob"]["energy_total_j"] == 220
    assert g["bob"]["share_pct"] == approx(100 * 220 / 436)
    assert g["alice"]["policy_steps_pct"] == approx(50.0)
    assert g["alice"]["policy_energy_pct"] == approx(100 * 120 / 156)
    t = r["totals"]
    assert (t["jobs"], t["steps"], t["energy_total_j"]) == (3, 4, 436)
    assert t["energy_cpu_j"] == 380 and t["energy_dram_j"] == 56
    assert t["kwh"] == approx(436 / 3.6e6)
    assert t["cost"] == approx(436 / 3.6e6 * PRICE)
    assert t["policy_steps_pct"] == approx(25.0)
    assert t["policy_energy_pct"] == approx(100 * 120 / 436)


def test_report_period_and_groupings(loaded):
    day2 = "2025-11-22T12:00:00+00:00"
    r = jrun(loaded, "report", "--since", day2)
    assert [g["key"] for g in r["groups"]] == ["carol"]
    r = jrun(loaded, "report", "--until", day2)
    assert r["totals"]["energy_total_j"] == 376
    r = jrun(loaded, "report", "--by", "node")
    g = {x["key"]: x for x in r["groups"]}
    assert g["node01"]["energy_total_j"] == 156 and g["node02"]["jobs"] == 2
    assert r["totals"]["jobs"] == 3
    r = jrun(loaded, "report", "--by", "tag:strategy")
    assert {x["key"]: x["energy_total_j"] for x in r["groups"]} == {
        "genericio": 220, "veloc": 156, "(none)": 60}
    r = jrun(loaded, "report", "--by", "policy")
    assert {x["key"]: x["steps"] for x in r["groups"]} == {
        "(none)": 2, "io-dvfs": 1, "none": 1}
    r = jrun(loaded, "report", "--by", "account", "--top", "1")
    assert len(r["top"]) == 1 and len(r["groups"]) == 3


def test_report_bad_input(loaded):
    r = loaded("report", "--by", "colour", ok=False)
    assert "use user, account, partition, qos, node, policy or tag:KEY" in r.output
    r = loaded("report", "--since", "last tuesday", ok=False)
    assert "ISO date" in r.output


def test_report_table_and_csv(loaded):
    out = loaded("report", "--top", "2").stdout
    assert max(len(l) for l in out.splitlines()) <= 80
    assert "(1 others)" in out and "bob" in out
    rows = list(csv.DictReader(io.StringIO(loaded("report", "--format", "csv").stdout)))
    assert [r["key"] for r in rows] == ["bob", "alice", "carol"]
    assert float(rows[1]["energy_total_j"]) == 156


def test_global_format_option(loaded):
    out = loaded("--format", "json", "report").stdout
    assert out.lstrip().startswith("{")


def test_missing_database_is_a_clear_error(run, tmp_path, engine):
    if engine == "postgresql":      # a URL of a database that does not exist
        r = run("--db", run.db.rsplit("/", 1)[0] + "/nosuchdb?" + run.db.split("?")[1],
                "job", 1, ok=False)
        assert "cannot open database" in r.output and "nosuchdb" in r.output
        return
    r = run("job", 1, ok=False)
    assert "no database at" in r.output and "joulestep ingest" in r.output


def test_ingest_flag_loads_default_spool(run, spool):
    # the test config points [paths] spool at this spool
    s = jrun(run, "report", "--ingest")
    assert s["totals"]["steps"] == 4


def test_env_db(monkeypatch, spool, tmp_path):
    from click.testing import CliRunner
    from joulestep.cli import cli
    monkeypatch.setenv("JOULESTEP_DB", str(tmp_path / "env.db"))
    r = CliRunner().invoke(cli, ["ingest", str(spool)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "env.db").exists()


def test_bad_config_is_reported(monkeypatch, tmp_path, run):
    bad = tmp_path / "bad.conf"
    bad.write_text("[site]\nco2_g_per_kwh = lots\n")
    r = run("--config", bad, "report", ok=False)
    assert "co2_g_per_kwh" in r.output and "expected a number" in r.output
