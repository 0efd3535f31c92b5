"""fakehw's cpufreq variants: shared policies (--cpus-per-policy), intel_pstate's
base_frequency (--base-khz) and acpi-cpufreq's turbo entry (--acpi-turbo).

Expected layouts are the kernel's, written out here by hand."""
import json
import os
import subprocess
import sys

import pytest

import fakehw

FAKEHW = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fakehw.py")


def cf(root, cpu):
    return root / "devices/system/cpu" / f"cpu{cpu}" / "cpufreq"


def test_shared_policies_layout(tmp_path):
    root = tmp_path / "sys"
    fakehw.create(str(root), packages=1, cpus_per_package=4, cpus_per_policy=2)
    pols = sorted(p.name for p in (root / "devices/system/cpu/cpufreq").iterdir())
    assert pols == ["policy0", "policy2"]
    for cpu, pol in ((0, 0), (1, 0), (2, 2), (3, 2)):
        assert os.readlink(cf(root, cpu)) == f"../cpufreq/policy{pol}"
        assert (cf(root, cpu) / "related_cpus").read_text() == f"{pol} {pol + 1}\n"
        assert (cf(root, cpu) / "affected_cpus").read_text() == f"{pol} {pol + 1}\n"


def test_shared_policy_write_moves_every_member(tmp_path):
    root = tmp_path / "sys"
    fakehw.create(str(root), variant="pstate", packages=1, cpus_per_package=4,
                  cpus_per_policy=2, fmax_khz=2400000)
    (cf(root, 1) / "scaling_max_freq").write_text("1200000\n")
    rep = fakehw.advance(str(root), 1.0, 1.0)
    freqs = rep["zones"]["intel-rapl:0"]["freq_khz"]
    assert freqs == {"0": 1200000, "1": 1200000, "2": 2400000, "3": 2400000}
    assert fakehw.read_cpufreq(str(root), 0)["effective_khz"] == 1200000
    assert fakehw.read_cpufreq(str(root), 0)["scaling_cur_freq"] == 1200000


def test_default_is_one_policy_per_cpu(tmp_path):
    root = tmp_path / "sys"
    fakehw.create(str(root))
    for cpu in range(4):
        assert os.readlink(cf(root, cpu)) == f"../cpufreq/policy{cpu}"
        assert (cf(root, cpu) / "related_cpus").read_text() == f"{cpu}\n"
        assert not (cf(root, cpu) / "base_frequency").exists()


def test_pstate_base_frequency(tmp_path):
    root = tmp_path / "sys"
    fakehw.create(str(root), variant="pstate", fmax_khz=4000000, base_khz=3000000)
    f = fakehw.read_cpufreq(str(root), 1)
    assert f["base_frequency"] == 3000000 and f["cpuinfo_max_freq"] == 4000000


def test_acpi_turbo_entry(tmp_path):
    root = tmp_path / "sys"
    fakehw.create(str(root), fmax_khz=2400000, fmin_khz=2000000, acpi_turbo=True)
    f = fakehw.read_cpufreq(str(root), 0)
    assert f["scaling_available_frequencies"] == "2401000 2400000 2300000 2200000 2100000 2000000"
    assert f["cpuinfo_max_freq"] == f["scaling_max_freq"] == 2401000


@pytest.mark.parametrize("kw", [dict(cpus_per_policy=0), dict(base_khz=3000000),
                                dict(variant="pstate", base_khz=100),
                                dict(variant="pstate", acpi_turbo=True)])
def test_variant_refuses_bad_input(tmp_path, kw):
    with pytest.raises(fakehw.FakeHwError):
        fakehw.create(str(tmp_path / "sys"), **kw)


def test_cli_options(tmp_path):
    root = tmp_path / "sys"
    subprocess.run([sys.executable, FAKEHW, "create", str(root), "--variant", "pstate",
                    "--cpus-per-policy", "2", "--base-khz", "2000000"], check=True)
    out = subprocess.run([sys.executable, FAKEHW, "read-cpufreq", str(root), "1"],
                         check=True, capture_output=True, text=True).stdout
    f = json.loads(out)
    assert f["related_cpus"] == "0 1" and f["base_frequency"] == 2000000
