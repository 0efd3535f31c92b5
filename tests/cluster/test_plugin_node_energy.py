"""The plugin on an HPE/Cray EX AMD node, on the live cluster (issue 24).

The fake node (tests/fakehw --vendor amd --pm-counters) has AMD powercap
zones (package energy only) and cray/pm_counters, moved by the same model.
Each step's record must say DRAM is not measured (null with the reason,
never 0), and give the node's pm_counters energy (node_energy=) equal to the
simulator's truth to the joule, from `energy` alone (never with its parts);
an interval spanning a pm_counters reset (a new generation) has no node
energy, and says why, while RAPL's figure stays right.
"""
from __future__ import annotations

import json
import re
import threading
import time

import pytest

import fakehw
from nodeenv import NodeEnv

pytestmark = pytest.mark.cluster

FMAX, FMIN = 4000000, 800000


@pytest.fixture(scope="module")
def hpe(cluster, build_dir):
    env = NodeEnv(cluster, build_dir, "jsnode", FMAX, FMIN, vendor="amd", pm_counters=True)
    env.configure(cluster="jstest", node_energy="pm_counters")
    try:
        yield env
    finally:
        env.close()
        cluster.write_plugstack(None)


def _adv(out: str) -> dict:
    """tag -> summed advance replies: cpu, dram, pm energy (uJ)."""
    tot = {}
    for m in re.finditer(r"^ADV (\S+) (\{.*\})$", out, re.M):
        r = json.loads(m.group(2))
        t = tot.setdefault(m.group(1), [0, 0, 0])
        t[0] += r["energy_cpu_uj"]
        t[1] += r["energy_dram_uj"]
        t[2] += r["zones"]["pm:energy"]["energy_uj"]
    return tot


def test_amd_pm_counters_step_record(hpe):
    job, out = hpe.run_job(f"#!/bin/sh\n#SBATCH -n1\n{hpe.adv('a', 2)}\n{hpe.adv('a', 1.5)}\n")
    rec = hpe.wait_records(job, ["batch"])["batch"]
    st, truth = rec["step"], _adv(out)["a"]
    assert truth[1] == 0                                  # no dram zone on the node
    assert st["energy_dram_uj"] is None and "no dram zone" in st["dram_not_measured"]
    assert abs(st["energy_cpu_uj"] - truth[0]) <= 0.005 * truth[0]
    assert st["energy_total_uj"] == st["energy_cpu_uj"]
    assert all(z["kind"] == "package" for z in rec["zones"])
    # pm_counters: whole joules; the node is `energy` alone
    assert st["node_meter_sources"] == "pm_counters:energy"
    assert st["node_meter_integrated"] is False
    assert abs(st["energy_node_uj"] - truth[2]) <= 1_000_000
    assert st["energy_node_uj"] > st["energy_cpu_uj"]


def test_pm_counters_reset_inside_a_step(hpe):
    flag = hpe.root / "reset-done"
    flag.unlink(missing_ok=True)
    before = len(fakehw.truth_log(str(hpe.hw)))
    script = (f"#!/bin/sh\n#SBATCH -n1\n{hpe.adv('a', 1)}\n"
              f"while [ ! -e {flag} ]; do sleep 0.1; done\n{hpe.adv('b', 1)}\n")
    res = {}
    th = threading.Thread(target=lambda: res.update(r=hpe.run_job(script)))
    th.start()
    deadline = time.monotonic() + hpe.job_timeout
    while len(fakehw.truth_log(str(hpe.hw))) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    fakehw.pm_reset(str(hpe.hw))
    flag.touch()
    th.join(hpe.job_timeout + 30)
    job, out = res["r"]
    st = hpe.wait_records(job, ["batch"])["batch"]["step"]
    assert st["energy_node_uj"] is None
    assert "generation changed" in st["node_meter_sources"]
    truth = _adv(out)
    cpu = truth["a"][0] + truth["b"][0]
    assert abs(st["energy_cpu_uj"] - cpu) <= 0.005 * cpu     # RAPL is not affected


@pytest.fixture(scope="module")
def grace(cluster, build_dir):
    env = NodeEnv(cluster, build_dir, "jsgrace", FMAX, FMIN, grace=True)
    env.configure(cluster="jstest", node_energy="hwmon")
    try:
        yield env
    finally:
        env.close()
        cluster.write_plugstack(None)


def test_grace_module_power_integrated_per_step(grace):
    """Grace: the power is constant between advances (one before the job):
    the step's node energy is the Module sensors' power times its duration;
    never the Module plus the CPU and SysIO sensors inside it."""
    z = fakehw.advance(str(grace.hw), 1, util=1.0)["zones"]
    module_w = sum(v["power_w"] for k, v in z.items() if k.startswith("grace:module:"))
    inner_w = sum(v["power_w"] for k, v in z.items()
                  if k.startswith(("grace:cpu:", "grace:sysio:")))
    job, _ = grace.run_job("#!/bin/sh\n#SBATCH -n1\nsleep 2\n")
    st = grace.wait_records(job, ["batch"])["batch"]["step"]
    assert st["node_meter_integrated"] is True
    assert st["node_meter_sources"] == \
        "hwmon:Module Power Socket 0+hwmon:Module Power Socket 1"
    want = module_w * st["duration_ns"] / 1e3          # W x ns -> uJ
    assert abs(st["energy_node_uj"] - want) <= 0.02 * want
    assert st["energy_node_uj"] < (module_w + inner_w) * st["duration_ns"] / 1e3 * 0.9
