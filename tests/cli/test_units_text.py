"""Text output without scientific notation for energy, CO2 and money, one unit
per figure (issue 25, point 7): `0.017 Wh`, not `1.667e-05 kWh`."""
import re

import pytest

import recgen

from joulestep import output

SCI = re.compile(r"\d(?:\.\d+)?e[-+]\d+")


@pytest.mark.parametrize("kwh, text", [
    (0.0, "0 Wh"), (1.667e-05, "0.017 Wh"), (4.081e-05, "0.041 Wh"),
    (2e-07, "< 0.001 Wh"), (0.0123, "12.3 Wh"), (0.5, "500 Wh"),
    (1.234, "1.23 kWh"), (56.78, "56.8 kWh"), (4321.0, "4.32 MWh")])
def test_energy_text(kwh, text):
    assert output.energy_text(kwh) == text


@pytest.mark.parametrize("cost, text", [
    (0.0, "0.00 CHF"), (4.17e-06, "< 0.01 CHF"), (0.013, "0.01 CHF"),
    (12.345, "12.35 CHF"), (123456.7, "123456.70 CHF")])
def test_money_text(cost, text):
    assert output.money_text(cost, "CHF") == text


@pytest.mark.parametrize("g, text", [
    (0.0, "0 g"), (0.0054, "0.005 g"), (3e-07, "< 0.001 g"), (12.34, "12.3 g"),
    (1234.0, "1.23 kg"), (2.5e6, "2.50 t")])
def test_co2_text(g, text):
    assert output.co2_text(g) == text


def test_job_and_report_text_have_no_scientific_notation(loaded):
    # job 42: 60 J = 0.0167 Wh; at 0.25 CHF/kWh and 360 g/kWh (conftest.py)
    text = loaded("job", 42).output
    assert not SCI.search(text), text
    wh = 60 / 3600
    assert f"= {wh:.3f} Wh, {wh / 1000 * 360:.3f} g CO2, < 0.01 CHF" in text
    rep = loaded("report").output
    assert not SCI.search(rep), rep


def test_no_abbreviation_that_reads_as_an_error(loaded, tmp_path):
    """`Job 42 (-)` for a job without a name, `n/est` for a saving not
    estimated: they read as errors (issue 25, point 7)."""
    text = loaded("job", 43).output
    assert "n/est" not in text and "(-)" not in text
    assert text.splitlines()[0].startswith("Job 43 (gio) on ")   # a name: shown
    assert "no model" in text          # io-dvfs lowered a clock; no power model
    # the current plugin records no job name (docs/record-format.md)
    sp = tmp_path / "sp"
    recgen.write(sp, recgen.record(77, "0", "n1", first_seen_s=0, account=None))
    loaded("ingest", sp)
    text = loaded("job", 77).output
    assert text.splitlines()[0].startswith("Job 77 on demo: user alice, account "
                                           "(none), partition debug"), text


@pytest.fixture
def study(run, tmp_path):
    sp = tmp_path / "study"
    for r in recgen.checkpoint_study() + recgen.io_study():
        recgen.write(sp, r)
    run("ingest", sp)
    return run


@pytest.mark.parametrize("where", ["study=ckpt", "study=io"])
def test_table_headers_are_the_json_names(study, where):
    """compare's table names its columns as JSON and CSV do (it wrote
    energy_j_sd for energy_j_std, gib/s for throughput_gibs)."""
    import json
    by = "tag:strategy" if where == "study=ckpt" else "tag:approach"
    text = study("compare", "--by", by, "--where", where).output
    doc = json.loads(study("compare", "--by", by, "--where", where,
                           "--format", "json").output)
    keys = set(doc["table"][0])
    header = [h.lower() for h in text.splitlines()[1].split()]   # upper case
    assert header and set(header) <= keys, set(header) - keys
    assert max(len(l) for l in text.splitlines()) <= 80


@pytest.fixture
def zurich(monkeypatch):
    """A fixed local time zone for the test (never the host's)."""
    import time
    monkeypatch.setenv("TZ", "Europe/Zurich")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_text_times_are_local_unless_utc(loaded, zurich):
    import datetime as dt
    import json
    j = json.loads(loaded("job", 43, "--format", "json").output)["job"]
    when = j["submit_time"] or j["first_seen"]       # JSON stays in UTC
    assert when.endswith("+00:00")
    t = dt.datetime.fromisoformat(when)
    local = t.astimezone(dt.timezone(dt.timedelta(hours=1))).isoformat(timespec="seconds")
    assert local.endswith("+01:00")                  # November in Zurich: CET
    assert local in loaded("job", 43).output
    assert when in loaded("job", 43, "--utc").output
    assert when in loaded("--utc", "job", 43).output
    rep = loaded("report", "--since", "2025-11-01T00:00+00:00").output
    assert "2025-11-01T01:00:00+01:00" in rep
    assert "2025-11-01T00:00:00+00:00" in loaded("report", "--utc", "--since",
                                                  "2025-11-01T00:00+00:00").output
