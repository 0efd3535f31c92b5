"""A private Prometheus for tests: its own config, data directory and port,
torn down after.  Also runs `joulestep exporter` on a free port.

    with exporter_proc(db, conf) as (port, proc), \\
            Prometheus(tmp, [f"127.0.0.1:{port}"]) as prom:
        prom.wait_for("up == 1")
        prom.query('sum(joulestep_energy_joules_total)')
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "cluster"))
from harness import _free_ports  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
VENV_BIN = pathlib.Path(sys.executable).parent


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def exporter_proc(db, config, *args, timeout=120):
    """`joulestep exporter --port 0` on the database: yields (port, proc)
    once it listens (it prints its address on stderr when the first read
    of the store is done)."""
    exe = VENV_BIN / "joulestep"
    cmd = [str(exe) if exe.exists() else "joulestep", "--db", str(db),
           "--config", str(config), "exporter", "--port", "0", *map(str, args)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + timeout
        lines = []
        while True:
            line = proc.stderr.readline()
            lines.append(line)
            m = re.search(r"listening on http://\S+:(\d+)/metrics", line)
            if m:
                break
            if not line or time.monotonic() > deadline:
                raise RuntimeError("exporter did not start: " + "".join(lines))
        yield int(m.group(1)), proc
    finally:
        _stop(proc)
        proc.stderr.close()


class Prometheus:
    """prometheus scraping `targets` every second, on a private port with
    its data in `workdir`; a context manager."""

    def __init__(self, workdir, targets, interval="1s"):
        self.dir = pathlib.Path(workdir)
        self.targets, self.interval = list(targets), interval
        self.proc = None
        self.port = None

    def __enter__(self):
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "prometheus.yml"
        cfg.write_text(json.dumps({   # YAML is a superset of JSON
            "global": {"scrape_interval": self.interval,
                       "evaluation_interval": self.interval},
            "scrape_configs": [{"job_name": "joulestep",
                                "static_configs": [{"targets": self.targets}]}]}))
        for _ in range(4):            # another process may take the port first
            self.port = _free_ports(1)[0]
            log = open(self.dir / "prometheus.log", "w")
            self.proc = subprocess.Popen(
                [PROMETHEUS, f"--config.file={cfg}",
                 f"--storage.tsdb.path={self.dir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
            log.close()
            if self._ready():
                return self
            _stop(self.proc)
            if "address already in use" not in self.log():
                break
        raise RuntimeError("prometheus did not start:\n" + self.log()[-3000:])

    def __exit__(self, *exc):
        _stop(self.proc)

    def log(self) -> str:
        return (self.dir / "prometheus.log").read_text(errors="replace")

    def _ready(self, timeout=120) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(
                        f"http://127.0.0.1:{self.port}/-/ready", timeout=5) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.2)
        return False

    def query(self, promql: str) -> list:
        """Instant query through the HTTP API: the result vector."""
        url = (f"http://127.0.0.1:{self.port}/api/v1/query?"
               + urllib.parse.urlencode({"query": promql}))
        with urllib.request.urlopen(url, timeout=30) as r:
            doc = json.load(r)
        assert doc["status"] == "success", doc
        return doc["data"]["result"]

    def wait_for(self, promql: str, ok=lambda res: bool(res), timeout=120):
        """Query until ok(result) (e.g. until a first scrape landed)."""
        deadline = time.monotonic() + timeout
        while True:
            res = self.query(promql)
            if ok(res):
                return res
            if time.monotonic() > deadline:
                raise AssertionError(f"{promql}: still {res} after {timeout} s;"
                                     f" prometheus log:\n{self.log()[-2000:]}")
            time.sleep(0.5)


def promtool_check(text: bytes) -> subprocess.CompletedProcess:
    """`promtool check metrics` on an exposition (Prometheus text format)."""
    return subprocess.run([PROMTOOL, "check", "metrics"], input=text,
                          capture_output=True, timeout=60,
                          env=dict(os.environ, LANG="C"))
