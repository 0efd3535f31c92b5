"""Fault injection on the CLI side (issue 11, section 2, "Records survive";
docs/reliability.md "Faults: records and counters"):

- `joulestep ingest` killed with SIGKILL at random points, again and again, then run to
  the end: every table holds exactly what the spool says (no duplicate, no partial row);
- a job ID reused after the ID space wrapped stays a separate job;
- a record with an uncertain zone (null energy) and a "joulestep-lost" document ingest.
"""
from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

import recgen
from recgen import GIB, J, S, T0, phase, record
from joulestep import store

KILLS = 8


def _big_spool(d, n_jobs=150, steps=4, nphases=6):
    """Records with zones, phases and ranks; returns the truth (rows per table)."""
    truth = {"jobs": 0, "steps": 0, "step_zones": 0, "phases": 0, "phase_ranks": 0,
             "step_tags": 0}
    for j in range(n_jobs):
        truth["jobs"] += 1
        for k in range(steps):
            ph = [phase(i, "write", 2 + i, 0.5, 3, 1, nbytes=GIB, t0=T0 + (j * 100 + k * 10) * S,
                        ranks=[{"rank": r, "start_ns": T0, "end_ns": T0 + S, "bytes": 1}
                               for r in range(3)])
                  for i in range(nphases)]
            r = record(job_id=1000 + j, step_id=str(k), node=f"n{k % 2}",
                       first_seen_s=j * 100, start_s=j * 100 + k * 10, dur_s=9,
                       tags={"run": str(j)}, phases=ph)
            recgen.write(d, r)
            truth["steps"] += 1
            truth["step_zones"] += len(r["zones"])
            truth["phases"] += nphases
            truth["phase_ranks"] += 3 * nphases
            truth["step_tags"] += 1
    return truth


def _ingest_cmd(db, spool):
    return [sys.executable, "-m", "joulestep.cli", "ingest", "--db", str(db), "--batch", "50",
            str(spool)]


def _counts(db) -> dict:
    conn = sqlite3.connect(db)
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] == 0:
            return dict.fromkeys(("jobs", "steps", "step_zones", "phases", "phase_ranks",
                                  "step_tags"), 0)   # killed before its schema committed
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("jobs", "steps", "step_zones", "phases", "phase_ranks", "step_tags")}
    finally:
        conn.close()


def test_kill9_during_ingest_then_ingest_again(tmp_path):
    spool, db = tmp_path / "spool", tmp_path / "js.db"
    truth = _big_spool(spool)
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    journal = db.with_name(db.name + "-journal")
    partial_seen = in_txn = 0
    for _ in range(KILLS):
        p = subprocess.Popen(_ingest_cmd(db, spool), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        # once it writes (a transaction's journal exists), at a random point after
        deadline = time.monotonic() + 60
        while not journal.exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(rng.uniform(0, 0.03))
        in_txn += journal.exists() and p.poll() is None
        p.send_signal(signal.SIGKILL)
        p.wait()
        if db.exists():
            c = _counts(db)
            # between two kills: whole records only (each step with all its children)
            assert c["step_zones"] == 3 * c["steps"], (seed, c)
            assert c["phases"] == 6 * c["steps"] and c["phase_ranks"] == 18 * c["steps"], (seed, c)
            partial_seen += 0 < c["steps"] < truth["steps"]
    res = subprocess.run(_ingest_cmd(db, spool), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert _counts(db) == truth, seed
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM spool_files").fetchone()[0] == truth["steps"]
        dup = conn.execute("SELECT count(*) FROM (SELECT job_pk, node_pk, step_id, het_component "
                           "FROM steps GROUP BY 1, 2, 3, 4 HAVING count(*) > 1)").fetchone()[0]
        assert dup == 0
    finally:
        conn.close()
    # and once more: nothing changes
    subprocess.run(_ingest_cmd(db, spool), check=True, capture_output=True)
    assert _counts(db) == truth
    print(f"\n[kill -9 ingest] seed {seed}: {KILLS} kills ({in_txn} inside a transaction), "
          f"{partial_seen} left a partly ingested database; final rows {truth}")


@pytest.mark.parametrize("order", ["old first", "new first"])
def test_job_id_reused_after_a_wrap_is_another_job(tmp_path, order):
    """Job 42 ran, the ID space wrapped (MaxJobId), and a new job 42 ran 30 days
    later on the same node with the same step names: two jobs, each with its own
    steps and energy (docs/admin-guide.md "Job identity and trusted fields")."""
    day = 86400
    old = [record(job_id=42, step_id=s, node="node01", first_seen_s=0, start_s=1 + i,
                  dur_s=5, cpu_j=10 * (i + 1)) for i, s in enumerate(("batch", "0"))]
    new = [record(job_id=42, step_id=s, node="node01", first_seen_s=30 * day,
                  start_s=30 * day + 1 + i, dur_s=5, cpu_j=100 * (i + 1))
           for i, s in enumerate(("batch", "0"))]
    conn = store.connect(":memory:")
    for rec in (old + new if order == "old first" else new + old):
        res = store.ingest_records(conn, [rec])
        assert res.new_steps == 1, res
    jobs = conn.execute("SELECT job_pk, first_seen_ns FROM jobs WHERE job_id = 42 "
                        "ORDER BY first_seen_ns").fetchall()
    assert [f for _, f in jobs] == [T0, T0 + 30 * day * S]
    for (pk, _), want in zip(jobs, ([10, 20], [100, 200])):
        got = [r[0] for r in conn.execute(
            "SELECT energy_cpu_uj FROM steps WHERE job_pk = ? ORDER BY energy_cpu_uj", (pk,))]
        assert got == [w * J for w in want]


def test_uncertain_zone_and_lost_document_ingest(tmp_path, run):
    spool, db = tmp_path / "spool", tmp_path / "js.db"
    r = record(job_id=7, first_seen_s=0)
    r["zones"][1].update(energy_uj=None, uncertain=True)
    r["step"].update(energy_cpu_uj=None, energy_total_uj=None)
    r["provenance"]["wrap_uncertain"] = True
    recgen.write(spool, r)
    lost = {"format": "joulestep-lost", "version": 1, "cluster": "demo", "job_id": 8,
            "step_id": "batch", "het_component": 0, "node": "node01",
            "lost_at_ns": T0, "reason": "spool: No space left on device"}
    recgen.write(spool, lost, name="demo/lost/8.batch.0.node01.json")
    res = run("ingest", "--db", db, spool)
    assert res.exit_code == 0, res.output
    conn = sqlite3.connect(db)
    zones = conn.execute("SELECT zone_id FROM step_zones ORDER BY zone_id").fetchall()
    assert zones == [("intel-rapl:0",), ("intel-rapl:0:0",)]   # the uncertain one: no row
    assert conn.execute("SELECT energy_cpu_uj, wrap_uncertain FROM steps").fetchone() == (None, 1)
    assert conn.execute("SELECT count(*) FROM lost_records").fetchone()[0] == 1
    conn.close()
    rep = run("report", "--db", db)
    assert "Records lost (spool and fallback not writable): 1" in rep.output
