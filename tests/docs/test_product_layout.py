"""What users run lives outside tests/: the simulator the README points at
(sim/fakehw.py) and the demo (demo/demo.py, `make demo`) run from their
own homes."""
import os
import re
import subprocess
import sys


def test_readme_simulator_command_makes_a_tree(repo, tmp_path):
    text = (repo / "README.md").read_text()
    m = re.search(r"`python3 (sim/fakehw\.py) create /tmp/fake`", text)
    assert m, "README names the simulator's command"
    root = tmp_path / "fake"
    res = subprocess.run([sys.executable, str(repo / m.group(1)), "create", str(root)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    zone = root / "class" / "powercap" / "intel-rapl:0" / "energy_uj"
    assert int(zone.read_text()) >= 0
    assert not re.search(r"tests/fakehw/fakehw\.py|tests/cluster/demo\.py", text)


def test_demo_runs_from_its_home(repo):
    assert "demo/demo.py" in (repo / "Makefile").read_text()
    res = subprocess.run([str(repo / ".venv" / "bin" / "python"), str(repo / "demo" / "demo.py"),
                          "--help"], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ))
    assert res.returncode == 0 and "usage" in res.stdout.lower(), res.stdout + res.stderr
