"""Phase markers for the joulestep SPANK plugin (docs/phase-protocol.md), stdlib only.

    import joulestep.phase as jsp          # or: from joulestep.phase import phase
    with jsp.phase("write", nbytes=n):
        f.write(buf)

    jsp.begin("checkpoint", "ckpt-3"); ...; jsp.end(nbytes=n)

Outside a joulestep step (no JOULESTEP_SOCKET) every call is a no-op returning
NOT_IN_STEP. Markers are asynchronous (one send, no reply) unless `sync=True`
is given or JOULESTEP_SYNC=1 is set; synchronous markers return once the
plugin has recorded the marker and set the clock. A refused synchronous marker
raises PhaseError; in a `with` block the end marker is always sent.
"""
from __future__ import annotations

import contextlib
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
    """The plugin refused a marker (errno = the protocol error code)."""


class _Conn:
    def __init__(self):
        self.lock = threading.Lock()
        self.sock = None
        self.pid = None
        self.ids = itertools.count(1)

    def _ensure(self):
        if self.sock is not None and self.pid == os.getpid():
            return True
        if self.sock is not None:  # forked: the parent's connection
            self.sock.close()
            self.sock = None
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
            except OSError:
                s.close()
                raise
        self.sock, self.pid = s, os.getpid()
        return True

    def send(self, body: str, sync: bool) -> int:
        with self.lock:
            for attempt in (0, 1):
                if not self._ensure():
                    return NOT_IN_STEP
                ident = next(self.ids) if sync else None
                msg = f"{body} id={ident} sync" if sync else body
                data = msg.encode("ascii")
                if len(data) > 256:
                    raise PhaseError(90, "marker longer than 256 bytes")
                try:
                    self.sock.send(data)
                except (BrokenPipeError, ConnectionResetError, socket.timeout) as e:
                    self.sock.close()
                    self.sock = None
                    if attempt:
                        raise
                    continue
                return self._await(ident) if sync else 0
        return 0

    def _await(self, ident: int) -> int:
        want = f" id={ident}"
        deadline = time.monotonic() + _REPLY_TIMEOUT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PhaseError(110, "no reply from the joulestep plugin")
            self.sock.settimeout(left)
            reply = self.sock.recv(257).decode("ascii", "replace")
            if not reply:
                raise PhaseError(104, "the joulestep plugin closed the connection")
            fields = reply.split()
            if want.strip() not in fields:
                continue  # a stray error reply for an earlier asynchronous marker
            if reply.startswith("JS1 OK"):
                return 0
            m = re.match(r"JS1 ERR (\d+)", reply)
            code = int(m.group(1)) if m else 71
            raise PhaseError(code, reply.split(want, 1)[-1].strip() or reply)


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
    """Begin a phase. kind: [a-z0-9_-]{1,32}; label: [A-Za-z0-9_.:+/-]{1,64} or None."""
    if not _KIND.match(kind or ""):
        raise ValueError(f"phase kind {kind!r}: allowed [a-z0-9_-]{{1,32}}")
    if label is not None and (not _LABEL.match(label) or label == "-"):
        raise ValueError(f"phase label {label!r}: allowed [A-Za-z0-9_.:+/-]{{1,64}}")
    body = f"JS1 BEGIN {kind} {label or '-'} rank={_rank()} t={time.monotonic_ns()}"
    return _conn.send(body, _sync(sync))


def end(nbytes: int | None = None, *, sync: bool | None = None) -> int:
    """End this rank's innermost open phase; nbytes: bytes written/read, or None."""
    if nbytes is not None and (not isinstance(nbytes, int) or nbytes < 0):
        raise ValueError("nbytes: a non-negative integer or None")
    b = "-" if nbytes is None else str(nbytes)
    return _conn.send(f"JS1 END bytes={b} rank={_rank()} t={time.monotonic_ns()}", _sync(sync))


def ping() -> int:
    """Round trip to the plugin: 0 in a joulestep step, NOT_IN_STEP outside."""
    return _conn.send("JS1 PING", True)


@contextlib.contextmanager
def phase(kind: str, label: str | None = None, *, nbytes: int | None = None,
          sync: bool | None = None):
    """`with phase("write", nbytes=n): ...` marks the block as a phase.

    The yielded dict may be updated (`p["nbytes"] = n`) when the size is only
    known inside the block."""
    info = {"nbytes": nbytes}
    begin(kind, label, sync=sync)
    try:
        yield info
    finally:
        end(info["nbytes"], sync=sync)


class _CallableModule(types.ModuleType):
    """Lets ``joulestep.phase(...)`` call ``joulestep.phase.phase(...)``."""

    def __call__(self, *args, **kwargs):
        return self.phase(*args, **kwargs)


if __name__ in sys.modules:     # not when loaded from its file alone
    sys.modules[__name__].__class__ = _CallableModule
