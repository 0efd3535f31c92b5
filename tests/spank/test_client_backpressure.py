"""libjoulestep-client under a plugin that falls behind (docs/phase-protocol.md, "Limits").

The plugin's thread reads each connection's queue (about 270 markers); under load (10,000
markers per second from 8 ranks on a busy node, tests/cluster/test_load.py) it can fall
behind for a moment. An asynchronous marker then waits for room, a bounded time, instead of
being dropped at once; and when the plugin has stalled for longer than that bound, the
markers the library cannot send keep the plugin's view of this rank's nesting right: the
END of a BEGIN it dropped is not sent, and an END it could not send is sent, in order,
before the next marker. The server here is a plain socket the test reads itself: the
truth is what it received.
"""
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

# Sends PAIRS async BEGIN/END pairs as fast as it can; prints every call's rc.
FAST = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
n = int(sys.argv[2])
rcs = []
for k in range(n):
    rcs.append(lib.js_phase_begin(b"write", None))
    rcs.append(lib.js_phase_end(ctypes.c_longlong(k)))
print(" ".join(map(str, rcs)), flush=True)
"""

# Sends pairs until a call fails (the plugin is stalled), says so, waits for "go" on
# stdin (the plugin resumes), then sends AFTER more pairs.
STALL = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
after, outer = int(sys.argv[2]), int(sys.argv[3])
rcs, k, failed = [], 0, None
if outer:  # one message more before the pairs: the queue fills on the other call
    rcs.append(lib.js_phase_begin(b"checkpoint", None))
while k < 20000:
    rc = lib.js_phase_begin(b"write", None)
    rcs.append(rc)
    if rc != 0:
        failed = "begin"
        break
    rc = lib.js_phase_end(ctypes.c_longlong(k))
    rcs.append(rc)
    k += 1
    if rc != 0:
        failed = "end"
        break
print("STALLED", failed, flush=True)
sys.stdin.readline()
for j in range(after):  # (an END only for a BEGIN that returned 0: the API's rule)
    rc = lib.js_phase_begin(b"write", None)
    rcs.append(rc)
    if rc == 0:
        rcs.append(lib.js_phase_end(ctypes.c_longlong(k + j)))
if outer:
    rcs.append(lib.js_phase_end(ctypes.c_longlong(10**9)))
print("DONE", " ".join(map(str, rcs)), flush=True)
"""


def _env(path):
    env = dict(os.environ, JOULESTEP_SOCKET=path)
    env.pop("JOULESTEP_SYNC", None)
    env.pop("SLURM_PROCID", None)
    return env


def _server(path):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(path)
    srv.listen(4)
    srv.settimeout(60)
    return srv


def _read_all(conn) -> list[str]:
    got = []
    conn.settimeout(60)
    while True:
        m = conn.recv(512)
        if not m:
            return got
        got.append(m.decode())


def test_async_markers_wait_for_a_plugin_that_falls_behind(build_dir, tmp_path):
    """The reader pauses 300 ms after every 1000 markers (a plugin thread that falls
    behind): every marker of 3000 pairs sent as fast as possible arrives, and every
    call returned 0. Before, the markers that found the queue full were dropped with
    -EAGAIN (about 5000 of these 6000 in one run)."""
    path = str(tmp_path / "slow.sock")
    srv = _server(path)
    n = 3000
    proc = subprocess.Popen([sys.executable, "-c", FAST, str(build_dir / "lib" / "libjoulestep-client.so"),
                             str(n)], env=_env(path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    got = []
    try:
        conn = srv.accept()[0]
        conn.settimeout(60)
        while True:
            if len(got) % 1000 == 0:
                time.sleep(0.3)
            m = conn.recv(512)
            if not m:
                break
            got.append(m.decode())
        out, err = proc.communicate(timeout=120)  # hang guard only
    finally:
        if proc.poll() is None:
            proc.kill()
        srv.close()
    rcs = [int(x) for x in out.split()]
    assert len(rcs) == 2 * n, err
    assert rcs.count(0) == 2 * n, f"{sum(r != 0 for r in rcs)} calls failed, first {next(r for r in rcs if r)}"
    assert len(got) == 2 * n
    for k in range(n):
        assert got[2 * k].startswith("JS1 BEGIN write - rank=0 "), (k, got[2 * k])
        assert got[2 * k + 1].startswith(f"JS1 END bytes={k} rank=0 "), (k, got[2 * k + 1])


@pytest.mark.parametrize("outer", [0, 1])
def test_markers_dropped_in_a_stall_keep_the_nesting(build_dir, tmp_path, outer):
    """A plugin that stops reading for longer than the client's wait bound: calls start
    to fail. Whatever the library could not send, what the plugin reads afterwards is a
    well-nested sequence that closes every phase it opened: no END without its BEGIN (it
    would close the enclosing phase, or none), no BEGIN whose END went missing (the phase,
    and a lowered clock, would stay open until step end). A BEGIN that returned nonzero
    gets no END (the client API's rule, as for a refused sync BEGIN). The calls that returned 0 are
    exactly the markers received. Run with and without an enclosing phase, so that the
    queue fills on a BEGIN in one run and on an END in the other. (Before: the first marker that found the queue full
    was dropped; when that was an END, the next BEGIN nested inside its phase, which
    stayed open.)"""
    path = str(tmp_path / "stall.sock")
    srv = _server(path)
    after = 50
    proc = subprocess.Popen([sys.executable, "-c", STALL, str(build_dir / "lib" / "libjoulestep-client.so"),
                             str(after), str(outer)], env=_env(path), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    got, reader = [], None
    try:
        conn = srv.accept()[0]         # accepted, then not read: the plugin is stalled
        line = proc.stdout.readline()  # the client noticed (a call failed)
        assert line.startswith("STALLED") and "None" not in line, line
        conn.setblocking(False)        # the plugin resumes: it reads what is queued
        while True:                    # (the client waits for "go": nothing new comes)
            try:
                got.append(conn.recv(512).decode())
            except BlockingIOError:
                break
        conn.setblocking(True)
        reader = threading.Thread(target=lambda: got.extend(_read_all(conn)), daemon=True)
        reader.start()                 # and keeps reading
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=120)
        reader.join(60)
    finally:
        if proc.poll() is None:
            proc.kill()
        srv.close()
    rcs = [int(x) for x in out.split("DONE", 1)[1].split()]
    assert rcs[-2 * after - outer:] == [0] * (2 * after + outer), rcs[-2 * after:]  # the plugin is back
    depth = 0
    for m in got:
        if m.startswith("JS1 BEGIN"):
            depth += 1
        else:
            assert m.startswith("JS1 END"), m
            depth -= 1
            assert depth >= 0, "an END without its BEGIN"
    assert depth == 0, f"{depth} phases left open"
    # every END that arrived carries the bytes of its own pair, in order
    ends = [int(m.split("bytes=")[1].split()[0]) for m in got if m.startswith("JS1 END")]
    assert ends == sorted(ends) and len(set(ends)) == len(ends), ends
    # the calls that returned 0 are exactly what arrived (an END kept while the plugin
    # was stalled included), and the stall dropped one BEGIN, told to the caller
    assert len(got) == rcs.count(0), (len(got), rcs.count(0))
    assert [r for r in rcs if r] == [-11], rcs
