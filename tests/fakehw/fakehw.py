#!/usr/bin/env python3
"""Fake node hardware for joulestep tests: a sysfs-shaped tree with RAPL
powercap zones and cpufreq files, driven by a frequency-dependent power model.

Only the hardware is simulated; everything reading it (libpowercap, PAPI's
powercap component, the joulestep library) is real.  Stdlib only.

Layout (as the kernel has it), under ROOT:
  devices/virtual/powercap/intel-rapl/intel-rapl:N[/intel-rapl:N:M]
  devices/virtual/powercap/intel-rapl-mmio/intel-rapl-mmio:0
  class/powercap/{intel-rapl,intel-rapl-mmio}      -> ../../devices/virtual/powercap/...
  class/powercap/intel-rapl:N[:M], intel-rapl-mmio:0 -> ../../devices/virtual/powercap/...
  devices/system/cpu/cpufreq/policyN/...           (cpuN/cpufreq -> ../cpufreq/policyM, M the
                                                    first CPU of N's policy: N with 1 CPU per policy)
  devices/system/cpu/cpuN/topology/...
  .fakehw/state.json  model + counters     .fakehw/truth.jsonl  ground-truth log
  .fakehw/lock        flock'ed around every change

Power model (Wilkins 2023 eq. 2.2, docs/science.md): g(f) = a*f^b + c (f in GHz), per CPU
  P_cpu = util*P_core_max*g(f)/g(fmax) + (1-util)*P_core_idle
  P_package_zone = P_uncore/dies + sum P_cpu      P_core_zone = sum P_cpu
  P_dram_zone = (P_dram_idle + mean_util*P_dram_dyn)/dies
  P_psys = sum packages + sum dram + P_platform   P_mmio = P(intel-rapl:0)
Energy is integer uJ per zone; the fractional remainder is carried in the state,
so ground truth (sum of integer deltas) is exact.  Counters wrap modulo
max_energy_range_uj (values stay in [0, max]): a reader computing
"cur - prev, or (max - prev) + cur when it went down" gets the exact delta.
"""
import argparse
import contextlib
import errno
import fcntl
import json
import math
import os
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time

STATE_DIR = ".fakehw"
STATE_FILE = "state.json"
TRUTH_FILE = "truth.jsonl"
LOCK_FILE = "lock"

PKG_MAX_UJ = 262143328850
DRAM_MAX_UJ = 65712999613
PSYS_MAX_UJ = 262143328850
HWMON_MAX_UJ = (1 << 64) - 1   # amd_energy accumulates to 64 bits

DEFAULT_MODEL = {
    "a": 0.0086,            # Table 2.4 "Total": 0.0086 f^4.038 + 0.757
    "b": 4.038,
    "c": 0.757,
    "p_core_max_w": 15.0,   # one CPU at full util and fmax
    "p_core_idle_w": 1.0,   # one idle CPU
    "p_uncore_w": 10.0,     # per package (split across dies)
    "p_dram_idle_w": 2.0,   # per package
    "p_dram_dyn_w": 4.0,    # per package at mean util 1
    "p_platform_w": 8.0,    # psys on top of packages + dram
    "p_accel_w": 60.0,      # each accelerator (pm_counters accelN, the Grace module's GPU)
    "p_sysio_w": 12.0,      # Grace SysIO, per socket
    "uncore_static_frac": 0.4,  # share of p_uncore_w that does not scale with its clock
    "uncore_mem_frac": 0.0,     # share of a CPU's work timed by the uncore clock
}

ACPI_GOVERNORS = "conservative ondemand userspace powersave performance schedutil"
PSTATE_GOVERNORS = "performance powersave"

MAX_CTL_SECONDS = 3600.0
USER_HZ = 100           # /proc/stat's clock ticks
MAX_LINE = 256


class FakeHwError(Exception):
    """Bad input or a refused operation (CLI exit status 2)."""


# --------------------------------------------------------------------------
# small file helpers

def _write_new(path, text, mode=0o644):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.chmod(path, mode)  # umask must not change the modes the kernel has


def write_in_place(path, text):
    """Overwrite an existing file without replacing it (no rename), so
    readers holding a descriptor see the new content with pread."""
    data = text.encode()
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def _read(path):
    with open(path, "r", opener=lambda p, f: os.open(p, f | os.O_CLOEXEC)) as fh:
        return fh.read()


def _read_int(path):
    try:
        return int(_read(path).strip())
    except (OSError, ValueError):
        return None


def _mkdir(path, mode=0o755):
    os.makedirs(path, exist_ok=True)
    os.chmod(path, mode)


def _state_path(root, name):
    return os.path.join(root, STATE_DIR, name)


@contextlib.contextmanager
def _locked(root):
    path = _state_path(root, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise FakeHwError(f"{root} is not a fakehw tree (no {STATE_DIR}/{LOCK_FILE}); run `create` first")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _load_state(root):
    return json.loads(_read(_state_path(root, STATE_FILE)))


def _save_state(root, state):
    path = _state_path(root, STATE_FILE)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, json.dumps(state, indent=1, sort_keys=True).encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)  # state.json is ours alone: no reader holds it open


def _append_truth(root, entry):
    fd = os.open(_state_path(root, TRUTH_FILE),
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, (json.dumps(entry, sort_keys=True) + "\n").encode())
    finally:
        os.close(fd)


def _now_ns():
    return time.clock_gettime_ns(time.CLOCK_REALTIME)


# --------------------------------------------------------------------------
# create

def create(root, variant="acpi", packages=2, cpus_per_package=2, dram=True,
           multi_die=False, dies=None, fmax_khz=2400000, fmin_khz=800000,
           model=None, initial_uj=None, energy_mode=None, no_dram=False,
           cpus_per_policy=1, base_khz=None, acpi_turbo=False, vendor="intel",
           amd_energy=False, pm_counters=False, accels=1, grace=False, uncore=None,
           uncore_min_khz=800000, uncore_max_khz=2400000):
    """Build a fake sysfs tree at root (must not exist or be empty).
    no_dram=True is the same as dram=False (the CLI's --no-dram).

    cpus_per_policy: CPUs sharing one cpufreq policy, as the kernel lays it out
    (policyM for CPUs M..M+k-1, cpuN/cpufreq -> ../cpufreq/policyM, related_cpus
    and affected_cpus listing them all); 1 (the default) = one policy per CPU.
    base_khz (pstate only): the nominal clock, exposed as base_frequency as
    intel_pstate does. acpi_turbo (acpi only): a boost entry fmax+1000 kHz on top
    of scaling_available_frequencies, as acpi-cpufreq shows turbo; cpuinfo_max_freq
    and scaling_max_freq start there.

    vendor="amd": the powercap tree of an AMD node: package-N and its core
    subzone only (no dram, no psys, no mmio). amd_energy=True (AMD only): the
    amd_energy hwmon driver, class/hwmon/hwmon0 with one counter per CPU
    ("Ecore000", ...) then one per socket ("Esocket0", ...), driven by the
    same model (a socket's counter moves as its package zone).

    pm_counters=True: HPE/Cray cray/pm_counters (energy, cpu_energy,
    memory_energy, accel0..accels-1_energy in J, freshness, generation), the
    same model: cpu = the packages, memory = the DRAM model, accelN =
    p_accel_w, energy = all of them + p_platform_w. grace=True: NVIDIA Grace
    hwmon power sensors per socket (power1_average uW, power1_oem_info
    "Module|CPU|SysIO Power Socket N"): CPU = the package, SysIO = p_sysio_w,
    Module = CPU + DRAM + SysIO + one GPU (p_accel_w); written at each advance.

    uncore="classic": intel_uncore_frequency/package_XX_die_YY per package and
    die; uncore="tpmi": uncoreNN with package_id and domain_id (one per die);
    each with {min,max}_freq_khz, initial_{min,max}_freq_khz and
    current_freq_khz. The model's uncore term (uncore_power_w, uncore_speed)
    follows each package's max_freq_khz."""
    if vendor not in ("intel", "amd"):
        raise FakeHwError(f"vendor must be intel or amd, not {vendor!r}")
    if uncore not in (None, "classic", "tpmi"):
        raise FakeHwError(f"uncore must be classic or tpmi, not {uncore!r}")
    if uncore and not 0 < uncore_min_khz <= uncore_max_khz:
        raise FakeHwError("need 0 < uncore-min-khz <= uncore-max-khz")
    if amd_energy and vendor != "amd":
        raise FakeHwError("amd-energy needs --vendor amd")
    dram = dram and not no_dram and vendor == "intel"
    if variant not in ("acpi", "pstate"):
        raise FakeHwError(f"variant must be acpi or pstate, not {variant!r}")
    if int(cpus_per_policy) < 1:
        raise FakeHwError("cpus-per-policy must be >= 1")
    cpus_per_policy = int(cpus_per_policy)
    if base_khz is not None and (variant != "pstate" or not (fmin_khz <= int(base_khz) <= fmax_khz)):
        raise FakeHwError("base-khz needs --variant pstate and fmin-khz <= base-khz <= fmax-khz")
    if acpi_turbo and variant != "acpi":
        raise FakeHwError("acpi-turbo needs --variant acpi")
    if dies is None:
        dies = 2 if multi_die else 1
    if packages < 1 or cpus_per_package < 1 or dies < 1:
        raise FakeHwError("packages, cpus-per-package and dies must be >= 1")
    if cpus_per_package % dies:
        raise FakeHwError(f"cpus-per-package ({cpus_per_package}) must be a multiple of dies ({dies})")
    if not (0 < fmin_khz <= fmax_khz):
        raise FakeHwError(f"need 0 < fmin-khz <= fmax-khz (got {fmin_khz}, {fmax_khz})")
    m = dict(DEFAULT_MODEL)
    for k, v in (model or {}).items():
        if k not in DEFAULT_MODEL:
            raise FakeHwError(f"unknown model parameter {k!r}; known: {', '.join(DEFAULT_MODEL)}")
        m[k] = float(v)
    root = os.path.abspath(root)
    if os.path.exists(root) and os.listdir(root):
        raise FakeHwError(f"{root} exists and is not empty")
    os.makedirs(root, exist_ok=True)
    if energy_mode is None:
        energy_mode = 0o400 if os.geteuid() == 0 else 0o444

    ncpu = packages * cpus_per_package
    cpus_per_die = cpus_per_package // dies
    zones = []
    pc = "devices/virtual/powercap"
    nz = packages * dies
    for p in range(packages):
        for d in range(dies):
            k = p * dies + d
            cpus = list(range(p * cpus_per_package + d * cpus_per_die,
                              p * cpus_per_package + (d + 1) * cpus_per_die))
            name = f"package-{p}-die-{d}" if dies > 1 else f"package-{p}"
            zid = f"intel-rapl:{k}"
            rel = f"{pc}/intel-rapl/{zid}"
            zones.append(dict(id=zid, name=name, kind="package", rel=rel, max_uj=PKG_MAX_UJ,
                              cpus=cpus, package=p, die=d))
            if dram:
                zones.append(dict(id=f"{zid}:0", name="dram", kind="dram", rel=f"{rel}/{zid}:0",
                                  max_uj=DRAM_MAX_UJ, cpus=cpus, package=p, die=d))
            cid = f"{zid}:1" if vendor == "intel" else f"{zid}:0"
            zones.append(dict(id=cid, name="core", kind="core", rel=f"{rel}/{cid}",
                              max_uj=PKG_MAX_UJ, cpus=cpus, package=p, die=d))
    if vendor == "intel":
        zones.append(dict(id=f"intel-rapl:{nz}", name="psys", kind="psys",
                          rel=f"{pc}/intel-rapl/intel-rapl:{nz}", max_uj=PSYS_MAX_UJ,
                          cpus=list(range(ncpu)), package=-1, die=-1))
        zones.append(dict(id="intel-rapl-mmio:0", name="package-0", kind="mmio",
                          rel=f"{pc}/intel-rapl-mmio/intel-rapl-mmio:0", max_uj=PKG_MAX_UJ,
                          cpus=list(zones[0]["cpus"]), package=0, die=0))
    hwmon = []
    if grace and amd_energy:
        raise FakeHwError("grace and amd-energy are two machines; pick one")
    if pm_counters:
        pmd = "cray/pm_counters"
        for zid, what in [("pm:energy", "node"), ("pm:cpu_energy", "cpu"),
                          ("pm:memory_energy", "memory")] + \
                [(f"pm:accel{a}_energy", f"accel{a}") for a in range(int(accels))]:
            hwmon.append(dict(id=zid, name=zid[3:], kind="pm_" + what.rstrip("0123456789"),
                              rel=pmd, file=zid[3:], fmt="pm", max_uj=HWMON_MAX_UJ,
                              cpus=list(range(ncpu)), package=-1, die=-1))
    if grace:
        for p in range(packages):
            cpus = list(range(p * cpus_per_package, (p + 1) * cpus_per_package))
            for k, kind in enumerate(("Module", "CPU", "SysIO")):
                h = len(hwmon)
                hwmon.append(dict(id=f"grace:{kind.lower()}:{p}", name=f"{kind} Power Socket {p}",
                                  kind="grace_" + kind.lower(),
                                  rel=f"devices/platform/nvidia-grace.{p}/hwmon/hwmon{h}",
                                  file="power1_average", fmt="power", max_uj=HWMON_MAX_UJ,
                                  cpus=cpus, package=p, die=-1))
    if amd_energy:
        hw = "devices/platform/amd_energy.0/hwmon/hwmon0"
        for c in range(ncpu):
            hwmon.append(dict(id=f"amd_energy-core:{c:x}", name=f"Ecore{c:03d}", kind="amd_core",
                              rel=hw, file=f"energy{c + 1}_input", max_uj=HWMON_MAX_UJ,
                              cpus=[c], package=c // cpus_per_package, die=-1))
        for p in range(packages):
            hwmon.append(dict(id=f"amd_energy:{p:x}", name=f"Esocket{p}", kind="amd_socket",
                              rel=hw, file=f"energy{ncpu + p + 1}_input", max_uj=HWMON_MAX_UJ,
                              cpus=list(range(p * cpus_per_package, (p + 1) * cpus_per_package)),
                              package=p, die=-1))
    zones += hwmon
    for i, z in enumerate(zones):
        start = (123456789 * (i + 1)) % z["max_uj"] if initial_uj is None else int(initial_uj)
        if not 0 <= start <= z["max_uj"]:
            raise FakeHwError(f"initial-uj must be in [0, {z['max_uj']}]")
        z.update(counter_uj=start, truth_uj=0, frac=0.0)

    # constraint max power: every CPU busy at fmax
    max_w = zone_powers_w(dict(model=m, fmax_khz=fmax_khz, dies=dies, zones=zones, packages=packages),
                          [1.0] * ncpu, [fmax_khz] * ncpu)

    # powercap tree
    ctypes = ("intel-rapl", "intel-rapl-mmio") if vendor == "intel" else ("intel-rapl",)
    for ct in ctypes:
        d = os.path.join(root, pc, ct)
        _mkdir(d)
        _write_new(os.path.join(d, "enabled"), "1\n", 0o644)
        _write_new(os.path.join(d, "uevent"), "", 0o644)
    for z in hwmon:
        d = os.path.join(root, z["rel"])
        _mkdir(d)
        if z.get("fmt") == "pm":
            _write_new(os.path.join(d, z["file"]), _node_file(z, z["counter_uj"]), 0o444)
            continue
        if z.get("fmt") == "power":
            _write_new(os.path.join(d, "name"), "nvidia_grace\n", 0o444)
            _write_new(os.path.join(d, "power1_oem_info"), z["name"] + "\n", 0o444)
            _write_new(os.path.join(d, z["file"]), "0\n", 0o444)
            _mkdir(os.path.join(root, "class/hwmon"))
            os.symlink("../../" + z["rel"], os.path.join(root, "class/hwmon", os.path.basename(d)))
            continue
        if not os.path.exists(os.path.join(d, "name")):
            _write_new(os.path.join(d, "name"), "amd_energy\n", 0o444)
        _write_new(os.path.join(d, z["file"]), f"{z['counter_uj']}\n", energy_mode)
        _write_new(os.path.join(d, z["file"].replace("_input", "_label")), z["name"] + "\n", 0o444)
    if amd_energy:
        _mkdir(os.path.join(root, "class/hwmon"))
        os.symlink("../../" + hwmon[-1]["rel"], os.path.join(root, "class/hwmon/hwmon0"))
    if pm_counters:
        for f in ("freshness", "generation"):
            _write_new(os.path.join(root, "cray/pm_counters", f), "1\n", 0o444)
        _write_new(os.path.join(root, "cray/pm_counters", "power"), "0 W 0 us\n", 0o444)
    for z in zones:
        if z in hwmon:
            continue
        d = os.path.join(root, z["rel"])
        _mkdir(d)
        _write_new(os.path.join(d, "name"), z["name"] + "\n", 0o444)
        _write_new(os.path.join(d, "energy_uj"), f"{z['counter_uj']}\n", energy_mode)
        _write_new(os.path.join(d, "max_energy_range_uj"), f"{z['max_uj']}\n", 0o444)
        _write_new(os.path.join(d, "enabled"), "1\n", 0o644)
        _write_new(os.path.join(d, "uevent"), "", 0o644)
        maxw = max_w[z["id"]]
        cons = [("long_term", maxw * 0.8, 999424)]
        if z["kind"] in ("package", "psys", "mmio"):
            cons.append(("short_term", maxw, 2440))
        for i, (cname, limit_w, window_us) in enumerate(cons):
            _write_new(os.path.join(d, f"constraint_{i}_name"), cname + "\n", 0o444)
            _write_new(os.path.join(d, f"constraint_{i}_max_power_uw"), f"{int(maxw * 1e6)}\n", 0o444)
            _write_new(os.path.join(d, f"constraint_{i}_power_limit_uw"), f"{int(limit_w * 1e6)}\n", 0o644)
            _write_new(os.path.join(d, f"constraint_{i}_time_window_us"), f"{window_us}\n", 0o644)
    cls = os.path.join(root, "class/powercap")
    _mkdir(cls)
    for ct in ctypes:
        os.symlink(f"../../{pc}/{ct}", os.path.join(cls, ct))
    for z in zones:
        if z in hwmon:
            continue
        os.symlink("../../" + z["rel"], os.path.join(cls, z["id"]))

    # cpufreq tree
    cpu_dir = os.path.join(root, "devices/system/cpu")
    _mkdir(os.path.join(cpu_dir, "cpufreq"))
    rng = f"0-{ncpu - 1}" if ncpu > 1 else "0"
    for f in ("online", "possible", "present"):
        _write_new(os.path.join(cpu_dir, f), rng + "\n", 0o444)
    top_khz = fmax_khz + 1000 if acpi_turbo else fmax_khz
    for c in range(ncpu):
        pkg = c // cpus_per_package
        die = (c % cpus_per_package) // cpus_per_die
        cd = os.path.join(cpu_dir, f"cpu{c}")
        _mkdir(os.path.join(cd, "topology"))
        for f, v in (("physical_package_id", pkg), ("die_id", die), ("core_id", c % cpus_per_package)):
            _write_new(os.path.join(cd, "topology", f), f"{v}\n", 0o444)
        _write_new(os.path.join(cd, "online"), "1\n", 0o644)
        first = c - c % cpus_per_policy
        os.symlink(f"../cpufreq/policy{first}", os.path.join(cd, "cpufreq"))
        if first != c:
            continue  # the policy directory exists already
        members = " ".join(str(x) for x in range(first, min(first + cpus_per_policy, ncpu)))
        pol = os.path.join(cpu_dir, "cpufreq", f"policy{first}")
        _mkdir(pol)
        files = [
            ("scaling_driver", "acpi-cpufreq" if variant == "acpi" else "intel_pstate", 0o444),
            ("scaling_available_governors", ACPI_GOVERNORS if variant == "acpi" else PSTATE_GOVERNORS, 0o444),
            ("scaling_governor", "schedutil" if variant == "acpi" else "powersave", 0o644),
            ("cpuinfo_min_freq", fmin_khz, 0o444),
            ("cpuinfo_max_freq", top_khz, 0o444),
            ("cpuinfo_transition_latency", 10000 if variant == "acpi" else 0, 0o444),
            ("scaling_min_freq", fmin_khz, 0o644),
            ("scaling_max_freq", top_khz, 0o644),
            ("scaling_cur_freq", top_khz, 0o444),
            ("cpuinfo_cur_freq", top_khz, 0o400 if os.geteuid() == 0 else 0o444),
            ("related_cpus", members, 0o444),
            ("affected_cpus", members, 0o444),
        ]
        if variant == "acpi":
            steps = list(range(fmax_khz, fmin_khz - 1, -100000))
            if steps[-1] != fmin_khz:
                steps.append(fmin_khz)
            if acpi_turbo:
                steps.insert(0, top_khz)
            files.append(("scaling_available_frequencies", " ".join(map(str, steps)) + " ", 0o444))
            files.append(("scaling_setspeed", "<unsupported>", 0o644))
        if base_khz is not None:
            files.append(("base_frequency", int(base_khz), 0o444))
        for f, v, mode in files:
            _write_new(os.path.join(pol, f), f"{v}\n", mode)

    unc = _make_uncore(root, uncore, packages, dies, uncore_min_khz, uncore_max_khz)

    sd = os.path.join(root, STATE_DIR)
    _mkdir(sd, 0o755)
    _write_new(os.path.join(sd, LOCK_FILE), "", 0o644)
    _write_new(os.path.join(sd, TRUTH_FILE), "", 0o644)
    state = dict(version=1, variant=variant, vendor=vendor, packages=packages, cpus_per_package=cpus_per_package,
                 dies=dies, dram=dram, ncpu=ncpu, fmin_khz=fmin_khz, fmax_khz=fmax_khz, model=m,
                 cpus_per_policy=cpus_per_policy,
                 zones=zones, seconds_total=0.0, advances=0, uncore=unc,
                 stat_busy_s=[0.0] * ncpu, stat_total_s=[0.0] * ncpu)
    _write_proc_stat(root, state)
    _save_state(root, state)
    return root


UNCORE_REL = "devices/system/cpu/intel_uncore_frequency"


def _make_uncore(root, layout, packages, dies, min_khz, max_khz):
    """The intel_uncore_frequency tree (layout classic or tpmi, None: none);
    returns its domains [{rel, package, die, initial_max_khz}]."""
    if layout is None:
        return []
    out = []
    for p in range(packages):
        for d in range(dies):
            name = (f"package_{p:02d}_die_{d:02d}" if layout == "classic"
                    else f"uncore{len(out):02d}")
            rel = f"{UNCORE_REL}/{name}"
            dd = os.path.join(root, rel)
            _mkdir(dd)
            for f, v, mode in (("min_freq_khz", min_khz, 0o644), ("max_freq_khz", max_khz, 0o644),
                               ("initial_min_freq_khz", min_khz, 0o444),
                               ("initial_max_freq_khz", max_khz, 0o444),
                               ("current_freq_khz", max_khz, 0o444)):
                _write_new(os.path.join(dd, f), f"{v}\n", mode)
            if layout == "tpmi":
                _write_new(os.path.join(dd, "package_id"), f"{p}\n", 0o444)
                _write_new(os.path.join(dd, "domain_id"), f"{d}\n", 0o444)
            out.append(dict(rel=rel, package=p, die=d, initial_max_khz=max_khz))
    return out


def uncore_ratios(root, state):
    """{package: its uncore clock / its initial max}, the mean over its dies,
    read from max_freq_khz; {} without an uncore tree."""
    acc = {}
    for u in state.get("uncore", []):
        try:
            cur = _read_int(os.path.join(root, u["rel"], "max_freq_khz"))
        except (OSError, ValueError):
            cur = u["initial_max_khz"]
        acc.setdefault(u["package"], []).append(
            min(1.0, max(0.05, cur / u["initial_max_khz"])))
    return {p: sum(v) / len(v) for p, v in acc.items()}


def uncore_power_w(m, ratio):
    """The uncore's power at ratio (its clock over its max): a static part
    and a part linear in the clock (an approximation, docs/accounting.md,
    "The simulator's uncore term")."""
    s = m.get("uncore_static_frac", DEFAULT_MODEL["uncore_static_frac"])
    return m["p_uncore_w"] * (s + (1.0 - s) * ratio)


def _speed_freqs(root, state):
    """Per CPU, the core clock that runs its work as fast as its core and
    uncore clocks together do (uncore_speed): what the throttle applies."""
    freqs = _cpu_freqs(root, state)
    unc = uncore_ratios(root, state)
    if not unc:
        return freqs
    fmax, per = state["fmax_khz"], state["cpus_per_package"]
    return [int(fmax * uncore_speed(state["model"], f / fmax, unc.get(c // per, 1.0)))
            for c, f in enumerate(freqs)]


def uncore_speed(m, core_ratio, unc_ratio):
    """The share of full speed a CPU runs at with its core and uncore clocks:
    a fraction uncore_mem_frac of its work scales with the uncore clock, the
    rest with the core clock (1 / sum of the times)."""
    f = m.get("uncore_mem_frac", 0.0)
    if f <= 0.0 or unc_ratio >= 1.0:
        return core_ratio
    if core_ratio <= 0.0:
        return 0.0
    return 1.0 / ((1.0 - f) / core_ratio + f / unc_ratio)


def _write_proc_stat(root, state):
    """ROOT/proc/stat as the kernel writes it (USER_HZ = 100 ticks a second),
    from the utilisation the model used: each fake CPU's busy time is
    util * seconds of every advance, the rest idle. A reader pointed there
    (the plugin's procfs=) sees the busy time the energy came from, not this
    host's."""
    busy = state.setdefault("stat_busy_s", [0.0] * state["ncpu"])
    total = state.setdefault("stat_total_s", [0.0] * state["ncpu"])
    ticks = [(int(b * USER_HZ), int(t * USER_HZ) - int(b * USER_HZ)) for b, t in zip(busy, total)]
    lines = [f"cpu  {sum(b for b, _ in ticks)} 0 0 {sum(i for _, i in ticks)} 0 0 0 0 0 0"]
    lines += [f"cpu{c} {b} 0 0 {i} 0 0 0 0 0 0" for c, (b, i) in enumerate(ticks)]
    path, text = os.path.join(root, "proc", "stat"), "\n".join(lines) + "\nintr 0\nctxt 0\n"
    if os.path.exists(path):
        write_in_place(path, text)
    else:  # a tree made before it had one
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _write_new(path, text)


def _g(m, f_ghz):
    return m["a"] * f_ghz ** m["b"] + m["c"]


# --------------------------------------------------------------------------
# cpufreq

def _parse_khz(text):
    try:
        v = int(text.strip())
    except (ValueError, AttributeError):
        return None
    return v if v > 0 else None


def read_cpufreq(root, cpu):
    """All files of cpuN/cpufreq (ints where numeric) plus 'effective_khz':
    the frequency the model uses for this CPU."""
    d = os.path.join(root, "devices/system/cpu", f"cpu{cpu}", "cpufreq")
    out = {}
    for f in sorted(os.listdir(d)):
        try:
            v = _read(os.path.join(d, f)).strip()
        except OSError:
            continue
        try:
            out[f] = int(v)
        except ValueError:
            out[f] = v
    out["effective_khz"] = _effective_khz(out)
    return out


def _effective_khz(files):
    """acpi + userspace governor: scaling_setspeed; otherwise
    min(scaling_max_freq, cpuinfo_max_freq); always clamped to
    [scaling_min_freq, scaling_max_freq] within [cpuinfo_min, cpuinfo_max]."""
    cmax = _parse_khz(str(files.get("cpuinfo_max_freq")))
    cmin = _parse_khz(str(files.get("cpuinfo_min_freq"))) or 1
    smax = _parse_khz(str(files.get("scaling_max_freq"))) or cmax
    smin = _parse_khz(str(files.get("scaling_min_freq"))) or cmin
    hi = max(cmin, min(smax, cmax))
    lo = min(max(smin, cmin), hi)
    f = hi
    if files.get("scaling_driver") == "acpi-cpufreq" and files.get("scaling_governor") == "userspace":
        sp = _parse_khz(str(files.get("scaling_setspeed")))
        if sp is not None:
            f = sp
    return max(lo, min(f, hi))


def _policy_dir(root, cpu):
    """The policy directory of a CPU: cpuN/cpufreq, a symlink to its policy (one
    CPU per policy unless the tree was created with cpus_per_policy > 1)."""
    return os.path.join(root, "devices/system/cpu", f"cpu{cpu}", "cpufreq")


def _cpu_freqs(root, state):
    freqs = []
    for c in range(state["ncpu"]):
        pol = _policy_dir(root, c)
        files = {}
        for f in ("scaling_driver", "scaling_governor", "cpuinfo_min_freq", "cpuinfo_max_freq",
                  "scaling_min_freq", "scaling_max_freq", "scaling_setspeed"):
            try:
                files[f] = _read(os.path.join(pol, f)).strip()
            except OSError:
                pass
        freqs.append(_effective_khz(files))
    return freqs


# --------------------------------------------------------------------------
# model + advance

def zone_powers_w(state, utils, freqs_khz, uncore=None):
    """Power (W) of every zone for per-CPU utils and frequencies; uncore:
    {package: uncore clock ratio} (uncore_ratios; absent: at its max)."""
    m = state["model"]
    uncore = uncore or {}
    fmax_ghz = state["fmax_khz"] / 1e6
    gmax = _g(m, fmax_ghz)
    dies = state["dies"]
    cpu_w = [u * m["p_core_max_w"] * _g(m, f / 1e6) / gmax + (1.0 - u) * m["p_core_idle_w"]
             for u, f in zip(utils, freqs_khz)]
    out = {}
    for z in state["zones"]:
        k = z["kind"]
        if k == "package":
            unc_w = uncore_power_w(m, uncore.get(z["package"], 1.0))
            out[z["id"]] = unc_w / dies + sum(cpu_w[c] for c in z["cpus"])
        elif k in ("core", "amd_core"):
            out[z["id"]] = sum(cpu_w[c] for c in z["cpus"])
        elif k == "amd_socket":  # the socket counter is the package's energy
            out[z["id"]] = m["p_uncore_w"] + sum(cpu_w[c] for c in z["cpus"])
        elif k == "dram":
            mean_u = sum(utils[c] for c in z["cpus"]) / len(z["cpus"])
            out[z["id"]] = (m["p_dram_idle_w"] + mean_u * m["p_dram_dyn_w"]) / dies
    pkg_w = sum(out[z["id"]] for z in state["zones"] if z["kind"] == "package")
    n_pkg = state.get("packages", 1)
    dram_model = [(m["p_dram_idle_w"] + sum(utils[c] for c in range(p * len(utils) // n_pkg,
                   (p + 1) * len(utils) // n_pkg)) / (len(utils) // n_pkg) * m["p_dram_dyn_w"])
                  for p in range(n_pkg)]
    n_acc = sum(1 for z in state["zones"] if z["kind"] == "pm_accel")
    for z in state["zones"]:
        k = z["kind"]
        if k == "pm_cpu":
            out[z["id"]] = pkg_w
        elif k == "pm_memory":
            out[z["id"]] = sum(dram_model)
        elif k == "pm_accel":
            out[z["id"]] = m["p_accel_w"]
        elif k == "pm_node":
            out[z["id"]] = pkg_w + sum(dram_model) + n_acc * m["p_accel_w"] + m["p_platform_w"]
        elif k.startswith("grace_"):
            cpu = m["p_uncore_w"] + sum(cpu_w[c] for c in z["cpus"])
            out[z["id"]] = {"grace_cpu": cpu, "grace_sysio": m["p_sysio_w"],
                            "grace_module": cpu + dram_model[z["package"]] + m["p_sysio_w"]
                            + m["p_accel_w"]}[k]
    for z in state["zones"]:
        if z["kind"] == "psys":
            out[z["id"]] = m["p_platform_w"] + sum(
                out[y["id"]] for y in state["zones"] if y["kind"] in ("package", "dram"))
        elif z["kind"] == "mmio":
            out[z["id"]] = out[state["zones"][0]["id"]]
    return out


def _check_seconds(seconds, limit=None):
    rng = f"in (0, {limit:g}]" if limit is not None else "> 0"
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        raise FakeHwError(f"seconds must be a number {rng}, got {seconds!r}")
    if not math.isfinite(s) or s <= 0 or (limit is not None and s > limit):
        raise FakeHwError(f"seconds must be {rng}, got {seconds!r}")
    return s


def _check_util(u):
    try:
        v = float(u)
    except (TypeError, ValueError):
        raise FakeHwError(f"util must be a number in [0, 1], not {u!r}")
    if not (math.isfinite(v) and 0.0 <= v <= 1.0):
        raise FakeHwError(f"util must be in [0, 1], got {u!r}")
    return v


def _utils_list(state, util):
    n = state["ncpu"]
    if isinstance(util, (list, tuple)):
        if len(util) != n:
            raise FakeHwError(f"util list needs {n} values (one per fake CPU), got {len(util)}")
        return [_check_util(u) for u in util]
    return [_check_util(util)] * n


def _advance_locked(root, state, seconds, utils, source, extra=None):
    freqs = _cpu_freqs(root, state)
    powers = zone_powers_w(state, utils, freqs, uncore_ratios(root, state))
    plan = []
    for z in state["zones"]:
        exact = powers[z["id"]] * seconds * 1e6 + z["frac"]
        d = int(math.floor(exact))
        if d >= z["max_uj"]:
            raise FakeHwError(
                f"advance of {seconds:g} s would add {d} uJ to {z['id']} ({z['name']}), not less than its "
                f"max_energy_range_uj {z['max_uj']}: the counter would wrap more than once (ambiguous "
                f"for any reader); advance in smaller steps")
        plan.append((z, d, exact - d))
    t_before = _now_ns()
    wrapped = {}
    for z, d, frac in plan:
        new = z["counter_uj"] + d
        wrapped[z["id"]] = new > z["max_uj"]
        if new > z["max_uj"]:
            new -= z["max_uj"]
        text = f"{new}\n" if "fmt" not in z else \
            _node_file(z, new, powers[z["id"]], t_before // 1000)
        write_in_place(os.path.join(root, z["rel"], z.get("file", "energy_uj")), text)
        z["counter_uj"] = new
        z["truth_uj"] += d
        z["frac"] = frac
    for c, f in enumerate(freqs):
        pol = _policy_dir(root, c)
        for name in ("scaling_cur_freq", "cpuinfo_cur_freq"):
            write_in_place(os.path.join(pol, name), f"{f}\n")
    _bump_pm(root, state, "freshness", powers, t_before // 1000)
    busy = state.setdefault("stat_busy_s", [0.0] * state["ncpu"])
    total = state.setdefault("stat_total_s", [0.0] * state["ncpu"])
    for c, u in enumerate(utils):
        busy[c] += u * seconds
        total[c] += seconds
    _write_proc_stat(root, state)
    t_after = _now_ns()
    state["seconds_total"] += seconds
    state["advances"] += 1
    _save_state(root, state)
    deltas = {z["id"]: d for z, d, _ in plan}
    entry = dict(seq=state["advances"], source=source, t_before_ns=t_before, t_after_ns=t_after,
                 seconds=seconds, util=utils, freq_khz=freqs,
                 delta_uj=deltas,
                 cumulative_uj={z["id"]: z["truth_uj"] for z in state["zones"]},
                 counter_uj={z["id"]: z["counter_uj"] for z in state["zones"]})
    if extra:
        entry.update(extra)
    _append_truth(root, entry)
    return _report(state, seconds, deltas, freqs, powers, wrapped, t_before, t_after)


def _node_file(z, counter_uj, power_w=0.0, t_us=0):
    """The text of a node-level file: pm_counters "<J> J <t> us" (whole
    joules, as the firmware shows them), Grace power1_average in uW."""
    if z["fmt"] == "pm":
        return f"{counter_uj // 1000000} J {t_us} us\n"
    return f"{int(round(power_w * 1e6))}\n"


def _bump_pm(root, state, name, powers=None, t_us=0):
    """Bump pm_counters' freshness or generation; with powers, write the
    node's `power` too ("<W> W <t> us", as Slurm's acct_gather_energy/pm_counters
    reads it beside `energy`)."""
    pm = [z for z in state["zones"] if z["kind"] == "pm_node"]
    if not pm:
        return
    path = os.path.join(root, "cray/pm_counters", name)
    write_in_place(path, f"{int(_read(path).strip()) + 1}\n")
    if powers is not None:
        write_in_place(os.path.join(root, "cray/pm_counters", "power"),
                       f"{int(round(powers[pm[0]['id']]))} W {t_us} us\n")


def pm_reset(root):
    """The pm_counters restart (a BMC reset): every counter back to 0 and a
    new generation. Energy before the reset stays in the truth."""
    with _locked(root):
        state = _load_state(root)
        pm = [z for z in state["zones"] if z["kind"].startswith("pm_")]
        if not pm:
            raise FakeHwError("no pm_counters in this tree (create --pm-counters)")
        for z in pm:
            z["counter_uj"] = 0
            write_in_place(os.path.join(root, z["rel"], z["file"]), _node_file(z, 0))
        _bump_pm(root, state, "generation")
        _bump_pm(root, state, "freshness")
        _save_state(root, state)


def _totals(state, per_zone):
    cpu = sum(per_zone[z["id"]] for z in state["zones"] if z["kind"] == "package")
    dram = sum(per_zone[z["id"]] for z in state["zones"] if z["kind"] == "dram")
    return cpu, dram


def _report(state, seconds, deltas, freqs, powers, wrapped, t_before, t_after):
    zones = {}
    for z in state["zones"]:
        zones[z["id"]] = dict(name=z["name"], kind=z["kind"], energy_uj=deltas[z["id"]],
                              power_w=powers[z["id"]], counter_uj=z["counter_uj"],
                              wrapped=wrapped[z["id"]],
                              freq_khz={str(c): freqs[c] for c in z["cpus"]})
    cpu, dram = _totals(state, deltas)
    return dict(seconds=seconds, zones=zones, energy_cpu_uj=cpu, energy_dram_uj=dram,
                energy_total_uj=cpu + dram, t_before_ns=t_before, t_after_ns=t_after)


def advance(root, seconds, util=1.0, util_list=None, source="advance", _limit=None, _extra=None):
    """Advance every counter by the model for `seconds` at `util` (a float for
    every CPU, or a list with one value per fake CPU; util_list= is an alias
    for the list form). Returns the report dict."""
    if util_list is not None:
        util = list(util_list)
    s = _check_seconds(seconds, _limit)
    with _locked(root):
        state = _load_state(root)
        utils = _utils_list(state, util)
        return _advance_locked(root, state, s, utils, source, _extra)


def near_wrap(root, zone, headroom_uj=1000000):
    """Set a zone's counter to max - headroom (not counted as energy)."""
    with _locked(root):
        state = _load_state(root)
        for z in state["zones"]:
            if z["id"] == zone:
                h = int(headroom_uj)
                if not 0 <= h <= z["max_uj"]:
                    raise FakeHwError(f"headroom-uj must be in [0, {z['max_uj']}], got {headroom_uj}")
                z["counter_uj"] = z["max_uj"] - h
                write_in_place(os.path.join(root, z["rel"], z.get("file", "energy_uj")),
                               f"{z['counter_uj']}\n")
                _save_state(root, state)
                return z["counter_uj"]
        raise FakeHwError(f"no zone {zone!r}; zones: {', '.join(z['id'] for z in state['zones'])}")


def set_counter(root, zone, value_uj):
    """Set a zone's counter to value_uj, not counted as energy: a counter
    reset (a value below the last one that is not a wrap), or a jump."""
    with _locked(root):
        state = _load_state(root)
        for z in state["zones"]:
            if z["id"] == zone:
                v = int(value_uj)
                if not 0 <= v <= z["max_uj"]:
                    raise FakeHwError(f"value-uj must be in [0, {z['max_uj']}], got {value_uj}")
                z["counter_uj"] = v
                write_in_place(os.path.join(root, z["rel"], z.get("file", "energy_uj")), f"{v}\n")
                _save_state(root, state)
                return v
        raise FakeHwError(f"no zone {zone!r}; zones: {', '.join(z['id'] for z in state['zones'])}")


def remove_zone(root, zone):
    """CPU hotplug: the package of zone `zone` (intel-rapl:N) goes offline, as
    the kernel unregisters its powercap zone. Its CPUs' online files read 0
    (devices/system/cpu/online lists the rest); the zone and its subzones
    leave class/powercap and devices/ (moved to .fakehw/removed/, so that a
    new discovery does not find them), and their energy_uj files, which
    readers may hold open, read nothing any more (the kernel's -ENODEV after
    the unregister). The zones leave the state: advance() no longer moves
    them, and truth() no longer counts them. Returns the removed zone ids."""
    with _locked(root):
        state = _load_state(root)
        gone = [z for z in state["zones"] if z["id"] == zone or z["id"].startswith(zone + ":")]
        if not gone or zone.count(":") != 1:
            raise FakeHwError(f"no top-level zone {zone!r}; zones: "
                              f"{', '.join(z['id'] for z in state['zones'])}")
        cpus = sorted({c for z in gone for c in z["cpus"]})
        removed = _state_path(root, "removed")
        os.makedirs(removed, exist_ok=True)
        for z in gone:
            write_in_place(os.path.join(root, z["rel"], "energy_uj"), "")
            link = os.path.join(root, "class/powercap", z["id"])
            if os.path.islink(link):
                os.unlink(link)
        top = next(z for z in gone if z["id"] == zone)
        os.rename(os.path.join(root, top["rel"]), os.path.join(removed, zone))
        for c in cpus:
            write_in_place(os.path.join(root, f"devices/system/cpu/cpu{c}/online"), "0\n")
        online = [c for c in range(state["ncpu"]) if c not in cpus]
        write_in_place(os.path.join(root, "devices/system/cpu/online"),
                       ",".join(str(c) for c in online) + "\n")
        state["zones"] = [z for z in state["zones"] if z not in gone]
        state.setdefault("removed_zones", []).extend(z["id"] for z in gone)
        _save_state(root, state)
        return [z["id"] for z in gone]


def truth(root):
    """Cumulative ground truth since create (unwrapped uJ), same shape as advance()."""
    with _locked(root):
        state = _load_state(root)
    per = {z["id"]: z["truth_uj"] for z in state["zones"]}
    cpu, dram = _totals(state, per)
    return dict(seconds=state["seconds_total"], advances=state["advances"],
                zones={z["id"]: dict(name=z["name"], kind=z["kind"], energy_uj=z["truth_uj"],
                                     counter_uj=z["counter_uj"]) for z in state["zones"]},
                energy_cpu_uj=cpu, energy_dram_uj=dram, energy_total_uj=cpu + dram)


def truth_log(root):
    """All ground-truth log entries (list of dicts), oldest first."""
    with open(_state_path(root, TRUTH_FILE)) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def tree_dynamic_uj(root, tree_pid, start_ns=None, end_ns=None):
    """The per-process truth of live mode with throttling: the package energy above
    idle the model charged for the utilisation of process tree `tree_pid` (a node
    process: truth log throttle.tree_cpu_s). Per tick and CPU, the CPU's energy above
    idle (util * (p_core_max * g(f)/g(fmax) - p_core_idle) * seconds) is shared among
    the node's trees by their CPU time on it in that tick. Fake CPU j is real CPU j.
    start_ns, end_ns: only the ticks written in (start, end], those a reader of the
    counters at start and end sees (a stalled daemon writes a process's last busy
    time after it ended: outside the window of who measured it)."""
    state = _load_state(root)
    m, fmax = state["model"], state["fmax_khz"] / 1e6
    gmax = _g(m, fmax)
    out = 0.0
    for e in truth_log(root):
        if (start_ns is not None and e["t_before_ns"] <= start_ns) or \
                (end_ns is not None and e["t_before_ns"] > end_ns):
            continue
        th = e.get("throttle") or {}
        mine = th.get("tree_cpu_s", {}).get(str(tree_pid))
        for c, sec in enumerate(mine or ()):
            if sec <= 0 or c >= len(e["util"]):
                continue
            busy_w = e["util"][c] * (m["p_core_max_w"] * _g(m, e["freq_khz"][c] / 1e6) / gmax
                                     - m["p_core_idle_w"])
            out += busy_w * e["seconds"] * 1e6 * sec / th["node_cpu_s"][c]
    return out


def package_idle_w(root):
    """The package zones' power with every CPU idle (uncore + idle CPUs), in W."""
    state = _load_state(root)
    m = state["model"]
    return state["packages"] * m["p_uncore_w"] + state["ncpu"] * m["p_core_idle_w"]


def zones(root):
    """Zone descriptions from the state: id, name, kind, rel path, max_uj, cpus."""
    return [{k: z[k] for k in ("id", "name", "kind", "rel", "max_uj", "cpus")}
            for z in _load_state(root)["zones"]]


# --------------------------------------------------------------------------
# live mode: utilisation from /proc/stat

def read_proc_stat(path="/proc/stat"):
    """[(busy, total)] jiffies per real CPU."""
    out = []
    with open(path) as fh:
        for line in fh:
            if line.startswith("cpu") and line[3:4].isdigit():
                v = [int(x) for x in line.split()[1:]]
                idle = v[3] + (v[4] if len(v) > 4 else 0)
                total = sum(v[:8])  # guest time is already in user/nice
                out.append((total - idle, total))
    return out


def utils_between(prev, cur):
    out = []
    for (b0, t0), (b1, t1) in zip(prev, cur):
        dt = t1 - t0
        out.append(min(1.0, max(0.0, (b1 - b0) / dt)) if dt > 0 else 0.0)
    return out


# --------------------------------------------------------------------------
# live mode: the simulated clock costs time (CPU bandwidth control)
#
# The node's processes (every process with an ancestor whose environment holds
# the marker NAME=VALUE, not the marked processes themselves: under the test
# cluster, the jobs below slurmstepd) are moved into cgroups, one per set of
# real CPUs they may run on (their affinity). A group whose CPUs have fake
# clock ratios r_j gets the quota sum(r_j) * period: a task pinned to a CPU at
# r = 0.5 runs half of every period. Utilisation then comes from the groups'
# CPU time, divided by r (a task throttled to r of a CPU is 100 % busy on a
# CPU clocked at r). See README.md "Clock costs time".

CG_PREFIX = "joulestep-fakehw-"
THROTTLE_PERIOD_MS = 50.0
THROTTLE_MIN_QUOTA_US = 1000     # the kernel refuses a smaller quota
V1_SHARES, V2_WEIGHT = 262144, 10000  # the most: the node's processes first on a busy host


def _cg_write(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _cgroup_mounts(mountinfo="/proc/self/mountinfo"):
    """[(fstype, mountpoint, super options set)] of cgroup and cgroup2 mounts."""
    out = []
    with open(mountinfo) as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            f, r = left.split(), right.split()
            if len(r) >= 3 and r[0] in ("cgroup", "cgroup2"):
                mp = f[4].replace("\\040", " ")
                out.append((r[0], mp, set(r[2].split(","))))
    return out


class _CgBackend:
    """One CPU-bandwidth hierarchy: v2 (cpu.max, cpu.stat usage_usec) or v1
    (cpu.cfs_quota_us in the cpu hierarchy, cpuacct.usage in the cpuacct one,
    the same directory when both are mounted together)."""

    def __init__(self, version, cpu_mnt, acct_mnt=None):
        self.version, self.cpu_mnt, self.acct_mnt = version, cpu_mnt, acct_mnt
        self.name = f"cgroup v{version} at {cpu_mnt}" + (
            f" (usage from {acct_mnt})" if acct_mnt and acct_mnt != cpu_mnt else "")

    def mounts(self):
        return [self.cpu_mnt] + ([self.acct_mnt] if self.acct_mnt and self.acct_mnt != self.cpu_mnt else [])

    def top(self, mnt, pid):
        return os.path.join(mnt, f"{CG_PREFIX}{pid}")

    def make_top(self, pid):
        if self.version == 2:
            sub = os.path.join(self.cpu_mnt, "cgroup.subtree_control")
            if "cpu" not in _read(sub).split():
                try:
                    _cg_write(sub, "+cpu")
                except OSError as e:
                    raise FakeHwError(f"cannot enable the cpu controller in {sub}: {e.strerror}")
        for mnt in self.mounts():
            os.mkdir(self.top(mnt, pid), 0o755)
        t = self.top(self.cpu_mnt, pid)
        if self.version == 2:
            _cg_write(os.path.join(t, "cgroup.subtree_control"), "+cpu")
            _cg_write(os.path.join(t, "cpu.weight"), str(V2_WEIGHT))
        else:
            _cg_write(os.path.join(t, "cpu.shares"), str(V1_SHARES))

    def make_group(self, pid, name, period_us):
        for mnt in self.mounts():
            os.mkdir(os.path.join(self.top(mnt, pid), name), 0o755)
        if self.version == 1:
            _cg_write(os.path.join(self.top(self.cpu_mnt, pid), name, "cpu.cfs_period_us"), str(period_us))

    def set_quota(self, pid, name, quota_us, period_us):
        d = os.path.join(self.top(self.cpu_mnt, pid), name)
        if self.version == 2:
            _cg_write(os.path.join(d, "cpu.max"), f"{quota_us if quota_us else 'max'} {period_us}")
        else:
            _cg_write(os.path.join(d, "cpu.cfs_quota_us"), str(quota_us if quota_us else -1))

    def usage_ns(self, pid, name):
        if self.version == 2:
            for line in _read(os.path.join(self.top(self.cpu_mnt, pid), name, "cpu.stat")).splitlines():
                k, _, v = line.partition(" ")
                if k == "usage_usec":
                    return int(v) * 1000
            return 0
        return int(_read(os.path.join(self.top(self.acct_mnt, pid), name, "cpuacct.usage")).strip())

    def throttled(self, pid, name):
        """(nr_periods, nr_throttled) of a group, from cpu.stat."""
        st = {}
        for line in _read(os.path.join(self.top(self.cpu_mnt, pid), name, "cpu.stat")).splitlines():
            k, _, v = line.partition(" ")
            with contextlib.suppress(ValueError):
                st[k] = int(v)
        return st.get("nr_periods", 0), st.get("nr_throttled", 0)

    def remove_group(self, pid, name):
        """rmdir a group (OSError EBUSY while a process is in it)."""
        for mnt in self.mounts():
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(os.path.join(self.top(mnt, pid), name))

    def move(self, pid, name, proc_pid):
        """Move a process (all its threads) into group `name` (None: the top's parent)."""
        for mnt in self.mounts():
            d = os.path.join(self.top(mnt, pid), name) if name else mnt
            _cg_write(os.path.join(d, "cgroup.procs"), str(proc_pid))

    def move_to(self, mnt, rel, proc_pid):
        _cg_write(os.path.join(mnt, rel.lstrip("/"), "cgroup.procs"), str(proc_pid))

    def proc_paths(self, proc_pid):
        """{mountpoint: path} of a process in this backend's hierarchies."""
        want = {}
        with open(f"/proc/{proc_pid}/cgroup") as fh:
            for line in fh:
                _, ctl, path = line.rstrip("\n").split(":", 2)
                ctls = set(ctl.split(","))
                if self.version == 2 and ctl == "":
                    want[self.cpu_mnt] = path
                elif self.version == 1:
                    if "cpu" in ctls:
                        want[self.cpu_mnt] = path
                    if self.acct_mnt and "cpuacct" in ctls:
                        want[self.acct_mnt] = path
        return want

    def remove_tree(self, top_pid):
        """Move every process out of a top group (to the hierarchy's root) and remove it."""
        for mnt in self.mounts():
            top = self.top(mnt, top_pid)
            if not os.path.isdir(top):
                continue
            kids = [os.path.join(top, d) for d in os.listdir(top) if os.path.isdir(os.path.join(top, d))]
            for d in kids + [top]:
                for _ in range(3):
                    try:
                        procs = _read(os.path.join(d, "cgroup.procs")).split()
                    except OSError:
                        procs = []
                    for p in procs:
                        with contextlib.suppress(OSError):
                            _cg_write(os.path.join(mnt, "cgroup.procs"), p)
                    if not procs:
                        break
            for d in kids + [top]:
                for _ in range(50):
                    try:
                        os.rmdir(d)
                        break
                    except FileNotFoundError:
                        break
                    except OSError as e:
                        if e.errno != errno.EBUSY:
                            raise
                        time.sleep(0.02)  # a task on its way out still counts


def detect_cgroup(mountinfo="/proc/self/mountinfo"):
    """The host's CPU bandwidth control: (backend, None), or (None, reason).
    cgroup v2 with the cpu controller available is preferred; else v1's cpu
    hierarchy (with cpuacct, mounted with it or beside it, for the usage)."""
    try:
        mounts = _cgroup_mounts(mountinfo)
    except OSError as e:
        return None, f"cannot read {mountinfo}: {e.strerror}"
    tried = []
    for fs, mp, _ in mounts:
        if fs == "cgroup2":
            try:
                ctls = _read(os.path.join(mp, "cgroup.controllers")).split()
            except OSError:
                ctls = []
            if "cpu" in ctls:
                return _CgBackend(2, mp), None
            tried.append(f"cgroup2 at {mp} has no cpu controller (it is bound to v1)")
    cpu = next((mp for fs, mp, o in mounts if fs == "cgroup" and "cpu" in o), None)
    if cpu and os.path.exists(os.path.join(cpu, "cpu.cfs_quota_us")):
        acct = next((mp for fs, mp, o in mounts if fs == "cgroup" and "cpuacct" in o), None)
        if acct:
            return _CgBackend(1, cpu, acct), None
        tried.append(f"cgroup v1 cpu at {cpu}, but no cpuacct hierarchy for the usage")
    elif cpu:
        tried.append(f"cgroup v1 cpu at {cpu} has no cpu.cfs_quota_us (kernel without CFS bandwidth)")
    else:
        tried.append("no cgroup v1 cpu hierarchy mounted")
    return None, "; ".join(tried) or "no cgroup mounted"


def throttle_available():
    """(True, backend name) when `serve --throttle-under` can work here (root and
    a usable cgroup CPU bandwidth control), else (False, reason)."""
    if os.geteuid() != 0:
        return False, "throttling needs root (it creates cgroups)"
    be, why = detect_cgroup()
    return (True, be.name) if be else (False, why)


def cleanup_stale_cgroups(backend):
    """Remove top groups left by serve daemons that died (SIGKILL). Groups of
    live fakehw daemons are left alone."""
    removed = []
    for mnt in backend.mounts():
        try:
            names = os.listdir(mnt)
        except OSError:
            continue
        for n in names:
            if not n.startswith(CG_PREFIX) or not n[len(CG_PREFIX):].isdigit():
                continue
            pid = int(n[len(CG_PREFIX):])
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    alive = b"fakehw" in fh.read()
            except OSError:
                alive = False
            if not alive:
                backend.remove_tree(pid)
                removed.append(n)
    return removed


def _affinity(pid):
    """The real CPUs a process may run on (from /proc/PID/status), or None."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("Cpus_allowed_list:"):
                    return frozenset(parse_cpu_list(line.split(":", 1)[1]))
    except (OSError, ValueError):
        return None
    return None


def _runnable_threads(pid):
    """Threads of a process that are running or want to run (state R; a throttled
    thread stays R), from /proc/PID/task/*/stat."""
    n = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as fh:
                st = fh.read()
        except OSError:
            continue
        if st[st.rindex(b")") + 2:st.rindex(b")") + 3] == b"R":
            n += 1
    return n


def parse_cpu_list(text):
    """'0-2,5' -> [0, 1, 2, 5]."""
    out = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


YOUNG_TICKS = 2 * USER_HZ  # a process this young may not have exec'ed yet


def _uptime_ticks():
    """Clock ticks since boot (the unit of /proc/PID/stat's starttime)."""
    try:
        with open("/proc/uptime") as fh:
            return int(float(fh.read().split()[0]) * USER_HZ)
    except (OSError, ValueError, IndexError):
        return 0


class Throttle:
    """Live-mode throttling of the node's processes (see the comment above)."""

    def __init__(self, marker, nreal, period_ms=THROTTLE_PERIOD_MS, backend=None, full_speed=1.0):
        if "=" not in marker or marker.startswith("="):
            raise FakeHwError(f"--throttle-under wants NAME=VALUE, got {marker!r}")
        if os.geteuid() != 0:
            raise FakeHwError("--throttle-under needs root (it creates cgroups); "
                              "use --no-throttle to run without")
        if backend is None:
            backend, why = detect_cgroup()
            if backend is None:
                raise FakeHwError(f"no usable CPU bandwidth control ({why}); "
                                  f"use --no-throttle to run with the clock costing no time")
        if not (1.0 <= float(period_ms) <= 1000.0):
            raise FakeHwError("--throttle-period-ms must be in [1, 1000]")
        if not (0.05 <= float(full_speed) <= 1.0):
            raise FakeHwError("--throttle-full-speed must be in [0.05, 1]")
        self.full_speed = float(full_speed)
        self.be, self.marker = backend, marker.encode()
        self.nreal = nreal
        self.period_us = int(float(period_ms) * 1000)
        self.pid = os.getpid()
        self.procs = {}      # pid -> [ppid, marked, node, group name or None, start ticks]
        self.orig = {}       # pid -> {mount: path} before we moved it
        self.groups = {}     # name -> {"cpus": frozenset, "quota": int|None, "usage_ns": int}
        self.pending = [0.0] * nreal   # fake-busy seconds not yet shown, per real CPU
        self.started = False
        cleanup_stale_cgroups(backend)
        try:
            backend.make_top(self.pid)
        except FileExistsError:
            backend.remove_tree(self.pid)
            backend.make_top(self.pid)
        except OSError as e:
            with contextlib.suppress(OSError):
                backend.remove_tree(self.pid)
            raise FakeHwError(f"cannot create cgroups in {backend.name}: {e.strerror or e}; "
                              f"use --no-throttle to run without")
        self.started = True

    # -- processes
    def _scan(self):
        """Refresh the process table; return the node's processes. A young
        process is looked at again: read between its fork and its exec, its
        environment was still its parent's."""
        seen, flipped = set(), False
        now = _uptime_ticks()
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            pid = int(d)
            seen.add(pid)
            e = self.procs.get(pid)
            if e is not None and (e[4] is None or now - e[4] > YOUNG_TICKS):
                continue
            try:
                with open(f"/proc/{pid}/stat", "rb") as fh:
                    st = fh.read()
                fields = st[st.rindex(b")") + 2:].split()
                ppid, started = int(fields[1]), int(fields[19])
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    marked = self.marker in fh.read().split(b"\0")
            except (OSError, ValueError):
                continue
            if e is None:
                self.procs[pid] = [ppid, marked, None, None, started]
            elif marked != e[1]:  # seen between its fork and its exec
                e[1] = marked
                flipped = True
        if flipped:  # the trees worked out from its old flag are decided again
            for e in self.procs.values():
                e[2] = None
        for pid in list(self.procs):
            if pid not in seen:
                del self.procs[pid]
                self.orig.pop(pid, None)

        def tree(pid, depth=0):
            """The pid of the process's tree: its ancestor (or itself) whose parent
            is marked; 0 when it is not the node's."""
            e = self.procs.get(pid)
            if e is None or depth > 64:
                return 0
            if e[2] is None:
                parent = self.procs.get(e[0])
                if parent is None and not e[1]:
                    return 0  # its parent could not be read yet: decide at a later scan
                e[2] = 0 if e[1] else (pid if parent[1] else tree(e[0], depth + 1))
            return e[2]
        return [p for p in self.procs if p != self.pid and tree(p)]

    def _group_for(self, tree, cpus):
        name = f"t{tree}-cpus-" + "_".join(str(c) for c in sorted(cpus))
        if name not in self.groups:
            usage = 0
            try:
                self.be.make_group(self.pid, name, self.period_us)
            except FileExistsError:  # left by a tree whose pid came round again
                self.be.set_quota(self.pid, name, None, self.period_us)
                usage = self.be.usage_ns(self.pid, name)
            self.groups[name] = {"cpus": cpus, "quota": None, "usage_ns": usage}
        return name

    def _place(self, pid):
        cpus = _affinity(pid)
        if cpus is None:
            return
        cpus = frozenset(c for c in cpus if c < self.nreal) or frozenset(range(self.nreal))
        try:
            name = self._group_for(self.procs[pid][2], cpus)
        except (OSError, ValueError) as ex:
            print(f"fakehw: cannot make a group for pid {pid}: {ex}", file=sys.stderr, flush=True)
            return
        e = self.procs[pid]
        if e[3] == name:
            return
        if pid not in self.orig:
            try:
                paths = self.be.proc_paths(pid)
            except OSError:
                return
            if any(self._ours(p) for p in paths.values()):
                paths = self.orig.get(e[0], {})  # born inside one of ours: its parent's origin
            self.orig[pid] = paths
        try:
            self.be.move(self.pid, name, pid)
            e[3] = name
        except OSError:
            pass  # it exited, or is a zombie

    def _ours(self, path):
        return f"/{CG_PREFIX}{self.pid}/" in path + "/"

    # -- per tick
    def tick(self, freqs_khz, fmax_khz, elapsed):
        """Place the node's processes, set the quotas for the fake clocks, and
        return (per real CPU: utilisation in fake-clock terms, ratio r, real CPU
        seconds the node used)."""
        ratios = [min(1.0, max(0.0, freqs_khz[j] / fmax_khz)) if j < len(freqs_khz) else 1.0
                  for j in range(self.nreal)]
        runnable = {}
        for pid in self._scan():
            self._place(pid)
            name = self.procs[pid][3]
            if name:  # every group with a process is a key of runnable
                runnable[name] = runnable.get(name, 0) + _runnable_threads(pid)
        used = [0.0] * self.nreal
        self.tree_used = {}  # tree pid -> real CPU seconds per real CPU, this tick
        empty = []
        speed = [self.full_speed * r for r in ratios]  # share of a real CPU
        for name, g in self.groups.items():
            cpus = sorted(g["cpus"])
            total = sum(speed[c] for c in cpus)
            # each runnable thread (at least one) runs at the mean speed of its CPUs, as
            # many in parallel as there are CPUs: one thread on two CPUs at r = 0.5 gets
            # half a CPU, not the group's whole capacity of one CPU
            threads = min(len(cpus), max(1, runnable.get(name, 0)))
            quota = None if total >= len(cpus) - 1e-9 else max(
                THROTTLE_MIN_QUOTA_US, int(round(total / len(cpus) * threads * self.period_us)))
            if quota != g["quota"]:
                with contextlib.suppress(OSError):
                    self.be.set_quota(self.pid, name, quota, self.period_us)
                    g["quota"] = quota
            try:
                u = self.be.usage_ns(self.pid, name)
            except (OSError, ValueError):
                continue
            du, g["usage_ns"] = max(0, u - g["usage_ns"]) / 1e9, u
            tree = self.tree_used.setdefault(int(name[1:name.index("-")]), [0.0] * self.nreal)
            for c in cpus:  # shared out in proportion to each CPU's capacity
                used[c] += du * (speed[c] / total if total > 0 else 1.0 / len(cpus))
                tree[c] += du * (speed[c] / total if total > 0 else 1.0 / len(cpus))
            if name not in runnable:
                empty.append(name)
        for name in empty:  # its usage is counted: remove it once its last process left
            with contextlib.suppress(OSError):
                self.be.remove_group(self.pid, name)
                del self.groups[name]
        utils = []
        cap = 2 * self.period_us / 1e6
        for j in range(self.nreal):
            # a task throttled to r of a CPU is fully busy on a CPU clocked at r; the
            # busy time it ran ahead within a period is shown over the next ticks
            self.pending[j] = min(self.pending[j] + used[j] / max(speed[j], 1e-3), cap + elapsed)
            u = min(1.0, max(0.0, self.pending[j] / elapsed)) if elapsed > 0 else 0.0
            self.pending[j] = max(0.0, self.pending[j] - u * elapsed)
            utils.append(u)
        return utils, ratios, used

    def stats(self):
        """{group: {"cpus", "quota_us", "period_us", "nr_periods", "nr_throttled", "usage_ns"}}."""
        out = {}
        for name, g in self.groups.items():
            with contextlib.suppress(OSError):
                nper, nthr = self.be.throttled(self.pid, name)
                out[name] = dict(cpus=sorted(g["cpus"]), quota_us=g["quota"], period_us=self.period_us,
                                 nr_periods=nper, nr_throttled=nthr,
                                 usage_ns=self.be.usage_ns(self.pid, name))
        return out

    def close(self):
        """Move the node's processes back where they were, remove every group."""
        if not self.started:
            return
        self.started = False
        for name in self.groups:
            for mnt in self.be.mounts():
                try:
                    procs = _read(os.path.join(self.be.top(mnt, self.pid), name, "cgroup.procs")).split()
                except OSError:
                    continue
                for p in procs:
                    rel = (self.orig.get(int(p)) or {}).get(mnt)
                    if rel is not None and not self._ours(rel):
                        with contextlib.suppress(OSError):
                            self.be.move_to(mnt, rel, int(p))
        self.be.remove_tree(self.pid)


# --------------------------------------------------------------------------
# serve

def _peer_cred(conn):
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


def handle_ctl_line(root, line, peer=None):
    """One control line -> reply text (JSON or 'error: ...'). Never raises."""
    try:
        parts = line.strip().split()
        if not parts or parts[0] != "advance" or len(parts) not in (2, 3):
            raise FakeHwError("expected `advance SECONDS [UTIL]` with SECONDS in (0, 3600], UTIL in [0, 1]")
        s = _check_seconds(parts[1], MAX_CTL_SECONDS)
        u = _check_util(parts[2]) if len(parts) == 3 else 1.0
        extra = {"peer_pid": peer[0], "peer_uid": peer[1]} if peer else None
        return json.dumps(advance(root, s, u, source="ctl", _limit=MAX_CTL_SECONDS, _extra=extra))
    except FakeHwError as e:
        return f"error: {e}"
    except Exception as e:  # the daemon must keep running whatever arrives
        return f"error: internal: {type(e).__name__}: {e}"


def _serve_conn(root, conn):
    conn.settimeout(2.0)
    try:
        peer = _peer_cred(conn)
        buf = b""
        while b"\n" not in buf and len(buf) <= MAX_LINE:
            chunk = conn.recv(MAX_LINE + 1)
            if not chunk:
                break
            buf += chunk
        if len(buf) > MAX_LINE and b"\n" not in buf[:MAX_LINE]:
            reply = f"error: line longer than {MAX_LINE} bytes"
        else:
            try:
                text = buf.split(b"\n", 1)[0].decode("ascii")
            except UnicodeDecodeError:
                text = None
            reply = "error: line is not ASCII" if text is None else handle_ctl_line(root, text, peer)
        conn.sendall((reply + "\n").encode())
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(0.5)
        drained = 0  # read what the client still sends, so closing does not reset it
        while drained < 65536:
            chunk = conn.recv(4096)
            if not chunk:
                break
            drained += len(chunk)
    except OSError:
        pass
    finally:
        conn.close()


def _make_socket(path):
    try:
        st = os.lstat(path)
        if not stat.S_ISSOCK(st.st_mode):
            raise FakeHwError(f"{path} exists and is not a socket; refusing to replace it")
        os.unlink(path)
    except FileNotFoundError:
        pass
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    old = os.umask(0o111)
    try:
        s.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o666)  # a job's unprivileged user drives the fake hardware
    s.listen(16)
    s.settimeout(0.2)
    return s


def serve(root, tick_ms=20.0, manual=False, ctl=None, pidfile=None, ready_fd=None,
          throttle_under=None, throttle_period_ms=THROTTLE_PERIOD_MS, throttle_fallback=False,
          throttle_full_speed=1.0):
    """Run the daemon until SIGTERM/SIGINT.

    throttle_under="NAME=VALUE" (live mode): the processes below those whose
    environment holds NAME=VALUE run at the fake clock's ratio of full speed
    (Throttle); utilisation then comes from their CPU time alone. When the
    host has no usable CPU bandwidth control this raises FakeHwError, unless
    throttle_fallback: then it warns and runs unthrottled (/proc/stat)."""
    root = os.path.abspath(root)
    with _locked(root):
        state = _load_state(root)
    if manual and not ctl:
        raise FakeHwError("--manual needs --ctl SOCKPATH")
    if not manual and not (0 < tick_ms <= 60000):
        raise FakeHwError("--tick-ms must be in (0, 60000]")
    if manual and throttle_under:
        raise FakeHwError("--throttle-under is for live mode (no --manual)")
    throttle = None
    if throttle_under:
        try:
            throttle = Throttle(throttle_under, len(read_proc_stat()), throttle_period_ms,
                                full_speed=throttle_full_speed)
        except FakeHwError as e:
            if not throttle_fallback:
                raise
            print(f"fakehw: WARNING: not throttling, the fake clock costs no time: {e}",
                  file=sys.stderr, flush=True)
    try:
        return _serve(root, state, tick_ms, manual, ctl, pidfile, ready_fd, throttle)
    finally:
        if throttle:
            throttle.close()


def _serve(root, state, tick_ms, manual, ctl, pidfile, ready_fd, throttle):
    stop = []

    def on_signal(signum, frame):
        stop.append(signum)  # loops notice within one tick / 0.2 s; never interrupt a write

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    sock = _make_socket(ctl) if ctl else None
    if pidfile:
        tmp = f"{pidfile}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
        finally:
            os.close(fd)
        os.replace(tmp, pidfile)  # rename replaces a symlink, never follows it
    mode = 'manual, ctl ' + ctl if manual else f'live, tick {tick_ms:g} ms'
    if throttle:
        mode += (f", throttling via {throttle.be.name}, period {throttle.period_us / 1000:g} ms, "
                 f"fmax = {throttle.full_speed:g} of a real CPU")
    print(f"fakehw: serving {root} ({mode})", file=sys.stderr, flush=True)
    if ready_fd is not None:
        os.write(ready_fd, b"ready\n")
        os.close(ready_fd)
    try:
        if manual:
            while not stop:
                try:
                    conn, _ = sock.accept()
                except socket.timeout:
                    continue
                _serve_conn(root, conn)
        else:
            nreal = len(read_proc_stat())
            prev = read_proc_stat()
            last = time.monotonic()
            period = tick_ms / 1000.0
            nxt = last + period
            while not stop:
                delay = nxt - time.monotonic()
                while delay > 0:  # wait for the tick, serving the socket if any
                    if sock and select.select([sock], [], [], delay)[0]:
                        with contextlib.suppress(socket.timeout, BlockingIOError):
                            conn, _ = sock.accept()
                            _serve_conn(root, conn)
                    elif not sock:
                        time.sleep(delay)
                    delay = nxt - time.monotonic()
                nxt += period
                now = time.monotonic()
                elapsed, last = now - last, now
                extra = None
                if throttle:
                    try:
                        real, ratios, used = throttle.tick(_speed_freqs(root, state),
                                                           state["fmax_khz"], elapsed)
                    except Exception as e:  # the daemon must keep running: this tick counts idle
                        print(f"fakehw: throttle tick failed: {type(e).__name__}: {e}",
                              file=sys.stderr, flush=True)
                        real, ratios, used = [0.0] * nreal, [], []
                    extra = {"throttle": {"ratio": ratios, "node_cpu_s": used,
                                          "tree_cpu_s": {str(t): v for t, v in
                                                         getattr(throttle, "tree_used", {}).items()}}}
                else:
                    cur = read_proc_stat()
                    real = utils_between(prev, cur)
                    prev = cur
                utils = [real[i % nreal] for i in range(state["ncpu"])]
                if now > nxt:  # fell behind (suspend, overload): do not burst
                    nxt = now + period
                try:
                    advance(root, elapsed, utils, source="tick", _extra=extra)
                except FakeHwError as e:
                    print(f"fakehw: tick skipped: {e}", file=sys.stderr, flush=True)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if sock:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(ctl)
        if pidfile:
            with contextlib.suppress(OSError):
                os.unlink(pidfile)
    return 0


def serve_background(root, tick_ms=20.0, manual=False, ctl=None, pidfile=None, python=None,
                     throttle_under=None, throttle_period_ms=None, throttle_fallback=False,
                     throttle_full_speed=None, stderr=None):
    """Start `serve` as a child process and return its Popen once it is ready
    (socket listening, cgroups made). Stop it with .terminate(); .wait().
    throttle_under="NAME=VALUE": see serve()."""
    r, w = os.pipe()
    cmd = [python or sys.executable, os.path.abspath(__file__), "serve", root,
           "--tick-ms", str(tick_ms), "--ready-fd", str(w)]
    if throttle_under:
        cmd += ["--throttle-under", throttle_under]
        if throttle_period_ms is not None:
            cmd += ["--throttle-period-ms", str(throttle_period_ms)]
        if throttle_full_speed is not None:
            cmd += ["--throttle-full-speed", str(throttle_full_speed)]
        if throttle_fallback:
            cmd.append("--throttle-fallback")
    if manual:
        cmd.append("--manual")
    if ctl:
        cmd += ["--ctl", ctl]
    if pidfile:
        cmd += ["--pidfile", pidfile]
    p = subprocess.Popen(cmd, pass_fds=(w,), stderr=stderr)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        ok = fh.readline()
    if ok != b"ready\n":
        p.wait()
        raise FakeHwError(f"fakehw serve failed to start (exit {p.returncode})")
    return p


def ctl_advance(sockpath, seconds, util=None, timeout=30.0):
    """Client for manual mode: returns the reply dict, raises FakeHwError on an error line."""
    line = f"advance {seconds}" + (f" {util}" if util is not None else "")
    reply = ctl_raw(sockpath, line, timeout)
    if reply.startswith("error"):
        raise FakeHwError(reply)
    return json.loads(reply)


def ctl_raw(sockpath, line, timeout=30.0):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as s:
        s.settimeout(timeout)
        s.connect(sockpath)
        s.sendall((line + "\n").encode())
        buf = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return buf.decode().strip()


# --------------------------------------------------------------------------
# nsexec: libpowercap hard-codes /sys/class/powercap

def nsexec(root, cmd, keep_class=True):
    """Run cmd where /sys/class/powercap shows the fake tree. Returns the exit status."""
    if os.geteuid() != 0:
        raise FakeHwError("nsexec needs root (it mounts in a private mount namespace)")
    if not cmd:
        raise FakeHwError("nsexec needs a command after --")
    root = os.path.abspath(root)
    if not os.path.isdir(os.path.join(root, "devices/virtual/powercap/intel-rapl")):
        raise FakeHwError(f"{root} is not a fakehw tree")
    inner = [sys.executable, os.path.abspath(__file__), "_nsinner", root]
    if not keep_class:
        inner.append("--bare")
    return subprocess.call(["unshare", "-m", "--propagation", "private", "--"] + inner + ["--"] + list(cmd))


def _run(*args):
    subprocess.run(list(args), check=True)


def _nsinner(root, cmd, bare):
    pc = os.path.join(root, "devices/virtual/powercap")
    keep = [] if bare else sorted(os.listdir("/sys/class"))
    stage = tempfile.mkdtemp(prefix="fakehw-ns-")
    try:
        if keep:
            _run("mount", "--bind", "/sys/class", stage)
        _run("mount", "-t", "tmpfs", "-o", "mode=755,nosuid,nodev", "fakehw", "/sys/class")
        for name in keep:
            if name == "powercap":
                continue
            os.mkdir(os.path.join("/sys/class", name))
            _run("mount", "--bind", os.path.join(stage, name), os.path.join("/sys/class", name))
        if keep:
            _run("umount", stage)
    finally:
        os.rmdir(stage)
    cls = "/sys/class/powercap"
    os.mkdir(cls)
    for ct in ("intel-rapl", "intel-rapl-mmio"):
        src = os.path.join(pc, ct)
        if os.path.isdir(src):
            os.mkdir(os.path.join(cls, ct))
            _run("mount", "--bind", src, os.path.join(cls, ct))
            # flat entries as the kernel has them, pointing into the bind mount
            for dirpath, dirnames, _ in os.walk(os.path.join(cls, ct)):
                for d in dirnames:
                    if d.startswith(ct + ":"):
                        os.symlink(os.path.relpath(os.path.join(dirpath, d), cls), os.path.join(cls, d))
    os.execvp(cmd[0], cmd)


# --------------------------------------------------------------------------
# CLI

def _parse_model(items):
    out = {}
    for it in items or []:
        k, sep, v = it.partition("=")
        if not sep:
            raise FakeHwError(f"--param wants NAME=VALUE, got {it!r}")
        try:
            out[k] = float(v)
        except ValueError:
            raise FakeHwError(f"--param {k}: {v!r} is not a number")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="fakehw.py", description="Fake RAPL/cpufreq sysfs tree for joulestep tests")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("create", help="build a fake sysfs tree")
    c.add_argument("root")
    c.add_argument("--variant", choices=("acpi", "pstate"), default="acpi")
    c.add_argument("--packages", type=int, default=2)
    c.add_argument("--cpus-per-package", type=int, default=2)
    c.add_argument("--no-dram", action="store_true")
    c.add_argument("--multi-die", action="store_true", help="2 dies per package (package-N-die-M zones)")
    c.add_argument("--dies", type=int, help="dies per package (implies --multi-die when > 1)")
    c.add_argument("--fmax-khz", type=int, default=2400000)
    c.add_argument("--fmin-khz", type=int, default=800000)
    c.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="model parameter: " + ", ".join(DEFAULT_MODEL))
    c.add_argument("--initial-uj", type=int, help="initial value of every counter")
    c.add_argument("--cpus-per-policy", type=int, default=1,
                   help="CPUs sharing one cpufreq policy (related_cpus), default 1")
    c.add_argument("--base-khz", type=int, help="pstate: nominal clock, exposed as base_frequency")
    c.add_argument("--acpi-turbo", action="store_true",
                   help="acpi: boost entry fmax+1000 kHz on top of the available frequencies")
    c.add_argument("--uncore", choices=("classic", "tpmi"),
                   help="intel_uncore_frequency: package_XX_die_YY (classic) or uncoreNN (tpmi)")
    c.add_argument("--uncore-min-khz", type=int, default=800000)
    c.add_argument("--uncore-max-khz", type=int, default=2400000)
    c.add_argument("--vendor", choices=("intel", "amd"), default="intel",
                   help="amd: package and core zones only (no dram, psys, mmio)")
    c.add_argument("--amd-energy", action="store_true",
                   help="amd: the amd_energy hwmon driver (Ecore*/Esocket* counters)")
    c.add_argument("--pm-counters", action="store_true",
                   help="HPE/Cray cray/pm_counters (node, cpu, memory, accelN energy)")
    c.add_argument("--accels", type=int, default=1, help="pm_counters accelerators (default 1)")
    c.add_argument("--grace", action="store_true",
                   help="NVIDIA Grace hwmon power sensors (Module, CPU, SysIO per socket)")
    a = sub.add_parser("advance", help="advance counters by the model (deterministic mode)")
    a.add_argument("root")
    a.add_argument("--seconds", required=True)
    g = a.add_mutually_exclusive_group()
    g.add_argument("--util", default="1.0")
    g.add_argument("--util-list", help="comma list, one per fake CPU")
    n = sub.add_parser("near-wrap", help="put a counter just below its wrap point")
    n.add_argument("root")
    n.add_argument("--zone", required=True)
    n.add_argument("--headroom-uj", type=int, default=1000000)
    sc = sub.add_parser("set-counter", help="set a counter (not counted as energy): a reset")
    sc.add_argument("root")
    sc.add_argument("--zone", required=True)
    sc.add_argument("--value-uj", type=int, required=True)
    sub.add_parser("pm-reset", help="pm_counters restart: counters to 0, new generation") \
        .add_argument("root")
    rz = sub.add_parser("remove-zone", help="CPU hotplug: a package and its zones go away")
    rz.add_argument("root")
    rz.add_argument("--zone", required=True, help="top-level zone, e.g. intel-rapl:1")
    t = sub.add_parser("truth", help="cumulative ground truth per zone")
    t.add_argument("root")
    t.add_argument("--log", action="store_true", help="print the truth log (JSON lines) instead")
    s = sub.add_parser("serve", help="daemon: live (ticks from /proc/stat) or manual (control socket)")
    s.add_argument("root")
    s.add_argument("--tick-ms", type=float, default=20.0)
    s.add_argument("--manual", action="store_true")
    s.add_argument("--ctl", metavar="SOCKPATH")
    s.add_argument("--pidfile")
    s.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    s.add_argument("--daemonize", action="store_true", help="fork to background once ready")
    s.add_argument("--throttle-under", metavar="NAME=VALUE",
                   help="live mode: run the processes below those whose environment holds NAME=VALUE "
                        "at the fake clock's ratio of full speed (cgroup CPU bandwidth; root)")
    s.add_argument("--throttle-period-ms", type=float, default=THROTTLE_PERIOD_MS,
                   help=f"CPU bandwidth period (default {THROTTLE_PERIOD_MS:g})")
    s.add_argument("--throttle-full-speed", type=float, default=1.0,
                   help="share of a real CPU a fake CPU at fmax gets (default 1; below 1 leaves "
                        "room for the host's other load, so that timings stay clean)")
    s.add_argument("--throttle-fallback", action="store_true",
                   help="without a usable CPU bandwidth control, warn and run unthrottled "
                        "instead of failing")
    s.add_argument("--no-throttle", action="store_true",
                   help="ignore --throttle-under (the fake clock costs no time)")
    k = sub.add_parser("ctl", help="client for serve --manual")
    k.add_argument("sockpath")
    k.add_argument("verb", choices=("advance",))
    k.add_argument("seconds")
    k.add_argument("--util")
    e = sub.add_parser("nsexec", help="run CMD with /sys/class/powercap showing the fake tree (root)")
    e.add_argument("root")
    e.add_argument("--bare", action="store_true", help="empty /sys/class apart from powercap")
    e.add_argument("command", nargs=argparse.REMAINDER)
    i = sub.add_parser("_nsinner")
    i.add_argument("root")
    i.add_argument("--bare", action="store_true")
    i.add_argument("command", nargs=argparse.REMAINDER)
    r = sub.add_parser("read-cpufreq", help="print a CPU's cpufreq files and effective frequency")
    r.add_argument("root")
    r.add_argument("cpu", type=int)

    args = ap.parse_args(argv)
    try:
        if args.cmd == "create":
            create(args.root, variant=args.variant, packages=args.packages,
                   cpus_per_package=args.cpus_per_package, dram=not args.no_dram,
                   multi_die=args.multi_die or (args.dies or 1) > 1, dies=args.dies,
                   fmax_khz=args.fmax_khz, fmin_khz=args.fmin_khz,
                   model=_parse_model(args.param), initial_uj=args.initial_uj,
                   cpus_per_policy=args.cpus_per_policy, base_khz=args.base_khz,
                   acpi_turbo=args.acpi_turbo, vendor=args.vendor,
                   amd_energy=args.amd_energy, pm_counters=args.pm_counters,
                   accels=args.accels, grace=args.grace, uncore=args.uncore,
                   uncore_min_khz=args.uncore_min_khz, uncore_max_khz=args.uncore_max_khz)
        elif args.cmd == "advance":
            util = args.util_list.split(",") if args.util_list else args.util
            print(json.dumps(advance(args.root, args.seconds, util)))
        elif args.cmd == "pm-reset":
            pm_reset(args.root)
        elif args.cmd == "near-wrap":
            near_wrap(args.root, args.zone, args.headroom_uj)
        elif args.cmd == "set-counter":
            set_counter(args.root, args.zone, args.value_uj)
        elif args.cmd == "remove-zone":
            print(" ".join(remove_zone(args.root, args.zone)))
        elif args.cmd == "truth":
            if args.log:
                for entry in truth_log(args.root):
                    print(json.dumps(entry, sort_keys=True))
            else:
                print(json.dumps(truth(args.root)))
        elif args.cmd == "serve":
            ready_fd = args.ready_fd
            if args.daemonize:
                rfd, ready_fd = os.pipe()
                if os.fork():
                    os.close(ready_fd)
                    ok = os.read(rfd, 16)
                    return 0 if ok == b"ready\n" else 1
                os.close(rfd)
                os.setsid()
                devnull = os.open(os.devnull, os.O_RDWR)
                os.dup2(devnull, 0)
                os.dup2(devnull, 1)
            return serve(args.root, args.tick_ms, args.manual, args.ctl, args.pidfile, ready_fd,
                         None if args.no_throttle else args.throttle_under, args.throttle_period_ms,
                         args.throttle_fallback, args.throttle_full_speed)
        elif args.cmd == "ctl":
            reply = ctl_raw(args.sockpath, f"advance {args.seconds}" +
                            (f" {args.util}" if args.util is not None else ""))
            if reply.startswith("error"):
                print(reply, file=sys.stderr)
                return 2
            print(reply)
        elif args.cmd in ("nsexec", "_nsinner"):
            cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
            if args.cmd == "nsexec":
                return nsexec(args.root, cmd, keep_class=not args.bare)
            _nsinner(args.root, cmd, args.bare)
        elif args.cmd == "read-cpufreq":
            print(json.dumps(read_cpufreq(args.root, args.cpu)))
    except FakeHwError as ex:
        print(f"fakehw: {ex}", file=sys.stderr)
        return 2
    except OSError as ex:
        if ex.errno == errno.EPIPE:
            return 1
        print(f"fakehw: {ex}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
