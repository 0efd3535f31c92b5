"""One number formatter for every table (render_units.fmt): fixed decimals,
the unit scaled to the figure, never scientific notation; and identifiers
in full, never cut so that two rows read the same."""
import re

import pytest
from hypothesis import given, settings, strategies as st

import recgen
from joulestep import render_units
from joulestep.render_units import LADDERS, fmt

SCI = re.compile(r"\d(?:\.\d+)?e[-+]?\d+", re.I)
#: a 1.00G, 259k or the like for a figure that has a unit
SUFFIXED = re.compile(r"(?<![\w.])\d+(?:\.\d+)?[kMGT](?![\w/])")


def parse(text: str, unit: str) -> float:
    """The value a cell means, in ``unit`` (the truth to compare against)."""
    m = re.fullmatch(r"(-?)([\d.]+)\s?(\S+)", text)
    assert m, text
    sizes = dict(LADDERS[unit])
    assert m.group(3) in sizes, (text, unit)
    return float(m.group(1) + m.group(2)) * sizes[m.group(3)]


@pytest.mark.parametrize("x, unit, text", [
    (4e-3, "s", "4.00ms"), (3 * 86400, "s", "3.00d"), (2.5, "s", "2.50s"),
    (90, "s", "1.50min"), (5400, "s", "1.50h"), (4.5e-4, "J", "450µJ"),
    (999.7, "J", "1.00kJ"), (110, "J", "110J"), (1.234e6, "J", "1.23MJ"),
    (2.3e-4 * 2**30, "B/s", "241KiB/s"), (2.5 * 2**20, "B/s", "2.50MiB/s"),
    (0.0, "J", "0J"), (-12.5, "J", "-12.5J"), (1e-11, "J", "<0.001µJ"),
    (17.0, "Wh", "17.0Wh"), (12300, "Wh", "12.3kWh"), (None, "J", "-"),
    (float("nan"), "s", "-")])
def test_examples(x, unit, text):
    assert fmt(x, unit) == text


@settings(max_examples=2000, deadline=None)
@given(st.floats(min_value=1e-6, max_value=1e15), st.sampled_from(sorted(LADDERS)))
def test_fixed_decimals_scaled_unit_and_value_kept(x, unit):
    text = fmt(x, unit)
    assert not SCI.search(text), text
    smallest = LADDERS[unit][0][1]
    if x < smallest * 0.0005:
        assert text == "<0.001" + LADDERS[unit][0][0]
        return
    num = re.match(r"[\d.]+", text).group(0)
    assert len(num.replace(".", "")) <= max(4, len(str(int(float(num))))), text
    if x >= smallest:
        # three significant digits: within 0.5 % of the truth
        assert parse(text, unit) == pytest.approx(x, rel=5e-3), text
    else:       # below the smallest unit: three decimals of it
        assert parse(text, unit) == pytest.approx(x, abs=5.01e-4 * smallest), text


@settings(max_examples=1000, deadline=None)
@given(st.one_of(st.integers(-10**15, 10**15),
                 st.floats(allow_infinity=False, min_value=-1e15, max_value=1e15)))
def test_plain_numbers_never_scientific(x):
    text = fmt(x)
    assert not SCI.search(text), text
    m = re.fullmatch(r"(-?[\d.]+)([kMGTnpfa]?)", text)
    if abs(x) >= 1e-21 and m and m.group(2) not in "kMGT":
        scale = {"": 1, "n": 1e-9, "p": 1e-12, "f": 1e-15, "a": 1e-18}[m.group(2)]
        # three significant digits (fixed decimals from 10^-6: at most 6)
        assert float(m.group(1)) * scale == pytest.approx(x, rel=5e-3, abs=5e-7 if
                                                          abs(x) >= 1e-6 else 0)


def test_column_units():
    assert render_units.column_unit("energy_j_std") == ("J", 1.0)
    assert render_units.column_unit("runtime_s") == ("s", 1.0)
    assert render_units.column_unit("throughput_gibs") == ("B/s", 2.0**30)
    assert render_units.column_unit("j_per_gib") == ("J/GiB", 1.0)
    assert render_units.column_unit("first_seen_ns") == ("", 1.0)
    assert render_units.column_unit("freq_khz") == ("", 1.0)


def _tiny_and_long(spool):
    """A 3-day step and a step whose 4 ms phase wrote 988 bytes (2.3e-4
    GiB/s) with 450 µJ of DRAM energy."""
    nbytes = round(2.3e-4 * 2**30 * 0.004)
    recgen.write(spool, recgen.record(
        900, "0", "node01", dur_s=3 * 86400, cpu_j=2.5e7, dram_j=4e6))
    recgen.write(spool, recgen.record(
        901, "0", "node01", dur_s=1, cpu_j=100, dram_j=20, policy="monitor",
        phases=[recgen.phase(0, "write", 0.1, 0.004, 0.5, 4.5e-4, nbytes=nbytes)]))
    return nbytes


def test_job_tables_scale_units_and_never_use_e_notation(run, tmp_path):
    nbytes = _tiny_and_long(tmp_path / "sp")
    run("ingest", tmp_path / "sp")
    text = run("job", 900).stdout
    assert not SCI.search(text), text
    row = next(ln.split() for ln in text.splitlines() if ln.startswith("0 "))
    assert "3.00d" in row, text                       # not 259k, not 1.00G
    assert not any(SUFFIXED.fullmatch(c) for c in row), row
    assert parse(next(c for c in row if c.endswith("J") and c.startswith("25")),
                 "J") == pytest.approx(2.5e7, rel=5e-3)
    text = run("job", 901).stdout
    assert not SCI.search(text), text
    ph = next(ln.split() for ln in text.splitlines()
              if ln.split()[:2] == ["0", "write"])
    assert "4.00ms" in ph and "450µJ" in ph, text
    rate = next(c for c in ph if c.endswith("B/s"))
    assert parse(rate, "B/s") == pytest.approx(nbytes / 0.004, rel=5e-3)


def test_report_jobs_and_compare_have_no_e_notation(run, tmp_path):
    _tiny_and_long(tmp_path / "sp")
    for r in recgen.checkpoint_study():
        recgen.write(tmp_path / "sp", r)
    run("ingest", tmp_path / "sp")
    for args in (("report", "--since", "2000-01-01"),
                 ("jobs", "--starttime", "2000-01-01", "--user", "alice"),
                 ("compare", "--by", "tag:strategy", "--where", "study=ckpt"),
                 ("compare", "--what", "phases", "--by", "kind")):
        text = run(*args).stdout
        assert not SCI.search(text), (args, text)


def test_names_in_full(run, tmp_path):
    """`alice` cut to `ali~`, user0..user19 as four `use~` rows: a table
    widens its name column instead (as sacct does with %N)."""
    sp = tmp_path / "sp"
    users = [f"user{i}" for i in range(20)] + ["alice_with_a_long_login_name"]
    for i, u in enumerate(users):
        recgen.write(sp, recgen.record(1000 + i, "0", f"node-with-a-long-name-{i:03d}",
                                       user=u, account=f"account-{u}",
                                       partition="partition-with-a-long-name"))
    run("ingest", sp)
    text = run("report", "--by", "user", "--since", "2000-01-01", "--top", "30").stdout
    assert "~" not in text, text
    keys = [ln.split()[0] for ln in text.splitlines()
            if ln.split() and ln.split()[0] in users]
    assert sorted(keys) == sorted(users), text
    text = run("jobs", "--starttime", "2000-01-01", "--user", ",".join(users)).stdout
    assert "~" not in text, text
    assert {ln.split()[1] for ln in text.splitlines()[1:]} == set(users), text
    text = run("job", 1020).stdout
    assert "node-with-a-long-name-020" in text and "~" not in text, text
