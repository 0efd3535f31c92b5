"""Steps inside other steps (srun inside batch on one node): counted once.

Hand-checked job 100 (alice), two nodes:
  batch   on n1, 1..21 s, 400 + 100 J = 500 J, policy none
  step 0  on n1, 2..12 s, 240 +  60 J = 300 J, io-dvfs  -> inside batch
  step 0  on n2, 2..12 s, 200 +  50 J = 250 J, io-dvfs  -> no batch on n2
RAPL measures the whole node, so on n1 batch's 500 J include step 0's
300 J: batch counts the other 200 J (160 + 40) in 10 s; the job is
500 + 250 = 750 J (CPU 160 + 240 + 200 = 600, DRAM 40 + 60 + 50 = 150).
"""
import csv
import io
import itertools
import shutil

import pytest

import recgen
from conftest import dump_tables, jrun
from joulestep import nesting, store
from recgen import S


def job100():
    kw = dict(user="alice", name="mpi", tags={"study": "nest"})
    return [
        recgen.record(100, "batch", "n1", start_s=1, dur_s=20, cpu_j=400,
                      dram_j=100, policy="none", **kw),
        recgen.record(100, "0", "n1", start_s=2, dur_s=10, cpu_j=240, dram_j=60,
                      **kw),
        recgen.record(100, "0", "n2", start_s=2, dur_s=10, cpu_j=200, dram_j=50,
                      **kw),
    ]


def spool_of(tmp_path, name, recs):
    d = tmp_path / name
    for r in recs:
        recgen.write(d, r)
    return d


def counted(db):
    """Natural key -> (inside step, counted cpu, dram, total, duration)."""
    conn = store.connect(db)
    try:
        return {(j, n, s): rest for j, n, s, *rest in conn.execute(
            "SELECT j.job_id, nd.name, s.step_id, c.step_id, s.counted_cpu_uj, "
            "s.counted_dram_uj, s.counted_total_uj, s.counted_duration_ns "
            "FROM steps s JOIN jobs j ON j.job_pk = s.job_pk JOIN nodes nd ON "
            "nd.node_pk = s.node_pk LEFT JOIN steps c ON c.step_pk = s.inside_step_pk")}
    finally:
        conn.close()


EXPECTED = {
    (100, "n1", "batch"): [None, 160_000_000, 40_000_000, 200_000_000, 10 * S],
    (100, "n1", "0"): ["batch", 240_000_000, 60_000_000, 300_000_000, 10 * S],
    (100, "n2", "0"): [None, 200_000_000, 50_000_000, 250_000_000, 10 * S],
}


def test_batch_and_srun_counted_once(run, db, tmp_path):
    run("ingest", spool_of(tmp_path, "sp", job100()))
    assert counted(db) == EXPECTED
    s = jrun(run, "job", 100)
    t = s["totals"]
    assert (t["energy_total_j"], t["energy_cpu_j"], t["energy_dram_j"]) == (750, 600, 150)
    assert t["steps_inside_others"] == 1
    st = {(x["step_id"], x["node"]): x for x in s["steps"]}
    # every step is still shown with its own measurement and phases
    assert st[("batch", "n1")]["energy_total_j"] == 500
    assert st[("0", "n1")]["energy_total_j"] == 300
    assert st[("0", "n1")]["inside_step"] == "batch"
    assert st[("0", "n2")]["inside_step"] is None
    assert st[("batch", "n1")]["counted"] == "rest"
    assert st[("batch", "n1")]["counted_energy_total_j"] == 200
    assert st[("0", "n1")]["counted"] == "all"
    assert st[("0", "n2")]["counted"] == "all" and st[("0", "n2")]["note"] is None

    r = jrun(run, "report")
    assert r["totals"]["energy_total_j"] == 750 and r["totals"]["steps"] == 3
    assert r["totals"]["step_seconds"] == 30            # 10 + 10 + 10
    assert r["groups"][0]["avg_power_w"] == pytest.approx(25.0)
    pol = {g["key"]: g["energy_total_j"] for g in jrun(run, "report", "--by",
                                                      "policy")["groups"]}
    # the srun steps' energy stays with their policy; batch keeps the rest
    assert pol == {"io-dvfs": 550, "none": 200}
    node = {g["key"]: g["energy_total_j"] for g in jrun(run, "report", "--by",
                                                       "node")["groups"]}
    assert node == {"n1": 500, "n2": 250}


def test_job_text_notes_the_nested_step(run, tmp_path):
    run("ingest", spool_of(tmp_path, "sp", job100()))
    out = run("job", 100).stdout
    assert out.startswith("Job 100 (mpi)")
    assert "Energy 750 J (CPU 600 J, DRAM 150 J)" in out
    flat = " ".join(out.split())
    assert ("- step 0 on n1: inside step batch, whose measurement includes it: "
            "added in full; step batch adds only the rest") in flat
    assert ("- step batch on n1: contains step(s) 0: its 500 J include theirs, "
            "so it adds only the other 200 J to the job total") in flat
    assert "step 0 on n2" not in flat
    assert max(len(line) for line in out.splitlines()) <= 80
    rows = list(csv.DictReader(io.StringIO(
        run("job", 100, "--format", "csv").stdout)))
    assert any((r["level"], r["step_id"], r["node"], r["inside_step"],
                r["counted"], r["counted_energy_total_j"]) ==
               ("step", "0", "n1", "batch", "all", "300.0") for r in rows)


@pytest.mark.parametrize("order", ["srun_first", "batch_first"])
def test_ingest_order_does_not_matter(run, db, tmp_path, order):
    recs = job100()
    first, later = (recs[1:], recs[:1]) if order == "srun_first" else (recs[:1], recs[1:])
    run("ingest", spool_of(tmp_path, "a", first))
    run("ingest", spool_of(tmp_path, "b", later))
    assert counted(db) == EXPECTED
    assert jrun(run, "job", 100)["totals"]["energy_total_j"] == 750


def test_every_order_in_one_batch_gives_the_same_rows(tmp_path):
    recs = job100() + [recgen.record(100, "extern", "n2", start_s=0, dur_s=30,
                                     cpu_j=500, dram_j=100, policy="none")]
    results = set()
    for i, perm in enumerate(itertools.permutations(recs)):
        conn = store.connect(tmp_path / f"{i}.db")
        store.ingest_records(conn, list(perm))
        conn.close()
        results.add(tuple((k, tuple(v)) for k, v in
                          sorted(counted(tmp_path / f"{i}.db").items())))
    assert len(results) == 1
    got = dict(results.pop())
    # extern on n2 (600 J) contains step 0 there (250 J): it counts 350 J
    assert got[(100, "n2", "extern")] == (None, 300_000_000, 50_000_000,
                                          350_000_000, 20 * S)
    assert got[(100, "n2", "0")][0] == "extern"


def test_ingest_twice_changes_nothing(run, db, tmp_path):
    sp = spool_of(tmp_path, "sp", job100())
    run("ingest", sp)

    def dump():
        return dump_tables(db)
    before = dump()
    run("ingest", sp)                               # unchanged files: skipped
    assert dump() == before
    conn = store.connect(db)
    res = store.ingest_records(conn, job100())      # natural keys: no-ops
    conn.close()
    assert res.new_steps == 0 and res.duplicate_steps == 3
    assert dump() == before


def test_nested_steps_that_do_not_fit_are_not_added(run, tmp_path):
    # two srun steps at the same time inside batch: 300 + 300 J > batch's
    # 500 J (each measured the node during the overlap): batch counts its
    # 500 J, the nested steps nothing
    recs = [recgen.record(101, "batch", "n1", start_s=1, dur_s=20, cpu_j=400,
                          dram_j=100, policy="none"),
            recgen.record(101, "0", "n1", start_s=2, dur_s=10, cpu_j=240, dram_j=60),
            recgen.record(101, "1", "n1", start_s=3, dur_s=10, cpu_j=240, dram_j=60)]
    run("ingest", spool_of(tmp_path, "sp", recs))
    s = jrun(run, "job", 101)
    assert s["totals"]["energy_total_j"] == 500
    st = {x["step_id"]: x for x in s["steps"]}
    assert st["batch"]["counted"] == "all" and st["batch"]["counted_energy_total_j"] == 500
    assert st["0"]["counted"] == st["1"]["counted"] == "none"
    assert "not added to the job total" in st["0"]["note"]
    assert any("steps 0 and 1 on n1 ran at the same time" in c for c in s["caveats"])
    assert jrun(run, "report")["totals"]["energy_total_j"] == 500


def test_concurrent_steps_without_batch_are_flagged(run, tmp_path):
    # no batch step on n2: both steps are counted (the overlap twice), and
    # `job` says so
    recs = [recgen.record(102, "0", "n2", start_s=1, dur_s=10, cpu_j=100, dram_j=0),
            recgen.record(102, "1", "n2", start_s=5, dur_s=10, cpu_j=100, dram_j=0),
            recgen.record(102, "2", "n2", start_s=15, dur_s=5, cpu_j=50, dram_j=0)]
    run("ingest", spool_of(tmp_path, "sp", recs))
    s = jrun(run, "job", 102)
    assert s["totals"]["energy_total_j"] == 250
    ov = [c for c in s["caveats"] if "ran at the same time" in c]
    assert len(ov) == 1 and ov[0].startswith("steps 0 and 1 on n2")
    assert "counts their overlap twice" in ov[0]


def test_compare_io_counts_a_run_once(run, tmp_path):
    recs = job100()
    for r in recs:
        r["job"]["tags"] = {"approach": "DC(1)", "study": "nest"}
    run("ingest", spool_of(tmp_path, "sp", recs))
    t = jrun(run, "compare", "--by", "tag:approach", "--what", "io")["table"][0]
    # n1: batch's 500 J (200 + the 300 J step inside it), n2: 250 J
    assert t["energy_j"] == 750 and t["nodes"] == 2
    assert (t["node_min_j"], t["node_max_j"]) == (250, 500)
    assert t["runtime_s"] == 20


# ------------------------------------------------------------------ pure rule

def step(key, sid, start, end, cpu, dram=0):
    tot = None if cpu is None else cpu + dram
    return nesting.Step(key, sid, 0, start * S, end * S, (end - start) * S, cpu,
                        dram if cpu is not None else None, tot)


def test_rule_three_levels_and_order():
    steps = [step("e", "extern", 0, 200, 3000), step("b", "batch", 5, 150, 1000),
             step("0", "0", 10, 60, 300), step("1", "1", 70, 100, 200)]
    for perm in itertools.permutations(steps):
        got = nesting.attribute(list(perm))
        assert got["e"] == (None, 2000, 0, 2000, 55 * S)     # 200 - 145 s
        assert got["b"] == ("e", 500, 0, 500, 65 * S)        # 145 - 50 - 30 s
        assert got["0"] == ("b", 300, 0, 300, 50 * S)
        assert got["1"] == ("b", 200, 0, 200, 30 * S)
        assert nesting.overlaps(list(perm)) == []


def test_rule_slack_unmeasured_and_numbered():
    # ends 0.5 s after batch: inside (teardown order); 2 s after: not inside
    got = nesting.attribute([step("b", "batch", 0, 10, 100), step("0", "0", 1, 10.5, 40)])
    assert got["0"].inside == "b"
    got = nesting.attribute([step("b", "batch", 0, 10, 100), step("0", "0", 1, 12, 40)])
    assert got["0"].inside is None and got["b"].total_uj == 100
    # batch not measured: its nested step keeps its energy
    got = nesting.attribute([step("b", "batch", 0, 10, None), step("0", "0", 1, 5, 40)])
    assert got["b"] == (None, None, None, None, 6 * S)
    assert got["0"] == ("b", 40, 0, 40, 4 * S)
    # numbered steps never contain each other
    got = nesting.attribute([step("0", "0", 0, 100, 90), step("1", "1", 10, 20, 10)])
    assert got["1"].inside is None and got["0"].total_uj == 90
    assert nesting.overlaps([step("0", "0", 0, 100, 90), step("1", "1", 10, 20, 10)]) \
        == [("0", "1")]


def test_overlaps_matches_the_pairwise_definition():
    import random
    rnd = random.Random(7)
    for _ in range(200):
        steps = [step("b", "batch", 0, 50, 1000)] if rnd.random() < 0.5 else []
        for i in range(rnd.randint(1, 8)):
            a = rnd.randint(0, 45)
            steps.append(step(str(i), str(i), a, a + rnd.randint(0, 20), 10))
        want = set()
        for x, y in itertools.combinations(steps, 2):
            nested = nesting._contains(x, y) or nesting._contains(y, x)
            ov = min(x.end_ns, y.end_ns) - max(x.start_ns, y.start_ns)
            if not nested and ov > nesting.SLACK_NS:
                want.add(frozenset((x.key, y.key)))
        got = [frozenset(p) for p in nesting.overlaps(steps)]
        assert len(got) == len(set(got)) and set(got) == want
        # each outermost step and everything inside it count exactly its
        # own measurement: the node's energy, once
        c = nesting.attribute(steps)

        def top(k):
            while c[k].inside is not None:
                k = c[k].inside
            return k
        for s in steps:
            if c[s.key].inside is None:
                assert sum(c[x.key].total_uj for x in steps
                           if top(x.key) == s.key) == s.total_uj


def test_pre_release_database_is_refused_clearly(run, db, engine):
    if engine != "sqlite":
        pytest.skip("PostgreSQL databases start at the current schema")
    conn = store.connect(db)
    conn.execute("ALTER TABLE steps DROP COLUMN counted_total_uj")
    conn.close()
    r = run("report", ok=False)
    assert "pre-release joulestep" in r.output and "ingest the spool again" in r.output
