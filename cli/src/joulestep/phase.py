"""Phase markers for the joulestep SPANK plugin (docs/phase-protocol.md), stdlib only.

    import joulestep
    with joulestep.phase("write", nbytes=n):
        f.write(buf)

    import joulestep.phase as jsp
    jsp.begin("checkpoint", "ckpt-3"); ...; jsp.end(nbytes=n)

A marker never fails the program, as with the C library: every call returns
0 (done), NOT_IN_STEP (no JOULESTEP_SOCKET: outside a joulestep step) or a
negative errno (not recorded: a stale socket, a refused marker, a bad kind),
and never raises; a ``with`` block always runs its body, and sends its end
marker only when its begin was recorded.  Markers are asynchronous (one
send, no reply) unless ``sync=True`` is given or JOULESTEP_SYNC=1 is set;
synchronous markers return once the plugin has recorded the marker and set
the clock, or with the plugin's refusal code, negated.

This module and ``joulestep/__init__.py`` are the ``joulestep-marker``
package (marker/): it installs on compute nodes without the CLI's
dependencies.
"""
from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import socket
import sys
import threading
import time
import types

__all__ = ["phase", "begin", "end", "ping", "PhaseError", "NOT_IN_STEP"]

NOT_IN_STEP = 1
_KIND = re.compile(r"[a-z0-9_-]{1,32}\Z")
_LABEL = re.compile(r"[A-Za-z0-9_.:+/-]{1,64}\Z")
_REPLY_TIMEOUT_S = 5.0
_CONNECT_RETRY_S = 0.2


class PhaseError(OSError):
    """A refused marker.  Markers return the negated code rather than raise
    it (they never fail the program); the class stays for code that
    catches it."""


def _neg(e: BaseException) -> int:
    """A negative errno for an exception of a marker."""
    if isinstance(e, TimeoutError) or isinstance(e, socket.timeout):
        return -errno.ETIMEDOUT
    n = getattr(e, "errno", None)
    return -n if isinstance(n, int) and n > 0 else -errno.EIO


class _Conn:
    def __init__(self):
        self.lock = threading.Lock()
        self.sock = None
        self.pid = None
        self.ids = itertools.count(1)

    def close(self):
        if self.sock is not None:
            self.sock.close()
        self.sock = None

    def _ensure(self):
        if self.sock is not None and self.pid == os.getpid():
            return True
        if self.sock is not None:  # forked: the parent's connection
            self.close()
        path = os.environ.get("JOULESTEP_SOCKET")
        if not path:
            return False
        # The plugin binds the socket off the step's launch path: a task that
        # starts within ~1 ms of the step may find it not there yet, so retry
        # ENOENT/ECONNREFUSED for at most _CONNECT_RETRY_S (as the C client).
        deadline = time.monotonic() + _CONNECT_RETRY_S
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # CLOEXEC (PEP 446)
            s.settimeout(1.0)
            try:
                s.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                s.close()
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.002)
            except BaseException:
                s.close()
                raise
        self.sock, self.pid = s, os.getpid()
        return True

    def send(self, body: str, sync: bool) -> int:
        """0, NOT_IN_STEP or a negative errno; never raises."""
        with self.lock:
            try:
                return self._send(body, sync)
            except (OSError, ValueError) as e:
                self.close()
                return _neg(e)

    def _send(self, body: str, sync: bool) -> int:
        for attempt in (0, 1):
            if not self._ensure():
                return NOT_IN_STEP
            ident = next(self.ids) if sync else None
            msg = f"{body} id={ident} sync" if sync else body
            data = msg.encode("ascii")
            if len(data) > 256:
                return -errno.EMSGSIZE
            try:
                self.sock.send(data)
            except (BrokenPipeError, ConnectionResetError, socket.timeout):
                self.close()
                if attempt:
                    raise
                continue   # the plugin may have dropped an idle connection
            return self._await(ident) if sync else 0
        return -errno.ECONNRESET

    def _await(self, ident: int) -> int:
        want = f"id={ident}"
        deadline = time.monotonic() + _REPLY_TIMEOUT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return -errno.ETIMEDOUT
            self.sock.settimeout(left)
            reply = self.sock.recv(257).decode("ascii", "replace")
            if not reply:
                self.close()
                return -errno.ECONNRESET
            if want not in reply.split():
                continue  # a stray error reply for an earlier asynchronous marker
            if reply.startswith("JS1 OK"):
                return 0
            m = re.match(r"JS1 ERR (\d+)", reply)
            return -int(m.group(1)) if m and int(m.group(1)) > 0 else -errno.EPROTO


_conn = _Conn()


def _rank() -> int:
    try:
        return max(0, int(os.environ.get("SLURM_PROCID", "0")))
    except ValueError:
        return 0


def _sync(sync):
    if sync is not None:
        return bool(sync)
    v = os.environ.get("JOULESTEP_SYNC", "")
    return bool(v) and v != "0"


def begin(kind: str, label: str | None = None, *, sync: bool | None = None) -> int:
    """Begin a phase. kind: [a-z0-9_-]{1,32}; label: [A-Za-z0-9_.:+/-]{1,64}
    or None.  0, NOT_IN_STEP, or a negative errno (-EINVAL: a bad kind or
    label); never raises."""
    if not isinstance(kind, str) or not _KIND.match(kind) or (
            label is not None and (not isinstance(label, str) or not _LABEL.match(label)
                                   or label == "-")):
        return -errno.EINVAL
    body = f"JS1 BEGIN {kind} {label or '-'} rank={_rank()} t={time.monotonic_ns()}"
    return _conn.send(body, _sync(sync))


def end(nbytes: int | None = None, *, sync: bool | None = None) -> int:
    """End this rank's innermost open phase; nbytes: bytes written/read, or
    None.  0, NOT_IN_STEP or a negative errno; never raises."""
    if nbytes is not None and (type(nbytes) is not int or nbytes < 0):
        return -errno.EINVAL
    b = "-" if nbytes is None else str(nbytes)
    return _conn.send(f"JS1 END bytes={b} rank={_rank()} t={time.monotonic_ns()}", _sync(sync))


def ping() -> int:
    """Round trip to the plugin: 0 in a joulestep step, NOT_IN_STEP outside,
    a negative errno when the socket does not answer."""
    return _conn.send("JS1 PING", True)


@contextlib.contextmanager
def phase(kind: str, label: str | None = None, *, nbytes: int | None = None,
          sync: bool | None = None):
    """`with phase("write", nbytes=n): ...` marks the block as a phase.

    The yielded dict may be updated (`p["nbytes"] = n`) when the size is only
    known inside the block.  The body always runs; the end marker is sent
    when the begin was recorded (returned 0)."""
    info = {"nbytes": nbytes}
    rc = begin(kind, label, sync=sync)
    try:
        yield info
    finally:
        if rc == 0:
            end(info["nbytes"], sync=sync)


class _CallableModule(types.ModuleType):
    """Lets ``joulestep.phase(...)`` call ``joulestep.phase.phase(...)``."""

    def __call__(self, *args, **kwargs):
        return self.phase(*args, **kwargs)


if __name__ in sys.modules:     # not when loaded from its file alone
    sys.modules[__name__].__class__ = _CallableModule
