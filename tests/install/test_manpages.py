"""The manual pages (docs/*.[1-8]): every page SEE ALSO names exists, the CLI
has its joulestep(1) naming every command, and groff reads them without a
warning (issue 25, point 11)."""
import re
import subprocess
import sys

from pkgtest import REPO, repo_manpages

OURS = re.compile(r"^\.BR\s+(joulestep[\w-]*)\s+\((\d)\)", re.M)


def test_see_also_names_pages_that_exist():
    pages = repo_manpages()
    assert {"joulestep.1", "joulestep-phase.1", "joulestep-restore.8",
            "joulestep-spank.8", "joulestep-plugstack-check.8"} <= pages
    for p in pages:
        text = (REPO / "docs" / p).read_text()
        see = text.split(".SH SEE ALSO", 1)[1]
        for name, sec in OURS.findall(see):
            assert f"{name}.{sec}" in pages, (p, name, sec)


def test_joulestep_1_names_every_command():
    sys.path.insert(0, str(REPO / "cli" / "src"))
    from joulestep.cli import COMMANDS
    text = (REPO / "docs" / "joulestep.1").read_text()
    for c in COMMANDS:
        assert re.search(rf"^\.B(R)? {c}\b", text, re.M), c


def test_groff_reads_them_without_warnings():
    for p in repo_manpages():
        res = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(REPO / "docs" / p)],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0 and res.stderr == "", (p, res.stderr)
