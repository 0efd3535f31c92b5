"""Fixtures for the CLI tests: spools of generated v1 records, databases."""
import json
import pathlib
import sys

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import recgen  # noqa: E402

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


@pytest.fixture
def db(tmp_path):
    return tmp_path / "js.db"


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
    return _run


@pytest.fixture
def loaded(run, spool):
    run("ingest", spool)
    return run


def jrun(run, *args):
    return json.loads(run(*args, "--format", "json").stdout)
