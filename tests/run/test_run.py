"""joulestep-run end to end on the fake node hardware.

The command measured is the simulator's own deterministic `advance`, whose
output is the ground truth of the energy it added: joulestep-run must report
the same energy within 0.1 %, across forced counter wraps, on the sysfs and
libpowercap backends. Frequencies set with --freq-ratio must be visible in
the fake cpufreq files during the run and restored afterwards, also when the
command is SIGKILLed and when joulestep-run gets SIGTERM.
"""
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

import fakehw

FAKEHW = [sys.executable, str(fakehw.__file__)]


@pytest.fixture
def run_exe(build_dir):
    return str(build_dir / "bin" / "joulestep-run")


@pytest.fixture
def restore_exe(build_dir):
    return str(build_dir / "bin" / "joulestep-restore")


@pytest.fixture
def hw(tmp_path):
    root = tmp_path / "sys"
    fakehw.create(str(root), variant="acpi")
    return root


@pytest.fixture
def state(tmp_path):
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    return d


def run_json(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)
    assert p.returncode == 0, p.stderr
    # joulestep-run prints its JSON after the command's own output
    out = p.stdout
    start = out.rindex("\n{\n") + 1 if "\n{\n" in out else out.index("{")
    cmd_out = out[:start]
    return json.loads(out[start:]), cmd_out, p


def advance_cmd(root, seconds, util=1.0):
    return FAKEHW + ["advance", str(root), "--seconds", str(seconds), "--util", str(util)]


def check_against_truth(rep, truth):
    zones = {z["id"]: z for z in rep["zones"]}
    # counted zones: packages and drams, never psys/core/mmio
    counted = {zid for zid, z in truth["zones"].items()
               if z["kind"] in ("package", "dram")}
    assert set(zones) == counted
    for zid in counted:
        want = truth["zones"][zid]["energy_uj"]
        got = zones[zid]["energy_uj"]
        assert abs(got - want) <= 0.001 * want, (zid, got, want)
    assert abs(rep["energy_cpu_uj"] - truth["energy_cpu_uj"]) <= 0.001 * truth["energy_cpu_uj"]
    has_dram = any(z["kind"] == "dram" for z in truth["zones"].values())
    if has_dram:
        assert abs(rep["energy_dram_uj"] - truth["energy_dram_uj"]) <= 0.001 * truth["energy_dram_uj"]
    else:  # no dram zone: not measured (null), never 0
        assert rep["energy_dram_uj"] is None
    total_j = (truth["energy_cpu_uj"] + truth["energy_dram_uj"]) / 1e6
    assert rep["energy_total_j"] == pytest.approx(total_j, rel=1e-3)
    assert rep["wrap_uncertain"] is False


def test_sysfs_backend_matches_truth_across_a_wrap(hw, run_exe):
    fakehw.near_wrap(str(hw), "intel-rapl:0", 1_000_000)      # package-0: 1 J left
    fakehw.near_wrap(str(hw), "intel-rapl:1:0", 500_000)      # dram of package-1
    rep, out, _ = run_json([run_exe, "--sysfs", str(hw), "--backend", "sysfs", "--json", "--"]
                           + advance_cmd(hw, 20))
    truth = json.loads(out)
    check_against_truth(rep, truth)
    wraps = {z["id"]: z["wraps"] for z in rep["zones"]}
    assert wraps["intel-rapl:0"] == 1 and wraps["intel-rapl:1:0"] == 1
    assert wraps["intel-rapl:1"] == 0
    assert rep["backend"] == "sysfs"
    assert rep["duration_s"] > 0
    assert rep["avg_power_w"] == pytest.approx(rep["energy_total_j"] / rep["duration_s"], rel=1e-6)


def test_no_dram_node(tmp_path, run_exe):
    """AMD powercap: package (and core) zones, no dram: DRAM is null with the
    reason, never 0, and the total says it is the CPU's alone."""
    root = tmp_path / "amd"
    fakehw.create(str(root), variant="pstate", vendor="amd")
    rep, out, _ = run_json([run_exe, "--sysfs", str(root), "--backend", "sysfs", "--json", "--"]
                           + advance_cmd(root, 5, 0.5))
    truth = json.loads(out)
    assert truth["energy_dram_uj"] == 0 and truth["energy_cpu_uj"] > 0
    assert rep["energy_dram_j"] is None and rep["energy_dram_uj"] is None
    assert "no dram zone" in rep["dram_not_measured"]
    assert rep["total_includes"] == "cpu"
    assert {z["name"] for z in rep["zones"]} == {"package-0", "package-1"}
    check_against_truth(rep, truth)


def test_no_dram_node_table_says_not_measured(tmp_path, run_exe):
    root = tmp_path / "amd"
    fakehw.create(str(root), vendor="amd")
    p = subprocess.run([run_exe, "--sysfs", str(root), "--backend", "sysfs", "--", "true"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    dram = [ln for ln in p.stderr.splitlines() if "DRAM" in ln]
    assert len(dram) == 1 and "not measured" in dram[0] and " J  DRAM" not in dram[0]
    assert "total (cpu)" in p.stderr


def test_amd_energy_hwmon_sockets_only(tmp_path, run_exe):
    """amd_energy: the socket counters are the packages; the per-core
    counters (inside them) are never added."""
    root = tmp_path / "amd"
    fakehw.create(str(root), vendor="amd", amd_energy=True, cpus_per_package=3)
    utils = [1.0, 0.2, 0.0, 0.5, 0.5, 0.9]
    rep, out, _ = run_json([run_exe, "--sysfs", str(root), "--backend", "amd_energy", "--json",
                            "--"] + FAKEHW + ["advance", str(root), "--seconds", "4",
                                              "--util-list", ",".join(map(str, utils))])
    truth = json.loads(out)
    sockets = {zid: z for zid, z in truth["zones"].items() if z["kind"] == "amd_socket"}
    assert rep["backend"] == "amd_energy"
    assert {z["id"]: z["energy_uj"] for z in rep["zones"]} == \
        {zid: z["energy_uj"] for zid, z in sockets.items()}
    assert all(z["kind"] == "package" for z in rep["zones"])
    # the socket total is the package truth, not packages + cores
    assert rep["energy_cpu_uj"] == sum(z["energy_uj"] for z in sockets.values())
    assert rep["energy_cpu_uj"] == truth["energy_cpu_uj"]
    assert rep["energy_dram_uj"] is None and rep["dram_not_measured"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root")
def test_powercap_backend_matches_truth_across_a_wrap(hw, run_exe):
    """libpowercap hard-codes /sys/class/powercap: the simulator serves the
    tree there inside a private mount namespace."""
    fakehw.near_wrap(str(hw), "intel-rapl:1", 2_000_000)
    rep, out, _ = run_json(FAKEHW + ["nsexec", str(hw), "--", run_exe, "--backend", "powercap",
                                     "--json", "--"] + advance_cmd(hw, 30))
    truth = json.loads(out)
    check_against_truth(rep, truth)
    assert rep["backend"] == "powercap"
    assert {z["id"]: z["wraps"] for z in rep["zones"]}["intel-rapl:1"] == 1


# ---- papi: a specific reason and status 125 on every host ------------------
PAPI_SOURCES = ("powercap", "rapl", "perf_event_uncore")
REASON_MAX = 120
NOT_SYS = "unavailable: PAPI reads only the real /sys, not "
PAPI_UNAVAILABLE = re.compile(r"unavailable: PAPI (?P<ver>\d+\.\d+\.\d+\.\d+) has no "
                              r"(?P<what>energy component|usable energy events) \((?P<parts>.+)\)")
PART = re.compile(r"(?P<names>[a-z_]+(?:, [a-z_]+)*): (?P<state>.+)")
ACTIVE_STATE = re.compile(r"no energy events|\d+ listed, (none|only \d+) can be added|"
                          r"\d+ added, PAPI_start fails|\d+ started, PAPI_read fails|"
                          r"(\d+ of )?\d+ read 0 for \d+ ms")


def papi_reason(p) -> str:
    """The one reason joulestep-run gives when --backend papi cannot work."""
    assert p.returncode == 125, (p.returncode, p.stderr)
    lines = p.stderr.splitlines()
    assert lines[0] == "joulestep-run: no energy backend works:", p.stderr
    assert len(lines) == 2 and lines[1].startswith("papi: "), p.stderr
    reason = lines[1][len("papi: "):]
    assert len(reason) <= REASON_MAX, reason
    return reason


def run_papi(run_exe, *args, cmd=("true",)):
    return subprocess.run([run_exe, "--backend", "papi", *args, "--", *cmd],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def papi_host():
    """What this host's PAPI has, from papi_component_avail (papi-tools): the
    library version, and compiled-in component -> disabled (True/False)."""
    exe = shutil.which("papi_component_avail")
    assert exe, "papi_component_avail is missing: run make deps (papi-tools)"
    out = subprocess.run([exe], capture_output=True, text=True, timeout=120).stdout
    version = re.search(r"^PAPI version\s*:\s*(\S+)", out, re.M).group(1)
    compiled, section, last = {}, None, None
    for line in out.splitlines():
        if line.startswith("Compiled-in components:"):
            section = "compiled"
        elif line.startswith("Active components:"):
            section = None
        elif section == "compiled" and line.startswith("Name:"):
            last = line.split()[1]
            compiled[last] = False
        elif section == "compiled" and "Disabled:" in line and last:
            compiled[last] = True
    return {"version": version, "compiled": compiled}


@pytest.mark.parametrize("components", [None, "none", "powercap,rapl,perf_event_uncore",
                                        "perf_event_uncore"])
def test_papi_refuses_a_fake_sysfs_root_first(hw, run_exe, components):
    """Checked before anything else: whatever PAPI this host has, and whatever
    components are allowed, a fake tree is not what PAPI reads."""
    args = ["--sysfs", str(hw)] + (["--papi-components", components] if components else [])
    reason = papi_reason(run_papi(run_exe, *args))
    root, room = str(hw), REASON_MAX - len(NOT_SYS)
    want = NOT_SYS + (root if len(root) <= room else "..." + root[-(room - 3):])
    assert reason == want


def test_papi_with_no_component_allowed_has_no_energy_component(run_exe, papi_host):
    reason = papi_reason(run_papi(run_exe, "--papi-components", "none"))
    assert reason == (f"unavailable: PAPI {papi_host['version']} has no energy component "
                      "(powercap, rapl, perf_event_uncore: not selected)")


def test_papi_bad_component_list_is_refused(run_exe):
    p = run_papi(run_exe, "--papi-components", "rapl,perf_event")
    assert p.returncode == 125
    assert ("papi: unknown PAPI component 'perf_event' (allowed: powercap, rapl, "
            "perf_event_uncore, or none)") in p.stderr


@pytest.mark.parametrize("components", [None, "powercap", "rapl", "perf_event_uncore"])
def test_papi_on_the_real_sys_measures_or_says_why(run_exe, papi_host, components):
    """Explicitly both cases of the host: a working PAPI energy source (a RAPL
    host with a PAPI that reads it) gives a sane measurement; anything else
    (no such component, a component disabled, events listed that cannot be
    added or that read 0 -- e.g. a perf `power` PMU with only energy-psys in
    a VM) gives status 125 and one short reason that agrees with what
    papi_component_avail says this host has."""
    args = ["--papi-components", components] if components else []
    selected = components.split(",") if components else list(PAPI_SOURCES)
    p = run_papi(run_exe, *args, "--json", cmd=("sleep", "0.2"))
    if p.returncode == 0:
        rep = json.loads(p.stdout)
        assert rep["backend"] == "papi"
        kinds = [z["kind"] for z in rep["zones"]]
        assert "package" in kinds and set(kinds) <= {"package", "dram"}
        assert rep["duration_s"] >= 0.2
        assert rep["energy_cpu_uj"] == sum(z["energy_uj"] for z in rep["zones"]
                                           if z["kind"] == "package")
        assert rep["energy_dram_uj"] == sum(z["energy_uj"] for z in rep["zones"]
                                            if z["kind"] == "dram")
        # a package draws well over 0.1 W and below 10 kW
        assert 0.1 < rep["energy_cpu_j"] / rep["duration_s"] < 10000, rep
        return
    reason = papi_reason(p)
    m = PAPI_UNAVAILABLE.fullmatch(reason)
    assert m, reason
    assert m["ver"] == papi_host["version"]
    compiled = papi_host["compiled"]
    named = {}
    for part in m["parts"].split("; "):
        pm = PART.fullmatch(part)
        assert pm, (part, reason)
        for name in pm["names"].split(", "):
            assert name in PAPI_SOURCES and name not in named, reason
            named[name] = pm["state"]
    for name, state in named.items():
        if state == "not selected":
            assert name not in selected, reason
        elif state == "not compiled in":
            assert name in selected and name not in compiled, reason
        elif state.startswith("disabled"):
            assert name in selected and compiled.get(name) is True, reason
        else:
            assert ACTIVE_STATE.fullmatch(state), reason
            assert name in selected and compiled.get(name) is False, reason
    usable_here = [n for n in selected if compiled.get(n) is False]
    assert m["what"] == ("usable energy events" if usable_here else "energy component"), reason


def test_backend_order_falls_back_and_reports(hw, run_exe):
    rep, _, p = run_json([run_exe, "--sysfs", str(hw), "--backend", "papi,sysfs", "--json",
                          "--", "true"])
    assert rep["backend"] == "sysfs"


def test_bad_options_are_refused_with_what_is_allowed(hw, run_exe):
    for args, needle in [(["--freq-ratio", "1.5"], "(0, 1]"),
                         (["--freq-ratio", "abc"], "(0, 1]"),
                         (["--sample-ms", "0"], "1..3600000"),
                         (["--freq-ratio", "0.5", "--freq-khz", "1000"], "not both"),
                         ([], "no command")]:
        p = subprocess.run([run_exe, "--sysfs", str(hw)] + args + (["--", "true"] if args else []),
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 125, args
        assert needle in p.stderr, (args, p.stderr)


def test_exit_status_is_the_commands(hw, run_exe):
    p = subprocess.run([run_exe, "--sysfs", str(hw), "--backend", "sysfs", "--", "sh", "-c",
                        "exit 7"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 7
    assert "total" in p.stderr


def cpufreq(root, cpu):
    """The settings a restore must bring back: governor, min, max, and the
    setspeed only where the governor is userspace (the kernel shows
    <unsupported> otherwise; the fake tree keeps the file as written)."""
    f = fakehw.read_cpufreq(str(root), cpu)
    keep = {k: f[k] for k in ("scaling_governor", "scaling_min_freq", "scaling_max_freq")}
    if f["scaling_governor"] == "userspace":
        keep["scaling_setspeed"] = f["scaling_setspeed"]
    return keep


def allowed_cpus():
    return sorted(os.sched_getaffinity(0))


def test_freq_ratio_visible_during_run_and_restored(hw, state, run_exe):
    before = {c: cpufreq(hw, c) for c in range(4)}
    probe = (f"for c in 0 1 2 3; do d={hw}/devices/system/cpu/cpu$c/cpufreq; "
             "echo $c $(cat $d/scaling_governor) $(cat $d/scaling_setspeed); done")
    rep, out, _ = run_json([run_exe, "--sysfs", str(hw), "--backend", "sysfs", "--state",
                            str(state), "--freq-ratio", "0.85", "--json", "--", "sh", "-c", probe])
    seen = {int(line.split()[0]): line.split()[1:] for line in out.strip().splitlines()}
    for cpu in range(4):
        if cpu in allowed_cpus():
            # 0.85 x 2.4 GHz = 2.04 GHz, rounded to the nearest 100 MHz step
            assert seen[cpu] == ["userspace", "2000000"], seen
        else:
            assert seen[cpu][0] == before[cpu]["scaling_governor"]
    after = {c: cpufreq(hw, c) for c in range(4)}
    assert after == before
    assert not list(state.glob("cpu*.orig"))


def test_freq_khz_on_intel_pstate_caps_max(tmp_path, state, run_exe):
    root = tmp_path / "pstate"
    fakehw.create(str(root), variant="pstate")
    before = cpufreq(root, 0)
    _, out, _ = run_json([run_exe, "--sysfs", str(root), "--backend", "sysfs", "--state",
                          str(state), "--freq-khz", "2040000", "--json", "--", "cat",
                          str(root / "devices/system/cpu/cpu0/cpufreq/scaling_max_freq")])
    assert out.split()[0] == "2040000"
    assert cpufreq(root, 0) == before


def wait_for(pred, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return False


def setspeed(root, cpu=0):
    return (root / f"devices/system/cpu/cpu{cpu}/cpufreq/scaling_setspeed").read_text().strip()


def test_restored_after_command_is_sigkilled(hw, state, run_exe):
    before = cpufreq(hw, 0)
    p = subprocess.run([run_exe, "--sysfs", str(hw), "--backend", "sysfs", "--state", str(state),
                        "--freq-ratio", "0.5", "--", "sh", "-c", "kill -9 $$"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 128 + signal.SIGKILL
    assert cpufreq(hw, 0) == before


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_restored_after_sigterm_of_joulestep_run(hw, state, run_exe, sig):
    """The signal is forwarded; the command dies of it; the clock is back.
    The command gets the signal's default action whatever the test runner
    inherited: a shell starting `make test` in the background (nohup, `&`
    in a script) makes SIGINT ignored, and an ignored SIGINT is inherited
    through exec -- sleep would then outlive the forwarded signal, as the
    command should, since joulestep-run keeps the dispositions it got."""
    before = cpufreq(hw, 0)
    p = subprocess.Popen([run_exe, "--sysfs", str(hw), "--backend", "sysfs", "--state",
                          str(state), "--freq-ratio", "0.5", "--", "sleep", "60"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
    try:
        assert wait_for(lambda: setspeed(hw) == "1200000"), "frequency never applied"
        p.send_signal(sig)
        p.wait(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 128 + sig   # sleep died of the forwarded signal
    assert cpufreq(hw, 0) == before


def test_crash_of_joulestep_run_then_restore_tool(hw, state, run_exe, restore_exe):
    before = cpufreq(hw, 0)
    p = subprocess.Popen([run_exe, "--sysfs", str(hw), "--backend", "sysfs", "--state",
                          str(state), "--freq-ratio", "0.5", "--", "sleep", "60"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert wait_for(lambda: setspeed(hw) == "1200000")
        # an owner that is alive keeps its clock
        r = subprocess.run([restore_exe, "--state", str(state), "--sysfs", str(hw)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and "restored 0 CPUs" in r.stdout
        assert setspeed(hw) == "1200000"
        os.killpg(p.pid, signal.SIGKILL)   # joulestep-run and its command die
        p.wait(timeout=20)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert setspeed(hw) == "1200000"      # nothing restored it...
    r = subprocess.run([restore_exe, "--state", str(state), "--sysfs", str(hw)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert f"restored {len([c for c in allowed_cpus() if c < 4])} CPU" in r.stdout
    assert cpufreq(hw, 0) == before         # ...until the journal did


def test_restore_tool_puts_back_a_dead_steps_uncore(tmp_path, state, restore_exe):
    """An uncore journal entry whose owner is gone (a killed slurmstepd:
    a pid that has exited) is restored by joulestep-restore and removed; a
    live owner's is kept unless --force (issue 24, part 4)."""
    root = tmp_path / "unc"
    fakehw.create(str(root), uncore="classic", uncore_min_khz=800000, uncore_max_khz=2400000)
    d = root / "devices/system/cpu/intel_uncore_frequency/package_00_die_00"
    (d / "max_freq_khz").write_text("1000000\n")
    boot = pathlib.Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    dead = subprocess.Popen(["true"])
    dead.wait()
    state.mkdir(mode=0o700, exist_ok=True)
    entry = state / "uncore-package_00_die_00"
    entry.write_text(f"{dead.pid} 1 {boot} 800000 2400000\n")
    entry.chmod(0o600)
    me = pathlib.Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19]
    (d.parent / "package_01_die_00" / "max_freq_khz").write_text("900000\n")
    live = state / "uncore-package_01_die_00"
    live.write_text(f"{os.getpid()} {me} {boot} 800000 2400000\n")
    live.chmod(0o600)
    r = subprocess.run([restore_exe, "--state", str(state), "--sysfs", str(root)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "restored 1 uncore clock, 1 still held by running steps" in r.stdout
    assert int((d / "max_freq_khz").read_text()) == 2400000
    assert not entry.exists() and live.exists()
    assert int((d.parent / "package_01_die_00" / "max_freq_khz").read_text()) == 900000
    r = subprocess.run([restore_exe, "--state", str(state), "--sysfs", str(root), "--force"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and not live.exists()
    assert int((d.parent / "package_01_die_00" / "max_freq_khz").read_text()) == 2400000
