"""joulestep-run --node: node-level energy beside RAPL (issue 24, part 3).

The fake trees (tests/fakehw create --pm-counters / --grace) move with the
same model as the RAPL zones; the simulator's `advance` report is the truth.
pm_counters `energy` is the node and includes cpu/memory/accel: the total is
it alone. A Grace socket's Module power includes its CPU, SysIO and GPU: the
total is the Module sensors alone, integrated over time.
"""
import json
import subprocess
import sys

import pytest

import fakehw

FAKEHW = [sys.executable, str(fakehw.__file__)]


@pytest.fixture
def run_exe(build_dir):
    return str(build_dir / "bin" / "joulestep-run")


def run_json(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    start = out.rindex("\n{\n") + 1 if "\n{\n" in out else out.index("{")
    return json.loads(out[start:]), out[:start], p


def test_pm_counters_node_total_is_energy_alone(tmp_path, run_exe):
    root = tmp_path / "hpe"
    fakehw.create(str(root), pm_counters=True, accels=2)
    rep, out, _ = run_json([run_exe, "--sysfs", str(root), "--backend", "sysfs", "--node",
                            "auto", "--json", "--"] + FAKEHW +
                           ["advance", str(root), "--seconds", "7.3", "--util", "0.6"])
    truth = json.loads(out)["zones"]
    node = rep["node"]
    assert node["source"] == "pm_counters" and node["integrated"] is False
    assert node["total_sources"] == "pm_counters:energy"
    # whole joules in the files: within 1 J of the simulator's truth
    assert abs(node["energy_j"] * 1e6 - truth["pm:energy"]["energy_uj"]) <= 1e6
    ch = {c["name"]: c for c in node["channels"]}
    for name in ("cpu_energy", "memory_energy", "accel0_energy", "accel1_energy"):
        assert abs(ch[name]["energy_j"] * 1e6 - truth["pm:" + name]["energy_uj"]) <= 1e6
        assert ch[name]["total"] is False
    parts = sum(ch[n]["energy_j"] for n in ch if n != "energy")
    assert node["energy_j"] > parts          # energy includes them (and the platform)
    # RAPL is still there, and the node's cpu_energy is the packages' (same model)
    assert abs(rep["energy_cpu_uj"] - truth["pm:cpu_energy"]["energy_uj"]) <= 1e6


def test_pm_counters_reset_is_unknown_not_wrong(tmp_path, run_exe):
    root = tmp_path / "hpe"
    fakehw.create(str(root), pm_counters=True)
    adv = " ".join(FAKEHW + ["advance", str(root), "--seconds", "2"])
    script = f"{adv} >/dev/null && {' '.join(FAKEHW)} pm-reset {root} && {adv} >/dev/null"
    rep, _, _ = run_json([run_exe, "--sysfs", str(root), "--backend", "sysfs", "--node",
                          "pm_counters", "--json", "--", "sh", "-c", script])
    node = rep["node"]
    assert node["energy_j"] is None
    assert "generation changed" in node["not_measured"]
    assert all(c["energy_j"] is None and c["uncertain"] for c in node["channels"])
    assert rep["energy_cpu_j"] > 0                 # RAPL is not affected


def test_grace_module_power_integrated(tmp_path, run_exe):
    root = tmp_path / "grace"
    fakehw.create(str(root), grace=True)
    truth = fakehw.advance(str(root), 1, util=[1.0, 0.5, 0.0, 0.25])["zones"]
    rep, _, p = run_json([run_exe, "--sysfs", str(root), "--backend", "sysfs", "--node",
                          "hwmon", "--json", "--", "sleep", "1"])
    node = rep["node"]
    assert node["source"] == "hwmon" and node["integrated"] is True
    assert node["total_sources"] == "hwmon:Module Power Socket 0+hwmon:Module Power Socket 1"
    module_w = truth["grace:module:0"]["power_w"] + truth["grace:module:1"]["power_w"]
    # constant power between advances: the trapezoids are exact up to rounding
    assert node["energy_j"] == pytest.approx(module_w * node["duration_s"], rel=1e-4)
    ch = {c["name"]: c for c in node["channels"]}
    cpu0 = truth["grace:cpu:0"]["power_w"]
    assert ch["CPU Power Socket 0"]["energy_j"] == pytest.approx(cpu0 * node["duration_s"],
                                                                 rel=1e-4)
    # Module includes CPU and SysIO: they are never added to the total
    everything = sum(c["energy_j"] for c in node["channels"])
    assert node["energy_j"] < everything
    text = subprocess.run([run_exe, "--sysfs", str(root), "--backend", "sysfs", "--node",
                           "hwmon", "--", "true"], capture_output=True, text=True).stderr
    assert "integrated power" in text and "node (hwmon:Module Power Socket 0+" in text


def test_node_absent_and_bad_names(tmp_path, run_exe):
    root = tmp_path / "plain"
    fakehw.create(str(root))
    rep, _, _ = run_json([run_exe, "--sysfs", str(root), "--backend", "sysfs", "--node",
                          "auto", "--json", "--", "true"])
    assert rep["node"]["source"] is None and rep["node"]["energy_j"] is None
    assert "pm_counters: no " in rep["node"]["not_measured"]
    assert "node" not in run_json([run_exe, "--sysfs", str(root), "--backend", "sysfs",
                                   "--json", "--", "true"])[0]
    p = subprocess.run([run_exe, "--sysfs", str(root), "--backend", "sysfs", "--node", "ipmi",
                        "--", "true"], capture_output=True, text=True)
    assert p.returncode != 0 and "ipmi: unknown node source" in p.stderr
