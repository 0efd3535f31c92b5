"""Job identity at ingest (docs/cli.md, "Which records are one job").

Records of one (cluster, job_id) whose windows [first seen, step end]
overlap or lie within the gap G (default 24 h) of each other are one job;
otherwise the ID was recycled.  The order records arrive in must not matter
and ingesting twice changes nothing: every test here compares the database
after many orders of the same records, and against groups worked out by
hand from how the records were built.
"""
import itertools
import json
import random

import pytest
from conftest import empty_db

import recgen
from recgen import J, S, T0
from joulestep import store

H = 3600            # seconds per hour
D = 86400           # seconds per day


def new(job, step, node, fs, start, dur, *, source="prolog", **kw):
    """A current-plugin record: job first seen at T0+fs, step from T0+start."""
    kw.setdefault("account", None if source == "step" else "physics")
    kw.setdefault("partition", None if source == "step" else "debug")
    return recgen.record(job, step, node, first_seen_s=fs, job_source=source,
                         start_s=start, dur_s=dur, **kw)


def old(job, step, node, submit, start, dur, *, fallback=False, **kw):
    """A record of the earlier plugin, with a submit time from slurmctld,
    or (fallback) the step start when slurmctld did not answer."""
    r = recgen.record(job, step, node, submit_s=submit, start_s=start, dur_s=dur, **kw)
    r["provenance"]["submit_time_source"] = "step_start" if fallback else "slurmctld"
    return r


# The record set.  EXPECTED: per job ID, its jobs as (first seen s, last
# seen s, {(node, step)}), from how the records are built.
RECORDS = [
    # 100: prolog on node02 ran 3 s after node01's
    new(100, "batch", "node01", 0, 1, 1000, cpu_j=130, dram_j=26),
    new(100, "0", "node01", 0, 10, 500, cpu_j=100, dram_j=20),
    new(100, "0", "node02", 3, 10, 500, cpu_j=90, dram_j=10),
    # 200: node02's first step came 29 h in; only the 30 h batch step spans it
    new(200, "batch", "node01", 0, 1, 30 * H),
    new(200, "0", "node01", 0, 5, 100),
    new(200, "1", "node02", 29 * H, 29 * H + 5, 100),
    # 300: the ID recycled 3 days later: two jobs
    new(300, "0", "node01", 0, 1, 100, user="alice"),
    new(300, "0", "node01", 3 * D, 3 * D + 1, 100, user="carol"),
    # 400: no prolog on node03 (job_source step): still the same job
    new(400, "batch", "node01", 0, 1, 200),
    new(400, "0", "node03", 60, 60, 30, source="step"),
    # 500: X and Y are 40 h apart; Z, 20 h in, bridges them
    new(500, "0", "node01", 2, 2, 100, source="step"),                 # X
    new(500, "batch", "node02", 40 * H, 40 * H, 200, cpu_j=300),       # W
    new(500, "1", "node02", 40 * H, 40 * H + 1, 100, cpu_j=100),       # Y
    new(500, "2", "node03", 20 * H, 20 * H + 1, 10),                   # Z
    # 600: earlier plugin; step 5's controller lookup failed 8 days in
    old(600, "batch", "node01", 0, 10, 10 * D),
    old(600, "0", "node01", 0, 20, 100),
    old(600, "5", "node02", 8 * D, 8 * D, 100, fallback=True),
    old(600, "0", "node03", 0, 9 * D, 50),
]
BRIDGE = 13         # index of Z
EXPECTED = {
    100: [(0, 1001, {("node01", "batch"), ("node01", "0"), ("node02", "0")})],
    200: [(0, 30 * H + 1, {("node01", "batch"), ("node01", "0"), ("node02", "1")})],
    300: [(0, 101, {("node01", "0")}), (3 * D, 3 * D + 101, {("node01", "0")})],
    400: [(0, 201, {("node01", "batch"), ("node03", "0")})],
    500: [(2, 40 * H + 200, {("node01", "0"), ("node02", "batch"), ("node02", "1"),
                            ("node03", "2")})],
    600: [(0, 10 + 10 * D, {("node01", "batch"), ("node01", "0"), ("node02", "5"),
                           ("node03", "0")})],
}


def state(conn):
    """The database without surrogate keys: per job its columns and its
    steps (with nesting, counted energies and child row counts)."""
    steps = {}
    for r in conn.execute(
            "SELECT s.job_pk, n.name, s.step_id, s.het_component, s.start_ns, "
            "s.end_ns, s.energy_total_uj, c.step_id, s.counted_cpu_uj, "
            "s.counted_dram_uj, s.counted_total_uj, s.counted_duration_ns, "
            "(SELECT count(*) FROM phases p WHERE p.step_pk = s.step_pk), "
            "(SELECT group_concat(z.zone_id) FROM step_zones z "
            " WHERE z.step_pk = s.step_pk), "
            "(SELECT group_concat(t.key || '=' || t.value) FROM step_tags t "
            " WHERE t.step_pk = s.step_pk) "
            "FROM steps s JOIN nodes n ON n.node_pk = s.node_pk "
            "LEFT JOIN steps c ON c.step_pk = s.inside_step_pk"):
        steps.setdefault(r[0], []).append(tuple(r[1:]))
    out = []
    for r in conn.execute(
            "SELECT job_pk, cluster, job_id, first_seen_ns, last_seen_ns, "
            "submit_time_ns, start_time_ns, name, user_name, uid, gid, account, "
            "partition FROM jobs"):
        out.append((tuple(r[1:]), sorted(steps.pop(r[0], []))))
    assert not steps, "steps without a job"
    return sorted(out)


def groups(st):
    """job_id -> [(first seen s, last seen s, {(node, step)})] from state()."""
    out = {}
    for job, steps in st:
        out.setdefault(job[1], []).append(
            ((job[2] - T0) // S, (job[3] - T0) // S, {(s[0], s[1]) for s in steps}))
    return {k: sorted(v, key=lambda g: g[0]) for k, v in out.items()}


def ingest(recs, batch=store.BATCH_RECORDS, conn=None, gap_ns=None):
    conn = conn or store.connect(":memory:")
    kw = {} if gap_ns is None else {"gap_ns": gap_ns}
    res = store.ingest_records(conn, recs, batch=batch, **kw)
    assert not res.errors, res.errors
    return conn, res


def orders(n, count=24, seed=8):
    """Record orders: as listed, reversed, the bridge first and last, and
    seeded shuffles."""
    base = list(range(n))
    yield base
    yield base[::-1]
    yield [BRIDGE] + [i for i in base if i != BRIDGE]
    yield [i for i in base if i != BRIDGE] + [BRIDGE]
    rng = random.Random(seed)
    for _ in range(count):
        o = base[:]
        rng.shuffle(o)
        yield o


def test_records_group_into_the_expected_jobs():
    conn, res = ingest(RECORDS)
    assert res.new_steps == len(RECORDS)
    st = state(conn)
    assert groups(st) == EXPECTED
    jobs = {(j[1], j[2]): j for j, _ in st}
    # 500: account and partition filled from the records that have them
    assert jobs[(500, T0 + 2 * S)][10:] == ("physics", "debug")
    assert jobs[(400, T0)][10:] == ("physics", "debug")
    # 600: old records keep their submit time; new ones have none
    assert jobs[(600, T0)][4] == T0 and jobs[(100, T0)][4] is None
    assert {j[7] for j, _ in st if j[1] == 300} == {"alice", "carol"}


def test_nesting_after_grouping():
    st = dict((j[1:3], {(s[0], s[1]): s for s in steps})
              for j, steps in state(ingest(RECORDS)[0]))
    j100 = st[(100, T0)]
    # step 0 on node01 inside batch: batch adds only the rest (30 + 6 J)
    assert j100[("node01", "0")][6] == "batch"
    assert j100[("node01", "batch")][7:10] == (30 * J, 6 * J, 36 * J)
    assert j100[("node02", "0")][6] is None
    j500 = st[(500, T0 + 2 * S)]
    assert j500[("node02", "1")][6] == "batch"
    assert j500[("node02", "batch")][9] == (300 + 20 - 100 - 20) * J


@pytest.mark.parametrize("batch", [1000, 1, 5])
def test_ingest_order_does_not_matter(batch):
    want = state(ingest(RECORDS)[0])
    for order in orders(len(RECORDS)):
        conn, _ = ingest([RECORDS[i] for i in order], batch=batch)
        assert state(conn) == want, order


def test_ingesting_twice_changes_nothing():
    conn, _ = ingest(RECORDS, batch=4)
    want = state(conn)
    dump = list(conn.iterdump())
    for order in itertools.islice(orders(len(RECORDS)), 6):
        _, res = ingest([RECORDS[i] for i in order], batch=3, conn=conn)
        assert res.new_steps == 0 and res.duplicate_steps == len(RECORDS)
        assert state(conn) == want
        assert list(conn.iterdump()) == dump


def test_bridging_record_last_merges_two_jobs():
    x, w, y, z = RECORDS[10:14]
    conn, _ = ingest([x, w, y])
    assert [g[0] for g in groups(state(conn))[500]] == [2, 40 * H]
    _, res = ingest([z], conn=conn)
    assert res.new_steps == 1
    assert groups(state(conn))[500] == EXPECTED[500]
    assert conn.execute("SELECT count(*) FROM jobs WHERE job_id = 500").fetchone() == (1,)
    # the steps moved with their phases, zones and tags; nothing dangling
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert conn.execute("SELECT count(*) FROM step_zones").fetchone() == (4 * 3,)
    assert conn.execute("SELECT count(*) FROM step_tags").fetchone() == (0,)


def test_without_a_spanning_step_far_apart_nodes_are_two_jobs():
    """Known failure mode: no step spans node02's late start (> G)."""
    conn, _ = ingest([RECORDS[4], RECORDS[5]])
    assert [g[0] for g in groups(state(conn))[200]] == [0, 29 * H]


def test_gap_is_a_parameter():
    x, y = RECORDS[10], RECORDS[12]                       # 40 h apart
    assert len(groups(state(ingest([x, y])[0]))[500]) == 2
    assert len(groups(state(ingest([x, y], gap_ns=48 * H * S)[0]))[500]) == 1
    # G = 0: windows must overlap; 100's nodes still do
    st = groups(state(ingest(RECORDS[:3] + [x, RECORDS[13]], gap_ns=0)[0]))
    assert len(st[100]) == 1 and len(st[500]) == 2


def test_old_fallback_step_more_than_a_week_in_joins_its_job():
    """The earlier rule attached a step_start fallback only to a job
    submitted in the week before; a 10-day job's step 8 days in was split
    off into a job of its own."""
    conn, _ = ingest(RECORDS[14:18])
    assert groups(state(conn)) == {600: EXPECTED[600]}


def test_step_source_record_first_is_the_same_job():
    """A job_source=step record seen before its job's prolog records."""
    conn, _ = ingest([RECORDS[9], RECORDS[8]], batch=1)
    assert groups(state(conn)) == {400: EXPECTED[400]}


def test_same_step_key_twice_keeps_the_first_stored_step():
    """Two different records with one natural step key, incarnation
    included (a copy that differs): the first stored copy stays, both when
    the second arrives in its job (insert) and when a record bridges their
    two jobs (merge); the other is a conflict, counted and kept in
    step_conflicts (issue 21; before, the earlier start replaced it).  (With
    two incarnations, a requeued job's runs, both are kept:
    test_incarnations.py.)"""
    a = new(700, "0", "node01", 0, 1, 100, cpu_j=10)
    b = new(700, "0", "node01", 30 * H, 30 * H, 100, cpu_j=20)
    b["job"]["incarnation_ns"] = a["job"]["first_seen_ns"]
    bridge = new(700, "batch", "node02", 0, 1, 31 * H)
    for order in itertools.permutations([a, b, bridge]):
        first = next(r for r in order if r is not bridge)
        for batch in (1, 3):
            conn, res = ingest(list(order), batch=batch)
            st = state(conn)
            assert len(st) == 1 and len(st[0][1]) == 2
            steps = {(s[0], s[1]): s for s in st[0][1]}
            assert steps[("node01", "0")][3] == first["step"]["start_ns"]
            assert steps[("node01", "0")][5] == first["step"]["energy_total_uj"]
            (n,) = conn.execute("SELECT count(*) FROM step_conflicts").fetchone()
            assert n == 1, (order, batch)
            # counted at ingest when the copy met the stored step in its job
            # (not when a later merge of two jobs found the two copies)
            assert res.conflicts == (0 if order[-1] is bridge else 1)


def test_parse_record_job_fields():
    r = new(1, "0", "node01", 5, 6, 10)
    p = store.parse_record(r)
    assert p.window_ns == (T0 + 5 * S, T0 + 16 * S)
    o = old(1, "0", "node01", 2, 6, 10)
    assert store.parse_record(o).window_ns == (T0 + 2 * S, T0 + 16 * S)
    # unknown fields are still ignored; submit time may be absent
    r["job"]["something_new"] = 1
    del r["job"]["submit_time_ns"]
    assert store.parse_record(r).window_ns[0] == T0 + 5 * S
    bad = json.loads(json.dumps(r))
    del bad["job"]["first_seen_ns"]
    with pytest.raises(store.RecordError, match="job.first_seen_ns: missing"):
        store.parse_record(bad)
    bad["job"]["first_seen_ns"] = "soon"
    with pytest.raises(store.RecordError, match="job.first_seen_ns: expected an integer"):
        store.parse_record(bad)
    bad["job"]["first_seen_ns"] = 1
    bad["provenance"]["job_source"] = 7
    with pytest.raises(store.RecordError, match="provenance.job_source"):
        store.parse_record(bad)


def test_window_always_contains_the_step():
    """A first-seen time after the step start (clock stepped back between
    prolog and step) does not shrink the window below the step."""
    r = new(1, "0", "node01", 50, 6, 10)
    assert store.parse_record(r).window_ns == (T0 + 6 * S, T0 + 16 * S)


def test_cli_gap_option_and_config(run, tmp_path, db, monkeypatch):
    sp = tmp_path / "sp"
    x, y = RECORDS[10], RECORDS[12]
    for r in (x, y):
        recgen.write(sp, r)
    run("ingest", sp, "--job-gap-hours", "48")
    assert store.connect(db).execute("SELECT count(*) FROM jobs").fetchone() == (1,)
    empty_db(db)
    conf = tmp_path / "gap.conf"
    conf.write_text("[site]\njob_gap_hours = 1\n")
    run("--config", conf, "ingest", sp)
    assert store.connect(db).execute("SELECT count(*) FROM jobs").fetchone() == (2,)
    conf.write_text("[site]\njob_gap_hours = soon\n")
    r = run("--config", conf, "ingest", sp, ok=False)
    assert "job_gap_hours" in r.output
