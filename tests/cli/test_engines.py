"""The two store engines (db.py): PostgreSQL ingest under concurrency, and
SQLite and PostgreSQL giving the same answers and the same quarantine."""
import json
import os
import pathlib
import shutil
import sqlite3
import subprocess
import sys

import pytest
from click.testing import CliRunner

import recgen
from conftest import dump_tables, empty_db
from joulestep import store
from joulestep.store import db
from joulestep.store import db as db_mod   # the fixture `db` shadows it
from joulestep.cli import cli

REPO = pathlib.Path(__file__).resolve().parents[2]


def node_records(node: str, jobs: range) -> list[dict]:
    """Records of jobs that ran on several nodes: a batch step on node n1
    and one srun step 0 on every node (the per-node spool layout: each node
    writes only its own steps)."""
    out = []
    for j in jobs:
        t = j * 1000
        if node == "n1":
            out.append(recgen.record(job_id=j, step_id="batch", node=node, start_s=t,
                                     dur_s=100, cpu_j=500, dram_j=100,
                                     first_seen_s=t, tags={"run": "conc"}))
        out.append(recgen.record(
            job_id=j, step_id="0", node=node, start_s=t + 10, dur_s=80,
            cpu_j=200 + j, dram_j=40, first_seen_s=t,
            phases=[recgen.phase(0, "write", t + 20, 5, 10, 2)]))
    return out


def test_three_ingesters_at_once_on_overlapping_spools(pg_url, tmp_path):
    """Three `joulestep ingest` processes, started together, load three
    spools that overlap (every record is in two of them) into one
    PostgreSQL database: every record lands exactly once, every job is one
    row (the nodes of one job ingest concurrently), and nesting is kept."""
    empty_db(pg_url)
    nodes = ("n1", "n2", "n3")
    recs = {n: node_records(n, range(1, 61)) for n in nodes}
    spools = []
    for i, n in enumerate(nodes):                 # spool i: node i and node i+1
        sp = tmp_path / f"spool{i}"
        for r in recs[n] + recs[nodes[(i + 1) % 3]]:
            recgen.write(sp, r)
        spools.append(sp)
    env = dict(os.environ, JOULESTEP_DB=pg_url, JOULESTEP_CONFIG="/dev/null")
    procs = [subprocess.Popen([sys.executable, "-m", "joulestep.cli", "ingest",
                               "--batch", "7", str(sp)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for sp in spools]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, e
    total = sum(len(v) for v in recs.values())
    conn = store.connect(pg_url)
    assert conn.execute("SELECT count(*) FROM steps").fetchone()[0] == total
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 60
    assert conn.execute("SELECT count(DISTINCT (job_pk, node_pk, step_id)) FROM steps"
                        ).fetchone()[0] == total
    assert conn.execute("SELECT count(*) FROM nodes").fetchone()[0] == 3
    # each record's phases once; the batch step on n1 holds n1's step 0
    assert conn.execute("SELECT count(*) FROM phases").fetchone()[0] == sum(
        len(r.get("phases") or []) for v in recs.values() for r in v)
    inside = conn.execute(
        "SELECT count(*) FROM steps s JOIN steps b ON b.step_pk = s.inside_step_pk "
        "JOIN nodes n ON n.node_pk = s.node_pk WHERE n.name = 'n1'").fetchone()[0]
    assert inside == 60
    # new + already present over the three runs = every file seen
    news = [int(o.split(": ")[1].split(" new")[0]) for o, _ in outs]
    assert sum(news) == total
    conn.close()


def _ingest_and_ask(target, spool: pathlib.Path) -> dict:
    """Everything the query commands say about one spool's records."""
    runner = CliRunner()

    def run(*args):
        r = runner.invoke(cli, ["--db", str(target), *map(str, args)],
                          catch_exceptions=False)
        return r.exit_code, r.output
    out = {"ingest": run("ingest", "--format", "json", spool)}
    for args in (("job", 42), ("job", 43), ("job", 101), ("report",), ("report", "--by", "node"),
                 ("report", "--by", "policy"), ("report", "--by", "tag:strategy"),
                 ("report", "--what-if", "io-dvfs"), ("compare", "--by", "strategy"),
                 ("export", "steps_full"), ("export", "phases_full"),
                 ("export", "jobs"), ("export", "phases")):
        for fmt in ("table", "json", "csv"):
            if args[0] == "export" and fmt == "table":
                continue
            out[(args, fmt)] = run(*args, "--format", fmt)
    return out


def test_same_answers_and_quarantine_on_both_engines(pg_url, tmp_path):
    """One spool (the fixture records plus broken ones) ingested into a
    SQLite file and into PostgreSQL: the same files quarantined with the
    same reasons, and byte-identical output of every query command."""
    empty_db(pg_url)
    base = tmp_path / "base"
    for r in recgen.fixture_records():
        recgen.write(base, r)
    bad = {"c/9/trunc.json": b'{"format": "joulestep-record", "vers',
           "c/9/notjson.json": b"hello",
           "c/9/badfield.json": json.dumps({**recgen.fixture_records()[0],
                                            "cluster": 7}).encode()}
    answers = {}
    for engine, target in (("sqlite", tmp_path / "js.db"), ("postgresql", pg_url)):
        sp = tmp_path / f"spool-{engine}"
        shutil.copytree(base, sp)
        for rel, data in bad.items():
            (sp / rel).parent.mkdir(parents=True, exist_ok=True)
            (sp / rel).write_bytes(data)
        a = _ingest_and_ask(target, sp)
        code, text = a.pop("ingest")
        assert code == 1                     # quarantined records: status 1
        q = json.loads(text.replace(str(sp), "SPOOL"))
        answers[engine] = (q, a, sorted(
            (str(p.relative_to(sp)), p.read_text()) for p in (sp / ".quarantine").rglob("*")
            if p.is_file()))
    (sq, sa, sf), (pq, pa, pf) = answers["sqlite"], answers["postgresql"]
    assert len(sq["quarantined"]) == 3 and sq == pq
    assert sf == pf and len(sf) == 6         # each file and its .reason
    assert sa.keys() == pa.keys()
    for k in sa:
        assert sa[k] == pa[k], k
    failed = sorted({k[0] for k, (code, _) in sa.items() if code})
    assert failed == [("job", 101)], failed     # no such job: the same error
    # the same rows, surrogate keys included (steps.source: the spool file,
    # which differs only in the spool's directory)
    def rows(db, sp):
        return {t: sorted((tuple(v.replace(str(sp), "SPOOL") if isinstance(v, str)
                                 else v for v in r) for r in rs), key=repr)
                for t, rs in (dump_tables(db) | {"spool_files": []}).items()}
    assert rows(tmp_path / "js.db", tmp_path / "spool-sqlite") == \
        rows(pg_url, tmp_path / "spool-postgresql")


def test_migrations_reach_the_same_schema_version(pg_url):
    conn = store.connect(pg_url)
    assert store._pg_version(conn) == store.latest_version()
    # foreign keys survive migration 002's table rebuild (db.pg_rebuild_fks)
    fks = {r[0] for r in conn.execute(
        "SELECT conrelid::regclass::text FROM pg_constraint WHERE contype = 'f' "
        "AND confrelid = 'jobs'::regclass")}
    assert fks == {"steps", "slurm_steps"}
    conn.close()


def test_pg_ddl_maps_types():
    assert db.pg_ddl("a INTEGER PRIMARY KEY, b INTEGER, c REAL) WITHOUT ROWID") == \
        "a BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, b BIGINT, " \
        "c DOUBLE PRECISION)"
    assert db.pg_ddl("PRAGMA user_version = 7") == \
        "UPDATE joulestep_schema SET version = 7"
    assert db.translate("SELECT ? || '%'", True) == "SELECT %s || '%%'"
    assert db.redact("postgresql://u:secret@h/d") == "postgresql://u:***@h/d"


@pytest.mark.parametrize("n", [0, 1, 5, 36, 37, 38, 100, 1000])
def test_insert_many_writes_every_row_once(db, n, monkeypatch):
    """insert_many splits rows into multi-row statements of a few sizes
    (the largest the bound-parameter limit allows, here 37 rows, then 16, 4
    and 1): each row is written exactly once, whatever the count, with or
    without key tuples joined to the rows."""
    monkeypatch.setattr(db_mod, "MAX_PARAMS", 2 * 37 + 1)
    conn = store.connect(db)
    try:
        cols = ("job_pk", "node_pk")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("CREATE TEMP TABLE t_many (job_pk BIGINT, node_pk BIGINT)")
        rows = [(i, -i) for i in range(n)]
        conn.insert_many("t_many", cols, rows)
        conn.insert_many("t_many", cols, iter(rows[:3]))
        conn.insert_many("t_many", cols, [(-i,) for i in range(n)],
                         keys=[(i,) for i in range(n)])
        got = conn.execute("SELECT job_pk, node_pk FROM t_many").fetchall()
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    assert sorted(map(tuple, got)) == sorted(rows * 2 + rows[:3])


def test_insert_many_leaves_out_only_columns_whose_default_is_null(tmp_path):
    """SQLite: a column NULL in every row is left out of the INSERT (binding
    a NULL costs the sqlite3 module more than storing it) only where leaving
    it out stores NULL: a column with another default keeps its NULL, a
    NOT NULL column still refuses the rows, and the rows keep their order."""
    conn = store.connect(tmp_path / "n.db")
    try:
        conn.execute("CREATE TABLE t_null (n INTEGER PRIMARY KEY, k INTEGER, "
                     "a INTEGER, b INTEGER DEFAULT 7, c TEXT NOT NULL)")
        cols = ("k", "a", "b", "c")
        seen: list = []
        conn.set_trace_callback(seen.append)
        conn.insert_many("t_null", cols, [(None, None, "x"), (None, None, "y"),
                                          (None, None, "z")], keys=[(3,), (1,), (2,)])
        conn.set_trace_callback(None)
        # a (default NULL) left out of the statement, b (default 7) kept
        assert {q.split(")")[0] for q in seen if q.startswith("INSERT")} == \
            {"INSERT INTO t_null (k, b, c"}
        assert conn.execute("SELECT n, k, a, b, c FROM t_null ORDER BY n").fetchall() == [
            (1, 3, None, None, "x"), (2, 1, None, None, "y"), (3, 2, None, None, "z")]
        with pytest.raises(sqlite3.IntegrityError):
            conn.insert_many("t_null", cols, [(None, None, None)], keys=[(4,)])
    finally:
        conn.close()
