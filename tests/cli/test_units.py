"""etc/systemd: what the ingest unit counts as success (issue 25).

`joulestep ingest` exits 1 when a record was quarantined, and 1 for any user
error (no database, a database it cannot open): neither may pass as success,
or a quarantined record (or a dead database) never shows as a failed unit."""
import json
import os
import re
import subprocess

import recgen


def success_statuses(unit_text: str) -> set:
    out = {0}
    for line in re.findall(r"^SuccessExitStatus=(.*)$", unit_text, re.M):
        out |= {int(w) for w in line.split() if w.isdigit()}
    return out


def test_ingest_failures_fail_the_unit(repo, tmp_path):
    ok = success_statuses((repo / "etc" / "systemd" / "joulestep-ingest.service").read_text())
    js = str(repo / ".venv" / "bin" / "joulestep")
    spool = tmp_path / "spool"
    for r in recgen.fixture_records()[:2]:
        recgen.write(spool, r)
    bad = spool / "demo" / "1" / "1.0.0.n1.json"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text('{"format": "joulestep-record", "version": 1, "trunc')
    env = dict(os.environ)   # the isolated site config (conftest.py)
    db = tmp_path / "js.db"
    res = subprocess.run([js, "--db", str(db), "ingest", str(spool)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert "1 quarantined" in res.stdout, res.stdout + res.stderr
    assert res.returncode not in ok
    # the good records landed: the next run (nothing new) succeeds
    res = subprocess.run([js, "--db", str(db), "ingest", str(spool)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.returncode in ok, res.stdout + res.stderr
    # a database that cannot be opened (its directory is a file)
    (tmp_path / "afile").write_text("")
    res = subprocess.run([js, "--db", str(tmp_path / "afile" / "js.db"),
                          "ingest", str(spool)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode != 0 and res.returncode not in ok, res.stdout + res.stderr


def test_ingest_unit_runs_the_auto_learner_when_asked(repo, tmp_path):
    """ExecStartPost: nothing without JOULESTEP_AUTO_FILE; with it, `policy update`
    writes the file from the store the ingest just filled."""
    unit = (repo / "etc" / "systemd" / "joulestep-ingest.service").read_text()
    (line,) = re.findall(r"^ExecStartPost=/bin/sh -c '(.*)'$", unit, re.M)
    js = str(repo / ".venv" / "bin" / "joulestep")
    db = tmp_path / "js.db"
    spool = tmp_path / "spool"
    for r in recgen.fixture_records()[:2]:
        recgen.write(spool, r)
    env = {**os.environ, "JOULESTEP_DB": str(db)}
    subprocess.run([js, "ingest", str(spool)], env=env, check=True, capture_output=True)
    sh = line.replace("/usr/local/bin/joulestep", js)
    res = subprocess.run(["/bin/sh", "-c", sh], env=env, capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout == "", res.stdout + res.stderr
    auto = tmp_path / "auto.json"
    env.update(JOULESTEP_AUTO_FILE=str(auto), JOULESTEP_AUTO_ARGS="--bound-pct 3")
    res = subprocess.run(["/bin/sh", "-c", sh], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(auto.read_text())
    assert doc["format"] == "joulestep-auto" and doc["bound_pct"] == 3
