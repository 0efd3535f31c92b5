"""The real I/O libraries for the live tests, the benchmarks and the demo: where they are
(VELOC_ROOT, GENERICIO_ROOT, DAMARIS_ROOT, else `make iolibs`'s build/iolibs/<lib>), and
VELOC's backend daemon, which outlives the jobs that start it and must not outlive a test."""
from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import struct
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
ENV = {"veloc": "VELOC_ROOT", "genericio": "GENERICIO_ROOT", "damaris": "DAMARIS_ROOT"}
# what each install must hold (a site's own install included)
NEEDS = {"veloc": ("include/veloc.h", "bin/veloc-backend"),
         "genericio": ("include/GenericIO.h", "lib/libGenericIO.a"),
         "damaris": ("include/Damaris.h", "lib/libdamaris.a")}


def root(lib: str) -> pathlib.Path | None:
    """The install of `lib` (a site's *_ROOT first), or None when there is none."""
    site = os.environ.get(ENV[lib])
    d = pathlib.Path(site) if site else REPO / "build" / "iolibs" / lib
    if site is None and not (d / ".stamp").is_file():
        return None
    return d if all((d / f).exists() for f in NEEDS[lib]) else None


ARCHIVE = {"veloc": "VELOC-1.8.tar.gz", "genericio": "genericio.tar.gz",
           "damaris": "Damaris-1.7.1.tar.gz"}


def sources(lib: str) -> bool:
    """Whether this machine has the pinned archive of `lib` where `make iolibs` looks
    (IOLIBS_SRC, else the Makefile's default beside the checkout) or a site's *_ROOT."""
    src = os.environ.get("IOLIBS_SRC") or str(REPO.parent / "shared" / "third_party")
    return bool(os.environ.get(ENV[lib])) or (pathlib.Path(src) / ARCHIVE[lib]).is_file()


def need(lib: str) -> pathlib.Path:
    """The install of `lib`. Where its sources are at hand but it is not built, an
    error that says how to get one; on a machine with neither sources nor an install
    (make deps said "the experiments use the imitations"), the test is skipped with
    that reason: the real library cannot be tested there."""
    d = root(lib)
    if d is None and not sources(lib):
        import pytest
        pytest.skip(f"{lib}: no pinned archive in IOLIBS_SRC and no {ENV[lib]} on this "
                    "machine: the real library cannot be tested here")
    if d is None:
        raise RuntimeError(f"{lib} is not built: run make iolibs (archives in IOLIBS_SRC, see "
                           f"bench/iolibs/SHA256SUMS) or set {ENV[lib]}")
    return d


def veloc_libdir(d: pathlib.Path) -> pathlib.Path:
    return d / "lib64" if (d / "lib64" / "libveloc-client.so").exists() else d / "lib"


def backend_pid(uid: int) -> int | None:
    """The pid VELOC's backend daemon of `uid` wrote (a native int) when it started."""
    try:
        raw = pathlib.Path(f"/dev/shm/veloc-backend-ready-{uid}").read_bytes()
    except FileNotFoundError:
        return None
    return struct.unpack("i", raw[:4])[0] if len(raw) >= 4 else None


def _is_backend(pid: int, uid: int) -> bool:
    try:
        st = os.stat(f"/proc/{pid}")
        cmd = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return st.st_uid == uid and cmd.split(b"\0")[0].rsplit(b"/", 1)[-1] == b"veloc-backend"


def stop_backend(uid: int, timeout: float = 10.0) -> int | None:
    """Stop the VELOC backend daemon of `uid` (what a site's epilog does), and remove the
    files it leaves in /dev/shm. Returns the pid stopped, or None when none ran."""
    pid = backend_pid(uid)
    stopped = None
    # also those whose pid file is in another /dev/shm (a netns node's own, harness.py)
    pids = ([pid] if pid else []) + [int(d.name) for d in pathlib.Path("/proc").iterdir()
                                      if d.name.isdigit() and int(d.name) != pid]
    for pid in pids:
        if not _is_backend(pid, uid):
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        end = time.monotonic() + timeout
        while _is_backend(pid, uid) and time.monotonic() < end:
            time.sleep(0.05)
        if _is_backend(pid, uid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        stopped = stopped or pid
    for f in pathlib.Path("/dev/shm").glob("veloc-*"):
        try:
            if f.lstat().st_uid == uid:
                f.unlink()
        except FileNotFoundError:
            pass
    return stopped
