"""libjoulestep-client is fork-safe: a child forked while another thread of
the parent holds the client's lock (waiting for a sync reply from a server
that never answers) can still send markers; before the fix the child's first
call blocked forever on the inherited, locked mutex."""
import os
import signal
import socket
import subprocess
import sys

PROG = r"""
import ctypes, os, sys, threading, time
lib = ctypes.CDLL(sys.argv[1])
t = threading.Thread(target=lib.js_phase_ping, daemon=True)  # holds the lock ~5 s
t.start()
time.sleep(0.3)                     # the ping is sent and waits for its reply
pid = os.fork()
if pid == 0:
    lib.js_phase_set_sync(0)        # takes the lock
    os._exit(0 if lib.js_phase_begin(b"write", b"child") == 0 else 3)
_, st = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(st))
"""


def test_child_forked_during_a_sync_marker_does_not_hang(build_dir, tmp_path):
    path = str(tmp_path / "mute.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(path)
    srv.listen(8)
    env = dict(os.environ, JOULESTEP_SOCKET=path)
    env.pop("JOULESTEP_SYNC", None)
    proc = subprocess.Popen([sys.executable, "-c", PROG,
                             str(build_dir / "lib" / "libjoulestep-client.so")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    conns = []
    try:
        srv.settimeout(60)
        conns.append(srv.accept()[0])   # parent's connection: its PING is never answered
        conns.append(srv.accept()[0])   # the child's connection
        conns[1].settimeout(60)
        assert conns[1].recv(512).decode().startswith("JS1 BEGIN write child")
        # hang guard only (the parent's ping itself times out after 5 s)
        out, err = proc.communicate(timeout=120)
    finally:
        try:  # a hung child outlives its parent: end the whole group
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        for c in conns:
            c.close()
        srv.close()
    assert proc.returncode == 0, err
    assert out.strip() == "child 0", out + err
