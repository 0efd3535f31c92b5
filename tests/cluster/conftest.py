"""The live Slurm cluster fixture: one real single-node cluster per pytest session.

`cluster` starts munged, slurmctld and slurmd (see harness.py) in a fresh root-owned
0755 directory under /run/joulestep-test, without any SPANK plugin; plugin tests call
`cluster.write_plugstack(so, args)`. Teardown always runs (also on failures and
Ctrl-C). The work directory is removed afterwards unless a test failed or
JOULESTEP_KEEP_CLUSTER=1 is set, so daemon logs stay available for debugging.
"""
import os
import shutil

import pytest

import procs
from harness import Cluster, ensure_user, make_workdir

USERS = ("jsuser", "jsother")


@pytest.fixture(scope="session")
def cluster_users():
    if os.geteuid() != 0:
        pytest.fail("the live cluster tests must run as root (make test does, in CI)")
    return [ensure_user(u).pw_name for u in USERS]


@pytest.fixture(scope="session")
def cluster(request, cluster_users):
    workdir = make_workdir("pytest-")
    c = Cluster(workdir)
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
