"""The test cluster does not depend on what the host already has: ports taken by other
processes, users and groups that already exist, leftovers of an earlier run."""
import grp
import os
import pwd
import secrets
import shutil
import socket
import subprocess

import pytest

import harness
from harness import Cluster, ClusterError, ensure_user, make_workdir

pytestmark = pytest.mark.cluster


@pytest.fixture
def root_only():
    if os.geteuid() != 0:
        pytest.fail("the live cluster tests must run as root (make test does, in CI)")


def test_ports_are_free_and_outside_the_ephemeral_range():
    """The kernel hands ephemeral ports to any outgoing connection at any time, so a
    port chosen by bind(0) can be taken before slurmctld binds it."""
    lo, hi = harness._ephemeral_range()
    assert 0 < lo <= hi < 65536
    ports = harness._free_ports(40)
    assert len(set(ports)) == 40
    for port in ports:
        assert 10000 <= port < 65536 and not lo <= port <= hi, port
        with socket.socket() as s:
            s.bind(("0.0.0.0", port))


def test_start_retries_on_new_ports_when_a_port_is_taken(root_only, cluster_users, monkeypatch):
    """Another process binds the chosen slurmctld port before slurmctld does: the cluster
    starts anyway, on other ports."""
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        real = harness._free_ports
        calls = []

        def first_busy(n):
            calls.append(n)
            ports = real(n)
            return [busy] + ports[1:] if len(calls) == 1 else ports

        monkeypatch.setattr(harness, "_free_ports", first_busy)
        workdir = make_workdir("ports-")
        c = Cluster(workdir)
        try:
            c.start()
            assert c.node_state() == "IDLE"
            assert c.ctld_port != busy
            assert len(calls) == 2
            assert Cluster.PORT_CLASH in (workdir / "log" / "slurmctld.log").read_text()
        finally:
            c.stop()
    shutil.rmtree(workdir)


def test_start_gives_up_on_errors_that_are_not_a_port_clash(root_only, monkeypatch):
    calls = []

    def fails(self):
        calls.append(1)
        raise ClusterError("slurmctld exited with status 1")

    monkeypatch.setattr(Cluster, "_start_once", fails)
    workdir = make_workdir("noretry-")
    try:
        with pytest.raises(ClusterError):
            Cluster(workdir).start()
        assert calls == [1]
    finally:
        shutil.rmtree(workdir)


def _name() -> str:
    return "jsh" + secrets.token_hex(4)


def _cleanup(name):
    subprocess.run(["userdel", name], capture_output=True)
    subprocess.run(["groupdel", name], capture_output=True)


def test_ensure_user_joins_a_group_of_that_name(root_only):
    """useradd --user-group refuses a name whose group already exists."""
    name = _name()
    try:
        subprocess.run(["groupadd", "--system", name], check=True, capture_output=True)
        gid = grp.getgrnam(name).gr_gid
        pw = ensure_user(name)
        assert pw.pw_name == name and pw.pw_gid == gid
        assert ensure_user(name) == pw  # idempotent
    finally:
        _cleanup(name)


def test_ensure_user_keeps_an_existing_user_as_it_is(root_only):
    name = _name()
    try:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", name], check=True, capture_output=True)
        before = pwd.getpwnam(name)
        assert ensure_user(name) == before
    finally:
        _cleanup(name)


def test_make_workdir_reaps_a_cluster_whose_owner_died(root_only):
    """A test process killed without teardown leaves daemons behind; the next run stops
    them (they carry the cluster's marker) and starts in a fresh directory."""
    old = make_workdir("stale-")
    cid = secrets.token_hex(8)
    (old / "run").mkdir()
    stray = subprocess.Popen(["sleep", "300"], env={**os.environ, harness.MARKER_VAR: cid})
    dead = subprocess.Popen(["true"])
    dead.wait()
    (old / "run" / "owner").write_text(f"{dead.pid} {cid}\n")
    try:
        new = make_workdir("fresh-")
        assert new != old and not list(new.iterdir())
        assert stray.wait(10) is not None
        assert not (old / "run" / "owner").exists()
        shutil.rmtree(new)
    finally:
        if stray.poll() is None:
            stray.kill()
        shutil.rmtree(old)


def test_cluster_uses_no_cgroups_and_nothing_of_the_host_setup(cluster):
    """cgroup v1, v2 or hybrid, a system munged or Slurm already running: the test
    cluster uses no cgroup plugin, its own munge socket and its own ports."""
    conf = dict(line.split("=", 1) for line in cluster.conf.read_text().splitlines()
                if "=" in line and not line.startswith(("#", "NodeName", "PartitionName")))
    assert conf["ProctrackType"] == "proctrack/linuxproc"
    assert conf["TaskPlugin"] in ("task/affinity", "task/none")
    assert conf["JobAcctGatherType"] == "jobacct_gather/none"
    assert "cgroup" not in " ".join(conf.values()).replace(str(cluster.workdir), "")
    assert conf["AuthInfo"] == f"socket={cluster.munge_socket}"
    assert cluster.munge_socket.is_relative_to(cluster.workdir)
    lo, hi = harness._ephemeral_range()
    for key in ("SlurmctldPort", "SlurmdPort"):
        assert not lo <= int(conf[key]) <= hi
    assert conf["SlurmctldHost"] == f"{socket.gethostname().split('.')[0]}(127.0.0.1)"


MOUNTS_V1 = """\
25 1 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
26 25 0:23 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu
27 25 0:24 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct
28 25 0:25 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset
29 25 0:26 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer
30 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
"""


@pytest.mark.parametrize("mounts, ctrl, want", [
    (MOUNTS_V1, None, ("cgroup/v1", "")),                                   # this VM's hybrid
    (MOUNTS_V1.replace("/cpuacct rw - cgroup cgroup rw,cpuacct",
                       "/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct"),
     None, ("cgroup/v1", "")),                                               # cpu,cpuacct together
    ("25 1 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "cpuset cpu io memory pids",
     ("cgroup/v2", "")),
    ("25 1 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "io memory pids",
     (None, "cgroup v2 at ROOT without the cpu, cpuset controller(s)")),
    (MOUNTS_V1.replace("28 25 0:25 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n", ""), None,
     (None, "no cgroup v2 at ROOT and no cgroup v1 hierarchy for cpuset under it")),
])
def test_cgroup_support_detects_the_hosts_cgroups(tmp_path, mounts, ctrl, want):
    """harness.cgroup_support on mount tables written here (the root of each is a
    directory of this test, as /sys/fs/cgroup would be)."""
    root = tmp_path / "cg"
    root.mkdir()
    mi = tmp_path / "mountinfo"
    mi.write_text(mounts.replace("/sys/fs/cgroup", str(root)))
    if ctrl:
        (root / "cgroup.controllers").write_text(ctrl + "\n")
    got = harness.cgroup_support(root, str(mi))
    assert got == (want[0], want[1].replace("ROOT", str(root)))
