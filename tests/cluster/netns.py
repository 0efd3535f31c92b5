"""Every slurmd its own "host": a network namespace (and a mount namespace) per node.

`Cluster(workdir, nodes=3, netns=True)` (harness.py) uses `Hosts` to run each slurmd in
its own network namespace, reachable only through namespace addresses:

    root namespace       jst<id:11>  10.A.B.1/24  (slurmctld, munged, the test's clients)
        | veth
    jstest-<id>-sw       bridge br0 (no address): the cluster's switch
        | veth (one per node)
    jstest-<id>-n<k>     eth0 10.A.B.(10+k)/24, lo up: slurmd of node k and its jobs

 - slurm.conf gives SlurmctldHost=<host>(10.A.B.1) and NodeAddr=10.A.B.(10+k): no
   daemon or job uses 127.0.0.1 to reach another node, so srun <-> slurmstepd I/O,
   PMIx and Open MPI (TCP over eth0) cross namespaces as between real hosts.
 - The bridge sits in a namespace of its own: a bridge in the root namespace would pass
   node-to-node traffic through the root namespace's iptables FORWARD chain whenever
   br_netfilter is loaded (it is on many hosts, and Docker hosts set FORWARD to DROP);
   the switch namespace's tables are empty. The root namespace only gets one interface
   with a connected route: no ip_forward, no NAT, nothing else of the host changes.
 - 10.A.B.0/24 is chosen at random among the /24s of 10.0.0.0/8 that overlap no address
   and no route of the root namespace (other clusters' subnets included), under a lock.
 - munge: munged's socket is a path in the work directory; path sockets work across
   network namespaces (abstract ones would not).
 - Node-local files: slurmd runs in a fresh mount namespace (unshare --mount, private
   propagation) in which `<workdir>/local` is a bind mount of `<workdir>/hosts/<node>`.
   The same path shows each node its own directory, as /var/spool/joulestep does on
   real nodes, so plugstack.conf is the same on every node (no %n): the test puts the
   node's fake hardware tree, joulestep spool, journal (state) and socket directory there.
   /dev/shm is a tmpfs of the node's own (512 MiB at most), as on separate hosts: shared
   memory segments of the same name on two nodes (Damaris' buffer) must not be one.
 - Host names: slurmd also runs in its own UTS namespace whose host name is the node's
   name (NodeHostname in slurm.conf), so every node is a host of its own by name too:
   MPI_Get_processor_name differs per node, and Damaris (which groups ranks into nodes
   by that name) can place dedicated nodes.
 - Names carry the cluster id (the harness marker). A registry file
   /run/joulestep-test/netns/<id> names the owning process; `reap_stale` removes the
   namespaces and links of clusters whose owner died (called by harness.reap_stale).
 - No CAP_SYS_ADMIN/CAP_NET_ADMIN (or no iproute2): `setup` raises ClusterError saying
   so; the tests fail with that reason, they never skip.
"""
from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import pathlib
import re
import secrets
import shutil
import signal
import subprocess
import time

PREFIX = "jstest-"          # every namespace: jstest-<cluster id>-sw / -n<k>
LINK_PREFIX = "jst"         # the root namespace's end: jst<first 11 hex digits of the id>
NODE_IF = "eth0"            # each node's interface (Open MPI: btl_tcp_if_include)
LOCAL = "local"             # <workdir>/local: the node-local directory, in each node's view
REGISTRY = pathlib.Path("/run/joulestep-test/netns")
SBIN = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NEED = ("ip", "nsenter", "unshare", "mount", "hostname")


class NetnsError(RuntimeError):
    pass


def _tool(name: str) -> str:
    path = shutil.which(name, path=SBIN)
    if not path:
        raise NetnsError(f"{name} not found: the netns cluster needs iproute2 and util-linux "
                         f"(make deps)")
    return path


def _ip(*args, check=True, ns: str | None = None) -> subprocess.CompletedProcess:
    cmd = [_tool("ip"), *(["-n", ns] if ns else []), *map(str, args)]
    res = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30)
    if check and res.returncode != 0:
        raise NetnsError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr.strip()}")
    return res


def _start_time(pid: int) -> str | None:
    """A process's start time (field 22 of /proc/<pid>/stat): a pid plus this names one
    process, even after the pid is reused."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _owner_alive(cluster_id: str) -> bool:
    try:
        pid_s, start = (REGISTRY / cluster_id).read_text().split()
    except (OSError, ValueError):
        return False
    return _start_time(int(pid_s)) == start


def _used_networks() -> list:
    """Every IPv4 network the root namespace has an address or a route in (all tables);
    the default route is not a clash."""
    text = _ip("-4", "-o", "addr", "show").stdout + _ip("-4", "route", "show", "table", "all").stdout
    nets = []
    for tok in re.findall(r"\b\d{1,3}(?:\.\d{1,3}){3}(?:/\d{1,2})?\b", text):
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.ip_network(tok, strict=False))
    return nets


def _free_subnet(rng) -> ipaddress.IPv4Network:
    used = _used_networks()
    for _ in range(1000):
        net = ipaddress.ip_network(f"10.{rng.randrange(16, 255)}.{rng.randrange(0, 256)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise NetnsError("no free 10.x.y.0/24 subnet for the netns cluster")


@contextlib.contextmanager
def _lock():
    REGISTRY.mkdir(mode=0o755, parents=True, exist_ok=True)
    fd = os.open(REGISTRY / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _namespaces() -> list[str]:
    res = _ip("netns", "list", check=False)
    return [line.split()[0] for line in res.stdout.splitlines() if line.strip()]


def _remove(cluster_id: str):
    """Remove every namespace and the root link of cluster `cluster_id`, ending the
    processes still inside its namespaces. Ignores what is already gone."""
    for ns in _namespaces():
        if not ns.startswith(f"{PREFIX}{cluster_id}-"):
            continue
        for pid in _ip("netns", "pids", ns, check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _ip("netns", "del", ns, check=False)
    _ip("link", "del", LINK_PREFIX + cluster_id[:11], check=False)
    with contextlib.suppress(OSError):
        (REGISTRY / cluster_id).unlink()


def reap_stale():
    """Remove the namespaces and links of netns clusters whose owner process is gone
    (killed before its teardown ran): their names carry the cluster id, the registry
    names the owner."""
    if not shutil.which("ip", path=SBIN) or not REGISTRY.exists() and not any(
            ns.startswith(PREFIX) for ns in _namespaces()):
        return
    with _lock():
        ids = {ns[len(PREFIX):].rsplit("-", 1)[0] for ns in _namespaces() if ns.startswith(PREFIX)}
        ids |= {p.name for p in REGISTRY.iterdir() if not p.name.startswith(".")}
        for cid in ids:
            if re.fullmatch(r"[0-9a-f]{16}", cid) and not _owner_alive(cid):
                _remove(cid)


def require_netns():
    """Raise NetnsError saying why, unless this process can make network and mount
    namespaces (root with CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2, util-linux)."""
    for t in NEED:
        _tool(t)
    res = subprocess.run([_tool("unshare"), "--net", "--mount", "--", "true"], capture_output=True,
                         text=True, stdin=subprocess.DEVNULL, timeout=30)
    if res.returncode != 0:
        raise NetnsError(f"network namespaces are unavailable here ({res.stderr.strip()}): the "
                         f"netns cluster needs root with CAP_SYS_ADMIN and CAP_NET_ADMIN")


class Hosts:
    """The namespaces of one cluster; `setup` creates them, `teardown` removes them."""

    def __init__(self, cluster_id: str, nodes: list[str], workdir: pathlib.Path):
        self.id = cluster_id
        self.nodes = list(nodes)
        self.workdir = pathlib.Path(workdir)
        self.switch = f"{PREFIX}{self.id}-sw"
        self.ns = {n: f"{PREFIX}{self.id}-n{i}" for i, n in enumerate(self.nodes, 1)}
        self.link = LINK_PREFIX + self.id[:11]
        self.subnet = None
        self.ctld_addr = None          # the root namespace's address (slurmctld)
        self.addr: dict[str, str] = {}  # node -> its namespace address (NodeAddr)
        self.local = self.workdir / LOCAL

    def host_dir(self, node: str) -> pathlib.Path:
        """Node `node`'s own directory, seen at `local` inside its namespaces."""
        return self.workdir / "hosts" / node

    def setup(self):
        """Create the switch, one namespace per node and the root link; idempotent
        after teardown. Raises NetnsError (why namespaces are unavailable) on failure."""
        require_netns()
        reap_stale()
        for d in (self.local, *(self.host_dir(n) for n in self.nodes)):
            d.mkdir(mode=0o755, parents=True, exist_ok=True)
            os.chmod(d, 0o755)
        os.chmod(self.workdir / "hosts", 0o755)
        try:
            with _lock():
                (REGISTRY / self.id).write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")
                res = _ip("netns", "add", self.switch, check=False)
                if res.returncode != 0:
                    raise NetnsError(
                        f"network namespaces are unavailable here (ip netns add: "
                        f"{res.stderr.strip()}): the netns cluster needs root with "
                        f"CAP_SYS_ADMIN and CAP_NET_ADMIN")
                self.subnet = _free_subnet(secrets.SystemRandom())
                hosts = list(self.subnet.hosts())
                self.ctld_addr = str(hosts[0])
                prefix = self.subnet.prefixlen
                _ip("link", "add", "br0", "type", "bridge", ns=self.switch)
                _ip("link", "set", "lo", "up", ns=self.switch)
                _ip("link", "set", "br0", "up", ns=self.switch)
                _ip("link", "add", self.link, "type", "veth", "peer", "name", "p0", "netns", self.switch)
                _ip("addr", "add", f"{self.ctld_addr}/{prefix}", "dev", self.link)
                _ip("link", "set", self.link, "up")
                _ip("link", "set", "p0", "master", "br0", "up", ns=self.switch)
                for i, node in enumerate(self.nodes, 1):
                    ns = self.ns[node]
                    self.addr[node] = str(hosts[9 + i])
                    _ip("netns", "add", ns)
                    _ip("link", "add", NODE_IF, "netns", ns, "type", "veth",
                        "peer", "name", f"p{i}", "netns", self.switch)
                    _ip("link", "set", f"p{i}", "master", "br0", "up", ns=self.switch)
                    _ip("addr", "add", f"{self.addr[node]}/{prefix}", "dev", NODE_IF, ns=ns)
                    _ip("link", "set", "lo", "up", ns=ns)
                    _ip("link", "set", NODE_IF, "up", ns=ns)
        except BaseException:
            self.teardown()
            raise
        return self

    def wrap(self, node: str, argv: list) -> list:
        """argv run as node `node`: in its network namespace, in a new mount namespace
        where <workdir>/local is the node's own directory and /dev/shm a tmpfs of its own
        (POSIX shared memory is per host: Damaris names its segment after the buffer in its
        XML, the same on every node), and a new UTS namespace whose
        host name is the node's name (what gethostname() and so MPI_Get_processor_name
        say: libraries that group ranks by host, as Damaris does, see one host per node)."""
        return [_tool("nsenter"), f"--net=/run/netns/{self.ns[node]}", "--",
                _tool("unshare"), "--mount", "--uts", "--propagation", "private", "--",
                "/bin/sh", "-c",
                'mount --bind "$1" "$2" && mount -t tmpfs -o mode=1777,size=512m jsshm /dev/shm '
                '&& hostname "$3" && shift 3 && exec "$@"', "sh",
                str(self.host_dir(node)), str(self.local), node, *map(str, argv)]

    def node_pid(self, node: str, comm: str = "slurmd") -> int:
        """The pid of `comm` (default slurmd) in node's network namespace."""
        for pid in _ip("netns", "pids", self.ns[node], check=False).stdout.split():
            with contextlib.suppress(OSError):
                if pathlib.Path(f"/proc/{pid}/comm").read_text().strip() == comm:
                    return int(pid)
        raise NetnsError(f"no {comm} in {self.ns[node]}")

    def on_node(self, node: str, argv: list) -> list:
        """argv run beside node's slurmd: its network and mount namespaces (so
        <workdir>/local is that node's directory) and host name, e.g. `joulestep ingest` on the node."""
        return [_tool("nsenter"), f"--target={self.node_pid(node)}", "--net", "--mount", "--uts",
                "--", *map(str, argv)]

    def teardown(self):
        """Remove this cluster's namespaces and link (idempotent, also after a failed
        setup); processes still inside them are killed."""
        _remove(self.id)
        deadline = time.monotonic() + 10
        while any(ns.startswith(f"{PREFIX}{self.id}-") for ns in _namespaces()) \
                and time.monotonic() < deadline:
            time.sleep(0.1)
            _remove(self.id)

    def state(self) -> dict:
        """What exists of this cluster now: namespaces and the root link (for tests)."""
        nss = [ns for ns in _namespaces() if ns.startswith(f"{PREFIX}{self.id}-")]
        link = _ip("link", "show", self.link, check=False).returncode == 0
        return {"namespaces": sorted(nss), "link": link}
