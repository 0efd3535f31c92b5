"""`joulestep jobs`: a user's recent jobs with their energy, sacct-style
(issue 25, point 6).  Truth: each job's totals as `joulestep job` gives them
(the same figures, for admins and in the user view), and the fixture's owners
(recgen.fixture_records: alice 42, bob 43, carol 42 three days later)."""
import json

import pytest

from joulestep import config
from joulestep import store

SINCE = ("--starttime", "2025-11-01T00:00+00:00")


def rows(run, *args):
    return json.loads(run("jobs", *args, *SINCE, "--format", "json").stdout)["jobs"]


def test_a_users_jobs_with_the_energy_job_shows(loaded):
    got = rows(loaded, "--user", "alice")
    assert [(r["job_id"], r["user"]) for r in got] == [(42, "alice")]
    one = json.loads(loaded("job", 42, "--first-seen", got[0]["first_seen_ns"],
                            "--format", "json").stdout)
    assert got[0]["energy_total_j"] == pytest.approx(one["totals"]["energy_total_j"])
    assert got[0]["energy_total_j"] == pytest.approx(156)          # recgen: 130 + 26 J
    assert got[0]["steps"] == 2
    # carol's job 42 is another job (recycled ID); latest first
    got = rows(loaded, "--user", "carol,bob")
    assert [(r["job_id"], r["user"]) for r in got] == [(42, "carol"), (43, "bob")]
    assert [r["energy_total_j"] for r in got] == pytest.approx([60, 220])


def test_period_and_table(loaded):
    # carol's job started 2025-11-25; bob's and alice's on the 22nd
    got = json.loads(loaded("jobs", "--user", "carol,bob,alice", "--starttime",
                            "2025-11-24T00:00+00:00", "--format", "json").stdout)["jobs"]
    assert [r["user"] for r in got] == ["carol"]
    got = json.loads(loaded("jobs", "--user", "carol,bob,alice", *SINCE, "--endtime",
                            "2025-11-23T00:00+00:00", "--format", "json").stdout)["jobs"]
    assert sorted(r["user"] for r in got) == ["alice", "bob"]
    text = loaded("jobs", "--user", "bob", *SINCE, "--utc").stdout
    head, line = text.splitlines()[:2]
    assert head.split()[:4] == ["JOBID", "USER", "ACCOUNT", "PARTITION"]
    assert line.split()[:4] == ["43", "bob", "chem", "debug"]
    # first seen (submitted), with its UTC offset (the table is in local time)
    assert " 2025-11-22T00:00:00+00:00 " in text


def test_table_times_carry_their_offset(loaded, monkeypatch):
    """The table is in local time: a time without its offset is ambiguous
    (it printed 2025-11-22T05:30:00 here)."""
    import time
    monkeypatch.setenv("TZ", "XYZ-05:30")          # POSIX rule: no tzdata needed
    time.tzset()
    try:
        text = loaded("jobs", "--user", "bob", *SINCE).stdout
    finally:
        monkeypatch.undo()
        time.tzset()
    assert " 2025-11-22T05:30:00+05:30 " in text, text
    r = loaded("jobs", "--starttime", "2025-12-01", "--endtime", "2025-11-01", ok=False)
    assert "--since" in r.output or "--starttime" in r.output


def test_state_needs_sacct(loaded, monkeypatch, tmp_path):
    empty = tmp_path / "nobin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    r = loaded("jobs", "--user", "bob", *SINCE, "--state", "COMPLETED", ok=False)
    assert "sacct" in r.output and "--state" in r.output


def test_user_view_is_jobs_user_view(loaded, db):
    """What a user who is not an admin gets: each job's totals in `job`'s
    user view (the same function), not the store's full figures."""
    from joulestep import jobs as jl
    from joulestep import jobsummary
    conn = store.connect(db)
    try:
        s = config.load()
        got = jl.list_jobs(conn, s, users=["alice"], since_ns=0, until_ns=None,
                           user_view=True)
        (j,) = got
        want = jobsummary.summary(conn, 42, s, j["cluster"], j["first_seen_ns"],
                                  user_view=True)["totals"]
        assert j["energy_total_j"] == want["energy_total_j"]
    finally:
        conn.close()


def test_only_admins_list_other_users():
    from joulestep import jobs as jl
    assert jl.who(None, "bob", admin=False) == ["bob"]
    assert jl.who(["bob"], "bob", admin=False) == ["bob"]
    with pytest.raises(jl.JobsError, match="only admins"):
        jl.who(["alice"], "bob", admin=False)
    with pytest.raises(jl.JobsError, match="only admins"):
        jl.who(["bob", "alice"], "bob", admin=False)
    assert jl.who(["alice", "carol"], "root", admin=True) == ["alice", "carol"]
    assert jl.who(None, "root", admin=True) == ["root"]


def test_help_promises_only_the_columns_the_table_has(loaded):
    """Its help promised a kWh column the table lacked: the columns it
    names are the table's, and kWh is where it is (JSON and CSV)."""
    import re
    help_ = " ".join(loaded("jobs", "--help").stdout.split())
    cols = re.search(r"like sacct: (.*?)\.", help_).group(1)
    assert "kWh" not in cols.split("(")[0], cols
    head = loaded("jobs", "--user", "bob", *SINCE).stdout.splitlines()[0].split()
    assert "KWH" not in head and "WH" not in head
    assert "kWh and CO2 with --format json or csv" in help_
    got = json.loads(loaded("jobs", "--user", "bob", *SINCE, "--format", "json").stdout)
    assert got["jobs"][0]["kwh"] == pytest.approx(220 / 3.6e6)
