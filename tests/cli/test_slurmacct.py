"""Slurm accounting at ingest (cli/src/joulestep/slurmacct.py): the sacct output
parser, the job matcher, the AdminComment format, and ingest without sacct.
The round trip against a real slurmdbd is tests/cluster/test_slurmdbd.py."""
import json
import os

import pytest

import recgen
from joulestep import slurmacct as sa
from joulestep import store

D = sa.DELIM


def line(jid="7", cluster="jstest", submit="1700000000", account="acct",
         partition="debug", qos="normal", uid="1001", state="COMPLETED",
         end="1700000100", elapsed="100", nnodes="1", exit_code="0:0", energy="",
         comment=""):
    return D.join([jid, cluster, submit, account, partition, qos, uid, state, end,
                   elapsed, nnodes, exit_code, energy, comment])


def test_parse_sacct_fields():
    text = "\n".join([
        line(),
        line(jid="8", account="", qos="high", state="RUNNING", end="Unknown"),
        line(jid="9", state="CANCELLED by 0", comment="JS1:abc" + D + "x"),
    ]) + "\n"
    rows = sa.parse_sacct(text)
    assert [r.job_id for r in rows] == [7, 8, 9]
    r = rows[0]
    assert (r.cluster, r.submit_s, r.account, r.partition, r.qos, r.uid, r.end_s) == \
        ("jstest", 1700000000, "acct", "debug", "normal", 1001, 1700000100)
    assert r.ended and r.admin_comment == ""
    assert rows[1].account is None and rows[1].end_s is None and not rows[1].ended
    assert rows[2].ended  # "CANCELLED by 0": the first word is the state
    # the last field takes everything after the 13th delimiter
    assert rows[2].admin_comment == "JS1:abc" + D + "x"


def test_parse_sacct_steps_and_node_energy():
    """sacct prints a job's step rows right after its own (issue 24, Slurm's
    node energy at ingest): they go with that job.  ConsumedEnergyRaw 0 or
    empty (no acct_gather_energy plugin) and Slurm's NO_VAL64 are "none"."""
    text = "\n".join([
        line(jid="7", energy="390", elapsed="9", nnodes="2", exit_code="1:0",
             state="FAILED"),
        line(jid="7.batch", partition="", uid="", energy="780", exit_code="1:0"),
        line(jid="7.extern", partition="", uid="", energy="0"),
        line(jid="7.0", partition="", uid="", energy="", elapsed="0", nnodes="2"),
        line(jid="8", energy=str(2**64 - 2)),
        line(jid="8.1", partition="", uid="", energy="12345678901"),
        line(jid="8.0+1", partition="", uid="", energy="7"),    # a het step
    ]) + "\n"
    a, b = sa.parse_sacct(text)
    assert (a.job_id, a.state, a.exit_code, a.elapsed_s, a.nnodes, a.energy_j) == \
        (7, "FAILED", "1:0", 9, 2, 390)
    assert [(s.step_id, s.energy_j, s.nnodes, s.elapsed_s, s.exit_code) for s in a.steps] \
        == [("batch", 780, 1, 100, "1:0"), ("extern", None, 1, 100, "0:0"),
            ("0", None, 2, 0, "0:0")]
    assert b.energy_j is None and [(s.step_id, s.energy_j) for s in b.steps] == \
        [("1", 12345678901), ("0+1", 7)]


def test_parse_sacct_admin_comment_with_newlines():
    text = line(comment="first") + "\nsecond\nthird\n" + line(jid="8") + "\n"
    rows = sa.parse_sacct(text)
    assert [r.job_id for r in rows] == [7, 8]
    assert rows[0].admin_comment == "first\nsecond\nthird"


@pytest.mark.parametrize("text,why", [
    ("7" + D + "jstest" + D + "1700000000\n", "line 1: 3 fields, expected 14"),
    (line() + "\n" + D.join("abc") + "\n", "line 2: 3 fields"),
    (line(jid="7.batch"), "step '7.batch' does not follow its job's row"),
    (line() + "\n" + line(jid="8.0"), "step '8.0' does not follow its job's row"),
    (line(energy="lots"), "ConsumedEnergyRaw 'lots' is not a number"),
    (line(nnodes="-1"), "NNodes '-1' is not a number"),
    (line(jid="7_1"), "job id '7_1' is not a number"),
    (line(submit="2024-01-01T10:00:00"), "submit '2024-01-01T10:00:00' is not epoch"),
    (line(end="yesterday"), "end 'yesterday' is not epoch"),
    (line(uid="alice"), "uid 'alice' is not a number"),
    (line(cluster=""), "empty cluster or state"),
    ("sacct: error: something\n", "line 1: 1 fields"),
])
def test_parse_sacct_refuses_malformed(text, why):
    with pytest.raises(sa.SacctError) as e:
        sa.parse_sacct(text)
    assert why in str(e.value)


def test_parse_sacct_empty():
    assert sa.parse_sacct("") == []


def _row(jid, submit, uid=1001, cluster="c"):
    return sa.parse_sacct(line(jid=str(jid), submit=str(submit), uid=str(uid),
                               cluster=cluster))[0]


def test_match_recycled_ids_other_clusters_and_uids():
    old, new, other = _row(5, 1000), _row(5, 5000), _row(5, 900, cluster="d")
    rows = [new, old, other]
    s = 10**9
    # first seen shortly after each submission: that submission
    assert sa.match(rows, "c", 5, 1100 * s, 1001) is old
    assert sa.match(rows, "c", 5, 5200 * s, 1001) is new
    # first seen up to SUBMIT_SLACK_S before the submit (node clock behind)
    assert sa.match(rows, "c", 5, (5000 - sa.SUBMIT_SLACK_S) * s, None) is new
    assert sa.match(rows, "c", 5, (1000 - sa.SUBMIT_SLACK_S - 1) * s, None) is None
    assert sa.match(rows, "d", 5, 1000 * s, None) is other
    assert sa.match(rows, "c", 6, 5200 * s, None) is None
    # another user's job of that id: nothing of it is used
    assert sa.match(rows, "c", 5, 5200 * s, 1002) is None


def test_match_skips_slurmdbd_placeholder_rows():
    """slurmdbd makes a row with uid 0, no partition and QOS Unknown when a short
    job's end arrives before its start (seen live: tests/cluster/test_slurmdbd.py);
    it is not used, even for a record without a uid, until it is complete."""
    ph = sa.parse_sacct(line(jid="5", submit="1000", partition="", qos="Unknown",
                             uid="0"))[0]
    assert not ph.complete
    assert sa.match([ph], "jstest", 5, 1100 * 10**9, None) is None
    assert sa.match([ph], "jstest", 5, 1100 * 10**9, 1001) is None
    full = sa.parse_sacct(line(jid="5", submit="1000"))[0]
    assert sa.match([full], "jstest", 5, 1100 * 10**9, None) is full


def test_summary_format_round_trip_and_bounds():
    text = sa.format_summary(51_234_400_000, 48_000_000_000, 3_234_400_000,
                             61_400_000_000, 2, 0, ["tuned", "tuned", None])
    assert text == ("joulestep:v1 e_j=51234 cpu_j=48000 dram_j=3234 node_s=61 "
                    "steps=2 policy=none+tuned")
    assert sa.parse_summary(text) == {"e_j": 51234, "cpu_j": 48000, "dram_j": 3234,
                                      "node_s": 61, "steps": 2,
                                      "policy": ["none", "tuned"]}
    # unknown values are left out; unmeasured steps are counted
    t2 = sa.format_summary(None, None, None, None, 3, 3, ["io-dvfs"])
    assert t2 == "joulestep:v1 steps=3 unmeasured=3 policy=io-dvfs"
    assert sa.parse_summary(t2)["unmeasured"] == 3
    # a policy name that is not a plain word cannot reach the comment
    t3 = sa.format_summary(1, 1, None, 1, 1, 0, ["a b=c", "x" * 40, "fixed:0.8", "IO-DVFS"])
    assert sa.parse_summary(t3)["policy"] == ["fixed:0.8", "io-dvfs", "other"]
    assert t3 == t3.lower()  # sacctmgr lowercases what it stores
    assert len(sa.format_summary(10**15, 10**15, 10**15, 10**15, 10**6, 10**6,
                                 ["io-dvfs", "tuned", "fixed:0.8"])) < 160


@pytest.mark.parametrize("text", [
    "JS1:H4sIAAAA", "joulestep:v2 steps=1 policy=x", "joulestep:v1 e_j=1",
    "joulestep:v1 steps=1 policy=x e_j=1.5", "joulestep:v1 steps=1 steps=2 policy=x",
    "joulestep:v1 steps=1 policy=x color=red", "joulestep:v1  steps=1 policy=x", ""])
def test_parse_summary_refuses(text):
    with pytest.raises(ValueError):
        sa.parse_summary(text)


def test_slurm_conf_detection(tmp_path, monkeypatch):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n  accountingstoragetype = accounting_storage/slurmdbd "
                    "# comment\n")
    assert sa.slurm_conf_uses_slurmdbd(conf)
    conf.write_text("#AccountingStorageType=accounting_storage/slurmdbd\n"
                    "AccountingStorageType=accounting_storage/none\n")
    assert not sa.slurm_conf_uses_slurmdbd(conf)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "absent.conf"))
    assert not sa.slurm_conf_uses_slurmdbd()
    assert sa.resolve_mode("auto") == "off"
    assert sa.resolve_mode("auto", admin_comment=True) == "on"
    with pytest.raises(ValueError):
        sa.resolve_mode("maybe")


def test_summaries_from_the_store(run, db, tmp_path):
    """Per-job totals of the summary, against the records' own figures: two
    steps on two nodes (none inside another) add up; an unmeasured step
    counts as such."""
    spool = tmp_path / "sp"
    recs = [recgen.record(50, "0", "n1", cpu_j=100, dram_j=20, dur_s=10, policy="tuned"),
            recgen.record(50, "1", "n2", start_s=20, cpu_j=30, dram_j=5, dur_s=4,
                          policy="monitor")]
    for r in recs:
        recgen.write(spool, r)
    run("ingest", spool)
    conn = store.connect(db)
    texts = sa.summaries(conn, 0)
    assert len(texts) == 1
    got = sa.parse_summary(next(iter(texts.values())))
    assert got == {"e_j": 155, "cpu_j": 130, "dram_j": 25, "node_s": 14, "steps": 2,
                   "policy": ["monitor", "tuned"]}


def test_ingest_without_sacct_keeps_record_fields(run, db, spool, monkeypatch, tmp_path):
    """--sacct on with no sacct on PATH: ingest lands everything, says once
    what it could not fill, and the jobs keep their records' fields."""
    empty = tmp_path / "nobin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    res = run("--format", "json", "ingest", spool, "--sacct", "on", "--sacct-days", "3650")
    out = json.loads(res.stdout)
    acct = out["slurm_accounting"]
    assert out["steps_new"] > 0
    assert acct["mode"] == "on" and acct["filled"] == 0
    assert "sacct not found on PATH" in acct["error"]
    n_jobs = store.connect(db).execute("SELECT count(*) FROM jobs").fetchone()[0]
    assert acct["looked_up"] == n_jobs
    assert res.stderr.count("joulestep: ingest: slurm accounting:") == 1
    assert f"{n_jobs} job(s) keep the records' fields" in res.stderr
    rows = store.connect(db).execute(
        "SELECT account, qos, sacct_ns FROM jobs WHERE job_id = 43").fetchall()
    assert rows == [("chem", None, None)]


def test_ingest_sacct_off_and_auto_without_slurmdbd(run, spool, monkeypatch, tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("AccountingStorageType=accounting_storage/none\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    for args in ((), ("--sacct", "off")):
        res = run("--format", "json", "ingest", spool, "--sacct-days", "3650", *args)
        assert json.loads(res.stdout)["slurm_accounting"]["mode"] == "off"
        assert "slurm accounting" not in res.stderr
    res = run("ingest", spool, "--sacct", "off", "--admin-comment", ok=False)
    assert "--admin-comment needs sacct" in res.output


def test_migration_adds_columns(run, db, spool):
    run("ingest", spool)
    cols = {name for name, _ in store.connect(db).columns("jobs")}
    assert {"qos", "sacct_ns", "admin_comment"} <= cols


def test_report_by_qos_and_job_show_the_qos_from_sacct(run, db, tmp_path):
    """The QOS sacct gave (here set as ingest's sacct sync stores it) groups
    `report --by qos` and is shown by `job`; jobs without one are (none)."""
    spool = tmp_path / "sp"
    recs = [recgen.record(60, "0", "n1", cpu_j=100, dram_j=20, dur_s=10),
            recgen.record(61, "0", "n1", start_s=100, cpu_j=30, dram_j=5, dur_s=4),
            recgen.record(62, "0", "n1", start_s=200, cpu_j=7, dram_j=1, dur_s=2)]
    for r in recs:
        recgen.write(spool, r)
    run("ingest", spool)
    with store.connect(db) as conn:
        conn.execute("UPDATE jobs SET qos = ? WHERE job_id IN (60, 61)", ("high",))
    out = json.loads(run("--format", "json", "report", "--by", "qos").stdout)
    groups = {g["key"]: g for g in out["groups"]}
    assert set(groups) == {"high", "(none)"}
    assert groups["high"]["energy_total_j"] == pytest.approx(100 + 20 + 30 + 5)
    assert groups["(none)"]["energy_total_j"] == pytest.approx(7 + 1)
    job = json.loads(run("--format", "json", "job", "60").stdout)["job"]
    assert job["qos"] == "high"
    assert ", qos high" in run("job", "60").stdout
    assert "qos" not in run("job", "62").stdout.splitlines()[0]
