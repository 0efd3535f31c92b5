"""What-if estimates (issue 9, items 7 and 8): what io-dvfs, ckpt-dvfs and
tuned would have saved or cost on steps that ran under `monitor` with
marked phases, from the fitted power model of the step's node model.

The policies are the plugin's (spank/js_parse.c, js_policy_kind_ratio;
docs/user-guide.md): a phase of a kind the policy maps runs at R x fmax,
any other kind keeps the enclosing phase's clock, the step's own clock
(and a ckpt-dvfs flush) is the original one.  R x fmax is capped at the
original clock (the plugin never raises a clock), fmax being the model's
(`model dvfs` sweeps up to the CPU's maximum), and R is at least the
step's min_ratio (step.freq_min_ratio, else the plugin's default 0.5).

Every joule is counted once, by the rule `job` and `compare` use
(report.phase_counts, nesting.count_phases): a phase contributes its own
energy and time minus those of the phases directly inside it (those count
under their own kind and clock); when the phases inside do not fit in it
(counters that disagree) it keeps its whole measurement and they count 0.
The measured phase is taken to have run at the original
clock (under monitor the governor may run below it: the estimate is then
an upper bound on the change); the estimate at clock f is E x P(f)/P(base)
x T(f)/T(base), with the model's T(f) (same duration without a slowdown
term).  The models are fitted on CPU + DRAM power, so the estimates are
of CPU + DRAM energy, like every measured figure; their kWh, MWh, CO2 and
cost have the site's scope (Settings.scoped_j, as `job` and `report`):
with node_overhead_w the node-seconds saved (or added) count at that
power, with node_factor the energy is scaled.
"""
from __future__ import annotations

import json

from . import nesting
from . import report as rep
from .store import INACTIVE_POLICIES, read_jobs, read_report

POLICIES = ("io-dvfs", "ckpt-dvfs", "tuned")
DEFAULT_MIN_RATIO = 0.5
ORIGINAL = 1.0            # ratio meaning: the step's original clock
NO_TUNED = ("no tuned map: give --tuned FILE (the file `joulestep model dvfs "
            "--save` wrote)")


class WhatIfError(ValueError):
    """A what-if that cannot be answered (message says why)."""


def load_tuned(path) -> dict:
    """{kind: ratio} from a `model dvfs --save` policy file."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        if doc.get("format") != "joulestep-policy" or doc.get("version") != 1:
            raise ValueError("not a joulestep-policy version 1 file")
        return {str(k): float(v["ratio"]) for k, v in doc["phases"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise WhatIfError(f"tuned file {path}: {e}") from None


def kind_ratio(policy: str, kind: str, min_ratio: float, tuned: dict | None):
    """The plugin's ratio for a phase kind: a number, ORIGINAL, or None
    (keep the enclosing clock)."""
    if policy == "io-dvfs":
        r = {"compress": 0.875, "write": 0.85}.get(kind)
        return None if r is None else max(r, min_ratio)
    if policy == "ckpt-dvfs":
        return {"checkpoint": min_ratio, "flush": ORIGINAL}.get(kind)
    if policy == "tuned":
        r = (tuned or {}).get(kind)
        return None if r is None else min(max(r, min_ratio), ORIGINAL)
    raise WhatIfError(f"what-if policy {policy!r}: allowed {', '.join(POLICIES)}")


def own_parts(raw: list) -> list:
    """The what-if view of one record's phases, each with its own part
    (report.phase_counts): raw (seq, kind, parent_seq, duration_ns, cpu_uj,
    dram_uj) -> {seq, kind, parent_seq, energy_j, duration_s}; energy_j
    None: not measured."""
    counts = rep.phase_counts([nesting.Phase(q, q, par, k, d, c, m)
                               for q, k, par, d, c, m in raw])
    return [{"seq": q, "kind": k, "parent_seq": par,
             "energy_j": None if counts[q].total_uj is None
             else counts[q].total_uj / 1e6,
             "duration_s": counts[q].duration_ns / 1e9}
            for q, k, par, _, _, _ in raw]


def effective_ratios(phases: list, policy, min_ratio, tuned) -> dict:
    """{seq: ratio} under the policy: a phase of an unmapped kind keeps its
    enclosing phase's clock, the outermost ones the original clock."""
    by_seq = {p["seq"]: p for p in phases}
    eff: dict = {}
    for p in phases:
        chain, cur = [], p["seq"]
        while cur in by_seq and cur not in eff and cur not in chain:
            r = kind_ratio(policy, by_seq[cur]["kind"], min_ratio, tuned)
            if r is not None:
                eff[cur] = r
                break
            chain.append(cur)
            cur = by_seq[cur]["parent_seq"]
        r = eff.get(cur, ORIGINAL)       # top reached (or a cycle): original
        for c in chain:
            eff[c] = r
    return eff


def estimate(e_j, t_s, ratio, base_khz, model) -> dict:
    """One part's estimate at ratio x fmax (capped at the original clock):
    freq_khz, saving_j (> 0 saved), extra_time_s (> 0 slower), status."""
    out = {"freq_khz": base_khz, "saving_j": 0.0, "extra_time_s": 0.0,
           "status": "unchanged"}
    if ratio >= ORIGINAL:
        return out
    f = min(ratio * model["fmax_khz"], base_khz)
    if f >= base_khz:
        return out
    rt = rep.time_ratio(model, f) / rep.time_ratio(model, base_khz)
    rp = rep.power_ratio(model, f) / rep.power_ratio(model, base_khz)
    return {"freq_khz": f, "saving_j": e_j * (1.0 - rp * rt),
            "extra_time_s": t_s * (rt - 1.0),
            "status": "estimated" if model.get("slowdown_alpha") is not None
            else "estimated (same duration assumed)"}


def eligible(step: dict) -> str | None:
    """Why a step gets no what-if (None: it does): only steps whose clock
    nobody changed (monitor) with marked phases."""
    if step["policy"] not in INACTIVE_POLICIES and step["policy"] is not None:
        return f"ran under {step['policy']}"
    if step.get("freq_control") == "slurm-cpu-freq":
        return "clocks set by Slurm --cpu-freq"
    if not step["phases"]:
        return "no marked phases"
    return None


def step_parts(step: dict, policy: str, models: dict, tuned) -> list:
    """The what-if parts of one eligible step: one per phase (its own
    part: the step view's phases carry it, own_parts), with kind, energy_j,
    duration_s and the estimate or the reason there is none."""
    min_ratio = step.get("min_ratio") or DEFAULT_MIN_RATIO
    eff = effective_ratios(step["phases"], policy, min_ratio, tuned)
    parts = []
    for p in step["phases"]:
        e, t, r = p["energy_j"], p["duration_s"], eff[p["seq"]]
        _, m = rep.find_model(models, step["node_model"], p["kind"])
        why = ("energy not measured" if e is None else
               "original clock not recorded" if step["base_khz"] is None else
               None if r >= ORIGINAL or m is not None else
               f"no power model for node model {step['node_model']} and "
               "these phase kinds (`joulestep model dvfs --save`)")
        if why:
            parts.append(_part(p, e, t, status="not estimated", why=why))
        else:
            parts.append(_part(p, e, t, **estimate(e, t, r, step["base_khz"], m)))
    return parts


def _part(p, e, t, **est) -> dict:
    return {"kind": p["kind"], "energy_j": e, "duration_s": t, "freq_khz": None,
            "saving_j": None, "extra_time_s": None, "why": None, **est}


def summarize(parts: list) -> dict:
    """Per phase kind and in total: measured energy and time of the parts,
    the estimated saving and extra time, and the energy not estimated
    (with the reasons)."""
    kinds: dict = {}
    for p in parts:
        k = kinds.setdefault(p["kind"], {
            "kind": p["kind"], "energy_j": 0.0, "duration_s": 0.0,
            "saving_j": 0.0, "extra_time_s": 0.0, "not_estimated_j": 0.0,
            "not_estimated_s": 0.0, "_st": set(), "_f": set(), "_why": []})
        k["energy_j"] += p["energy_j"] or 0.0
        k["duration_s"] += p["duration_s"]
        k["_st"].add(p["status"])
        if p["status"] == "not estimated":
            k["not_estimated_j"] += p["energy_j"] or 0.0
            k["not_estimated_s"] += p["duration_s"]
            k["_why"].append(p["why"])
            continue
        k["saving_j"] += p["saving_j"]
        k["extra_time_s"] += p["extra_time_s"]
        if p["status"] != "unchanged":
            k["_f"].add(round(p["freq_khz"]))
    rows = [_kind_row(k) for _, k in sorted(kinds.items())]
    tot = {x: sum(r[x] for r in rows) for x in
           ("energy_j", "duration_s", "saving_j", "extra_time_s", "not_estimated_j",
            "not_estimated_s")}
    est = tot["energy_j"] - tot["not_estimated_j"]
    tot["saving_pct"] = 100.0 * tot["saving_j"] / est if est > 0 else None
    st = {r["status"] for r in rows}
    status = ("not estimated" if st == {"not estimated"} else "partly estimated"
              if st & {"not estimated", "partly estimated"} else "unchanged"
              if st <= {"unchanged"} else "estimated")
    return {"status": status, "why": "; ".join(
        dict.fromkeys(r["why"] for r in rows if r["why"])) or None,
        "kinds": rows, "totals": tot}


def _kind_row(k: dict) -> dict:
    st, f, why = k.pop("_st"), k.pop("_f"), k.pop("_why")
    lowered = st - {"unchanged", "not estimated"}
    k["status"] = ("not estimated" if st == {"not estimated"} else
                   "partly estimated" if "not estimated" in st else
                   "unchanged" if not lowered else
                   lowered.pop() if len(lowered) == 1 else "estimated")
    k["freq_mhz"] = f.pop() / 1000 if len(f) == 1 else None
    k["why"] = "; ".join(dict.fromkeys(why)) or None
    est = k["energy_j"] - k["not_estimated_j"]
    k["saving_pct"] = 100.0 * k["saving_j"] / est if est > 0 and st != {
        "unchanged"} else None
    return k


def for_job(steps: list, models: dict, tuned, settings) -> dict | None:
    """`joulestep job`'s what-if: per policy, per phase kind, over the
    job's monitor steps with marked phases (job_summary step dicts).  None
    when no step qualifies."""
    todo = [_from_summary(s) for s in steps]
    todo = [s for s in todo if eligible(s) is None]
    if not todo:
        return None
    out = {"estimate": True, "scope": settings.scope,
           "scope_note": settings.scope_note(),
           "steps": [s["name"] for s in todo], "policies": []}
    for pol in POLICIES:
        if pol == "tuned" and tuned is None:
            out["policies"].append({"policy": pol, "status": "not estimated",
                                    "why": NO_TUNED, "kinds": [], "totals": None})
            continue
        parts = [x for s in todo for x in step_parts(s, pol, models, tuned)]
        out["policies"].append({"policy": pol, **_scoped(summarize(parts),
                                                         settings)})
    return out


def _from_summary(s: dict) -> dict:
    """The what-if view of a job_summary step dict: its phases' own parts
    are job_summary's counted figures (report.phase_counts)."""
    name = s["step_id"] if not s["het_component"] else \
        f"{s['step_id']}+{s['het_component']}"
    base = s.get("base_freq_mhz")
    return {"name": f"{name} on {s['node']}", "policy": s["policy"],
            "freq_control": s.get("freq_control"), "node_model": s["node_model"],
            "base_khz": None if base is None else base * 1000,
            "min_ratio": s.get("freq_min_ratio"),
            "phases": [{"seq": p["seq"], "kind": p["kind"],
                        "parent_seq": p["parent_seq"],
                        "duration_s": p["counted_duration_s"],
                        "energy_j": p["counted_energy_total_j"]}
                       for p in s["phases"]]}


# --------------------------------------------------------------------------
# `joulestep report --what-if POLICY`

def _fleet_steps(conn, by, since_ns, until_ns, cluster):
    """(group key, job_pk, step view) of every step in the period whose
    clock no policy changed and that has marked phases (own_parts)."""
    cur = None
    for row in read_report.fleet_rows(conn, by, since_ns, until_ns, cluster):
        (g, spk, jpk, nm, pol, ctl, base, mr, seq, kind, parent, dur, cpu,
         dram) = row
        if cur is None or cur[0] != spk:
            if cur is not None:
                yield _with_parts(*cur[1:])
            cur = (spk, g, jpk, {"policy": pol, "freq_control": ctl,
                                 "node_model": nm, "base_khz": base,
                                 "min_ratio": mr, "phases": []})
        cur[3]["phases"].append((seq, kind, parent, dur, cpu, dram))
    if cur is not None:
        yield _with_parts(*cur[1:])


def _with_parts(g, jpk, st):
    return g, jpk, {**st, "phases": own_parts(st["phases"])}


def fleet(conn, settings, policy: str, by: str = "user", since_ns=None,
          until_ns=None, cluster=None, tuned: dict | None = None) -> dict:
    """What `policy` would have saved over a period, per group: only steps
    that ran under monitor (no policy changed their clock) with marked
    phases count.  Energies in J, kWh and MWh, CO2 and cost of the saving
    with the site's factors; extra_time_s is summed step time (per node)."""
    if policy not in POLICIES:
        raise WhatIfError(f"--what-if {policy}: allowed {', '.join(POLICIES)}")
    if policy == "tuned" and tuned is None:
        raise WhatIfError(f"--what-if tuned: {NO_TUNED}")
    models = read_jobs.power_models(conn)
    groups: dict = {}
    every = []
    for g, jpk, st in _fleet_steps(conn, by, since_ns, until_ns, cluster):
        if eligible(st) is not None:
            continue
        parts = step_parts(st, policy, models, tuned)
        d = groups.setdefault(g, {"jobs": set(), "steps": 0, "parts": []})
        d["jobs"].add(jpk)
        d["steps"] += 1
        d["parts"] += parts
        every += parts
    rows = [_money({"key": "(none)" if g is None else g, "jobs": len(d["jobs"]),
                    "steps": d["steps"], **summarize(d["parts"])["totals"]},
                   settings) for g, d in groups.items()]
    rows.sort(key=lambda r: (-r["saving_j"], str(r["key"])))
    allsum = summarize(every)
    njobs = len(set().union(*(d["jobs"] for d in groups.values()))) if groups else 0
    totals = _money({"jobs": njobs, "steps": sum(r["steps"] for r in rows),
                     **allsum["totals"]}, settings)
    return {"what_if": policy, "estimate": True, "scope": settings.scope,
            "scope_note": settings.scope_note(), "by": by,
            "since": rep.iso(since_ns), "until": rep.iso(until_ns),
            "cluster": cluster, "currency": settings.currency,
            "co2_g_per_kwh": settings.co2_g_per_kwh,
            "price_per_kwh": settings.price_per_kwh,
            "totals": totals,
            "kinds": [_money(k, settings) for k in allsum["kinds"]],
            "groups": rows}


def _scoped(summary: dict, settings) -> dict:
    """A summarize() result with _money on its kinds and totals."""
    return {**summary, "kinds": [_money(k, settings) for k in summary["kinds"]],
            "totals": _money(summary["totals"], settings)}


def _money(d: dict, settings) -> dict:
    """Add the saving in kWh, MWh, g CO2 and cost (site factors), and the
    energies in MWh, all with the site's scope (Settings.scoped_j): the
    saving's node-seconds are the time saved (-extra_time_s)."""
    kwh = settings.scoped_j(d["saving_j"], -d["extra_time_s"]) / 3.6e6
    return {**d, "saving_kwh": kwh, "saving_mwh": kwh / 1000,
            "co2_g": kwh * settings.co2_g_per_kwh,
            "cost": kwh * settings.price_per_kwh,
            "energy_mwh": settings.scoped_j(d["energy_j"], d["duration_s"]) / 3.6e9,
            "not_estimated_mwh": settings.scoped_j(
                d["not_estimated_j"], d["not_estimated_s"]) / 3.6e9}


CSV_COLUMNS = ["key", "jobs", "steps", "energy_j", "energy_mwh", "duration_s",
               "saving_j", "saving_pct", "saving_kwh", "saving_mwh", "co2_g",
               "cost", "scope", "extra_time_s", "not_estimated_j"]
