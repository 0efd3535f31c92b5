"""A requeued job's incarnations (issue 23, defect 5; docs/design.md, "A
requeued job's incarnations").

A requeued job runs again under its job ID, the same steps on the same
node.  Each run is its own set of records, told apart by job.incarnation_ns
(the job prolog's time on the node; in the record's file name): ingest keeps
both runs' steps in the one job, ingesting again changes nothing, and
`joulestep job` shows each run with its own energy.  A step stored before
migration 012 (incarnation unknown, 0) still takes its record as a copy.
"""
import json
import sqlite3

import pytest
from conftest import jrun

import recgen
from recgen import S
from joulestep import store
from joulestep.store import engines

JOB = 77


def run_records(first_seen_s: float, cpu_j: float, *, inc=True, node="node01"):
    """One run of job 77 on a node: batch (the whole run) and step 0 inside
    it, as the current plugin writes them (first seen at the prolog)."""
    out = []
    for step, start, dur, cpu in (("batch", first_seen_s + 1, 20, cpu_j * 2),
                                  ("0", first_seen_s + 2, 5, cpu_j)):
        r = recgen.record(JOB, step, node, start_s=start, dur_s=dur, cpu_j=cpu,
                          dram_j=0, first_seen_s=first_seen_s)
        r["version"] = 3
        if inc:
            r["job"]["incarnation_ns"] = r["job"]["first_seen_ns"]
        out.append(r)
    return out


def write_run(spool, recs):
    for r in recs:
        j, s = r["job"], r["step"]
        recgen.write(spool, r, name=f"demo/{JOB}/{JOB}.{s['step_id']}.0-"
                                    f"{j.get('incarnation_ns', 0)}.{s['node']}.json")


def steps(db) -> list:
    with store.connect(db) as conn:
        return sorted(conn.execute(
            "SELECT s.step_id, s.incarnation_ns, s.energy_cpu_uj FROM steps s "
            "JOIN jobs j ON j.job_pk = s.job_pk WHERE j.job_id = ?", (JOB,)).fetchall())


def test_two_runs_of_a_requeued_job_are_both_kept(run, db, tmp_path):
    """Run 1 ends, the job is requeued, run 2 starts 60 s later on the same
    node: four steps (two step 0), one job; ingest again: nothing new."""
    spool = tmp_path / "spool"
    one, two = run_records(0, 100), run_records(60, 30)
    write_run(spool, one + two)
    out = jrun(run, "ingest", spool)
    assert (out["steps_new"], out["steps_conflicting"]) == (4, 0)
    inc1, inc2 = (recgen.T0 + s * S for s in (0, 60))
    truth = sorted((r["step"]["step_id"], r["job"]["incarnation_ns"],
                    r["step"]["energy_cpu_uj"]) for r in one + two)
    assert steps(db) == truth
    assert [x[1] for x in truth].count(inc1) == 2 and \
        [x[1] for x in truth].count(inc2) == 2
    with store.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM jobs WHERE job_id = ?",
                            (JOB,)).fetchone() == (1,)
    # the same spool again, and the same records under other names
    out = jrun(run, "ingest", spool)
    assert (out["steps_new"], out["steps_conflicting"]) == (0, 0)
    again = tmp_path / "again"
    for r in one + two:
        recgen.write(again, r, name=f"demo/{JOB}/{r['step']['step_id']}."
                                    f"{r['job']['incarnation_ns']}.json")
    out = jrun(run, "ingest", again)
    assert (out["steps_new"], out["steps_already_present"]) == (0, 4)
    assert steps(db) == truth


def test_job_shows_each_run_and_its_energy(run, tmp_path):
    spool = tmp_path / "spool"
    one, two = run_records(0, 100), run_records(60, 30)
    write_run(spool, one + two)
    run("ingest", spool)
    s = jrun(run, "job", JOB)
    runs = s["incarnations"]
    assert [r["incarnation"] for r in runs] == [1, 2]
    # each run counts its batch step (step 0 is inside it): the batch's energy
    for r, recs in zip(runs, (one, two)):
        batch = next(x for x in recs if x["step"]["step_id"] == "batch")
        assert r["energy_total_j"] == pytest.approx(batch["step"]["energy_total_uj"] / 1e6)
        assert r["steps_n"] == 2 and r["nodes"] == ["node01"]
        assert r["start_ns"] == batch["step"]["start_ns"]
    assert {(st["step_id"], st["incarnation"]) for st in s["steps"]} == \
        {("batch", 1), ("0", 1), ("batch", 2), ("0", 2)}
    assert s["totals"]["energy_total_j"] == pytest.approx(
        sum(r["energy_total_j"] for r in runs))
    assert any("requeued" in c and "2 times" in c for c in s["caveats"])
    text = run("job", JOB).stdout
    assert "Incarnations: the job was requeued and ran 2 times" in text
    assert "0#2" in text and "batch#1" in text


def test_one_run_on_two_nodes_is_one_incarnation(run, tmp_path):
    """Each node has its own prolog time: the runs are told apart by time,
    not by the marker alone."""
    spool = tmp_path / "spool"
    a = run_records(0, 100)
    b = [r for r in run_records(1.5, 10, node="node02") if r["step"]["step_id"] == "0"]
    b[0]["step"]["step_id"] = "1"
    write_run(spool, a + b)
    run("ingest", spool)
    s = jrun(run, "job", JOB)
    assert [r["incarnation"] for r in s["incarnations"]] == [1]
    assert not any("requeued" in c for c in s["caveats"])
    assert "Incarnations" not in run("job", JOB).stdout


def test_record_without_incarnation_uses_first_seen(tmp_path):
    """A record of a plugin before job.incarnation_ns: first_seen_ns is its
    incarnation; a record of an older plugin still (submit time only): the
    submit time."""
    conn = store.connect(tmp_path / "m.db")
    one, two = run_records(0, 100, inc=False), run_records(60, 30, inc=False)
    old = recgen.record(78, "0", "node01", submit_s=5)
    res = store.ingest_records(conn, one + two + [old])
    assert res.new_steps == 5
    got = dict(((j, st, e), inc) for j, st, e, inc in conn.execute(
        "SELECT j.job_id, s.step_id, s.energy_cpu_uj, s.incarnation_ns FROM steps s "
        "JOIN jobs j ON j.job_pk = s.job_pk"))
    for r in one + two:
        assert got[(JOB, r["step"]["step_id"], r["step"]["energy_cpu_uj"])] == \
            r["job"]["first_seen_ns"]
    assert got[(78, "0", old["step"]["energy_cpu_uj"])] == old["job"]["submit_time_ns"]
    res = store.ingest_records(conn, one + two + [old])
    assert (res.new_steps, res.duplicate_steps, res.conflicts) == (0, 5, 0)
    conn.close()


def test_step_stored_before_migration_12_takes_its_record_as_a_copy(tmp_path):
    """incarnation_ns 0 (unknown): the same record again is already present,
    as before the migration; not a second step."""
    conn = store.connect(tmp_path / "m.db")
    one = run_records(0, 100)
    store.ingest_records(conn, one)
    conn.execute("UPDATE steps SET incarnation_ns = 0")
    conn.commit()
    res = store.ingest_records(conn, one)
    assert (res.new_steps, res.duplicate_steps, res.conflicts) == (0, 2, 0)
    assert conn.execute("SELECT count(*) FROM steps").fetchone() == (2,)
    conn.close()


def test_lost_steps_of_two_runs_are_two_rows(run, tmp_path):
    """The plugin's joulestep-lost documents carry the incarnation of the
    record name: the same step lost in both runs is counted twice, once
    each; ingesting again adds nothing."""
    lost = tmp_path / "spool" / "demo" / "lost"
    lost.mkdir(parents=True)
    for inc in (recgen.T0, recgen.T0 + 60 * S):
        doc = {"format": "joulestep-lost", "version": 1, "cluster": "demo",
               "job_id": JOB, "step_id": "0", "het_component": 0, "node": "node01",
               "lost_at_ns": inc + 10 * S, "reason": "r", "incarnation_ns": inc}
        (lost / f"{JOB}.0.0-{inc}.node01.json").write_text(json.dumps(doc))
    run("ingest", tmp_path / "spool")
    run("ingest", tmp_path / "spool")
    rep = jrun(run, "report")
    assert rep["totals"]["records_lost"] == 2


def _v11_db(path) -> None:
    """A store of schema 11 (before this migration), with one job."""
    c = sqlite3.connect(path)
    for num, p in engines.migrations():
        if num <= 11:
            c.executescript(p.read_text())
    c.execute("INSERT INTO nodes (node_pk, cluster, name) VALUES (1, 'demo', 'node01')")
    c.execute("INSERT INTO jobs (job_pk, cluster, job_id, first_seen_ns, last_seen_ns) "
              "VALUES (1, 'demo', 5, 10, 30)")
    c.execute("INSERT INTO steps (step_pk, job_pk, step_id, node_pk, start_ns, end_ns, "
              "duration_ns, counted_duration_ns, energy_cpu_uj) "
              "VALUES (7, 1, '0', 1, 10, 30, 20, 20, 99)")
    c.execute("INSERT INTO step_zones (step_pk, zone_id, name, energy_uj) "
              "VALUES (7, 'intel-rapl:0', 'package-0', 99)")
    c.execute("INSERT INTO lost_records (cluster, job_id, step_id, node, lost_at_ns) "
              "VALUES ('demo', 5, '1', 'node01', 40)")
    c.commit()
    assert c.execute("PRAGMA user_version").fetchone() == (11,)
    c.close()


def test_migration_012_keeps_every_row(tmp_path):
    path = tmp_path / "v11.db"
    _v11_db(path)
    conn = store.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == store.latest_version()
    assert conn.execute("SELECT step_pk, job_pk, step_id, energy_cpu_uj, incarnation_ns "
                        "FROM steps").fetchall() == [(7, 1, "0", 99, 0)]
    assert conn.execute("SELECT step_pk, energy_uj FROM step_zones").fetchall() == [(7, 99)]
    assert conn.execute("SELECT job_id, step_id, incarnation_ns FROM "
                        "lost_records").fetchall() == [(5, "1", 0)]
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    # a new step takes a key past the migrated ones; cascades still hold
    store.ingest_records(conn, run_records(0, 100))
    assert conn.execute("SELECT count(*) FROM steps").fetchone() == (3,)
    conn.execute("DELETE FROM jobs WHERE job_id = 5")
    conn.commit()
    assert conn.execute("SELECT count(*) FROM step_zones WHERE step_pk = 7").fetchone() == (0,)
    conn.close()


def test_migration_012_on_postgresql_keeps_rows_and_keys(pg_cluster, monkeypatch):
    """PostgreSQL: the rebuilt steps table's identity starts past the copied
    rows (db.pg_rebuild_fks), so the next ingest does not reuse a key."""
    url = pg_cluster.create_db("mig12")
    old = [(n, p) for n, p in engines.migrations() if n <= 11]
    with monkeypatch.context() as m:
        m.setattr(engines, "migrations", lambda: old)
        m.setattr(engines, "latest_version", lambda: 11)
        conn = store.connect(url)
        conn.execute("INSERT INTO nodes (cluster, name) VALUES ('demo', 'node01')")
        conn.execute("INSERT INTO jobs (cluster, job_id, first_seen_ns, last_seen_ns) "
                     "VALUES ('demo', 5, 10, 30)")
        conn.execute("INSERT INTO steps (job_pk, step_id, node_pk, start_ns, end_ns, "
                     "duration_ns, counted_duration_ns) SELECT job_pk, '0', node_pk, 10, "
                     "30, 20, 20 FROM jobs, nodes")   # autocommit
        conn.close()
    conn = store.connect(url)
    assert conn.execute("SELECT step_id, incarnation_ns FROM steps").fetchall() == [("0", 0)]
    res = store.ingest_records(conn, run_records(0, 100))
    assert res.new_steps == 2
    assert conn.execute("SELECT count(DISTINCT step_pk) FROM steps").fetchone() == (3,)
    conn.close()
    pg_cluster.drop_db(url)
