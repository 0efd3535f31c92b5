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
    # users' own roles: the views of migration 017 only (granted to
    # joulestep_users by the migration), no grant on the tables
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
             "if not c.execute(\"SELECT has_table_privilege('public.jobs', 'SELECT')\")"
             ".fetchone()[0]:\n"
             "    c.execute('SET search_path = joulestep_user, public')\n"
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


# ------------------------------------------------- what a user's role reads
MIN_PHASE_NS = 10_000_000           # the records' min_phase_ns: 10 ms
RES_UJ = 61                         # their energy_resolution_uj


def nearest(v: int, res: int) -> int:
    """v to the nearest multiple of res, halves up (the truth, written out)."""
    lo = v - v % res
    return lo + res if v - lo >= lo + res - v else lo


def _rounded_records(a: str, b: str) -> list[dict]:
    """a: job 301 with a 5 ms phase (shorter than min_phase_ms) and a 2 s one,
    energies that are not multiples of 61 uJ; b: job 401 on the same node."""
    ph = [recgen.phase(0, "write", 2, 0.005, 0.123457, 0.010007),
          recgen.phase(1, "checkpoint", 3, 2, 20.000031, 4.000029)]
    out = [recgen.record(301, "0", "n1", user=a, cpu_j=100.000033, dram_j=20.000047,
                         phases=ph),
           recgen.record(401, "0", "n1", user=b, start_s=40, cpu_j=70.000011, dram_j=7)]
    for r in out:
        r["provenance"].update(min_phase_ns=MIN_PHASE_NS, energy_resolution_uj=RES_UJ)
    return out


def test_a_users_role_reads_rounded_figures_through_views(two_users, peer_pg):
    """Migration 017: a user's own role has no grant on the tables; it reads
    the views of joulestep_user, which show only its own jobs, round every
    energy to the record's resolution and hide a phase shorter than
    min_phase_ms, as `joulestep job` shows users (the same figures as the
    admin's --user-view: the two implementations agree)."""
    a, b = two_users
    pg = peer_pg
    pg.sql("CREATE DATABASE js2 OWNER jsingest TEMPLATE template0")
    recs = _rounded_records(a.pw_name, b.pw_name)
    conn = store.connect(pg.url("js2", INGEST))
    store.ingest_records(conn, recs, gap_ns=86400 * recgen.S)
    conn.close()
    user_url = f"postgresql:///js2?host={pg.dir}&port={pg.port}"
    raw = ("import sys, psycopg\nc = psycopg.connect(sys.argv[1])\n"
           "c.execute('SELECT count(*) FROM public.' + sys.argv[2])\n")
    for table in ("steps", "phases", "jobs", "step_zones"):
        res = _as_user(a, "-c", raw, user_url, table, check=False)
        assert res.returncode != 0 and "permission denied" in res.stderr, (table, res.stderr)
    q = ("import json, sys, psycopg\nc = psycopg.connect(sys.argv[1])\n"
         "print(json.dumps([list(r) for r in c.execute(sys.argv[2]).fetchall()]))\n")
    steps = json.loads(_as_user(a, "-c", q, user_url,
                                "SELECT j.job_id, s.energy_cpu_uj, s.energy_dram_uj, "
                                "s.energy_total_uj FROM joulestep_user.steps s JOIN "
                                "joulestep_user.jobs j USING (job_pk)").stdout)
    st = recs[0]["step"]
    cpu, dram = nearest(st["energy_cpu_uj"], RES_UJ), nearest(st["energy_dram_uj"], RES_UJ)
    assert steps == [[301, cpu, dram, cpu + dram]]      # b's job 401: not there
    phases = json.loads(_as_user(a, "-c", q, user_url,
                                 "SELECT seq, energy_cpu_uj, energy_dram_uj FROM "
                                 "joulestep_user.phases ORDER BY seq").stdout)
    p1 = recs[0]["phases"][1]
    assert phases == [[0, None, None],                 # 5 ms < 10 ms: hidden
                      [1, nearest(p1["energy_cpu_uj"], RES_UJ),
                       nearest(p1["energy_dram_uj"], RES_UJ)]]
    assert p1["energy_cpu_uj"] % RES_UJ and nearest(p1["energy_cpu_uj"], RES_UJ) != \
        p1["energy_cpu_uj"]                             # the rounding shows
    # no neighbour: b's step on the same node is not in any view a reads
    n = json.loads(_as_user(a, "-c", q, user_url,
                            "SELECT count(*) FROM joulestep_user.steps").stdout)
    assert n == [[1]]
    # the CLI as the user reads the views; the admin's --user-view the tables:
    # the same figures
    cli = ("import sys\nfrom joulestep.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    mine = json.loads(_as_user(a, "-c", cli, "--db", user_url, "--format", "json",
                               "job", "301").stdout)
    admin = json.loads(_as_user(a, "-c", cli, "--db", pg.url("js2", INGEST), "--format",
                                "json", "job", "--user-view", "301").stdout)
    def figures(s):
        return [(x["step_id"], x.get("energy_cpu_j"), x.get("energy_dram_j"),
                 x.get("energy_total_j"),
                 [(p["seq"], p.get("energy_cpu_j"), p.get("energy_dram_j"))
                  for p in x.get("phases", [])]) for x in s["steps"]]
    assert figures(mine) == figures(admin), (figures(mine), figures(admin))
    assert figures(mine)[0][1] == cpu / 1e6


# --------------------------------------- a shared node: the user's own share
P0, PB = 12, 14         # the package: 12 W idle + 14 W per busy CPU (4 CPUs)


def _shared_rec(job_id, user, start_s, step_cpus, cpu_s, busy_s, dur_s=10):
    e = P0 * dur_s + PB * busy_s
    r = recgen.record(job_id=job_id, node="n1", user=user, start_s=start_s, dur_s=dur_s,
                      cpu_j=e, dram_j=10, exclusive=False, ncpus=step_cpus,
                      first_seen_s=start_s - 1)
    r["zones"] = [{"name": "package-0", "id": "intel-rapl:0", "kind": "package",
                   "energy_uj": e * recgen.J, "wraps": 0},
                  {"name": "dram", "id": "intel-rapl:0:0", "kind": "dram",
                   "energy_uj": 10 * recgen.J, "wraps": 0}]
    r["step"]["cpu_time_ns"] = int(cpu_s * recgen.S)
    r["packages"] = [{"package": 0, "cpus": 4, "step_cpus": step_cpus,
                      "busy_ns": int(busy_s * recgen.S), "total_ns": 4 * dur_s * recgen.S}]
    r["provenance"].update(min_phase_ns=MIN_PHASE_NS, energy_resolution_uj=RES_UJ)
    return r


def test_a_users_role_reads_its_shared_node_share_without_its_neighbours(
        two_users, peer_pg, tmp_path, repo):
    """Two users' jobs on one package at once (a: 2 CPUs, 20 CPU-s; b: 1 CPU,
    10 CPU-s; the package busy 34 CPU-s): `joulestep ingest` (the owner)
    stores each job's estimated share; a's role reads its own share, by the
    rule worked out here (static part by CPUs, the rest by CPU time), not
    the whole package and not b's row nor b's inputs."""
    a, b = two_users
    pg = peer_pg
    pg.sql("CREATE DATABASE js3 OWNER jsingest TEMPLATE template0")
    spool = tmp_path / "spool"
    for r in (_shared_rec(10, a.pw_name, 100, 4, 4, 4), _shared_rec(11, a.pw_name, 200, 4, 36, 36),
              _shared_rec(1, a.pw_name, 300, 2, 20, 34), _shared_rec(2, b.pw_name, 300, 1, 10, 34)):
        recgen.write(spool, r)
    res = subprocess.run([str(repo / ".venv" / "bin" / "joulestep"), "--db",
                          pg.url("js3", INGEST), "ingest", str(spool)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    user_url = f"postgresql:///js3?host={pg.dir}&port={pg.port}"
    q = ("import json, sys, psycopg\nc = psycopg.connect(sys.argv[1])\n"
         "print(json.dumps([list(r) for r in c.execute(sys.argv[2]).fetchall()]))\n")
    got = json.loads(_as_user(a, "-c", q, user_url,
                              "SELECT j.job_id, x.cpu_uj, x.sharing FROM joulestep_user.step_shares x "
                              "JOIN joulestep_user.steps s USING (step_pk) JOIN joulestep_user.jobs j "
                              "USING (job_pk) ORDER BY j.job_id").stdout)
    e = P0 * 10 + PB * 34
    want = (P0 * 10 * 2 / 4 + (e - P0 * 10) * 20 / 34) * recgen.J
    shared = [g for g in got if g[0] == 1]
    assert len(shared) == 1 and shared[0][2] == "shared", got
    assert abs(shared[0][1] - want) <= RES_UJ, (shared, want)      # rounded to 61 uJ
    assert shared[0][1] % RES_UJ == 0 and shared[0][1] < e * recgen.J
    assert {g[0] for g in got} <= {1, 10, 11}                       # b's job 2: not there
    # nor b's inputs: a's role reads no package row, not even its own
    assert json.loads(_as_user(a, "-c", q, user_url,
                               "SELECT count(*) FROM joulestep_user.step_packages").stdout) == [[0]]
    res = _as_user(a, "-c", q, user_url, "SELECT count(*) FROM public.step_shares", check=False)
    assert res.returncode != 0 and "permission denied" in res.stderr


def test_a_users_role_reads_the_grids_values_through_its_view(two_users, peer_pg):
    """The grid's imported CO2 and prices (migration 018) hold no one's
    jobs: a user's role reads them through joulestep_user.grid_intensity,
    with no grant on the table, so its `job` has the time-varying figures
    (store.intensity.has_values is True, not 'unreadable')."""
    a, _ = two_users
    pg = peer_pg
    pg.sql("CREATE DATABASE js4 OWNER jsingest TEMPLATE template0")
    conn = store.connect(pg.url("js4", INGEST))
    store.ingest_records(conn, [recgen.record(501, "0", "n1", user=a.pw_name)])
    rows = [("z1", "co2_g_per_kwh", recgen.T0, recgen.T0 + 3600 * recgen.S, 250.0, "test"),
            ("z1", "price_per_kwh", recgen.T0, recgen.T0 + 3600 * recgen.S, 0.3, "test")]
    for r in rows:
        conn.execute("INSERT INTO grid_intensity (zone, kind, start_ns, end_ns, "
                     "value_per_kwh, source) VALUES (?, ?, ?, ?, ?, ?)", r)
    conn.close()
    user_url = f"postgresql:///js4?host={pg.dir}&port={pg.port}"
    raw = ("import sys, psycopg\nc = psycopg.connect(sys.argv[1])\n"
           "c.execute('SELECT count(*) FROM public.grid_intensity')\n")
    res = _as_user(a, "-c", raw, user_url, check=False)
    assert res.returncode != 0 and "permission denied" in res.stderr, res.stderr
    q = ("import json, sys\nfrom joulestep import store\n"
         "from joulestep.store import intensity\nc = store.connect(sys.argv[1])\n"
         "print(json.dumps([intensity.has_values(c), [list(r) for r in "
         "intensity.series_rows(c, ['z1'])]]))\n")
    have, got = json.loads(_as_user(a, "-c", q, user_url).stdout)
    assert have is True
    # series_rows adds whether the source marked each value estimated (0: not)
    assert sorted(tuple(r) for r in got) == sorted(r + (0,) for r in rows)
