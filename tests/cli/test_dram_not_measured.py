"""DRAM not measured (AMD nodes, issue 24): null with the reason, never 0.

A node whose energy source has no dram zone (AMD powercap, amd_energy)
measures package energy only. Record version 2 says so
(step.dram_not_measured, energy_dram_uj null); a version 1 record wrote 0
and is upgraded at ingest. `job` and `report` never add such a DRAM as 0:
they say "not measured", and their totals are the CPU's.
"""
import copy
import json

import pytest

import recgen
from conftest import jrun
from recgen import J
from joulestep import store
from joulestep.store import records

WHY = "no dram zone: the energy source gives package energy only (as AMD RAPL does)"


def amd(rec, version=2):
    """The record as an AMD node writes it: package zones, no dram zone."""
    rec = copy.deepcopy(rec)
    rec["version"] = version
    rec["zones"] = [z for z in rec["zones"] if z["kind"] != "dram"]
    st = rec["step"]
    if version == 1:   # what plugins before version 2 wrote: 0
        st["energy_dram_uj"] = 0
        st["energy_total_uj"] = st["energy_cpu_uj"]
        for p in rec["phases"]:
            p["energy_dram_uj"] = 0
    else:
        st.update(energy_dram_uj=None, energy_total_uj=st["energy_cpu_uj"],
                  dram_not_measured=WHY)
        for p in rec["phases"]:
            p["energy_dram_uj"] = None
    return rec


def _phases(t0=recgen.T0):
    return [recgen.phase(0, "compute", 1, 4, 40, 8, t0=t0),
            recgen.phase(1, "write", 5, 2, 10, 2, t0=t0)]


def test_job_says_not_measured_and_never_adds_it(run, tmp_path):
    spool = tmp_path / "spool"
    # one job: step 0 on an Intel node (DRAM 20 J), step 1 on an AMD node
    intel = recgen.record(42, "0", "node01", cpu_j=100, dram_j=20, phases=_phases())
    a = amd(recgen.record(42, "1", "amd01", start_s=12, cpu_j=70, dram_j=0,
                          phases=_phases(recgen.T0 + 11 * recgen.S)))
    for r in (intel, a):
        recgen.write(spool, r)
    run("ingest", spool)
    s = jrun(run, "job", 42)
    steps = {st["step_id"]: st for st in s["steps"]}
    assert steps["0"]["energy_dram_j"] == 20 and steps["0"]["dram_not_measured"] is None
    assert steps["1"]["energy_dram_j"] is None
    assert steps["1"]["dram_not_measured"] == WHY
    assert steps["1"]["energy_total_j"] == 70          # the CPU's alone
    assert all(p["energy_dram_j"] is None for p in steps["1"]["phases"])
    t = s["totals"]
    # no DRAM figure for the job (20 J is not the job's DRAM), total = CPU
    assert t["energy_dram_j"] is None
    assert t["energy_cpu_j"] == 170 and t["energy_total_j"] == 170
    assert "1 step(s)" in t["dram_not_measured"] and "1 on amd01" in t["dram_not_measured"]
    assert any("DRAM not measured" in c for c in s["caveats"])
    text = run("job", 42).stdout
    assert "DRAM not measured" in text and "n/m" in text
    row = next(ln for ln in text.splitlines() if ln.split()[:2] == ["1", "amd01"])
    assert " 0 " not in f" {row} " and "n/m" in row


def test_report_counts_steps_without_dram(run, tmp_path):
    spool = tmp_path / "spool"
    recgen.write(spool, recgen.record(42, "0", "node01", cpu_j=100, dram_j=20))
    recgen.write(spool, amd(recgen.record(43, "0", "amd01", user="bob", cpu_j=70)))
    run("ingest", spool)
    r = jrun(run, "report", "--by", "user", "--since", "2000-01-01")
    groups = {g["key"]: g for g in r["groups"]}
    assert groups["bob"]["dram_not_measured_steps"] == 1
    assert groups["bob"]["energy_dram_j"] is None
    assert groups["alice"]["energy_dram_j"] == 20
    assert r["totals"]["dram_not_measured_steps"] == 1
    assert r["totals"]["energy_dram_j"] is None
    assert r["totals"]["energy_total_j"] == 190
    assert "DRAM not measured on 1 of 2 steps" in \
        " ".join(run("report", "--by", "user", "--since", "2000-01-01").stdout.split())


def test_version1_amd_record_is_upgraded():
    rec = amd(recgen.record(phases=_phases()), version=1)
    p = records.parse_record(rec)
    st = dict(zip(records.STEP_COLUMNS, p.step))
    assert st["energy_dram_uj"] is None and st["counted_dram_uj"] is None
    assert st["dram_not_measured"] == records.V1_NO_DRAM
    assert st["energy_total_uj"] == 100 * J
    dram_at = records.PHASE_COLUMNS.index("energy_dram_uj")
    assert [ph[dram_at] for ph in p.phases] == [None, None]
    # a measured 0 J DRAM (a dram zone is there) stays a measured 0
    intel = recgen.record(dram_j=0)
    st = dict(zip(records.STEP_COLUMNS, records.parse_record(intel).step))
    assert st["energy_dram_uj"] == 0 and st["dram_not_measured"] is None


def test_reason_with_a_dram_figure_is_refused():
    rec = amd(recgen.record())
    rec["step"]["energy_dram_uj"] = 5
    with pytest.raises(records.RecordError, match=r"step\.energy_dram_uj: must be null"):
        records.parse_record(rec)


def test_migration_010_fixes_stored_version1_amd_steps(tmp_path):
    db = tmp_path / "old.db"
    conn = store.connect(db)
    store.ingest_records(conn, [amd(recgen.record(42, "0", "amd01", phases=_phases())),
                                recgen.record(43, "0", "node01", dram_j=0)],
                         gap_ns=86400 * recgen.S)
    # as a store of schema 9 holds them: version 1 wrote 0
    conn.execute("UPDATE steps SET energy_dram_uj = 0, counted_dram_uj = 0, "
                 "dram_not_measured = NULL")
    conn.execute("UPDATE phases SET energy_dram_uj = 0")
    for col in ("dram_not_measured", "energy_node_uj", "node_meter_sources",
                "node_meter_integrated"):
        conn.execute(f"ALTER TABLE steps DROP COLUMN {col}")
    for col in ("step_start_ns", "first_reading_ns"):     # migration 011's
        conn.execute(f"ALTER TABLE lost_records DROP COLUMN {col}")
    conn.execute("ALTER TABLE steps DROP COLUMN smt_aside_cpus")      # migration 014's
    conn.execute("ALTER TABLE phases DROP COLUMN uncore_max_khz")
    conn.execute("DROP TABLE slurm_steps")                # migration 015's
    conn.execute("DROP TABLE grid_intensity")             # migration 018's
    conn.execute("DROP TABLE step_shares")                # migration 017's
    for col in ("slurm_state", "slurm_exit_code", "slurm_elapsed_ns", "slurm_nnodes",
                "slurm_energy_uj"):
        conn.execute(f"ALTER TABLE jobs DROP COLUMN {col}")
    conn.execute("DROP TABLE step_packages")               # migration 013's
    conn.execute("ALTER TABLE steps DROP COLUMN cpu_time_ns")
    conn.execute("ALTER TABLE steps ADD COLUMN exclusive INTEGER")  # migration 019 dropped it
    conn.execute("PRAGMA user_version = 9")
    conn.close()
    conn = store.connect(db)
    rows = dict(((r[0], (r[1], r[2], r[3])) for r in conn.execute(
        "SELECT j.job_id, s.energy_dram_uj, s.counted_dram_uj, s.dram_not_measured "
        "FROM steps s JOIN jobs j ON j.job_pk = s.job_pk")))
    assert rows[42] == (None, None, records.V1_NO_DRAM)
    assert rows[43] == (0, 0, None)          # a dram zone: a measured 0
    assert {r[0] for r in conn.execute(
        "SELECT p.energy_dram_uj FROM phases p JOIN steps s ON s.step_pk = p.step_pk "
        "WHERE s.dram_not_measured IS NOT NULL")} == {None}
    conn.close()


def test_node_energy_fields_stored_and_shown(run, tmp_path):
    spool = tmp_path / "spool"
    rec = recgen.record(44, "0", "hpe01", cpu_j=100, dram_j=20)
    rec["version"] = 2
    rec["step"].update(energy_node_uj=201 * J, node_meter_sources="pm_counters:energy",
                       node_meter_integrated=False)
    reset = recgen.record(44, "1", "hpe01", start_s=20, cpu_j=10, dram_j=2)
    reset["version"] = 2
    why = "no total: pm_counters generation changed (a reset)"
    reset["step"].update(energy_node_uj=None, node_meter_sources=why)
    for r in (rec, reset):
        recgen.write(spool, r)
    run("ingest", spool)
    steps = {st["step_id"]: st for st in jrun(run, "job", 44)["steps"]}
    assert steps["0"]["energy_node_j"] == 201
    assert steps["0"]["node_meter_sources"] == "pm_counters:energy"
    assert steps["0"]["node_meter_integrated"] is False
    assert steps["0"]["energy_total_j"] == 120      # RAPL's, never node + RAPL
    assert steps["1"]["energy_node_j"] is None and steps["1"]["node_meter_sources"] == why
    text = " ".join(run("job", 44).stdout.split())
    assert "Node meter, step 0 on hpe01: 201 J (pm_counters:energy) against RAPL's 120 J" in text
    assert "step 1 on hpe01: not measured (no total: pm_counters generation changed" in text
