"""SMT cores a step had only some threads of (issue 24, part 2): the plugin
leaves their clock alone and says which CPUs in step.smt_aside_cpus (an
optional field: absent in older records and where there are none); `job`
shows it beside the clocks, and the database keeps it."""
import pytest

import recgen
from conftest import jrun
from joulestep.store import records


def test_job_shows_the_cpus_left_alone(run, tmp_path):
    spool = tmp_path / "spool"
    aside = recgen.record(42, "0", "node01", cpu_j=100, dram_j=20)
    aside["step"]["smt_aside_cpus"] = "4,68"
    whole = recgen.record(42, "1", "node01", start_s=12, cpu_j=50, dram_j=10)
    for r in (aside, whole):
        recgen.write(spool, r)
    run("ingest", spool)
    s = jrun(run, "job", 42)
    steps = {st["step_id"]: st for st in s["steps"]}
    assert steps["0"]["smt_aside_cpus"] == "4,68"
    assert steps["1"]["smt_aside_cpus"] is None
    text = run("job", 42).output
    lines = [l for l in text.splitlines() if l.startswith("SMT:")]
    assert len(lines) == 1, text
    assert "step 0 on node01" in lines[0] and "CPUs 4,68" in text


@pytest.mark.parametrize("bad", [4, ["4"], True])
def test_smt_aside_must_be_a_string(bad):
    rec = recgen.record(42, "0", "node01", cpu_j=100, dram_j=20)
    rec["step"]["smt_aside_cpus"] = bad
    with pytest.raises(records.RecordError, match="step.smt_aside_cpus"):
        records.parse_record(rec)
