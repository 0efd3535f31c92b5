#!/usr/bin/env python3
"""Cost per intercepted call of the --energy-hooks libraries, against the bare call
(figures, not tests; `make bench` runs it, bench/run.py):

    python3 bench/hooks/bench_hooks.py [--calls 20000] [--rounds 3]

For each workload, the same binary (build/tests/hooks/bench_hooks*) runs
  bare                      no LD_PRELOAD
  hooked, outside a step    LD_PRELOAD, no JOULESTEP_SOCKET (markers are no-ops)
  hooked, in a step         LD_PRELOAD and JOULESTEP_SOCKET: every call sends a BEGIN and
                            an END (asynchronous) to a receiver process reading the socket,
                            standing in for the plugin's thread (the plugin's own handling
                            of a marker is measured in the "SPANK plugin" section)
alternating, --rounds times, --calls calls each; median and p99 of the pooled calls.
Workloads: MPI_File_write of one int through the MPI test double (the call itself costs
little, so the difference is the hook's), the same through Open MPI itself (a singleton,
to a file in a private temporary directory), and a VELOC checkpoint (begin + mem + end)
through the VELOC test double with no I/O. The receiver's count shows whether every
marker arrived (a marker the receiver did not keep up with is dropped, -EAGAIN, and
costs less than one that arrived). The receiver answers the one PING each process
sends before its first marker, as the plugin does; it is not counted."""
from __future__ import annotations

import argparse
import os
import pathlib
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = REPO / "build"
HOOKS = BUILD / "lib" / "joulestep"
BIN = BUILD / "tests" / "hooks"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def line(name, xs, unit="us", scale=1e3):
    return (f"{name:<34} median {statistics.median(xs) / scale:10.3f} {unit}   "
            f"p99 {pct(xs, 99) / scale:10.3f} {unit}   (n={len(xs)})")


class Receiver:
    """Accepts connections on a SEQPACKET socket and counts the messages."""

    def __init__(self, path: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.bind(path)
        self.sock.listen(16)
        self.count = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(c,), daemon=True).start()

    def _read(self, c):
        with c:
            while True:
                m = c.recv(512)
                if not m:
                    return
                if m.startswith(b"JS1 PING"):  # the hooks' first marker of a process
                    ident = re.search(rb"id=(\d+)", m)
                    c.send(b"JS1 OK id=%s PONG job=0 step=0" % (ident.group(1) if ident else b"0"))
                    continue
                with self.lock:
                    self.count += 1

    def take(self) -> int:
        """Messages since the last take, once the reader threads are done with them."""
        last = -1
        while True:
            time.sleep(0.05)
            with self.lock:
                if self.count == last:
                    break
                last = self.count
        with self.lock:
            n, self.count = self.count, 0
        return n


def run(argv, env) -> list[int]:
    res = subprocess.run([str(a) for a in argv], env=env, capture_output=True, text=True, check=True)
    return [int(x) for x in res.stdout.split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="js-hooks-bench-"))
    sock = str(tmp / "r.sock")
    rcv = Receiver(sock)
    cfg = tmp / "veloc.cfg"
    (tmp / "s").mkdir()
    (tmp / "p").mkdir()
    cfg.write_text(f"scratch = {tmp / 's'}\npersistent = {tmp / 'p'}\nmode = sync\ndiscard = 1\n")
    base = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "JOULESTEP_SOCKET")}
    # Open MPI refuses to run as root without these (the bench runs as root)
    base.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    work = [
        ("MPI_File_write (MPI test double)", [BIN / "bench_hooks", "mpiio"], tmp / "f.dat",
         HOOKS / "libjoulestep-mpiio.so", 2),
        ("MPI_File_write (Open MPI, 4 B)", [BIN / "bench_hooks_ompi", "mpiio"], tmp / "o.dat",
         HOOKS / "libjoulestep-mpiio.so", 2),
        ("VELOC begin+mem+end (test double)", [BIN / "bench_hooks", "veloc"], cfg,
         HOOKS / "libjoulestep-veloc.so", 2),  # sync mode: a checkpoint, no flush
    ]
    print(f"cost per intercepted call ({a.rounds} rounds x {a.calls} calls per variant, "
          "20 us apart; receiver = a process reading the socket)")
    try:
        for title, argv, arg, lib, markers in work:
            if not argv[0].exists() or not lib.exists():
                print(f"{title}: {argv[0].name} or {lib.name} not built (make all)")
                continue
            got = {"bare": [], "out": [], "in": []}
            received = 0
            for _ in range(a.rounds):
                got["bare"] += run([*argv, a.calls, arg], base)
                got["out"] += run([*argv, a.calls, arg], {**base, "LD_PRELOAD": str(lib)})
                rcv.take()
                got["in"] += run([*argv, a.calls, arg],
                                 {**base, "LD_PRELOAD": str(lib), "JOULESTEP_SOCKET": sock})
                received += rcv.take()
            bare = statistics.median(got["bare"])
            print(title + ":")
            print(line("  bare call", got["bare"]))
            print(line("  hooked, outside a step", got["out"]))
            print(line("  hooked, in a step", got["in"]))
            print(f"{'  added per call (median)':<34} outside a step "
                  f"{(statistics.median(got['out']) - bare) / 1e3:+.3f} us, in a step "
                  f"{(statistics.median(got['in']) - bare) / 1e3:+.3f} us "
                  f"({statistics.median(got['in']) / bare:.1f}x); markers received "
                  f"{received} of {markers * a.calls * a.rounds}")
    finally:
        rcv.sock.close()
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
