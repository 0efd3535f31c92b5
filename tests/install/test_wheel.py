"""`pip install ./cli` and a built wheel give a working `joulestep` that carries its
schema (sql/ migrations), away from the repository.

Offline: the wheel is built with Debian's python3-build, setuptools and wheel
(`python3 -m build --no-isolation`, packages that `make deb` needs anyway); it is
installed with --no-deps into a fresh venv that takes its dependencies from the
project venv (a .pth line), and `pip install ./cli` (Debian's pip, into a
fresh venv with --python) runs on Debian's own Python libraries (the ones
joulestep-cli depends on). The sources
are copied out first (cli/ and sql/, so that the cli/src/joulestep/sql symlink
still resolves): nothing is built in the worktree. The wheel is pure Python
(py3-none-any): the CLI has no compiled part (issue 21).
"""
from __future__ import annotations

import pathlib
import re
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
import zipfile

import pytest
from packaging.requirements import Requirement

from pkgtest import REPO, pyproject, repo_migrations

sys.path.insert(0, str(REPO / "tests" / "cli"))
import recgen  # noqa: E402  (the CLI tests' record generator)

SYS_PYTHON = "/usr/bin/python3"  # Debian's (the one python3-build belongs to)


def sh(*argv, timeout=300, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                         timeout=timeout, stdin=subprocess.DEVNULL, **kw)
    assert res.returncode == 0, f"{argv}: {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res


def copy_sources(top: pathlib.Path) -> pathlib.Path:
    """A copy of cli/ and sql/ under top (the layout the sql symlink needs), without
    build products; returns its cli/."""
    shutil.copytree(REPO / "cli", top / "cli", symlinks=True,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so"))
    shutil.copytree(REPO / "sql", top / "sql")
    return top / "cli"


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> pathlib.Path:
    """The sources the tests build from (returns the copy's cli/)."""
    return copy_sources(tmp_path_factory.mktemp("src"))


@pytest.fixture(scope="module")
def wheel(src, tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("wheels")
    sh(SYS_PYTHON, "-m", "build", "--wheel", "--no-isolation", "--outdir", out, src)
    wheels = list(out.glob("joulestep-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_ships_the_schema_and_the_command(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for rel, data in repo_migrations().items():
            assert z.read(f"joulestep/sql/{rel}") == data, rel
        shipped = {n[len("joulestep/sql/"):] for n in names if n.startswith("joulestep/sql/")}
        assert shipped == set(repo_migrations())
        # pure Python: one wheel for every Python and machine (issue 21)
        assert not [n for n in names if n.endswith((".so", ".c"))], names
        assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
        assert "joulestep/store/records.py" in names
        info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert re.search(r"^joulestep = joulestep\.cli:main$", z.read(info).decode(), re.M)
        meta = z.read(info.replace("entry_points.txt", "METADATA")).decode()
    assert re.search(rf"^Version: {re.escape(pyproject()['project']['version'])}$", meta, re.M)
    requires = {str(Requirement(r)) for r in re.findall(r"^Requires-Dist: (.+)$", meta, re.M)}
    assert {str(Requirement(d)) for d in pyproject()["project"]["dependencies"]} <= requires


def fresh_venv(path: pathlib.Path, python: str, *venv_args) -> pathlib.Path:
    sh(python, "-m", "venv", *venv_args, path)
    return path / "bin"


def check_installed(bindir: pathlib.Path, tmp: pathlib.Path):
    """The venv's joulestep runs from the venv (not the repository) and creates a
    database with the whole schema (every migration applied)."""
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp), "LC_ALL": "C.UTF-8",
           "JOULESTEP_CONFIG": str(tmp / "empty.conf")}
    (tmp / "empty.conf").write_text("")
    mod = sh(bindir / "python", "-c", "import joulestep; print(joulestep.__file__)", env=env).stdout
    assert pathlib.Path(mod.strip()).is_relative_to(bindir.parent), mod
    assert not pathlib.Path(mod.strip()).resolve().is_relative_to(REPO)
    assert "ingest" in sh(bindir / "joulestep", "--help", env=env).stdout
    spool, db = tmp / "spool", tmp / "store.db"
    spool.mkdir()
    recs = [recgen.record(job_id=7, step_id=str(i), cpu_j=100 + i) for i in range(3)]
    for r in recs:
        recgen.write(spool, r)
    sh(bindir / "joulestep", "--db", db, "ingest", spool, env=env)
    # the numbered migrations (sql/schema.sql is their snapshot, shipped beside them)
    latest = max(int(m.group(1)) for m in (re.match(r"(\d+)_", pathlib.Path(rel).name)
                                           for rel in repo_migrations()) if m)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == latest
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        got = conn.execute("SELECT step_id, energy_cpu_uj FROM steps ORDER BY step_id").fetchall()
    assert {"jobs", "steps", "phases"} <= tables
    assert got == sorted((r["step"]["step_id"], r["step"]["energy_cpu_uj"]) for r in recs)


def test_wheel_installs_into_a_fresh_venv(wheel, tmp_path):
    bindir = fresh_venv(tmp_path / "venv", sys.executable, "--without-pip")
    # the dependencies: the project venv's, after the fresh venv's own site-packages
    site = pathlib.Path(sh(bindir / "python", "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    (site / "zz-project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    sh(sys.executable, "-m", "pip", "--python", bindir / "python", "install", "--no-deps",
       "--no-index", "--disable-pip-version-check", wheel)
    check_installed(bindir, tmp_path)


def test_pip_install_cli_on_debian_python(src, tmp_path):
    bindir = fresh_venv(tmp_path / "venv", SYS_PYTHON, "--system-site-packages", "--without-pip")
    sh(SYS_PYTHON, "-m", "pip", "--python", bindir / "python", "install", "--no-deps",
       "--no-build-isolation", "--no-index", "--disable-pip-version-check", src)
    check_installed(bindir, tmp_path)
