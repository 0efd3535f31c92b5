"""The Python phase marker installs on a compute node without the CLI's
dependencies: the `joulestep-marker` package (marker/) is `joulestep` and
`joulestep.phase` alone, standard library only, and keeps the documented
`with joulestep.phase(...)` interface.

Offline, as test_wheel.py: the wheel is built with Debian's python3-build
(`--no-isolation`) from a copy of marker/ and cli/ (its modules link to the
CLI's files); it is installed into a fresh venv that sees no other
packages (no --system-site-packages, no pip), where it marks a phase
against a stand-in of the plugin's socket, and where a stale
JOULESTEP_SOCKET does not stop the program.
"""
from __future__ import annotations

import pathlib
import shutil
import socket
import subprocess
import sys
import threading
import zipfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from pkgtest import REPO, pyproject  # noqa: E402
from test_wheel import SYS_PYTHON, sh  # noqa: E402


@pytest.fixture(scope="module")
def marker_wheel(tmp_path_factory) -> pathlib.Path:
    top = tmp_path_factory.mktemp("src")
    shutil.copytree(REPO / "marker", top / "marker", symlinks=True,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    shutil.copytree(REPO / "cli" / "src" / "joulestep", top / "cli" / "src" / "joulestep",
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheels")
    sh(SYS_PYTHON, "-m", "build", "--wheel", "--no-isolation", "--outdir", out,
       top / "marker")
    wheels = list(out.glob("joulestep_marker-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_marker_wheel_is_the_two_modules_and_no_dependency(marker_wheel):
    with zipfile.ZipFile(marker_wheel) as z:
        names = z.namelist()
        meta = next(z.read(n).decode() for n in names if n.endswith("/METADATA"))
        mods = sorted(n for n in names if not n.split("/")[0].endswith(".dist-info"))
        src = {n: z.read(n) for n in mods}
    assert mods == ["joulestep/__init__.py", "joulestep/phase.py"], mods
    assert "Requires-Dist" not in meta, meta
    # one source: the CLI's own files
    for n in mods:
        assert src[n] == (REPO / "cli" / "src" / n).read_bytes(), n
    version = pyproject()["project"]["version"]
    assert f"Version: {version}\n" in meta


def _server(path: pathlib.Path, got: list):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(str(path))
    srv.listen(1)
    srv.settimeout(30)

    def run():
        conn, _ = srv.accept()
        conn.settimeout(30)
        while True:
            m = conn.recv(512).decode()
            if not m:
                break
            got.append(m)
            ident = [f for f in m.split() if f.startswith("id=")]
            if ident:
                conn.send(f"JS1 OK {ident[0]} seq=0".encode())
        conn.close()
        srv.close()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_marker_installs_alone_and_marks_phases(marker_wheel, tmp_path):
    venv = tmp_path / "node"
    sh(SYS_PYTHON, "-m", "venv", "--without-pip", venv)
    py = venv / "bin" / "python"
    sh(SYS_PYTHON, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index",
       "--disable-pip-version-check", marker_wheel)
    # nothing of the CLI's: no click, pandas, numpy, and no joulestep command
    probe = ("import importlib.util as u\n"
             "print([m for m in ('click', 'pandas', 'numpy', 'scipy', 'matplotlib')"
             " if u.find_spec(m)])\n")
    assert sh(py, "-c", probe).stdout.strip() == "[]"
    assert not (venv / "bin" / "joulestep").exists()
    prog = ("import json, sys, joulestep\n"
            "ran = []\n"
            "with joulestep.phase('write', 'w1', sync=True) as p:\n"
            "    ran.append(1); p['nbytes'] = 42\n"
            "from joulestep.phase import begin, end\n"
            "print(json.dumps([ran, begin('checkpoint'), end(7)]))\n")
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
    # a stand-in of the plugin's socket: the markers reach it
    got = []
    sock = tmp_path / "step.sock"
    t = _server(sock, got)
    res = sh(py, "-c", prog, env=dict(env, JOULESTEP_SOCKET=str(sock)), cwd=tmp_path)
    t.join(30)
    assert res.stdout.strip() == "[[1], 0, 0]", res.stdout
    kinds = [m.split()[1:3] for m in got]
    assert kinds == [["BEGIN", "write"], ["END", "bytes=42"], ["BEGIN", "checkpoint"],
                     ["END", "bytes=7"]], got
    # a stale socket (a job that resubmits itself): the body runs, no error
    res = sh(py, "-c", prog, env=dict(env, JOULESTEP_SOCKET=str(tmp_path / "gone.sock")),
             cwd=tmp_path)
    out = res.stdout.strip()
    assert out.startswith("[[1], -") and res.stderr == "", (out, res.stderr)
