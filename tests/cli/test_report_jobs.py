"""report's jobs, steps and energy per group when the period cuts jobs
and jobs span groups: the truths are computed here from the records.

A job counts in a group when at least one of its steps started in the
period [since, until) and belongs to the group, once however many of its
steps do; the totals count each job once over all groups."""
import pytest

import recgen
from conftest import jrun

H = 3600
# (job, user, account, step, node, policy, strategy tag, start hour, cpu J)
STEPS = [
    (1, "alice", "physics", "0", "n1", "io-dvfs", "veloc", 0.0, 100),
    (1, "alice", "physics", "1", "n2", "none", "genericio", 2.0, 110),
    (1, "alice", "physics", "2", "n1", "io-dvfs", "genericio", 4.0, 120),
    (2, "alice", "physics", "0", "n2", "io-dvfs", "veloc", 3.0, 130),
    (3, "bob", "chem", "0", "n1", "none", "veloc", 1.0, 140),
    (3, "bob", "chem", "1", "n3", "io-dvfs", "veloc", 5.0, 150),
    (3, "bob", "chem", "2", "n3", "io-dvfs", "veloc", 5.5, 160),
    (4, "bob", "chem", "0", "n2", "none", "genericio", 7.0, 170),
    (5, "carol", "chem", "0", "n1", "none", None, 0.5, 180),
]
DRAM_J = 10
SINCE_H, UNTIL_H = 1.5, 6.0
KEYS = {"user": 1, "account": 2, "node": 4, "policy": 5, "tag:strategy": 6}


def _spool(tmp_path):
    d = tmp_path / "cut"
    for job, user, acct, step, node, pol, tag, h, cpu in STEPS:
        recgen.write(d, recgen.record(
            job, step, node, user=user, account=acct, policy=pol,
            tags={"strategy": tag} if tag else {}, start_s=h * H, dur_s=60,
            cpu_j=cpu, dram_j=DRAM_J))
    return d


def _truth(by):
    """{group: (jobs, steps, energy J)} and the totals, from STEPS."""
    inside = [s for s in STEPS if SINCE_H <= s[7] < UNTIL_H]
    groups: dict = {}
    for s in inside:
        key = s[KEYS[by]] or "(none)"
        jobs, n, e = groups.get(key, (set(), 0, 0))
        groups[key] = (jobs | {s[0]}, n + 1, e + s[8] + DRAM_J)
    per = {k: (len(j), n, e) for k, (j, n, e) in groups.items()}
    total = (len({s[0] for s in inside}), len(inside),
             sum(s[8] + DRAM_J for s in inside))
    return per, total


def _iso(hours):
    return (f"2025-11-22T{int(hours):02d}:{int(hours * 60) % 60:02d}:00+00:00")


@pytest.mark.parametrize("by", list(KEYS))
def test_report_counts_jobs_cut_by_the_period_and_spanning_groups(run, tmp_path, by):
    run("ingest", _spool(tmp_path))
    r = jrun(run, "report", "--by", by, "--since", _iso(SINCE_H),
             "--until", _iso(UNTIL_H))
    per, (jobs, steps, energy) = _truth(by)
    got = {g["key"]: (g["jobs"], g["steps"], g["energy_total_j"])
           for g in r["groups"]}
    assert got == per
    t = r["totals"]
    assert (t["jobs"], t["steps"], t["energy_total_j"]) == (jobs, steps, energy)


def test_the_cut_case_is_the_one_meant():
    """The period cuts jobs 1 and 3 (steps on both sides), leaves 4 and 5
    out, and jobs 1 and 3 span nodes, policies and tags inside it."""
    per, (jobs, steps, _) = _truth("node")
    assert (jobs, steps) == (3, 5)
    assert per == {"n1": (1, 1, 130), "n2": (2, 2, 260), "n3": (1, 2, 330)}
    assert _truth("policy")[0]["io-dvfs"][0] == 3
