"""The phase clients wait briefly for a step socket that is not bound yet.

The plugin binds the step's socket from its own thread, off the launch path,
so a task may start a few hundred microseconds before it exists. The C and
Python clients retry ENOENT/ECONNREFUSED for at most 200 ms
(docs/phase-protocol.md); after that a marker fails with a clear error.
"""
import ctypes
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
    try:
        jsp.begin("write")
    except FileNotFoundError:
        pass
    else:
        raise AssertionError("a socket that never appears must fail the marker")
