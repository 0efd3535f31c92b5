"""RAPL side-channel limits (PLATYPUS; docs/security.md, "Threat model: RAPL side
channels"), on the live cluster with fake RAPL counters (manual mode):

  - a phase's energy reaches the job's user only after the phase ends: no reply of the
    phase protocol carries energy, the record is root-only, and the user's summary is
    written at step end;
  - a phase shorter than min_phase_ms is in the record in full, but the user's summary
    and srun --energy-report show it without energy;
  - what the user sees is rounded to the counter's effective resolution (the measured
    zones' maximum power over one 1 ms counter update), computed here from the fake
    tree's constraint files;
  - BEGIN markers are capped per step (max_markers_per_step) and per second
    (max_markers_per_s): counted in the record, the step is not held up.
"""
from __future__ import annotations

import json
import os
import pwd
import re
import stat

import pytest

from test_plugin_markers import OTHER, PROTO, USER, fresh, marker_env

pytestmark = pytest.mark.cluster

UPDATE_NS = 1_000_000   # RAPL counter update interval (docs/security.md)
UNIT_UJ = 61            # floor: the counter's energy unit, 2^-14 J


@pytest.fixture(scope="module")
def senv(cluster, build_dir):
    with marker_env(cluster, build_dir, name="jsside") as env:
        yield env


@pytest.fixture
def sk(senv):
    yield from fresh(senv)


def round_uj(v: int, res: int) -> int:
    q, r = divmod(v, res)
    return (q + (r >= res - r)) * res


def resolution_uj(env, rec) -> int:
    """Sum over the record's zones of max power x 1 ms, rounded up, from the tree."""
    total = 0
    for z in rec["zones"]:
        f = env.hw / "class" / "powercap" / z["id"] / "constraint_0_max_power_uw"
        total += -(-int(f.read_text()) * UPDATE_NS // 1_000_000_000)
    return max(total, UNIT_UJ)


def summary_path(env, job, step):
    return next((env.spool / "jstest" / str(job)).glob(f"{job}.{step}.*.summary"))


def as_user(env, user, *cmd):
    return env.c.run(list(cmd), user=user)


# ----------------------------------------------------------------- the replies
ASK = PROTO + r'''
import subprocess
s = connect()
adv = sys.argv[1:]
s.send(b"JS1 BEGIN write w rank=0 id=1 sync"); print("R", until(s, 1)[-1], flush=True)
subprocess.run(adv, check=True, stdout=subprocess.DEVNULL)   # energy inside the phase
asks = [b"JS1 PING id=2 sync", b"JS1 ENERGY id=3 sync", b"JS1 STATUS id=4 sync",
        b"JS1 GET energy id=5 sync", b"JS1 BEGIN compute c rank=0 id=6 sync",
        b"JS1 END rank=0 id=7 sync", b"JS1 READ seq=0 id=8 sync", b"JS1 PING energy id=9 sync"]
for i, m in enumerate(asks, 2):
    s.send(m)
    for r in until(s, i):
        print("R", r, flush=True)
# the previous step's record, from inside this one
import glob
for f in glob.glob(os.environ["JSTEST_PREV"]):
    try:
        open(f).read(); print("PREV readable", f, flush=True)
    except PermissionError:
        print("PREV denied", f, flush=True)
s.send(b"JS1 END rank=0 id=10 sync"); print("R", until(s, 10)[-1], flush=True)
'''

# Every reply the protocol has (docs/phase-protocol.md, "Replies"): none carries energy.
REPLY = re.compile(r"^JS1 (OK( id=\d+)? (seq=(\d+|-)( freq_khz=(\d+|-))?|PONG job=\d+ step=\w+)"
                   r"|ERR \d+( id=\d+)? [ -~]+)$")


def test_no_energy_reaches_the_user_while_a_phase_runs(sk):
    """Inside a phase with energy on the counters, the step's task asks the plugin all
    it can (every request of the protocol, and some it does not have): each reply
    matches the documented reply grammar, which has no energy field; unknown requests
    are refused. The previous step's record (written) is not readable by the task."""
    sk.configure()
    prog = sk.pyfile("ask.py", ASK)
    adv = f"python3 {sk.fakehw_py} ctl {sk.ctl} advance 0.5 --util 1"
    prev = f"{sk.spool}/jstest/$SLURM_JOB_ID/$SLURM_JOB_ID.0.*.json"
    job, out = sk.run_job(f"#!/bin/sh\n#SBATCH -n1\nsrun -n1 true\n"
                          f"JSTEST_PREV=\"{prev}\" python3 {prog} {adv}\n")
    replies = [l[2:] for l in out.splitlines() if l.startswith("R ")]
    assert len(replies) == 10, out
    for r in replies:
        assert REPLY.match(r), r
        assert not re.search(r"uj|joule|energy_", r, re.I), r
    by_id = {int(m.group(1)): r for r in replies if (m := re.search(r" id=(\d+)", r))}
    for i in (3, 4, 5, 8):
        assert by_id[i].startswith("JS1 ERR 22 "), by_id[i]
    assert by_id[9].startswith("JS1 ERR 22 "), by_id[9]  # PING takes no argument
    assert "PREV denied" in out and "PREV readable" not in out, out
    # the phase did have energy: in the root-only record
    rec = sk.wait_records(job, ["batch", "0"])["batch"]
    w = next(p for p in rec["phases"] if p["kind"] == "write")
    assert w["energy_cpu_uj"] > 0


# ------------------------------------------------- the record and the summary
SHORT_LONG = PROTO + r'''
import subprocess, time
s = connect()
adv = sys.argv[1:]
# a long phase: energy and > min_phase_ms
s.send(b"JS1 BEGIN write long rank=0 id=1 sync"); until(s, 1)
subprocess.run(adv, check=True, stdout=subprocess.DEVNULL)
time.sleep(float(os.environ["JSTEST_LONG_S"]))
s.send(b"JS1 END bytes=4096 rank=0 id=2 sync"); until(s, 2)
# a short phase: energy too, far below min_phase_ms
s.send(b"JS1 BEGIN compress short rank=0")
subprocess.run(adv, check=True, stdout=subprocess.DEVNULL)
s.send(b"JS1 END rank=0 id=3 sync"); until(s, 3)
print("DONE", flush=True)
'''


def test_short_phases_are_for_admins_and_users_see_rounded_energy(sk):
    """min_phase_ms=2000: a 3 s phase and a ~0.1 s one, both with energy on the
    counters. The record (root:root 0600, unreadable by the job's user) has both in
    full; the user's summary (the job's uid, 0400, unreadable by another user) has the
    long phase's energy rounded to the effective resolution and the short one without
    energy; srun --energy-report prints the same."""
    sk.configure(min_phase_ms=2000)
    prog = sk.pyfile("shortlong.py", SHORT_LONG)
    adv = f"python3 {sk.fakehw_py} ctl {sk.ctl} advance 0.05 --util 1"
    res = sk.c.srun(["-n1", "--energy-report", "env", "JSTEST_LONG_S=3", "python3", str(prog),
                     *adv.split()], user=USER, timeout=sk.job_timeout)
    assert res.returncode == 0 and "DONE" in res.stdout, res.stdout + res.stderr
    job = int(re.search(r"joulestep: step (\d+)\.0 on ", res.stderr).group(1))
    rec = sk.wait_records(job, ["0"])["0"]
    recf = sk.record_path(job, "0")
    st = os.stat(recf)
    assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
    assert as_user(sk, USER, "cat", recf).returncode != 0
    prov = rec["provenance"]
    res_uj = resolution_uj(sk, rec)
    assert prov["energy_resolution_uj"] == res_uj
    assert prov["min_phase_ns"] == 2000 * 10**6
    long_, short = ({p["kind"]: p for p in rec["phases"]}[k] for k in ("write", "compress"))
    assert long_["duration_ns"] >= 2000 * 10**6 > short["duration_ns"]
    assert long_["energy_cpu_uj"] > 0 and short["energy_cpu_uj"] > 0  # admins: full figures

    sumf = summary_path(sk, job, "0")
    st = os.stat(sumf)
    assert st.st_uid == pwd.getpwnam(USER).pw_uid and stat.S_IMODE(st.st_mode) == 0o400
    assert as_user(sk, OTHER, "cat", sumf).returncode != 0
    got = as_user(sk, USER, "cat", sumf)
    assert got.returncode == 0, got.stderr
    summ = json.loads(got.stdout)
    assert summ["energy_resolution_uj"] == res_uj and summ["min_phase_ns"] == 2000 * 10**6
    sp = {p["kind"]: p for p in summ["phases"]}
    for k in ("energy_cpu_uj", "energy_dram_uj"):
        assert sp["write"][k] == round_uj(long_[k], res_uj), (k, sp["write"][k], long_[k])
        assert sp["compress"][k] is None
    assert sp["write"]["energy_hidden"] is None
    assert sp["compress"]["energy_hidden"] == "shorter than min_phase_ms"
    assert summ["phases_total"] == 2 and summ["phases_hidden"] == 1
    step = rec["step"]
    assert summ["energy_cpu_uj"] == round_uj(step["energy_cpu_uj"], res_uj)
    assert summ["energy_dram_uj"] == round_uj(step["energy_dram_uj"], res_uj)
    # srun --energy-report: what the summary says
    lines = [l for l in res.stderr.splitlines() if l.startswith("joulestep:")]
    m = re.search(r"joulestep:   phase \d+ write:long: [\d.]+ s, CPU ([\d.]+) J, DRAM ([\d.]+) J",
                  res.stderr)
    assert m, lines
    assert float(m.group(1)) == pytest.approx(sp["write"]["energy_cpu_uj"] / 1e6, abs=5e-4)
    assert float(m.group(2)) == pytest.approx(sp["write"]["energy_dram_uj"] / 1e6, abs=5e-4)
    assert re.search(r"joulestep:   phase \d+ compress:short: [\d.]+ s, energy not shown "
                     r"\(shorter than 2000 ms\)", res.stderr), lines


def test_a_step_shorter_than_min_phase_shows_no_energy(sk):
    """The step is an interval too: with min_phase_ms above its length, the summary
    and srun --energy-report give no step energy (the record does)."""
    sk.configure(min_phase_ms=3600000)
    res = sk.c.srun(["-n1", "--energy-report", "true"], user=USER, timeout=sk.job_timeout)
    assert res.returncode == 0, res.stderr
    job = int(re.search(r"joulestep: step (\d+)\.0 on ", res.stderr).group(1))
    rec = sk.wait_records(job, ["0"])["0"]
    assert isinstance(rec["step"]["energy_cpu_uj"], int)
    summ = json.loads(summary_path(sk, job, "0").read_text())
    assert summ["energy_cpu_uj"] is None and summ["energy_total_uj"] is None
    assert summ["energy_hidden"] == "shorter than min_phase_ms"
    assert re.search(r"joulestep: step \d+\.0 on \S+: [\d.]+ s, energy not shown \(shorter "
                     r"than 3.6e\+06 ms\)", res.stderr), res.stderr


# ------------------------------------------------------------------ the caps
CAPS = PROTO + r'''
s = connect()
n = int(sys.argv[1])
for i in range(n):
    s.send(b"JS1 BEGIN write - rank=0"); s.send(b"JS1 END bytes=1 rank=0")
s.send(b"JS1 BEGIN write - rank=0 id=1 sync"); print("OVER", until(s, 1)[-1], flush=True)
s.send(b"JS1 PING id=2 sync"); until(s, 2)
print("SENT", n, flush=True)
'''


def test_markers_per_step_are_capped_and_counted(sk):
    """max_markers_per_step=50 (per second: high): of 300 BEGIN/END pairs, 50 phases
    are recorded, the other 250 BEGINs (and a sync one, told EAGAIN) are counted in
    provenance.markers_step_dropped; their ENDs close nothing; the step ends normally."""
    cap, n = 50, 300
    sk.configure(max_markers_per_step=cap, max_markers_per_s=1000000)
    prog = sk.pyfile("caps.py", CAPS)
    job, out = sk.run_job(f"#!/bin/sh\n#SBATCH -n1\npython3 {prog} {n}\n")
    assert f"SENT {n}" in out, out
    assert re.search(r"^OVER JS1 ERR 11 id=1 max_markers_per_step exceeded$", out, re.M), out
    rec = sk.wait_records(job, ["batch"])["batch"]
    prov = rec["provenance"]
    entries = sum(p["nranks"] for p in rec["phases"])
    assert entries == cap
    assert prov["markers_step_dropped"] == n + 1 - cap
    assert prov["markers_rate_dropped"] == 0 and prov["markers_rejected"] == 0
    assert prov["max_markers_per_step"] == cap and prov["max_markers_per_s"] == 1000000
    assert all(p["open_at_step_end"] is False for p in rec["phases"])
    assert rec["step"]["exit_code"] == 0


def test_rate_key_is_the_old_name_of_max_markers_per_s(sk):
    """rate= (before 0.3) and max_markers_per_s= set the same cap, shown in the record."""
    sk.configure(rate=77)
    job, _ = sk.run_job("#!/bin/sh\n#SBATCH -n1\ntrue\n")
    prov = sk.wait_records(job, ["batch"])["batch"]["provenance"]
    assert prov["max_markers_per_s"] == 77 and prov["max_markers_per_step"] == 1000000
    assert prov["min_phase_ns"] == 10 * 10**6
