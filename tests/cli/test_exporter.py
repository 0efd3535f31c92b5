"""`joulestep exporter`: its figures against truths computed here from the
records ingested, its incremental view against a fresh read of the store,
its exposition against promtool and the OpenMetrics parser."""
import json
import random
import sqlite3
import re

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

import promrun
import recgen
from joulestep import config, exporter as ex, store

J = recgen.J
S = recgen.S
PRICE = 0.25                 # tests/cli/conftest.py's site config
BASE_KHZ, LOW_KHZ = 2_400_000, 1_200_000
MODEL = {"a": 2.0, "b": 2.0, "c": 10.0, "fmax_khz": BASE_KHZ}


def job(job_id, t_s, *, user="alice", account="physics", partition="debug",
        policy="io-dvfs", cpu=100, dram=20, batch=False, node="n1",
        cluster="demo", step="0", dur=10):
    """One job's records: step `step` on `node` with a compute phase and a
    write phase (lowered to LOW_KHZ under io-dvfs); with batch, a batch
    step on the same node around it (it fits: step 0 runs inside it)."""
    low = LOW_KHZ if policy == "io-dvfs" else None
    ph = [recgen.phase(0, "compute", t_s + 1, 4, cpu * 0.4, dram * 0.4),
          recgen.phase(1, "write", t_s + 5, 2, cpu * 0.2, dram * 0.2,
                       freq_khz=low)]
    out = [recgen.record(job_id, step, node, start_s=t_s + 1, dur_s=dur,
                         cpu_j=cpu, dram_j=dram, user=user, account=account,
                         partition=partition, policy=policy, phases=ph,
                         first_seen_s=t_s, cluster=cluster, tags={})]
    if batch:
        out.append(recgen.record(job_id, "batch", node, start_s=t_s, dur_s=dur + 5,
                                 cpu_j=cpu + 50, dram_j=dram + 10, user=user,
                                 account=account, partition=partition,
                                 policy="none", first_seen_s=t_s,
                                 cluster=cluster, tags={}))
    return out


def power(f_khz):
    return MODEL["a"] * (f_khz / 1e6) ** MODEL["b"] + MODEL["c"]


def counted(records):
    """(record, counted energy uJ, counted duration ns) of each record: a
    batch step counts its own figures minus those of the steps of its job
    and node (they run inside it in these records: nesting rule)."""
    inner = {}
    for r in records:
        if r["step"]["step_id"] != "batch":
            k = (r["cluster"], r["job"]["job_id"], r["step"]["node"])
            inner.setdefault(k, []).append(r["step"])
    for r in records:
        s = r["step"]
        e = s["energy_cpu_uj"] + s["energy_dram_uj"]
        d = s["duration_ns"]
        if s["step_id"] == "batch":
            for i in inner.get((r["cluster"], r["job"]["job_id"], s["node"]), []):
                e -= i["energy_cpu_uj"] + i["energy_dram_uj"]
                d -= i["duration_ns"]
        yield r, e, d


def truth(records, with_model=False):
    """Per (cluster, user, account, partition, policy): energy J, seconds,
    steps; per (cluster, policy): saving J -- from the records (counted);
    a write phase lowered from BASE_KHZ to LOW_KHZ saves
    E x (P(base)/P(low) - 1) (no slowdown term in MODEL)."""
    energy, secs, steps, saving = {}, {}, {}, {}
    for r, e, d in counted(records):
        j, s = r["job"], r["step"]
        key = (r["cluster"], j["user"], j["account"], j["partition"],
               s["policy"] or "none")
        energy[key] = energy.get(key, 0) + e / J
        secs[key] = secs.get(key, 0) + d / S
        steps[key] = steps.get(key, 0) + 1
        sk = (r["cluster"], s["policy"] or "none")
        saving.setdefault(sk, 0.0)
        for p in r["phases"]:
            if with_model and p["freq_khz"]:
                saving[sk] += ((p["energy_cpu_uj"] + p["energy_dram_uj"]) / J
                               * (power(BASE_KHZ) / power(p["freq_khz"]) - 1))
    return energy, secs, steps, saving


def add_model(conn):
    conn.execute("INSERT INTO power_models (node_model, phase_kind, a, b, c, "
                 "fmax_khz, fitted_ns) VALUES ('*', '*', ?, ?, ?, ?, 1)",
                 (MODEL["a"], MODEL["b"], MODEL["c"], MODEL["fmax_khz"]))


def parse(text: str) -> dict:
    """name -> {label tuple (sorted items): value} of a Prometheus text
    exposition (one sample per line)."""
    out: dict = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$", line)
        labels = tuple(sorted(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or "")))
        out.setdefault(m.group(1), {})[labels] = float(m.group(3))
    return out


def by_labels(samples: dict, names=ex.LABELS) -> dict:
    return {tuple(dict(k)[n] for n in names): v for k, v in samples.items()}


def approx(d: dict):
    return {k: pytest.approx(v, rel=1e-9, abs=1e-9) for k, v in d.items()}


@pytest.fixture
def conn(db):
    c = store.connect(db)
    yield c
    c.close()


def view_of(db, **kw):
    s = config.load()
    return ex.StoreView(lambda: store.connect(db, write=False), s, **kw)


RECORDS = (job(1, 0, batch=True) + job(2, 30, user="bob", account="chem",
                                       partition="long", policy="monitor", cpu=200)
           + job(3, 60, user="carol", account="bio", policy=None, cpu=50)
           + job(4, 90, partition="long", cpu=70, dram=7)
           + job(5, 120, cluster="other", cpu=80))


# ------------------------------------------------------------------ figures

def test_figures_match_the_records(db, conn, run):
    store.ingest_records(conn, RECORDS)
    add_model(conn)
    energy, secs, steps, saving = truth(RECORDS, with_model=True)
    m = parse(run("exporter", "--once").stdout)
    assert by_labels(m["joulestep_energy_joules_total"]) == approx(energy)
    assert by_labels(m["joulestep_step_seconds_total"]) == approx(secs)
    assert by_labels(m["joulestep_steps_total"]) == approx(steps)
    cost = {k + ("CHF",): e / 3.6e6 * PRICE for k, e in energy.items()}
    assert by_labels(m["joulestep_cost_total"], ex.LABELS + ("currency",)) == \
        approx(cost)
    assert by_labels(m["joulestep_saving_joules_total"], ex.SAVING_LABELS) == \
        approx(saving)
    assert saving[("demo", "io-dvfs")] > 0
    assert not any(v for v in m["joulestep_saving_not_estimated_steps_total"].values())
    assert m["joulestep_records_quarantined"] == {(): 0.0}
    assert m["joulestep_records_lost_total"] == {(): 0.0}

    # the saving is the one `joulestep job` shows, job by job
    jobs = {}
    for r in RECORDS:
        jobs.setdefault((r["cluster"], r["job"]["job_id"]), r["step"]["policy"])
    per_policy = {}
    for (cl, jid), pol in jobs.items():
        t = json.loads(run("job", jid, "--cluster", cl, "--format",
                           "json").stdout)["totals"]
        per_policy[(cl, pol or "none")] = per_policy.get(
            (cl, pol or "none"), 0) + (t["saving_j"] or 0)
    for k, v in per_policy.items():
        assert saving[k] == pytest.approx(v, rel=1e-9, abs=1e-9)


def test_no_policy_is_one_label_value(db, conn, run):
    """A step without a policy (NULL) and one whose policy is "none" are the
    same series, policy="none" (there were two: "none" and "(none)")."""
    recs = job(1, 0, policy=None) + job(2, 30, policy="none") + job(3, 60)
    assert {r["step"]["policy"] for r in recs} == {None, "none", "io-dvfs"}
    store.ingest_records(conn, recs)
    m = parse(run("exporter", "--once").stdout)
    for name in ("joulestep_energy_joules_total", "joulestep_steps_total",
                 "joulestep_saving_joules_total"):
        pols = {dict(k)["policy"] for k in m[name]}
        assert pols == {"none", "io-dvfs"}, (name, pols)
    steps = by_labels(m["joulestep_steps_total"])
    assert steps[("demo", "alice", "physics", "debug", "none")] == 2


def unmeasured(recs):
    """The records as a node without an energy backend writes them."""
    for r in recs:
        s = r["step"]
        s["energy_cpu_uj"] = s["energy_dram_uj"] = s["energy_total_uj"] = None
        r["zones"], r["phases"] = [], []
        r["provenance"]["backend"] = None
        r["provenance"]["errors"] = ["energy: no backend"]
    return recs


def test_unmeasured_steps_are_counted(db, conn, run):
    """Steps ingested without energy (no backend, an uncertain counter): the
    counter a rollout watches (docs/admin-guide.md, "Rollout and back-out")."""
    recs = job(1, 0) + unmeasured(job(2, 30, user="bob")) + unmeasured(
        job(3, 60, user="bob", batch=True))
    store.ingest_records(conn, recs)
    m = parse(run("exporter", "--once").stdout)
    got = by_labels(m["joulestep_steps_unmeasured_total"])
    want = {}
    for r in recs:
        j = r["job"]
        k = (r["cluster"], j["user"], j["account"], j["partition"],
             r["step"]["policy"] or "none")
        want[k] = want.get(k, 0) + (r["step"]["energy_cpu_uj"] is None)
    assert got == want and sum(want.values()) == 3
    steps = by_labels(m["joulestep_steps_total"])
    assert sum(steps.values()) == len(recs)


def test_without_a_model_savings_are_not_estimated(db, conn, run):
    store.ingest_records(conn, RECORDS)
    m = parse(run("exporter", "--once").stdout)
    lowered = {(r["cluster"], r["step"]["policy"]) for r in RECORDS
               if any(p["freq_khz"] for p in r["phases"])}
    got = {k: v for k, v in by_labels(m["joulestep_saving_not_estimated_steps_total"],
                                      ex.SAVING_LABELS).items() if v}
    want = {}
    for r in RECORDS:
        k = (r["cluster"], r["step"]["policy"])
        if k in lowered and any(p["freq_khz"] for p in r["phases"]):
            want[k] = want.get(k, 0) + 1
    assert got == want and want
    assert not any(m["joulestep_saving_joules_total"].values())


def test_labels_option_sums_the_rest(db, conn, run):
    store.ingest_records(conn, RECORDS)
    energy, _, _, _ = truth(RECORDS)
    m = parse(run("exporter", "--once", "--labels", "account").stdout)
    want = {}
    for k, e in energy.items():
        want[(k[2],)] = want.get((k[2],), 0) + e
    assert by_labels(m["joulestep_energy_joules_total"], ("account",)) == approx(want)
    assert list(m["joulestep_saving_joules_total"]) == [()]   # no policy label
    r = run("exporter", "--once", "--labels", "user,job_id", ok=False)
    assert "job_id" in r.output


def test_quarantined_records_are_counted(tmp_path, db, run):
    spool = tmp_path / "spool"
    for r in RECORDS[:3]:
        recgen.write(spool, r)
    for i in range(3):
        (spool / f"bad{i}.json").write_text("{ not json")
    run("ingest", spool, ok=False)          # exit 1: records quarantined
    m = parse(run("exporter", "--once").stdout)
    assert m["joulestep_records_quarantined"] == {(): 3.0}
    assert sum(m["joulestep_steps_total"].values()) == 3


def test_exposition_passes_promtool_and_the_openmetrics_parser(db, conn):
    store.ingest_records(conn, RECORDS)
    v = view_of(db)
    v.refresh()
    res = promrun.promtool_check(ex.text(v))
    assert res.returncode == 0, res.stdout + res.stderr
    om = ex.text(v, openmetrics=True).decode()
    assert om.endswith("# EOF\n")
    fams = {f.name: f for f in text_string_to_metric_families(om)}
    assert fams["joulestep_energy_joules"].type == "counter"
    assert fams["joulestep_energy_joules"].unit == "joules"
    assert not any("job" in s.labels for f in fams.values() for s in f.samples)


# ------------------------------------------------------------------ incremental

def test_incremental_refresh_follows_new_steps_and_nesting(db, conn):
    first = job(1, 0) + job(2, 30, user="bob")
    store.ingest_records(conn, first)
    v = view_of(db)
    v.refresh()
    # job 1's batch step arrives later and takes step 0 inside it (step 0's
    # counted figures stay, the batch counts the rest); new job 3
    later = [r for r in job(1, 0, batch=True) if r["step"]["step_id"] == "batch"]
    later += job(3, 60, user="carol", account="bio")
    store.ingest_records(conn, later)
    s = v.refresh()
    assert v.full_reads == 1
    energy, _, steps, _ = truth(first + later)
    got = {k: t[ex.TOTAL] / J for k, t in s.totals.items()}
    assert got == approx(energy)
    assert {k: t[ex.STEPS] for k, t in s.totals.items()} == steps


def test_a_step_of_a_settled_job_makes_a_full_read(db, conn):
    first = job(1, 0) + job(2, 3 * 3600, user="bob")
    store.ingest_records(conn, first)
    v = view_of(db, settle_hours=1)
    v.refresh()
    assert set(v.recent) == {2}                # job 1 is folded
    late = job(1, 0, step="1", node="n2", cpu=33)
    store.ingest_records(conn, late)
    s = v.refresh()
    assert v.full_reads == 2
    energy, *_ = truth(first + late)
    assert {k: t[ex.TOTAL] / J for k, t in s.totals.items()} == approx(energy)


def test_deleted_steps_and_new_models_make_a_full_read(db, conn):
    store.ingest_records(conn, RECORDS)
    v = view_of(db)
    v.refresh()
    conn.execute("DELETE FROM jobs WHERE job_id = 2")      # a purge
    s = v.refresh()
    assert v.full_reads == 2
    energy, *_ = truth([r for r in RECORDS if r["job"]["job_id"] != 2])
    assert {k: t[ex.TOTAL] / J for k, t in s.totals.items()} == approx(energy)
    add_model(conn)
    s = v.refresh()
    assert v.full_reads == 3
    _, _, _, saving = truth([r for r in RECORDS if r["job"]["job_id"] != 2], True)
    got = ex._project(s.totals, ex.SAVING_LABELS)
    assert {k: t[ex.SAVING] for k, t in got.items()} == approx(saving)


@pytest.mark.parametrize("settle_hours", [0.0, 1.0, 1000.0])
def test_incremental_view_equals_a_fresh_read(db, conn, settle_hours):
    rng = random.Random(12 + int(settle_hours))
    users = [("alice", "physics"), ("bob", "chem"), ("carol", "bio")]
    v = view_of(db, settle_hours=settle_hours)
    t, nid, stored = 0, 0, []
    for _ in range(6):
        recs = []
        for _ in range(rng.randint(1, 4)):
            nid += 1
            t += rng.randint(60, 3 * 3600)
            u, a = rng.choice(users)
            recs += job(nid, t, user=u, account=a, batch=rng.random() < 0.5,
                        policy=rng.choice(["io-dvfs", "monitor", None]),
                        cpu=rng.randint(20, 300))
        if nid > 2 and rng.random() < 0.7:     # a later step of an earlier job
            old = rng.randint(1, nid - 1)
            start = next(r["job"]["first_seen_ns"] for r in stored + recs
                         if r["job"]["job_id"] == old) // S - recgen.T0 // S
            recs += job(old, start, step=str(rng.randint(1, 9)),
                        node=f"n{rng.randint(2, 9)}", cpu=rng.randint(5, 50))
        store.ingest_records(conn, recs)
        stored += recs
        s = v.refresh()
        fresh = view_of(db).refresh()
        assert s.totals.keys() == fresh.totals.keys()
        for k in s.totals:
            assert s.totals[k] == pytest.approx(fresh.totals[k], rel=1e-12)
    if settle_hours > 100:    # nothing folded: no late step forces a full read
        assert v.full_reads == 1


class Flaky:
    """A store connection whose first phases query fails (locked)."""

    failed = False

    def __init__(self, conn):
        object.__setattr__(self, "conn", conn)

    def execute(self, sql, *args):
        if "FROM phases" in sql and not Flaky.failed:
            Flaky.failed = True
            raise sqlite3.OperationalError("database is locked")
        return self.conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self.conn, name)

    def __setattr__(self, name, value):
        setattr(self.conn, name, value)


def test_a_failed_read_keeps_the_figures_and_reads_all_next(db, conn):
    store.ingest_records(conn, RECORDS)
    v = view_of(db)
    before = v.refresh()
    conn.execute("DELETE FROM jobs WHERE job_id = 3")   # a full read is due
    Flaky.failed = False
    real = v.connect
    v.connect = lambda: Flaky(real())
    with pytest.raises(sqlite3.OperationalError):
        v.refresh()                 # fails in the middle of the full read
    assert v.snapshot is before and Flaky.failed
    s = v.refresh()
    energy, *_ = truth([r for r in RECORDS if r["job"]["job_id"] != 3])
    assert {k: t[ex.TOTAL] / J for k, t in s.totals.items()} == approx(energy)


def test_records_lost_come_from_the_store(db, conn, run):
    """Lost documents the plugin left (docs/reliability.md, "Faults: records
    and counters") are counted once each, however often ingested."""
    store.ingest_records(conn, RECORDS)
    rows = [("demo", 8 + i, "batch", 0, "n1", 10**18 + i, "spool full") for i in range(3)]
    store.insert_lost(conn, rows)
    store.insert_lost(conn, rows[:2])
    m = parse(run("exporter", "--once").stdout)
    assert m["joulestep_records_lost_total"] == {(): 3.0}


def test_policy_label_is_the_family_not_the_ratio(db, conn, run):
    """fixed:R and phase:... with any ratio a user writes: one series per
    family, so the label's cardinality stays bounded; the energies add up."""
    recs = (job(11, 0, policy="fixed:0.6", cpu=10) + job(12, 30, policy="fixed:0.75", cpu=20)
            + job(13, 60, policy="phase:write=0.5", cpu=40) + job(14, 90, policy="monitor", cpu=80))
    store.ingest_records(conn, recs)
    energy, *_ = truth(recs)
    want = {}
    for (cl, u, a, p, pol), e in energy.items():
        k = (cl, u, a, p, pol.split(":")[0])
        want[k] = want.get(k, 0) + e
    got = by_labels(parse(run("exporter", "--once").stdout)["joulestep_energy_joules_total"])
    assert {k[4] for k in got} == {"fixed", "phase", "monitor"}
    assert got == approx(want)
