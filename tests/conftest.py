"""Shared pytest settings: paths every suite uses."""
import os
import pathlib
import sys
import tempfile

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
BUILD = REPO / "build"
sys.path.insert(0, str(REPO / "tests" / "fakehw"))
sys.path.insert(0, str(REPO / "tests" / "cluster"))

# Tests bind AF_UNIX sockets in tmp_path, whose path is the temp directory plus about
# 70 characters (pytest-of-USER/pytest-N/<test name>N/x.sock), and a socket path has at
# most 107. A long TMPDIR (CI runners set deep ones) would make those binds fail, so
# then pytest's temp root is /tmp instead.
MAX_TMPDIR_LEN = 30


def pytest_configure(config):
    if (len(tempfile.gettempdir()) > MAX_TMPDIR_LEN and not config.option.basetemp
            and os.access("/tmp", os.W_OK | os.X_OK)):
        tempfile.tempdir = "/tmp"


@pytest.fixture(scope="session")
def repo() -> pathlib.Path:
    return REPO


@pytest.fixture(scope="session")
def build_dir() -> pathlib.Path:
    if not (BUILD / "lib" / "libjoulestep-acct.a").exists():
        pytest.fail("build/ is missing: run `make` (make test does it)")
    return BUILD


def is_root() -> bool:
    return os.geteuid() == 0
