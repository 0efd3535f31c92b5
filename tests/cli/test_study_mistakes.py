"""compare and plot: the mistakes a newcomer met (issue 25, point 8)."""
import datetime as dt
import json
import re

import numpy as np
import pandas as pd
import pytest

import recgen
from joulestep import plot as P


@pytest.fixture
def study(run, tmp_path):
    sp = tmp_path / "study"
    for r in recgen.checkpoint_study() + recgen.io_study() + recgen.sweep_study():
        recgen.write(sp, r)
    run("ingest", sp)
    return run


def svg_ids(path) -> set:
    return set(re.findall(r'id="([^"]+)"', path.read_text()))


def test_compare_by_approach_without_what(study):
    """The store also has checkpoint phases (tag:strategy, no approach): the
    comparison --by tag:approach names is io, as --what io."""
    auto = json.loads(study("compare", "--by", "tag:approach", "--format",
                            "json").stdout)
    explicit = json.loads(study("compare", "--by", "tag:approach", "--what", "io",
                                "--format", "json").stdout)
    assert auto["what"] == "io" and auto["table"] == explicit["table"]
    # the runs of the io study only: untagged runs are no approach
    approaches = {r["tag:approach"] for r in recgen.io_study()
                  for r in [dict(r["job"]["tags"], **{"tag:approach":
                                                      r["job"]["tags"]["approach"]})]}
    assert {r["tag:approach"] for r in auto["table"]} == approaches
    # --by strategy still finds the checkpoint comparison
    r = json.loads(study("compare", "--by", "tag:strategy", "--format", "json").stdout)
    assert r["what"] == "checkpoint"


def test_plot_io_has_no_bar_for_untagged_runs(study, tmp_path):
    out = tmp_path / "io.svg"
    study("plot", "io", out)
    bars = {i for i in svg_ids(out) if i.startswith("bars-energy-")}
    n = len({r["job"]["tags"]["approach"] for r in recgen.io_study()})
    assert len(bars) == n, sorted(bars)


def test_plot_io_refuses_a_table_without_the_tag(tmp_path):
    t = pd.DataFrame({"tag:approach": [None], "energy_j": [1.0]})
    with pytest.raises(ValueError, match="tag:approach"):
        P.plot_io_approaches(t, tmp_path / "x.svg")


def test_plot_scaling_leaves_out_rows_without_ranks_or_size(tmp_path):
    rows = []
    for strat, sizes in (("veloc", (1.0, 2.0)), ("genericio", (1.0,))):
        for s in sizes:
            for n in (1, 2, 4):
                rows.append({"tag:strategy": strat, "part": "total", "gib_per_rank": s,
                             "nranks": n, "energy_j": 10.0 * n * s, "energy_j_std": 1.0,
                             "throughput_gibs": n * s, "throughput_gibs_std": 0.1})
    # a genericio run whose ranks and size were not recorded
    rows.append({"tag:strategy": "genericio", "part": "total", "gib_per_rank": np.nan,
                 "nranks": 0, "energy_j": 5.0, "energy_j_std": np.nan,
                 "throughput_gibs": np.nan, "throughput_gibs_std": np.nan})
    out = P.plot_scaling(pd.DataFrame(rows), tmp_path / "s.svg")
    series = {i for i in svg_ids(tmp_path / "s.svg") if i.startswith("series-")}
    assert series == {"series-veloc 1 GiB", "series-veloc 2 GiB", "series-genericio 1 GiB"}
    assert out


def test_plot_power_names_the_node_models(run, tmp_path):
    sp = tmp_path / "sp"
    recs = recgen.sweep_study()
    for i, r in enumerate(recs):
        r["step"]["node_model"] = "icelake-2x32" if i % 2 else "broadwell-2x18"
        recgen.write(sp, r)
    run("ingest", sp)
    r = run("plot", "power", tmp_path / "p.svg", ok=False)
    assert "broadwell-2x18" in r.output and "icelake-2x32" in r.output
    assert "--node-model" in r.output
    run("plot", "power", tmp_path / "p.svg", "--node-model", "icelake-2x32")


@pytest.mark.parametrize("cmd", [("report",), ("compare", "--by", "tag:strategy"),
                                 ("plot", "io", "x.svg")])
def test_reversed_period_is_refused(study, cmd, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = study(*cmd, "--since", "2025-12-01", "--until", "2025-11-01", ok=False)
    assert "--since" in r.output and "--until" in r.output and "after" in r.output
    assert not (tmp_path / "x.svg").exists()


def test_first_seen_takes_a_time(loaded):
    """Two runs of job 42 (recycled ID): --first-seen picks one by ns or by the
    time `job` shows."""
    j = json.loads(loaded("job", 42, "--format", "json").stdout)
    ns, iso = j["job"]["first_seen_ns"], j["job"]["first_seen"]
    assert dt.datetime.fromisoformat(iso).timestamp() == ns // 10**9
    by_ns = json.loads(loaded("job", 42, "--first-seen", ns, "--format", "json").stdout)
    by_time = json.loads(loaded("job", 42, "--first-seen", iso, "--format", "json").stdout)
    assert by_ns["job"] == by_time["job"] and by_time["job"]["first_seen_ns"] == ns
    r = loaded("job", 42, "--first-seen", "1999-01-01T00:00:00+00:00", ok=False)
    assert "first seen" in r.output and iso in r.output
    r = loaded("job", 42, "--first-seen", "yesterday-ish", ok=False)
    assert "ISO" in r.output
