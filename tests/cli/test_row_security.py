"""PostgreSQL row-level security (migration 016; issue 25, point 6): two real
Linux users, each connecting with their own role by peer authentication on
the local socket, see only their own jobs' rows; the ingest role (the tables'
owner, not a superuser) and a member of joulestep_read_all see every row.

The test makes two throwaway users (names no existing user or group has) and
a private PostgreSQL cluster (tests/pgharness.py) whose pg_hba.conf trusts
only the test's own roles and asks peer authentication of everyone else;
users and cluster are removed afterwards.  The truth is the records the test
itself ingests.  A user runs joulestep with the system's Python (the test's
venv lives under /root, which other users cannot read).
"""
from __future__ import annotations

import grp
import json
import os
import pathlib
import pwd
import secrets
import subprocess

import pytest

import pgharness
import recgen
from joulestep import store

REPO = pathlib.Path(__file__).resolve().parents[2]
INGEST = "jsingest"          # the owner role: runs ingest and the migrations
#: what docs/admin-guide.md, "Users' own roles (PostgreSQL)", grants users
USER_TABLES = ("jobs, steps, phases, step_tags, step_zones, step_gpus, phase_gpus, "
               "phase_ranks, step_packages, slurm_steps, lost_records, step_conflicts, nodes, "
               "power_models, joulestep_schema")


def _free_name() -> str:
    while True:
        name = "jsrls" + secrets.token_hex(3)
        try:
            pwd.getpwnam(name)
            continue
        except KeyError:
            pass
        try:
            grp.getgrnam(name)
            continue
        except KeyError:
            return name


@pytest.fixture(scope="module")
def two_users():
    if os.geteuid() != 0:
        pytest.fail("the row-level security test makes two Linux users: run as root")
    made = []
    try:
        for _ in range(2):
            name = _free_name()
            subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                            "--home-dir", "/nonexistent", "--shell", "/bin/sh", name],
                           check=True, capture_output=True, stdin=subprocess.DEVNULL)
            made.append(name)
        yield [pwd.getpwnam(n) for n in made]
    finally:
        for name in made:
            subprocess.run(["userdel", name], capture_output=True)
            subprocess.run(["groupdel", name], capture_output=True)  # if left


@pytest.fixture(scope="module")
def peer_pg(two_users):
    """A private cluster: trust for the test's admin roles, peer for the rest;
    the socket's directory reachable by the two users."""
    pg = pgharness.PgCluster().start()
    try:
        hba = pg.dir / "data" / "pg_hba.conf"
        hba.write_text(f"local all {pgharness.SUPERUSER} trust\n"
                       f"local all {INGEST} trust\n"
                       "local all all peer\n")
        owner = pwd.getpwnam("postgres")
        os.chown(hba, owner.pw_uid, owner.pw_gid)
        os.chmod(pg.dir, 0o711)
        pg.sql("SELECT pg_reload_conf()")
        pg.sql(f"CREATE ROLE {INGEST} LOGIN")
        pg.sql("CREATE ROLE joulestep_users NOLOGIN")
        pg.sql("CREATE ROLE joulestep_read_all NOLOGIN")
        for u in two_users:
            pg.sql(f"CREATE ROLE {u.pw_name} LOGIN IN ROLE joulestep_users")
        pg.sql(f"CREATE DATABASE js OWNER {INGEST} TEMPLATE template0")
        yield pg
    finally:
        pg.stop()


def _records(a: str, b: str) -> list[dict]:
    """a: jobs 101 (two steps, phases) and 102; b: job 201 (tagged)."""
    def ph(t0=recgen.T0):
        return [recgen.phase(0, "compute", 1, 4, 40, 8, t0=t0),
                recgen.phase(1, "write", 5, 2, 10, 2, t0=t0)]
    return [recgen.record(101, "0", "n1", user=a, phases=ph()),
            recgen.record(101, "1", "n1", user=a, start_s=12),
            recgen.record(102, "0", "n2", user=a, submit_s=100, start_s=101),
            recgen.record(201, "0", "n1", user=b, start_s=30, tags={"approach": "x"},
                          phases=ph(recgen.T0 + 29 * recgen.S))]


COUNTS = ("SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM steps), "
          "(SELECT count(*) FROM phases), (SELECT count(*) FROM step_tags), "
          "(SELECT count(*) FROM step_zones), (SELECT string_agg(DISTINCT user_name, ',' "
          "ORDER BY user_name) FROM jobs)")


def _as_user(u, *argv, check=True) -> subprocess.CompletedProcess:
    def demote():
        os.setgid(u.pw_gid)
        os.setgroups([])
        os.setuid(u.pw_uid)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C.UTF-8",
           "PYTHONPATH": str(REPO / "cli" / "src"), "TZ": "UTC"}
    res = subprocess.run(["/usr/bin/python3", *argv], preexec_fn=demote, env=env,
                         capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL, cwd="/")
    if check:
        assert res.returncode == 0, res.stdout + res.stderr
    return res


def test_each_user_sees_only_their_own_rows(two_users, peer_pg, tmp_path):
    a, b = two_users
    pg = peer_pg
    recs = _records(a.pw_name, b.pw_name)
    # ingest as the owner role (not a superuser): migrations 001..016 run as it
    owner_url = pg.url("js", INGEST)
    conn = store.connect(owner_url)
    store.ingest_records(conn, recs, gap_ns=86400 * recgen.S)
    conn.execute(f"GRANT SELECT ON {USER_TABLES} TO joulestep_users")
    conn.execute(f"GRANT SELECT ON {USER_TABLES}, spool_files TO joulestep_read_all")

    def truth(users):
        mine = [r for r in recs if r["job"]["user"] in users]
        return [len({r["job"]["job_id"] for r in mine}), len(mine),
                sum(len(r["phases"]) for r in mine),
                sum(len(r["job"]["tags"]) for r in mine),
                sum(len(r["zones"]) for r in mine),
                ",".join(sorted({r["job"]["user"] for r in mine}))]

    everyone = truth({a.pw_name, b.pw_name})
    assert list(conn.execute(COUNTS).fetchone()) == everyone   # the owner: all
    conn.close()

    # each user's own connection: peer authentication, the role is the login name
    user_url = f"postgresql:///js?host={pg.dir}&port={pg.port}"
    probe = ("import json, sys, psycopg\n"
             "c = psycopg.connect(sys.argv[1])\n"
             "print(json.dumps([c.execute('SELECT current_user').fetchone()[0],"
             " list(c.execute(sys.argv[2]).fetchone())]))\n")
    for u in (a, b):
        who, counts = json.loads(_as_user(u, "-c", probe, user_url, COUNTS).stdout)
        assert who == u.pw_name
        assert counts == truth({u.pw_name}), (u.pw_name, counts)
    # no password, no other role: peer authentication refuses a's login as b
    res = _as_user(a, "-c", probe, user_url.replace(":///", f"://{b.pw_name}@/"),
                   COUNTS, check=False)
    assert res.returncode != 0 and "peer authentication failed" in res.stderr.lower()

    # joulestep itself, as each user: own job shown, the other's not found
    cli = ("import sys\nfrom joulestep.cli import main\n"
           "sys.exit(main(sys.argv[1:]))\n")
    got = json.loads(_as_user(a, "-c", cli, "--db", user_url, "--format", "json",
                              "job", "101").stdout)
    assert got["job"]["user"] == a.pw_name and len(got["steps"]) == 2
    res = _as_user(a, "-c", cli, "--db", user_url, "job", "201", check=False)
    assert res.returncode == 1 and "201" in res.stderr, res.stdout + res.stderr
    got = json.loads(_as_user(b, "-c", cli, "--db", user_url, "--format", "json",
                              "job", "201").stdout)
    assert got["job"]["user"] == b.pw_name

    # a member of joulestep_read_all (dashboards, support) sees every row
    pg.sql(f"GRANT joulestep_read_all TO {b.pw_name}")
    who, counts = json.loads(_as_user(b, "-c", probe, user_url, COUNTS).stdout)
    assert counts == everyone
    # and a user cannot write (every policy is FOR SELECT; no grant either)
    res = _as_user(a, "-c", "import sys, psycopg\nc = psycopg.connect(sys.argv[1])\n"
                   "c.execute('DELETE FROM jobs')\n", user_url, check=False)
    assert res.returncode != 0 and "permission denied" in res.stderr


def test_sqlite_store_migrates_without_the_postgresql_part(tmp_path):
    """Migration 016's statements are PostgreSQL's own
    (sql/postgresql/016_row_security.sql): a SQLite store reaches version
    16 with the same tables, and only PostgreSQL has an extra part."""
    conn = store.connect(tmp_path / "js.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == store.latest_version() >= 16
    assert "ROW LEVEL SECURITY" in store.engines.engine_extra(16, "postgresql").read_text()
    assert store.engines.engine_extra(16, "sqlite") is None
    assert store.engines.engine_extra(15, "postgresql") is None
    conn.close()
