"""The live Slurm cluster fixture: one real single-node cluster per pytest session.

`cluster` starts munged, slurmctld and slurmd (see harness.py) in a fresh root-owned
0755 directory under /run/joulestep-test, without any SPANK plugin; plugin tests call
`cluster.write_plugstack(so, args)`. Teardown always runs (also on failures and
Ctrl-C). The work directory is removed afterwards unless a test failed or
JOULESTEP_KEEP_CLUSTER=1 is set, so daemon logs stay available for debugging.

Configurations (harness.CONFIGS; docs/design.md, "Which Slurm, which configuration"): the
cluster runs `linuxproc` (proctrack/linuxproc, no cgroups) by default. Tests marked
`site` (what a site's configuration changes: records, clocks, kill -9, shared nodes,
SMT, GPUs, requeue, MailProg) run once per configuration in
JOULESTEP_CLUSTER_CONFIGS (default: linuxproc,cgroup), through the session-scoped
`slurm_config` parameter that `cluster` and the modules' own clusters follow; a
configuration the host cannot run (no usable cgroup v1 or v2) is skipped with the reason.
JOULESTEP_SLURM_PREFIX chooses the Slurm (harness.py; `make test-slurm-latest`).
"""
import os
import shutil

import pytest

import procs
from harness import CONFIGS, Cluster, cgroup_support, ensure_user, make_workdir

USERS = ("jsuser", "jsother")


def site_configs() -> tuple:
    env = os.environ.get("JOULESTEP_CLUSTER_CONFIGS")
    configs = tuple(c for c in env.split(",") if c) if env else CONFIGS
    bad = [c for c in configs if c not in CONFIGS]
    if bad:
        raise pytest.UsageError(f"JOULESTEP_CLUSTER_CONFIGS: {bad}: allowed {', '.join(CONFIGS)}")
    return configs


def pytest_configure(config):
    config.addinivalue_line("markers", "site: run in every cluster configuration "
                            "(JOULESTEP_CLUSTER_CONFIGS; tests/cluster/conftest.py)")


def pytest_generate_tests(metafunc):
    if "slurm_config" in metafunc.fixturenames:
        configs = site_configs() if metafunc.definition.get_closest_marker("site") else ("linuxproc",)
        metafunc.parametrize("slurm_config", configs, indirect=True, scope="session")


@pytest.fixture(scope="session")
def slurm_config(request) -> str:
    """The cluster configuration of this test (harness.CONFIGS); skips a test in
    `cgroup` on a host without usable cgroups, with the reason."""
    config = getattr(request, "param", "linuxproc")
    if config == "cgroup":
        plugin, why = cgroup_support()
        if not plugin:
            pytest.skip(f"cgroup configuration: {why}")
    return config


@pytest.fixture(scope="session")
def cluster_users():
    if os.geteuid() != 0:
        pytest.fail("the live cluster tests must run as root (make test does, in CI)")
    return [ensure_user(u).pw_name for u in USERS]


@pytest.fixture(scope="session")
def cluster(request, cluster_users, slurm_config):
    workdir = make_workdir("pytest-")
    c = Cluster(workdir, config=slurm_config)
    try:
        c.start()
    except BaseException:
        c.stop()
        raise
    failed_before = request.session.testsfailed
    procs.DEFAULT_CLUSTER = c  # job ids repeat across clusters: find this one's processes
    try:
        yield c
    finally:
        procs.DEFAULT_CLUSTER = None
        c.stop()
        if request.session.testsfailed == failed_before and not os.environ.get("JOULESTEP_KEEP_CLUSTER"):
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"\n[cluster] logs kept in {workdir}/log")
