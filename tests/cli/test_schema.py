"""The schema in sql/: builds with sqlite3 alone, migrations, keys, cascades."""
import os
import sqlite3
import subprocess

import pytest

from joulestep import store


def test_package_reads_the_sql_dir(repo):
    """The package's sql/ is a symlink to the repo's sql/: one copy of the
    schema, which wheels and sdists pick up as package data."""
    canon = sorted(p.name for p in (repo / "sql").glob("[0-9]*.sql"))
    assert canon
    assert os.path.samefile(store.SQL_DIR, repo / "sql")
    assert sorted(p.name for _, p in store.migrations()) == canon


def _schema(conn):
    return sorted(conn.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall())


def test_sqlite3_cli_builds_the_same_schema(repo, tmp_path):
    built = tmp_path / "cli.db"
    files = sorted((repo / "sql").glob("[0-9]*.sql"))
    script = "".join(f".read {f}\n" for f in files)
    subprocess.run(["sqlite3", str(built)], input=script, text=True, check=True)
    a = sqlite3.connect(built)
    b = store.connect(tmp_path / "store.db")
    assert _schema(a) == _schema(b)
    assert a.execute("PRAGMA user_version").fetchone()[0] == store.latest_version()
    assert b.execute("PRAGMA user_version").fetchone()[0] == store.latest_version() >= 1
    tables = {r[0] for r in a.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"nodes", "jobs", "step_tags", "steps", "step_zones", "phases",
            "phase_ranks", "power_models"} <= tables


def test_schema_snapshot_is_what_the_migrations_build(repo, tmp_path):
    """sql/schema.sql is the schema a new store has: the same text as the
    migrations give today (regenerate: python -m joulestep.store.schema),
    and loaded alone into an empty SQLite database, the same tables,
    columns, indexes and triggers as a store the migrations built."""
    from joulestep.store import schema
    text = (repo / "sql" / "schema.sql").read_text()
    assert text == schema.snapshot(), \
        "sql/schema.sql is stale: python -m joulestep.store.schema > sql/schema.sql"
    assert f"at migration {store.latest_version()} " in text
    snap = sqlite3.connect(":memory:")
    snap.executescript(text)
    built = store.connect(tmp_path / "built.db")
    assert _schema(snap) == _schema(built)
    tables = [r[0] for r in snap.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert "steps" in tables and "jobs" in tables
    for t in tables:
        assert snap.execute(f"PRAGMA table_info({t})").fetchall() == \
            built.execute(f"PRAGMA table_info({t})").fetchall(), t


def test_schema_snapshot_columns_on_postgresql(repo, pg_url):
    """PostgreSQL's store has the snapshot's tables and columns (the types
    are the engine's own)."""
    snap = sqlite3.connect(":memory:")
    snap.executescript((repo / "sql" / "schema.sql").read_text())
    conn = store.connect(pg_url)
    try:
        for (t,) in snap.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            want = [r[1] for r in snap.execute(f"PRAGMA table_info({t})")]
            assert [c for c, _ in conn.columns(t)] == want, t
    finally:
        conn.close()


def test_units_in_column_names(tmp_path):
    conn = store.connect(tmp_path / "x.db")
    for table in ("steps", "phases", "step_zones", "phase_ranks", "jobs"):
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        for c in cols:
            words = c.split("_")
            if any(w in words for w in ("energy", "time", "start", "end",
                                        "duration", "freq")) \
                    and c not in ("freq_min_ratio", "freq_control",
                                  "cpu_time_source"):  # not quantities
                assert c.endswith(("_uj", "_ns", "_khz")), f"{table}.{c} has no unit"


def test_reopen_is_noop_and_newer_db_refused(tmp_path):
    p = tmp_path / "x.db"
    store.connect(p).close()
    before = p.read_bytes()
    store.connect(p).close()
    assert p.read_bytes() == before
    c = sqlite3.connect(p)
    c.execute("PRAGMA user_version = 99")
    c.close()
    with pytest.raises(store.StoreError, match="newer"):
        store.connect(p)


def test_natural_keys_and_cascade(tmp_path):
    import recgen
    conn = store.connect(tmp_path / "x.db")
    res = store.ingest_records(conn, recgen.fixture_records())
    assert res.new_steps == 4 and not res.errors
    # a second copy of the same step row violates the natural key
    row = conn.execute("SELECT job_pk, step_id, het_component, node_pk, start_ns, "
                       "end_ns, duration_ns, energy_cpu_uj, energy_total_uj "
                       "FROM steps LIMIT 1").fetchone()
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO steps (job_pk, step_id, het_component, node_pk, "
                     "start_ns, end_ns, duration_ns, energy_cpu_uj, energy_total_uj)"
                     " VALUES (?,?,?,?,?,?,?,?,?)", row)
    # foreign keys are on
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO phases (step_pk, seq, kind, start_ns, end_ns, "
                     "duration_ns, energy_cpu_uj) VALUES (9999, 0, 'x', 0, 0, 0, 0)")
    count = lambda t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa
    assert count("phase_ranks") == 2 and count("phases") == 5
    conn.execute("DELETE FROM jobs")
    for t in ("step_tags", "steps", "step_zones", "phases", "phase_ranks"):
        assert count(t) == 0, t


# --------------------------------------------------------------------------
# migration 002: jobs keyed by first_seen_ns (a table rebuild)

V1_TABLES = ("nodes", "jobs", "steps", "step_tags", "step_zones", "phases",
             "phase_ranks", "power_models", "spool_files")


#: columns a later migration dropped (019: steps.exclusive, record version 4)
DROPPED = {("steps", "exclusive")}


def _cols(conn, table):
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def _rows(conn, table, cols):
    return sorted(conn.execute(f"SELECT {', '.join(cols)} FROM {table}").fetchall(),
                  key=repr)


def _v1_db(repo, tmp_path):
    """A schema-1 database as the CLI before migration 002 left it: the
    fixture, a power model, a spool file, and a job without steps."""
    import recgen
    src = tmp_path / "src.db"
    conn = store.connect(src)
    store.ingest_records(conn, recgen.fixture_records())
    conn.execute("INSERT INTO power_models VALUES ('m', '*', 1, 2, 3, 2400000, "
                 "0.3, 0.1, 0.2, 0.9, 10, 5)")
    conn.execute("INSERT INTO spool_files VALUES ('/s/a.json', 10, 20)")
    conn.close()
    v1 = tmp_path / "v1.db"
    c = sqlite3.connect(v1)
    c.executescript((repo / "sql" / "001_init.sql").read_text())
    c.execute("ATTACH ? AS src", (str(src),))
    for t in V1_TABLES:
        # steps.exclusive left with migration 019: NULL, as older records had it
        have = {r[1] for r in c.execute(f"PRAGMA src.table_info({t})")}
        cols = ", ".join(col for col in _cols(c, t) if col in have)
        c.execute(f"INSERT INTO main.{t} ({cols}) SELECT {cols} FROM src.{t}")
    c.execute("INSERT INTO jobs (job_pk, cluster, job_id, submit_time_ns, user_name) "
              "VALUES (77, 'demo', 9, 5, 'eve')")
    c.commit()
    c.execute("DETACH src")
    assert c.execute("PRAGMA user_version").fetchone()[0] == 1
    c.close()
    return v1


def test_v1_database_migrates_without_loss(repo, tmp_path, monkeypatch):
    from click.testing import CliRunner
    from joulestep.cli import cli
    v1 = _v1_db(repo, tmp_path)
    c = sqlite3.connect(v1)
    kept = {t: [x for x in _cols(c, t) if (t, x) not in DROPPED] for t in V1_TABLES}
    before = {t: (kept[t], _rows(c, t, kept[t])) for t in V1_TABLES}
    ends = dict(c.execute("SELECT job_pk, max(end_ns) FROM steps GROUP BY job_pk"))
    c.close()
    # open it with the CLI, as a user would after upgrading
    r = CliRunner().invoke(cli, ["--db", str(v1), "job", "42", "--format", "json"])
    assert r.exit_code == 0, r.output
    conn = sqlite3.connect(v1)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == store.latest_version()
    for t, (cols, rows) in before.items():
        assert _rows(conn, t, cols) == rows, t          # every row, same keys
    jobs = conn.execute("SELECT job_pk, submit_time_ns, first_seen_ns, "
                        "last_seen_ns FROM jobs").fetchall()
    assert len(jobs) == 4
    for pk, submit, first, last in jobs:
        assert first == submit and last == ends.get(pk, submit), pk
    # same schema as a new database; foreign keys and cascades intact
    fresh = store.connect(tmp_path / "fresh.db")
    assert _schema(conn) == _schema(fresh)
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("DELETE FROM jobs WHERE job_id = 42")
    assert conn.execute("SELECT count(*) FROM steps").fetchone() == (1,)
    assert conn.execute("SELECT count(*) FROM phases").fetchone() == (2,)
    assert conn.execute("SELECT count(*) FROM phase_ranks").fetchone() == (0,)
    conn.close()


def test_migrated_jobs_take_new_records(repo, tmp_path):
    """A record of the current plugin joins the migrated job it overlaps."""
    import recgen
    conn = store.connect(_v1_db(repo, tmp_path))
    assert conn.execute("PRAGMA foreign_keys").fetchone() == (1,)
    rec = recgen.record(43, "1", "node02", user="bob", first_seen_s=2, start_s=5)
    res = store.ingest_records(conn, [rec])
    assert res.new_steps == 1 and not res.errors
    assert conn.execute("SELECT count(*), min(first_seen_ns), max(last_seen_ns) "
                        "FROM jobs WHERE job_id = 43").fetchone() == (
        1, recgen.T0, recgen.T0 + 15 * recgen.S)
    # re-ingesting the old records changes nothing
    dump = list(conn.iterdump())
    res = store.ingest_records(conn, recgen.fixture_records())
    assert res.new_steps == 0 and list(conn.iterdump()) == dump


def test_failed_migration_leaves_v1_and_foreign_keys(repo, tmp_path, monkeypatch):
    v1 = _v1_db(repo, tmp_path)
    before = v1.read_bytes()
    bad = tmp_path / "sql"
    bad.mkdir()
    for f in (repo / "sql").glob("*.sql"):
        (bad / f.name).write_text(f.read_text())
    monkeypatch.setattr(store.engines, "SQL_DIR", bad)
    nxt = store.latest_version() + 1
    for sql, err in ((f"PRAGMA user_version = {nxt - 1};",
                      f"did not set user_version = {nxt}"),
                     # foreign keys are off while migrating: the check catches it
                     (f"PRAGMA user_version = {nxt};", "rows without their parent")):
        (bad / f"{nxt:03d}_broken.sql").write_text(f"DELETE FROM jobs;\n{sql}\n")
        with pytest.raises(store.StoreError, match=err):
            store.connect(v1)
        assert v1.read_bytes() == before
