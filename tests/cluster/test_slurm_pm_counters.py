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
import pathlib
import re
import shutil
import sqlite3
import subprocess
import time

import pytest

import procs
from harness import Cluster, make_workdir
from nodeenv import NodeEnv, USER

pytestmark = pytest.mark.cluster
REPO = pathlib.Path(__file__).resolve().parents[2]


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


def _node_uj(out: str, tag: str) -> int:
    """The fake node meter's energy (pm_counters `energy`) over the job's
    advances tagged ``tag`` (the simulator's own replies)."""
    return sum(json.loads(m)["zones"]["pm:energy"]["energy_uj"]
               for m in re.findall(rf"^ADV {re.escape(tag)} (\{{.*\}})$", out, re.M))


def _cli(env, db, *args):
    res = subprocess.run([str(REPO / ".venv" / "bin" / "joulestep"), "--db", str(db),
                          *map(str, args)], capture_output=True, text=True,
                         env=env.c.env, timeout=300, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def test_ingest_stores_slurm_node_energy_beside_joulestep(pmenv, tmp_path):
    """Slurm's ConsumedEnergy at ingest (issue 24, part 3): `ingest` stores
    what slurmdbd has for the job and each step; `job` shows it beside
    joulestep's CPU + DRAM and never adds it.  Truth: the fake meter's model
    (pm_counters `energy` of each advance); step 0 runs inside the batch
    script, so Slurm's batch step holds both advances and step 0 one."""
    env = pmenv
    inner = f"sleep 2; {env.adv('s', 3)}; sleep 2"
    assert "'" not in inner
    go = env.c.workdir / f"go-{tmp_path.name}"     # the job ends once this exists
    res, job = env.c.sbatch(f"#!/bin/sh\n#SBATCH -n1\nsleep 2\n{env.adv('b', 4)}\n"
                            f"srun -n1 sh -c '{inner}'\n"
                            f"while [ ! -e {go} ]; do sleep 0.2; done\nsleep 2\n",
                            user=USER, args=["--account=jspm"])
    assert res.returncode == 0 and job, res.stderr
    # ingest while the job runs (its srun step has ended): what sacct has now
    # is not final, so the next ingest looks the job up again
    env.wait_records(job, ["0"], timeout=180)
    db = tmp_path / "js.db"
    _cli(env, db, "ingest", env.spool, "--sacct", "on")
    con = sqlite3.connect(db)
    early = con.execute("SELECT slurm_state FROM jobs WHERE job_id = ?", (job,)).fetchone()
    assert early[0] == "RUNNING", early
    con.close()
    go.touch()
    assert env.c.wait_job(job, 180) == "COMPLETED"
    out = env.c.job_output(job)
    truth_step = _node_uj(out, "s")
    truth_batch = truth_step + _node_uj(out, "b")
    assert truth_step > 0 and truth_batch > truth_step
    recs = env.wait_records(job, ["batch", "0"], timeout=120)
    rapl_uj = recs["batch"]["step"]["energy_total_uj"]
    for _ in range(100):   # slurmdbd takes the job's end asynchronously
        got = env.c.run(["sacct", "-X", "-n", "-P", "-j", str(job), "-o", "State"],
                        timeout=60, check=True).stdout.split()
        if got == ["COMPLETED"]:
            break
        time.sleep(0.3)
    _cli(env, db, "ingest", env.spool, "--sacct", "on")
    con = sqlite3.connect(db)
    jrow = con.execute("SELECT job_pk, slurm_state, slurm_exit_code, slurm_nnodes, "
                       "slurm_elapsed_ns / 1000000000 FROM jobs WHERE job_id = ?",
                       (job,)).fetchone()
    assert jrow[1:4] == ("COMPLETED", "0:0", 1), jrow
    assert jrow[4] >= 8     # the script sleeps 8 s and more (advances take no real time)
    steps = dict(con.execute("SELECT step_id, energy_uj / 1000000 FROM slurm_steps WHERE "
                             "job_pk = ?", (jrow[0],)))
    # Slurm's figure is whole joules from the same meter, read each second
    assert abs(steps["batch"] * 10**6 - truth_batch) <= 2_000_000, (steps, truth_batch)
    assert abs(steps["0"] * 10**6 - truth_step) <= 2_000_000, (steps, truth_step)

    summary = json.loads(_cli(env, db, "--format", "json", "job", job))
    sl = summary["slurm"]
    assert (sl["state"], sl["exit_code"], sl["nnodes"]) == ("COMPLETED", "0:0", 1)
    # the job's node figure counts the batch step once (step 0 is inside it)
    assert sl["energy_node_j"] == steps["batch"]
    # joulestep's total is its own RAPL CPU + DRAM, the node meter not added
    assert summary["totals"]["energy_total_j"] == pytest.approx(rapl_uj / 1e6)
    assert rapl_uj < truth_batch
    text = _cli(env, db, "job", job)
    assert "State COMPLETED, ExitCode 0:0" in text and "NNodes 1" in text, text
    assert re.search(rf"Node meter \(Slurm acct_gather_energy, whole nodes\): "
                     rf"{steps['batch']}(\.0+)? J", text), text
