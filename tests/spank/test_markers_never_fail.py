"""Markers never fail the job (docs/user-guide.md, "Marking phases").

The C library returns 0, JS_NOT_IN_STEP or a negative errno and never stops
the program; the Python marker and the shell markers (joulestep-phase, and
`joulestep phase`) do the same: on any error the marker is not recorded,
the program goes on, and a `with joulestep.phase(...)` block runs its body.
A stale JOULESTEP_SOCKET is likely: a job that resubmits itself exports its
environment to the next job.
"""
from __future__ import annotations

import errno
import importlib
import os
import socket
import subprocess
import sys
import threading

import pytest


@pytest.fixture
def jsp(repo, monkeypatch):
    sys.path.insert(0, str(repo / "cli" / "src"))
    monkeypatch.delenv("JOULESTEP_SYNC", raising=False)

    def load(sock):
        monkeypatch.setenv("JOULESTEP_SOCKET", str(sock))
        return importlib.reload(importlib.import_module("joulestep.phase"))
    return load


def refusing_server(path, got):
    """A plugin stand-in that answers every synchronous marker with an error
    (as the plugin does to a marker past max_markers_per_step)."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(str(path))
    srv.listen(1)
    srv.settimeout(10)

    def run():
        conn, _ = srv.accept()
        conn.settimeout(10)
        try:
            while True:
                m = conn.recv(512).decode()
                if not m:
                    break
                got.append(m)
                ident = [f for f in m.split() if f.startswith("id=")]
                if ident:
                    conn.send(f"JS1 ERR 7 {ident[0]} too many markers".encode())
        except OSError:
            pass
        conn.close()
        srv.close()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def stale(tmp_path, kind):
    p = tmp_path / "stale.sock"
    if kind == "file":
        p.write_text("not a socket\n")
    elif kind == "dead-socket":      # what a killed step leaves: nobody listens
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.bind(str(p))
        s.close()
    elif kind == "no-dir":
        p = tmp_path / "gone" / "stale.sock"
    return p


@pytest.mark.parametrize("kind", ["missing", "no-dir", "file", "dead-socket"])
def test_python_with_block_runs_its_body_on_a_stale_socket(jsp, tmp_path, kind):
    m = jsp(stale(tmp_path, kind))
    import joulestep
    ran = []
    with joulestep.phase("write") as p:
        ran.append(1)
        p["nbytes"] = 10
    assert ran == [1]
    for sync in (False, True):
        rc = m.begin("write", sync=sync)
        assert rc < 0 and rc in (-errno.ENOENT, -errno.ECONNREFUSED, -errno.ENOTSOCK,
                                 -errno.ENOTDIR), rc
        assert m.end(sync=sync) < 0
        assert m.ping() < 0


def test_python_refused_marker_returns_the_code_and_the_body_runs(jsp, tmp_path):
    path = tmp_path / "srv.sock"
    got = []
    t = refusing_server(path, got)
    m = jsp(path)
    assert m.begin("write", sync=True) == -7
    ran = []
    with m.phase("checkpoint", sync=True):
        ran.append(1)
    assert ran == [1]
    m._conn.close()
    t.join(10)
    # the refused begin of the block is not followed by an end (as the C
    # library's rule: a begin that returned nonzero was not recorded)
    assert [x.split()[1] for x in got] == ["BEGIN", "BEGIN"], got


def test_python_bad_arguments_do_nothing(jsp, tmp_path):
    m = jsp(tmp_path / "none.sock")
    assert m.begin("WRITE NOW") == -errno.EINVAL
    assert m.begin("write", "bad label!") == -errno.EINVAL
    assert m.end(nbytes=-1) == -errno.EINVAL
    with m.phase("WRITE NOW") as p:
        p["nbytes"] = 1


@pytest.mark.parametrize("kind", ["missing", "file", "dead-socket"])
def test_shell_marker_exits_0_on_a_stale_socket(build_dir, tmp_path, kind):
    env = dict(os.environ, JOULESTEP_SOCKET=str(stale(tmp_path, kind)))
    exe = str(build_dir / "bin" / "joulestep-phase")
    for argv in (["begin", "write"], ["end", "--bytes", "5"], ["ping"],
                 ["begin", "WRITE NOW"]):
        res = subprocess.run([exe, *argv], env=env, capture_output=True, text=True,
                             timeout=30)
        assert res.returncode == 0, (argv, res.stderr)
        assert res.stderr.startswith("joulestep-phase: "), res.stderr  # and says why
    # a wrong command line is the script's own bug, found outside a step too
    res = subprocess.run([exe, "begin"], env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 2


def test_cli_phase_command_exits_0_on_a_stale_socket(repo, tmp_path):
    env = dict(os.environ, JOULESTEP_SOCKET=str(tmp_path / "stale.sock"))
    exe = str(repo / ".venv" / "bin" / "joulestep")
    for argv in (["phase", "begin", "write"], ["phase", "end", "--bytes", "5"],
                 ["phase", "begin", "WRITE NOW"]):
        res = subprocess.run([exe, *argv], env=env, capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 0, (argv, res.stdout, res.stderr)
        assert "joulestep phase" in res.stderr, res.stderr
