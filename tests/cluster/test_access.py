"""The phase socket's access matrix (issue 11, item 4) on the live Slurm cluster, with
fake RAPL/cpufreq. docs/security.md, "Socket access", lists every row with the test
that proves it; rows already proven elsewhere are only referenced there:

  another uid, the same uid outside the step, another step or job of the same uid, root:
      test_plugin.py::test_other_user_cannot_connect,
      test_plugin_markers.py::test_other_job_of_the_same_user_is_refused
      (here: a fake root in a user namespace, in and outside the step)
  a process of this step that forked or exec'd, at any depth up to the bound: here
  a client that connects and never sends (or never reads): here
  a flood of markers from every rank: here (the rate limit's count);
      test_plugin_markers.py::test_step_end_drain_is_bounded (step-end work),
      ::test_rate_limit_never_drops_an_end, ::test_record_size_is_bounded,
      test_plugin.py::test_hostile_markers_are_bounded (state bounds)
  a file, symlink or foreign socket at the socket path, a user-owned, symlinked or
  world-writable socket_dir or parent, an over-long path: here
  no plugin descriptor in a task, for each backend slurmstepd can use (sysfs,
  powercap; papi is refused by the plugstack parser): here

Every refused case checks the same three things: the job still runs, slurmd.log has a
"joulestep: job J step S: ..." line saying why, and the record says it where designed
(provenance.errors for the socket set-up; refused peers are logged, not recorded).
"""
from __future__ import annotations

import os
import pathlib
import pwd
import re
import shutil
import socket
import stat
import subprocess

import pytest

from procs import cmdline, job_pids, stepd_pid, wait_file, wait_for
from test_plugin_markers import PROTO, USER, _log_lines, fresh, marker_env

pytestmark = pytest.mark.cluster

OTHER = "jsother"
PEER_MAX_DEPTH = 64  # docs/phase-protocol.md: the parent walk's bound
SUN_PATH_MAX = 107   # bytes of an AF_UNIX path, without its NUL


@pytest.fixture(scope="module")
def aenv(cluster, build_dir):
    with marker_env(cluster, build_dir, name="jsaccess") as env:
        yield env


@pytest.fixture
def ak(aenv):
    yield from fresh(aenv)


def _flags(ak, *names):
    d = ak.c.user_dir(USER)
    for n in names:
        (d / n).unlink(missing_ok=True)
    return [d / n for n in names]


def _wait_loop(flag, ticks=900):
    """Shell: wait (bounded) until flag exists."""
    return f"i=0; while [ ! -e {flag} ] && [ $i -lt {ticks} ]; do sleep 0.1; i=$((i+1)); done"


def _published_job(ak, name, before="", after=""):
    """A batch job of USER that runs `before`, publishes its JOULESTEP_SOCKET, waits
    until <name>.done appears, then runs `after`. Returns (job, socket path, done)."""
    flag, done = _flags(ak, name, f"{name}.done")
    script = (f"#!/bin/sh\n#SBATCH -n1\n{before}\n"
              f'echo "$JOULESTEP_SOCKET" > {flag}.tmp && mv {flag}.tmp {flag}\n'
              f"{_wait_loop(done)}\n{after}\n")
    res, job = ak.c.sbatch(script, user=USER)
    assert res.returncode == 0 and job, res.stderr
    wait_file(flag, 60)
    return job, flag.read_text().strip(), done


def _refusals(ak, job, step) -> dict:
    return _log_lines(ak.c, f"joulestep: job {job} step {step}: refused phase connection")


# ------------------------------------------------- processes of this step: accepted
# Every probe says how many generations it is below its step's slurmstepd (walking
# /proc itself), so the test computes each verdict from the documented rule: accepted
# iff slurmstepd is an ancestor at most PEER_MAX_DEPTH generations up.
TREE = r'''
import os, socket, subprocess, sys, time
LIMIT = int(os.environ["JSTEST_LIMIT"])
WHERE = sys.argv[2]

def ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])

def cmd(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""

def depth():
    """Generations up to the step's main slurmstepd (the topmost of consecutive
    slurmstepd ancestors: not a forked helper), None when it is no ancestor."""
    best, k, p = None, 0, os.getpid()
    while p > 1:
        if cmd(p).startswith("slurmstepd:"):
            best = k
        elif best is not None:
            break
        p, k = ppid(p), k + 1
    return best

def probe(tag, s=None):
    d = depth()
    if s is None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.settimeout(30)
        s.connect(os.environ["JOULESTEP_SOCKET"])
    try:
        s.send(b"JS1 PING id=7 sync")
    except OSError:
        pass  # refused: the plugin shut the connection down; its reply is queued
    try:
        r = s.recv(300).decode()
    except OSError as e:
        r = f"recv failed {e.errno}"
    print("PROBE", WHERE, tag, "none" if d is None else d, r, flush=True)

def chain():
    """Fork down to LIMIT + 1 generations below slurmstepd; probe at the last two."""
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        d = depth()
        if d >= LIMIT:
            probe(f"depth{d}")
        if d <= LIMIT:
            chain()
        os._exit(0)
    os.waitpid(pid, 0)

def daemon():
    """Double fork and setsid: the probe runs once it was reparented (out of the tree)."""
    r, w = os.pipe()
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        mid = os.getpid()
        if os.fork() == 0:
            for _ in range(3000):
                if os.getppid() != mid:
                    break
                time.sleep(0.01)
            probe("daemon")
            os.write(w, b"x")
            os._exit(0)
        os._exit(0)
    os.waitpid(pid, 0)
    os.close(w)
    os.read(r, 1)

if sys.argv[1] == "probe":        # exec'd by a task
    probe(sys.argv[3])
elif sys.argv[1] == "inherit":    # exec'd with its parent's connection
    probe("inherited", socket.socket(fileno=int(sys.argv[3])))
else:
    probe("task")
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        probe("fork")
        os._exit(0)
    os.waitpid(pid, 0)
    subprocess.run([sys.executable, __file__, "probe", WHERE, "exec"], check=True)
    subprocess.run(["sh", "-c", f"{sys.executable} {__file__} probe {WHERE} shell; true"], check=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(os.environ["JOULESTEP_SOCKET"])
    subprocess.run([sys.executable, __file__, "inherit", WHERE, str(s.fileno())],
                   pass_fds=[s.fileno()], check=True)
    s.close()
    chain()
    daemon()
'''
TREE_TAGS = {"task", "fork", "exec", "shell", "inherited", f"depth{PEER_MAX_DEPTH}",
             f"depth{PEER_MAX_DEPTH + 1}", "daemon"}


def test_processes_of_the_step_are_accepted(ak):
    """In the batch step and in an srun step, the task, a forked child, an exec'd
    program, one started through a shell, a program using a connection it inherited,
    and a process 64 generations below slurmstepd are accepted; 65 generations, and a
    daemon that double-forked out of the step's process tree, are refused (logged, not
    recorded). Every verdict follows from the depth the probe measured itself."""
    tree = ak.pyfile("tree.py", TREE)
    job, out = ak.run_job(f"#!/bin/sh\n#SBATCH -n1\nexport JSTEST_LIMIT={PEER_MAX_DEPTH}\n"
                          f"python3 {tree} main batch\nsrun -n1 python3 {tree} main step\n",
                          timeout=180)
    got = {}
    for where, tag, d, reply in re.findall(r"^PROBE (\S+) (\S+) (\S+) (.*)$", out, re.M):
        assert (where, tag) not in got, out
        got[(where, tag)] = (None if d == "none" else int(d), reply)
    for where in ("batch", "step"):
        assert {t for w, t in got if w == where} == TREE_TAGS, out
        assert got[(where, f"depth{PEER_MAX_DEPTH}")][0] == PEER_MAX_DEPTH
        assert got[(where, "daemon")][0] is None, got  # slurmstepd is no subreaper
    for (where, tag), (d, reply) in got.items():
        accepted = d is not None and d <= PEER_MAX_DEPTH
        want = "JS1 OK id=7 PONG" if accepted else "JS1 ERR 13 permission denied"
        assert reply.startswith(want), (where, tag, d, reply)
    recs = ak.wait_records(job, ["batch", "0"])
    for step in ("batch", "0"):
        assert recs[step]["phases"] == [] and recs[step]["provenance"]["markers_rejected"] == 0
        per = _refusals(ak, job, step)  # depth 65 and the daemon, each with its reason
        assert per and set(per.values()) == {2}, (step, per)
        lines = [l for f in ak.c.log_dir.glob("*") for l in f.read_text(errors="replace").splitlines()
                 if f"job {job} step {step}: refused phase connection" in l]
        assert all("not a process of this step (not a descendant of its slurmstepd)" in l
                   for l in lines), lines


PROBE_ONE = r'''
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.settimeout(30)
s.connect(sys.argv[1])
try:
    s.send(b"JS1 PING id=3 sync")
except OSError:
    pass
print("GOT", s.recv(300).decode(), flush=True)
'''


def _userns_works(ak) -> bool:
    r = ak.c.run(["unshare", "-Ur", "id", "-u"], user=USER)
    return r.returncode == 0 and r.stdout.strip() == "0"


def test_fake_root_in_a_user_namespace(ak):
    """uid 0 inside a user namespace is not root: the kernel reports the peer's uid as
    the plugin's namespace sees it (the user's). Outside the step it is refused; a
    process of the step in its own user namespace is still a process of the step."""
    if not _userns_works(ak):
        pytest.skip("unprivileged user namespaces are not available on this host")
    probe = ak.pyfile("probe1.py", PROBE_ONE)
    job, path, done = _published_job(ak, "userns",
                                     before=f'unshare -Ur python3 {probe} "$JOULESTEP_SOCKET"')
    try:
        for u in (USER, OTHER):
            r = ak.c.run(["unshare", "-Ur", "python3", probe, path], user=u)
            assert "GOT JS1 ERR 13 permission denied" in r.stdout, (u, r)
    finally:
        done.touch()
    assert ak.c.wait_job(job) == "COMPLETED"
    out = ak.c.job_output(job)
    assert re.search(r"^GOT JS1 OK id=3 PONG", out, re.M), out
    ak.wait_records(job, ["batch"])
    per = _refusals(ak, job, "batch")
    assert per and set(per.values()) == {2}, per


# -------------------------------------------- idle and deaf clients: teardown not held
def test_idle_and_deaf_clients_do_not_hold_the_step(ak):
    """A peer that connects and never sends costs nothing but its connection: another
    user's is refused at once (without waiting for it to send), root's is kept. A peer
    that sends sync requests and never reads its replies loses them (the plugin never
    blocks on it): the task's own PING is still answered. The step ends while both
    are connected, its record is written, and they then see the connection closed."""
    late = "python3 -c 'import socket,os; s=socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); " \
           "s.settimeout(30); s.connect(os.environ[\"JOULESTEP_SOCKET\"]); " \
           "s.send(b\"JS1 PING id=5 sync\"); print(\"LATE\", s.recv(300).decode())'"
    job, path, done = _published_job(ak, "idle", after=late)
    idle = deaf = None
    try:
        # another user's silent peer: refused at accept, it gets ERR 13 then EOF
        silent = ("import socket,sys; s=socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); "
                  "s.settimeout(30); s.connect(sys.argv[1]); "
                  "print('GOT', s.recv(300).decode()); print('EOF', s.recv(300) == b'')")
        r = ak.c.run(["python3", "-c", silent, path], user=OTHER)
        assert "GOT JS1 ERR 13 permission denied" in r.stdout and "EOF True" in r.stdout, r
        idle = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        idle.connect(path)
        deaf = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        deaf.settimeout(30)  # a send that waits this long means the plugin stopped reading
        deaf.connect(path)
        nsent = 4000  # far more replies than deaf's receive queue holds (~270)
        for i in range(nsent):
            deaf.send(b"JS1 PING id=%d sync" % i)
    finally:
        done.touch()
    try:
        assert ak.c.wait_job(job, 120) == "COMPLETED"
        rec = ak.wait_records(job, ["batch"], timeout=60)["batch"]  # while both are connected
        out = ak.c.job_output(job)
        assert re.search(r"^LATE JS1 OK id=5 PONG", out, re.M), out
        idle.settimeout(30)
        assert idle.recv(300) == b""  # closed by the plugin at step end, nothing sent
        replies = 0
        try:
            while (m := deaf.recv(300)) != b"":
                assert m.startswith(b"JS1 OK id="), m
                replies += 1
        except ConnectionResetError:
            pass  # closed with some of deaf's PINGs unread (the bounded drain)
        assert replies < nsent, replies  # the rest were dropped, not waited for
        assert not pathlib.Path(path).exists()
        prov = rec["provenance"]
        assert prov["markers_rejected"] == 0 and rec["step"]["exit_code"] == 0, prov
        assert prov["markers_drained"] <= 1024  # whatever deaf still had queued
    finally:
        for s in (idle, deaf):
            if s:
                s.close()


# --------------------------------------------------------- a flood from every rank
FLOOD = PROTO + r'''
K = int(sys.argv[1])
rank = int(os.environ["SLURM_PROCID"])
s = connect()
s.send(b"JS1 PING id=1 sync"); until(s, 1)
for k in range(K):
    s.send(b"JS1 BEGIN write - rank=%d" % rank)
    s.send(b"JS1 END bytes=1 rank=%d" % rank)
s.send(b"JS1 PING id=2 sync"); until(s, 2)  # all handled: nothing left for step end
print("SENT", rank, K, flush=True)
'''


def test_flood_from_every_rank_is_rate_limited(ak):
    """4 ranks send 150 BEGIN/END pairs each, as fast as they can, under rate=40/s
    (burst 40). The BEGINs recorded are at least the burst and at most the burst plus
    rate x the step's duration; every other BEGIN is counted as dropped and leaves no
    state (rank entries == recorded BEGINs); every recorded phase was closed by its
    END; the limit is logged once; nothing is left for step end."""
    rate, nranks, k = 40, 4, 150
    ak.configure(rate=rate)
    prog = ak.pyfile("flood_ranks.py", FLOOD)
    job, out = ak.run_job(f"#!/bin/sh\n#SBATCH -n{nranks} -O\n#SBATCH --energy-policy=io-dvfs\n"
                          f"srun -n{nranks} -O python3 {prog} {k}\n", timeout=180)
    sent = {int(r): int(n) for r, n in re.findall(r"^SENT (\d+) (\d+)$", out, re.M)}
    assert sent == {r: k for r in range(nranks)}, out
    rec = ak.wait_records(job, ["batch", "0"])["0"]
    prov, ph = rec["provenance"], rec["phases"]
    entries = [e for p in ph for e in p["ranks"]]
    accepted = len(entries)
    assert {e["rank"] for e in entries} <= set(range(nranks))
    assert accepted + prov["markers_rate_dropped"] == nranks * k, (accepted, prov)
    duration_s = rec["step"]["duration_ns"] / 1e9
    assert rate <= accepted <= rate + rate * duration_s + 1, (accepted, duration_s)
    assert all(e["bytes"] == 1 for e in entries)
    assert all(p["open_at_step_end"] is False for p in ph)
    assert prov["markers_rejected"] == 0
    assert prov["markers_drained"] == 0 and prov["drain_truncated"] is False, prov
    per = _log_lines(ak.c, f"joulestep: job {job} step 0: phase BEGIN markers exceed rate={rate}/s")
    assert per and set(per.values()) == {1}, per


# ------------------------------------------------------------ the socket's path
def _sock_job(ak, name, args=()):
    """Batch job printing whether it got a socket and what the client says."""
    script = (f"#!/bin/sh\n#SBATCH -n1\necho \"SOCK [$JOULESTEP_SOCKET]\"\n"
              f"{ak.phase('-v', 'ping')}; echo \"PING $?\"\n")
    return ak.c.sbatch(script, user=USER, args=args)


def _socket_error(rec) -> list[str]:
    return [e for e in rec["provenance"]["errors"] if e.startswith("socket:")]


def _bind_socket(path: pathlib.Path, owner: int | None):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(str(path))
    s.close()  # a socket file nobody listens on: what a killed step leaves
    if owner is not None:
        os.chown(path, owner, owner)


@pytest.mark.parametrize("kind", ["file", "symlink", "user-socket", "stale-socket"])
def test_entry_at_the_socket_path(ak, kind):
    """Whatever is at <socket_dir>/<job>.<step>.sock when the step starts: a stale
    root-owned socket (a killed step's) is replaced; anything else (a file, a symlink,
    a socket of another owner) is left untouched, and the step runs without markers.
    The job inherits a stale JOULESTEP_SOCKET (a job that resubmits itself exports
    its environment): a step with no socket of its own has none, not the stale one."""
    res, job = _sock_job(ak, kind, args=[
        "--hold", f"--export=ALL,JOULESTEP_SOCKET={ak.root}/inherited/stale.sock"])
    assert res.returncode == 0 and job, res.stderr
    ak.sock.mkdir(mode=0o755, exist_ok=True)
    p = ak.sock / f"{job}.batch.sock"
    victim = ak.root / "victim"
    victim.write_text("victim\n")
    os.chmod(victim, 0o600)
    if kind == "file":
        p.write_text("precious\n")
    elif kind == "symlink":
        p.symlink_to(victim)
    else:
        _bind_socket(p, pwd.getpwnam(USER).pw_uid if kind == "user-socket" else None)
    before = os.lstat(p)
    try:
        ak.c.run(["scontrol", "release", job], check=True)
        assert ak.c.wait_job(job, 90) == "COMPLETED"
        out = ak.c.job_output(job)
        rec = ak.wait_records(job, ["batch"])["batch"]
        if kind == "stale-socket":
            assert f"SOCK [{p}]" in out and "PING 0" in out, out
            assert not p.exists() and _socket_error(rec) == [], rec["provenance"]
            return
        assert "SOCK []" in out and "PING 0" in out, out  # no markers, the job runs
        after = os.lstat(p)  # left as it was
        assert (after.st_ino, after.st_mode, after.st_uid) == (before.st_ino, before.st_mode,
                                                               before.st_uid)
        if kind == "file":
            assert p.read_text() == "precious\n"
        assert victim.read_text() == "victim\n" and stat.S_IMODE(os.stat(victim).st_mode) == 0o600
        errs = _socket_error(rec)
        assert len(errs) == 1 and str(p) in errs[0], rec["provenance"]["errors"]
        assert _log_lines(ak.c, f"joulestep: job {job} step batch: {errs[0][:60]}"), ak.c.logs()
    finally:
        if os.path.lexists(p):
            p.unlink()
        ak.c.run(["scancel", job])


def _dir_case(ak, kind):
    """socket_dir for one refused layout; returns (socket_dir, path that must not appear)."""
    pw = pwd.getpwnam(USER)
    base = ak.root / "dirs"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)
    if kind == "user-owned":
        d = base / "sock"
        d.mkdir()
        os.chown(d, pw.pw_uid, pw.pw_gid)
        return d, None
    if kind == "user-owned-parent":
        parent = base / "user"
        parent.mkdir()
        os.chown(parent, pw.pw_uid, pw.pw_gid)
        return parent / "sock", parent / "sock"
    if kind == "symlink":
        real = base / "real"
        real.mkdir(mode=0o755)
        os.chmod(real, 0o755)
        (base / "link").symlink_to(real)
        return base / "link", None
    if kind == "world-writable":
        d = base / "sock"
        d.mkdir()
        os.chmod(d, 0o1777)
        return d, None
    assert kind == "too-long"
    # a directory name that fits the plugstack's bound, with a socket path (at least
    # "/1.batch.sock" more) beyond what AF_UNIX holds
    d = base / ("x" * (SUN_PATH_MAX - len(str(base)) - 1))
    assert len(str(d)) + len("/1.batch.sock") > SUN_PATH_MAX
    return d, d


@pytest.mark.parametrize("kind", ["user-owned", "user-owned-parent", "symlink",
                                  "world-writable", "too-long"])
def test_unsafe_socket_dir_is_refused(ak, kind):
    """socket_dir owned by the user, under a user-owned directory, a symlink, or
    world-writable, or a socket path longer than AF_UNIX allows: the step runs
    without markers, nothing is created there, the log and the record say why."""
    d, absent = _dir_case(ak, kind)
    ak.configure(socket_dir=d)
    res, job = _sock_job(ak, kind)
    assert res.returncode == 0 and job, res.stderr
    assert ak.c.wait_job(job, 90) == "COMPLETED"
    out = ak.c.job_output(job)
    assert "SOCK []" in out and "PING 0" in out, out
    rec = ak.wait_records(job, ["batch"])["batch"]
    errs = _socket_error(rec)
    assert len(errs) == 1, rec["provenance"]["errors"]
    assert ("too long" in errs[0]) == (kind == "too-long"), errs
    assert _log_lines(ak.c, f"joulestep: job {job} step batch: {errs[0][:60]}"), ak.c.logs()
    if absent is not None:
        assert not os.path.lexists(absent), absent
    if kind != "too-long":
        assert not any(p.name.endswith(".sock") for p in d.parent.rglob("*")), list(d.parent.rglob("*"))


# ------------------------------------------------ no plugin descriptor in a task
# Another plugin, for this test only: in slurmstepd it opens a file WITHOUT O_CLOEXEC
# (a canary: proves that a leaked descriptor does reach the tasks, i.e. Slurm does not
# close them for us), and with powercap= it moves slurmstepd's main thread into a
# private mount namespace where /sys/class/powercap is the fake tree (fakehw.py's
# nsexec mounts), so joulestep's powercap backend (libpowercap) runs in slurmstepd.
FDPLUG_C = r'''
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>
#include <slurm/spank.h>
SPANK_PLUGIN(jstest_fdcanary, 1);
static char ns_state[64] = "off";
static const char *arg(int ac, char **av, const char *key)
{
	size_t n = strlen(key);
	for (int i = 0; i < ac; i++)
		if (!strncmp(av[i], key, n) && av[i][n] == '=')
			return av[i] + n + 1;
	return NULL;
}
int slurm_spank_init(spank_t sp, int ac, char **av)
{
	(void)sp;
	const char *hw = arg(ac, av, "powercap"), *py = arg(ac, av, "fakehw");
	if (spank_context() != S_CTX_REMOTE || !hw || !py)
		return 0;
	if (unshare(CLONE_NEWNS) < 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		snprintf(ns_state, sizeof(ns_state), "failed:%d", errno);
		return 0;
	}
	pid_t pid = fork();
	if (pid == 0) {
		execl("/usr/bin/python3", "python3", py, "_nsinner", hw, "--", "/bin/true", (char *)NULL);
		_exit(127);
	}
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		snprintf(ns_state, sizeof(ns_state), "failed:mount:%d", st);
	else
		snprintf(ns_state, sizeof(ns_state), "ok");
	return 0;
}
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	const char *canary = arg(ac, av, "canary");
	if (spank_context() != S_CTX_REMOTE)
		return 0;
	spank_setenv(sp, "JSTEST_NS", ns_state, 1);
	if (canary)
		(void)open(canary, O_RDONLY); /* no O_CLOEXEC: on purpose */
	return 0;
}
'''

HOLDER = r'''
import os, socket, subprocess, sys
where, d = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # an accepted connection in slurmstepd
s.settimeout(30)
s.connect(os.environ["JOULESTEP_SOCKET"])
s.send(b"JS1 PING id=1 sync")
print("HOLD", where, os.environ["JSTEST_NS"], os.environ["JOULESTEP_SOCKET"], s.recv(300).decode(), flush=True)
go = os.path.join(d, f"fd-go-{where}")
# an exec'd grandchild that keeps every inherited descriptor
child = subprocess.Popen([sys.executable, "-c", f"import os,time\nfor _ in range(900):\n"
                          f"    if os.path.exists({go!r}): break\n    time.sleep(0.1)"],
                         close_fds=False)
with open(os.path.join(d, f"fd-ready-{where}"), "w") as f:
    f.write(f"{os.getpid()} {child.pid}\n")
child.wait()
'''


def _fds(pid) -> dict:
    """(st_dev, st_ino) -> (fd, link target) of the open files of pid."""
    out = {}
    base = pathlib.Path(f"/proc/{pid}/fd")
    for fd in base.iterdir():
        try:
            st = os.stat(fd)  # follows the magic link: the open file itself
            out[(st.st_dev, st.st_ino)] = (int(fd.name), os.readlink(fd))
        except OSError:
            continue
    return out


def _keys_of(root: pathlib.Path, name: str) -> set:
    keys = set()
    for dirpath, _, files in os.walk(root):
        if name in files:
            st = os.stat(os.path.join(dirpath, name))
            keys.add((st.st_dev, st.st_ino))
    return keys


def _unix_inode(path: str) -> int:
    for line in pathlib.Path("/proc/net/unix").read_text().splitlines()[1:]:
        f = line.split()
        if len(f) >= 8 and f[7] == path and f[3] == "00010000":  # __SO_ACCEPTCON: listening
            return int(f[6])
    raise AssertionError(f"{path} not listening")


@pytest.mark.parametrize("backend", ["sysfs", "powercap"])
def test_no_plugin_descriptor_in_tasks(ak, tmp_path, backend):
    """While a task (batch and srun step) and its exec'd child run, every descriptor of
    theirs is compared, as the open file itself (device, inode), with slurmstepd's: the
    ones they share are Slurm's stdio and the canary only. joulestep's own descriptors
    (energy counters of this backend, the clock files of an io-dvfs step, the listening
    socket and its connections, the eventfd, /proc) are open in slurmstepd and in no
    task. (test_plugin.py::test_no_fd_leaks_into_tasks checks names, sysfs only.)"""
    src = tmp_path / "fdcanary.c"
    src.write_text(FDPLUG_C)
    so = ak.root / "jstest_fdcanary.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-Wall", str(src), "-o", str(so)], check=True)
    os.chmod(so, 0o755)
    canary = ak.root / f"canary-{backend}"
    canary.write_text("canary\n")
    os.chmod(canary, 0o644)
    line = f"optional {so} canary={canary}"
    if backend == "powercap":  # libpowercap reads /sys only: the fake tree is mounted there
        line += f" powercap={ak.hw} fakehw={ak.fakehw_py}"
    ak.extra_lines = [line]
    if backend == "powercap":
        # monitor: the real clocks are only read; a journal of its own, never replayed on /sys
        ak.configure(backend="powercap", sysfs="/sys", state=ak.root / "state-powercap")
        policy = "monitor"
    else:
        ak.configure()
        policy = "io-dvfs"
    d = ak.c.user_dir(USER)
    for w in ("batch", "step"):
        _flags(ak, f"fd-go-{w}", f"fd-ready-{w}")
    holder = ak.pyfile("holder.py", HOLDER)
    res, job = ak.c.sbatch(f"#!/bin/sh\n#SBATCH -n1\n#SBATCH --energy-policy={policy}\n"
                           f"python3 {holder} batch {d}\nsrun -n1 python3 {holder} step {d}\n",
                           user=USER)
    assert res.returncode == 0 and job, res.stderr
    energy = _keys_of(ak.hw, "energy_uj")
    clocks = _keys_of(ak.hw / "devices" / "system" / "cpu", "scaling_max_freq")
    try:
        for where, step in (("batch", "batch"), ("step", "0")):
            ready = d / f"fd-ready-{where}"
            wait_file(ready, 60)
            wait_for(lambda: len(ready.read_text().split()) == 2, "holder pids", 10)
            holder_pid, child_pid = map(int, ready.read_text().split())
            stepd = stepd_pid(job, step)
            assert stepd, (job, step)
            sfds = _fds(stepd)
            targets = {t for _, t in sfds.values()}
            out = ak.c.job_output(job)
            sock = re.search(rf"^HOLD {where} (\S+) (\S+) JS1 OK id=1 PONG", out, re.M)
            assert sock and sock.group(1) == ("ok" if backend == "powercap" else "off"), out
            mine = set()  # joulestep's descriptors in slurmstepd, by kind
            for kind, keys in (("energy", energy), ("clock", clocks if policy == "io-dvfs" else set())):
                hit = keys & sfds.keys()
                assert hit or not keys, (kind, targets)
                mine |= hit
            lsock = f"socket:[{_unix_inode(sock.group(2))}]"
            assert lsock in targets and "anon_inode:[eventfd]" in targets and "/proc" in targets, targets
            mine |= {k for k, (_, t) in sfds.items() if t in (lsock, "anon_inode:[eventfd]", "/proc")}
            pids = [p for p in job_pids(job) if not cmdline(p).startswith("slurmstepd")]
            assert holder_pid in pids and child_pid in pids, (pids, holder_pid, child_pid)
            canary_seen = set()
            for pid in pids:
                tfds = _fds(pid)
                for key in tfds.keys() & sfds.keys():
                    fd, t = tfds[key]
                    if t == str(canary):
                        canary_seen.add(pid)
                        continue
                    assert key not in mine, (pid, cmdline(pid), fd, t)
                    # the rest must be Slurm's stdio: pipes, devices, the job's output
                    assert (t.startswith(("pipe:", "/dev/")) or t.startswith(str(ak.c.users_dir))), \
                        (pid, cmdline(pid), fd, t, sfds[key])
                for fd, t in tfds.values():  # also by name, whatever the file
                    assert not t.startswith((str(ak.root) + "/hw", "/sys/", "anon_inode:[eventfd]")), \
                        (pid, fd, t)
                    assert t != "/proc", (pid, fd, t)
            # the method sees a leaked descriptor: the canary, in the task and its child
            assert {holder_pid, child_pid} <= canary_seen, (canary_seen, holder_pid, child_pid)
            (d / f"fd-go-{where}").touch()
    finally:
        for w in ("batch", "step"):
            (d / f"fd-go-{w}").touch()
    assert ak.c.wait_job(job, 120) == "COMPLETED"
    recs = ak.wait_records(job, ["batch", "0"])
    for r in recs.values():
        assert r["provenance"]["backend"] == backend, r["provenance"]
