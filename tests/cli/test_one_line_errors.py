"""Bad option values end in one `Error:` line on stderr, never a traceback
(joulestep(1)): times out of range (`--since 99999999d`, year 9999 or 1,
ns beyond 64 bits) and output paths in a folder that does not exist.  A
fuzz of the time options of every command that takes one, and of every
command that writes a file."""
import pytest
from click.testing import CliRunner

import recgen
from joulestep.cli import cli

TIMES = ["99999999d", "99999999999999999999s", "9999-12-31", "0001-01-01",
         "2262-05-01", "1600-01-01", "1969-12-31T23:00:00+00:00"]
TIME_OPTS = [["report", "--since"], ["report", "--until"], ["jobs", "--starttime"],
             ["jobs", "--endtime"], ["compare", "--by", "tag:strategy", "--since"],
             ["export", "steps", "--since"], ["model", "dvfs", "--until"],
             ["plot", "scaling", "{tmp}/x.png", "--since"]]


@pytest.fixture(params=["sqlite"])
def engine(request):        # the option parsing is before any query
    return request.param


@pytest.fixture
def store(run, tmp_path):
    for r in recgen.fixture_records() + recgen.checkpoint_study():
        recgen.write(tmp_path / "sp", r)
    run("ingest", tmp_path / "sp")
    return run


def one_line_error(db, args, needle):
    res = CliRunner().invoke(cli, ["--db", str(db), *map(str, args)])
    assert not (res.exception and not isinstance(res.exception, SystemExit)), \
        (args, repr(res.exception))
    assert res.exit_code in (1, 2), (args, res.output)
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("Error:")]
    assert len(err) == 1 and needle in err[0], (args, res.stderr)
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("t", TIMES)
@pytest.mark.parametrize("opt", TIME_OPTS, ids=lambda o: "-".join(o))
def test_times_out_of_range(store, tmp_path, opt, t):
    one_line_error(store.db, [*(o.format(tmp=tmp_path) for o in opt), t], t)


def test_times_in_range_still_work(store):
    assert "Energy report" in store("report", "--since", "1970-01-01T00:00:00+00:00").stdout
    assert store("report", "--since", "20000d").exit_code == 0     # 1971: fine


@pytest.mark.parametrize("args", [
    ["plot", "scaling", "{missing}/x.png", "--where", "study=ckpt"],
    ["export", "steps", "-o", "{missing}/x.csv"],
    ["tune", "--freqs", "1000,1100,1200,1300", "-o", "{missing}/t.sh", "--", "true"]])
def test_output_in_a_missing_folder(store, tmp_path, args):
    missing = tmp_path / "no" / "such" / "dir"        # never created
    one_line_error(store.db, [a.format(missing=missing) for a in args], str(missing))
    assert not (tmp_path / "no").exists()
