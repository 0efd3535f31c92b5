"""`joulestep doctor` right for each node type: RAPL, AMD (powercap or
amd_energy only), HPE/Cray pm_counters, NVIDIA Grace hwmon, GPU nodes, and
a node where nothing can be measured.  Every plugstack line it suggests is
judged by the plugin's own parser (build/bin/joulestep-plugstack-check);
`doctor --node` fails where nothing can be measured, or where the node's
line asks for a backend the node lacks."""
import json
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "fakehw"))
import fakehw  # noqa: E402


@pytest.fixture(params=["sqlite"])
def engine(request):       # doctor reads sysfs; one engine is enough
    return request.param


@pytest.fixture(scope="module")
def checker(build_dir):
    exe = build_dir / "bin" / "joulestep-plugstack-check"
    if not exe.exists():
        pytest.fail(f"{exe} missing: run make")
    return exe


def gpus(root, driver, n):
    """n PCI GPUs bound to ``driver`` (nvidia, amdgpu), as sysfs lists them
    (bus/pci/drivers/<driver>/<address>)."""
    d = root / "bus" / "pci" / "drivers" / driver
    d.mkdir(parents=True)
    for i in range(n):
        (d / f"0000:{0x17 + i:02x}:00.0").mkdir()
    (d / "module").mkdir()


def node(tmp_path, kind):
    hw = tmp_path / kind
    if kind == "rapl":
        fakehw.create(str(hw))
    elif kind == "amd-powercap":
        fakehw.create(str(hw), vendor="amd", amd_energy=True)
    elif kind == "amd-energy-only":
        fakehw.create(str(hw), vendor="amd", amd_energy=True)
        shutil.rmtree(hw / "class" / "powercap")
    elif kind == "pm-counters":
        fakehw.create(str(hw), vendor="amd", pm_counters=True, accels=4)
    elif kind == "grace":
        fakehw.create(str(hw), grace=True)
        shutil.rmtree(hw / "class" / "powercap")      # Grace has no RAPL
    elif kind == "nvidia-gpus":
        fakehw.create(str(hw))
        gpus(hw, "nvidia", 4)
    elif kind == "amd-gpus":
        fakehw.create(str(hw), vendor="amd")
        gpus(hw, "amdgpu", 8)
    elif kind == "nothing":
        fakehw.create(str(hw))
        shutil.rmtree(hw / "class" / "powercap")
    return hw


#: node type -> (backend=, node_energy=, gpu_backend=) the line must set
WANT = {"rapl": ("sysfs", None, None), "amd-powercap": ("sysfs", None, None),
        "amd-energy-only": ("amd_energy", None, None),
        "pm-counters": ("sysfs", "pm_counters", None),
        "grace": (None, "hwmon", None),
        "nvidia-gpus": ("sysfs", None, "nvml"), "amd-gpus": ("sysfs", None, "amdsmi"),
        "nothing": (None, None, None)}


def keys(line):
    return dict(w.split("=", 1) for w in line.split()[2:])


@pytest.mark.parametrize("kind", sorted(WANT))
def test_suggested_line_fits_the_node_and_the_plugin_accepts_it(run, checker, tmp_path,
                                                                kind):
    hw = node(tmp_path, kind)
    r = json.loads(run("doctor", "--sysfs", hw, "--format", "json").stdout)
    line = r["plugstack"]
    res = subprocess.run([str(checker), "--", *line.split()[2:]], capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0, (line, res.stderr)
    k = keys(line)
    backend, meter, gpu = WANT[kind]
    assert k.get("backend") == backend, line
    assert k.get("node_energy") == meter, line
    assert k.get("gpu_backend") == gpu, line
    # never a backend the node lacks: sysfs reads RAPL zones only
    if kind in ("amd-energy-only", "grace", "nothing"):
        assert "sysfs" not in k.get("backend", "").split(","), line
    text = run("doctor", "--sysfs", hw).stdout
    assert "backend=sysfs" not in text or backend == "sysfs", text


def test_gpus_and_node_meters_are_reported(run, tmp_path):
    m = json.loads(run("doctor", "--sysfs", node(tmp_path, "nvidia-gpus"),
                       "--format", "json").stdout)["measures"]
    assert m["gpus"] == {"vendor": "nvidia", "driver": "nvidia", "count": 4,
                         "backend": "nvml"}
    text = run("doctor", "--sysfs", tmp_path / "nvidia-gpus").stdout
    assert "GPU energy: 4 NVIDIA GPU(s)" in text and "gpu_backend=nvml" in text
    m = json.loads(run("doctor", "--sysfs", node(tmp_path, "rapl"), "--format",
                       "json").stdout)["measures"]
    assert m["gpus"] is None
    assert "GPU energy: no GPU" in run("doctor", "--sysfs", tmp_path / "rapl").stdout


def _plugstack(tmp_path, args):
    so = tmp_path / "joulestep.so"
    so.write_bytes(b"")
    conf = tmp_path / "plugstack.conf"
    conf.write_text(f"optional {so} {args}\n")
    return conf


def test_node_check_fails_where_nothing_can_be_measured(run, checker, tmp_path,
                                                        monkeypatch):
    monkeypatch.setenv("JOULESTEP_PLUGSTACK_CHECK", str(checker))
    conf = _plugstack(tmp_path, "spool=/var/spool/joulestep")
    # a RAPL node with an accepted line: 0
    r = run("doctor", "--node", "--plugstack", conf, "--sysfs", node(tmp_path, "rapl"))
    assert r.exit_code == 0, r.output
    # nothing to measure: 1, and says so (it exited 0: the pdsh check missed it)
    r = run("doctor", "--node", "--plugstack", conf, "--sysfs", node(tmp_path, "nothing"),
            ok=False)
    assert r.exit_code == 1 and "nothing can be measured" in r.output, r.output
    # a Grace node measures its node meter: not "nothing"
    conf2 = _plugstack(tmp_path, "node_energy=hwmon")
    r = run("doctor", "--node", "--plugstack", conf2, "--sysfs", node(tmp_path, "grace"))
    assert r.exit_code == 0, r.output


def test_node_check_refuses_a_backend_the_node_lacks(run, checker, tmp_path, monkeypatch):
    monkeypatch.setenv("JOULESTEP_PLUGSTACK_CHECK", str(checker))
    hw = node(tmp_path, "amd-energy-only")
    conf = _plugstack(tmp_path, "backend=powercap,sysfs")
    r = run("doctor", "--node", "--plugstack", conf, "--sysfs", hw, ok=False)
    assert r.exit_code == 1 and "backend=amd_energy" in r.output, r.output
    conf = _plugstack(tmp_path, "backend=amd_energy")
    assert run("doctor", "--node", "--plugstack", conf, "--sysfs", hw).exit_code == 0
