"""`joulestep job` for users who are not admins (docs/security.md, "Threat model:
RAPL side channels"): energies rounded to the record's energy_resolution_uj, none for
steps and phases shorter than its min_phase_ns; admins (root, or whoever can write the
store) see every figure. Expectations are computed here from the records."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

import recgen
from recgen import J, S, phase, record
from click.testing import CliRunner
from joulestep import store
from joulestep.cli import cli

MINP_NS = 20_000_000       # 20 ms
RES_UJ = 250_000           # 0.25 J: large, so that rounding shows


def rnd(v, res=RES_UJ):
    q, r = divmod(v, res)
    return (q + (r >= res - r)) * res


def _records(with_rules=True):
    ph = [phase(0, "write", 1, 0.5, 12.3456, 1.1111, label="long", nbytes=1 << 30),
          phase(1, "compress", 2, 0.005, 0.4321, 0.0123, label="short"),
          phase(2, "write", 3, 0.5, 3.0, 0.2, label="outer"),
          phase(3, "flush", 3.1, 0.002, 0.9, 0.1, depth=1, parent=2)]
    long_step = record(77, "0", "node01", dur_s=10, cpu_j=100.1234, dram_j=20.5678,
                       phases=ph, policy="monitor")
    short_step = record(77, "1", "node01", start_s=20, dur_s=0.01, cpu_j=0.7777,
                        dram_j=0.1, policy="monitor")
    recs = [long_step, short_step]
    if with_rules:
        for r in recs:
            r["provenance"].update(min_phase_ns=MINP_NS, energy_resolution_uj=RES_UJ)
    return recs


@pytest.fixture
def uv(run, tmp_path):
    d = tmp_path / "uvspool"
    for r in _records():
        recgen.write(d, r)
    run("ingest", d)
    return run


def _job_json(run, *extra):
    return json.loads(run("job", 77, "--format", "json", *extra).output)


def _steps(js):
    return {s["step_id"]: s for s in js["steps"]}


def test_admin_sees_every_figure(uv):
    st = _steps(_job_json(uv))
    ph = {p["seq"]: p for p in st["0"]["phases"]}
    assert ph[1]["energy_cpu_j"] == pytest.approx(0.4321)
    assert ph[0]["energy_cpu_j"] == pytest.approx(12.3456)
    assert st["1"]["energy_cpu_j"] == pytest.approx(0.7777)
    assert not any(p.get("energy_note") for p in ph.values())


def test_user_view_rounds_and_hides_short_intervals(uv):
    js = _job_json(uv, "--user-view")
    st = _steps(js)
    recs = {r["step"]["step_id"]: r for r in _records()}
    full = {p["seq"]: p for p in recs["0"]["phases"]}
    ph = {p["seq"]: p for p in st["0"]["phases"]}
    for seq in (0, 2):     # long: rounded
        assert ph[seq]["energy_cpu_j"] * J == pytest.approx(rnd(full[seq]["energy_cpu_uj"]))
        assert ph[seq]["energy_dram_j"] * J == pytest.approx(rnd(full[seq]["energy_dram_uj"]))
        assert "energy_note" not in ph[seq]
    assert ph[0]["energy_cpu_j"] != pytest.approx(12.3456)   # the rounding did something
    for seq in (1, 3):     # short: nothing derived from energy
        p = ph[seq]
        for k in ("energy_cpu_j", "energy_dram_j", "energy_total_j", "avg_power_w",
                  "kwh", "co2_g", "cost", "j_per_gib", "saving_j",
                  "counted_energy_total_j"):
            assert p.get(k) is None, (seq, k, p.get(k))
        assert "shorter than min_phase_ms (20 ms)" in p["energy_note"]
    # the step: rounded; the short step: hidden, and said so
    s0 = recs["0"]["step"]
    assert st["0"]["energy_cpu_j"] * J == pytest.approx(rnd(s0["energy_cpu_uj"]))
    assert st["0"]["energy_total_j"] * J == pytest.approx(
        rnd(s0["energy_cpu_uj"]) + rnd(s0["energy_dram_uj"]))
    assert st["1"]["energy_cpu_j"] is None and st["1"]["kwh"] is None
    assert any("step 1 on node01: shorter than min_phase_ms" in c for c in js["caveats"])
    # the job's total is the sum of what the user sees, nothing more
    assert js["totals"]["energy_cpu_j"] * J == pytest.approx(rnd(s0["energy_cpu_uj"]))
    # text: the note, and no figure of the short phase
    out = uv("job", 77, "--user-view").output
    assert "Phases shown without energy" in out
    assert "compress:short (seq 1): shorter than min_phase_ms (20 ms)" in out
    assert "0.4321" not in out and "0.432" not in out


def test_records_without_the_rules_use_the_defaults(run, tmp_path):
    """Records of older plugins: 10 ms and 61 uJ."""
    d = tmp_path / "old"
    for r in _records(with_rules=False):
        recgen.write(d, r)
    run("ingest", d)
    st = _steps(_job_json(run, "--user-view"))
    ph = {p["seq"]: p for p in st["0"]["phases"]}
    assert ph[1]["energy_cpu_j"] is None          # 5 ms < 10 ms
    assert ph[0]["energy_cpu_j"] * J == pytest.approx(rnd(int(12.3456 * J), 61))
    assert st["1"]["energy_cpu_j"] * J == pytest.approx(rnd(int(0.7777 * J), 61))  # 10 ms


def test_who_cannot_write_the_store_gets_the_user_view(run, db, tmp_path, request):
    """A process of another uid (no passwd entry needed) that can read but not write
    the database gets the user view without asking; root gets the admin view."""
    d = tmp_path / "spool2"
    for r in _records():
        recgen.write(d, r)
    run("ingest", d)
    if store.db.is_url(db):
        return _pg_reader_gets_the_user_view(db, request.getfixturevalue("pg_cluster"))
    if os.geteuid() != 0:
        pytest.skip("needs root to run the CLI as another uid")
    pub = pathlib_public()
    try:
        shutil.copy(tmp_path / "js.db", pub / "js.db")
        os.chmod(pub / "js.db", 0o644)
        (pub / "js.conf").write_text("[site]\ncluster =\n")
        os.chmod(pub / "js.conf", 0o644)
        # everything imported first: the interpreter's own files may be unreadable
        # by that uid (a Python under /root)
        code = ("import os, sys; from joulestep.cli import cli; "
                "import joulestep.report, joulestep.render, joulestep.output, "
                "joulestep.userview, joulestep.whatif, joulestep.store, joulestep.jobid; "
                "os.setgid(54321); os.setuid(54321); cli(sys.argv[1:])")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(pub),
               "XDG_DATA_HOME": str(pub), "JOULESTEP_CONFIG": str(pub / "js.conf"),
               "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        res = subprocess.run([sys.executable, "-c", code, "--db", str(pub / "js.db"), "job",
                              "77", "--format", "json"], capture_output=True, text=True,
                             env=env, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        ph = {p["seq"]: p for p in _steps(json.loads(res.stdout))["0"]["phases"]}
        assert ph[1]["energy_cpu_j"] is None and "energy_note" in ph[1]
        assert ph[0]["energy_cpu_j"] * J == pytest.approx(rnd(int(12.3456 * J)))
    finally:
        shutil.rmtree(pub, ignore_errors=True)
    # root, same database: every figure
    ph = {p["seq"]: p for p in _steps(_job_json(run))["0"]["phases"]}
    assert ph[1]["energy_cpu_j"] == pytest.approx(0.4321)


def pathlib_public():
    """A fresh directory any uid can traverse (tmp_path's parents are 0700)."""
    import pathlib
    p = pathlib.Path(tempfile.mkdtemp(prefix="js-userview-", dir="/tmp"))
    os.chmod(p, 0o755)
    return p


def test_short_and_long_are_split_at_min_phase(uv):
    """A phase exactly min_phase_ns long is shown (>=), as in the plugin."""
    assert S > MINP_NS  # the records' long phases are far above


def _pg_reader_gets_the_user_view(url, pg, monkeypatch=None):
    """PostgreSQL: a role with SELECT only is not an admin, the owner is; a
    non-root process as that role gets the user view."""
    from joulestep import userview
    dbname = url.split("/")[3].split("?")[0]
    role = "js_reader_" + dbname
    pg.sql(f"DROP ROLE IF EXISTS {role}", dbname)
    pg.sql(f"CREATE ROLE {role} LOGIN", dbname)
    try:
        pg.sql(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}", dbname)
        # row-level security (migration 016): a role that is not the job's
        # user reads other users' jobs only as a joulestep_read_all member
        # (a dashboard's role); tests/cli/test_row_security.py has the rest
        pg.sql("DO $$ BEGIN CREATE ROLE joulestep_read_all NOLOGIN; "
               "EXCEPTION WHEN duplicate_object THEN NULL; END $$", dbname)
        pg.sql(f"GRANT joulestep_read_all TO {role}", dbname)
        reader = pg.url(dbname, role)
        orig = os.geteuid
        os.geteuid = lambda: 54321
        try:
            with store.connect(reader, write=False) as rc:
                assert not userview.is_admin(reader, rc)
            with store.connect(url) as ac:
                assert userview.is_admin(url, ac)
            res = CliRunner().invoke(cli, ["--db", reader, "job", "77", "--format", "json"])
        finally:
            os.geteuid = orig
        assert res.exit_code == 0, res.output
        ph = {p["seq"]: p for p in _steps(json.loads(res.output))["0"]["phases"]}
        assert ph[1]["energy_cpu_j"] is None and "energy_note" in ph[1]
        assert ph[0]["energy_cpu_j"] * J == pytest.approx(rnd(int(12.3456 * J)))
    finally:
        pg.sql(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}", dbname)
        pg.sql(f"DROP ROLE {role}", dbname)
