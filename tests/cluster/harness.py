"""A real single-node Slurm cluster (munged + slurmctld + slurmd) on localhost.

Everything lives in a private, root-owned work directory: config, munge key and
socket, state, spool, logs and pid files; the daemons use private ports, so the
cluster never touches /etc/slurm, /etc/munge or a system munged. It runs as
root (SlurmUser=root) without systemd, in one of two configurations (CONFIGS):
  - `linuxproc` (the default): proctrack/linuxproc, no cgroups, and task/affinity
    (tasks bound to their allocated cores) unless this process sits in a restricted
    cpuset (then task/none; JOULESTEP_TASK_PLUGIN overrides);
  - `cgroup` (Cluster(..., config="cgroup")): as most sites run Slurm,
    proctrack/cgroup, TaskPlugin=task/cgroup,task/affinity, jobacct_gather/cgroup, and
    a cgroup.conf with ConstrainCores=yes, IgnoreSystemd=yes and the CgroupPlugin the
    host offers (cgroup_support(): cgroup/v2 or cgroup/v1; neither: ClusterError).
Jobs run as unprivileged users (ensure_user) from directories they own (user_dir).

Which Slurm: Debian's (on PATH), or the one installed under JOULESTEP_SLURM_PREFIX
(`make slurm-latest` builds the current release into build/slurm-latest): its daemons
and clients run, and write_plugstack loads the plugin built against its headers
(<prefix>/joulestep/joulestep.so) in place of build/spank/joulestep.so.

    c = Cluster("/run/joulestep-test/x")
    c.start()                     # returns once the node is idle
    res, job = c.sbatch("#!/bin/sh\\necho hi\\n", user="jsuser")
    assert c.wait_job(job) == "COMPLETED"
    c.stop()                      # idempotent; also registered with atexit

`Cluster(workdir, nodes=2)` runs one slurmd per node name on this host (node1, node2;
each its own Port, spool, pid and log via %n; CPUs = real cores / nodes unless `cpus`
is given, per node; a `cpus` above the host's count overcommits it: tasks are then
not bound, task/none). Debian's Slurm 22.05 handles that without --enable-multiple-slurmd
because every slurmd is started with -N NODENAME. Tasks of both nodes share the host's
cores (Slurm core i of every node is Linux CPU i). Used by tests/cluster/test_multinode.py.

`c.serve_fakehw(root)` runs a fake hardware tree in live mode for the cluster, with the
jobs' processes throttled to their fake clock (throttle=False: not); stop() stops it.

`Cluster(workdir, nodes=3, netns=True)`: each slurmd is its own "host", in its own
network and mount namespace, reached only at its namespace address, with its own
node-local directory `c.netns.host_dir(node)`, seen by the node (its slurmd, jobs and
plugin) at `c.netns.local` (tests/cluster/netns.py; used by test_netns.py).

Used by tests/cluster/conftest.py (the `cluster` fixture) and demo/demo.py.
"""
from __future__ import annotations

import atexit
import contextlib
import grp
import os
import pathlib
import pwd
import re
import secrets
import shutil
import signal
import stat
import socket
import subprocess
import sys
import tempfile
import threading
import time

import netns as netns_mod

SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "scancel", "sinfo")
SYS_PATHS = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# the Slurm under test (module doc): its bin and sbin first
SLURM_PREFIX = (pathlib.Path(os.environ["JOULESTEP_SLURM_PREFIX"]).resolve()
                if os.environ.get("JOULESTEP_SLURM_PREFIX") else None)
SBIN_PATHS = (f"{SLURM_PREFIX}/sbin:{SLURM_PREFIX}/bin:" if SLURM_PREFIX else "") + SYS_PATHS
#: the cluster configurations (module doc); JOULESTEP_CLUSTER_CONFIGS chooses
#: those the site tests run in (tests/cluster/conftest.py)
CONFIGS = ("linuxproc", "cgroup")
TERMINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                   "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"}
MARKER_VAR = "JOULESTEP_HARNESS_ID"  # set in the daemons' environment to find strays at teardown
NODE_VAR = "JOULESTEP_HARNESS_NODE"  # "<cluster id>:<node>" in each slurmd's environment


class ClusterError(RuntimeError):
    pass


def _which(name: str) -> str:
    path = shutil.which(name, path=SBIN_PATHS + ":" + os.environ.get("PATH", ""))
    if not path:
        raise ClusterError(f"{name} not found: install slurmctld slurmd slurm-client munge (make deps)")
    return path


def slurm_version() -> str:
    """The version of the Slurm under test ("22.05.8", "26.05.3")."""
    out = subprocess.run([_which("slurmd"), "-V"], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=30).stdout
    m = re.search(r"slurm(?:-wlm)?\s+(\S+)", out)
    return m.group(1) if m else "unknown"


def plugin_for_slurm(so):
    """The joulestep.so the Slurm under test loads: a plugin is built for one Slurm
    release (its headers); under JOULESTEP_SLURM_PREFIX, the one `make slurm-latest`
    built there in place of the default build's."""
    if so is None or not SLURM_PREFIX:
        return so
    so = pathlib.Path(so)
    latest = SLURM_PREFIX / "joulestep" / "joulestep.so"
    if so.name == "joulestep.so" and so.parent.name == "spank":
        if not latest.exists():
            raise ClusterError(f"{latest} missing: run make slurm-latest")
        return latest
    return so


CGROUP_ROOT = pathlib.Path("/sys/fs/cgroup")


def cgroup_support(root: pathlib.Path = CGROUP_ROOT,
                   mountinfo: str = "/proc/self/mountinfo") -> tuple[str | None, str]:
    """The CgroupPlugin this host offers Slurm: ("cgroup/v2", "") where root is a
    cgroup2 mount whose controllers include cpuset and cpu; ("cgroup/v1", "") where
    root holds v1 hierarchies for cpuset, freezer and cpuacct (proctrack/cgroup's,
    task/cgroup's and jobacct_gather/cgroup's); else (None, why)."""
    mounts = {}
    try:
        for line in pathlib.Path(mountinfo).read_text().splitlines():
            pre, _, post = line.partition(" - ")
            fields, fs = pre.split(), post.split()
            if len(fields) >= 5 and len(fs) >= 3:
                mounts[fields[4]] = (fs[0], set(fs[2].split(",")))
    except OSError as e:
        return None, f"cannot read {mountinfo}: {e}"
    top = mounts.get(str(root))
    if top and top[0] == "cgroup2":
        try:
            ctrl = set((root / "cgroup.controllers").read_text().split())
        except OSError as e:
            return None, f"{root}/cgroup.controllers: {e}"
        missing = {"cpuset", "cpu"} - ctrl
        return ("cgroup/v2", "") if not missing else (
            None, f"cgroup v2 at {root} without the {', '.join(sorted(missing))} controller(s)")
    missing = [c for c in ("cpuset", "freezer", "cpuacct")
               if not any(fs == "cgroup" and c in opts and mp == str(root / d)
                          for mp, (fs, opts) in mounts.items()
                          for d in (c, "cpu,cpuacct", "cpuacct,cpu"))]
    if not missing:
        return "cgroup/v1", ""
    return None, (f"no cgroup v2 at {root} and no cgroup v1 hierarchy for "
                  f"{', '.join(missing)} under it")


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports."""
    try:
        lo, hi = (int(x) for x in
                  pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def _free_ports(n: int) -> list[int]:
    """n distinct TCP ports that nothing listens on now, chosen at random outside the
    kernel's ephemeral range: a port the kernel handed to bind(0) can be given to any
    outgoing connection (srun, slurmd's own RPCs, another test) before our daemon binds
    it. Another process may still take one first; Cluster.start retries with new ports
    when a daemon reports "Address already in use"."""
    lo, hi = _ephemeral_range()
    pool = [p for p in range(10000, 65536) if not lo <= p <= hi]
    rng, ports = secrets.SystemRandom(), []
    while len(ports) < n:
        port = rng.choice(pool)
        if port in ports:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("0.0.0.0", port))  # as slurmctld/slurmd will: any address
            except OSError:
                continue
        ports.append(port)
    return ports


def _world_accessible(path: pathlib.Path) -> bool:
    """True if any local user can traverse to `path` and read it (and everything under a dir)."""
    try:
        return _world_accessible_unchecked(pathlib.Path(path).resolve())
    except OSError:
        return False


def _world_accessible_unchecked(path: pathlib.Path) -> bool:
    for anc in reversed(path.parents):
        if not os.stat(anc).st_mode & 0o001:
            return False
    paths = [path]
    if path.is_dir():
        paths += [pathlib.Path(r) / n for r, ds, fs in os.walk(path) for n in ds + fs]
    for p in paths:
        mode = os.stat(p).st_mode
        if not mode & 0o004 or (p.is_dir() and not mode & 0o001):
            return False
    return True


def ensure_user(name: str) -> pwd.struct_passwd:
    """Create a local unprivileged user (no home, no login shell needed) if missing.

    A user of that name that already exists is used as it is (whatever its uid); a
    group of that name without such a user (useradd --user-group would refuse it)
    becomes the new user's primary group."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    useradd = _which("useradd")
    try:
        grp.getgrnam(name)
        group = ["--gid", name]
    except KeyError:
        group = ["--user-group"]
    res = subprocess.run([useradd, "--system", *group, "--no-create-home",
                          "--home-dir", "/nonexistent", "--shell", "/bin/sh", name],
                         capture_output=True, text=True, stdin=subprocess.DEVNULL)
    try:
        return pwd.getpwnam(name)  # also when another process created it first (status 9)
    except KeyError:
        raise ClusterError(f"useradd {name} failed ({res.returncode}): "
                           f"{res.stderr.strip()}") from None


def hardware() -> dict:
    """This machine's layout as `slurmd -C` reports it (CPUs, Sockets..., RealMemory).

    JOULESTEP_TEST_CPUS=N makes the test cluster a node of N CPUs instead (only CPUs
    is then given): with `taskset -c 0` and N=1 it is a one-CPU host; N larger than
    the machine's count gives many CPUs (tasks are then not bound: task/none)."""
    if os.environ.get("JOULESTEP_TEST_CPUS"):
        n = int(os.environ["JOULESTEP_TEST_CPUS"])
        if n < 1:
            raise ClusterError(f"JOULESTEP_TEST_CPUS={n}: at least 1")
        return {"CPUs": str(n)}
    res = subprocess.run([_which("slurmd"), "-C"], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=30)
    line = next((l for l in res.stdout.splitlines() if l.startswith("NodeName=")), "")
    fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
    if "CPUs" not in fields:
        fields = {"CPUs": str(os.cpu_count() or 1)}
    return fields


BASE = pathlib.Path("/run/joulestep-test")


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def _marked_pids(cluster_id: str) -> list[int]:
    marker = f"{MARKER_VAR}={cluster_id}".encode()
    pids = []
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if marker in (d / "environ").read_bytes().split(b"\0"):
                pids.append(int(d.name))
        except OSError:
            continue
    return pids


def _kill_marked(cluster_id: str):
    """Kill every process started by the cluster's daemons (they carry its marker)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _marked_pids(cluster_id)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if not pids:
            return
        deadline = time.monotonic() + 5
        while sig == signal.SIGTERM and time.monotonic() < deadline and _marked_pids(cluster_id):
            time.sleep(0.1)


def remove_cgroups(node: str):
    """Remove the cgroups Slurm made for a `cgroup` cluster's node (slurm_<node> in
    every v1 hierarchy; <node>_slurmstepd.scope on v2), deepest first, once its
    processes are gone; a cgroup that still holds one stays (EBUSY)."""
    if not re.fullmatch(r"js[0-9a-f]{8}", node):
        return  # only the names Cluster gives (never a host's or another's)
    tops = [*CGROUP_ROOT.glob(f"*/slurm_{node}"),
            *CGROUP_ROOT.glob(f"system.slice/{node}_slurmstepd.scope"),
            *CGROUP_ROOT.glob(f"*/system.slice/{node}_slurmstepd.scope")]
    for top in tops:
        dirs = sorted((pathlib.Path(r) for r, _, _ in os.walk(top)), key=lambda d: -len(d.parts))
        for d in dirs:
            with contextlib.suppress(OSError):
                d.rmdir()


def reap_stale():
    """Stop clusters left running by a test process that died without teardown (SIGKILL)."""
    for owner in BASE.glob("*/run/owner"):
        try:
            pid_s, cluster_id = owner.read_text().split()
            os.kill(int(pid_s), 0)
            continue  # its owner is alive
        except ProcessLookupError:
            pass
        except (OSError, ValueError):
            continue
        _kill_marked(cluster_id)
        with contextlib.suppress(OSError):
            remove_cgroups(f"js{cluster_id[:8]}")
        with contextlib.suppress(OSError):
            owner.unlink()
    netns_mod.reap_stale()  # namespaces of netns clusters whose owner died


def make_workdir(prefix: str) -> pathlib.Path:
    """A new root-owned 0755 directory under /run/joulestep-test (never user-writable).

    Also stops clusters whose owning process died without tearing them down."""
    BASE.mkdir(mode=0o755, parents=True, exist_ok=True)
    st = os.lstat(BASE)
    if not BASE.is_dir() or BASE.is_symlink() or st.st_uid != 0 or st.st_mode & 0o022:
        raise ClusterError(f"{BASE} must be a root-owned directory not writable by others")
    os.chmod(BASE, 0o755)  # whatever the umask: job users must traverse it
    reap_stale()
    d = pathlib.Path(tempfile.mkdtemp(prefix=prefix, dir=BASE))
    os.chmod(d, 0o755)
    return d


def default_task_plugin(hw_cpus: int) -> str:
    """task/affinity (tasks bound to their allocated cores) when this process may run on
    every CPU slurmd sees; task/none in a restricted cpuset where binding could fail."""
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return "task/none"
    return "task/affinity" if allowed == set(range(hw_cpus)) else "task/none"


class Cluster:
    def __init__(self, workdir, *, plugin_so=None, plugstack_args=None, cpus=None,
                 node_timeout: float = 40.0, nodes: int = 1, netns: bool = False,
                 accounting: bool = False, mail_prog: str = "/bin/true",
                 pm_counters: str | os.PathLike | None = None, gpus: int = 0,
                 daemon_env: dict | None = None, config: str = "linuxproc"):
        self.workdir = pathlib.Path(workdir).resolve()
        if config not in CONFIGS:
            raise ClusterError(f"config={config!r}: one of {', '.join(CONFIGS)}")
        self.config = config
        # config="cgroup": the CgroupPlugin this host offers (cgroup_support)
        self.cgroup_plugin = None
        if config == "cgroup":
            self.cgroup_plugin, why = cgroup_support()
            if not self.cgroup_plugin:
                raise ClusterError(f"config=cgroup: {why}")
        self.mail_prog = mail_prog
        # pm_counters: a fake cray/pm_counters directory that slurmd (and its
        # steps) see at /sys/cray/pm_counters, read by Slurm's own
        # acct_gather_energy/pm_counters (single node only; see _sys_overlay)
        self.pm_counters = pathlib.Path(pm_counters).resolve() if pm_counters else None
        if self.pm_counters and int(nodes) != 1:
            raise ClusterError("pm_counters: a single-node cluster only")
        # gpus=N: N GPUs per node in gres.conf (File= character devices the harness
        # makes under <workdir>/dev, gpu0..gpuN-1); daemon_env: added to slurmd's
        # environment, which slurmstepd inherits (e.g. FAKEHW_GPU_ROOT)
        self.gpus = int(gpus)
        self.daemon_env = dict(daemon_env or {})
        self.plugin_so = plugin_so
        self.plugstack_args = dict(plugstack_args or {})
        self.node_timeout = node_timeout
        self.node = self.host = socket.gethostname().split(".")[0]
        hw = hardware()
        if int(nodes) < 1:
            raise ClusterError(f"nodes={nodes}: at least 1")
        self.nnodes = int(nodes)
        if self.nnodes > 1:  # node1..nodeN, one slurmd each on this host; c.node is the first
            self.nodes = [f"node{i}" for i in range(1, self.nnodes + 1)]
            self.node = self.nodes[0]
            cpus = cpus or max(1, int(hw["CPUs"]) // self.nnodes)
        else:
            self.nodes = [self.node]
        self.cpus = int(cpus) if cpus else int(hw["CPUs"])  # per node
        self._hw = hw if not cpus else {"CPUs": str(self.cpus)}
        # more CPUs per node than the host has (overcommitted, e.g. 64 ranks per node on 2
        # cores): Slurm's CPU i would not exist to bind to, so tasks are not bound
        self.task_plugin = os.environ.get("JOULESTEP_TASK_PLUGIN") or (
            "task/none" if self.cpus > int(hw["CPUs"]) else default_task_plugin(int(hw["CPUs"])))
        if config == "cgroup":
            self.task_plugin = "task/cgroup,task/affinity"
        self.id = secrets.token_hex(8)
        if config == "cgroup" and self.nnodes == 1:
            # Slurm's cgroups are named after the node (slurm_<node>/uid_U/job_J on
            # v1, <node>_slurmstepd.scope on v2) and job ids start at 1 in every
            # test cluster: a node name of its own keeps two clusters' apart
            self.node = f"js{self.id[:8]}"
            self.nodes = [self.node]
        self.netns = netns_mod.Hosts(self.id, self.nodes, self.workdir) if netns else None
        self.conf = self.workdir / "slurm.conf"
        self.plugstack = self.workdir / "plugstack.conf"
        self.munge_dir = self.workdir / "munge"
        self.munge_socket = self.munge_dir / "munge.socket"
        self.log_dir = self.workdir / "log"
        self.users_dir = self.workdir / "users"
        self._procs: dict[str, subprocess.Popen] = {}
        self._fakehw: list[subprocess.Popen] = []  # serve_fakehw daemons
        self._started = False
        self.env = self._client_env()
        self.dbd = None  # accounting=True: slurmdbd on a private MariaDB (dbd.py)
        if accounting:
            from dbd import SlurmDbd
            self.dbd = SlurmDbd(self)

    # ------------------------------------------------------------------ setup
    def _client_env(self) -> dict:
        # nothing of an enclosing Slurm job or joulestep step (make test may itself run
        # in one) reaches the test cluster's daemons, clients or jobs
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_", "SINFO_",
                                    "JOULESTEP_SOCKET", "JOULESTEP_SYNC"))}
        env["PATH"] = SBIN_PATHS + ":" + env.get("PATH", "")
        env["SLURM_CONF"] = str(self.conf)
        env["LC_ALL"] = "C"
        env.update(self.mpi_env())
        return env

    def mpi_env(self) -> dict:
        """Open MPI settings for `srun --mpi=pmix` jobs on this test cluster; in the
        clients' environment, so every job submitted through the harness gets them
        (sbatch exports it). Why each (docs/experiments.md, "Open MPI on the test cluster"):
          - pml=ob1, mtl=^ofi,psm,psm2, osc=^ucx: the test cluster has no fabric; Debian's
            Open MPI otherwise probes UCX, libfabric and PSM in every rank's MPI_Init, the
            window in which the demo's ranks crashed (docs/experiments.md);
          - mpi_yield_when_idle: ranks outnumber the cores (sbatch -O on 2 cores); a rank
            waiting in MPI yields its core instead of spinning on it;
          - btl_vader_single_copy_mechanism=none: no CMA (process_vm_readv needs ptrace
            rights that containers often withhold);
          - btl_vader_backing_directory: the shared-memory segments are named after the
            host, the PMIx namespace ("slurm.pmix.<job>.<step>") and the local rank, the
            same for job 1 of two test clusters running at once: each cluster has its own
            directory (<workdir>/shm, sticky and world-writable like /tmp);
          - several nodes (nodes=N) on one host name: the node's ranks would find each
            other's segments by host name: TCP over loopback only;
          - several nodes in network namespaces (netns=True): each node is a host by name
            (UTS namespace), address and /dev/shm, as on a real cluster: shared memory
            within a node, TCP over each node's own interface between nodes;
          - several nodes: SLURM_PMIX_FENCE=ring (below)."""
        env = {"OMPI_MCA_mpi_yield_when_idle": "1",
               "OMPI_MCA_pml": "ob1", "OMPI_MCA_mtl": "^ofi,psm,psm2", "OMPI_MCA_osc": "^ucx",
               "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
               "OMPI_MCA_btl_vader_backing_directory": str(self.workdir / "shm")}
        if self.nnodes > 1 and getattr(self, "netns", None):
            env.update({"OMPI_MCA_btl": "self,vader,tcp",
                        "OMPI_MCA_btl_tcp_if_include": netns_mod.NODE_IF})
        elif self.nnodes > 1:
            env.update({"OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": "lo"})
        if self.nnodes > 1:
            # Slurm's PMIx fences by the ring (direct connections between the steps'
            # slurmstepd) for every fence, not the tree for fences without data: on
            # this cluster the tree released a node's ranks from MPI_Init's last fence
            # before another node's ranks were through the one before it, and a rank
            # still without its PML callbacks took a message and crashed in MPI_Init
            # (docs/experiments.md, "Open MPI on the test cluster")
            env["SLURM_PMIX_FENCE"] = "ring"
        return env

    def _mkdir(self, path: pathlib.Path, mode=0o755):
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, 0, 0)
        os.chmod(path, mode)

    def _write(self, path: pathlib.Path, text: str, mode=0o644):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(path, mode)

    def _prepare(self):
        if os.geteuid() != 0:
            raise ClusterError("the test cluster must be started as root")
        for b in SLURM_BINARIES:
            _which(b)
        self._mkdir(self.workdir)
        for d in ("state", "spool", "log", "run", "users", "tmp"):
            self._mkdir(self.workdir / d)
        self._mkdir(self.munge_dir, 0o755)
        self._mkdir(self.workdir / "shm", 0o1777)  # Open MPI's segments (mpi_env)
        key = self.munge_dir / "munge.key"
        if not key.exists():
            self._write(key, "", 0o400)
            with open(key, "wb") as f:
                f.write(secrets.token_bytes(1024))
        for d in ("state", "spool", "tmp", "shm"):  # cold start every time
            for child in (self.workdir / d).iterdir():
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        if self.nnodes > 1:
            for n in self.nodes:  # SlurmdSpoolDir=.../spool/%n
                self._mkdir(self.workdir / "spool" / n)
                self._mkdir(self.workdir / "tmp" / n)
        if self.netns:
            self.netns.setup()  # before the conf: it chooses the addresses
        self._write_conf()
        self.write_plugstack(self.plugin_so, self.plugstack_args)
        self._write(self.workdir / "cgroup.conf", self._cgroup_conf())
        if self.gpus:
            self._make_gpu_devices()

    def _cgroup_conf(self) -> str:
        """cgroup.conf (next to slurm.conf). linuxproc: no cgroup plugin uses it.
        cgroup: the host's CgroupPlugin, no systemd (slurmd is not a systemd unit
        here), the steps' cores constrained (their cpuset is Slurm's allocation)."""
        if self.config != "cgroup":
            return "CgroupPlugin=autodetect\nIgnoreSystemd=yes\n"
        return (f"CgroupPlugin={self.cgroup_plugin}\nCgroupMountpoint={CGROUP_ROOT}\n"
                "IgnoreSystemd=yes\nConstrainCores=yes\nConstrainRAMSpace=no\n"
                "ConstrainDevices=no\n")

    def gpu_device(self, i: int) -> pathlib.Path:
        return self.workdir / "dev" / f"gpu{i}"

    def _make_gpu_devices(self):
        """gres.conf's File= devices: character devices (Slurm 22.05 reads their
        major:minor; /dev/null's numbers, nothing opens them), and gres.conf."""
        self._mkdir(self.workdir / "dev")
        for i in range(self.gpus):
            d = self.gpu_device(i)
            if not d.exists():
                os.mknod(d, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        last = self.gpus - 1
        files = f"{self.workdir}/dev/gpu[0-{last}]" if last else f"{self.workdir}/dev/gpu0"
        self._write(self.workdir / "gres.conf",
                    "".join(f"NodeName={n} Name=gpu File={files}\n" for n in self.nodes))

    def _write_conf(self):
        ctld_addr = self.netns.ctld_addr if self.netns else "127.0.0.1"
        node_addr = self.netns.addr if self.netns else {}
        ctld_port, slurmd_port, dbd_port, *node_ports = _free_ports(3 + (self.nnodes if self.nnodes > 1 else 0))
        self.ctld_port, self.slurmd_port = ctld_port, slurmd_port
        w = self.workdir
        layout = " ".join(f"{k}={self._hw[k]}" for k in
                          ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
                          if k in self._hw)
        # one node: as before; several: %n in the slurmd paths and a Port per node
        pn = "-%n" if self.nnodes > 1 else ""
        spool = f"{w}/spool/%n" if self.nnodes > 1 else f"{w}/spool"
        tmpfs = f"{w}/tmp/%n" if self.nnodes > 1 else f"{w}/tmp"
        if self.nnodes > 1:
            self.slurmd_ports = dict(zip(self.nodes, node_ports))
            node_lines = "\n".join(
                f"NodeName={n} NodeAddr={node_addr.get(n, '127.0.0.1')} "
                f"NodeHostname={n if self.netns else self.host} "
                f"Port={self.slurmd_ports[n]} CPUs={self.cpus} Boards=1 SocketsPerBoard=1 "
                f"CoresPerSocket={self.cpus} ThreadsPerCore=1 State=UNKNOWN" for n in self.nodes)
            part_nodes = ",".join(self.nodes)
        else:
            self.slurmd_ports = {self.node: slurmd_port}
            node_lines = (f"NodeName={self.node} NodeAddr={node_addr.get(self.node, '127.0.0.1')} NodeHostname={self.host} "
                          f"{layout}{f' Gres=gpu:{self.gpus}' if self.gpus else ''} State=UNKNOWN")
            part_nodes = self.node
        conf = f"""# generated by tests/cluster/harness.py — private test cluster
ClusterName=jstest
SlurmctldHost={self.host}({ctld_addr})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={w}/state
SlurmdSpoolDir={spool}
SlurmctldPidFile={w}/run/slurmctld.pid
SlurmdPidFile={w}/run/slurmd{pn}.pid
SlurmctldLogFile={w}/log/slurmctld.log
SlurmdLogFile={w}/log/slurmd{pn}.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={self.plugstack}
{"GresTypes=gpu" if self.gpus else ""}
ProctrackType={"proctrack/cgroup" if self.config == "cgroup" else "proctrack/linuxproc"}
TaskPlugin={self.task_plugin}
{self._energy_conf_lines()}
{self.dbd.slurm_conf_lines(dbd_port) if self.dbd else "AccountingStorageType=accounting_storage/none"}
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
TmpFS={tmpfs}
MailProg={self.mail_prog}
SwitchType=switch/none
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=600
KillWait=3
InactiveLimit=0
SlurmctldTimeout=60
SlurmdTimeout=120
MessageTimeout=20
Waittime=0
{node_lines}
PartitionName=debug Nodes={part_nodes} Default=YES MaxTime=INFINITE State=UP
"""
        self._write(self.conf, conf)

    def public_path(self, src) -> pathlib.Path:
        """`src` if every user can read it, else a root-owned world-readable copy in the workdir.

        Jobs run as unprivileged users, and sbatch/srun load the SPANK plugin as the
        submitting user, so anything they use must be reachable by them even when the
        repo sits under a private home (as in CI). A directory is copied whole.
        """
        src = pathlib.Path(src).resolve()
        if _world_accessible(src):
            return src
        dst = self.workdir / "pub" / str(src).lstrip("/")
        self._mkdir(self.workdir / "pub")
        dst.parent.mkdir(parents=True, exist_ok=True)
        for d in [*reversed(dst.relative_to(self.workdir).parents)][1:]:
            os.chmod(self.workdir / d, 0o755)
        if src.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst, symlinks=True)
            for root, dirs, files in os.walk(dst):
                os.chmod(root, 0o755)
                for f in files:
                    fp = os.path.join(root, f)
                    if not os.path.islink(fp):
                        os.chmod(fp, 0o755 if os.access(fp, os.X_OK) else 0o644)
        else:
            shutil.copy2(src, dst)
            os.chmod(dst, 0o755 if os.access(src, os.X_OK) else 0o644)
        return dst

    def write_plugstack(self, plugin_so=None, args: dict | None = None, required: bool = False):
        """(Re)write plugstack.conf; srun/sbatch/slurmstepd read it per job/step.

        The plugin is made reachable for unprivileged submitters (see public_path);
        its line is `optional` (as docs/admin-guide.md says), `required` on request.
        """
        if plugin_so:
            self.workdir.mkdir(parents=True, exist_ok=True)
            plugin_so = self.public_path(plugin_for_slurm(plugin_so))
        self.plugin_so = plugin_so
        self.plugstack_args = dict(args or {})
        lines = ["# generated by tests/cluster/harness.py"]
        if plugin_so:
            parts = ["required" if required else "optional", str(plugin_so)]
            for k, v in self.plugstack_args.items():
                parts.append(f"{k}={v}" if v is not None else str(k))
            lines.append(" ".join(parts))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write(self.plugstack, "\n".join(lines) + "\n")

    # --------------------------------------------------------------- daemons
    def _spawn(self, name: str, argv: list[str], extra_env: dict | None = None):
        env = dict(self.env, **(extra_env or {}))
        env[MARKER_VAR] = self.id
        log = open(self.log_dir / f"{name}.stdout", "ab")
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env=env, cwd=self.workdir, start_new_session=True, close_fds=True)
        finally:
            log.close()
        self._procs[name] = proc

    def _wait_for(self, what: str, cond, timeout: float):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self._procs.items():
                if p.poll() is not None:
                    raise ClusterError(f"{name} exited with status {p.returncode} while waiting for "
                                       f"{what}\n{self.logs()}")
            if cond():
                return
            time.sleep(0.1)
        raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}\n{self.logs()}")

    PORT_CLASH = "Address already in use"

    def _log_sizes(self) -> dict:
        sizes = {}
        for f in self.log_dir.glob("*"):
            with contextlib.suppress(OSError):
                sizes[f] = f.stat().st_size
        return sizes

    def _port_clash_since(self, sizes: dict) -> bool:
        """True if a daemon logged a failed bind after the log sizes in `sizes`."""
        for f in self.log_dir.glob("*"):
            try:
                with open(f, "rb") as fh:
                    fh.seek(sizes.get(f, 0))
                    if self.PORT_CLASH.encode() in fh.read():
                        return True
            except OSError:
                continue
        return False

    def start(self, port_attempts: int = 4):
        """Start the daemons; returns once every node is idle. The ports are chosen
        free, but another process can bind one before our daemon does: then the
        cluster is stopped and started again on new ports (up to port_attempts)."""
        if self._started:
            return self
        for attempt in range(1, port_attempts + 1):
            sizes = self._log_sizes()
            try:
                return self._start_once()
            except ClusterError:
                if attempt == port_attempts or not self._port_clash_since(sizes):
                    raise
        return self

    def _start_once(self):
        try:
            self._prepare()
        except BaseException:
            self.stop()  # namespaces made before the failure
            raise
        self._started = True
        atexit.register(self.stop)
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL):
            signal.signal(signal.SIGTERM, _exit_on_sigterm)  # so teardown runs on a CI timeout
        self._write(self.workdir / "run" / "owner", f"{os.getpid()} {self.id}\n")
        try:
            self._spawn("munged", [_which("munged"), "--foreground", "--force",
                                   f"--socket={self.munge_socket}",
                                   f"--key-file={self.munge_dir / 'munge.key'}",
                                   f"--log-file={self.log_dir / 'munged.log'}",
                                   f"--pid-file={self.munge_dir / 'munged.pid'}",
                                   f"--seed-file={self.munge_dir / 'munged.seed'}",
                                   "--num-threads=4"])
            self._wait_for("the munge socket", self.munge_socket.exists, 15)
            if self.dbd:
                self.dbd.start()
                self.dbd.register("jstest")
            self._spawn("slurmctld", [_which("slurmctld"), "-D", "-c", "-i", "-f", str(self.conf)])
            self._wait_for("slurmctld", self._ctld_up, 20)
            self._spawn_slurmds()
            self.wait_idle(self.node_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _ctld_up(self) -> bool:
        # a port clash can leave scontrol talking to whatever else listens there
        try:
            return self.run(["scontrol", "ping"], timeout=5, check=False).stdout.count("UP") > 0
        except subprocess.TimeoutExpired:
            return False

    def _slurmd_procs(self) -> list[str]:
        """Process names of the slurmd daemons: "slurmd", or "slurmd-<node>" per node."""
        return ["slurmd"] if self.nnodes == 1 else [f"slurmd-{n}" for n in self.nodes]

    def _energy_conf_lines(self) -> str:
        if not self.pm_counters:
            # cgroup: the step's cpuacct cgroup (v1) is jobacct_gather/cgroup's
            return ("JobAcctGatherType=jobacct_gather/cgroup" if self.config == "cgroup"
                    else "JobAcctGatherType=jobacct_gather/none")
        return ("JobAcctGatherType=jobacct_gather/linux\nJobAcctGatherFrequency=energy=1\n"
                "AcctGatherEnergyType=acct_gather_energy/pm_counters\nAcctGatherNodeFreq=1")

    def _sys_overlay(self, argv: list) -> list:
        """argv in a private mount namespace whose /sys is the host's with
        cray/pm_counters added: a tmpfs holding recursive binds of every
        /sys entry, plus the fake directory bound at cray/pm_counters, bound
        over /sys (sysfs itself cannot get a new directory)."""
        ov = self.workdir / "sys-overlay"
        ov.mkdir(mode=0o755, exist_ok=True)
        script = ('set -e; ov="$1"; pm="$2"; shift 2; mount -t tmpfs -o mode=0755 none "$ov"; '
                  'for e in /sys/*; do n=$(basename "$e"); mkdir "$ov/$n"; '
                  'mount --rbind "$e" "$ov/$n"; done; mkdir -p "$ov/cray/pm_counters"; '
                  'mount --bind "$pm" "$ov/cray/pm_counters"; mount --rbind "$ov" /sys; '
                  'exec "$@"')
        return [shutil.which("unshare") or "unshare", "--mount", "--propagation", "private", "--",
                "/bin/sh", "-c", script, "sh", str(ov), str(self.pm_counters), *argv]

    def _spawn_slurmds(self):
        for name, node in zip(self._slurmd_procs(), self.nodes):
            argv = [_which("slurmd"), "-D", "-f", str(self.conf), "-N", node]
            if self.pm_counters:
                argv = self._sys_overlay(argv)
            self._spawn(name, self.netns.wrap(node, argv) if self.netns else argv,
                        {**self.daemon_env, NODE_VAR: f"{self.id}:{node}"})

    def node_state(self, node: str | None = None) -> str:
        node = node or self.node
        res = self.run(["scontrol", "show", "node", "-o", node], timeout=15, check=False)
        m = re.search(r"\bState=(\S+)", res.stdout)
        return m.group(1) if m else "UNKNOWN"

    def wait_idle(self, timeout: float = 40.0):
        """Wait until every node is IDLE (no flags: not completing, drained, not responding)."""
        def idle(node):
            st = self.node_state(node)
            if st.startswith(("DOWN", "DRAIN")) and "Reason=" in (r := self.run(
                    ["scontrol", "show", "node", node], check=False).stdout):
                # a leftover DOWN from an earlier registration: resume it
                if "Not responding" not in r:
                    self.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)
            return st == "IDLE"
        what = f"node {self.node}" if self.nnodes == 1 else f"nodes {','.join(self.nodes)}"
        self._wait_for(f"{what} to be idle", lambda: all([idle(n) for n in self.nodes]), timeout)

    def restart_slurmd(self, wait_idle: bool = True):
        """Restart slurmd (e.g. after changing plugstack.conf for the slurmd context), and
        wait until every new slurmd has registered with slurmctld (its SlurmdStartTime
        changed: the node's IDLE state alone may still be the old slurmd's, and a second
        restart then killed the new one in its start-up, after which jobs ran without the
        plugin's job prolog), then, unless jobs run (wait_idle=False), until idle."""
        def started():
            return [m.group(1) if (m := re.search(r"\bSlurmdStartTime=(\S+)", self.run(
                ["scontrol", "show", "node", "-o", n], timeout=15).stdout)) else None
                for n in self.nodes]
        before = started()
        for name in self._slurmd_procs():
            p = self._procs.pop(name, None)
            if p:
                self._terminate(p)
        time.sleep(1.1)  # SlurmdStartTime has 1 s steps: the new one must differ
        self._spawn_slurmds()
        self._wait_for("slurmd to register", lambda: all(
            now and now != b for now, b in zip(started(), before)), self.node_timeout)
        if wait_idle:
            self.wait_idle(self.node_timeout)

    def restart_slurmctld(self, down_s: float = 0.0):
        """Stop slurmctld (SIGTERM: it saves its state), leave it down for down_s
        seconds, and start it again on that state (no -c: running jobs go on)."""
        p = self._procs.pop("slurmctld", None)
        if p:
            self._terminate(p)
        time.sleep(down_s)
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._wait_for("slurmctld", self._ctld_up, 30)

    @staticmethod
    def _terminate(p: subprocess.Popen, timeout: float = 10.0):
        if p.poll() is not None:
            return
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(5)

    def _stray_pids(self) -> list[int]:
        """slurmstepd (and anything else) that inherited our daemons' marker variable."""
        return _marked_pids(self.id)

    def serve_fakehw(self, root, tick_ms: float = 20.0, throttle: bool = True, log=None,
                     full_speed: float = 1.0, node: str | None = None):
        """Run the fake hardware tree `root` (tests/fakehw) in live mode for this cluster;
        stop() stops it after the cluster. Returns the daemon's Popen once it is ready.

        throttle (the default): the jobs' processes (those below this cluster's daemons,
        which carry its marker) run at their fake CPU's clock ratio of full speed, and
        the utilisation is theirs alone (sim/README.md "Clock costs time"). Where
        the host has no usable CPU bandwidth control the daemon warns in `log` and runs
        unthrottled. throttle=False: the fake clock costs no time. full_speed < 1: a fake
        CPU at fmax gets that share of a real CPU (room for the host's other load).
        node: throttle only the jobs of that node's slurmd (one tree per node when a
        multi-node cluster runs on one host); default: every job of the cluster."""
        fakehw_dir = str(pathlib.Path(__file__).resolve().parents[1] / "fakehw")
        if fakehw_dir not in sys.path:
            sys.path.insert(0, fakehw_dir)
        import fakehw
        out = open(log, "ab") if log else None
        try:
            p = fakehw.serve_background(str(root), tick_ms=tick_ms,
                                        throttle_under=(f"{NODE_VAR}={self.id}:{node}" if node
                                                        else f"{MARKER_VAR}={self.id}") if throttle else None,
                                        throttle_fallback=True, throttle_full_speed=full_speed,
                                        stderr=out)
        finally:
            if out:
                out.close()
        self._fakehw.append(p)
        atexit.register(self.stop)
        return p

    def _stop_fakehw(self):
        while self._fakehw:
            p = self._fakehw.pop()
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()  # its cgroups are removed by the next fakehw serve
                    p.wait()

    def stop(self):
        """Tear everything down. Idempotent; safe after a failed or partial start."""
        if not self._started:
            self._stop_fakehw()
            if self.netns:
                self.netns.teardown()
            return
        try:
            if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
                jobs = self.run(["squeue", "-h", "-o", "%i"], timeout=10, check=False).stdout.split()
                if jobs:
                    self.run(["scancel", *jobs], timeout=10, check=False)
                    deadline = time.monotonic() + 10
                    while time.monotonic() < deadline and self.run(
                            ["squeue", "-h", "-o", "%i"], timeout=10, check=False).stdout.strip():
                        time.sleep(0.2)
        except (subprocess.SubprocessError, OSError):
            pass
        for name in (*self._slurmd_procs(), "slurmctld", "slurmdbd", "mariadbd", "munged"):
            p = self._procs.pop(name, None)
            if p:
                self._terminate(p)
        _kill_marked(self.id)
        if self.config == "cgroup" and self.nnodes == 1:
            remove_cgroups(self.node)
        self._procs.clear()
        self._stop_fakehw()
        if self.netns:
            self.netns.teardown()
        with contextlib.suppress(OSError):
            (self.workdir / "run" / "owner").unlink()
        self._started = False
        try:
            atexit.unregister(self.stop)
        except Exception:
            pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def logs(self, tail: int = 60) -> str:
        out = []
        for f in sorted(self.log_dir.glob("*")):
            if f.suffix == ".stdout" and f.with_suffix(".log").exists() and f.with_suffix(".log").stat().st_size:
                continue  # the daemon's own log file has the same lines
            try:
                lines = f.read_text(errors="replace").splitlines()[-tail:]
            except OSError:
                continue
            out.append(f"----- {f} (last {len(lines)} lines)\n" + "\n".join(lines))
        return "\n".join(out)

    # --------------------------------------------------------------- clients
    def user_dir(self, user: str) -> pathlib.Path:
        """A directory owned by `user` (job cwd and output files)."""
        pw = ensure_user(user)
        d = self.users_dir / user
        d.mkdir(parents=True, exist_ok=True)
        os.chown(d, pw.pw_uid, pw.pw_gid)
        os.chmod(d, 0o755)
        return d

    def run(self, cmd: list, user: str | None = None, timeout: float = 60, input=None,
            check: bool = False, cwd=None) -> subprocess.CompletedProcess:
        """Run a command (normally a Slurm client) as root or as `user`, with SLURM_CONF set."""
        cmd = [str(c) for c in cmd]
        if user is not None and user != "root":
            if cwd is None:
                cwd = self.user_dir(user)
            cmd = [_which("runuser"), "-u", user, "--", "env", f"SLURM_CONF={self.conf}",
                   f"PATH={SBIN_PATHS}", *cmd]
        res = subprocess.run(cmd, env=self.env, cwd=cwd or self.workdir, timeout=timeout,
                             input=input, capture_output=True, text=True,
                             stdin=None if input is not None else subprocess.DEVNULL)
        if check and res.returncode != 0:
            raise ClusterError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr.strip()}")
        return res

    def sbatch(self, script_text: str, user: str | None = None, args=()):
        """Submit a batch script (given as text on stdin). Returns (CompletedProcess, job id or None).

        Output goes to <users_dir>/<user>/slurm-<jobid>.out unless args set --output.
        """
        who = user or "root"
        cwd = self.user_dir(who) if who != "root" else self.users_dir
        res = self.run(["sbatch", "--parsable", f"--chdir={cwd}", *args], user=user,
                       input=script_text, cwd=cwd)
        job_id = None
        if res.returncode == 0:
            m = re.match(r"\s*(\d+)", res.stdout)
            job_id = m.group(1) if m else None
        return res, job_id

    def run_job(self, script_text: str, user: str | None = None, args=(), timeout: float = 90,
                state: str = "COMPLETED"):
        """sbatch, wait, and check: the job was accepted and ended in `state`. Returns
        (job id, its output); raises ClusterError with the output and logs otherwise."""
        res, job = self.sbatch(script_text, user=user, args=args)
        if res.returncode != 0 or not job:
            raise ClusterError(f"sbatch failed ({res.returncode}): {res.stderr.strip()}")
        st = self.wait_job(job, timeout)
        out = self.job_output(job)
        if st != state:
            raise ClusterError(f"job {job} {st}, expected {state}\n{out}\n{self.logs()}")
        return job, out

    def srun(self, args, user: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        return self.run(["srun", *args], user=user, timeout=timeout)

    def scancel(self, job_id, user: str | None = None) -> subprocess.CompletedProcess:
        return self.run(["scancel", str(job_id)], user=user, timeout=30)

    def job_info(self, job_id) -> dict:
        res = self.run(["scontrol", "show", "job", "-o", str(job_id)], timeout=15)
        if res.returncode != 0:
            return {}
        info = {}
        for kv in re.findall(r"(\S+?)=(\S*)", res.stdout):
            info.setdefault(kv[0], kv[1])
        return info

    def job_state(self, job_id) -> str:
        """The job's state; UNKNOWN while slurmctld does not answer in time (a busy
        host can hold it for longer than scontrol's 15 s: wait_job asks again)."""
        try:
            return self.job_info(job_id).get("JobState", "UNKNOWN")
        except subprocess.TimeoutExpired:
            return "UNKNOWN"

    def wait_job(self, job_id, timeout: float = 60) -> str:
        """Wait until the job reaches a terminal state and return it (e.g. COMPLETED)."""
        deadline = time.monotonic() + timeout
        state = "UNKNOWN"
        while time.monotonic() < deadline:
            state = self.job_state(job_id)
            if state in TERMINAL_STATES:
                return state
            time.sleep(0.2)
        raise ClusterError(f"job {job_id} still {state} after {timeout:.0f}s\n{self.logs()}")

    def job_output(self, job_id) -> str:
        path = self.job_info(job_id).get("StdOut")
        if not path:
            raise ClusterError(f"job {job_id}: no StdOut known")
        return pathlib.Path(path).read_text(errors="replace")


def main(argv=None):
    """Manual use: python3 harness.py WORKDIR — start, print the env, wait for Ctrl-C."""
    argv = argv if argv is not None else sys.argv[1:]
    workdir = argv[0] if argv else "/run/joulestep-test/manual"
    c = Cluster(workdir)
    c.start()
    print(f"cluster up: export SLURM_CONF={c.conf}", flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        c.stop()


if __name__ == "__main__":
    main()
