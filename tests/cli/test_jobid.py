"""`joulestep job JOBID`: Slurm's job ID forms (issue 25).  `4_2` was read
as job 42 (Python's int() accepts digit separators).  The mapping of array
tasks through a real sacct and slurmdbd: tests/cluster/test_slurmdbd.py."""
import pytest


@pytest.fixture
def no_sacct(monkeypatch, tmp_path):
    """A PATH without Slurm's commands: the machine's sacct is not the test's."""
    empty = tmp_path / "nobin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def test_array_task_is_not_another_job(loaded, no_sacct):
    # job 42 is in the store; 4_2 is task 2 of array 4, which is not job 42
    r = loaded("job", "4_2", ok=False)
    assert "Job 42" not in r.output and "(wrapped)" not in r.output
    assert "4_2 is an array task" in r.output and "sacct" in r.output
    r = loaded("job", "42+1", ok=False)
    assert "42+1 is a het job component" in r.output and "Job 42" not in r.output


@pytest.mark.parametrize("bad", ["4__2", "42x", "42.", "_42", "42_", "4_2_1",
                                 "42.0.1", "42+x", "0x2a", "42.step", " ", "٤٢"])
def test_other_forms_are_refused_with_what_is_allowed(loaded, bad):
    r = loaded("job", bad, ok=False)
    assert "is not a Slurm job ID" in r.output and "12345_7" in r.output
    assert "Job 42" not in r.output


@pytest.mark.parametrize("step", ["42", "42.0"])
def test_a_step_names_its_job(loaded, step, no_sacct):
    assert "Job 42 (wrapped)" in loaded("job", step).output


@pytest.mark.parametrize("step", ["42.batch", "42.extern", "42.7"])
def test_a_step_the_job_lacks_is_an_error(loaded, step, no_sacct):
    r = loaded("job", step, ok=False)
    assert r.exit_code == 1 and "Job 42" not in r.output
    assert f"job 42 has no step {step[3:]}; its steps: 0" in r.output


def test_parse_forms():
    from joulestep import jobid
    r = jobid.parse("12345_7.0")
    assert (r.job_id, r.array_task, r.het_component, r.step, r.base) == (
        12345, 7, None, "0", "12345_7")
    r = jobid.parse("12345+1")
    assert (r.job_id, r.het_component, r.base, r.needs_sacct) == (12345, 1, "12345+1", True)
    assert not jobid.parse("12345.batch").needs_sacct
    out = "1237|1234_3\n1236|1234_2\n"
    assert jobid.parse_raw_ids(out, "1234_3") == [1237]
    assert jobid.parse_raw_ids(out, "1234_9") == []
