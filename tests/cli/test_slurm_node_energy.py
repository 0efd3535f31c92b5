"""Slurm's node energy beside joulestep's (issue 24, part 3; slurmview.py):
the job's node figure adds Slurm's step figures of the steps joulestep
counts on their own, once each, never joulestep's own total.  The rows are
set as ingest's sacct pass stores them (slurmacct.sync, migration 015); the
live round trip is tests/cluster/test_slurm_pm_counters.py.

Job 100 (test_nesting.job100): batch on n1; step 0 on n1 (inside batch) and
on n2 (no batch there); an extern step joulestep has no record of."""
import recgen
from conftest import jrun
from joulestep import store
from test_nesting import job100, spool_of

J = 10**6


def _slurm(db, job_id, steps: dict, job_j=None):
    conn = store.connect(db)
    pk = conn.execute("SELECT job_pk FROM jobs WHERE job_id = ?", (job_id,)).fetchone()[0]
    conn.execute("UPDATE jobs SET sacct_ns = 1, slurm_state = 'COMPLETED', "
                 "slurm_exit_code = '0:0', slurm_nnodes = 2, slurm_elapsed_ns = ?, "
                 "slurm_energy_uj = ? WHERE job_pk = ?",
                 (21 * 10**9, None if job_j is None else job_j * J, pk))
    for sid, e in steps.items():
        conn.execute("INSERT INTO slurm_steps (job_pk, step_id, state, nnodes, energy_uj) "
                     "VALUES (?, ?, 'COMPLETED', 1, ?)", (pk, sid, None if e is None else e * J))
    conn.close()


def test_single_node_job_counts_the_outer_step_once(run, tmp_path):
    recs = [r for r in job100() if r["step"]["node"] == "n1"]
    run("ingest", spool_of(tmp_path, "sp", recs))
    _slurm(run.db, 100, {"batch": 1900, "0": 950, "extern": 2000}, job_j=950)
    doc = jrun(run, "job", 100)
    sl = doc["slurm"]
    # step 0 is inside batch on its only node: inside batch's meter reading;
    # extern is not recorded by joulestep: not in the comparison
    assert sl["energy_node_j"] == 1900 and sl["energy_node_note"] is None
    assert sl["energy_job_row_j"] == 950            # Slurm's own job row, kept apart
    by = {s["step_id"]: s for s in sl["steps"]}
    assert by["batch"]["energy_joulestep_j"] == 500 and by["0"]["energy_joulestep_j"] == 300
    assert by["extern"]["energy_joulestep_j"] is None
    assert doc["totals"]["energy_total_j"] == 500   # joulestep's own, nothing added
    text = " ".join(run("job", 100).output.split())      # lines unwrapped
    assert "1.90 kJ over the same steps, against 500 J above (not added" in text, text
    assert "step extern: 2.00 kJ on 1 node(s), not recorded by joulestep" in text


def test_step_inside_another_on_some_nodes_only_gives_no_job_figure(run, tmp_path):
    run("ingest", spool_of(tmp_path, "sp", job100()))
    _slurm(run.db, 100, {"batch": 1900, "0": 1500})
    doc = jrun(run, "job", 100)
    assert doc["slurm"]["energy_node_j"] is None
    assert "step 0 is inside another step on some of its nodes only" in \
        doc["slurm"]["energy_node_note"]
    assert any(c.startswith("node meter (Slurm): no job figure") for c in doc["caveats"])


def test_no_energy_plugin_says_nothing_of_a_node_meter(run, tmp_path):
    run("ingest", spool_of(tmp_path, "sp", job100()))
    _slurm(run.db, 100, {"batch": None, "0": None})
    doc = jrun(run, "job", 100)
    assert doc["slurm"]["energy_node_j"] is None and doc["slurm"]["energy_node_note"] is None
    assert not any("node meter" in c for c in doc["caveats"])
    text = run("job", 100).output
    assert "Node meter (Slurm" not in text and "State COMPLETED" in text
