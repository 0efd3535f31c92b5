"""ingest: hand-checked rows, idempotence, quarantine, wraparound."""
import json
import shutil

import pytest

import recgen
from conftest import dump_tables
from joulestep import store
from recgen import GIB, J, S, T0


def dump(db):
    return dump_tables(db)


def q(db, sql, *args):
    conn = store.connect(db)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def test_fixture_lands_exactly(loaded, db):
    assert q(db, "SELECT count(*) FROM jobs") == [(3,)]
    assert q(db, "SELECT count(*) FROM steps") == [(4,)]
    assert q(db, "SELECT count(*) FROM nodes") == [(2,)]
    assert q(db, "SELECT count(*) FROM phases") == [(5,)]
    assert q(db, "SELECT count(*) FROM step_zones") == [(12,)]
    row = q(db, "SELECT s.energy_cpu_uj, s.energy_dram_uj, s.energy_total_uj, "
                "s.duration_ns, s.policy, s.base_freq_khz, n.name "
                "FROM steps s JOIN jobs j USING (job_pk) JOIN nodes n USING (node_pk)"
                " WHERE j.user_name = 'alice' AND s.step_id = '0'")
    assert row == [(100 * J, 20 * J, 120 * J, 10 * S, "io-dvfs", 2_400_000, "node01")]
    ph = q(db, "SELECT p.seq, p.kind, p.depth, p.parent_seq, p.freq_khz, p.bytes, "
               "p.energy_cpu_uj, p.energy_dram_uj, p.duration_ns FROM phases p "
               "JOIN steps s USING (step_pk) JOIN jobs j USING (job_pk) "
               "WHERE j.user_name = 'alice' ORDER BY seq")
    assert ph == [(0, "compute", 0, None, None, None, 40 * J, 8 * J, 4 * S),
                  (1, "checkpoint", 0, None, 1_200_000, GIB, 20 * J, 4 * J, 2 * S),
                  (2, "flush", 1, 1, 1_200_000, GIB, 6 * J, 2 * J, 1 * S)]
    assert q(db, "SELECT rank, bytes FROM phase_ranks ORDER BY rank") == \
        [(0, GIB // 2), (1, GIB // 2)]
    assert q(db, "SELECT DISTINCT key, value FROM step_tags t JOIN steps s USING (step_pk) JOIN jobs j USING (job_pk) "
                 "WHERE j.user_name = 'alice' ORDER BY key") == \
        [("strategy", "veloc"), ("tier", "dram")]
    assert q(db, "SELECT z.name, energy_uj, wraps FROM step_zones z JOIN steps s "
                 "USING (step_pk) JOIN jobs j USING (job_pk) WHERE j.user_name='bob'"
                 " ORDER BY z.name") == \
        [("dram", 20 * J, 0), ("package-0", 100 * J, 0), ("package-1", 100 * J, 1)]


def test_ingest_twice_changes_nothing(run, spool, db, tmp_path):
    r1 = run("ingest", spool)
    assert "4 new steps" in r1.output
    first = dump(db)
    r2 = run("ingest", spool)
    assert "0 new steps" in r2.output and "4 unchanged" in r2.output
    assert dump(db) == first
    # a copy at another path is parsed again: the natural keys make it a no-op
    copy = tmp_path / "copy"
    shutil.copytree(spool, copy)
    r3 = run("ingest", copy, "--format", "json")
    out = json.loads(r3.stdout)
    assert out["steps_new"] == 0 and out["steps_already_present"] == 4
    strip = lambda d: [l for l in d if "spool_files" not in l]  # noqa: E731
    assert strip(dump(db)) == strip(first)


def test_corrupt_records_quarantined_rest_lands(run, spool, db):
    good = recgen.record(50, "0", "node03", user="dave")
    recgen.write(spool, good)
    text = json.dumps(recgen.record(51, "0", "node03"))
    bad = {
        "demo/51/truncated.json": text[: len(text) // 2],
        "demo/52/badfield.json": text.replace('"energy_cpu_uj": 100000000',
                                              '"energy_cpu_uj": "lots"', 1),
        "demo/53/version.json": text.replace('"version": 1', '"version": 7'),
        "demo/54/array.json": "[1, 2, 3]",
        "demo/55/empty.json": "",
    }
    for rel, content in bad.items():
        p = spool / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)
    (spool / "demo" / "51" / "inflight.json.tmp.999").write_text("{")  # plugin mid-write
    res = run("ingest", spool, ok=False)
    assert res.exit_code == 1
    err = res.stderr
    for rel in bad:
        assert rel.split("/")[-1] in err
        assert not (spool / rel).exists()
        moved = spool / ".quarantine" / rel
        assert moved.exists(), rel
        assert (moved.parent / (moved.name + ".reason")).read_text().strip()
    assert "truncated JSON" in err
    assert "step.energy_cpu_uj: expected an integer" in err
    assert "version: this joulestep reads versions 1 to 4, got 7" in err
    assert "record: expected a JSON object" in err
    assert "inflight" not in err
    assert (spool / "demo" / "51" / "inflight.json.tmp.999").exists()
    assert "5 new steps" in res.stdout and "5 quarantined" in res.stdout
    assert q(db, "SELECT count(*) FROM steps") == [(5,)]
    assert q(db, "SELECT user_name FROM jobs WHERE job_id = 50") == [("dave",)]
    # the quarantine is not read again
    again = run("ingest", spool)
    assert "0 quarantined" in again.stdout


def test_quarantine_option_and_single_file(run, spool, db, tmp_path):
    p = spool / "demo" / "99" / "broken.json"
    p.parent.mkdir(parents=True)
    p.write_text('{"format": "joulestep-record", "version": 1, "cluster": "demo"}')
    qd = tmp_path / "q"
    res = run("ingest", p, "--quarantine", qd, ok=False)
    assert "job: missing" in res.stderr or "record.job: missing" in res.stderr
    assert (qd / "broken.json").exists() and not p.exists()


def test_job_id_wraparound_makes_two_jobs(loaded, db, run):
    rows = q(db, "SELECT job_id, first_seen_ns, submit_time_ns, user_name FROM jobs "
                 "WHERE job_id = 42 ORDER BY first_seen_ns")
    assert rows == [(42, T0, T0, "alice"),
                    (42, T0 + 3 * 86400 * S, T0 + 3 * 86400 * S, "carol")]
    # same job id, same step, node02: would merge if the key ignored the window
    assert q(db, "SELECT count(*) FROM steps s JOIN jobs j USING (job_pk) "
                 "WHERE j.job_id = 42") == [(3,)]


def test_ingest_records_reports_invalid(tmp_path):
    from joulestep import store
    conn = store.connect(tmp_path / "x.db")
    recs = recgen.fixture_records()
    recs[1]["step"]["end_ns"] = recs[1]["step"]["start_ns"] - 1
    recs[2]["phases"][1]["seq"] = 0
    res = store.ingest_records(conn, recs)
    assert res.new_steps == 2
    reasons = [r for _, r in res.errors]
    assert any("step.end_ns" in r and "before start_ns" in r for r in reasons)
    assert any("phases[1].seq: 0 appears twice" in r for r in reasons)


def test_zones_are_told_apart_by_id(tmp_path):
    """Every package has a DRAM zone named "dram", as the kernel names them."""
    from joulestep import store
    conn = store.connect(tmp_path / "x.db")
    rec = recgen.record(70, "0", "node03")
    rec["zones"].append({"name": "dram", "id": "intel-rapl:1:0", "kind": "dram",
                         "energy_uj": 5 * J, "wraps": 0})
    bad = recgen.record(71, "0", "node03")
    bad["zones"].append(dict(bad["zones"][0]))
    res = store.ingest_records(conn, [rec, bad])
    assert res.new_steps == 1
    assert [r for _, r in res.errors] == ["zones[3].id: zone 'intel-rapl:0' appears twice"]
    rows = conn.execute("SELECT z.zone_id, z.name FROM step_zones z JOIN steps s USING (step_pk) "
                        "JOIN jobs j USING (job_pk) WHERE j.job_id = 70 "
                        "AND z.name = 'dram' ORDER BY zone_id").fetchall()
    assert [tuple(r) for r in rows] == [("intel-rapl:0:0", "dram"), ("intel-rapl:1:0", "dram")]


def test_large_spool_in_batches(run, tmp_path, db):
    sp = tmp_path / "big"
    for i in range(1200):
        recgen.write(sp, recgen.record(1000 + i, "0", f"n{i % 7:02d}",
                                       start_s=i, cpu_j=1, dram_j=1))
    res = run("ingest", sp, "--batch", "500")
    assert "1200 new steps" in res.stdout
    assert q(db, "SELECT count(*), sum(energy_total_uj) FROM steps") == [(1200, 2400 * J)]


def test_unmeasured_energy_is_ingested_and_flagged(run, tmp_path, db):
    # the plugin writes null energies when no counter was readable
    rec = recgen.record(60, "0", "node09", errors=["energy: no RAPL zone readable"],
                        phases=[recgen.phase(0, "write", 1, 2, 0, 0)])
    for k in ("energy_cpu_uj", "energy_dram_uj", "energy_total_uj"):
        rec["step"][k] = None
    rec["phases"][0]["energy_cpu_uj"] = rec["phases"][0]["energy_dram_uj"] = None
    rec["zones"] = []
    good = recgen.record(60, "batch", "node09", cpu_j=5, dram_j=1)
    sp = tmp_path / "sp"
    recgen.write(sp, rec)
    recgen.write(sp, good)
    run("ingest", sp)
    assert q(db, "SELECT step_id, energy_cpu_uj, energy_total_uj FROM steps "
                 "ORDER BY step_id") == [("0", None, None), ("batch", 5 * J, 6 * J)]
    s = json.loads(run("job", 60, "--format", "json").stdout)
    st = {x["step_id"]: x for x in s["steps"]}
    assert st["0"]["energy_total_j"] is None and st["0"]["kwh"] is None
    assert st["0"]["phases"][0]["saving_status"] == "not measured"
    assert s["totals"]["energy_total_j"] == 6 and s["totals"]["steps_unmeasured"] == 1
    assert any("energy not measured" in c for c in s["caveats"])
    assert any("no RAPL zone readable" in c for c in s["caveats"])
    out = run("job", 60).stdout
    assert "without an energy measurement" in out
    r = json.loads(run("report", "--format", "json").stdout)
    assert r["totals"]["energy_total_j"] == 6 and r["totals"]["steps"] == 2


def test_step_start_submit_fallback_joins_its_job(run, tmp_path, db):
    # step 0 knew the submit time; step 1's controller lookup failed, so the
    # plugin used its start as submit time (provenance.submit_time_source)
    a = recgen.record(70, "0", "node01", start_s=10)
    b = recgen.record(70, "1", "node01", start_s=100, submit_s=100)
    b["provenance"]["submit_time_source"] = "step_start"
    # same ID 30 days later, also a fallback: a different job
    c = recgen.record(70, "0", "node01", start_s=30 * 86400, submit_s=30 * 86400)
    c["provenance"]["submit_time_source"] = "step_start"
    sp = tmp_path / "sp"
    for r in (a, b, c):
        recgen.write(sp, r, name=f"{r['step']['start_ns']}.json")
    run("ingest", sp)
    rows = q(db, "SELECT j.submit_time_ns, s.step_id FROM jobs j "
                 "JOIN steps s USING (job_pk) ORDER BY 1, 2")
    assert rows == [(T0, "0"), (T0, "1"), (T0 + 30 * 86400 * S, "0")]


def test_step_id_is_matched_whole_and_ascii():
    """A step id is 0-9 digits, or up to 64 of A-Za-z0-9_.+- (docs/record-format.md).
    The pattern ended in `$`, which also matches before a final newline, and
    its \\d took any Unicode digit: "1\\n" and "١" were stored as step ids,
    by every parse path, and by lost.parse."""
    for bad in ("1\n", "batch\n", "\u0661", "1\u0662"):
        rec = recgen.record(1, bad, "n1")
        with pytest.raises(store.RecordError, match="step.step_id"):
            store.parse_record(rec)
        res = store.ingest_records(store.connect(":memory:"),
                                   [recgen.record(2, "0", "n1"), rec])
        assert res.new_steps == 1 and len(res.errors) == 1, bad
        assert "step.step_id" in res.errors[0][1]
        with pytest.raises(store.RecordError, match="step_id"):
            store.parse_lost({"format": store.records.LOST_FORMAT, "version": 1, "cluster": "c",
                              "job_id": 1, "step_id": bad, "node": "n1",
                              "lost_at_ns": 1})
    for good in ("0", "123456789012345678901234567890123456789012345678901234567890123456789",
                 "batch", "extern", "interactive", "a.b+c-d_e"):
        assert store.parse_record(recgen.record(1, good, "n1")).step[
            store.records.STEP_AT["step_id"]] == good
