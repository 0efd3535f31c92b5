"""`joulestep doctor`: what a node can measure and control, read straight
from a sysfs tree (default /sys; tests point it at tests/fakehw trees).

Zone rules follow the accounting library (docs): zones are identified by
their `name` file; package-N / package-N-die-M and dram are counted; psys,
core and uncore are not (core/uncore are inside a package); the
intel-rapl-mmio control type duplicates intel-rapl:0 and is skipped.
"""
from __future__ import annotations

import os
import pathlib
import re

PKG = re.compile(r"^package-\d+(-die-\d+)?$")


def _read(p: pathlib.Path):
    try:
        return p.read_text().strip(), None
    except OSError as e:
        return None, e.strerror or str(e)


def zones(root: pathlib.Path) -> list[dict]:
    base = root / "class" / "powercap"
    out = []
    if not base.is_dir():
        return out
    for entry in sorted(base.iterdir()):
        name_f = entry / "name"
        if not name_f.exists():
            continue  # a control type (intel-rapl), not a zone
        name, _ = _read(name_f)
        z = {"id": entry.name, "name": name, "kind": None, "counted": False,
             "reason": None,
             "readable": False, "error": None, "max_energy_range_uj": None,
             "max_power_uw": None, "wrap_period_s": None}
        if entry.name.startswith("intel-rapl-mmio"):
            z["reason"] = "mmio duplicate"
        elif name and PKG.match(name):
            z["counted"], z["kind"] = True, "package"
        elif name == "dram":
            z["counted"], z["kind"] = True, "dram"
        elif name in ("core", "uncore"):
            z["reason"] = "inside its package"
        elif name == "psys":
            z["reason"] = "platform, overlaps"
        else:
            z["reason"] = f"unknown name"
        v, err = _read(entry / "energy_uj")
        z["readable"] = v is not None and v.isdigit()
        if err:
            z["error"] = err
        rng, _ = _read(entry / "max_energy_range_uj")
        if rng and rng.isdigit():
            z["max_energy_range_uj"] = int(rng)
        mp = None
        for c in sorted(entry.glob("constraint_*_max_power_uw")):
            v, _ = _read(c)
            if v and v.isdigit() and int(v) > 0:
                mp = max(mp or 0, int(v))
        z["max_power_uw"] = mp
        if mp and z["max_energy_range_uj"]:
            z["wrap_period_s"] = z["max_energy_range_uj"] / mp
        out.append(z)
    return out


def cpufreq(root: pathlib.Path) -> dict:
    cpus = sorted((p for p in (root / "devices" / "system" / "cpu").glob("cpu[0-9]*")),
                  key=lambda p: int(p.name[3:]))
    drivers, govs, cur, avail = set(), set(), set(), None
    fmin = fmax = None
    n = 0
    writable = True
    for c in cpus:
        d = c / "cpufreq"
        if not d.is_dir():
            continue
        n += 1
        v, _ = _read(d / "scaling_driver")
        if v:
            drivers.add(v)
        v, _ = _read(d / "scaling_available_governors")
        if v:
            govs.update(v.split())
        v, _ = _read(d / "scaling_governor")
        if v:
            cur.add(v)
        v, _ = _read(d / "cpuinfo_min_freq")
        if v and v.isdigit():
            fmin = int(v) if fmin is None else min(fmin, int(v))
        v, _ = _read(d / "cpuinfo_max_freq")
        if v and v.isdigit():
            fmax = int(v) if fmax is None else max(fmax, int(v))
        if avail is None:
            v, _ = _read(d / "scaling_available_frequencies")
            if v:
                avail = sorted({int(x) for x in v.split() if x.isdigit()})
        if not os.access(d / "scaling_max_freq", os.W_OK):
            writable = False
    return {"cpus": n, "drivers": sorted(drivers), "governors": sorted(govs),
            "current_governors": sorted(cur), "cpuinfo_min_khz": fmin,
            "cpuinfo_max_khz": fmax, "available_khz": avail or [],
            "control": ("userspace governor + scaling_setspeed"
                        if "userspace" in govs else "cap scaling_max_freq")
            if n else None,
            "writable_by_this_user": bool(n) and writable}


def write_test(root: pathlib.Path, cpu: int = 0) -> dict:
    """Write a lower scaling_max_freq on one CPU, read it back, restore it.
    Root only (the caller checks).  Returns what happened."""
    d = root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "cpufreq"
    f = d / "scaling_max_freq"
    orig, err = _read(f)
    if orig is None:
        return {"cpu": cpu, "ok": False, "detail": f"cannot read {f}: {err}"}
    lo, _ = _read(d / "cpuinfo_min_freq")
    av, _ = _read(d / "scaling_available_frequencies")
    steps = sorted(int(x) for x in (av or "").split() if x.isdigit())
    lower = [s for s in steps if s < int(orig)]
    target = lower[len(lower) // 2] if lower else int(lo or orig)
    res = {"cpu": cpu, "original_khz": int(orig), "written_khz": target}
    try:
        try:
            f.write_text(f"{target}\n")
        except OSError as e:
            res.update(ok=False, detail=f"write refused: {e.strerror}")
            return res
        back, _ = _read(f)
        res["read_back_khz"] = int(back) if back and back.isdigit() else None
        res["ok"] = res["read_back_khz"] == target
        res["detail"] = ("the written frequency sticks" if res["ok"] else
                         f"the driver kept {back} kHz: frequency control will "
                         "not take effect")
    finally:
        try:
            f.write_text(f"{orig}\n")
        except OSError as e:
            res["restore_error"] = e.strerror
        now, _ = _read(f)
        res["restored"] = now == orig
    return res


#: where the packages and `make install` put the plugin, in Slurm's plugin
#: directory: Debian (debian/joulestep-spank.install), RHEL
#: (packaging/rpm/joulestep.spec: %{_libdir}/slurm), make install
#: ($(LIBDIR)/slurm)
PLUGIN_DIRS = ("usr/lib/*/slurm-wlm", "usr/lib64/slurm", "usr/lib/slurm",
               "usr/local/lib/slurm")


def plugin_path(root: str | os.PathLike = "/") -> str | None:
    """The installed joulestep.so (as an absolute path below ``root``), or
    None when none of PLUGIN_DIRS has it."""
    base = pathlib.Path(root)
    for pat in PLUGIN_DIRS:
        for d in sorted(base.glob(pat)):
            if (d / "joulestep.so").is_file():
                return "/" + str((d / "joulestep.so").relative_to(base))
    return None


def plugstack_line(root: pathlib.Path, zl: list[dict], libdir: str | None,
                   meas: dict | None = None) -> str:
    """The plugstack.conf line for this node: accepted by the plugin's own
    parser (tests/cli/test_doctor*.py run it through
    joulestep-plugstack-check), and right for the node (node_measures):
    the backend= that reads its CPU energy (none where nothing does: the
    default, never one that measures nothing there), node_energy= for its
    node meter, gpu_backend= for its GPUs.  libdir None: the installed
    plugin (plugin_path), else its bare name, which Slurm looks up in
    PluginDir."""
    if meas is None:
        meas = node_measures(root, zl)
    if libdir:
        plugin = f"{libdir.rstrip('/')}/joulestep.so"
    else:
        plugin = plugin_path() or "joulestep.so"
    args = [plugin, "spool=/var/spool/joulestep", "state=/var/lib/joulestep"]
    fake = str(root) != "/sys"
    if fake:
        args.append(f"sysfs={root}")
    backend = meas["backend"]
    if backend == "powercap,sysfs" and fake:
        backend = "sysfs"       # libpowercap reads /sys itself: a fake tree needs sysfs
    elif backend is None and not fake and not meas["node_meter"] and not meas["gpus"]:
        backend = "powercap,sysfs"      # /sys read by another user: the default
    if backend:
        args.append(f"backend={backend}")
    if meas["node_meter"]:
        args.append(f"node_energy={meas['node_meter']['source']}")
    if meas["gpus"]:
        args.append(f"gpu_backend={meas['gpus']['backend']}")
    args.append("default_policy=monitor")
    return "optional " + " ".join(args)


AMD_LABEL = re.compile(r"^E(socket|core)(\d+)$")


def amd_energy(root: pathlib.Path) -> dict | None:
    """The amd_energy hwmon driver's counters ({"hwmon", "sockets", "cores",
    "readable"}), or None without it. Only the socket counters are counted
    (the accounting library's amd_energy backend): a core's is inside its
    socket's."""
    base = root / "class" / "hwmon"
    if not base.is_dir():
        return None
    for h in sorted(base.iterdir()):
        name, _ = _read(h / "name")
        if name != "amd_energy":
            continue
        socks, cores, readable = [], 0, True
        for lab in sorted(h.glob("energy*_label")):
            text, _ = _read(lab)
            m = AMD_LABEL.match(text or "")
            if not m:
                continue
            if m.group(1) == "core":
                cores += 1
                continue
            socks.append(int(m.group(2)))
            v, _ = _read(h / lab.name.replace("_label", "_input"))
            readable = readable and v is not None and v.isdigit()
        return {"hwmon": h.name, "sockets": sorted(socks), "cores": cores,
                "readable": readable}
    return None


GRACE_LABEL = re.compile(r"^(Module|CPU|SysIO|Grace) Power Socket (\d+)$")


def node_meter(root: pathlib.Path) -> dict | None:
    """The node's own meter beside RAPL, as the accounting library finds it
    (joulestep/node.h; plugstack node_energy=): pm_counters (its `energy`
    is the node) or Grace hwmon power sensors (one Module per socket is the
    node); None without either."""
    pm = root / "cray" / "pm_counters"
    if pm.is_dir():
        files = sorted(p.name for p in pm.iterdir() if p.name == "energy" or
                       re.fullmatch(r"(cpu|memory|accel\d+)_energy", p.name))
        if files:
            return {"source": "pm_counters", "channels": files,
                    "total": "energy" if "energy" in files else None}
    base = root / "class" / "hwmon"
    labels = []
    if base.is_dir():
        for h in sorted(base.iterdir()):
            text, _ = _read(h / "power1_oem_info")
            if text and GRACE_LABEL.match(text):
                labels.append(text)
    if not labels:
        return None
    socks = {GRACE_LABEL.match(t).group(2) for t in labels}
    mods = sorted(t for t in labels if t.startswith("Module"))
    return {"source": "hwmon", "channels": labels,
            "total": "+".join(mods) if len(mods) == len(socks) else None}


#: PCI driver -> (vendor, the plugin's gpu_backend=) (docs/design.md, "GPUs in
#: the plugin")
GPU_DRIVERS = {"nvidia": ("nvidia", "nvml"), "amdgpu": ("amd", "amdsmi")}
_PCI_ADDR = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


def gpus(root: pathlib.Path) -> dict | None:
    """The node's GPUs, as the PCI devices bound to the nvidia or amdgpu
    driver ({"vendor", "driver", "count", "backend"}: the gpu_backend= that
    reads them); None without any."""
    for drv, (vendor, backend) in GPU_DRIVERS.items():
        d = root / "bus" / "pci" / "drivers" / drv
        try:
            n = sum(1 for p in d.iterdir() if _PCI_ADDR.fullmatch(p.name))
        except OSError:
            continue
        if n:
            return {"vendor": vendor, "driver": drv, "count": n, "backend": backend}
    return None


UNCORE_DIR = "devices/system/cpu/intel_uncore_frequency"
_CLASSIC = re.compile(r"package_\d+_die_\d+")
_TPMI = re.compile(r"uncore\d+")


def uncore(root: pathlib.Path) -> dict | None:
    """The Intel uncore clock domains +uncore-io can cap (the plugin's rule,
    accounting/src/uncore.c: TPMI uncoreNN where there are any, else
    package_XX_die_YY): {"layout", "domains"}; None without the driver."""
    d = root / UNCORE_DIR
    try:
        names = sorted(p.name for p in d.iterdir()
                       if (p / "max_freq_khz").is_file())
    except OSError:
        return None
    tpmi = [n for n in names if _TPMI.fullmatch(n)]
    classic = [n for n in names if _CLASSIC.fullmatch(n)]
    if tpmi:
        return {"layout": "tpmi", "domains": tpmi}
    return {"layout": "classic", "domains": classic} if classic else None


def node_measures(root: pathlib.Path, zl: list[dict]) -> dict:
    """What the node can measure, and from which source: CPU (package
    energy: RAPL powercap zones, else amd_energy) and DRAM (measured only
    with a dram zone for every package; else "not measured", null in the
    records, never 0), with the backend= plugstack value that reads it."""
    counted = [z for z in zl if z["counted"]]
    pk = [z for z in counted if z["kind"] == "package"]
    dr = [z for z in counted if z["kind"] == "dram"]
    amd = amd_energy(root)
    out = {"amd_energy": amd, "cpu": None, "cpu_source": None, "dram": None,
           "dram_not_measured": None, "backend": None, "node_meter": node_meter(root),
           "uncore": uncore(root), "gpus": gpus(root)}
    if pk:
        out["cpu_source"] = f"RAPL powercap, {len(pk)} package zone(s)"
        out["backend"] = "powercap,sysfs"
    elif amd and amd["sockets"]:
        out["cpu_source"] = (f"amd_energy hwmon, {len(amd['sockets'])} socket counter(s) "
                             f"({amd['cores']} per-core counters not added)")
        out["backend"] = "amd_energy"
    out["cpu"] = "measured" if out["cpu_source"] else "not measured"
    if pk and len(dr) == len(pk):
        out["dram"] = "measured"
    else:
        out["dram"] = "not measured"
        out["dram_not_measured"] = (
            "no CPU energy source" if not out["cpu_source"] else
            "no dram zone: the energy source gives package energy only"
            + (" (AMD)" if amd or not any(z["name"] == "psys" for z in zl) else ""))
    # the plugin runs on without CPU energy: its node meter and GPUs still count
    out["measurable"] = bool(out["cpu_source"] or (out["node_meter"] or {}).get("total")
                             or out["gpus"])
    return out


def diagnose(root: str = "/sys", do_write: bool = False,
             libdir: str | None = None) -> dict:
    r = pathlib.Path(os.path.abspath(root))
    zl = zones(r)
    cf = cpufreq(r)
    counted = [z for z in zl if z["counted"]]
    problems = []
    meas = node_measures(r, zl)
    if not meas["measurable"]:
        problems.append("nothing can be measured: no RAPL package zone, no amd_energy "
                        "socket counter, no node meter (pm_counters, Grace hwmon), no GPU")
    elif not counted and not meas["cpu_source"]:
        problems.append("no RAPL package zone and no amd_energy: CPU energy cannot be "
                        "measured (the node meter and GPUs still are)")
    elif not all(z["readable"] for z in counted):
        problems.append("energy_uj is not readable by this user (root-only since "
                        "the PLATYPUS fix); slurmstepd runs as root, so the "
                        "plugin still can")
    if not any(z["kind"] == "dram" for z in counted if "kind" in z):
        problems.append("no dram zone: DRAM energy will be reported as absent")
    if not cf["cpus"]:
        problems.append("no cpufreq: frequency policies will only monitor")
    wt = None
    if do_write:
        if os.geteuid() != 0:
            wt = {"ok": False, "detail": "--write-test needs root"}
        elif not cf["cpus"]:
            wt = {"ok": False, "detail": "no cpufreq directory"}
        else:
            wt = write_test(r)
        if not wt.get("ok"):
            problems.append(f"write test: {wt['detail']}")
    wraps = [z["wrap_period_s"] for z in counted if z["wrap_period_s"]]
    if not counted and meas["cpu_source"]:    # amd_energy only
        problems.insert(0, f"no RAPL zone; CPU energy from {meas['cpu_source']}: "
                        "set backend=amd_energy")
    return {"sysfs": str(r), "zones": zl, "measures": meas,
            "counted": {"package": sum(1 for z in counted if z.get("kind") == "package"),
                        "dram": sum(1 for z in counted if z.get("kind") == "dram")},
            "min_wrap_period_s": min(wraps) if wraps else None,
            "cpufreq": cf, "write_test": wt, "problems": problems,
            "plugstack": plugstack_line(r, zl, libdir, meas)}


def node_line_problems(node: dict, meas: dict) -> list[str]:
    """`doctor --node`: what the node's accepted plugstack lines get wrong
    for this node: nothing measurable at all, or a backend= list without
    the backend that reads its CPU energy (amd_energy on a node without
    RAPL zones: powercap and sysfs measure nothing there)."""
    out = []
    if not meas["measurable"]:
        out.append("nothing can be measured on this node (no RAPL, amd_energy, node "
                   "meter or GPU): every job runs unmeasured")
    want = meas["backend"]
    for d in node["lines"]:
        if not d.get("accepted") or not want:
            continue
        kv = dict(a.split("=", 1) for a in d["args"] if "=" in a)
        have = kv.get("backend", "powercap,sysfs").split(",")
        if not set(want.split(",")) & set(have):
            out.append(f"{d['file']}:{d['line']}: backend={','.join(have)} measures "
                       f"nothing here ({meas['cpu_source']}): set backend={want}")
    return out


def records_lost(c) -> int | None:
    """Records the plugin could not write, as ingested into the database
    (lost.py); None when there is no readable database."""
    from .store import lost
    return _from_store(c, lost.count)


def step_conflicts(c) -> int | None:
    """Copies of stored steps that differed from them (quarantined at
    ingest; store.conflict_count); None when there is no readable database."""
    from . import store
    return _from_store(c, store.conflict_count)


def _from_store(c, ask):
    from . import store
    try:
        path = c.db_path(False)
        if not store.db.is_url(path) and not os.path.exists(path):
            return None
        conn = store.connect(path, write=False, create=False)
    except Exception:  # noqa: BLE001 - doctor reports the node even without a database
        return None
    try:
        return ask(conn)
    finally:
        conn.close()
