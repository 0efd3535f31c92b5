"""The schema in sql/: builds with sqlite3 alone, migrations, keys, cascades."""
import sqlite3
import subprocess

import pytest

from joulestep import store


def test_package_reads_the_sql_dir(repo):
    """The package's sql/ is a symlink to the repo's sql/: one copy of the
    schema, which wheels and sdists pick up as package data."""
    canon = sorted(p.name for p in (repo / "sql").glob("*.sql"))
    assert canon
    assert store.SQL_DIR.samefile(repo / "sql")
    assert sorted(p.name for p in store.SQL_DIR.glob("*.sql")) == canon


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


def test_units_in_column_names(tmp_path):
    conn = store.connect(tmp_path / "x.db")
    for table in ("steps", "phases", "step_zones", "phase_ranks", "jobs"):
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        for c in cols:
            words = c.split("_")
            if any(w in words for w in ("energy", "time", "start", "end",
                                        "duration", "freq")) \
                    and c != "freq_min_ratio":
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
