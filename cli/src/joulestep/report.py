"""Queries behind `joulestep job` and `joulestep report` (plain functions)."""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import time

from . import gpus as gpumod
from . import gridfigures  # CO2 and cost over time
from . import incarnations, nesting, sharing, slurmview, store, userview
from .config import Settings

GIB = float(1 << 30)
MAX_OVERLAP_CAVEATS = 5      # per node; the rest are counted


class QueryError(Exception):
    """A query the user asked for cannot be answered (message says why)."""


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


def load_models(conn) -> dict:
    cur = conn.execute("SELECT * FROM power_models")
    names = [d[0] for d in cur.description]
    return {(r["node_model"], r["phase_kind"]): r
            for r in (dict(zip(names, row)) for row in cur.fetchall())}


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
# job summary

def _step_order(step_id: str):
    return (0, int(step_id), "") if step_id.isdigit() else (1, 0, step_id)


def _iso(ns):
    if ns is None:
        return None
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).isoformat(
        timespec="seconds")


_JOB_SELECT = (
    "SELECT job_pk, cluster, job_id, submit_time_ns, start_time_ns, name, "
    "user_name, uid, gid, account, partition, first_seen_ns, last_seen_ns, qos "
    "FROM jobs WHERE job_id = ?")
_JOB_FIELDS = ["job_pk", "cluster", "job_id", "submit_time_ns", "start_time_ns",
               "name", "user", "uid", "gid", "account", "partition",
               "first_seen_ns", "last_seen_ns", "qos"]
_FIRST = _JOB_FIELDS.index("first_seen_ns")


def _job_rows(conn, job_id, cluster, first_seen_ns) -> list:
    """The jobs with this ID, latest first; the one first seen at
    ``first_seen_ns`` first when given."""
    q, args = _JOB_SELECT, [job_id]
    if cluster:
        q += " AND cluster = ?"
        args.append(cluster)
    rows = conn.execute(q + " ORDER BY first_seen_ns DESC, cluster", args).fetchall()
    if first_seen_ns is not None:
        pick = [r for r in rows if r[_FIRST] == first_seen_ns]
        if not pick and rows:
            raise QueryError(f"job {job_id} has no run first seen at "
                             f"{first_seen_ns} ns; known: "
                             + ", ".join(str(r[_FIRST]) for r in rows))
        rows = pick + [r for r in rows if r[_FIRST] != first_seen_ns]
    if not rows:
        where = f" on cluster {cluster}" if cluster else ""
        raise QueryError(f"no job {job_id}{where} in the database")
    return rows


# The step and phase rows step_savings and job_summary read (by position),
# also read by the exporter (exporter.py) for its saving estimate. Position 7
# held steps.exclusive, dropped with record version 4 (migration 019): NULL
# keeps the positions after it.
STEP_COLS = (
    "s.step_pk, s.step_id, s.het_component, n.name, s.node_model, "
    "s.ntasks, s.ncpus, NULL, s.policy, s.base_freq_khz, s.start_ns, "
    "s.end_ns, s.duration_ns, s.energy_cpu_uj, s.energy_dram_uj, "
    "s.energy_total_uj, s.exit_code, s.wrap_uncertain, s.errors_json, "
    "s.backend, s.inside_step_pk, s.counted_cpu_uj, s.counted_dram_uj, "
    "s.counted_total_uj, s.nominal_freq_khz, s.fixed_freq_khz, s.freq_control, "
    "s.freq_min_ratio, s.counted_duration_ns, s.min_phase_ns, s.energy_resolution_uj, "
    "s.dram_not_measured, s.energy_node_uj, s.node_meter_sources, "
    "s.node_meter_integrated, s.incarnation_ns, s.smt_aside_cpus")
#: STEP_COLS position of steps.dram_not_measured (why DRAM is not measured)
NO_DRAM_AT = 31
#: STEP_COLS position of steps.incarnation_ns (a requeued job's run)
INC_AT = 35
#: STEP_COLS position of steps.smt_aside_cpus (SMT cores left at their clock)
SMT_AT = 36
STEPS_FROM = "steps s JOIN nodes n ON n.node_pk = s.node_pk"
PHASE_COLS = (
    "p.step_pk, p.seq, p.kind, p.label, p.depth, p.parent_seq, "
    "p.duration_ns, p.freq_khz, p.energy_cpu_uj, p.energy_dram_uj, p.bytes, "
    "p.nranks")


def job_summary(conn, job_id: int, settings: Settings,
                cluster: str | None = None,
                first_seen_ns: int | None = None, tuned: dict | None = None,
                user_view: bool = False, what_if=None) -> dict:
    """Everything `joulestep job` shows, as one JSON-ready dict.  Several
    jobs with one ID (recycled): the latest, or the one first seen at
    ``first_seen_ns``.  tuned: the tuned policy's {kind: ratio} for the
    what-if estimates (whatif.py).  user_view: what a user who is not an
    admin sees (userview.py): every figure derives from rounded energies, a
    step or phase shorter than its min_phase_ns has none.  what_if: the
    what-if estimate, what_if(steps, models, tuned, settings) (whatif.for_job;
    passed in, as whatif.py builds on this module)."""
    rows = _job_rows(conn, job_id, cluster, first_seen_ns)
    job = dict(zip(_JOB_FIELDS, rows[0]))
    others = [{"cluster": r[1], "submit_time_ns": r[3], "submit_time": _iso(r[3]),
               "first_seen_ns": r[_FIRST], "first_seen": _iso(r[_FIRST])}
              for r in rows[1:]]
    job_pk = job.pop("job_pk")
    for k in ("submit_time", "first_seen", "last_seen"):
        job[k] = _iso(job[k + "_ns"])
    job["tags"] = dict(conn.execute(
        "SELECT DISTINCT t.key, t.value FROM step_tags t JOIN steps s "
        "ON s.step_pk = t.step_pk WHERE s.job_pk = ? ORDER BY t.key, t.value",
        (job_pk,)))
    models = load_models(conn)

    phases_by_step: dict = {}
    for r in conn.execute(f"SELECT {PHASE_COLS} FROM phases p JOIN steps s ON "
                          "s.step_pk = p.step_pk WHERE s.job_pk = ? ORDER BY "
                          "p.step_pk, p.seq", (job_pk,)):
        phases_by_step.setdefault(r[0], []).append(r)

    gpu_steps, gpu_phases = gpumod.for_job(conn, job_pk)
    # +uncore-io: the uncore cap each phase set (absent: left alone)
    uncore = {(spk, seq): khz for spk, seq, khz in conn.execute(
        "SELECT p.step_pk, p.seq, p.uncore_max_khz FROM phases p JOIN steps s ON "
        "s.step_pk = p.step_pk WHERE s.job_pk = ? AND p.uncore_max_khz IS NOT NULL",
        (job_pk,))}
    tot_gpu = None            # counted GPU energy of steps whose total has it
    steps, caveats = [], []
    tot_cpu = tot_dram = tot_saving = 0.0
    node_ns = 0               # counted node-seconds of measured steps
    unmeasured = nested = 0
    have_dram = False
    not_est = 0
    no_dram: dict = {}        # why DRAM is not measured -> steps
    bases, refs = set(), set()
    rows = conn.execute(f"SELECT {STEP_COLS} FROM {STEPS_FROM} WHERE "
                        "s.job_pk = ?", (job_pk,)).fetchall()
    # a requeued job's runs (incarnations.py), each run's steps together
    run_of = incarnations.runs((r[0], r[1], r[3], r[INC_AT], r[10], r[11]) for r in rows)
    rows.sort(key=lambda r: (run_of[r[0]], r[2], _step_order(r[1]), r[3]))
    hidden: set = set()          # (step_pk, seq) of phases shown without energy
    if user_view:
        rows, phases_by_step, hidden = _user_rows(rows, phases_by_step)
    names = {r[0]: r[1] if not r[2] else f"{r[1]}+{r[2]}" for r in rows}
    # another job's step on the node at the same time (sharing.overlapped);
    # _shared_nodes replaces the caveat where the store has an estimate
    shared = sharing.overlapped(conn, [r[0] for r in rows])
    if len(set(run_of.values())) > 1:       # a requeued job: STEP#N, run N
        names = {pk: f"{n}#{run_of[pk]}" for pk, n in names.items()}
    inner: dict = {}
    for r in rows:
        if r[20] is not None:
            inner.setdefault(r[20], []).append(r)
    for r in rows:
        (spk, step_id, het, node, node_model, ntasks, ncpus, _, policy, base,
         st, en, dur, cpu, dram, total, exit_code, wrapu, errs, backend,
         inside, ccpu, cdram, ctotal) = r[:24]
        cdur = r[28]
        d = {"step_id": step_id, "het_component": het, "node": node,
             "incarnation": run_of[spk],
             "node_model": node_model, "policy": policy, "ntasks": ntasks,
             "ncpus": ncpus, "start_time": _iso(st), "exit_code": exit_code,
             "freq_mhz": None if base is None else base / 1000,
             "base_freq_mhz": None if base is None else base / 1000,
             "nominal_freq_mhz": None if r[24] is None else r[24] / 1000,
             "freq_control": r[26], "freq_min_ratio": r[27]}
        d.update(derive(cpu, dram, dur, None, settings))
        if total is not None:
            d["energy_total_j"] = total / 1e6
        if cpu is None:
            unmeasured += 1
        # job totals add what each step counts (nesting.py): a step inside
        # another one on the same node is not added twice
        if ccpu is not None:
            tot_cpu += ccpu
            node_ns += cdur or 0
        if cdram is not None:
            tot_dram += cdram
            have_dram = True
        d["dram_not_measured"] = r[NO_DRAM_AT]
        # the node's own meter (node_energy=), beside RAPL, never added to it
        d["energy_node_j"] = None if r[NO_DRAM_AT + 1] is None else r[NO_DRAM_AT + 1] / 1e6
        d["node_meter_sources"] = r[NO_DRAM_AT + 2]
        d["node_meter_integrated"] = None if r[NO_DRAM_AT + 3] is None else bool(r[NO_DRAM_AT + 3])
        # SMT cores the step had only some threads of: clocks left alone
        d["smt_aside_cpus"] = r[SMT_AT]
        if r[NO_DRAM_AT] is not None and ccpu is not None:
            no_dram.setdefault(r[NO_DRAM_AT], []).append(names[spk] + " on " + node)
        d["inside_step"] = names.get(inside)
        d["counted_energy_cpu_j"] = None if ccpu is None else ccpu / 1e6
        d["counted_energy_dram_j"] = None if cdram is None else cdram / 1e6
        d["counted_energy_total_j"] = None if ctotal is None else ctotal / 1e6
        d["counted"], d["note"] = _nesting_note(r, names, inner.get(spk, ()))
        d.update(gpu_steps.get(spk, {}))
        if d.get("energy_gpu_j") is not None and ctotal is not None:
            # the counted total's GPU share (nesting counts it once)
            tot_gpu = (tot_gpu or 0.0) + ctotal - (ccpu or 0) - (cdram or 0)
        if inside is not None:
            nested += 1
        phases, sav = step_savings(r, phases_by_step.get(spk, []), models,
                                   settings)
        d.update(sav)
        if d["saving_status"] == "not estimated":
            not_est += 1
        elif d["saving_status"] == "estimated":
            tot_saving += d["saving_j"]
            bases.add(d["saving_basis"])
            refs.add(d["saving_vs"])
        for p in phases:
            if gpu_steps.get(spk, {}).get("gpus"):
                p["energy_gpu_j"], p["gpu_clock_mhz"] = gpu_phases.get(
                    (spk, p["seq"]), (None, None))
            if (spk, p["seq"]) in uncore:
                p["uncore_max_mhz"] = uncore[(spk, p["seq"])] / 1000
            if (spk, p["seq"]) in hidden:
                p["energy_note"] = userview.note(userview.rules(*r[29:31])[0])
        d["phases"] = phases
        if user_view and cpu is None and dur < userview.rules(*r[29:31])[0]:
            d["energy_note"] = userview.note(userview.rules(*r[29:31])[0])
        errors = json.loads(errs)
        d["wrap_uncertain"] = bool(wrapu)
        d["errors"] = errors
        steps.append(d)
        label = f"step {step_id} on {node}"
        if spk in shared:
            caveats.append(SHARED_NODE_CAVEAT.format(label=label))
        if d.get("energy_note"):
            caveats.append(f"{label}: {d['energy_note']}")
        elif cpu is None:
            caveats.append(f"{label}: energy not measured (see the errors)")
        if r[NO_DRAM_AT] is not None:
            caveats.append(f"{label}: DRAM not measured ({r[NO_DRAM_AT]}); its "
                           "total is the CPU's alone")
        if wrapu:
            caveats.append(f"{label}: a counter may have wrapped unseen; "
                           "energies are lower bounds")
        for e in errors:
            caveats.append(f"{label}: {e}")
    if not steps:
        raise QueryError(f"job {job_id} has no steps in the database")
    by_node: dict = {}
    for r in rows:
        by_node.setdefault(r[3], []).append(nesting.Step(
            r[0], r[1], r[2], r[10], r[11], r[12], r[13], r[14], r[15]))
    for node, group in by_node.items():
        pairs = nesting.overlaps(group)
        for a, b in pairs[:MAX_OVERLAP_CAVEATS]:
            caveats.append(f"steps {names[a]} and {names[b]} on {node} ran at "
                           "the same time: RAPL measures whole packages, so each"
                           " includes the other's energy and the job total "
                           "counts their overlap twice")
        if len(pairs) > MAX_OVERLAP_CAVEATS:
            caveats.append(f"... and {len(pairs) - MAX_OVERLAP_CAVEATS} more "
                           f"pairs of steps on {node} that ran at the same time")
    # DRAM not measured on some step: the job has no DRAM figure (a sum of
    # the others' is not the job's) and its total is the CPU's alone
    totals = derive(tot_cpu, tot_dram if have_dram and not no_dram else None,
                    sum(s["duration_s"] for s in steps) * 1e9, None, settings,
                    node_ns)
    totals["dram_not_measured"] = _no_dram_note(no_dram)
    totals.pop("duration_s")
    totals.pop("avg_power_w")
    totals["energy_gpu_j"] = None if tot_gpu is None else tot_gpu / 1e6
    if tot_gpu is not None and totals["energy_total_j"] is not None:
        # the GPUs' own energy is added to the scoped CPU + DRAM figure (a
        # node factor or overhead estimates the rest of a node from RAPL)
        totals["energy_total_j"] += tot_gpu / 1e6
        totals["kwh"] += tot_gpu / 1e6 / 3.6e6
        totals["co2_g"] = totals["kwh"] * settings.co2_g_per_kwh
        totals["cost"] = totals["kwh"] * settings.price_per_kwh
    totals["total_includes"] = gpumod.job_includes(steps)
    _shared_nodes(sharing.estimates(conn, [job_pk]), rows, steps, totals, caveats,
                  settings)
    totals.pop("bytes"), totals.pop("gib_per_s"), totals.pop("j_per_gib")
    totals["steps_unmeasured"] = unmeasured
    totals["steps_inside_others"] = nested
    totals["saving_j"] = tot_saving if not not_est else None
    totals["saving_status"] = ("not estimated" if not_est else
                               "estimated" if refs else "base clock")
    totals["saving_basis"] = "+".join(sorted(bases)) if bases else None
    totals["saving_vs"] = " / ".join(sorted(refs)) if refs else None
    runs = incarnations.summary((run_of[r[0]], r[10], r[11], r[3], r[23]) for r in rows)
    for run in runs:
        run["start_time"], run["end_time"] = _iso(run["start_ns"]), _iso(run["end_ns"])
    if len(runs) > 1:
        caveats.append(f"job {job_id} was requeued: it ran {len(runs)} times "
                       "under one job ID; the totals add every run, each run's "
                       "own energy is under Incarnations")
    if others:
        caveats.append(f"job ID {job_id} was used {len(others)} more time(s) "
                       "(ID recycled); pick one with --first-seen "
                       + ", ".join(str(o["first_seen_ns"]) for o in others))
    intensity = gridfigures.for_job(conn, job_pk, rows, steps, totals, settings)
    if intensity.get("note"):
        caveats.append(intensity["note"])
    slurm = slurmview.for_job(conn, job_pk, steps)
    if slurm and slurm["energy_node_note"]:
        caveats.append(f"node meter (Slurm): no job figure: {slurm['energy_node_note']}")
    return {"job": job, "slurm": slurm, "site": {"cluster": settings.cluster,
                                 "co2_g_per_kwh": settings.co2_g_per_kwh,
                                 "price_per_kwh": settings.price_per_kwh,
                                 "currency": settings.currency},
            "scope": settings.scope, "scope_note": settings.scope_note(),
            "totals": totals, "steps": steps, "other_submissions": others,
            "incarnations": runs, "intensity": intensity,
            "caveats": caveats,
            "what_if": what_if(steps, models, tuned, settings) if what_if else None}


SHARED_NODE_CAVEAT = ("{label}: node shared with other jobs; RAPL measures whole "
                      "packages, so energy includes theirs")


def _shared_nodes(est: dict, rows: list, steps: list, totals: dict,
                  caveats: list, settings: Settings) -> None:
    """A job's steps that shared a package with another job: their
    attributed figures (sharing.estimates, docs/accounting.md "Shared
    nodes") in the steps and the job's totals, labelled estimated; the
    measured figures stay beside them (measured_*)."""
    d_cpu = d_dram = 0
    basis = "measured"
    for r, d in zip(rows, steps):
        e = est.get(r[0])
        d["sharing"], d["energy_basis"] = (e.sharing if e else None), "measured"
        label = f"step {r[1]} on {r[3]}"
        if e is not None:  # the store knows whether another job was on its packages
            with contextlib.suppress(ValueError):
                caveats.remove(SHARED_NODE_CAVEAT.format(label=label))
        if e is None or e.cpu_uj is None and e.sharing == "exclusive" or r[13] is None:
            continue
        if e.cpu_uj is None:
            d["energy_basis"] = basis = "not estimated"
            caveats.append(f"{label}: shared its packages with other jobs and has no "
                           "CPU time recorded; its figures are the whole packages'")
            continue
        d["estimated_energy_cpu_j"] = e.cpu_uj / 1e6
        d["estimated_energy_dram_j"] = None if e.dram_uj is None else e.dram_uj / 1e6
        d["estimated_energy_total_j"] = (e.cpu_uj + (e.dram_uj or 0)) / 1e6 + \
            (d.get("energy_gpu_j") or 0)
        if e.sharing == "shared":
            d["energy_basis"] = "estimated"
            basis = "estimated" if basis == "measured" else basis
            caveats.append(f"{label}: shared its packages with other jobs; its energy "
                           "is estimated (static part by allocated CPUs, the rest by "
                           "CPU time), the measured figures are the whole packages'")
        d_cpu += e.cpu_uj - r[13]
        d_dram += (e.dram_uj or 0) - (r[14] or 0) if r[14] is not None else 0
    totals["energy_basis"] = basis
    if not (d_cpu or d_dram):
        return
    for k in ("energy_cpu_j", "energy_dram_j", "energy_total_j", "kwh", "co2_g", "cost"):
        totals["measured_" + k] = totals.get(k)
    kwh = settings.scoped_j((d_cpu + d_dram) / 1e6, 0) / 3.6e6
    totals["energy_cpu_j"] += d_cpu / 1e6
    if totals.get("energy_dram_j") is not None:
        totals["energy_dram_j"] += d_dram / 1e6
    totals["energy_total_j"] += (d_cpu + d_dram) / 1e6
    totals["kwh"] += kwh
    totals["co2_g"] = totals["kwh"] * settings.co2_g_per_kwh
    totals["cost"] = totals["kwh"] * settings.price_per_kwh


def _no_dram_note(no_dram: dict) -> str | None:
    """Why the job has no DRAM figure: the reasons and the steps, or None."""
    if not no_dram:
        return None
    n = sum(len(v) for v in no_dram.values())
    return f"{n} step(s): " + "; ".join(
        f"{why} ({', '.join(v[:3])}{', ...' if len(v) > 3 else ''})"
        for why, v in no_dram.items())


def _user_rows(rows, phases_by_step):
    """job_summary's step and phase rows as a user sees them (userview.py):
    (rows, phases_by_step, {(step_pk, seq) of phases shown without energy})."""
    out, phases, hidden = [], {}, set()
    for r in rows:
        minp, res = userview.rules(*r[29:31])
        out.append(userview.step_row(r, 12, (13, 14, 15), (21, 22, 23), minp, res))
        for pr in phases_by_step.get(r[0], []):
            row, h = userview.phase_row(pr, 6, 8, 9, minp, res)
            phases.setdefault(r[0], []).append(row)
            if h:
                hidden.add((r[0], pr[1]))
    return out, phases, hidden


def _nesting_note(r, names: dict, inner) -> tuple[str, str | None]:
    """(counted, note) of a job_summary step row: counted is "all" (its
    own energy is added), "rest" (steps inside it: only the rest of its
    energy is added), "none" (inside a step that counts it instead) or
    "not measured"."""
    spk, inside, total, ctotal = r[0], r[20], r[15], r[23]
    if ctotal is None:
        return "not measured", None
    kids = ", ".join(names[k[0]] for k in inner)
    if inside is not None and ctotal == 0 and (total or 0) > 0:
        return "none", (f"inside step {names[inside]}, together with steps that "
                        "do not fit in its measurement (they ran at the same "
                        "time, or the counters disagree): not added to the job "
                        f"total (step {names[inside]}'s energy is, in full)")
    if inner and ctotal < (total or 0):
        from .render_units import fmt
        return "rest", (f"contains step(s) {kids}: its {fmt(total / 1e6, 'J', ' ')} "
                        f"include theirs, so it adds only the other "
                        f"{fmt(ctotal / 1e6, 'J', ' ')} to the job total")
    if inner and any(k[23] == 0 and (k[15] or 0) > 0 for k in inner):
        return "all", (f"contains step(s) {kids}, which do not fit in its "
                       "measurement: its own energy is added, theirs is not")
    if inside is not None:
        return "all", (f"inside step {names[inside]}, whose measurement "
                       "includes it: added in full; step "
                       f"{names[inside]} adds only the rest")
    return "all", None


JOB_CSV_COLUMNS = [
    "level", "step_id", "het_component", "node", "policy", "seq", "kind",
    "label", "depth", "duration_s", "energy_cpu_j", "energy_dram_j",
    "energy_total_j", "avg_power_w", "bytes", "gib_per_s", "j_per_gib",
    "freq_mhz", "kwh", "co2_g", "cost", "scope", "saving_j", "saving_pct",
    "saving_status", "inside_step", "counted", "counted_energy_total_j",
    "saving_basis", "saving_vs", "zone", "co2_g_per_kwh", "co2_method",
    "co2_covered_pct", "co2_sources", "price_per_kwh", "price_method",
    "price_covered_pct", "price_sources"]


def job_rows(summary: dict) -> list[dict]:
    """Flat rows (one per step, then its phases) for CSV."""
    out = []
    for s in summary["steps"]:
        base = {"step_id": s["step_id"], "het_component": s["het_component"],
                "node": s["node"], "policy": s["policy"], "scope": summary["scope"]}
        out.append({**s, "level": "step", "scope": summary["scope"]})
        for p in s["phases"]:
            out.append({**p, **base, "level": "phase"})
    return out


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


GROUPS = {
    "user": "j.user_name",
    "account": "j.account",
    "partition": "j.partition",
    "qos": "j.qos",        # from sacct at ingest (slurmacct.py); NULL without slurmdbd
    "node": "n.name",
    "policy": "s.policy",
}


def window_conditions(since_ns, until_ns, cluster):
    """SQL conditions (on steps s joined with jobs j) and their arguments for
    a report window: steps started in [since_ns, until_ns) on cluster."""
    where, args = [], []
    if since_ns is not None:
        where.append("s.start_ns >= ?")
        args.append(since_ns)
    if until_ns is not None:
        where.append("s.start_ns < ?")
        args.append(until_ns)
    if cluster:
        where.append("j.cluster = ?")
        args.append(cluster)
    return where, args

def group_clause(by: str) -> tuple[str, str, list]:
    """(group expression, joins from steps s, their arguments) of a report
    grouping: user, account, partition, qos, node, policy or tag:KEY."""
    joins = "JOIN jobs j ON j.job_pk = s.job_pk"
    args: list = []
    if by.startswith("tag:"):
        key = by[4:]
        if not key:
            raise QueryError("--by tag:KEY needs a tag name, e.g. tag:strategy")
        joins += " LEFT JOIN step_tags t ON t.step_pk = s.step_pk AND t.key = ?"
        return "t.value", joins, [key]
    if by not in GROUPS:
        raise QueryError(f"cannot group by {by!r}: use user, account, partition,"
                         " qos, node, policy or tag:KEY")
    if by == "node":
        joins += " JOIN nodes n ON n.node_pk = s.node_pk"
    return GROUPS[by], joins, args


#: groupings by an attribute of the job, so that all of a job's steps fall in
#: one group: report reads the jobs' totals (migration 007) for them
JOB_GROUPS = ("user", "account", "partition", "qos")


#: the figures report sums per group, after the jobs count: steps, CPU,
#: DRAM, total, time, policy steps, policy energy, node time (the jobs'
#: totals of migration 007, store.JOB_TOTAL_SQL)
_SUMS = ("steps_n", "counted_cpu_uj", "counted_dram_uj", "counted_total_uj",
         "counted_duration_ns", "policy_steps_n", "policy_total_uj",
         "measured_duration_ns")


def _sums(settings: Settings, expr) -> str:
    """_SUMS as SQL, each total through expr.  Every aggregate costs time
    per step: the node-seconds of measured steps only count with
    node_overhead_w (Settings.scoped_j)."""
    cols = _SUMS if settings.node_overhead_w is not None else _SUMS[:-1]
    return ", ".join([expr(c) for c in cols] + ["NULL"] * (len(_SUMS) - len(cols)))


def _step_sums(settings: Settings) -> str:
    """_SUMS over steps s."""
    return _sums(settings, store.JOB_TOTAL_SQL.__getitem__)


def _job_sums(settings: Settings) -> str:
    """_SUMS from the jobs' totals j (each job's sums over its steps)."""
    return _sums(settings, "sum(j.{})".format)


def report_queries(settings: Settings, by: str, since_ns, until_ns,
                   cluster) -> list[tuple[str, list]]:
    """(SQL, arguments) of the aggregates report adds up, each row (key,
    jobs, then _step_sums); also run bare by bench/bench_cli.py.

    Grouped by a job attribute (JOB_GROUPS): the totals of the jobs whose
    steps all started in [since, until), one row per job; and the steps in
    the window of the jobs that straddle an end of it.  A job is in one of
    the two or in neither.  Otherwise (node, policy, tag:KEY: a job's steps
    may fall in several groups) one scan of the steps in the window."""
    gexpr, joins, args = group_clause(by)
    where, wargs = window_conditions(since_ns, until_ns, cluster)
    steps_sql = (f"SELECT {gexpr} AS g, count(DISTINCT s.job_pk), {_step_sums(settings)} "
                 f"FROM steps s {joins} ")
    if by not in JOB_GROUPS:
        return [(steps_sql + (f"WHERE {' AND '.join(where)} " if where else "")
                 + "GROUP BY g", args + wargs)]
    inside, iargs = ["j.steps_last_start_ns IS NOT NULL"], []
    straddle, sargs = [], []
    for end, cond in ((since_ns, "j.steps_first_start_ns >= ?"),
                      (until_ns, "j.steps_last_start_ns < ?")):
        if end is not None:
            inside.append(cond)
            iargs.append(end)
            straddle.append("SELECT job_pk FROM jobs WHERE steps_last_start_ns >= ? "
                            "AND steps_first_start_ns < ?")
            sargs += [end, end]
    if since_ns is not None:        # lets the index find the window's jobs
        inside.append("j.steps_last_start_ns >= ?")
        iargs.append(since_ns)
    if cluster:
        inside.append("j.cluster = ?")
        iargs.append(cluster)
    out = [(f"SELECT {gexpr} AS g, count(*), {_job_sums(settings)} FROM jobs j "
            f"WHERE {' AND '.join(inside)} GROUP BY g", iargs)]
    if straddle:
        out.append((steps_sql + f"WHERE s.job_pk IN ({' UNION ALL '.join(straddle)}) "
                    f"AND {' AND '.join(where)} GROUP BY g", sargs + wargs))
    return out


def _group_rows(conn, settings: Settings, by: str, since_ns, until_ns,
                cluster) -> list[tuple]:
    """report_queries' rows, one per key (the parts' figures added up; a
    sum over no value stays None, as in SQL)."""
    merged: dict = {}
    for sql, qargs in report_queries(settings, by, since_ns, until_ns, cluster):
        for r in conn.execute(sql, qargs).fetchall():
            have = merged.get(r[0])
            merged[r[0]] = r if have is None else (r[0],) + tuple(
                b if a is None else a if b is None else a + b
                for a, b in zip(have[1:], r[1:]))
    return list(merged.values())


def report(conn, settings: Settings, by: str = "user",
           since_ns: int | None = None, until_ns: int | None = None,
           cluster: str | None = None, top: int = 10) -> dict:
    """Totals, shares, top consumers and policy adoption over a period.

    One scan of the steps in the period grouped by the key; a step belongs to
    the period when it started in [since, until).  Energies and step
    seconds are the steps' counted_* figures (nesting.py): a step inside
    another (srun inside batch on one node) is not counted twice.
    """
    rows = _group_rows(conn, settings, by, since_ns, until_ns, cluster)
    shared = _shared_deltas(conn, by, since_ns, until_ns, cluster)
    rows = [_with_delta(r, shared.get(r[0])) for r in rows]
    _, joins, args = group_clause(by)
    where, wargs = window_conditions(since_ns, until_ns, cluster)
    grand = sum(r[5] or 0 for r in rows)
    no_dram, gpu = _dram_gpu_counts(conn, by, since_ns, until_ns, cluster)
    grid = gridfigures.for_groups(conn, settings, group_clause(by)[0], joins, args,
                                  where, wargs, since_ns, until_ns,
                                  by_job=by in JOB_GROUPS, cluster=cluster)
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
        d["estimated_steps"] = shared.get(g, (0, 0, 0, 0))[3]
        d["policy_steps_pct"] = 100.0 * pol_steps / steps if steps else 0.0
        d["policy_energy_pct"] = 100.0 * pol_uj / tot if tot else 0.0
        gridfigures.apply(d, gridfigures.fields(grid[g]) if grid and g in grid
                          else gridfigures.static_fields(settings))
        groups.append(d)
    groups.sort(key=lambda d: (-d["energy_total_j"], str(d["key"])))
    if by in ("node", "policy") or by.startswith("tag:"):
        # a job can span groups: count it once
        jq = (f"SELECT count(DISTINCT s.job_pk) FROM steps s {joins} "
              + (f"WHERE {' AND '.join(where)}" if where else ""))
        njobs = conn.execute(jq, args + wargs).fetchone()[0]
    else:
        njobs = sum(r[1] for r in rows)
    steps_n = sum(r[2] for r in rows)
    dram_all = [r[4] for r in rows if r[4] is not None]
    totals = derive(sum(r[3] or 0 for r in rows),
                    sum(dram_all) if dram_all and not no_dram else None,
                    sum(r[6] or 0 for r in rows), None, settings,
                    sum(r[9] or 0 for r in rows))
    gsum = [sum(v[i] or 0 for v in gpu.values()) for i in range(3)]
    _with_gpus(totals, settings, steps_n, sum(no_dram.values()),
               (gsum[0] if gsum[1] else None, gsum[1], gsum[2]), grand,
               sum(r[6] or 0 for r in rows), sum(r[9] or 0 for r in rows))
    totals["step_seconds"] = totals.pop("duration_s")
    for k in ("bytes", "gib_per_s", "j_per_gib"):
        totals.pop(k)
    totals.update({
        "jobs": njobs, "steps": steps_n, "groups": len(groups),
        "policy_steps_pct": 100.0 * sum(r[7] for r in rows) / steps_n
        if steps_n else 0.0,
        "policy_energy_pct": 100.0 * sum(r[8] or 0 for r in rows) / grand
        if grand else 0.0})
    totals["dram_not_measured_steps"] = sum(no_dram.values())
    totals["estimated_steps"] = sum(v[3] for v in shared.values())
    totals["energy_basis"] = "estimated" if totals["estimated_steps"] else "measured"
    gridfigures.apply(totals, gridfigures.group_totals(groups, settings))
    from .lost import count as lost_count  # records the plugin could not write
    totals["records_lost"] = lost_count(conn, cluster, since_ns, until_ns)
    note = settings.scope_note() + (
        "; plus the GPUs' measured energy, where a step's total includes it"
        if totals["gpu_steps"] else "")
    return {"by": by, "since": _iso(since_ns), "until": _iso(until_ns),
            "cluster": cluster, "currency": settings.currency,
            "scope": settings.scope, "scope_note": note,
            "totals": totals, "top": groups[:top], "groups": groups}


def _shared_deltas(conn, by: str, since_ns, until_ns, cluster) -> dict:
    """{group: (CPU, DRAM, policy µJ to add, steps estimated)}: the steps of
    the window that shared a package with another job count their
    attributed figures (sharing.estimates), not the whole packages'."""
    gexpr, joins, args = group_clause(by)
    where, wargs = window_conditions(since_ns, until_ns, cluster)
    where = where + ["s.inside_step_pk IS NULL", "EXISTS (SELECT 1 FROM step_packages p "
                     "WHERE p.step_pk = s.step_pk)"]
    rows = conn.execute(
        f"SELECT {gexpr}, s.step_pk, s.job_pk, s.energy_cpu_uj, s.energy_dram_uj, "
        f"s.policy_active FROM steps s {joins} WHERE {' AND '.join(where)}",
        args + wargs).fetchall()
    est = sharing.estimates(conn, sorted({r[2] for r in rows}))
    out: dict = {}
    for g, spk, _, cpu, dram, pol in rows:
        e = est.get(spk)
        if e is None or e.cpu_uj is None or cpu is None:
            continue
        dc = e.cpu_uj - cpu
        dd = (e.dram_uj or 0) - dram if dram is not None else 0
        a = out.get(g, (0, 0, 0, 0))
        out[g] = (a[0] + dc, a[1] + dd, a[2] + (dc + dd) * (pol or 0),
                  a[3] + (e.sharing == "shared"))
    return out


def _with_delta(r: tuple, d) -> tuple:
    """A report row (_group_rows) with a group's _shared_deltas added."""
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


def _dram_gpu_counts(conn, by: str, since_ns, until_ns, cluster) -> tuple:
    """One scan of the steps in the window that lack DRAM or have GPU
    figures: ({group key: steps whose DRAM is not measured}, {group key:
    (GPU uJ in the counted totals, steps whose total has their GPUs, steps
    with GPUs not measured)}) (gpus.py's rule); only keys with such steps
    ({}, {} on nodes that all measure DRAM and have no GPUs)."""
    gexpr, joins, args = group_clause(by)
    where, wargs = window_conditions(since_ns, until_ns, cluster)
    where = where + [f"(s.dram_not_measured IS NOT NULL OR {gpumod.IN_TOTAL_SQL} "
                     "OR s.gpu_backend IS NOT NULL OR s.gpus_unmeasured IS NOT NULL)"]
    no_dram, gpu = {}, {}
    for g, nd, *rest in conn.execute(
            f"SELECT {gexpr} AS g, "
            "sum(CASE WHEN s.dram_not_measured IS NOT NULL THEN 1 ELSE 0 END), "
            f"sum({gpumod.COUNTED_SQL}), "
            f"sum(CASE WHEN {gpumod.IN_TOTAL_SQL} THEN 1 ELSE 0 END), "
            f"sum(CASE WHEN {gpumod.UNMEASURED_SQL} THEN 1 ELSE 0 END) "
            f"FROM steps s {joins} WHERE {' AND '.join(where)} GROUP BY g",
            args + wargs).fetchall():
        if nd:
            no_dram[g] = nd
        if rest[1] or rest[2]:
            gpu[g] = tuple(rest)
    return no_dram, gpu


REPORT_CSV_COLUMNS = [
    "key", "jobs", "steps", "energy_cpu_j", "energy_dram_j", "energy_gpu_j",
    "energy_total_j", "total_includes", "dram_not_measured_steps", "gpu_steps",
    "gpu_not_measured_steps", "share_pct", "step_seconds", "avg_power_w", "kwh", "co2_g", "cost", "scope",
    "policy_steps_pct", "policy_energy_pct", "co2_g_per_kwh", "co2_method",
    "co2_covered_pct", "co2_sources", "price_per_kwh", "price_method",
    "price_covered_pct", "price_sources"]
