"""--energy-hooks on the live Slurm cluster: the plugin preloads libjoulestep-mpiio.so and
libjoulestep-veloc.so into the step's tasks, and unmodified programs get their phases.

The programs (tests/hooks/, built by make into build/tests/hooks) call a test double of an
MPI library that exports the same symbols and writes real files; one test uses Open MPI
itself. prog_veloc runs against the real VELOC 1.8 (`make iolibs`, or a site's VELOC_ROOT),
in sync and async mode; its backend daemon is stopped after each job. The truth of each
phase's bytes is computed here from the programs' arguments and the C type sizes, and
checked against the files the programs wrote. Jobs run as the unprivileged user jsuser; the hook libraries are a
root-owned copy in this module's own directory (the plugin refuses anything else).
"""
from __future__ import annotations

import ctypes
import os
import pathlib
import re
import shutil
import signal
import subprocess
import time

import pytest

import fakehw
import iolibs
import spool
from procs import stepd_pid, wait_file

pytestmark = pytest.mark.cluster

USER = "jsuser"
INT, DOUBLE = ctypes.sizeof(ctypes.c_int), ctypes.sizeof(ctypes.c_double)
HOOK_LIBS = ("libjoulestep-mpiio.so", "libjoulestep-veloc.so")
N_MPI = 1000       # prog_mpiio's N
N_DLOPEN = 333     # prog_dlopen's ints
ND, NI, K = 3000, 700, 3  # prog_veloc: doubles, ints, checkpoints


class HookEnv:
    def __init__(self, cluster, build: pathlib.Path):
        self.c = cluster
        self.root = cluster.workdir / "jshooks"
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(mode=0o755)
        self.hw = self.root / "hw"
        fakehw.create(str(self.hw), packages=1, cpus_per_package=max(1, cluster.cpus))
        self.spool, self.state, self.sock = (self.root / d for d in ("spool", "state", "sock"))
        # the hooks as an admin installs them: <lib>/joulestep/ beside <lib>/libjoulestep-client
        self.lib = self.root / "lib"
        self.hooks = self.install_hooks(self.lib, build)
        self.t = cluster.public_path(build / "tests" / "hooks")
        self.so = build / "spank" / "joulestep.so"
        self.veloc = iolibs.need("veloc")
        self.veloc_bin = cluster.public_path(self.veloc / "bin")
        self.prog_veloc = self.build_prog_veloc()
        self.configure()

    def build_prog_veloc(self) -> pathlib.Path:
        """tests/hooks/prog_veloc.c linked against the real libveloc-client."""
        exe = self.root / "prog_veloc"
        lib = self.c.public_path(iolibs.veloc_libdir(self.veloc))
        subprocess.run(["mpicc", str(REPO / "tests" / "hooks" / "prog_veloc.c"), "-o", str(exe),
                        f"-L{lib}", "-lveloc-client", f"-Wl,-rpath,{lib}"], check=True)
        os.chmod(exe, 0o755)
        return exe

    def stop_veloc_backend(self):
        iolibs.stop_backend(__import__("pwd").getpwnam(USER).pw_uid)

    def install_hooks(self, lib: pathlib.Path, build: pathlib.Path) -> pathlib.Path:
        (lib / "joulestep").mkdir(parents=True, mode=0o755)
        for d in (lib, lib / "joulestep"):
            os.chmod(d, 0o755)
        shutil.copy2(build / "lib" / "libjoulestep-client.so", lib / "libjoulestep-client.so.1")
        for name in HOOK_LIBS:
            shutil.copy2(build / "lib" / "joulestep" / name, lib / "joulestep" / name)
            os.chmod(lib / "joulestep" / name, 0o755)
        return lib / "joulestep"

    def configure(self, **extra):
        a = {"spool": self.spool, "state": self.state, "sysfs": self.hw, "socket_dir": self.sock,
             "backend": "sysfs", "cluster": "jstest", "hooks_dir": self.hooks}
        a.update(extra)
        self.c.write_plugstack(self.so, a)

    def run_job(self, script: str, args=(), timeout=120):
        return self.c.run_job(script, USER, args, timeout)

    def records(self, job, steps):
        return spool.wait_records(self.spool, job, steps, self.c.logs, 60)

    def user_file(self, name: str) -> pathlib.Path:
        return self.c.user_dir(USER) / name


REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def henv(cluster, build_dir):
    env = HookEnv(cluster, build_dir)
    env.stop_veloc_backend()  # one left by anything before: it would keep its old config
    try:
        yield env
    finally:
        env.stop_veloc_backend()
        env.c.write_plugstack(None)


def veloc_cfg(env: HookEnv, name: str, mode: str) -> pathlib.Path:
    """A VELOC config and its two tiers, in the user's directory."""
    d = env.user_file(name)
    shutil.rmtree(d, ignore_errors=True)
    pw = __import__("pwd").getpwnam(USER)
    for sub in (d, d / "scratch", d / "persistent"):
        sub.mkdir()
        os.chown(sub, pw.pw_uid, pw.pw_gid)
    cfg = d / "veloc.cfg"
    cfg.write_text(f"scratch = {d / 'scratch'}\npersistent = {d / 'persistent'}\nmode = {mode}\n")
    os.chown(cfg, pw.pw_uid, pw.pw_gid)
    os.chmod(cfg, 0o644)
    return d


def programs(env: HookEnv, tag: str) -> str:
    """Shell lines running every hooked program once; files named after tag."""
    d = env.c.user_dir(USER)
    va, vs = veloc_cfg(env, f"veloc-async-{tag}", "async"), veloc_cfg(env, f"veloc-sync-{tag}", "sync")
    return (f"{env.t}/prog_mpiio {d}/mpiio-{tag}.dat {N_MPI}\n"
            f"{env.t}/prog_dlopen {env.t}/libmpiapp.so {d}/dlopen-{tag}.dat {N_DLOPEN}\n"
            f"VELOC_BIN={env.veloc_bin} {env.prog_veloc} {va}/veloc.cfg {ND} {NI} {K}\n"
            f"{env.prog_veloc} {vs}/veloc.cfg {ND} {NI} {K}\n")


def mpiio_truth():
    """(kind, label, bytes) of prog_mpiio FILE N_MPI then prog_dlopen, in call order."""
    n = N_MPI
    return [("write", "MPI_File_write", n * INT), ("write", "MPI_File_write_at", 2 * n * DOUBLE),
            ("write", "MPI_File_write_all", 3 * n), ("write", "MPI_File_write_at_all", n * DOUBLE),
            ("write", "MPI_File_write_shared", 5 * INT), ("write", "MPI_File_write_ordered", 7 * INT),
            ("write", "MPI_File_write_all_begin", n * INT), ("write", "MPI_File_iwrite", 11 * DOUBLE),
            ("write", "MPI_File_iwrite_at_all", 2 * n),
            ("write", "MPI_File_write", None),  # the call with a datatype the library refuses
            ("flush", "MPI_File_sync", None),
            ("write", "MPI_File_write", N_DLOPEN * INT)]  # prog_dlopen: libmpi loaded RTLD_LOCAL


def veloc_truth(mode: str):
    """(kind, label, bytes) of prog_veloc CFG ND NI K; the overlap and the flush only in async
    mode (Algorithm 1: in sync mode VELOC writes the persistent tier inside the checkpoint).
    In async mode each checkpoint is followed by its flush-overlap (the program's own run)
    and by its flush (the program blocked in the next wait: prog_veloc waits before each
    checkpoint and at the end; VELOC 1.8's socket queue cannot say "finished" earlier)."""
    full, sel = ND * DOUBLE + NI * INT, NI * INT
    out = []
    for label, b in [("ckpt", full)] * K + [("sel", sel)] + [("conv", full)] * 2:
        out.append(("checkpoint", label, b))
        if mode == "async":
            out += [("flush-overlap", label, b), ("flush", label, b)]
    return out


VELOC_KINDS = ("checkpoint", "flush-overlap", "flush")


def phases(rec):
    return [(p["kind"], p["label"], p["bytes"]) for p in sorted(rec["phases"], key=lambda p: p["seq"])]


def prog_lines(out: str) -> list[str]:
    """The programs' own output (everything but this test's tagged lines and VELOC's log
    lines, which name each run's directories and time its transfers)."""
    return [l for l in out.splitlines()
            if l and not l.startswith(("PRELOAD", "HOOKS", "srun: ", "[INFO ", "[BENCHMARK "))]


@pytest.fixture(scope="module")
def runs(henv):
    """One job with --energy-hooks=mpiio,veloc, one without: the same programs, then two
    srun steps: plain programs (hooks inherited from the allocation, with a user's own
    LD_PRELOAD entry), and --energy-hooks=none."""
    out = {}
    for tag, opt in (("hooked", "--energy-hooks=mpiio,veloc"), ("bare", None)):
        user_lib = f"{henv.t}/libfakeveloc.so"
        script = ("#!/bin/sh\n#SBATCH -n1\n" + (f"#SBATCH {opt}\n" if opt else "") +
                  'echo "PRELOAD batch $LD_PRELOAD"\necho "HOOKS batch $JOULESTEP_HOOKS"\n' +
                  programs(henv, tag) +
                  f'LD_PRELOAD="$LD_PRELOAD:{user_lib}" srun -n1 sh -c '
                  "'echo \"PRELOAD step0 $LD_PRELOAD\"; echo \"HOOKS step0 $JOULESTEP_HOOKS\"; "
                  "python3 -c \"print(sum(range(1000)))\"; echo plain; cat /proc/self/comm'\n"
                  "srun -n1 --energy-hooks=none sh -c "
                  "'echo \"PRELOAD step1 $LD_PRELOAD\"; echo \"HOOKS step1 $JOULESTEP_HOOKS\"'\n")
        job, text = henv.run_job(script)
        henv.stop_veloc_backend()  # the async run's daemon outlives the job
        out[tag] = (job, text, henv.records(job, ["batch", "0", "1"]))
    return out


def test_mpiio_hook_marks_writes_with_their_bytes(henv, runs):
    """Every MPI-IO write is a write phase with count x type size bytes (unknown when the
    call failed), MPI_File_sync a flush; also when libmpi was loaded RTLD_LOCAL. The files
    hold exactly the bytes recorded: the hook changed nothing of what was written."""
    job, out, recs = runs["hooked"]
    got = [p for p in phases(recs["batch"]) if p[1].startswith("MPI_")]
    assert got == mpiio_truth(), out
    d = henv.c.user_dir(USER)
    assert (d / "mpiio-hooked.dat").stat().st_size == sum(b for _, _, b in mpiio_truth()[:-1] if b)
    assert (d / "dlopen-hooked.dat").stat().st_size == N_DLOPEN * INT
    assert (d / "mpiio-bare.dat").read_bytes() == (d / "mpiio-hooked.dat").read_bytes()


def test_veloc_hook_marks_checkpoint_and_flush(henv, runs):
    """The real VELOC 1.8. Async: each checkpoint (begin..end, VELOC_Checkpoint as a whole)
    is a checkpoint phase, then a flush-overlap phase until the program waits, then a flush
    phase while it waits; sync: checkpoints only (the flush is inside the checkpoint). Bytes are the protected regions written; the flush
    starts after its checkpoint ends and ends before the next one begins."""
    job, out, recs = runs["hooked"]
    rec = recs["batch"]
    got = [p for p in phases(rec) if p[0] in VELOC_KINDS and not p[1].startswith("MPI_")]
    want = veloc_truth("async") + veloc_truth("sync")
    assert got == want, out
    ordered = [p for p in sorted(rec["phases"], key=lambda p: p["seq"])
               if p["kind"] in VELOC_KINDS and not p["label"].startswith("MPI_")]
    for a, b in zip(ordered, ordered[1:]):
        assert a["marker_end_ns"] <= b["marker_start_ns"], (a, b)
    assert all(p["depth"] == 0 and not p["open_at_step_end"] for p in ordered)
    # VELOC really wrote those bytes to the persistent tier: each file is its header
    # (a size_t count, then an int id and a size_t size per region) and the regions
    size_t = ctypes.sizeof(ctypes.c_size_t)
    for mode in ("async", "sync"):
        per = henv.user_file(f"veloc-{mode}-hooked") / "persistent"
        sizes = sorted(f.stat().st_size for f in per.iterdir())
        want = [b + size_t + (2 if lbl != "sel" else 1) * (INT + size_t)
                for _, lbl, b in veloc_truth("sync")]
        assert sizes == sorted(want), (mode, sizes)


def test_programs_run_unchanged(runs):
    """The same programs print the same with and without the hooks; a step of programs
    that use neither MPI nor VELOC records no phase at all."""
    hooked, bare = runs["hooked"], runs["bare"]
    assert prog_lines(hooked[1]) == prog_lines(bare[1])
    assert "499500" in hooked[1] and "\nplain\n" in hooked[1]
    assert hooked[2]["0"]["phases"] == [] and hooked[2]["1"]["phases"] == []
    for step in ("batch", "0", "1"):
        assert bare[2][step]["phases"] == []
        assert bare[2][step]["provenance"]["hooks"] == []


def test_preload_set_once_in_steps_and_none_clears_it(henv, runs):
    """The batch step and its sruns get the admin's hook paths first, each once (the batch
    step's LD_PRELOAD reaches its sruns), the user's own entries after them; a step with
    --energy-hooks=none gets none of ours, and JOULESTEP_HOOKS says what was preloaded."""
    job, out, recs = runs["hooked"]
    ours = [str(henv.hooks / n) for n in HOOK_LIBS]
    pre = dict(re.findall(r"^PRELOAD (\S+) ?(.*)$", out, re.M))
    hooks = dict(re.findall(r"^HOOKS (\S+) ?(.*)$", out, re.M))
    assert pre["batch"] == ":".join(ours), out
    assert pre["step0"] == ":".join(ours + [f"{henv.t}/libfakeveloc.so"]), out
    assert pre["step1"] == "", out  # the batch step's (ours only), all removed
    assert hooks == {"batch": "mpiio,veloc", "step0": "mpiio,veloc", "step1": ""}, out
    assert recs["batch"]["provenance"]["hooks"] == ["mpiio", "veloc"]
    assert recs["0"]["provenance"]["hooks"] == ["mpiio", "veloc"]
    assert recs["1"]["provenance"]["hooks"] == []
    # without hooks the job's LD_PRELOAD is left exactly as the job set it
    bare = dict(re.findall(r"^PRELOAD (\S+) ?(.*)$", runs["bare"][1], re.M))
    assert bare["batch"] == "" and bare["step0"] == f":{henv.t}/libfakeveloc.so", bare


def test_unknown_hook_refused_at_submission(henv):
    """A name that is not a hook fails sbatch and srun before anything is submitted, and the
    message says what is allowed."""
    for cmd in (["sbatch", "--energy-hooks=mpiio,darshan", "--wrap", "true"],
                ["srun", "--energy-hooks=mpi", "true"]):
        res = henv.c.run(cmd, user=USER, timeout=60)
        assert res.returncode != 0, res
        assert "allowed: mpiio, veloc, or none" in res.stderr, res.stderr


def test_untrusted_hook_libraries_not_preloaded(henv):
    """A hook library the job's user owns, or that is group/world-writable, is never
    preloaded: the job runs without it and the record says why."""
    pw = __import__("pwd").getpwnam(USER)
    bad = henv.root / "badlib"
    shutil.rmtree(bad, ignore_errors=True)
    # a copy of the installed hooks with one user-owned and one world-writable library
    (bad / "joulestep").mkdir(parents=True, mode=0o755)
    os.chmod(bad, 0o755)
    os.chmod(bad / "joulestep", 0o755)
    for name in HOOK_LIBS:
        shutil.copy2(henv.hooks / name, bad / "joulestep" / name)
    os.chown(bad / "joulestep" / HOOK_LIBS[0], pw.pw_uid, pw.pw_gid)
    os.chmod(bad / "joulestep" / HOOK_LIBS[1], 0o666)
    henv.configure(hooks_dir=bad / "joulestep")
    try:
        job, out = henv.run_job("#!/bin/sh\n#SBATCH -n1\n#SBATCH --energy-hooks=mpiio,veloc\n"
                                'echo "PRELOAD batch $LD_PRELOAD"\necho "HOOKS batch $JOULESTEP_HOOKS"\n')
        rec = henv.records(job, ["batch"])["batch"]
    finally:
        henv.configure()
    assert "PRELOAD batch \n" in out + "\n" and "HOOKS batch \n" in out + "\n", out
    assert rec["provenance"]["hooks"] == []
    errs = " ".join(rec["provenance"]["errors"])
    for name in HOOK_LIBS:
        assert f"{name} is not a root-owned regular file" in errs, errs


def test_open_mpi_program(henv, tmp_path):
    """With Open MPI itself (a singleton in the batch step): MPI_File_write_all and
    MPI_File_sync are marked with the bytes the program wrote."""
    mpicc = shutil.which("mpicc")
    if not mpicc:
        pytest.fail("mpicc missing: make deps installs openmpi-bin and libopenmpi-dev")
    src = tmp_path / "ompi_prog.c"
    src.write_text(r'''
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int n = atoi(argv[2]), rc;
    double *buf = calloc((size_t)n, sizeof(double));
    MPI_File fh;
    MPI_Init(&argc, &argv);
    rc = MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    rc |= MPI_File_write_all(fh, buf, n, MPI_DOUBLE, MPI_STATUS_IGNORE);
    rc |= MPI_File_sync(fh);
    rc |= MPI_File_close(&fh);
    printf("rc %d\n", rc);
    MPI_Finalize();
    return rc;
}
''')
    exe = henv.root / "ompi_prog"
    subprocess.run([mpicc, str(src), "-o", str(exe)], check=True)
    os.chmod(exe, 0o755)
    n = 12345
    out_file = henv.c.user_dir(USER) / "ompi.dat"
    job, out = henv.run_job(f"#!/bin/sh\n#SBATCH -n1\n#SBATCH --energy-hooks=mpiio\n"
                            f"{exe} {out_file} {n}\n")
    assert "rc 0" in out, out
    rec = henv.records(job, ["batch"])["batch"]
    assert phases(rec) == [("write", "MPI_File_write_all", n * DOUBLE),
                           ("flush", "MPI_File_sync", None)], out
    assert out_file.stat().st_size == n * DOUBLE


def test_short_program_keeps_its_markers(henv):
    """A program that writes once and exits at once keeps its phase even when the plugin
    is slow to accept its connection (it accepts only live processes of the step): the
    step's slurmstepd is stopped while the program runs and continued a second later.
    The hook's first marker of a process waits for the plugin's reply, so the program
    is still alive when its connection is accepted."""
    d = henv.c.user_dir(USER)
    ready, go, out_file = d / "short.ready", d / "short.go", d / "short.dat"
    for f in (ready, go, out_file):
        f.unlink(missing_ok=True)
    script = (f"#!/bin/sh\n#SBATCH -n1\n#SBATCH --energy-hooks=mpiio\n"
              f"touch {ready}\nwhile [ ! -e {go} ]; do sleep 0.05; done\n"
              f"{henv.t}/prog_dlopen {henv.t}/libmpiapp.so {out_file} {N_DLOPEN}\n")
    res, job = henv.c.sbatch(script, user=USER)
    assert res.returncode == 0 and job, res.stderr
    wait_file(ready, 60)
    pid = stepd_pid(job)
    assert pid, henv.c.logs()
    os.kill(pid, signal.SIGSTOP)
    try:
        go.touch()
        time.sleep(1.0)  # the program starts and writes while the plugin cannot accept
    finally:
        os.kill(pid, signal.SIGCONT)
    assert henv.c.wait_job(job, 120) == "COMPLETED", henv.c.job_output(job)
    rec = henv.records(job, ["batch"])["batch"]
    assert phases(rec) == [("write", "MPI_File_write", N_DLOPEN * INT)], henv.c.job_output(job)
    assert out_file.stat().st_size == N_DLOPEN * INT


def test_forked_and_threaded_programs(henv):
    """Issue 23, defect 9 (tests/hooks/prog_hooks_mt.c). fork: while a thread is inside
    VELOC_Checkpoint_begin, the main thread forks and calls VELOC itself: neither the child
    nor the parent waits for that thread (no hook lock across a call into VELOC; the child
    starts with fresh hook state), and the thread's checkpoint and flush are marked with
    the bytes of the regions protected by then. threads: thread A is inside MPI_File_write
    when thread B calls MPI_File_sync, and A returns first: A's END closes A's write phase
    (with its bytes), never B's; B's call, made while another thread's hooked phase is
    open, is not marked (docs/user-guide.md, "Automatic phases")."""
    d = henv.c.user_dir(USER)
    va = veloc_cfg(henv, "veloc-mt", "async")
    n = 1000
    out_file = d / "mt.dat"
    out_file.unlink(missing_ok=True)
    script = (f"#!/bin/sh\n#SBATCH -n1\n#SBATCH --energy-hooks=mpiio,veloc\n"
              f"{henv.t}/prog_hooks_mt fork {va}/veloc.cfg; echo \"fork rc $?\"\n"
              f"{henv.t}/prog_hooks_mt threads {out_file} {n}; echo \"threads rc $?\"\n")
    job, out = henv.run_job(script)
    for line in ("child protect 0", "child exit 0", "parent protect 0",
                 "checkpoint 0 wait 0 finalize 0", "fork rc 0", "write 0 sync 0", "threads rc 0"):
        assert line in out, out
    ckpt = 1000 * DOUBLE + 10 * INT  # region 0, and region 1 protected while T was inside
    rec = henv.records(job, ["batch"])["batch"]
    assert phases(rec) == [("checkpoint", "t", ckpt), ("flush-overlap", "t", ckpt),
                           ("flush", "t", ckpt), ("write", "MPI_File_write", n * INT)], out
    assert out_file.stat().st_size == n * INT


def test_flush_ended_by_another_thread_inside_a_nested_write(henv):
    """The main thread's VELOC flush-overlap is open and the main thread is inside an
    MPI_File_write nested in it when another thread's VELOC_Checkpoint_wait ends the
    overlap. That END must not close the write (the latest open phase): it is sent once
    the write has ended, so each phase keeps its own bytes. The waiting thread's flush is
    not marked: another thread's phase (the write) is open."""
    d = henv.c.user_dir(USER)
    va = veloc_cfg(henv, "veloc-flush-mt", "async")
    n = 777
    out_file = d / "flush-mt.dat"
    out_file.unlink(missing_ok=True)
    job, out = henv.run_job(f"#!/bin/sh\n#SBATCH -n1\n#SBATCH --energy-hooks=mpiio,veloc\n"
                            f"{henv.t}/prog_hooks_mt flush {va}/veloc.cfg {out_file} {n}\n")
    assert "flush: checkpoint 0 write 0 wait 0 finalize 0" in out, out
    rec = henv.records(job, ["batch"])["batch"]
    ckpt = 1000 * DOUBLE
    assert phases(rec) == [("checkpoint", "f", ckpt), ("flush-overlap", "f", ckpt),
                           ("write", "MPI_File_write", n * INT)], out
    ph = sorted(rec["phases"], key=lambda p: p["seq"])
    assert ph[2]["marker_end_ns"] <= ph[1]["marker_end_ns"], ph  # the overlap ended after the write


def test_veloc_hook_on_veloc_master_api(henv):
    """VELOC master's API, which the pinned VELOC 1.8 lacks (so the test double, built
    -DFAKE_VELOC_MASTER, stands in): VELOC_Region_protect's named groups give each
    checkpoint its own bytes (its name's group, else the default one), and the
    program's own VELOC_Checkpoint_finished, a status there (VELOC_SUCCESS when
    finished), closes the flush-overlap: the program's next phase is not nested in it,
    and no flush is recorded (the program never blocked on it)."""
    d = veloc_cfg(henv, "veloc-master", "async")
    ds = veloc_cfg(henv, "veloc-master-sync", "sync")
    exe = f"{henv.t}/prog_veloc_master"
    job, out = henv.run_job("#!/bin/sh\n#SBATCH -n1\n#SBATCH --energy-hooks=veloc\n"
                            f"{exe} {d}/veloc.cfg {ND} {NI}\n{exe} {ds}/veloc.cfg {ND} {NI}\n")
    assert out.count("polled finished") == 4, out
    rec = henv.records(job, ["batch"])["batch"]
    got = [(p["kind"], p["label"], p["bytes"], p["depth"])
           for p in sorted(rec["phases"], key=lambda p: p["seq"])]
    grp, other = ND * DOUBLE, NI * INT

    def truth(flush):
        return [x for lbl, b in (("grpA", grp), ("other", other))
                for x in [("checkpoint", lbl, b, 0)] + ([("flush-overlap", lbl, b, 0)] if flush else [])
                + [("compute", "between", None, 0)]]
    assert got == truth(True) + truth(False), out
    sizes = sorted(f.stat().st_size for f in (d / "persistent").iterdir())
    assert sizes == sorted([grp, other])


def test_veloc_async_flush_holds_no_compute(henv):
    """The real VELOC 1.8 in async mode, VELOC's heatdis pattern: VELOC_Checkpoint, then
    SPIN ms of compute, K times, then a wait. The compute is in each checkpoint's
    flush-overlap, not in its flush: the flush is only the time the program is blocked on
    the background transfer (a few MB to the persistent tier: milliseconds), so it must be
    far shorter than the compute; and under a policy that slows flushes, the overlap, which
    holds the compute, runs at the base clock (it is not an I/O kind), the flush does not."""
    spin_ms, k, nd = 400, 3, 2 * 1024 * 1024  # 16 MiB of doubles per checkpoint
    va = veloc_cfg(henv, "veloc-spin", "async")
    job, out = henv.run_job("#!/bin/sh\n#SBATCH -n1\n#SBATCH --energy-hooks=veloc\n"
                            "#SBATCH --energy-policy=phase:flush=0.5\n"
                            f"VELOC_BIN={henv.veloc_bin} {henv.prog_veloc} {va}/veloc.cfg "
                            f"{nd} 1 {k} {spin_ms}\n")
    henv.stop_veloc_backend()
    assert "finalize 0" in out and all(f"spin {v} 0 1" in out for v in range(k)), out
    rec = henv.records(job, ["batch"])["batch"]
    ph = sorted((p for p in rec["phases"] if p["kind"] in VELOC_KINDS), key=lambda p: p["seq"])
    b = nd * DOUBLE + INT
    assert [(p["kind"], p["label"], p["bytes"]) for p in ph] == \
        [x for _ in range(k) for x in (("checkpoint", "spin", b), ("flush-overlap", "spin", b),
                                       ("flush", "spin", b))], out
    dur_ms = lambda p: (p["end_ns"] - p["start_ns"]) / 1e6
    for p in ph:
        if p["kind"] == "flush-overlap":
            assert dur_ms(p) >= 0.9 * spin_ms, p      # the compute is here
            assert p["freq_khz"] is None, p            # at the base clock: not I/O
        if p["kind"] == "flush":
            assert dur_ms(p) < spin_ms / 4, p          # and not here
            assert p["freq_khz"] is not None, p        # a blocking flush is slowed
