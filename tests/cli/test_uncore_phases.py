"""+uncore-io (issue 24, part 4): each phase that capped the uncore records
phases[].uncore_max_khz (optional; absent where the uncore was left alone);
ingest keeps it and `joulestep job` says which phases capped it, at what."""
import pytest

import recgen
from conftest import jrun
from joulestep.store import records


def _rec():
    ph = [recgen.phase(0, "compute", 1, 2, 20, 4), recgen.phase(1, "flush", 3, 2, 10, 2),
          recgen.phase(2, "write", 5, 2, 10, 2)]
    ph[1]["uncore_max_khz"] = 1200000
    ph[2]["uncore_max_khz"] = 1200000
    return recgen.record(42, "0", "node01", cpu_j=100, dram_j=20, phases=ph)


def test_job_shows_the_phases_that_capped_the_uncore(run, tmp_path):
    spool = tmp_path / "spool"
    recgen.write(spool, _rec())
    recgen.write(spool, recgen.record(42, "1", "node01", start_s=12, cpu_j=50, dram_j=10,
                                      phases=[recgen.phase(0, "write", 13, 2, 10, 2)]))
    run("ingest", spool)
    s = jrun(run, "job", 42)
    steps = {st["step_id"]: st for st in s["steps"]}
    got = {p["seq"]: p.get("uncore_max_mhz") for p in steps["0"]["phases"]}
    assert got == {0: None, 1: 1200, 2: 1200}
    assert all("uncore_max_mhz" not in p for p in steps["1"]["phases"])
    text = run("job", 42).output
    assert text.count("Uncore:") == 1
    assert ("Uncore: step 0 on node01 capped its packages' uncore at 1200 MHz in "
            "phase(s) 1 flush, 2 write") in " ".join(text.split())


@pytest.mark.parametrize("bad", [0, -5, "1200000", 1.5])
def test_uncore_cap_must_be_a_positive_int(bad):
    rec = _rec()
    rec["phases"][1]["uncore_max_khz"] = bad
    with pytest.raises(records.RecordError, match=r"phases\[1\]\.uncore_max_khz"):
        records.parse_record(rec)
