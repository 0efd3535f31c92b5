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


def _job_with_fault_inside(env, fault) -> tuple[str, str]:
    """A one-step job that advances the hardware (tag a), waits while fault() runs,
    then advances again (tag b): fault() falls inside the step, between two
    readings. Returns (job, output)."""
    flag = env.root / "fault-done"
    flag.unlink(missing_ok=True)
    before = len(fakehw.truth_log(str(env.hw)))
    script = (f"#!/bin/sh\n#SBATCH -n1\n{env.adv('a', 1)}\n"
              f"while [ ! -e {flag} ]; do sleep 0.1; done\n{env.adv('b', 1)}\n")
    res = {}
    th = threading.Thread(target=lambda: res.update(r=env.run_job(script)))
    th.start()
    deadline = time.monotonic() + env.job_timeout
    while len(fakehw.truth_log(str(env.hw))) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    fault()
    flag.touch()
    th.join(env.job_timeout + 30)
    return res["r"]


def test_pm_counters_reset_inside_a_step(hpe):
    job, out = _job_with_fault_inside(hpe, lambda: fakehw.pm_reset(str(hpe.hw)))
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


# ------------------------------------------------------------ amd_energy hwmon
@pytest.fixture(scope="module")
def amdhw(cluster, build_dir):
    env = NodeEnv(cluster, build_dir, "jsamdhw", FMAX, FMIN, vendor="amd", amd_energy=True)
    env.configure(cluster="jstest", backend="amd_energy")
    try:
        yield env
    finally:
        env.close()
        cluster.write_plugstack(None)


def test_amd_energy_hwmon_step_record(amdhw):
    """backend=amd_energy on the live cluster: the step's CPU energy is the socket
    counters' (the per-core counters inside them never added), DRAM not measured."""
    job, out = amdhw.run_job(f"#!/bin/sh\n#SBATCH -n1\n{amdhw.adv('a', 2)}\n{amdhw.adv('a', 1)}\n")
    rec = amdhw.wait_records(job, ["batch"])["batch"]
    st = rec["step"]
    replies = [json.loads(m.group(1)) for m in re.finditer(r"^ADV a (\{.*\})$", out, re.M)]
    assert len(replies) == 2, out
    sockets = {z: sum(r["zones"][z]["energy_uj"] for r in replies)
               for z in replies[0]["zones"] if replies[0]["zones"][z]["kind"] == "amd_socket"}
    assert sorted(z["id"] for z in rec["zones"]) == sorted(sockets)
    truth = sum(sockets.values())
    assert truth > 0
    assert abs(st["energy_cpu_uj"] - truth) <= 0.005 * truth
    assert st["energy_dram_uj"] is None and st["dram_not_measured"]
    assert st["energy_total_uj"] == st["energy_cpu_uj"]


def test_amd_energy_counter_reset_inside_a_step(amdhw):
    """A socket counter that goes back inside a step (amd_energy accumulates to 64
    bits, so it is a reset, never a wrap): that socket's energy is null and
    uncertain, the other socket's stays exact, and the step has no CPU total."""
    def reset():
        fakehw.set_counter(str(amdhw.hw), "amd_energy:0", 1000)
        time.sleep(1.0)   # sample_ms=200: the step's sampler reads the low value

    job, out = _job_with_fault_inside(amdhw, reset)
    rec = amdhw.wait_records(job, ["batch"])["batch"]
    zones = {z["id"]: z for z in rec["zones"]}
    replies = [json.loads(m.group(1)) for m in re.finditer(r"^ADV \S+ (\{.*\})$", out, re.M)]
    assert len(replies) == 2, out
    assert zones["amd_energy:0"]["energy_uj"] is None and zones["amd_energy:0"]["uncertain"]
    other = sum(r["zones"]["amd_energy:1"]["energy_uj"] for r in replies)
    assert zones["amd_energy:1"]["energy_uj"] == other
    assert rec["step"]["energy_cpu_uj"] is None and rec["step"]["energy_total_uj"] is None
