"""`joulestep job`'s summary of one job, in three steps:

- load (:func:`load`): the store's rows of the job (store/read_jobs.py,
  store/read_sharing.py) into a :class:`JobData`; no figures;
- compute (:func:`compute`): the figures of each step and phase, the job's
  totals, the savings and the what-if estimates, the caveats;
- shape (:func:`shape`): the JSON-ready dict that the text, JSON and CSV
  outputs render.

A figure of another kind adds a field to JobData that load fills, and a
compute step that reads it: CO2 and cost over time are JobData.grid
(store/read_intensity.py) and gridfigures.for_job."""
from __future__ import annotations

import contextlib
import json

from . import gpus as gpumod
from . import gridfigures, incarnations, nesting, slurmview, userview, whatif
from .config import Settings
from .render_units import fmt
from .report import QueryError, add_gpu, derive, iso, step_savings
from .store import read_intensity, read_jobs, read_sharing
from .store.read_jobs import INC_AT, INCLUDES_AT, NO_DRAM_AT, SMT_AT

MAX_OVERLAP_CAVEATS = 5      # per node; the rest are counted
_FIRST = read_jobs.JOB_FIELDS.index("first_seen_ns")

SHARED_NODE_CAVEAT = ("{label}: node shared with other jobs; RAPL measures whole "
                      "packages, so energy includes theirs")


class JobData:
    """What the store holds of one job: the load step's result.  A figure
    of another kind adds its rows here (and a line to load)."""
    __slots__ = ("job", "job_pk", "others", "tags", "models", "steps", "phases",
                 "gpu_steps", "gpus", "gpu_phases", "uncore", "shares",
                 "overlapped", "slurm_job", "slurm_steps", "grid")

    def __init__(self, **kw):
        # job: read_jobs.JOB_FIELDS, job_pk apart; others: other jobs with the
        # same ID (JOB_FIELDS rows); models: read_jobs.power_models; steps:
        # read_jobs.STEP_COLS rows; phases: step_pk -> PHASE_COLS rows; uncore:
        # (step_pk, seq) -> uncore cap kHz; shares: step_pk -> attribution.Share;
        # overlapped: the step_pks another job's step on the node overlaps in
        # time (the store's rule for a shared node: read_sharing.overlapped);
        # grid: read_intensity.job_grid (CO2 and price over time)
        for k in self.__slots__:
            setattr(self, k, kw.pop(k))
        if kw:
            raise TypeError(f"JobData: unknown {', '.join(kw)}")


def summary(conn, job_id: int, settings: Settings, cluster: str | None = None,
            first_seen_ns: int | None = None, tuned: dict | None = None,
            user_view: bool = False, step: str | None = None) -> dict:
    """Everything `joulestep job` shows, as one JSON-ready dict: load,
    compute, shape.  Several jobs with one ID (recycled): the latest, or
    the one first seen at ``first_seen_ns``.  tuned: the tuned policy's
    {kind: ratio} for the what-if estimates (whatif.py).  user_view: what
    a user who is not an admin sees (userview.py).  step: a step ID the
    job must have (JOBID.STEP), else QueryError."""
    data = load(conn, job_id, cluster, first_seen_ns, settings)
    if step is not None:
        have = sorted({r[1] for r in data.steps}, key=_step_order)
        if step not in have:
            raise QueryError(f"job {job_id} has no step {step}; its steps: "
                             + (", ".join(have) or "none"))
    return shape(compute(data, settings, tuned, user_view), settings)


# --------------------------------------------------------------------------
# load

def load(conn, job_id: int, cluster: str | None = None,
         first_seen_ns: int | None = None, settings: Settings | None = None) -> JobData:
    """The job's rows; settings: the zones whose CO2 and price over time are
    read (None: none, every figure static)."""
    rows = _job_rows(conn, job_id, cluster, first_seen_ns)
    job = dict(zip(read_jobs.JOB_FIELDS, rows[0]))
    job_pk = job.pop("job_pk")
    steps = read_jobs.step_rows(conn, job_pk)
    return JobData(
        job=job, job_pk=job_pk, others=rows[1:], tags=read_jobs.tags(conn, job_pk),
        models=read_jobs.power_models(conn), steps=steps,
        phases=read_jobs.phase_rows(conn, job_pk),
        gpu_steps=read_jobs.gpu_step_rows(conn, job_pk),
        gpus=read_jobs.gpu_rows(conn, job_pk),
        gpu_phases=read_jobs.gpu_phase_rows(conn, job_pk),
        uncore=read_jobs.uncore_caps(conn, job_pk),
        shares=read_sharing.estimates(conn, [job_pk]),
        overlapped=read_sharing.overlapped(conn, [r[0] for r in steps]),
        slurm_job=read_jobs.slurm_job(conn, job_pk),
        slurm_steps=read_jobs.slurm_steps(conn, job_pk),
        grid=read_intensity.job_grid(conn, job_pk, settings) if settings is not None
        else {"have": False, "spans": None, "series": None, "lo_ns": None})


def _job_rows(conn, job_id, cluster, first_seen_ns) -> list:
    """The jobs with this ID, latest first; the one first seen at
    ``first_seen_ns`` first when given."""
    rows = read_jobs.jobs_with_id(conn, job_id, cluster)
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


# --------------------------------------------------------------------------
# compute

class _Acc:
    """The job's totals as compute adds its steps up (µJ, ns)."""
    __slots__ = ("cpu", "dram", "have_dram", "gpu", "node_ns", "unmeasured",
                 "nested", "saving", "not_est", "no_dram", "bases", "refs")

    def __init__(self):
        self.cpu = self.dram = self.node_ns = 0
        self.have_dram = False
        self.gpu = None           # counted GPU energy of steps whose total has it
        self.unmeasured = self.nested = self.not_est = 0
        self.saving = 0.0
        self.no_dram: dict = {}   # why DRAM is not measured -> steps
        self.bases: set = set()
        self.refs: set = set()


def compute(data: JobData, settings: Settings, tuned: dict | None = None,
            user_view: bool = False) -> dict:
    """The figures of data: {"job", "others", "steps", "totals", "runs",
    "caveats", "slurm", "what_if"} (shape puts them in order)."""
    rows, run_of = _ordered(data.steps)
    phases, hidden, gpu_rows = data.phases, set(), (data.gpu_steps, data.gpus,
                                                    data.gpu_phases)
    if user_view:
        gpu_rows = _user_gpus(rows, phases, gpu_rows)
        rows, phases, hidden = _user_rows(rows, phases)
    names = _step_names(rows, run_of)
    gpu_steps, gpu_phases = gpumod.for_job(*gpu_rows)
    inner: dict = {}
    for r in rows:
        if r[20] is not None:
            inner.setdefault(r[20], []).append(r)
    acc, steps, caveats = _Acc(), [], []
    for r in rows:
        d = _step(r, run_of, names, inner, phases, data, gpu_steps, gpu_phases,
                  hidden, settings, user_view)
        _count(acc, r, d, names)
        steps.append(d)
        caveats += _step_caveats(r, d, r[0] in data.overlapped)
    if not steps:
        raise QueryError(f"job {data.job['job_id']} has no steps in the database")
    caveats += _overlap_caveats(rows, names)
    totals = _totals(acc, steps, settings)
    _shared_nodes(data.shares, rows, steps, totals, caveats, settings)
    runs = incarnations.summary((run_of[r[0]], r[10], r[11], r[3], r[23]) for r in rows)
    for run in runs:
        run["start_time"], run["end_time"] = iso(run["start_ns"]), iso(run["end_ns"])
    slurm = slurmview.for_job(data.slurm_job, data.slurm_steps, steps)
    intensity = gridfigures.for_job(data.grid, rows, steps, totals, settings)
    caveats += _job_caveats(data, runs, slurm, intensity)
    return {"job": data.job, "tags": data.tags, "others": data.others, "steps": steps,
            "totals": totals, "runs": runs, "caveats": caveats, "slurm": slurm,
            "intensity": intensity,
            "what_if": whatif.for_job(steps, data.models, tuned, settings)}


def _step_order(step_id: str):
    return (0, int(step_id), "") if step_id.isdigit() else (1, 0, step_id)


def _ordered(rows: list) -> tuple[list, dict]:
    """(the step rows, each run's together, in step order; {step_pk: run}):
    a requeued job's runs (incarnations.py)."""
    run_of = incarnations.runs((r[0], r[1], r[3], r[INC_AT], r[10], r[11]) for r in rows)
    rows = sorted(rows, key=lambda r: (run_of[r[0]], r[2], _step_order(r[1]), r[3]))
    return rows, run_of


def _step_names(rows: list, run_of: dict) -> dict:
    """{step_pk: its name}: STEP, STEP+HET, and #RUN for a requeued job."""
    names = {r[0]: r[1] if not r[2] else f"{r[1]}+{r[2]}" for r in rows}
    if len(set(run_of.values())) > 1:
        names = {pk: f"{n}#{run_of[pk]}" for pk, n in names.items()}
    return names


def _step(r, run_of, names, inner, phases_by_step, data, gpu_steps, gpu_phases,
          hidden, settings, user_view) -> dict:
    """One step's dict: its own figures, what it counts, its phases."""
    (spk, step_id, het, node, node_model, ntasks, ncpus, _, policy, base,
     st, en, dur, cpu, dram, total, exit_code, wrapu, errs) = r[:19]
    ccpu, cdram, ctotal = r[21:24]
    d = {"step_id": step_id, "het_component": het, "node": node,
         "incarnation": run_of[spk], "node_model": node_model, "policy": policy,
         "ntasks": ntasks,
         "ncpus": ncpus, "start_time": iso(st), "exit_code": exit_code,
         "freq_mhz": None if base is None else base / 1000,
         "base_freq_mhz": None if base is None else base / 1000,
         "nominal_freq_mhz": None if r[24] is None else r[24] / 1000,
         "freq_control": r[26], "freq_min_ratio": r[27]}
    d.update(gpu_steps.get(spk, {}))
    # every figure of the line is of its total: the GPUs' part when in it
    d.update(add_gpu(derive(cpu, dram, dur, None, settings),
                     _gpu_part(r[INCLUDES_AT], cpu, dram, total), settings))
    d["dram_not_measured"] = r[NO_DRAM_AT]
    # the node's own meter (node_energy=), beside RAPL, never added to it
    d["energy_node_j"] = None if r[NO_DRAM_AT + 1] is None else r[NO_DRAM_AT + 1] / 1e6
    d["node_meter_sources"] = r[NO_DRAM_AT + 2]
    d["node_meter_integrated"] = None if r[NO_DRAM_AT + 3] is None else bool(r[NO_DRAM_AT + 3])
    # SMT cores the step had only some threads of: clocks left alone
    d["smt_aside_cpus"] = r[SMT_AT]
    d["inside_step"] = names.get(r[20])
    d["counted_energy_cpu_j"] = None if ccpu is None else ccpu / 1e6
    d["counted_energy_dram_j"] = None if cdram is None else cdram / 1e6
    d["counted_energy_total_j"] = None if ctotal is None else ctotal / 1e6
    d["counted"], d["note"] = _nesting_note(r, names, inner.get(spk, ()))
    phases, sav = step_savings(r, phases_by_step.get(spk, []), data.models, settings)
    d.update(sav)
    minp = userview.rules(*r[29:31])[0]
    for p in phases:
        if gpu_steps.get(spk, {}).get("gpus"):
            gpu_j, p["gpu_clock_mhz"] = gpu_phases.get((spk, p["seq"]), (None, None))
            add_gpu(p, gpu_j if gpumod.in_total(r[INCLUDES_AT]) else None, settings)
            p["energy_gpu_j"] = gpu_j
        p["total_includes"] = _includes(d, p)
        if (spk, p["seq"]) in data.uncore:
            p["uncore_max_mhz"] = data.uncore[(spk, p["seq"])] / 1000
        if (spk, p["seq"]) in hidden:
            p["energy_note"] = userview.note(minp)
    d["phases"] = phases
    d["total_includes"] = d.get("total_includes") or gpumod.INCLUDES["cpu+dram"]
    if user_view and cpu is None and dur < minp:
        d["energy_note"] = userview.note(minp)
    d["wrap_uncertain"] = bool(wrapu)
    d["errors"] = json.loads(errs)
    return d


def _count(acc: _Acc, r, d: dict, names: dict) -> None:
    """Add a step to the job's totals: what each step counts (nesting.py):
    a step inside another one on the same node is not added twice."""
    ccpu, cdram, ctotal, cdur = r[21], r[22], r[23], r[28]
    if r[13] is None:
        acc.unmeasured += 1
    if ccpu is not None:
        acc.cpu += ccpu
        acc.node_ns += cdur or 0
    if cdram is not None:
        acc.dram += cdram
        acc.have_dram = True
    if r[NO_DRAM_AT] is not None and ccpu is not None:
        acc.no_dram.setdefault(r[NO_DRAM_AT], []).append(names[r[0]] + " on " + r[3])
    if d.get("energy_gpu_j") is not None and ctotal is not None:
        # the counted total's GPU share (nesting counts it once)
        acc.gpu = (acc.gpu or 0) + ctotal - (ccpu or 0) - (cdram or 0)
    if r[20] is not None:
        acc.nested += 1
    if d["saving_status"] == "not estimated":
        acc.not_est += 1
    elif d["saving_status"] == "estimated":
        acc.saving += d["saving_j"]
        acc.bases.add(d["saving_basis"])
        acc.refs.add(d["saving_vs"])


def _step_caveats(r, d: dict, shared: bool) -> list[str]:
    """shared: another job's step on the node overlaps this one in time;
    _shared_nodes replaces that caveat where the store has an estimate."""
    label = f"step {r[1]} on {r[3]}"
    out = []
    if shared:
        out.append(SHARED_NODE_CAVEAT.format(label=label))
    if d.get("energy_note"):
        out.append(f"{label}: {d['energy_note']}")
    elif r[13] is None:
        out.append(f"{label}: energy not measured (see the errors)")
    if r[NO_DRAM_AT] is not None:
        out.append(f"{label}: DRAM not measured ({r[NO_DRAM_AT]}); its "
                   "total is the CPU's alone")
    if r[17]:
        out.append(f"{label}: a counter may have wrapped unseen; "
                   "energies are lower bounds")
    out += [f"{label}: {e}" for e in d["errors"]]
    return out


def _overlap_caveats(rows: list, names: dict) -> list[str]:
    by_node: dict = {}
    out = []
    for r in rows:
        by_node.setdefault(r[3], []).append(nesting.Step(
            r[0], r[1], r[2], r[10], r[11], r[12], r[13], r[14], r[15]))
    for node, group in by_node.items():
        pairs = nesting.overlaps(group)
        for a, b in pairs[:MAX_OVERLAP_CAVEATS]:
            out.append(f"steps {names[a]} and {names[b]} on {node} ran at "
                       "the same time: RAPL measures whole packages, so each"
                       " includes the other's energy and the job total "
                       "counts their overlap twice")
        if len(pairs) > MAX_OVERLAP_CAVEATS:
            out.append(f"... and {len(pairs) - MAX_OVERLAP_CAVEATS} more "
                       f"pairs of steps on {node} that ran at the same time")
    return out


def _totals(acc: _Acc, steps: list, settings: Settings) -> dict:
    """The job's totals.  DRAM not measured on some step: the job has no
    DRAM figure (a sum of the others' is not the job's) and its total is
    the CPU's alone."""
    totals = derive(acc.cpu, acc.dram if acc.have_dram and not acc.no_dram else None,
                    sum(s["duration_s"] for s in steps) * 1e9, None, settings,
                    acc.node_ns)
    # the GPUs' own energy is added to the scoped CPU + DRAM figure (a node
    # factor or overhead estimates the rest of a node from RAPL)
    add_gpu(totals, None if acc.gpu is None else acc.gpu / 1e6, settings)
    totals["dram_not_measured"] = _no_dram_note(acc.no_dram)
    totals.pop("duration_s")
    totals.pop("avg_power_w")
    totals["total_includes"] = gpumod.job_includes(steps)
    for k in ("bytes", "gib_per_s", "j_per_gib"):
        totals.pop(k)
    totals["steps_unmeasured"] = acc.unmeasured
    totals["steps_inside_others"] = acc.nested
    totals["saving_j"] = acc.saving if not acc.not_est else None
    totals["saving_status"] = ("not estimated" if acc.not_est else
                               "estimated" if acc.refs else "base clock")
    totals["saving_basis"] = "+".join(sorted(acc.bases)) if acc.bases else None
    totals["saving_vs"] = " / ".join(sorted(acc.refs)) if acc.refs else None
    return totals


def _job_caveats(data: JobData, runs: list, slurm, intensity: dict) -> list[str]:
    out = []
    job_id = data.job["job_id"]
    if len(runs) > 1:
        out.append(f"job {job_id} was requeued: it ran {len(runs)} times "
                   "under one job ID; the totals add every run, each run's "
                   "own energy is under Incarnations")
    if data.others:
        out.append(f"job ID {job_id} was used {len(data.others)} more time(s) "
                   "(ID recycled); pick one with --first-seen "
                   + ", ".join(str(o[_FIRST]) for o in data.others))
    if intensity.get("note"):
        out.append(intensity["note"])
    if slurm and slurm["energy_node_note"]:
        out.append(f"node meter (Slurm): no job figure: {slurm['energy_node_note']}")
    return out


def _shared_nodes(est: dict, rows: list, steps: list, totals: dict,
                  caveats: list, settings: Settings) -> None:
    """A job's steps that shared a package with another job: their
    attributed figures (read_sharing.estimates, docs/accounting.md "Shared
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
        if e is not None and e.sharing == "partial" and r[13] is not None:
            d["energy_basis"] = "whole package"
            d["package_cpus"] = f"{e.cpus[0]} of {e.cpus[1]} CPUs"
            basis = _stronger(basis, "whole package")
            caveats.append(f"{label}: its figures are the whole package's ({e.cpus[0]} "
                           f"of {e.cpus[1]} CPUs were the job's; the other jobs on "
                           "it are not in the store): not this job's energy alone")
            continue
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
            basis = _stronger(basis, "estimated")
            caveats.append(f"{label}: shared its packages with other jobs; its energy "
                           "is estimated (static part by allocated CPUs, the rest by "
                           "CPU time), the measured figures are the whole packages'")
        d_cpu += e.cpu_uj - r[13]
        d_dram += (e.dram_uj or 0) - (r[14] or 0) if r[14] is not None else 0
    totals["energy_basis"] = basis
    if d_cpu or d_dram:
        _add_shared_delta(totals, d_cpu, d_dram, settings)


#: a job's energy_basis: the least trustworthy of its steps'
_BASES = ("measured", "estimated", "whole package", "not estimated")


def _stronger(a: str, b: str) -> str:
    return max(a, b, key=_BASES.index)


def _add_shared_delta(totals: dict, d_cpu: int, d_dram: int, settings) -> None:
    """The job's totals with the estimated shares in place of the packages'
    measurements; the measured ones beside them (measured_*)."""
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


def _gpu_part(includes, cpu, dram, total):
    """The GPUs' part (J) of a step's total, None when not in it (gpus.py)."""
    uj = gpumod.counted_uj(includes, cpu, dram, total)
    return None if uj is None or cpu is None else uj / 1e6


def _includes(step: dict, phase: dict) -> str:
    """What a phase line's total holds: its step's parts, the GPUs only
    where the phase has their energy."""
    if phase.get("energy_gpu_j") is not None and gpumod.in_total_text(
            step.get("total_includes")):
        return step["total_includes"]
    return gpumod.INCLUDES["cpu+dram"]


def _user_gpus(rows, phases_by_step, gpu_rows) -> tuple:
    """The GPU rows (read_jobs.gpu_step_rows, gpu_rows, gpu_phase_rows) as a
    user sees them: rounded as RAPL's are, none for a step or phase shorter
    than its min_phase_ns (userview.py)."""
    steps, gpus, phases = gpu_rows
    rule = {r[0]: userview.rules(*r[29:31]) for r in rows}
    long_ = {r[0]: r[12] >= rule[r[0]][0] for r in rows}
    short = {(pr[0], pr[1]) for spk, prs in phases_by_step.items() for pr in prs
             if pr[6] < rule.get(spk, userview.rules(None, None))[0]}
    steps = [(spk, userview.gpu_uj(uj, long_.get(spk, True), rule[spk][1]), inc, why)
             for spk, uj, inc, why in steps]
    gpus = [(spk, i, u, m, userview.gpu_uj(uj, long_.get(spk, True), rule[spk][1]),
             *rest) for spk, i, u, m, uj, *rest in gpus]
    phases = [(spk, seq, userview.gpu_uj(uj, (spk, seq) not in short, rule[spk][1]),
               mhz) for spk, seq, uj, mhz in phases]
    return steps, gpus, phases


def _user_rows(rows, phases_by_step):
    """The step and phase rows as a user sees them (userview.py):
    (rows, phases_by_step, {(step_pk, seq) of phases shown without energy})."""
    out, phases, hidden = [], {}, set()
    for r in rows:
        minp, res = userview.rules(*r[29:31])
        out.append(userview.step_row(r, 12, (13, 14, 15), (21, 22, 23), minp, res,
                                     gpumod.in_total(r[INCLUDES_AT])))
        for pr in phases_by_step.get(r[0], []):
            row, h = userview.phase_row(pr, 6, 8, 9, minp, res)
            phases.setdefault(r[0], []).append(row)
            if h:
                hidden.add((r[0], pr[1]))
    return out, phases, hidden


def _nesting_note(r, names: dict, inner) -> tuple[str, str | None]:
    """(counted, note) of a step row: counted is "all" (its own energy is
    added), "rest" (steps inside it: only the rest of its energy is added),
    "none" (inside a step that counts it instead) or "not measured"."""
    inside, total, ctotal = r[20], r[15], r[23]
    if ctotal is None:
        return "not measured", None
    kids = ", ".join(names[k[0]] for k in inner)
    if inside is not None and ctotal == 0 and (total or 0) > 0:
        return "none", (f"inside step {names[inside]}, together with steps that "
                        "do not fit in its measurement (they ran at the same "
                        "time, or the counters disagree): not added to the job "
                        f"total (step {names[inside]}'s energy is, in full)")
    if inner and ctotal < (total or 0):
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


# --------------------------------------------------------------------------
# shape

def shape(c: dict, settings: Settings) -> dict:
    """compute's figures as the JSON-ready summary (docs/cli.md)."""
    job = dict(c["job"])
    for k in ("submit_time", "first_seen", "last_seen"):
        job[k] = iso(job[k + "_ns"])
    job["tags"] = c["tags"]
    others = [{"cluster": r[1], "submit_time_ns": r[3], "submit_time": iso(r[3]),
               "first_seen_ns": r[_FIRST], "first_seen": iso(r[_FIRST])}
              for r in c["others"]]
    note = settings.scope_note()
    if "GPU" in (c["totals"].get("total_includes") or ""):
        note += "; plus the GPUs' measured energy, where a step's total includes it"
    return {"job": job, "slurm": c["slurm"],
            "site": {"cluster": settings.cluster,
                     "co2_g_per_kwh": settings.co2_g_per_kwh,
                     "price_per_kwh": settings.price_per_kwh,
                     "currency": settings.currency},
            "scope": settings.scope, "scope_note": note,
            "totals": c["totals"], "steps": c["steps"], "other_submissions": others,
            "incarnations": c["runs"], "intensity": c["intensity"],
            "caveats": c["caveats"],
            "what_if": c["what_if"]}


CSV_COLUMNS = [
    "level", "step_id", "het_component", "node", "policy", "seq", "kind",
    "label", "depth", "duration_s", "energy_cpu_j", "energy_dram_j",
    "energy_gpu_j", "energy_total_j", "total_includes", "avg_power_w", "bytes", "gib_per_s", "j_per_gib",
    "freq_mhz", "kwh", "co2_g", "cost", "scope", "saving_j", "saving_pct",
    "saving_status", "inside_step", "counted", "counted_energy_total_j",
    "saving_basis", "saving_vs", "zone", "co2_g_per_kwh", "co2_method",
    "co2_covered_pct", "co2_estimated_pct", "co2_sources", "price_per_kwh", "price_method",
    "price_covered_pct", "price_estimated_pct", "price_sources"]


def csv_rows(summary: dict) -> list[dict]:
    """Flat rows (one per step, then its phases) for CSV."""
    out = []
    for s in summary["steps"]:
        base = {"step_id": s["step_id"], "het_component": s["het_component"],
                "node": s["node"], "policy": s["policy"], "scope": summary["scope"]}
        out.append({**s, "level": "step", "scope": summary["scope"]})
        for p in s["phases"]:
            out.append({**p, **base, "level": "phase"})
    return out
