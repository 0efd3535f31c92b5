"""Build and run the cmocka unit tests of the plugin's pure logic (tests/spank/test_parse.c)
and check the plugin's exported symbols and the client library's no-op contract."""
import ctypes
import os
import subprocess

import pytest


def test_parse_and_phase_logic(repo, tmp_path):
    exe = tmp_path / "test_parse"
    cmd = ["cc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-g",
           f"-I{repo}/spank", str(repo / "tests/spank/test_parse.c"),
           str(repo / "spank/js_parse.c"), str(repo / "spank/js_phase.c"),
           str(repo / "spank/js_tuned.c"), str(repo / "spank/js_auto.c"), str(repo / "spank/js_jobcache_logic.c"), "-o", str(exe), "-lcmocka", "-ljansson", "-lm"]
    subprocess.run(cmd, check=True)
    # the tuned-file reader test writes its files here (root-owned, as in production)
    res = subprocess.run([str(exe)], capture_output=True, text=True,
                         env={**os.environ, "JS_TEST_TMPDIR": str(tmp_path)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "PASSED" in res.stdout + res.stderr


def test_plugin_exports_only_spank_symbols(build_dir):
    so = build_dir / "spank" / "joulestep.so"
    if not so.exists():
        pytest.fail("build/spank/joulestep.so missing: run make")
    out = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True,
                         check=True).stdout
    names = {l.split()[-1] for l in out.splitlines() if l.strip()}
    assert {"plugin_name", "plugin_type", "plugin_version", "spank_plugin_version",
            "slurm_spank_init", "slurm_spank_exit"} <= names
    assert all(n.startswith(("slurm_spank_", "plugin_", "spank_plugin_version")) for n in names), names


def test_client_is_noop_outside_a_step(build_dir, monkeypatch):
    monkeypatch.delenv("JOULESTEP_SOCKET", raising=False)
    lib = ctypes.CDLL(str(build_dir / "lib" / "libjoulestep-client.so"))
    lib.js_phase_end.argtypes = [ctypes.c_longlong]
    assert lib.js_phase_begin(b"write", None) == 1  # JS_NOT_IN_STEP
    assert lib.js_phase_end(5) == 1
    assert lib.js_phase_begin(b"Bad Kind", None) == -22  # checked before anything else
    res = subprocess.run([str(build_dir / "bin" / "joulestep-phase"), "-v", "begin", "write"],
                         capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                                              if k != "JOULESTEP_SOCKET"})
    assert res.returncode == 0 and "not in a joulestep step" in res.stderr
    res = subprocess.run([str(build_dir / "bin" / "joulestep-phase"), "end", "--bytes", "x"],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "non-negative integer" in res.stderr


def test_python_client_is_noop_outside_a_step(repo, monkeypatch):
    import importlib.util
    spec = importlib.util.spec_from_file_location("jsphase", repo / "cli/src/joulestep/phase.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.delenv("JOULESTEP_SOCKET", raising=False)
    with mod.phase("write", nbytes=3) as p:
        p["nbytes"] = 4
    assert mod.begin("compute") == mod.NOT_IN_STEP
    # a bad kind is not recorded, and never raises (markers never fail the job)
    assert mod.begin("Bad Kind") == -22     # -EINVAL, as the C library
