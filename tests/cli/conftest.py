"""Fixtures for the CLI tests: spools of generated v1 records, databases.

Every test that uses ``db`` (and so ``run`` and ``loaded``) runs twice: on
a SQLite file and on a PostgreSQL database of a private cluster
(tests/pgharness.py, started once per session, emptied before each test).
``db`` is then a path or a postgresql:// URL; open it with store.connect
(its SQL, with ? placeholders, runs on both)."""
import json
import pathlib
import sys

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import pgharness  # noqa: E402
import recgen  # noqa: E402

from joulestep import store  # noqa: E402

from joulestep.cli import cli  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    """No test may see the machine's config, database or spool."""
    monkeypatch.delenv("JOULESTEP_DB", raising=False)
    conf = tmp_path / "joulestep.conf"
    conf.write_text("[site]\ncluster =\nco2_g_per_kwh = 360\n"
                    "price_per_kwh = 0.25\ncurrency = CHF\n"
                    f"[paths]\nspool = {tmp_path / 'spool'}\n")
    monkeypatch.setenv("JOULESTEP_CONFIG", str(conf))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def spool(tmp_path):
    d = tmp_path / "spool"
    for r in recgen.fixture_records():
        recgen.write(d, r)
    return d


ENGINES = ("sqlite", "postgresql")
TABLES = ("nodes", "jobs", "steps", "step_tags", "step_zones", "phases",
          "phase_ranks", "power_models", "spool_files", "lost_records",
          "step_conflicts", "grid_intensity")


@pytest.fixture(scope="session")
def pg_cluster():
    """A private PostgreSQL cluster for the session (torn down after)."""
    with pgharness.PgCluster() as pg:
        yield pg


@pytest.fixture(scope="session")
def pg_url(pg_cluster):
    """One migrated database, shared by the tests (emptied by ``db``)."""
    url = pg_cluster.create_db("cli")
    store.connect(url).close()
    return url


@pytest.fixture(params=ENGINES)
def engine(request):
    return request.param


@pytest.fixture
def db(engine, tmp_path, request):
    """The test database: a fresh SQLite file, or the session's PostgreSQL
    database emptied (keys restart at 1, as in a new SQLite file)."""
    if engine == "sqlite":
        return tmp_path / "js.db"
    url = request.getfixturevalue("pg_url")
    empty_db(url)
    return url


def empty_db(db) -> None:
    """Back to a new, empty database."""
    if not store.db.is_url(db):
        pathlib.Path(db).unlink()
        return
    with store.connect(db) as conn:
        conn.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")


@pytest.fixture
def run(db):
    """run(*args) -> click Result, with --db pointing at the test database."""
    runner = CliRunner()

    def _run(*args, ok=True):
        res = runner.invoke(cli, ["--db", str(db), *map(str, args)],
                            catch_exceptions=False)
        if ok is True:
            assert res.exit_code == 0, res.output
        elif ok is False:
            assert res.exit_code != 0, res.output
        return res
    _run.db = str(db)
    return _run


@pytest.fixture
def loaded(run, spool):
    run("ingest", spool)
    return run


def jrun(run, *args):
    return json.loads(run(*args, "--format", "json").stdout)


def dump_tables(db) -> dict:
    """Every row of every table, sorted: equal dumps, equal databases."""
    conn = store.connect(db)
    try:
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
                for t in TABLES}
    finally:
        conn.close()
