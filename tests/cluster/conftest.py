"""The live Slurm cluster fixture: one real single-node cluster per pytest session.

`cluster` starts munged, slurmctld and slurmd (see harness.py) in a fresh root-owned
0755 directory under /run/joulestep-test, without any SPANK plugin; plugin tests call
`cluster.write_plugstack(so, args)`. Teardown always runs (also on failures and
Ctrl-C). The work directory is removed afterwards unless a test failed or
JOULESTEP_KEEP_CLUSTER=1 is set, so daemon logs stay available for debugging.
"""
import os
import pathlib
import shutil
import tempfile

import pytest

from harness import Cluster, ClusterError, ensure_user

BASE = pathlib.Path("/run/joulestep-test")
USERS = ("jsuser", "jsother")


def make_workdir(prefix: str) -> pathlib.Path:
    """A new root-owned 0755 directory under /run/joulestep-test (never user-writable)."""
    BASE.mkdir(mode=0o755, parents=True, exist_ok=True)
    st = os.lstat(BASE)
    if not BASE.is_dir() or BASE.is_symlink() or st.st_uid != 0 or st.st_mode & 0o022:
        raise ClusterError(f"{BASE} must be a root-owned directory not writable by others")
    d = pathlib.Path(tempfile.mkdtemp(prefix=prefix, dir=BASE))
    os.chmod(d, 0o755)
    return d


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
    try:
        yield c
    finally:
        c.stop()
        if request.session.testsfailed == failed_before and not os.environ.get("JOULESTEP_KEEP_CLUSTER"):
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"\n[cluster] logs kept in {workdir}/log")
