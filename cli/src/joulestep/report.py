"""The figures behind `joulestep job` and `joulestep report` (plain
functions): energy, power, cost and savings from the store's counters, the
times of a period, and `report`'s sums per group (loaded by
store/read_report.py).  `joulestep job`'s summary is jobsummary.py."""
from __future__ import annotations

import datetime as dt
import re
import time

from . import gpus as gpumod
from . import gridfigures  # CO2 and cost over time
from . import nesting
from .config import Settings
from .store import lost, read_report, read_sharing
from .store.read_report import QueryError  # noqa: F401  (callers catch report.QueryError)

GIB = float(1 << 30)


# --------------------------------------------------------------------------
# derived figures

def derive(cpu_uj, dram_uj, dur_ns, nbytes, settings: Settings,
           node_ns=None) -> dict:
    """Energy/power/throughput/cost figures from raw counters.  All keys are
    always present; a figure that cannot be computed (e.g. energy not
    measured: cpu_uj None) is None.  kWh, CO2 and cost have the site's
    scope (Settings.scoped_j): RAPL CPU + DRAM, or a node estimate over
    node_ns node-seconds (default dur_ns: one record is one node)."""
    dur = dur_ns / 1e9
    gib = None if nbytes is None else nbytes / GIB
    if cpu_uj is None:
        return {"duration_s": dur, "energy_cpu_j": None, "energy_dram_j": None,
                "energy_total_j": None, "avg_power_w": None, "bytes": nbytes,
                "gib_per_s": gib / dur if gib is not None and dur > 0 else None,
                "j_per_gib": None, "kwh": None, "co2_g": None, "cost": None}
    cpu = cpu_uj / 1e6
    dram = None if dram_uj is None else dram_uj / 1e6
    total = cpu + (dram or 0.0)
    kwh = settings.scoped_j(total, (dur_ns if node_ns is None else node_ns) / 1e9) / 3.6e6
    return {
        "duration_s": dur,
        "energy_cpu_j": cpu,
        "energy_dram_j": dram,
        "energy_total_j": total,
        "avg_power_w": total / dur if dur > 0 else None,
        "bytes": nbytes,
        "gib_per_s": gib / dur if gib is not None and dur > 0 else None,
        "j_per_gib": total / gib if gib else None,
        "kwh": kwh,
        "co2_g": kwh * settings.co2_g_per_kwh,
        "cost": kwh * settings.price_per_kwh,
    }


def add_gpu(d: dict, gpu_j, settings: Settings) -> dict:
    """One line's figures (a derive() dict) with its GPUs' energy in them:
    gpu_j (J, None: not in the line's total) is added to the total, and
    power, J/GiB, kWh, CO2 and cost are of that total, so that every figure
    on the line covers the same parts.  The site's scope (Settings.scoped_j)
    applies to the RAPL part; the GPUs' own energy is added as measured."""
    d["energy_gpu_j"] = gpu_j
    if gpu_j is None or d["energy_total_j"] is None:
        return d
    total = d["energy_total_j"] = d["energy_total_j"] + gpu_j
    dur, nbytes = d["duration_s"], d.get("bytes")
    d["avg_power_w"] = total / dur if dur > 0 else None
    if "j_per_gib" in d:
        d["j_per_gib"] = total / (nbytes / GIB) if nbytes else None
    d["kwh"] += gpu_j / 3.6e6
    d["co2_g"] = d["kwh"] * settings.co2_g_per_kwh
    d["cost"] = d["kwh"] * settings.price_per_kwh
    return d


def power_ratio(model: dict, f_khz: float) -> float:
    """Model power at f, scaled by power at fmax: a*f^b + c, f in GHz."""
    return model["a"] * (f_khz / 1e6) ** model["b"] + model["c"]


def time_ratio(model: dict, f_khz: float) -> float:
    a = model.get("slowdown_alpha")
    if a is None:
        return 1.0
    return a * model["fmax_khz"] / f_khz + (1.0 - a)


def find_model(models: dict, node_model, kind):
    for key in ((node_model, kind), (node_model, "*"), ("*", kind), ("*", "*")):
        if key in models:
            return key, models[key]
    return None, None


def estimate_saving(cpu_uj, dram_uj, freq_khz, base_khz, node_model, kind,
                    models: dict) -> dict:
    """Saving of running at freq_khz instead of base_khz.

    `model dvfs` fits P(f) on CPU + DRAM power (models.sweep_samples), so the
    ratio applies to the same energy: E_base = (E_cpu + E_dram) *
    P(base)/P(f) * T(base)/T(f).  saving_basis says which energy that was
    ("cpu+dram", or "cpu" without a DRAM zone).  Without a slowdown term the
    duration is taken as unchanged (an upper bound on the saving for
    compute-bound phases; the status says so).
    """
    out = {"saving_status": None, "saving_j": None, "saving_pct": None,
           "saving_model": None, "saving_basis": None}
    if cpu_uj is None:
        return {**out, "saving_status": "not measured"}
    if freq_khz is None or base_khz is None or freq_khz >= base_khz:
        return {**out, "saving_status": "base clock"}
    key, m = find_model(models, node_model, kind)
    if m is None:
        return {**out, "saving_status": "not estimated"}
    rt = time_ratio(m, base_khz) / time_ratio(m, freq_khz)
    rp = power_ratio(m, base_khz) / power_ratio(m, freq_khz)
    measured = (cpu_uj + (dram_uj or 0)) / 1e6
    base = measured * rp * rt
    saving = base - measured
    return {"saving_status": "estimated" if m.get("slowdown_alpha") is not None
            else "estimated (same duration assumed)",
            "saving_j": saving,
            "saving_pct": 100.0 * saving / base if base > 0 else None,
            "saving_model": f"{key[0]}/{key[1]}",
            "saving_basis": "cpu" if dram_uj is None else "cpu+dram"}


# --------------------------------------------------------------------------
# the clock a step is compared with

def reference_clock(policy, base, nominal, fixed, freq_control) -> dict:
    """The clock a step ran at between phases (run_khz) and the clock its
    saving is measured against (ref_khz, named by ref_name): the original
    clock (base_freq_khz, what the step found), else the nominal one.
    Under fixed:R the step ran at fixed_freq_khz; records of plugins before
    issue 8 (no freq_control) had R x fmax in base_freq_khz and no original
    clock: then ref_khz is None and why says so."""
    out = {"run_khz": base, "ref_khz": base, "ref_name": "original clock",
           "why": None}
    if base is None and nominal is not None:
        out.update(run_khz=nominal, ref_khz=nominal, ref_name="nominal clock")
    if not (policy or "").startswith("fixed:"):
        return out
    if fixed is not None:
        out["run_khz"] = fixed
    elif freq_control is None:
        out.update(ref_khz=None, why="original clock not recorded (record of "
                   "a plugin before 0.2: base_freq_khz was R x fmax)")
    if out["ref_khz"] is None and out["why"] is None:
        out["why"] = "original clock not recorded (no cpufreq)"
    return out


def phase_counts(phases: list) -> dict:
    """seq -> nesting.Counted for the phases (nesting.Phase, key = seq) of
    one record: what each adds to a sum over them (nesting.count_phases: a
    phase inside another is part of its measurement, so the enclosing one
    counts the rest).  The one rule job, the saving estimates and the
    what-if estimates count phases by (analysis.counted_phases applies it
    to frames)."""
    return {seq: c for seq, (c, _) in nesting.count_phases(phases).items()}


def _j(uj):
    return None if uj is None else uj / 1e6


def _phase_clock(pr, clk: dict) -> tuple:
    """(the clock a phase row ran at, whether it is below the reference)."""
    f = pr[7] if pr[7] is not None else clk["run_khz"]
    ref = clk["ref_khz"]
    return f, f is not None and ref is not None and f < ref


def _phase_row(pr, c, clk: dict, node_model, models, settings) -> dict:
    """One phase of job_summary; c: its nesting.Counted.  Its saving is
    that of its own part (the counted energy: the phases inside it carry
    theirs), so the phases' savings add up to the step's."""
    (_, seq, kind, label, depth, parent, pdur, freq, pcpu, pdram, pbytes,
     nranks) = pr
    f, lowered = _phase_clock(pr, clk)
    ref = clk["ref_khz"]
    pd = {"seq": seq, "kind": kind, "label": label, "depth": depth,
          "parent_seq": parent, "nranks": nranks,
          "freq_mhz": f / 1000 if f else None, "freq_lowered": lowered}
    pd.update(derive(pcpu, pdram, pdur, pbytes, settings))
    pd.update({"inside_phase": c.inside, "counted_energy_cpu_j": _j(c.cpu_uj),
               "counted_energy_dram_j": _j(c.dram_uj),
               "counted_energy_total_j": _j(c.total_uj),
               "counted_duration_s": c.duration_ns / 1e9})
    pd.update(estimate_saving(c.cpu_uj, c.dram_uj, f, ref, node_model, kind,
                              models))
    pd["saving_vs"] = clk["ref_name"] if pd["freq_lowered"] else None
    return pd


def step_savings(r, phase_rows, models, settings,
                 detail: bool = True) -> tuple[list, dict]:
    """A job_summary step row's phases and its saving against its reference
    clock (reference_clock), every joule counted once (nesting.py).  A step
    held at a lower clock (fixed:R) is estimated as a whole (power model of
    kind "step", `model dvfs --level steps`) on the energy the step counts
    (a step inside it counts its own); otherwise the lowered phases' own
    parts are added (phase_counts).  detail=False: the saving alone (no
    phase dicts; the phases are counted only when one was lowered)."""
    node_model, policy, base, ccpu, cdram = r[4], r[8], r[9], r[21], r[22]
    clk = reference_clock(policy, base, *r[24:27])
    lowered = [(pr, f) for pr in phase_rows
               for f, low in (_phase_clock(pr, clk),) if low]
    counts = phase_counts([nesting.Phase(pr[1], pr[1], pr[5], pr[2], pr[6],
                                         pr[8], pr[9]) for pr in phase_rows]) \
        if detail or lowered else {}
    phases = [_phase_row(pr, counts[pr[1]], clk, node_model, models, settings)
              for pr in phase_rows] if detail else []
    run = clk["run_khz"]
    out = {"freq_mhz": run / 1000 if run else None, "saving_status": "base clock",
           "saving_j": None, "saving_basis": None, "saving_vs": None,
           "saving_ref_mhz": None, "saving_note": None}
    if clk["why"]:
        return phases, {**out, "saving_status": "not estimated",
                        "saving_note": clk["why"]}
    ref = clk["ref_khz"]
    if run is not None and ref is not None and run < ref:
        parts = [estimate_saving(ccpu, cdram, run, ref, node_model, "step",
                                 models)]
    else:       # the lowered phases' own parts, as _phase_row estimates them
        parts = [estimate_saving(counts[pr[1]].cpu_uj, counts[pr[1]].dram_uj,
                                 f, ref, node_model, pr[2], models)
                 for pr, f in lowered]
    if not parts:
        return phases, out
    if any(p["saving_j"] is None for p in parts):
        return phases, {**out, "saving_status": "not estimated"}
    return phases, {**out, "saving_status": "estimated",
                    "saving_j": sum(p["saving_j"] for p in parts),
                    "saving_basis": "+".join(sorted({p["saving_basis"]
                                                     for p in parts})),
                    "saving_vs": clk["ref_name"], "saving_ref_mhz": ref / 1000}


# --------------------------------------------------------------------------
# times

def iso(ns):
    """ns since the epoch as ISO 8601 in UTC, to the second (None: None)."""
    if ns is None:
        return None
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).isoformat(
        timespec="seconds")


# --------------------------------------------------------------------------
# admin report

_REL = re.compile(r"^(\d+)([smhdw])$")


def parse_time(text: str | None, now: float | None = None) -> int | None:
    """ISO date/datetime (local time unless it has an offset), 'now', or a
    relative age such as 30d, 12h, 2w.  Returns ns since the epoch."""
    if text is None:
        return None
    now = time.time() if now is None else now
    t = text.strip()
    if t == "now":
        return int(now * 1e9)
    m = _REL.match(t)
    if m:
        mult = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]
        return _in_range(int((now - int(m.group(1)) * mult) * 1e9), text)
    try:
        d = dt.datetime.fromisoformat(t)
    except ValueError:
        raise QueryError(f"cannot read time {text!r}: use an ISO date "
                         "(2025-11-01, 2025-11-01T08:00, with optional +HH:MM),"
                         " 'now', or an age like 30d, 12h, 2w") from None
    try:
        return _in_range(int(d.timestamp() * 1e9), text)
    except (OverflowError, ValueError):        # year 1 less the local offset
        return _in_range(-1, text)


def _in_range(ns: int, text: str) -> int:
    """ns since the epoch as the store keeps them (64-bit integers from
    1970): a time outside is refused, not passed on to overflow the query."""
    if not 0 <= ns < 2**63:
        raise QueryError(f"time {text!r} is out of range: allowed from 1970-01-01 "
                         "to 2262-04-11 (ns since the epoch in 64 bits)")
    return ns


def report(conn, settings: Settings, by: str = "user",
           since_ns: int | None = None, until_ns: int | None = None,
           cluster: str | None = None, top: int = 10) -> dict:
    """Totals, shares, top consumers and policy adoption over a period.

    One scan of the steps in the period grouped by the key; a step belongs to
    the period when it started in [since, until).  Energies and step
    seconds are the steps' counted_* figures (nesting.py): a step inside
    another (srun inside batch on one node) is not counted twice.  Load
    (read_report), then compute (_group_figures, _report_totals).
    """
    grid_of = _grid_started(conn, settings, by, since_ns, until_ns, cluster)
    rows = read_report.group_rows(conn, by, since_ns, until_ns, cluster,
                                  settings.node_overhead_w is not None)
    shared = _shared_deltas(conn, by, since_ns, until_ns, cluster)
    rows = [_with_delta(r, shared.get(r[0])) for r in rows]
    no_dram, gpu = read_report.dram_gpu_counts(conn, by, since_ns, until_ns, cluster)
    grid = grid_of()
    groups = _group_figures(rows, shared, no_dram, gpu, grid, settings)
    if by in ("node", "policy") or by.startswith("tag:"):
        # a job can span groups: count it once
        njobs = read_report.distinct_jobs(conn, by, since_ns, until_ns, cluster)
    else:
        njobs = sum(r[1] for r in rows)
    totals = _report_totals(rows, shared, no_dram, gpu, settings)
    totals.update(jobs=njobs, groups=len(groups))
    gridfigures.apply(totals, gridfigures.group_totals(groups, settings))
    totals["records_lost"] = lost.count(conn, cluster, since_ns, until_ns)
    note = settings.scope_note() + (
        "; plus the GPUs' measured energy, where a step's total includes it"
        if totals["gpu_steps"] else "")
    return {"by": by, "since": iso(since_ns), "until": iso(until_ns),
            "cluster": cluster, "currency": settings.currency,
            "scope": settings.scope, "scope_note": note,
            "totals": totals, "top": groups[:top], "groups": groups}


def _grid_started(conn, settings: Settings, by: str, since_ns, until_ns, cluster):
    """_grid, started: a function that gives its result.  With values to
    place, _grid reads on a second connection to the same store, in a
    thread, while the caller reads the report's own sums (each engine
    works outside Python's lock: the two reads overlap on a second core;
    docs/design.md, "CO2 and cost over time").  The figures are averages
    per kWh, so the two reads' snapshots need not be one."""
    if not gridfigures.wanted(conn, settings):
        return lambda: None
    target = getattr(conn, "target", None)
    if target is None or target == ":memory:":
        grid = _grid(conn, settings, by, since_ns, until_ns, cluster)
        return lambda: grid
    import threading
    from . import store
    box: dict = {}

    def work():
        try:
            c2 = store.connect(target, write=False, create=False)
            try:
                box["grid"] = _grid(c2, settings, by, since_ns, until_ns, cluster)
            finally:
                c2.close()
        except BaseException as e:       # raised in the caller, as if read there
            box["error"] = e

    t = threading.Thread(target=work, name="joulestep-grid", daemon=True)
    t.start()

    def result():
        t.join()
        if "error" in box:
            raise box["error"]
        return box["grid"]
    return result


def _grid(conn, settings: Settings, by: str, since_ns, until_ns, cluster):
    """{group: CO2 and price averages} of the window's steps, each at the
    values its energy met (gridfigures.for_groups; None: every figure
    static)."""
    gexpr, joins, args = read_report.group_clause(by)
    where, wargs = read_report.window_conditions(since_ns, until_ns, cluster)
    return gridfigures.for_groups(conn, settings, gexpr, joins, args, where, wargs,
                                  since_ns, until_ns, by_job=by in read_report.JOB_GROUPS,
                                  cluster=cluster)


def _group_figures(rows, shared, no_dram, gpu, grid, settings: Settings) -> list[dict]:
    """One dict per group row, largest first; grid: _grid's averages."""
    grand = sum(r[5] or 0 for r in rows)
    groups = []
    for g, jobs, steps, cpu, dram, tot, dur, pol_steps, pol_uj, node_ns in rows:
        d = {"key": "(none)" if g is None else g, "jobs": jobs, "steps": steps}
        tot, pol_uj = tot or 0, pol_uj or 0
        # DRAM not measured on some of the group's steps: no DRAM figure (the
        # others' sum is not the group's); their total is the CPU's alone
        d["dram_not_measured_steps"] = no_dram.get(g, 0)
        d.update(derive(cpu or 0, None if no_dram.get(g) else dram, dur or 0, None,
                        settings, node_ns or 0))
        _with_gpus(d, settings, steps, no_dram.get(g, 0), gpu.get(g, (None, 0, 0)),
                   tot, dur or 0, node_ns or 0)
        d["step_seconds"] = d.pop("duration_s")
        for k in ("bytes", "gib_per_s", "j_per_gib"):
            d.pop(k)
        d["share_pct"] = 100.0 * tot / grand if grand else 0.0
        d["estimated_steps"] = shared.get(g, (0, 0, 0, 0, 0))[3]
        d["whole_package_steps"] = shared.get(g, (0, 0, 0, 0, 0))[4]
        d["policy_steps_pct"] = 100.0 * pol_steps / steps if steps else 0.0
        d["policy_energy_pct"] = 100.0 * pol_uj / tot if tot else 0.0
        gridfigures.apply(d, gridfigures.fields(grid[g]) if grid and g in grid
                          else gridfigures.static_fields(settings))
        groups.append(d)
    groups.sort(key=lambda d: (-d["energy_total_j"], str(d["key"])))
    return groups


def _report_totals(rows, shared, no_dram, gpu, settings: Settings) -> dict:
    """The report's totals over every group row."""
    grand = sum(r[5] or 0 for r in rows)
    steps_n = sum(r[2] for r in rows)
    dur = sum(r[6] or 0 for r in rows)
    node_ns = sum(r[9] or 0 for r in rows)
    dram_all = [r[4] for r in rows if r[4] is not None]
    totals = derive(sum(r[3] or 0 for r in rows),
                    sum(dram_all) if dram_all and not no_dram else None,
                    dur, None, settings, node_ns)
    gsum = [sum(v[i] or 0 for v in gpu.values()) for i in range(3)]
    _with_gpus(totals, settings, steps_n, sum(no_dram.values()),
               (gsum[0] if gsum[1] else None, gsum[1], gsum[2]), grand, dur, node_ns)
    totals["step_seconds"] = totals.pop("duration_s")
    for k in ("bytes", "gib_per_s", "j_per_gib"):
        totals.pop(k)
    totals.update({
        "steps": steps_n,
        "policy_steps_pct": 100.0 * sum(r[7] for r in rows) / steps_n
        if steps_n else 0.0,
        "policy_energy_pct": 100.0 * sum(r[8] or 0 for r in rows) / grand
        if grand else 0.0})
    totals["dram_not_measured_steps"] = sum(no_dram.values())
    totals["estimated_steps"] = sum(v[3] for v in shared.values())
    totals["whole_package_steps"] = sum(v[4] for v in shared.values())
    totals["energy_basis"] = ("whole package" if totals["whole_package_steps"] else
                              "estimated" if totals["estimated_steps"] else "measured")
    return totals


def _shared_deltas(conn, by: str, since_ns, until_ns, cluster) -> dict:
    """{group: (CPU, DRAM, policy µJ to add, steps estimated, steps whose
    figure is a whole package's)}: the steps of the window that shared a
    package with another job count their attributed figures
    (read_sharing.estimates), not the whole packages'; a step that had
    part of a package and no known neighbour counts the package's."""
    rows = read_report.shared_steps(conn, by, since_ns, until_ns, cluster)
    if not rows:
        return {}
    est = read_sharing.estimates(conn, sorted({r[2] for r in rows}))
    out: dict = {}
    for g, spk, _, cpu, dram, pol in rows:
        e = est.get(spk)
        if e is not None and e.sharing == "partial" and cpu is not None:
            a = out.get(g, (0, 0, 0, 0, 0))
            out[g] = a[:4] + (a[4] + 1,)
        if e is None or e.cpu_uj is None or cpu is None:
            continue
        dc = e.cpu_uj - cpu
        dd = (e.dram_uj or 0) - dram if dram is not None else 0
        a = out.get(g, (0, 0, 0, 0, 0))
        out[g] = (a[0] + dc, a[1] + dd, a[2] + (dc + dd) * (pol or 0),
                  a[3] + (e.sharing == "shared"), a[4])
    return out


def _with_delta(r: tuple, d) -> tuple:
    """A report row (read_report.group_rows) with a group's _shared_deltas added."""
    if d is None:
        return r
    g, jobs, steps, cpu, dram, tot, dur, pol_steps, pol_uj, node_ns = r
    return (g, jobs, steps, None if cpu is None else cpu + d[0],
            None if dram is None else dram + d[1], None if tot is None else tot + d[0] + d[1],
            dur, pol_steps, None if pol_uj is None else pol_uj + d[2], node_ns)


def _with_gpus(d: dict, settings: Settings, steps, no_dram, gpu, tot_uj,
               dur_ns, node_ns) -> None:
    """Set a report row's total, its GPU figures and what the total
    includes; gpu = (GPU uJ in the total, steps whose total has their GPUs,
    steps with GPUs not measured).  The total is the steps' counted totals
    (each step's holds CPU, its DRAM when measured, its GPUs when all have
    their energy); power, kWh, CO2 and cost are of that same energy: the
    site scope (Settings.scoped_j) applies to its RAPL part, the GPUs' own
    energy is added as measured (as `joulestep job` does)."""
    gpu_uj, gsteps, no_gpu = gpu
    d["energy_gpu_j"] = gpu_uj / 1e6 if gsteps else None
    d["gpu_steps"], d["gpu_not_measured_steps"] = gsteps, no_gpu
    d["total_includes"] = gpumod.includes_text(steps, no_dram, gsteps, no_gpu)
    d["energy_total_j"] = tot_uj / 1e6
    if d["kwh"] is None:
        return
    g = (gpu_uj or 0) / 1e6
    kwh = (settings.scoped_j(tot_uj / 1e6 - g, node_ns / 1e9) + g) / 3.6e6
    d.update(kwh=kwh, co2_g=kwh * settings.co2_g_per_kwh,
             cost=kwh * settings.price_per_kwh,
             avg_power_w=tot_uj / 1e6 / (dur_ns / 1e9) if dur_ns > 0 else None)


REPORT_CSV_COLUMNS = [
    "key", "jobs", "steps", "energy_cpu_j", "energy_dram_j", "energy_gpu_j",
    "energy_total_j", "total_includes", "dram_not_measured_steps", "gpu_steps",
    "gpu_not_measured_steps", "share_pct", "step_seconds", "avg_power_w", "kwh", "co2_g", "cost", "scope",
    "policy_steps_pct", "policy_energy_pct", "co2_g_per_kwh", "co2_method",
    "co2_covered_pct", "co2_estimated_pct", "co2_sources", "price_per_kwh", "price_method",
    "price_covered_pct", "price_estimated_pct", "price_sources"]
