"""Fixtures for the install and package tests.

The live package test (test_deb.py) runs a job on the test cluster: the
`cluster` and `cluster_users` fixtures of tests/cluster/conftest.py are
reused here (pytest sees fixtures only in the conftest files above a test).
"""
import importlib.util
import pathlib

import pytest

import pkgtest

HERE = pathlib.Path(__file__).resolve().parent

_spec = importlib.util.spec_from_file_location("_cluster_conftest",
                                               HERE.parent / "cluster" / "conftest.py")
_cluster_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cluster_conftest)
cluster = _cluster_conftest.cluster
cluster_users = _cluster_conftest.cluster_users
slurm_config = _cluster_conftest.slurm_config     # the cluster's configuration


@pytest.fixture(scope="session")
def version() -> str:
    """The one version: the CLI's (cli/pyproject.toml)."""
    return pkgtest.pyproject()["project"]["version"]
