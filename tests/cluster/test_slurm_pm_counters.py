"""Slurm's own acct_gather_energy/pm_counters on a fake HPE/Cray node (issue 24).

The test cluster's slurmd runs in a mount namespace of its own whose /sys is
the host's plus a fake cray/pm_counters (tests/fakehw --pm-counters, moved
only by the job's own `advance` lines): Slurm reads it as on a real EX node,
reports the job's ConsumedEnergy to slurmdbd, and sacct shows it. The truth
is the sum of the simulator's replies; the plugin's own node figure
(node_energy=pm_counters, step.energy_node_uj) reads the same meter.
"""
from __future__ import annotations

import json
import re
import shutil

import pytest

import procs
from harness import Cluster, make_workdir
from nodeenv import NodeEnv

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def pmenv(request, build_dir, cluster_users):
    workdir = make_workdir("pytest-pm-")
    c = Cluster(workdir, accounting=True)
    env = NodeEnv(c, build_dir, "jspm", 2_400_000, 1_200_000, pm_counters=True)
    c.pm_counters = env.hw / "cray" / "pm_counters"
    env.configure(cluster="jstest", node_energy="pm_counters")
    failed = request.session.testsfailed
    try:
        c.start()
        c.dbd.add_account("jspm", users=["jsuser"])
        procs.DEFAULT_CLUSTER = c
        yield env
    finally:
        procs.DEFAULT_CLUSTER = None
        env.close()
        c.stop()
        if request.session.testsfailed == failed:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"\n[pm_counters cluster] logs kept in {workdir}/log")


def test_slurm_consumed_energy_from_fake_pm_counters(pmenv):
    env = pmenv
    # Slurm polls the node every second (AcctGatherNodeFreq=1): the job waits
    # before its first and after its last advance, so both ends are seen
    job, out = env.run_job(f"#!/bin/sh\n#SBATCH -n1\nsleep 3\n{env.adv('a', 4)}\n"
                           f"{env.adv('a', 3)}\nsleep 3\n", args=["--account=jspm"])
    truth_uj = sum(json.loads(m)["zones"]["pm:energy"]["energy_uj"]
                   for m in re.findall(r"^ADV \S+ (\{.*\})$", out, re.M))
    assert truth_uj > 0
    rec = env.wait_records(job, ["batch"])["batch"]["step"]
    assert rec["node_meter_sources"] == "pm_counters:energy"
    assert abs(rec["energy_node_uj"] - truth_uj) <= 1_000_000
    got = None
    for _ in range(100):
        got = env.c.run(["sacct", "-n", "-P", "-j", f"{job}.batch", "-o",
                         "State,ConsumedEnergyRaw"], timeout=60, check=True).stdout.split()
        if got and got[0].startswith("COMPLETED|") and got[0].split("|")[1]:
            break
        __import__("time").sleep(0.3)
    state, consumed = got[0].split("|")
    assert state == "COMPLETED", got
    # Slurm's figure, in whole joules, from the same fake meter
    assert abs(int(consumed) * 1_000_000 - truth_uj) <= 2_000_000, (consumed, truth_uj)
