"""Tests of the fake node hardware (tests/fakehw/fakehw.py).

The expected numbers are computed by hand from the power model in README.md;
they are not read back from fakehw's own model code.
"""
import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest

import fakehw

HERE = pathlib.Path(__file__).resolve().parent
FAKEHW = str(HERE / "fakehw.py")
PKG_MAX = 262143328850
DRAM_MAX = 65712999613
# With the default model: 2 busy CPUs at fmax -> package 10 + 2*15 = 40 W, dram 2 + 4 = 6 W.
PKG_W_FULL = 40.0
DRAM_W_FULL = 6.0

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (tests run as root)")


def run(*args, check=True, **kw):
    p = subprocess.run([sys.executable, FAKEHW, *map(str, args)], capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"fakehw {args} failed ({p.returncode}): {p.stderr}")
    return p


def read(path):
    return pathlib.Path(path).read_text()


def counter(root, zone):
    return int(read(root / "class/powercap" / zone / "energy_uj"))


def write_cpufreq(root, cpu, name, value):
    (root / "devices/system/cpu" / f"cpu{cpu}" / "cpufreq" / name).write_text(f"{value}\n")


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "sys"
    fakehw.create(r)
    return r


# ---------------------------------------------------------------- tree shape

def test_tree_zones_symlinks_and_modes(root):
    cls = root / "class/powercap"
    expected = {
        "intel-rapl:0": "package-0", "intel-rapl:0:0": "dram", "intel-rapl:0:1": "core",
        "intel-rapl:1": "package-1", "intel-rapl:1:0": "dram", "intel-rapl:1:1": "core",
        "intel-rapl:2": "psys", "intel-rapl-mmio:0": "package-0",
    }
    flat = sorted(p.name for p in cls.iterdir() if ":" in p.name)
    assert flat == sorted(expected)
    assert os.readlink(cls / "intel-rapl") == "../../devices/virtual/powercap/intel-rapl"
    assert os.readlink(cls / "intel-rapl-mmio") == "../../devices/virtual/powercap/intel-rapl-mmio"
    assert os.readlink(cls / "intel-rapl:0") == "../../devices/virtual/powercap/intel-rapl/intel-rapl:0"
    assert os.readlink(cls / "intel-rapl:1:0") == \
        "../../devices/virtual/powercap/intel-rapl/intel-rapl:1/intel-rapl:1:0"
    assert os.readlink(cls / "intel-rapl-mmio:0") == \
        "../../devices/virtual/powercap/intel-rapl-mmio/intel-rapl-mmio:0"
    # nested real directories, as the kernel has them
    nested = root / "devices/virtual/powercap/intel-rapl/intel-rapl:0/intel-rapl:0:0"
    assert nested.is_dir() and not nested.is_symlink()
    for zone, name in expected.items():
        z = cls / zone
        assert read(z / "name") == name + "\n"
        for f in ("energy_uj", "max_energy_range_uj", "constraint_0_name", "constraint_0_max_power_uw",
                  "constraint_0_power_limit_uw", "enabled"):
            assert (z / f).is_file(), (zone, f)
        want_max = DRAM_MAX if name == "dram" else PKG_MAX
        assert int(read(z / "max_energy_range_uj")) == want_max
        assert 0 <= counter(root, zone) <= want_max
        assert stat.S_IMODE(os.stat(z / "energy_uj").st_mode) == 0o400  # created as root
        assert stat.S_IMODE(os.stat(z / "name").st_mode) == 0o444
        assert stat.S_IMODE(os.stat(z / "constraint_0_power_limit_uw").st_mode) == 0o644
    assert int(read(cls / "intel-rapl:0/constraint_0_max_power_uw")) == 40_000_000


def test_tree_cpufreq_acpi(root):
    cpu = root / "devices/system/cpu"
    assert read(cpu / "online") == "0-3\n" and read(cpu / "possible") == "0-3\n"
    for c in range(4):
        assert os.readlink(cpu / f"cpu{c}" / "cpufreq") == f"../cpufreq/policy{c}"
        assert read(cpu / f"cpu{c}/topology/physical_package_id") == f"{c // 2}\n"
    f = fakehw.read_cpufreq(root, 1)
    assert f["scaling_driver"] == "acpi-cpufreq"
    assert f["scaling_governor"] == "schedutil"
    assert f["scaling_available_governors"] == "conservative ondemand userspace powersave performance schedutil"
    assert f["scaling_setspeed"] == "<unsupported>"
    assert f["cpuinfo_min_freq"] == 800000 and f["cpuinfo_max_freq"] == 2400000
    assert f["scaling_min_freq"] == 800000 and f["scaling_max_freq"] == 2400000
    assert f["related_cpus"] == 1 and f["affected_cpus"] == 1
    avail = [int(x) for x in f["scaling_available_frequencies"].split()]
    assert avail == list(range(2400000, 799999, -100000))
    pol = cpu / "cpu1/cpufreq"
    assert stat.S_IMODE(os.stat(pol / "scaling_setspeed").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(pol / "scaling_cur_freq").st_mode) == 0o444
    assert stat.S_IMODE(os.stat(pol / "cpuinfo_cur_freq").st_mode) == 0o400


def test_tree_pstate_multidie_nodram(tmp_path):
    r = tmp_path / "sys"
    run("create", r, "--variant", "pstate", "--packages", "1", "--cpus-per-package", "4",
        "--multi-die", "--no-dram")
    cls = r / "class/powercap"
    names = {p.name: read(p / "name").strip() for p in cls.iterdir() if ":" in p.name}
    assert names == {"intel-rapl:0": "package-0-die-0", "intel-rapl:0:1": "core",
                     "intel-rapl:1": "package-0-die-1", "intel-rapl:1:1": "core",
                     "intel-rapl:2": "psys", "intel-rapl-mmio:0": "package-0"}
    f = fakehw.read_cpufreq(r, 3)
    assert f["scaling_driver"] == "intel_pstate"
    assert f["scaling_available_governors"] == "performance powersave"
    assert "scaling_setspeed" not in f and "scaling_available_frequencies" not in f
    assert read(r / "devices/system/cpu/cpu3/topology/die_id") == "1\n"


def test_create_refuses_bad_input(tmp_path):
    p = run("create", tmp_path / "a", "--cpus-per-package", "3", "--multi-die", check=False)
    assert p.returncode == 2 and "multiple of dies" in p.stderr
    p = run("create", tmp_path / "b", "--param", "nope=1", check=False)
    assert p.returncode == 2 and "unknown model parameter" in p.stderr
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x").write_text("")
    p = run("create", tmp_path / "c", check=False)
    assert p.returncode == 2 and "not empty" in p.stderr


# ---------------------------------------------------------------- model numbers

def test_full_load_at_fmax(root):
    before = {z: counter(root, z) for z in ("intel-rapl:0", "intel-rapl:0:0", "intel-rapl:2")}
    rep = json.loads(run("advance", root, "--seconds", "2", "--util", "1").stdout)
    assert rep["zones"]["intel-rapl:0"]["energy_uj"] == 80_000_000          # 40 W * 2 s
    assert rep["zones"]["intel-rapl:0:0"]["energy_uj"] == 12_000_000        # 6 W * 2 s
    assert rep["zones"]["intel-rapl:0:1"]["energy_uj"] == 60_000_000        # cores only
    assert rep["zones"]["intel-rapl:2"]["energy_uj"] == 200_000_000         # 2*(40+6)+8 W
    assert rep["zones"]["intel-rapl-mmio:0"]["energy_uj"] == 80_000_000
    assert rep["energy_cpu_uj"] == 160_000_000
    assert rep["energy_dram_uj"] == 24_000_000
    assert rep["energy_total_uj"] == 184_000_000
    assert rep["zones"]["intel-rapl:0"]["freq_khz"] == {"0": 2400000, "1": 2400000}
    assert counter(root, "intel-rapl:0") == before["intel-rapl:0"] + 80_000_000
    assert counter(root, "intel-rapl:0:0") == before["intel-rapl:0:0"] + 12_000_000
    assert counter(root, "intel-rapl:2") == before["intel-rapl:2"] + 200_000_000


def test_idle_and_util_list(root):
    rep = fakehw.advance(root, 1, util=0.0)
    assert rep["zones"]["intel-rapl:0"]["energy_uj"] == 12_000_000   # 10 + 2*1 W
    assert rep["zones"]["intel-rapl:0:0"]["energy_uj"] == 2_000_000
    rep = fakehw.advance(root, 1, util=[1.0, 0.0, 0.5, 0.5])
    assert rep["zones"]["intel-rapl:0"]["energy_uj"] == 26_000_000   # 10 + 15 + 1
    assert rep["zones"]["intel-rapl:1"]["energy_uj"] == 26_000_000   # 10 + 2*(7.5+0.5)
    assert rep["zones"]["intel-rapl:0:0"]["energy_uj"] == 4_000_000  # 2 + 0.5*4
    with pytest.raises(fakehw.FakeHwError, match="4 values"):
        fakehw.advance(root, 1, util=[1.0, 0.0])


def test_setspeed_at_0875_fmax_follows_power_model(root):
    # 0.875 * 2.4 GHz = 2.1 GHz.  g(f) = 0.0086 f^4.038 + 0.757:
    # g(2.1) = 0.0086*20.0046 + 0.757 = 0.929040, g(2.4) = 0.0086*34.3041 + 0.757 = 1.052015
    # package-0 = 10 + 2 * 15 * 0.929040/1.052015 = 36.4932 W
    for c in (0, 1):
        write_cpufreq(root, c, "scaling_governor", "userspace")
        write_cpufreq(root, c, "scaling_setspeed", 2100000)
    rep = fakehw.advance(root, 1, util=1.0)
    p0 = rep["zones"]["intel-rapl:0"]["energy_uj"] / 1e6
    assert p0 == pytest.approx(36.4932, abs=0.001)
    g = lambda f: 0.0086 * f ** 4.038 + 0.757
    assert abs(rep["zones"]["intel-rapl:0"]["energy_uj"] - (10 + 30 * g(2.1) / g(2.4)) * 1e6) <= 1
    assert rep["zones"]["intel-rapl:1"]["energy_uj"] == 40_000_000   # package 1 untouched
    assert rep["zones"]["intel-rapl:0"]["freq_khz"] == {"0": 2100000, "1": 2100000}
    saving = 1 - p0 / PKG_W_FULL
    assert 0.08 < saving < 0.09
    assert read(root / "devices/system/cpu/cpu0/cpufreq/scaling_cur_freq") == "2100000\n"
    assert read(root / "devices/system/cpu/cpu2/cpufreq/scaling_cur_freq") == "2400000\n"


def test_frequency_files_change_the_advance(root):
    # setspeed without the userspace governor is ignored (acpi semantics)
    write_cpufreq(root, 0, "scaling_setspeed", 800000)
    assert fakehw.advance(root, 1)["zones"]["intel-rapl:0"]["energy_uj"] == 40_000_000
    # scaling_max_freq caps the frequency with any governor
    write_cpufreq(root, 0, "scaling_setspeed", "<unsupported>")
    write_cpufreq(root, 0, "scaling_max_freq", 1200000)
    g = lambda f: 0.0086 * f ** 4.038 + 0.757
    rep = fakehw.advance(root, 1)
    want = (10 + 15 * g(1.2) / g(2.4) + 15) * 1e6
    assert abs(rep["zones"]["intel-rapl:0"]["energy_uj"] - want) <= 1
    assert rep["zones"]["intel-rapl:0"]["energy_uj"] < 40_000_000 - 3_900_000   # 36.05 W
    assert rep["zones"]["intel-rapl:0"]["freq_khz"] == {"0": 1200000, "1": 2400000}
    # userspace setspeed is clamped into [scaling_min, scaling_max]
    write_cpufreq(root, 0, "scaling_governor", "userspace")
    write_cpufreq(root, 0, "scaling_setspeed", 2400000)
    assert fakehw.read_cpufreq(root, 0)["effective_khz"] == 1200000
    write_cpufreq(root, 0, "scaling_max_freq", 2400000)
    write_cpufreq(root, 0, "scaling_min_freq", 1000000)
    write_cpufreq(root, 0, "scaling_setspeed", 800000)
    assert fakehw.read_cpufreq(root, 0)["effective_khz"] == 1000000
    # back to the original settings: full power again
    write_cpufreq(root, 0, "scaling_governor", "schedutil")
    write_cpufreq(root, 0, "scaling_min_freq", 800000)
    assert fakehw.advance(root, 1)["zones"]["intel-rapl:0"]["energy_uj"] == 40_000_000


def test_pstate_max_freq_cap(tmp_path):
    r = tmp_path / "sys"
    fakehw.create(r, variant="pstate", packages=1)
    g = lambda f: 0.0086 * f ** 4.038 + 0.757
    for c in (0, 1):
        write_cpufreq(r, c, "scaling_max_freq", 2000000)
    rep = fakehw.advance(r, 1)
    assert abs(rep["energy_cpu_uj"] - (10 + 30 * g(2.0) / g(2.4)) * 1e6) <= 1


def test_fraction_carried_truth_exact(root):
    start = counter(root, "intel-rapl:0")
    deltas = [fakehw.advance(root, 1 / 3)["zones"]["intel-rapl:0"]["energy_uj"] for _ in range(30)]
    t = fakehw.truth(root)
    assert t["zones"]["intel-rapl:0"]["energy_uj"] == sum(deltas)
    assert abs(sum(deltas) - 400_000_000) <= 1          # 40 W * 10 s, no drift from rounding
    assert counter(root, "intel-rapl:0") == start + sum(deltas)
    assert t["advances"] == 30 and t["seconds"] == pytest.approx(10.0)
    assert t["energy_cpu_uj"] == t["zones"]["intel-rapl:0"]["energy_uj"] + t["zones"]["intel-rapl:1"]["energy_uj"]


def test_writes_in_place_seen_by_open_descriptor(root):
    path = root / "class/powercap/intel-rapl:0/energy_uj"
    fd = os.open(path, os.O_RDONLY)
    try:
        ino = os.fstat(fd).st_ino
        v0 = int(os.pread(fd, 64, 0))
        fakehw.advance(root, 1)
        assert int(os.pread(fd, 64, 0)) == v0 + 40_000_000
        fakehw.near_wrap(root, "intel-rapl:0", 5)   # shorter content: truncated, not left over
        fakehw.advance(root, 1)
        assert os.pread(fd, 64, 0) == b"39999995\n"
        assert os.stat(path).st_ino == ino
    finally:
        os.close(fd)


# ---------------------------------------------------------------- wrap

def test_near_wrap_then_advance_wraps_and_truth_is_exact(root):
    run("near-wrap", root, "--zone", "intel-rapl:0", "--headroom-uj", "1000")
    assert counter(root, "intel-rapl:0") == PKG_MAX - 1000
    before = fakehw.truth(root)["zones"]["intel-rapl:0"]["energy_uj"]
    prev = counter(root, "intel-rapl:0")
    rep = json.loads(run("advance", root, "--seconds", "1").stdout)
    cur = counter(root, "intel-rapl:0")
    assert rep["zones"]["intel-rapl:0"]["wrapped"] is True
    assert cur == 40_000_000 - 1000
    assert cur < prev
    # a reader's wrap arithmetic recovers the exact energy
    assert (PKG_MAX - prev) + cur == 40_000_000
    assert fakehw.truth(root)["zones"]["intel-rapl:0"]["energy_uj"] - before == 40_000_000
    # other zones did not wrap
    assert rep["zones"]["intel-rapl:1"]["wrapped"] is False


def test_near_wrap_dram_zone_and_errors(root):
    fakehw.near_wrap(root, "intel-rapl:1:0", headroom_uj=0)
    assert counter(root, "intel-rapl:1:0") == DRAM_MAX
    fakehw.advance(root, 1)
    assert counter(root, "intel-rapl:1:0") == 6_000_000
    p = run("near-wrap", root, "--zone", "intel-rapl:9", check=False)
    assert p.returncode == 2 and "no zone" in p.stderr
    p = run("near-wrap", root, "--zone", "intel-rapl:0", "--headroom-uj", "-1", check=False)
    assert p.returncode == 2


def test_set_counter_is_not_energy(root):
    before = fakehw.truth(root)["zones"]["intel-rapl:0"]["energy_uj"]
    run("set-counter", root, "--zone", "intel-rapl:0", "--value-uj", "7")
    assert counter(root, "intel-rapl:0") == 7
    assert fakehw.truth(root)["zones"]["intel-rapl:0"]["energy_uj"] == before
    fakehw.advance(root, 1)
    assert counter(root, "intel-rapl:0") == 7 + 40_000_000
    assert run("set-counter", root, "--zone", "intel-rapl:0", "--value-uj", "-1",
               check=False).returncode == 2


def test_remove_zone_is_cpu_hotplug(root):
    hw = pathlib.Path(root)
    held = os.open(hw / "class/powercap/intel-rapl:1/energy_uj", os.O_RDONLY)
    try:
        assert run("remove-zone", root, "--zone", "intel-rapl:1").stdout.split() == [
            "intel-rapl:1", "intel-rapl:1:0", "intel-rapl:1:1"]
        assert os.pread(held, 64, 0) == b""            # an open counter reads nothing
    finally:
        os.close(held)
    assert not (hw / "class/powercap/intel-rapl:1").exists()
    assert not (hw / "class/powercap/intel-rapl:1:0").exists()
    assert (hw / "class/powercap/intel-rapl:0").exists()
    ncpu = fakehw._load_state(root)["ncpu"]
    off = [c for c in range(ncpu) if (hw / f"devices/system/cpu/cpu{c}/online").read_text() == "0\n"]
    assert off == [2, 3]
    assert (hw / "devices/system/cpu/online").read_text() == "0,1\n"
    rep = fakehw.advance(root, 1)
    assert "intel-rapl:1" not in rep["zones"] and "intel-rapl:0" in rep["zones"]
    assert run("remove-zone", root, "--zone", "intel-rapl:1", check=False).returncode == 2


def test_refuses_double_wrap(root):
    before = fakehw.truth(root)
    counters = {z: counter(root, z) for z in before["zones"]}
    # psys: 100 W -> 262143328850 uJ in 2621.4 s; package 40 W -> 6553 s; dram 6 W -> 10952 s
    p = run("advance", root, "--seconds", "2622", check=False)
    assert p.returncode == 2
    assert "intel-rapl:2 (psys)" in p.stderr
    assert "wrap more than once" in p.stderr and "smaller steps" in p.stderr
    assert p.stdout == ""
    assert fakehw.truth(root) == before
    assert {z: counter(root, z) for z in before["zones"]} == counters
    # one step just below the psys range is fine
    rep = fakehw.advance(root, 2621)
    assert rep["zones"]["intel-rapl:0"]["energy_uj"] == 104_840_000_000
    assert rep["zones"]["intel-rapl:2"]["energy_uj"] == 262_100_000_000


def test_advance_rejects_bad_input(root):
    for args, msg in ((["--seconds", "0"], "seconds"), (["--seconds", "-1"], "seconds"),
                      (["--seconds", "nan"], "seconds"), (["--seconds", "x"], "seconds"),
                      (["--seconds", "1", "--util", "1.5"], "util must be in [0, 1]"),
                      (["--seconds", "1", "--util-list", "1,1"], "4 values")):
        p = run("advance", root, *args, check=False)
        assert p.returncode == 2, args
        assert msg in p.stderr, (args, p.stderr)
    assert fakehw.truth(root)["advances"] == 0


# ---------------------------------------------------------------- locking

def test_concurrent_cli_advances_and_daemon_do_not_corrupt(root, tmp_path):
    sock = str(tmp_path / "ctl.sock")
    d = fakehw.serve_background(str(root), manual=True, ctl=sock)
    try:
        procs = [subprocess.Popen(
            [sys.executable, "-c",
             "import sys, json; sys.path.insert(0, %r); import fakehw\n"
             "print(json.dumps([fakehw.advance(%r, 0.25)['zones']['intel-rapl:0']['energy_uj'] "
             "for _ in range(15)]))" % (str(HERE), str(root))],
            stdout=subprocess.PIPE, text=True) for _ in range(3)]
        ctl_deltas = [fakehw.ctl_advance(sock, 0.5)["zones"]["intel-rapl:0"]["energy_uj"] for _ in range(15)]
        cli_deltas = []
        for p in procs:
            out, _ = p.communicate()
            assert p.returncode == 0
            cli_deltas += json.loads(out)
    finally:
        d.terminate()
        d.wait()
    t = fakehw.truth(root)
    assert t["advances"] == 60
    assert t["zones"]["intel-rapl:0"]["energy_uj"] == sum(cli_deltas) + sum(ctl_deltas) == \
        45 * 10_000_000 + 15 * 20_000_000
    log = fakehw.truth_log(root)
    assert [e["seq"] for e in log] == list(range(1, 61))
    assert log[-1]["cumulative_uj"]["intel-rapl:0"] == t["zones"]["intel-rapl:0"]["energy_uj"]
    assert log[-1]["counter_uj"]["intel-rapl:0"] == counter(root, "intel-rapl:0")
    # the log is consistent step by step
    for a, b in zip(log, log[1:]):
        assert b["cumulative_uj"]["intel-rapl:0"] - a["cumulative_uj"]["intel-rapl:0"] == b["delta_uj"]["intel-rapl:0"]
        assert a["t_after_ns"] <= b["t_before_ns"]


# ---------------------------------------------------------------- manual daemon

@needs_root
def test_manual_daemon_ctl_round_trip_unprivileged(root):
    sockdir = tempfile.mkdtemp(prefix="fakehw-test-")
    os.chmod(sockdir, 0o755)
    sock = os.path.join(sockdir, "ctl.sock")
    pidfile = os.path.join(sockdir, "pid")
    d = fakehw.serve_background(str(root), manual=True, ctl=sock, pidfile=pidfile)
    try:
        assert int(read(pidfile)) == d.pid
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o666
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                  "/usr/bin/python3", FAKEHW, "ctl", sock, "advance"]
        p = subprocess.run(nobody + ["2", "--util", "0.5"], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        rep = json.loads(p.stdout)
        assert rep["seconds"] == 2.0
        assert rep["zones"]["intel-rapl:0"]["energy_uj"] == 52_000_000   # (10 + 2*(7.5+0.5)) * 2
        assert rep["energy_dram_uj"] == 2 * 8_000_000                    # 2 * (2 + 0.5*4) * 2
        bad = [["0"], ["3600.5"], ["-3"], ["inf"], ["abc"], ["1", "--util", "1.01"], ["1", "--util", "-0"],
               ["1", "--util", "nan"]]
        for args in bad:
            p = subprocess.run(nobody + args, capture_output=True, text=True)
            if args == ["1", "--util", "-0"]:   # -0 is a valid 0
                assert p.returncode == 0, p.stderr
                continue
            assert p.returncode == 2, args
            assert p.stderr.startswith("error: "), p.stderr
            assert "(0, 3600]" in p.stderr or "[0, 1]" in p.stderr
        for line in ("", "advance", "advance 1 0.5 extra", "reboot now", "advance 1e9", "\xff" * 10, "x" * 5000):
            assert fakehw.ctl_raw(sock, line).startswith("error: "), line
        assert d.poll() is None   # still running
        rep = fakehw.ctl_advance(sock, 3600, 0.0)
        assert rep["zones"]["intel-rapl:0"]["energy_uj"] == 12 * 3600 * 1_000_000
        log = fakehw.truth_log(root)
        assert [e["source"] for e in log] == ["ctl", "ctl", "ctl"]
        assert log[0]["peer_uid"] == 65534 and log[-1]["peer_uid"] == 0
        assert fakehw.truth(root)["energy_cpu_uj"] == 2 * 52_000_000 + 2 * 12 * 3600 * 1_000_000 + 2 * 12_000_000
    finally:
        d.terminate()
        assert d.wait() == 0
        shutil.rmtree(sockdir, ignore_errors=True)
    assert not os.path.exists(sock) and not os.path.exists(pidfile)


def test_serve_refuses_non_socket_path(root, tmp_path):
    f = tmp_path / "file"
    f.write_text("keep me")
    p = run("serve", root, "--manual", "--ctl", f, check=False)
    assert p.returncode == 2 and "not a socket" in p.stderr
    assert f.read_text() == "keep me"


# ---------------------------------------------------------------- nsexec + libpowercap

@needs_root
def test_nsexec_powercap_info_reads_fake_zone(root):
    assert shutil.which("powercap-info"), "powercap-utils is installed on this machine"
    fakehw.advance(root, 1)
    p = run("nsexec", root, "--", "powercap-info", "-p", "intel-rapl", "-z", "0")
    out = p.stdout
    assert "Zone 0\n" in out and "name: package-0" in out
    assert f"energy_uj: {counter(root, 'intel-rapl:0')}" in out
    assert f"max_energy_range_uj: {PKG_MAX}" in out
    assert "Zone 0:0" in out and "name: dram" in out and "Zone 0:1" in out
    # exit status is the command's
    assert run("nsexec", root, "--", "sh", "-c", "exit 7", check=False).returncode == 7
    # the real /sys/class stays untouched outside
    assert not os.path.exists("/sys/class/powercap/intel-rapl/intel-rapl:0/energy_uj") or \
        read("/sys/class/powercap/intel-rapl/intel-rapl:0/name") != "package-0\n"


@needs_root
def test_nsexec_live_updates_show_through(root, tmp_path):
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    # inside: libpowercap reads, a descriptor is held open, wait, read both again
    script = (
        "import os, subprocess\n"
        "fd = os.open('/sys/class/powercap/intel-rapl:0/energy_uj', os.O_RDONLY)\n"
        "def pc(): return int(subprocess.run(['powercap-info', 'intel-rapl', '-z', '0', '-j'],"
        " capture_output=True, text=True, check=True).stdout)\n"
        "print(pc(), int(os.pread(fd, 64, 0)), flush=True)\n"
        f"open({str(fifo)!r}).read()\n"
        "print(pc(), int(os.pread(fd, 64, 0)), flush=True)\n")
    p = subprocess.Popen([sys.executable, FAKEHW, "nsexec", str(root), "--", "/usr/bin/python3", "-c", script],
                         stdout=subprocess.PIPE, text=True)
    first = p.stdout.readline().split()
    v0 = counter(root, "intel-rapl:0")
    assert [int(x) for x in first] == [v0, v0]
    fakehw.advance(root, 2)            # outside the namespace
    with open(fifo, "w") as fh:
        fh.write("go\n")
    second = p.stdout.readline().split()
    p.stdout.close()
    assert p.wait() == 0
    assert [int(x) for x in second] == [v0 + 80_000_000, v0 + 80_000_000]


# ---------------------------------------------------------------- live mode

def _spin(n):
    x = 0
    for i in range(n):
        x += i
    return x


def test_live_mode_follows_cpu_load(tmp_path):
    # Fake CPU i follows real CPU i % nreal: pin the busy loop to a real CPU that has a
    # fake one, whatever the number of CPUs (on a 64-CPU host an unpinned loop mostly
    # runs on CPUs the two fake ones never look at) and whatever cpuset we run in.
    cpu = min(os.sched_getaffinity(0))
    r = tmp_path / "sys"
    fakehw.create(r, packages=1, cpus_per_package=max(2, cpu + 1))
    d = fakehw.serve_background(str(r), tick_ms=20)
    busy = subprocess.Popen([sys.executable, "-c",
                             "import os\nfor _ in range(400):\n    sum(range(200000))\n"],
                            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    try:
        busy.wait()
        # bounded wait (no timing assertion): until at least 10 ticks are logged
        for _ in range(500):
            if len(fakehw.truth_log(r)) >= 10:
                break
            _spin(200000)
        # a reading taken between ticks can be placed exactly with the log
        readings = []
        for _ in range(200):
            t0 = fakehw._now_ns()
            v = counter(r, "intel-rapl:0")
            t1 = fakehw._now_ns()
            readings.append((t0, v, t1))
            _spin(20000)
    finally:
        d.terminate()
        assert d.wait() == 0
    log = fakehw.truth_log(r)
    assert len(log) >= 10
    assert all(e["source"] == "tick" for e in log)
    assert any(max(e["util"]) > 0.5 for e in log), "the busy loop shows up as utilisation"
    for e in log:
        assert 0 <= min(e["util"]) and max(e["util"]) <= 1
        assert e["t_before_ns"] <= e["t_after_ns"]
        # each tick follows the model for its measured util and elapsed time (f = fmax)
        u = e["util"]
        p_w = 10 + sum(x * 15 + (1 - x) * 1 for x in u)
        assert abs(e["delta_uj"]["intel-rapl:0"] - p_w * e["seconds"] * 1e6) <= 1
    # place every reading that fell strictly between two ticks
    placed = 0
    for t0, v, t1 in readings:
        for a, b in zip(log, log[1:]):
            if a["t_after_ns"] < t0 and t1 < b["t_before_ns"]:
                assert v == a["counter_uj"]["intel-rapl:0"]
                placed += 1
    assert placed > 0
    t = fakehw.truth(r)
    assert t["zones"]["intel-rapl:0"]["energy_uj"] == sum(e["delta_uj"]["intel-rapl:0"] for e in log)


# ---- node-level sources and AMD (issue 24) ---------------------------------

def test_amd_tree_layout(tmp_path):
    root = tmp_path / "amd"
    fakehw.create(str(root), vendor="amd", amd_energy=True)
    pc = sorted(os.listdir(root / "class/powercap"))
    assert pc == ["intel-rapl", "intel-rapl:0", "intel-rapl:0:0", "intel-rapl:1", "intel-rapl:1:0"]
    assert (root / "class/powercap/intel-rapl:0:0/name").read_text() == "core\n"
    hw = root / "class/hwmon/hwmon0"
    assert (hw / "name").read_text() == "amd_energy\n"
    labels = [(hw / f"energy{k}_label").read_text().strip() for k in range(1, 7)]
    assert labels == ["Ecore000", "Ecore001", "Ecore002", "Ecore003", "Esocket0", "Esocket1"]
    before = {k: int((hw / f"energy{k}_input").read_text()) for k in range(1, 7)}
    rep = fakehw.advance(str(root), 2, util=[1.0, 0.0, 0.5, 0.5])
    after = {k: int((hw / f"energy{k}_input").read_text()) for k in range(1, 7)}
    z = rep["zones"]
    # a socket's counter moves as its package zone; a core's as its CPU
    assert after[5] - before[5] == z["intel-rapl:0"]["energy_uj"]
    assert after[6] - before[6] == z["intel-rapl:1"]["energy_uj"]
    assert after[1] - before[1] + after[2] - before[2] == z["intel-rapl:0:0"]["energy_uj"]
    assert rep["energy_dram_uj"] == 0
    with pytest.raises(fakehw.FakeHwError):
        fakehw.create(str(tmp_path / "x"), amd_energy=True)


def test_pm_counters_follow_the_model(tmp_path):
    root = tmp_path / "hpe"
    fakehw.create(str(root), pm_counters=True, accels=2)
    d = root / "cray/pm_counters"
    m = fakehw.DEFAULT_MODEL
    rep = fakehw.advance(str(root), 3, util=0.5)
    z = rep["zones"]
    cpu = z["intel-rapl:0"]["energy_uj"] + z["intel-rapl:1"]["energy_uj"]
    dram = z["intel-rapl:0:0"]["energy_uj"] + z["intel-rapl:1:0"]["energy_uj"]
    assert abs(z["pm:cpu_energy"]["energy_uj"] - cpu) <= 1
    assert abs(z["pm:memory_energy"]["energy_uj"] - dram) <= 1
    assert z["pm:accel1_energy"]["energy_uj"] == int(m["p_accel_w"] * 3e6)
    node = cpu + dram + 2 * m["p_accel_w"] * 3e6 + m["p_platform_w"] * 3e6
    assert abs(z["pm:energy"]["energy_uj"] - node) <= 3
    j, _, t, us = (d / "energy").read_text().split()
    assert _ == "J" and us == "us" and int(t) > 0
    assert int(j) == z["pm:energy"]["counter_uj"] // 10**6
    fresh = int((d / "freshness").read_text())
    fakehw.pm_reset(str(root))
    assert (d / "energy").read_text().startswith("0 J")
    assert int((d / "generation").read_text()) == 2
    assert int((d / "freshness").read_text()) == fresh + 1


def test_grace_power_sensors_follow_the_model(tmp_path):
    root = tmp_path / "grace"
    fakehw.create(str(root), grace=True)
    m = fakehw.DEFAULT_MODEL
    rep = fakehw.advance(str(root), 1, util=[1.0, 1.0, 0.0, 0.0])
    z = rep["zones"]
    sensors = {}
    for h in sorted(os.listdir(root / "class/hwmon")):
        d = root / "class/hwmon" / h
        sensors[(d / "power1_oem_info").read_text().strip()] = int((d / "power1_average").read_text())
    assert len(sensors) == 6
    for p in (0, 1):
        pkg = z[f"intel-rapl:{p}"]["power_w"]
        dram = z[f"intel-rapl:{p}:0"]["power_w"]
        assert sensors[f"CPU Power Socket {p}"] == round(pkg * 1e6)
        assert sensors[f"SysIO Power Socket {p}"] == round(m["p_sysio_w"] * 1e6)
        assert sensors[f"Module Power Socket {p}"] == \
            round((pkg + dram + m["p_sysio_w"] + m["p_accel_w"]) * 1e6)


@pytest.mark.parametrize("layout", ["classic", "tpmi"])
def test_uncore_trees_and_power_term(tmp_path, layout):
    """intel_uncore_frequency in both layouts (one domain per package and
    die); the package zone's uncore part follows its max_freq_khz: at ratio
    r, 10 W * (0.4 + 0.6 r) (README's model, computed here by hand)."""
    root = str(tmp_path / "hw")
    fakehw.create(root, packages=2, cpus_per_package=2, dies=2, uncore=layout,
                  uncore_min_khz=800000, uncore_max_khz=2000000)
    base = os.path.join(root, "devices/system/cpu/intel_uncore_frequency")
    names = sorted(os.listdir(base))
    if layout == "classic":
        assert names == ["package_00_die_00", "package_00_die_01",
                         "package_01_die_00", "package_01_die_01"]
    else:
        assert names == ["uncore00", "uncore01", "uncore02", "uncore03"]
        got = [(int(open(os.path.join(base, n, "package_id")).read()),
                int(open(os.path.join(base, n, "domain_id")).read())) for n in names]
        assert got == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for n in names:
        for f, v in (("min_freq_khz", 800000), ("max_freq_khz", 2000000),
                     ("initial_min_freq_khz", 800000), ("initial_max_freq_khz", 2000000)):
            assert int(open(os.path.join(base, n, f)).read()) == v
    # idle CPUs: each die zone = 10 W / 2 dies * uncore factor + 1 W (its one idle CPU)
    rep = fakehw.advance(root, 1, util=0.0)
    assert rep["zones"]["intel-rapl:0"]["energy_uj"] == 6_000_000      # 5 + 1 W
    pkg0 = names[:2]
    for n in pkg0:   # package 0 at 1 GHz of 2: ratio 0.5, uncore 10 * 0.7 = 7 W
        with open(os.path.join(base, n, "max_freq_khz"), "w") as f:
            f.write("1000000\n")
    rep = fakehw.advance(root, 1, util=0.0)
    assert rep["zones"]["intel-rapl:0"]["energy_uj"] == 4_500_000      # 3.5 + 1 W
    assert rep["zones"]["intel-rapl:1"]["energy_uj"] == 4_500_000
    assert rep["zones"]["intel-rapl:2"]["energy_uj"] == 6_000_000      # package 1 untouched


def test_uncore_speed_term(tmp_path):
    """The time term: a share f of the work timed by the uncore clock."""
    m = dict(fakehw.DEFAULT_MODEL)
    assert fakehw.uncore_speed(m, 0.5, 0.25) == 0.5        # default f = 0: no effect
    m["uncore_mem_frac"] = 0.5
    assert fakehw.uncore_speed(m, 1.0, 0.5) == pytest.approx(1 / (0.5 + 1.0))
    assert fakehw.uncore_speed(m, 0.5, 1.0) == 0.5
    with pytest.raises(fakehw.FakeHwError, match="uncore"):
        fakehw.create(str(tmp_path / "x"), uncore="mesh")
    assert not (tmp_path / "x").exists()
