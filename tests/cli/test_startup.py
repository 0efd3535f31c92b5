"""`joulestep job` starts light (issue 12: <= 50 ms, timed by `make bench`,
not here): it loads its own command only, and none of the standard modules
the start-up work removed from its path (docs/cli.md, "Start-up").  What
this checks is which modules a real `joulestep job` process imported."""
import json
import os
import sqlite3
import subprocess
import sys

from joulestep import store

#: never imported by `joulestep job` on a SQLite store, beyond what click
#: itself imports (measured in the same interpreter, so another click
#: version changes nothing here): heavy to import, or costly at definition
#: (dataclasses, textwrap's patterns), or only needed by other commands
NOT_ON_THE_JOB_PATH = {
    "pathlib", "urllib.parse", "ipaddress", "fnmatch", "textwrap", "dataclasses",
    "random", "csv", "zlib", "shutil", "socket", "subprocess", "threading",
    "pandas", "numpy", "scipy", "matplotlib", "psycopg", "prometheus_client",
    "joulestep.phase", "joulestep.slurmacct", "joulestep.exporter", "joulestep.studies",
}

CODE = """
import json, sys
from joulestep.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
sys.stderr.write("\\nMODULES " + json.dumps(sorted(sys.modules)) + "\\n")
sys.exit(code)
"""


def test_job_loads_only_what_it_needs(tmp_path, spool):
    db = tmp_path / "s.db"
    conn = store.connect(db)
    assert store.ingest_paths(conn, [spool]).new_steps > 0
    conn.close()
    job_id = sqlite3.connect(db).execute("SELECT job_id FROM jobs LIMIT 1").fetchone()[0]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, "-c", CODE, "--db", str(db), "job", str(job_id)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"Job {job_id}" in p.stdout
    mods = set(json.loads(p.stderr.rsplit("MODULES ", 1)[1]))
    click_mods = set(json.loads(subprocess.run(
        [sys.executable, "-c", "import click, json, sys; print(json.dumps(list(sys.modules)))"],
        capture_output=True, text=True, env=env, timeout=120, check=True).stdout))
    assert "joulestep.commands.job" in mods and "sqlite3" in mods
    assert {m for m in mods if m.startswith("joulestep.commands.")} == {
        "joulestep.commands.job"}
    ours = (mods - click_mods) & NOT_ON_THE_JOB_PATH
    assert not ours, sorted(ours)
