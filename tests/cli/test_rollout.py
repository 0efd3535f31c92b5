"""Rollout: a node whose joulestep is older than the store's schema
(mid-upgrade: another host's newer ingest migrated the store) refuses to
ingest, and says what to do; the records wait in the spool, untouched, and
land once the node is upgraded (docs/admin-guide.md, "Upgrading").

A store "from the future" is the current store with its version set one
past this joulestep's latest migration, on each engine."""
from __future__ import annotations

import os
import subprocess

import pytest

import recgen
from joulestep import store


def _newer(url_or_path) -> int:
    conn = store.connect(url_or_path)
    v = store.latest_version() + 1
    if conn.dialect == "postgresql":
        conn.execute("UPDATE joulestep_schema SET version = ?", (v,))
    else:
        conn.execute(f"PRAGMA user_version = {v}")
    conn.close()
    return v


@pytest.fixture
def newer_db(engine, tmp_path, request):
    if engine == "sqlite":
        return tmp_path / "js.db"
    return request.getfixturevalue("pg_cluster").create_db("rollout")


def test_an_older_cli_refuses_and_says_what_to_do(repo, tmp_path, newer_db):
    db = newer_db
    v = _newer(db)
    spool = tmp_path / "spool"
    paths = [recgen.write(spool, r) for r in recgen.fixture_records()]
    res = subprocess.run([str(repo / ".venv" / "bin" / "joulestep"), "--db", str(db),
                          "ingest", str(spool)], env=dict(os.environ),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    err = res.stderr
    assert f"schema version {v}" in err and str(store.latest_version()) in err, err
    # what to do: upgrade joulestep here; nothing is lost meanwhile
    assert "upgrade joulestep" in err and "on this host" in err, err
    assert "stay in the spool" in err and "Upgrading" in err, err
    assert err.count("\n") == 1, err           # one line (joulestep(1))
    assert all(p.exists() for p in paths)      # not quarantined, not moved
    assert not (spool / ".quarantine").exists()
