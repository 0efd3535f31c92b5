"""The jobs' totals ingest keeps (migration 007) and the report that reads
them (store/read_report.report_queries): after every ingest, each job's totals equal
the sums over its steps, and `report` grouped by a job attribute gives, for
every window, what one scan of the steps gives (the truth here is that
scan, written in the test).  The records nest steps (batch and srun on one
node: counted_* differ from the energies), merge jobs (a record that
bridges two runs of one job ID), replace a step by an earlier copy, and
arrive in several ingests in a shuffled order."""
import random

import pytest

import recgen
from joulestep import config, report, store  # noqa: F401
from joulestep.store import read_report

H = 3600
S = 10**9
GAP_NS = 2 * H * S          # the job identity gap the test ingests with
USERS = ("alice", "bob", "carol")
POLICIES = ("monitor", "io-dvfs", "ckpt-dvfs")


def _job(rng, job, t0_h) -> list:
    """One job's records: maybe a batch step over its life, 1-4 srun steps
    (some on the batch step's node, so inside it)."""
    user, acct = rng.choice(USERS), rng.choice(("physics", "chem"))
    kw = dict(user=user, account=acct, t0=recgen.T0, submit_s=t0_h * H)
    recs, t = [], t0_h * H + 60
    n = rng.randint(1, 4)
    for k in range(n):
        dur = rng.randint(60, 1800)
        recs.append(recgen.record(job, str(k), rng.choice(("n1", "n2", "n3")),
                                  start_s=t, dur_s=dur, cpu_j=rng.randint(5, 50),
                                  dram_j=rng.randint(1, 5),
                                  policy=rng.choice(POLICIES), **kw))
        if rng.random() < 0.15:     # no counter readable: null energies
            recs[-1]["step"].update(energy_cpu_uj=None, energy_dram_uj=None,
                                    energy_total_uj=None)
            recs[-1].update(zones=[], provenance=dict(recs[-1]["provenance"],
                                                      errors=["energy: no zone"]))
        t += dur + rng.randint(0, 900)
    if rng.random() < 0.5:
        recs.append(recgen.record(job, "batch", "n1", start_s=t0_h * H, dur_s=t - t0_h * H + 60,
                                  cpu_j=500, dram_j=50, policy="monitor", **kw))
    return recs


def _records(seed) -> list:
    rng = random.Random(seed)
    recs = []
    for job in range(1, 31):
        recs += _job(rng, job, rng.uniform(0, 40))
    # job 99 runs twice, 10 h apart (two jobs), then a record bridges them
    recs += [recgen.record(99, "0", "n2", submit_s=0, start_s=60, dur_s=600, user="dave"),
             recgen.record(99, "1", "n2", submit_s=10 * H, start_s=10 * H + 60, dur_s=600,
                           user="dave")]
    bridge = [recgen.record(99, "2", "n3", submit_s=2 * H, start_s=4 * H, dur_s=5 * H,
                            user="dave")]
    # job 98: measured nothing (its totals' energies are NULL, as SQL's sums)
    none = recgen.record(98, "0", "n1", submit_s=H, start_s=H + 60, user="erin")
    none["step"].update(energy_cpu_uj=None, energy_dram_uj=None, energy_total_uj=None)
    none.update(zones=[], provenance=dict(none["provenance"], errors=["energy: no zone"]))
    recs.append(none)
    # a copy of job 1's first step that started earlier replaces it
    early = [dict(recs[0], step=dict(recs[0]["step"], start_ns=recs[0]["step"]["start_ns"] - S,
                                      end_ns=recs[0]["step"]["end_ns"] - S))]
    rng.shuffle(recs)
    third = len(recs) // 3
    return [recs[:third], recs[third:2 * third] + bridge, recs[2 * third:] + early]


TOTALS_TRUTH = (
    "SELECT j.job_pk, count(s.step_pk), min(s.start_ns), max(s.start_ns), "
    "sum(s.counted_cpu_uj), sum(s.counted_dram_uj), sum(s.counted_total_uj), "
    "sum(s.counted_duration_ns), sum(CASE WHEN s.counted_total_uj IS NOT NULL "
    "THEN s.counted_duration_ns END), sum(s.policy_active), "
    "sum(s.counted_total_uj * s.policy_active) FROM jobs j LEFT JOIN steps s "
    "ON s.job_pk = j.job_pk GROUP BY j.job_pk ORDER BY j.job_pk")
TOTALS = ("SELECT job_pk, steps_n, steps_first_start_ns, steps_last_start_ns, "
          "counted_cpu_uj, counted_dram_uj, counted_total_uj, counted_duration_ns, "
          "measured_duration_ns, policy_steps_n, policy_total_uj FROM jobs ORDER BY job_pk")


def _scan_truth(conn, col, since, until):
    """The report's figures per group from one scan of the steps."""
    where, args = [], []
    if since is not None:
        where.append("s.start_ns >= ?")
        args.append(since)
    if until is not None:
        where.append("s.start_ns < ?")
        args.append(until)
    rows = conn.execute(
        f"SELECT j.{col}, count(DISTINCT s.job_pk), count(*), sum(s.counted_cpu_uj), "
        "sum(s.counted_dram_uj), sum(s.counted_total_uj), sum(s.counted_duration_ns), "
        "sum(s.policy_active), sum(s.counted_total_uj * s.policy_active), "
        "sum(CASE WHEN s.counted_total_uj IS NOT NULL THEN s.counted_duration_ns END) "
        "FROM steps s JOIN jobs j ON j.job_pk = s.job_pk "
        + (f"WHERE {' AND '.join(where)} " if where else "") + f"GROUP BY j.{col}",
        args).fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


WINDOWS_H = [None, 0, 0.5, 3, 7.5, 10, 20, 33.3, 41, 48]


@pytest.mark.parametrize("seed", [1, 2])
def test_job_totals_and_report_windows(db, seed):
    conn = store.connect(db)
    settings = config.Settings(node_overhead_w=5.0)
    for part in _records(seed):
        res = store.ingest_records(conn, part, batch=7, gap_ns=GAP_NS)
        assert not res.errors, res.errors[:3]
        assert conn.execute(TOTALS).fetchall() == conn.execute(TOTALS_TRUTH).fetchall()
    assert conn.execute("SELECT count(*) FROM jobs WHERE job_id = 99").fetchone()[0] == 1
    nulls = conn.execute("SELECT count(*) FROM jobs WHERE counted_total_uj IS NULL"
                         ).fetchone()[0]
    assert nulls >= 1 and conn.execute("SELECT count(*) FROM steps WHERE "
                                       "counted_total_uj IS NULL").fetchone()[0] > 1
    windows = [(None if a is None else recgen.T0 + int(a * H * S),
                None if b is None else recgen.T0 + int(b * H * S))
               for a in WINDOWS_H for b in WINDOWS_H
               if a is None or b is None or a < b]
    cut = 0
    for by, col in (("user", "user_name"), ("account", "account")):
        for since, until in windows:
            got = {r[0]: tuple(r[1:]) for r in
                   read_report.group_rows(conn, by, since, until, None,
                                          settings.node_overhead_w is not None)}
            assert got == _scan_truth(conn, col, since, until), (by, since, until)
            cut += len(read_report.report_queries(by, since, until, None)) > 1
    assert cut, "no window cut a job"
    conn.close()


def test_migration_fills_the_totals_of_an_old_store(tmp_path):
    """A store at schema 6 (before the totals) gets them when opened."""
    db = tmp_path / "old.db"
    conn = store.connect(db)
    store.ingest_records(conn, _records(3)[0], gap_ns=GAP_NS)
    truth = conn.execute(TOTALS_TRUTH).fetchall()
    # back to schema 6: without 014's and 010's columns, 009's (GPU) tables and columns,
    # 008's table and columns, 007's index and columns (and 011's lost_records columns)
    conn.execute("DROP TABLE step_packages")  # 013's
    conn.execute("ALTER TABLE steps DROP COLUMN cpu_time_ns")
    for col in ("step_start_ns", "first_reading_ns"):
        conn.execute(f"ALTER TABLE lost_records DROP COLUMN {col}")
    conn.execute("DROP TABLE slurm_steps")                # and 015's
    conn.execute("DROP TABLE grid_intensity")             # migration 018's
    conn.execute("DROP TABLE step_shares")                # migration 017's
    for col in ("slurm_state", "slurm_exit_code", "slurm_elapsed_ns", "slurm_nnodes",
                "slurm_energy_uj"):
        conn.execute(f"ALTER TABLE jobs DROP COLUMN {col}")
    for col in ("dram_not_measured", "energy_node_uj", "node_meter_sources",
                "node_meter_integrated", "smt_aside_cpus"):
        conn.execute(f"ALTER TABLE steps DROP COLUMN {col}")
    conn.execute("DROP TABLE phase_gpus")
    conn.execute("DROP TABLE step_gpus")
    for col in ("energy_gpu_uj", "gpu_clock_mhz", "uncore_max_khz"):
        conn.execute(f"ALTER TABLE phases DROP COLUMN {col}")
    for col in ("energy_gpu_uj", "total_includes", "gpu_backend", "gpus_unmeasured",
                "gpu_clock_control"):
        conn.execute(f"ALTER TABLE steps DROP COLUMN {col}")
    conn.execute("DROP TABLE step_conflicts")
    conn.execute("ALTER TABLE steps DROP COLUMN source")
    conn.execute("ALTER TABLE steps DROP COLUMN record_digest")
    conn.execute("DROP INDEX jobs_by_steps_start")
    for col in TOTALS.split("FROM")[0].split(",")[1:]:
        conn.execute(f"ALTER TABLE jobs DROP COLUMN {col.strip()}")
    conn.execute("ALTER TABLE steps ADD COLUMN exclusive INTEGER")  # migration 019 dropped it
    conn.execute("PRAGMA user_version = 6")
    conn.close()
    conn = store.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == store.latest_version()
    assert conn.execute(TOTALS).fetchall() == truth
    conn.close()
