"""The phase clients wait briefly for a step socket that is not bound yet.

The plugin binds the step's socket from its own thread, off the launch path,
so a task may start a few hundred microseconds before it exists. The C and
Python clients retry ENOENT/ECONNREFUSED for at most 200 ms
(docs/phase-protocol.md); after that a marker fails with a clear error.
"""
import ctypes
import errno
import importlib
import os
import socket
import subprocess
import sys
import threading
import time


def late_server(path, delay_s, got):
    def run():
        time.sleep(delay_s)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        srv.bind(path)
        srv.listen(1)
        srv.settimeout(10)
        conn, _ = srv.accept()
        conn.settimeout(10)
        got.append(conn.recv(512).decode())
        conn.close()
        srv.close()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_c_client_waits_for_a_late_socket(build_dir, tmp_path):
    path = str(tmp_path / "step.sock")
    got = []
    t = late_server(path, 0.05, got)
    prog = ("import ctypes,sys; lib=ctypes.CDLL(sys.argv[1]); "
            "sys.exit(lib.js_phase_begin(b'write', b'late') & 0xff)")
    env = dict(os.environ, JOULESTEP_SOCKET=path)
    env.pop("JOULESTEP_SYNC", None)
    res = subprocess.run([sys.executable, "-c", prog,
                          str(build_dir / "lib" / "libjoulestep-client.so")],
                         env=env, capture_output=True, text=True, timeout=30)
    t.join(10)
    assert res.returncode == 0, res.stderr
    assert got and got[0].startswith("JS1 BEGIN write late"), got


def test_c_client_gives_up_when_no_socket_appears(build_dir, tmp_path):
    env = dict(os.environ, JOULESTEP_SOCKET=str(tmp_path / "never.sock"))
    prog = ("import ctypes,sys; lib=ctypes.CDLL(sys.argv[1]); "
            "print(lib.js_phase_begin(b'write', None))")
    res = subprocess.run([sys.executable, "-c", prog,
                          str(build_dir / "lib" / "libjoulestep-client.so")],
                         env=env, capture_output=True, text=True, timeout=30)
    assert int(res.stdout) == -2  # -ENOENT, not a hang and not "not in a step"


def test_python_client_waits_for_a_late_socket(repo, tmp_path, monkeypatch):
    sys.path.insert(0, str(repo / "cli" / "src"))
    path = str(tmp_path / "py.sock")
    monkeypatch.setenv("JOULESTEP_SOCKET", path)
    monkeypatch.delenv("JOULESTEP_SYNC", raising=False)
    jsp = importlib.reload(importlib.import_module("joulestep.phase"))
    got = []
    t = late_server(path, 0.05, got)
    assert jsp.begin("write", "late") == 0
    t.join(10)
    assert got and got[0].startswith("JS1 BEGIN write late"), got
    monkeypatch.setenv("JOULESTEP_SOCKET", str(tmp_path / "never.sock"))
    jsp = importlib.reload(jsp)
    # as the C client: -ENOENT, not a hang, not "not in a step", no exception
    assert jsp.begin("write") == -errno.ENOENT


def test_c_client_async_markers_never_wait_for_a_stuck_server(build_dir, tmp_path):
    """A server that accepts but stops reading (a stalled plugin): once the connection's
    queue is full, the first asynchronous marker waits for room up to the 1 s send
    timeout, then the connection is congested and each later one returns -EAGAIN at once
    (MSG_DONTWAIT), and the connection is kept. Waiting per marker would take >= 400 s
    for these markers: the subprocess timeout is only a hang guard."""
    path = str(tmp_path / "stuck.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(path)
    srv.listen(8)
    srv.settimeout(0.2)
    accepted, stop = [], threading.Event()

    def accept_loop():
        while not stop.is_set():
            try:
                accepted.append(srv.accept()[0])  # kept open, never read
            except (socket.timeout, OSError):
                continue
    t = threading.Thread(target=accept_loop, daemon=True)
    t.start()
    n = 1000
    prog = ("import ctypes,sys; lib=ctypes.CDLL(sys.argv[1]); "
            "print(' '.join(str(lib.js_phase_begin(b'write', None)) for _ in range(int(sys.argv[2]))))")
    env = dict(os.environ, JOULESTEP_SOCKET=path)
    env.pop("JOULESTEP_SYNC", None)
    try:
        res = subprocess.run([sys.executable, "-c", prog,
                              str(build_dir / "lib" / "libjoulestep-client.so"), str(n)],
                             env=env, capture_output=True, text=True, timeout=60)
    finally:
        stop.set()
        t.join(5)
        for c in accepted:
            c.close()
        srv.close()
    rcs = [int(x) for x in res.stdout.split()]
    assert len(rcs) == n, res
    queued = rcs.index(-11)  # EAGAIN: the queue is full from here on
    assert queued > 0 and rcs[:queued] == [0] * queued
    assert rcs[queued:] == [-11] * (n - queued)
    assert n - queued >= 400
    assert len(accepted) == 1  # not dropped and reconnected per marker
