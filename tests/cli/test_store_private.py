"""Private by default (docs/security.md, "Who sees which jobs (the store)"): a new SQLite
store is created 0600, whatever the umask, or 0640 with the group the
admin names ([paths] db_group); the systemd units set UMask=0077; the
exporter runs as its own system user with the credentials it needs.

The truth is the mode the test asks for, read back with os.stat."""
from __future__ import annotations

import configparser
import grp
import os
import re
import stat
import subprocess

import pytest

import recgen
from joulestep import store


def _ingest(repo, tmp_path, db, cfg=None, umask=0o022):
    spool = tmp_path / "spool"
    for r in recgen.fixture_records()[:2]:
        recgen.write(spool, r)
    env = dict(os.environ)
    if cfg is not None:
        env["JOULESTEP_CONFIG"] = str(cfg)
    old = os.umask(umask)
    try:
        return subprocess.run([str(repo / ".venv" / "bin" / "joulestep"), "--db", str(db),
                               "ingest", str(spool)], env=env, capture_output=True,
                              text=True, timeout=120)
    finally:
        os.umask(old)


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_a_new_store_is_0600(repo, tmp_path, umask):
    db = tmp_path / "js.db"
    res = _ingest(repo, tmp_path, db, umask=umask)
    assert res.returncode == 0, res.stdout + res.stderr
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o600


def test_a_new_store_is_0640_with_the_admins_group(repo, tmp_path):
    group = grp.getgrgid(os.getgid()).gr_name     # a group this process is in
    cfg = tmp_path / "js.conf"
    cfg.write_text(f"[paths]\ndb_group = {group}\n")
    db = tmp_path / "js.db"
    res = _ingest(repo, tmp_path, db, cfg=cfg)
    assert res.returncode == 0, res.stdout + res.stderr
    st = os.stat(db)
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_gid == os.getgid()


def test_an_unknown_group_is_a_clear_error(repo, tmp_path):
    names = {g.gr_name for g in grp.getgrall()}
    missing = next(f"jsnogroup{i}" for i in range(1000) if f"jsnogroup{i}" not in names)
    cfg = tmp_path / "js.conf"
    cfg.write_text(f"[paths]\ndb_group = {missing}\n")
    res = _ingest(repo, tmp_path, tmp_path / "js.db", cfg=cfg)
    assert res.returncode == 1 and "db_group" in res.stderr and missing in res.stderr, res.stderr
    assert not (tmp_path / "js.db").exists()


def test_an_existing_store_keeps_its_mode(tmp_path):
    """The admin's own choice (a chmod after creation) stands."""
    db = tmp_path / "js.db"
    store.connect(db).close()
    os.chmod(db, 0o644)
    store.connect(db).close()
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o644


def _unit(repo, name) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str
    cp.read_string((repo / "etc" / "systemd" / name).read_text())
    return cp


def test_units_are_private_by_default(repo):
    for u in ("joulestep-ingest.service", "joulestep-exporter.service"):
        assert _unit(repo, u)["Service"].get("UMask") == "0077", u


def test_the_exporter_runs_as_its_own_user_with_its_credentials(repo):
    svc = _unit(repo, "joulestep-exporter.service")["Service"]
    user = svc.get("User")
    assert user and user != "root", svc.get("User")
    # the user exists on installed systems: the packages' sysusers.d file makes it
    sysusers = (repo / "etc" / "sysusers.d" / "joulestep.conf").read_text()
    assert re.search(rf"^u\s+{re.escape(user)}\s", sysusers, re.M), sysusers
    group = svc.get("Group")
    assert group and re.search(rf"^g\s+{re.escape(group)}\s", sysusers, re.M)
    # its PostgreSQL password file, where ProtectHome= leaves it readable
    env = dict(re.findall(r"(\w+)=(\S+)", svc.get("Environment", "")))
    pgpass = env.get("PGPASSFILE", "")
    assert pgpass.startswith("/etc/joulestep/"), env
    assert svc.get("ProtectHome") in ("true", "yes", "read-only")
    # systemd reads the unit as written
    res = subprocess.run(["systemd-analyze", "verify", "--man=no",
                          str(repo / "etc" / "systemd" / "joulestep-exporter.service")],
                         capture_output=True, text=True, timeout=60)
    assert "Unknown key" not in res.stderr and "Invalid" not in res.stderr, res.stderr
