"""Shared pytest settings: paths every suite uses."""
import os
import pathlib

import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
BUILD = REPO / "build"
sys.path.insert(0, str(REPO / "tests" / "fakehw"))
sys.path.insert(0, str(REPO / "tests" / "cluster"))


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
