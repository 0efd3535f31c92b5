"""Two copies of one step (issue 21): the first stored copy wins.

For one natural key (cluster, job, step, het component, node):
- an identical later copy is "already present";
- a later copy that differs is a conflict: counted, quarantined with both
  sources named in the reason, reported by `ingest`, `doctor --db` and the
  exporter, and it never changes the stored row.
Whatever the order, the engine (the ``db`` fixture runs both) and the
record's shape (docs/record-format.md's example is a current-plugin record;
recgen's default is an older plugin's, with a submit time).
"""
import json
import pathlib
import re

import pytest
from conftest import jrun

import recgen
from recgen import J
from joulestep import config, exporter as ex, store

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "record-format.md"


def doc_example() -> dict:
    """The example record of docs/record-format.md (job 42, step 0, node01)."""
    text = DOC.read_text()
    return json.loads(re.search(r"```json\n(.*?)```", text, re.S).group(1))


def gen_copy() -> dict:
    """recgen's record of the example's step (job 42, step 0, node01) and
    incarnation (job.incarnation_ns): the same step, other figures.  (With
    another incarnation it would be another run of a requeued job, stored
    beside it: tests/cli/test_incarnations.py.)"""
    rec = recgen.record(42, "0", "node01")
    rec["job"]["incarnation_ns"] = doc_example()["job"]["incarnation_ns"]
    return rec


def stored(db) -> list:
    conn = store.connect(db)
    try:
        return conn.execute("SELECT s.step_id, n.name, s.energy_total_uj, "
                            "s.start_ns FROM steps s JOIN nodes n USING (node_pk)"
                            ).fetchall()
    finally:
        conn.close()


def jobs(db) -> list:
    conn = store.connect(db)
    try:
        return conn.execute("SELECT * FROM jobs").fetchall()
    finally:
        conn.close()


def write_to(tmp_path, name, rec) -> pathlib.Path:
    sp = tmp_path / name
    return recgen.write(sp, rec)


DOC_UJ = 2_646_913_578          # the example's step.energy_total_uj (CPU + DRAM + GPU)
GEN_UJ = (100 + 20) * J         # recgen.record()'s default


def test_docs_example_then_generated_copy_is_a_conflict(run, db, tmp_path):
    """The newcomer's case: the docs example, then a recgen record with the
    same key and other figures."""
    a = write_to(tmp_path, "a", doc_example())
    out = jrun(run, "ingest", a.parent.parent.parent)
    assert (out["steps_new"], out["steps_already_present"]) == (1, 0)
    job_before = jobs(db)
    b = write_to(tmp_path, "b", gen_copy())
    r = run("ingest", tmp_path / "b", ok=False)     # a conflict is quarantined: exit 1
    # nor does it change the job: its window and attributes (the copy
    # starts earlier and names the job)
    assert jobs(db) == job_before
    assert "0 new steps, 0 already present" in r.stdout
    assert "1 conflicting" in r.stdout
    assert stored(db) == [("0", "node01", DOC_UJ, doc_example()["step"]["start_ns"])]
    # quarantined, with both sources in the reason
    q = tmp_path / "b" / ".quarantine" / b.relative_to(tmp_path / "b")
    assert q.exists() and not b.exists()
    reason = q.with_name(q.name + ".reason").read_text()
    assert "conflict" in reason and str(a) in reason and str(b) in reason
    assert str(a) in r.stderr and str(b) in r.stderr


@pytest.mark.parametrize("first", ["doc", "gen"])
def test_first_copy_wins_in_either_order(run, db, tmp_path, first):
    recs = {"doc": doc_example(), "gen": gen_copy()}
    second = "gen" if first == "doc" else "doc"
    write_to(tmp_path, "one", recs[first])
    run("ingest", tmp_path / "one")
    write_to(tmp_path, "two", recs[second])
    out = json.loads(run("ingest", tmp_path / "two", "--format", "json",
                         ok=False).stdout)
    assert out["steps_new"] == 0 and out["steps_already_present"] == 0
    assert out["steps_conflicting"] == 1
    assert len(out["quarantined"]) == 1
    want = DOC_UJ if first == "doc" else GEN_UJ
    assert [r[2] for r in stored(db)] == [want]


def test_identical_copy_is_already_present(run, db, tmp_path):
    rec = doc_example()
    write_to(tmp_path, "one", rec)
    write_to(tmp_path, "two", rec)
    run("ingest", tmp_path / "one")
    out = jrun(run, "ingest", tmp_path / "two")
    assert (out["steps_new"], out["steps_already_present"],
            out["steps_conflicting"]) == (0, 1, 0)
    assert out["quarantined"] == []
    assert [r[2] for r in stored(db)] == [DOC_UJ]


def test_conflict_inside_one_batch(run, db, tmp_path):
    """Both copies in one ingest: the first in file order is stored."""
    sp = tmp_path / "sp"
    a = recgen.write(sp, doc_example(), name="demo/42/a.json")
    recgen.write(sp, gen_copy(), name="demo/42/b.json")
    out = json.loads(run("ingest", sp, "--format", "json", ok=False).stdout)
    assert (out["steps_new"], out["steps_conflicting"]) == (1, 1)
    assert [r[2] for r in stored(db)] == [DOC_UJ]
    assert str(a) in out["quarantined"][0]["reason"]


def test_conflicts_reported_by_doctor_and_exporter(run, db, tmp_path):
    write_to(tmp_path, "one", doc_example())
    run("ingest", tmp_path / "one")
    write_to(tmp_path, "two", gen_copy())
    run("ingest", tmp_path / "two", ok=False)
    hw = tmp_path / "hw"
    hw.mkdir()
    r = jrun(run, "doctor", "--sysfs", hw)
    assert r["step_conflicts"] == 1
    assert "conflicting copies of stored steps: 1" in run("doctor", "--sysfs", hw).stdout
    view = ex.StoreView(lambda: store.connect(db, write=False), config.load())
    view.refresh()
    text = ex.text(view).decode()
    assert re.search(r"^joulestep_ingest_conflicts_total 1\.0$", text, re.M), text


def test_ingest_records_counts_conflicts(tmp_path):
    conn = store.connect(tmp_path / "m.db")
    a, b = doc_example(), gen_copy()
    res = store.ingest_records(conn, [a, a, b])
    assert (res.new_steps, res.duplicate_steps, res.conflicts) == (1, 1, 1)
    assert conn.execute("SELECT energy_total_uj FROM steps").fetchall() == [(DOC_UJ,)]


def test_step_stored_before_migration_8_compares_by_window(tmp_path):
    """A step stored before migration 008 has no digest: a copy with its
    window is already present, one with another window a conflict."""
    conn = store.connect(tmp_path / "old.db")
    a = doc_example()
    store.ingest_records(conn, [a])
    conn.execute("UPDATE steps SET record_digest = NULL, source = NULL")
    same_window = json.loads(json.dumps(a))
    same_window["step"]["exit_code"] = 1
    later = json.loads(json.dumps(a))
    later["step"]["end_ns"] += 1
    res = store.ingest_records(conn, [same_window, later])
    assert (res.new_steps, res.duplicate_steps, res.conflicts) == (0, 1, 1)
    assert conn.execute("SELECT exit_code, energy_total_uj FROM steps").fetchall() == \
        [(0, DOC_UJ)]
    (reason,) = conn.execute("SELECT reason FROM step_conflicts").fetchone()
    assert "not named" in reason


def test_conflicting_copy_does_not_merge_jobs(tmp_path):
    """A differing copy whose window bridges two runs of one job ID (more
    than the gap apart) changes nothing: no merge, the two jobs stay."""
    h = 3600
    a = recgen.record(800, "0", "node01", first_seen_s=0, start_s=1, dur_s=100)
    b = recgen.record(800, "1", "node02", first_seen_s=30 * h, start_s=30 * h,
                      dur_s=100)
    bridge = recgen.record(800, "0", "node01", first_seen_s=0, start_s=1,
                           dur_s=31 * h)
    conn = store.connect(tmp_path / "m.db")
    store.ingest_records(conn, [a, b])
    before = conn.execute("SELECT * FROM jobs ORDER BY job_pk").fetchall()
    assert len(before) == 2
    res = store.ingest_records(conn, [bridge])
    assert (res.new_steps, res.conflicts) == (0, 1)
    assert conn.execute("SELECT * FROM jobs ORDER BY job_pk").fetchall() == before
