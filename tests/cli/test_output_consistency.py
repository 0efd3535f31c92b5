"""Output that reads like the Slurm tools (issue 25, point 7): one header case
in job, report and compare; Slurm's State, ExitCode, Elapsed and NNodes in
`job` where ingest had them from sacct; no `(-)` for a job without a name,
and the short cells of the SAVING column explained under the table."""
import json
import re

import pytest

import recgen
from joulestep import store


def _headers(text: str, first: str) -> list[str]:
    """The words of the table header line that starts with ``first``."""
    for line in text.splitlines():
        if line.split()[:1] == [first]:
            return line.split()
    raise AssertionError(f"no header line starting {first!r} in:\n{text}")


@pytest.fixture
def study(run, tmp_path):
    sp = tmp_path / "study"
    for r in recgen.checkpoint_study() + recgen.fixture_records():
        recgen.write(sp, r)
    run("ingest", sp)
    return run


def test_one_header_case_in_job_report_and_compare(study):
    job = study("job", 42).output
    rep = study("report", "--by", "user").output
    cmp_ = study("compare", "--by", "tag:strategy", "--where", "study=ckpt").output
    heads = {"job": _headers(job, "STEP"), "report": _headers(rep, "USER"),
             "compare": cmp_.splitlines()[1].split()}
    for what, words in heads.items():
        assert words and all(w == w.upper() for w in words), (what, words)
    # compare's header is its JSON names, in the same case as the others
    doc = json.loads(study("compare", "--by", "tag:strategy", "--where", "study=ckpt",
                           "--format", "json").output)
    assert {w.lower() for w in heads["compare"]} <= set(doc["table"][0])
    # the spread: one name, in the table or in the footnote of the JSON names
    assert "ENERGY_J_STD" in heads["compare"] or "energy_j_std" in cmp_
    assert "energy_j_std" in doc["table"][0] and "_sd" not in cmp_.lower()


def _set_sacct(db, job_id, state, exit_code, elapsed_s, nnodes):
    """What ingest's sacct pass stores (slurmacct.sync, migration 015)."""
    conn = store.connect(db)
    conn.execute("UPDATE jobs SET sacct_ns = 1, slurm_state = ?, slurm_exit_code = ?, "
                 "slurm_elapsed_ns = ?, slurm_nnodes = ? WHERE job_id = ?",
                 (state, exit_code, elapsed_s * 10**9, nnodes, job_id))
    conn.close()


def test_job_shows_state_exit_code_elapsed_and_nodes_from_sacct(loaded):
    text = loaded("job", 42).output
    assert "State " not in text and "ExitCode" not in text   # no sacct: none
    _set_sacct(loaded.db, 42, "FAILED", "2:0", 3725, 2)
    text = loaded("job", 42).output
    assert "State FAILED, ExitCode 2:0, Elapsed 01:02:05, NNodes 2" in text, text
    doc = json.loads(loaded("job", 42, "--format", "json").output)["slurm"]
    assert (doc["state"], doc["exit_code"], doc["elapsed_s"], doc["nnodes"]) == \
        ("FAILED", "2:0", 3725, 2)
    _set_sacct(loaded.db, 42, "TIMEOUT", "0:15", 2 * 86400 + 61, 1)
    assert "Elapsed 2-00:01:01" in loaded("job", 42).output


def test_job_without_name_and_the_saving_cells_explained(run, tmp_path):
    sp = tmp_path / "sp"
    # a job without a name (records of the current plugin carry none) whose
    # step ran under a policy on a node without a fitted power model
    rec = recgen.record(77, "0", "node01", name=None, policy="io-dvfs", base_khz=1_800_000,
                        phases=[recgen.phase(0, "write", 1, 4, 40, 8, freq_khz=1_200_000)])
    recgen.write(sp, rec)
    run("ingest", sp)
    text = run("job", 77).output
    first = text.splitlines()[0]
    assert first.startswith("Job 77 on ") and "(-)" not in first and "()" not in first
    assert "n/est" not in text
    cells = [l.split()[-2:] for l in text.splitlines() if l.startswith("0 ")]
    assert cells and cells[0] == ["no", "model"], text
    assert re.search(r"SAVING: no model = no fitted power model", text), text
