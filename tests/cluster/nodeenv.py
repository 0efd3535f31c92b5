"""One fake node (tests/fakehw, manual mode) and the plugin's directories for the session
cluster: what test_plugin.py's and test_plugin_markers.py's environments share.

The tree has 2 packages and the cluster's CPUs; nothing moves its counters but the jobs'
own `fakehw.py ctl SOCK advance` lines (adv()), so a phase's truth is the sum of the
replies printed inside it. Subclasses choose the plugstack arguments (args()).
"""
from __future__ import annotations

import os
import pathlib

import fakehw
import spool

REPO = pathlib.Path(__file__).resolve().parents[2]
USER = "jsuser"


class NodeEnv:
    job_timeout = 90
    record_timeout = 20

    def __init__(self, cluster, build: pathlib.Path, name: str, fmax_khz: int, fmin_khz: int,
                 **hw_opts):
        self.c = cluster
        self.root = cluster.workdir / name  # own directory per module
        self.root.mkdir(mode=0o755, exist_ok=True)
        os.chmod(self.root, 0o755)
        self.hw = self.root / "hw"
        fakehw.create(str(self.hw), packages=2, cpus_per_package=max(1, cluster.cpus // 2),
                      fmax_khz=fmax_khz, fmin_khz=fmin_khz, **hw_opts)
        self.ncpus = 2 * max(1, cluster.cpus // 2)
        self.ctl = self.root / "fakehw.ctl"
        self.server = fakehw.serve_background(str(self.hw), manual=True, ctl=str(self.ctl))
        self.spool = self.root / "spool"
        self.state = self.root / "state"
        self.sock = self.root / "sock"
        self.fakehw_py = cluster.public_path(REPO / "tests" / "fakehw" / "fakehw.py")
        self.build = cluster.public_path(build)
        self.bin = self.build / "bin"
        self.so = build / "spank" / "joulestep.so"

    def args(self, **extra) -> dict:
        a = {"spool": self.spool, "state": self.state, "sysfs": self.hw, "socket_dir": self.sock,
             "backend": "sysfs", "sample_ms": 200, "procfs": self.hw / "proc"}
        a.update(extra)
        return a

    def configure(self, **extra):
        self.c.write_plugstack(self.so, self.args(**extra))

    def snapshot_clocks(self):
        """The clocks every test must find again afterwards (assert_restored)."""
        self.orig = [self.cpufreq(i) for i in range(self.ncpus)]

    def close(self):
        self.server.terminate()
        self.server.wait(10)

    # --------------------------------------------------------------- job lines
    def adv(self, tag: str, seconds: float = 1.0) -> str:
        """Shell line: advance the fake hardware and print the reply tagged."""
        return (f'echo "ADV {tag} $(python3 {self.fakehw_py} ctl {self.ctl} advance {seconds} '
                f'--util 1 | tr -d "\\n")"')

    def phase(self, *args) -> str:
        return f"{self.bin}/joulestep-phase " + " ".join(str(a) for a in args)

    def cat_freq(self, tag: str) -> str:
        """Shell line printing every CPU's governor and clock cap."""
        return "; ".join(
            f'echo "FREQ {tag} {i} $(cat {self.hw}/devices/system/cpu/cpu{i}/cpufreq/scaling_governor) '
            f'$(cat {self.hw}/devices/system/cpu/cpu{i}/cpufreq/scaling_max_freq)"'
            for i in range(self.ncpus))

    # --------------------------------------------------------------- checks
    def cpufreq(self, cpu: int) -> dict:
        return fakehw.read_cpufreq(str(self.hw), cpu)

    def assert_restored(self):
        for i in range(self.ncpus):
            now = self.cpufreq(i)
            # (scaling_setspeed only means something under the userspace governor; the
            # kernel shows <unsupported> otherwise, the fake tree keeps the last value)
            for k in ("scaling_governor", "scaling_max_freq", "scaling_min_freq", "effective_khz"):
                assert now[k] == self.orig[i][k], (i, k, now[k], self.orig[i][k])

    def records(self, job) -> dict:
        return spool.records(self.spool, job)

    def wait_records(self, job, steps, timeout=None):
        return spool.wait_records(self.spool, job, steps, self.c.logs,
                                  timeout or self.record_timeout)

    def run_job(self, script: str, args=(), user=USER, timeout=None, state="COMPLETED"):
        return self.c.run_job(script, user, args, timeout or self.job_timeout, state)
