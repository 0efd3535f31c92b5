"""CO2 and cost from the grid's intensity and price over time: import,
placement of energy in time, job and report (both engines: the ``run``
fixture).  Expected figures are computed by hand in each test."""
import json

import numpy as np
import pytest

import recgen
from recgen import J, S, T0, phase, record

from joulestep import carbon, intensity_files as inf

H = 3600
KWH = 3.6e6
STATIC_CO2, STATIC_PRICE = 360.0, 0.25      # conftest's site config


def _csv(path, rows, header="time_utc,value"):
    path.write_text(header + "\n" + "".join(f"{r}\n" for r in rows))
    return path


def _iso(s):
    return f"2025-11-22T{int(s // 3600):02d}:{int(s % 3600 // 60):02d}:00Z"


def _zone_conf(tmp_path, monkeypatch, extra=""):
    conf = tmp_path / "zone.conf"
    conf.write_text("[site]\ncluster =\nco2_g_per_kwh = 360\nprice_per_kwh = 0.25\n"
                    f"currency = CHF\nzone = Z\n{extra}"
                    f"[paths]\nspool = {tmp_path / 'spool'}\n")
    monkeypatch.setenv("JOULESTEP_CONFIG", str(conf))


def _two_hours(run, tmp_path):
    """00:00-01:00 at 100 g/kWh and 0.10/kWh; 01:00-02:00 at 500 and 0.40."""
    co2 = _csv(tmp_path / "co2.csv", ["2025-11-22T00:00:00Z,100",
                                      "2025-11-22T01:00:00Z,500",
                                      "2025-11-22T02:00:00Z,"])
    price = _csv(tmp_path / "price.csv", ["2025-11-22T00:00:00Z,0.10",
                                          "2025-11-22T01:00:00Z,0.40",
                                          "2025-11-22T02:00:00Z,"])
    run("intensity", "import", co2, "--zone", "Z", "--what", "co2")
    run("intensity", "import", price, "--zone", "Z", "--what", "price")


def _job(run, tmp_path, rec):
    sp = tmp_path / "spool"
    recgen.write(sp, rec)
    run("ingest", sp)
    return json.loads(run("job", str(rec["job"]["job_id"]), "--format", "json").stdout)


@pytest.fixture
def zoned(tmp_path, monkeypatch):
    _zone_conf(tmp_path, monkeypatch)


def test_two_phases_in_two_hours_by_hand(run, tmp_path, zoned):
    """Phase 0 00:30-01:00 (3600 J), phase 1 01:00-01:30 (7200 J): the
    step is its two phases."""
    _two_hours(run, tmp_path)
    rec = record(7, "0", start_s=1800, dur_s=3600, cpu_j=9000, dram_j=1800,
                 phases=[phase(0, "compute", 1800, 1800, 3000, 600),
                         phase(1, "checkpoint", 3600, 1800, 6000, 1200)])
    s = _job(run, tmp_path, rec)
    co2 = 3600 / KWH * 100 + 7200 / KWH * 500
    cost = 3600 / KWH * 0.10 + 7200 / KWH * 0.40
    st, t = s["steps"][0], s["totals"]
    assert st["co2_g"] == pytest.approx(co2, rel=1e-9)
    assert st["cost"] == pytest.approx(cost, rel=1e-9)
    assert t["co2_g"] == pytest.approx(co2, rel=1e-9)
    assert t["cost"] == pytest.approx(cost, rel=1e-9)
    assert t["co2_method"] == "time-varying" and t["co2_covered_pct"] == pytest.approx(100)
    assert t["co2_g_per_kwh"] == pytest.approx(co2 / (10800 / KWH))
    assert t["co2_sources"] == "csv:co2.csv" and t["price_sources"] == "csv:price.csv"
    p0, p1 = st["phases"]
    assert p0["co2_g"] == pytest.approx(3600 / KWH * 100)
    assert p1["co2_g"] == pytest.approx(7200 / KWH * 500)
    assert p1["cost"] == pytest.approx(7200 / KWH * 0.40)
    # the zone's day: 100 for one hour, 500 for the next (time-weighted)
    day = s["intensity"]["days"][0]
    assert day["co2"]["day_avg_per_kwh"] == pytest.approx(300)
    w = s["intensity"]["what_if"]
    assert w["estimate"] is True
    assert w["co2_g_at_lowest_hour"] == pytest.approx(10800 / KWH * 100)
    assert w["co2_g_at_highest_hour"] == pytest.approx(10800 / KWH * 500)
    # the same in the report
    r = json.loads(run("report", "--format", "json").stdout)
    assert r["groups"][0]["co2_g"] == pytest.approx(co2, rel=1e-9)
    assert r["totals"]["cost"] == pytest.approx(cost, rel=1e-9)
    # text output says where the numbers come from
    out = run("job", "7").stdout
    assert "time-varying" in out and "estimate" in out


def test_phase_straddling_the_hour_is_split_by_time(run, tmp_path, zoned):
    _two_hours(run, tmp_path)
    rec = record(8, "0", start_s=2700, dur_s=1800, cpu_j=3000, dram_j=600,
                 phases=[phase(0, "write", 2700, 1800, 3000, 600)])
    s = _job(run, tmp_path, rec)
    want = 1800 / KWH * 100 + 1800 / KWH * 500
    assert s["steps"][0]["phases"][0]["co2_g"] == pytest.approx(want)
    assert s["totals"]["co2_g"] == pytest.approx(want)


def test_energy_outside_phases_is_spread_over_the_rest(run, tmp_path, zoned):
    """Step 00:00-02:00, 9000 J; one phase 00:00-00:30 of 1800 J: the other
    7200 J over 00:30-02:00, a third of it in the first hour."""
    _two_hours(run, tmp_path)
    rec = record(9, "0", start_s=0, dur_s=7200, cpu_j=7500, dram_j=1500,
                 phases=[phase(0, "compute", 0, 1800, 1500, 300)])
    s = _job(run, tmp_path, rec)
    want = (1800 + 2400) / KWH * 100 + 4800 / KWH * 500
    assert s["totals"]["co2_g"] == pytest.approx(want)
    r = json.loads(run("report", "--format", "json").stdout)
    assert r["totals"]["co2_g"] == pytest.approx(want)


def test_gap_falls_back_to_the_static_factor_and_says_how_much(run, tmp_path, zoned):
    _csv(tmp_path / "half.csv", ["2025-11-22T00:00:00Z,100", "2025-11-22T01:00:00Z,"])
    run("intensity", "import", tmp_path / "half.csv", "--zone", "Z", "--what", "co2")
    rec = record(10, "0", start_s=1800, dur_s=3600, cpu_j=6000, dram_j=1200)
    s = _job(run, tmp_path, rec)
    want = 3600 / KWH * 100 + 3600 / KWH * STATIC_CO2
    t = s["totals"]
    assert t["co2_g"] == pytest.approx(want)
    assert t["co2_covered_pct"] == pytest.approx(50)
    assert t["co2_method"] == "time-varying"
    # price: nothing imported, static, and the output says so
    assert t["price_method"] == "static" and t["price_covered_pct"] == 0
    assert t["cost"] == pytest.approx(7200 / KWH * STATIC_PRICE)
    out = run("job", "10").stdout
    assert "50 %" in out and "static" in out
    r = json.loads(run("report", "--format", "json").stdout)
    assert r["groups"][0]["co2_covered_pct"] == pytest.approx(50)
    csv_out = run("report", "--format", "csv").stdout
    head, row = csv_out.splitlines()[:2]
    assert "co2_covered_pct" in head.split(",")


def test_import_twice_changes_nothing_and_a_correction_conflicts(run, tmp_path):
    f = _csv(tmp_path / "a.csv", ["2025-11-22T00:00:00Z,100", "2025-11-22T01:00:00Z,500",
                                  "2025-11-22T02:00:00Z,"])
    run("intensity", "import", f, "--zone", "Z", "--what", "co2")
    from joulestep import store
    def rows():
        conn = store.connect(run.db)
        try:
            return sorted(conn.execute("SELECT * FROM grid_intensity").fetchall())
        finally:
            conn.close()
    first = rows()
    out = json.loads(run("intensity", "import", f, "--zone", "Z", "--what", "co2",
                         "--output", "json").stdout)
    assert (out["new"], out["unchanged"], out["conflicts"]) == (0, 2, [])
    assert rows() == first
    g = _csv(tmp_path / "b.csv", ["2025-11-22T00:00:00Z,100", "2025-11-22T01:00:00Z,450",
                                  "2025-11-22T02:00:00Z,"])
    res = run("intensity", "import", g, "--zone", "Z", "--what", "co2", ok=False)
    assert res.exit_code == 1
    assert "b.csv:3: conflict" in res.output and "500" in res.output
    assert rows() == first
    run("intensity", "import", g, "--zone", "Z", "--what", "co2", "--replace")
    assert [r[4] for r in rows()] == [100.0, 450.0]


def test_bad_rows_are_refused_with_line_and_reason_rest_kept(run, tmp_path):
    f = _csv(tmp_path / "bad.csv", [
        "2025-11-22T00:00:00Z,100",     # line 2
        "yesterday,120",                # 3: bad time
        "2025-11-22T01:00:00Z,-5",      # 4: negative
        "2025-11-22T03:00:00Z,300",     # 5
        "2025-11-22T02:00:00Z,200",     # 6: out of order (kept)
        "2025-11-22T02:00:00Z,210",     # 7: same time again: overlap
        "2025-11-22T04:00:00Z,abc",     # 8: not a number
        "2025-11-22T05:00:00Z,"])       # 9: ends the last
    res = run("intensity", "import", f, "--zone", "Z", "--what", "co2",
              "--output", "json", ok=False)
    doc = json.loads(res.stdout)
    got = {(p["line"], p["problem"], p["kept"]) for p in doc["problems"]}
    assert {(3, "bad row", False), (4, "negative", False), (6, "out of order", True),
            (7, "overlap", False), (8, "bad row", False)} <= got
    assert any("ISO 8601" in p["message"] for p in doc["problems"] if p["line"] == 3)
    # kept: 00:00 (until 02:00, the next kept time), 02:00, 03:00 (until 05:00)
    assert doc["rows_read"] == 3 and doc["new"] == 3
    # negative prices are kept (and reported)
    p = _csv(tmp_path / "p.csv", ["2025-11-22T00:00:00Z,-0.02", "2025-11-22T01:00:00Z,"])
    doc = json.loads(run("intensity", "import", p, "--zone", "Z", "--what", "price",
                         "--output", "json").stdout)
    assert doc["new"] == 1 and doc["problems"][0]["problem"] == "negative"


def test_emaps_layout(run, tmp_path, zoned):
    """The Electricity Maps data portal's hourly CSV (its documented columns)."""
    head = ("Datetime (UTC),Country,Zone Name,Zone Id,Carbon Intensity gCO₂eq/kWh "
            "(direct),Carbon Intensity gCO₂eq/kWh (Life cycle),Low Carbon Percentage,"
            "Renewable Percentage,Data Source,Data Estimated,Data Estimation Method")
    f = _csv(tmp_path / "DE_2025_hourly.csv", [
        "2025-11-22 00:00:00,Germany,Germany,DE,100,150,50,40,entsoe.eu,false,",
        "2025-11-22 01:00:00,Germany,Germany,DE,500,550,10,5,entsoe.eu,true,TIME_SLICER",
        "2025-11-22 03:00:00,Germany,Germany,DE,200,250,10,5,entsoe.eu,false,"],
        header=head)
    doc = json.loads(run("intensity", "import", f, "--zone", "Z", "--what", "co2",
                         "--format", "emaps", "--output", "json").stdout)
    assert doc["new"] == 3
    assert [p["problem"] for p in doc["problems"]] == ["gap"]     # 02:00-03:00
    from joulestep import store
    conn = store.connect(run.db)
    rows = conn.execute("SELECT start_ns, end_ns, value_per_kwh, source, estimated "
                        "FROM grid_intensity ORDER BY start_ns").fetchall()
    conn.close()
    assert rows[1] == (T0 + H * S, T0 + 2 * H * S, 500.0, "emaps:entsoe.eu", 1)
    rec = record(11, "0", start_s=1800, dur_s=3600, cpu_j=6000, dram_j=1200)
    s = _job(run, tmp_path, rec)
    assert s["totals"]["co2_g"] == pytest.approx(3600 / KWH * 100 + 3600 / KWH * 500)
    assert s["totals"]["co2_sources"] == "emaps:entsoe.eu"
    run("intensity", "import", f, "--zone", "Z", "--what", "price", "--format", "emaps",
        ok=False)


def test_neso_layout(run, tmp_path, zoned):
    """The NESO historic generation mix CSV: DATETIME, CARBON_INTENSITY,
    half-hourly (its other columns are ignored)."""
    f = _csv(tmp_path / "df_fuel_ckan.csv", [
        "2025-11-22 00:00:00+00:00,1000,2000,100",
        "2025-11-22 00:30:00+00:00,1000,2000,300",
        "2025-11-22 01:00:00+00:00,1000,2000,500"],
        header="DATETIME,GAS,WIND,CARBON_INTENSITY")
    doc = json.loads(run("intensity", "import", f, "--zone", "Z", "--what", "co2",
                         "--format", "neso", "--output", "json").stdout)
    assert doc["new"] == 3 and doc["problems"] == []
    rec = record(12, "0", start_s=0, dur_s=5400, cpu_j=4500, dram_j=900)
    s = _job(run, tmp_path, rec)
    assert s["totals"]["co2_g"] == pytest.approx(1800 / KWH * (100 + 300 + 500))


def test_zones_per_partition_and_nodes(run, tmp_path, monkeypatch):
    _zone_conf(tmp_path, monkeypatch, "[zones]\npartition.gpu = P\nnodes.gn[01-02] = N\n")
    for zone, v in (("Z", 100), ("P", 200), ("N", 400)):
        f = _csv(tmp_path / f"{zone}.csv", [f"2025-11-22T00:00:00Z,{v}",
                                            "2025-11-22T01:00:00Z,"])
        run("intensity", "import", f, "--zone", zone, "--what", "co2")
    sp = tmp_path / "spool"
    recgen.write(sp, record(20, "0", "node01", start_s=0, dur_s=60, cpu_j=3600, dram_j=0))
    recgen.write(sp, record(21, "0", "node02", partition="gpu", user="bob",
                            start_s=0, dur_s=60, cpu_j=3600, dram_j=0))
    recgen.write(sp, record(22, "0", "gn02", partition="gpu", user="carol",
                            start_s=0, dur_s=60, cpu_j=3600, dram_j=0))
    run("ingest", sp)
    r = json.loads(run("report", "--format", "json").stdout)
    by = {g["key"]: g["co2_g"] for g in r["groups"]}
    assert by == pytest.approx({"alice": 0.1, "bob": 0.2, "carol": 0.4})
    s = json.loads(run("job", "22", "--format", "json").stdout)
    assert s["steps"][0]["zone"] == "N"


def test_report_by_hour(run, tmp_path, zoned):
    _two_hours(run, tmp_path)
    sp = tmp_path / "spool"
    # 00:30-01:30, 7200 J: half in each hour
    recgen.write(sp, record(30, "0", start_s=1800, dur_s=3600, cpu_j=7200, dram_j=0))
    run("ingest", sp)
    r = json.loads(run("--utc", "report", "--by", "hour", "--format", "json").stdout)
    by = {g["key"]: g for g in r["groups"]}
    assert set(by) == {"00", "01"}
    assert by["00"]["energy_total_j"] == pytest.approx(3600)
    assert by["01"]["co2_g"] == pytest.approx(3600 / KWH * 500)
    assert r["totals"]["co2_g"] == pytest.approx(3600 / KWH * 600)
    assert "01" in run("--utc", "report", "--by", "hour").stdout


def test_without_values_figures_stay_static(run, tmp_path):
    sp = tmp_path / "spool"
    recgen.write(sp, record(40, "0", start_s=0, dur_s=60, cpu_j=3600, dram_j=0))
    run("ingest", sp)
    s = json.loads(run("job", "40", "--format", "json").stdout)
    assert s["totals"]["co2_g"] == pytest.approx(3600 / KWH * STATIC_CO2)
    assert s["totals"]["co2_method"] == "static"


# --------------------------------------------------------------------------
# the pure parts

def test_split_by_time():
    o, c, e = carbon.split([0, 1], [0, 30], [90, 30], [90.0, 5.0], 60)
    assert list(zip(o, c, e)) == [(0, 0, 60.0), (0, 1, 30.0), (1, 0, 5.0)]


def test_step_intervals_add_up_in_every_cell():
    iv = carbon.step_intervals(
        {"start_ns": [0], "end_ns": [120], "energy_j": [90.0]},
        {"step": [0], "start_ns": [0], "end_ns": [30], "energy_j": [30.0]})
    o, c, e = carbon.split(iv["owner"], iv["start_ns"], iv["end_ns"], iv["energy_j"], 60)
    per = np.bincount(c, e)
    # rest 60 J over 90 time units: 20 in cell 0 beside the phase's 30
    assert per == pytest.approx([50.0, 40.0])


def test_csv_reader_intervals():
    ivs, probs = inf.read("time_utc,value\n2025-11-22T00:00:00Z,1\n"
                          "2025-11-22T02:00:00Z,2\n", "csv", "price", "x.csv")
    assert [(i.start_ns, i.end_ns, i.value_per_kwh) for i in ivs] == [
        (T0, T0 + 2 * H * S, 1.0), (T0 + 2 * H * S, T0 + 4 * H * S, 2.0)]
    assert probs == []


def test_exporter_cost_is_time_varying(run, tmp_path, zoned):
    """Two steps of 3600 J: one in the 0.10/kWh hour, one in the 0.40 hour
    (same labels): the counter adds each at its price."""
    from prometheus_client.parser import text_string_to_metric_families
    _two_hours(run, tmp_path)
    sp = tmp_path / "spool"
    recgen.write(sp, record(50, "0", start_s=600, dur_s=60, cpu_j=3600, dram_j=0))
    recgen.write(sp, record(51, "0", start_s=4200, dur_s=60, cpu_j=3600, dram_j=0))
    run("ingest", sp)
    text = run("exporter", "--once").stdout
    cost = [s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "joulestep_cost_total"]
    assert sum(cost) == pytest.approx(3600 / KWH * 0.10 + 3600 / KWH * 0.40)


def test_cell_grid_follows_the_boundaries():
    half = 1800 * S
    assert carbon.cell_ns(np.array([T0, T0 + half, T0 + 2 * half])) == half
    assert carbon.cell_ns(np.array([T0, T0 + 3 * H * S])) == H * S
    # India's +05:30: hours of day are half-hour cells of UTC
    assert carbon.cell_ns(np.array([T0, T0 + H * S]), offset_s=19800) == half


def test_hostlists_and_zone_rules(tmp_path):
    from joulestep import config
    assert config.expand_hostlist("n[01-03,10],gpu1") == ["n01", "n02", "n03", "n10",
                                                          "gpu1"]
    with pytest.raises(ValueError, match="N or N-M"):
        config.expand_hostlist("n[a-b]")
    p = tmp_path / "c.conf"
    p.write_text("[site]\nzone = DE\n[zones]\ncluster.Alps = CH\nnodes.gn[1-2] = NO\n"
                 "partition.gpu = FR\n")
    s = config.load(p)
    assert s.zone == "DE"
    assert s.zone_rules == (("nodes", ("gn1", "gn2"), "NO"),
                            ("partition", ("gpu",), "FR"),
                            ("cluster", ("Alps",), "CH"))
    p.write_text("[zones]\nrack.r1 = X\n")
    with pytest.raises(config.ConfigError, match="nodes.HOSTLIST"):
        config.load(p)


def test_day_profile_lowest_and_highest_hour():
    s = carbon.Series([T0, T0 + H * S, T0 + 2 * H * S],
                      [T0 + H * S, T0 + 2 * H * S, T0 + 3 * H * S],
                      [300.0, 100.0, 500.0], ["a", "a", "b"])
    p = carbon.day_profile(s, T0, T0 + 24 * H * S, H * S, utc=True)
    assert (p["lowest_hour"], p["lowest_per_kwh"]) == (1, 100.0)
    assert (p["highest_hour"], p["highest_per_kwh"]) == (2, 500.0)
    assert p["day_avg_per_kwh"] == pytest.approx(300.0)
    assert p["covered_pct"] == pytest.approx(100 * 3 / 24)


def test_a_day_imported_later_corrects_past_reports(run, tmp_path, zoned):
    """Nothing is frozen at ingest: the report changes when values arrive."""
    sp = tmp_path / "spool"
    recgen.write(sp, record(60, "0", start_s=600, dur_s=60, cpu_j=3600, dram_j=0))
    run("ingest", sp)
    before = json.loads(run("report", "--format", "json").stdout)["totals"]
    assert before["co2_g"] == pytest.approx(3600 / KWH * STATIC_CO2)
    assert before["co2_method"] == "static"
    _two_hours(run, tmp_path)
    after = json.loads(run("report", "--format", "json").stdout)["totals"]
    assert after["co2_g"] == pytest.approx(3600 / KWH * 100)
    assert after["co2_method"] == "time-varying"


def test_values_the_source_marked_estimated_are_shown(run, tmp_path, zoned):
    """Electricity Maps marks 01:00-02:00 as estimated; a job 00:30-01:30
    (7200 J at constant power) met it with half its energy: 50 % of its
    CO2 figure rests on estimated values, in job, report and report --by
    hour, in JSON, CSV and text.  The price, from a csv without the flag,
    has none."""
    head = "Datetime (UTC),Zone Id,Carbon Intensity gCO₂eq/kWh (direct),Data Source," \
           "Data Estimated"
    f = _csv(tmp_path / "DE.csv", ["2025-11-22 00:00:00,DE,100,entsoe.eu,false",
                                   "2025-11-22 01:00:00,DE,500,entsoe.eu,true",
                                   "2025-11-22 02:00:00,DE,200,entsoe.eu,false"],
             header=head)
    run("intensity", "import", f, "--zone", "Z", "--what", "co2", "--format", "emaps")
    price = _csv(tmp_path / "price.csv", ["2025-11-22T00:00:00Z,0.10",
                                          "2025-11-22T02:00:00Z,"])
    run("intensity", "import", price, "--zone", "Z", "--what", "price")
    rec = record(12, "0", start_s=1800, dur_s=3600, cpu_j=6000, dram_j=1200)
    s = _job(run, tmp_path, rec)
    for d in (s["totals"], s["steps"][0]):
        assert d["co2_estimated_pct"] == pytest.approx(50)
        assert d["price_estimated_pct"] == pytest.approx(0)
    assert "50 % estimated" in run("job", "12").stdout
    r = json.loads(run("report", "--format", "json").stdout)
    assert r["groups"][0]["co2_estimated_pct"] == pytest.approx(50)
    assert r["totals"]["co2_estimated_pct"] == pytest.approx(50)
    assert "50 % estimated" in run("report").stdout
    rows = run("report", "--format", "csv").stdout.splitlines()
    head_cols = rows[0].split(",")
    assert float(rows[1].split(",")[head_cols.index("co2_estimated_pct")]) == \
        pytest.approx(50)
    h = json.loads(run("--utc", "report", "--by", "hour", "--format", "json").stdout)
    by = {g["key"]: g for g in h["groups"]}
    assert by["00"]["co2_estimated_pct"] == pytest.approx(0)
    assert by["01"]["co2_estimated_pct"] == pytest.approx(100)



def test_the_grids_read_on_its_own_connection_gives_the_same_figures(run, db, tmp_path):
    """report reads the cells on a second connection, in a thread: the
    figures are those of one connection, and an error there (the store
    gone when it opens it) reaches the caller."""
    from joulestep import config, report, store
    _two_hours(run, tmp_path)
    sp = tmp_path / "spool"
    recgen.write(sp, record(70, "0", start_s=1800, dur_s=3600, cpu_j=7200, dram_j=0))
    run("ingest", sp)
    settings = config.Settings(zone="Z")
    conn = store.connect(db, write=False)
    try:
        two = report.report(conn, settings, "user")
        conn.target = None                   # one connection: read in line
        one = report.report(conn, settings, "user")
    finally:
        conn.close()
    assert two == one
    assert two["totals"]["co2_g"] == pytest.approx(3600 / KWH * 600)
    if store.db.is_url(db):
        return
    conn = store.connect(db, write=False)
    try:
        conn.target = str(tmp_path / "gone.db")
        with pytest.raises(store.StoreError, match="no database"):
            report.report(conn, settings, "user")
    finally:
        conn.close()
