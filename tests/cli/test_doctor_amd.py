"""`joulestep doctor` on AMD nodes (issue 24): what they can measure.

Fake AMD trees (tests/fakehw: --vendor amd [--amd-energy]): package energy
from powercap or from the amd_energy hwmon driver's socket counters, DRAM
not measured (null in the records, never 0).
"""
import shutil
import sys

import pytest

from conftest import jrun

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "fakehw"))
import fakehw  # noqa: E402


@pytest.fixture(params=["sqlite"])
def engine(request):       # doctor reads sysfs; one engine is enough
    return request.param


def test_doctor_amd_powercap(run, tmp_path):
    hw = tmp_path / "hw"
    fakehw.create(str(hw), vendor="amd", amd_energy=True)
    r = jrun(run, "doctor", "--sysfs", hw)
    m = r["measures"]
    assert r["counted"] == {"package": 2, "dram": 0}
    assert m["cpu"] == "measured" and m["backend"] == "powercap,sysfs"
    assert m["dram"] == "not measured" and "no dram zone" in m["dram_not_measured"]
    assert m["amd_energy"] == {"hwmon": "hwmon0", "sockets": [0, 1], "cores": 4,
                               "readable": True}
    text = run("doctor", "--sysfs", hw).stdout
    assert "DRAM energy: not measured" in text and "never 0" in text


def test_doctor_amd_energy_only(run, tmp_path):
    """No RAPL powercap zone: the socket counters of amd_energy measure the
    CPU (the per-core ones are inside them), with backend=amd_energy."""
    full = tmp_path / "full"
    fakehw.create(str(full), vendor="amd", amd_energy=True, cpus_per_package=3)
    shutil.rmtree(full / "class" / "powercap")
    r = jrun(run, "doctor", "--sysfs", full)
    m = r["measures"]
    assert r["counted"] == {"package": 0, "dram": 0}
    assert m["backend"] == "amd_energy" and m["cpu"] == "measured"
    assert "2 socket counter(s)" in m["cpu_source"] and "6 per-core" in m["cpu_source"]
    assert any("set backend=amd_energy" in p for p in r["problems"])
    assert m["dram"] == "not measured"


def test_doctor_intel_measures_dram(run, tmp_path):
    hw = tmp_path / "hw"
    fakehw.create(str(hw))
    m = jrun(run, "doctor", "--sysfs", hw)["measures"]
    assert m["dram"] == "measured" and m["dram_not_measured"] is None
    assert m["amd_energy"] is None


def test_doctor_names_the_node_meter(run, tmp_path):
    hpe, grace = tmp_path / "hpe", tmp_path / "grace"
    fakehw.create(str(hpe), vendor="amd", pm_counters=True, accels=2)
    fakehw.create(str(grace), grace=True)
    n = jrun(run, "doctor", "--sysfs", hpe)["measures"]["node_meter"]
    assert n == {"source": "pm_counters", "total": "energy",
                 "channels": ["accel0_energy", "accel1_energy", "cpu_energy", "energy",
                              "memory_energy"]}
    n = jrun(run, "doctor", "--sysfs", grace)["measures"]["node_meter"]
    assert n["source"] == "hwmon" and len(n["channels"]) == 6
    assert n["total"] == "Module Power Socket 0+Module Power Socket 1"
    assert "node meter: hwmon" in run("doctor", "--sysfs", grace).stdout


def test_doctor_names_the_uncore(run, tmp_path):
    """issue 24, part 4: the uncore domains +uncore-io can cap, by layout."""
    classic, tpmi, none = tmp_path / "c", tmp_path / "t", tmp_path / "n"
    fakehw.create(str(classic), packages=2, dies=2, uncore="classic")
    fakehw.create(str(tpmi), packages=2, uncore="tpmi")
    fakehw.create(str(none))
    u = jrun(run, "doctor", "--sysfs", classic)["measures"]["uncore"]
    assert u == {"layout": "classic", "domains": ["package_00_die_00", "package_00_die_01",
                                                  "package_01_die_00", "package_01_die_01"]}
    u = jrun(run, "doctor", "--sysfs", tpmi)["measures"]["uncore"]
    assert u == {"layout": "tpmi", "domains": ["uncore00", "uncore01"]}
    assert jrun(run, "doctor", "--sysfs", none)["measures"]["uncore"] is None
    assert "uncore clock: 2 domain(s), intel_uncore_frequency (tpmi)" in \
        run("doctor", "--sysfs", tpmi).stdout
    assert "uncore clock: none" in run("doctor", "--sysfs", none).stdout
