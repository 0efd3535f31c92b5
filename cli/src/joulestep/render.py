"""Text renderings (80 columns) of the dicts built in report.py."""
from __future__ import annotations

from .output import (WIDTH, co2_text, energy_text, local_time, money_cell, money_text,
                     num, num_fixed, table, wrap)


def _wrap(text: str, indent: str = "") -> list[str]:
    return wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ")


def _saving(d: dict) -> str:
    st = d.get("saving_status")
    if st is None or st in ("base clock", "not measured"):
        return "-"
    if d.get("saving_j") is None:
        return "no model"        # not estimated: the note under the table says why
    pct = d.get("saving_pct")
    return f"{num(d['saving_j'])}J" + (f" {pct:.0f}%" if pct is not None else "")


def _gpu_lines(steps: list) -> list[str]:
    """GPU energy per step and per phase, for steps with GPUs (gpus.py)."""
    from .gpus import step_lines
    out = []
    for st in steps:
        lines = step_lines(st)
        if not lines:
            continue
        out += ["", f"GPUs of step {st['step_id']} on {st['node']} (GPU "
                f"{num(st.get('energy_gpu_j'))} J; total includes "
                f"{st.get('total_includes') or 'CPU + DRAM'}):"] + lines
        for p in st["phases"]:
            if "energy_gpu_j" in p:
                clock = (f" (clock <= {p['gpu_clock_mhz']} MHz)"
                         if p.get("gpu_clock_mhz") else "")
                out.append(f"  phase {p['seq']} {_phase_name(p)}: GPU "
                           f"{num(p['energy_gpu_j'])} J{clock}")
    return out


def _dram(step: dict, j) -> str:
    """A DRAM figure; "n/m" (not measured) where the step's node has no
    dram zone, never a 0 or a blank that reads as one."""
    return "n/m" if step.get("dram_not_measured") and j is None else num(j)


def _incarnation_lines(runs: list, utc: bool) -> list[str]:
    """A requeued job's runs (incarnations.py): one line each, never one
    figure for two runs without them."""
    out = [""] + _wrap(f"Incarnations: the job was requeued and ran {len(runs)} "
                       "times (the energy above adds them; STEP#N is run N):")
    rows = [[str(r["incarnation"]), local_time(r["start_time"], utc),
             local_time(r["end_time"], utc), str(r["steps_n"]),
             ",".join(r["nodes"]), num(r["energy_total_j"])
             + (f" ({r['steps_unmeasured']} unmeasured)" if r["steps_unmeasured"] else "")]
            for r in runs]
    out.append(table(["RUN", "STARTED", "ENDED", "STEPS", "NODES", "TOTAL_J"], rows,
                     right={0, 3, 5}))
    return out


#: the job's headline, by its energy_basis (jobsummary.py)
_ENERGY_HEAD = {"estimated": "Energy (estimated: shared node) ",
                "whole package": "Energy (whole packages of a shared node, not the "
                                 "job's alone) "}


def _shared_lines(steps: list) -> list[str]:
    """The attributed figures of steps that shared their packages, and the
    whole packages' figures of steps whose neighbours are not known."""
    out = []
    for st in steps:
        if st.get("energy_basis") == "whole package":
            out += _wrap(f"Shared node, step {st['step_id']} on {st['node']}: whole "
                         f"package figure, {num(st['energy_total_j'])} J "
                         f"({st['package_cpus']} were the job's; the other jobs on "
                         "it are not in the store): not this job's energy alone")
        if st.get("energy_basis") == "estimated":
            out += _wrap(f"Shared node, step {st['step_id']} on {st['node']}: estimated "
                         f"{num(st['estimated_energy_total_j'])} J (CPU "
                         f"{num(st['estimated_energy_cpu_j'])} J, DRAM "
                         f"{num(st['estimated_energy_dram_j'])} J); the table's "
                         "figures are measured, the whole packages'")
    return out


def job_text(s: dict, utc: bool = False) -> str:
    """`joulestep job`'s text: the job's header and totals, its steps, their
    phases, then the notes and caveats."""
    lines = _job_head_lines(s, utc)
    runs = s.get("incarnations") or []
    if len(runs) > 1:
        lines += _incarnation_lines(runs, utc)
    lines.append("")
    lines += _job_step_lines(s, len(runs) > 1)
    lines += _job_phase_lines(s)
    lines += _job_note_lines(s)
    return "\n".join(lines) + "\n"


def _job_head_lines(s: dict, utc: bool) -> list[str]:
    """The job, its totals, and what they include or leave out."""
    j, site, t = s["job"], s["site"], s["totals"]
    cur = site["currency"]
    tags = " ".join(f"{k}={v}" for k, v in j["tags"].items())
    lines = [
        f"Job {j['job_id']}" + (f" ({j['name']})" if j["name"] else "")
        + f" on {j['cluster']}: user {j['user'] or '(none)'}, account "
        f"{j['account'] or '(none)'}, partition {j['partition'] or '(none)'}"
        + (f", qos {j['qos']}" if j.get("qos") else ""),
        (f"Submitted {local_time(j['submit_time'], utc)}" if j["submit_time"] else
         f"First seen {local_time(j['first_seen'], utc)}")
        + (f"; tags: {tags}" if tags else ""),
        "",
        _ENERGY_HEAD.get(t.get("energy_basis"), "Energy ")
        + f"{num(t['energy_total_j'])} J (CPU {num(t['energy_cpu_j'])} J, "
        + (f"DRAM {num(t['energy_dram_j'])} J" if not t.get("dram_not_measured")
           else "DRAM not measured")
        + (f", GPU {num(t['energy_gpu_j'])} J" if t.get("energy_gpu_j") is not None else "")
        + f"); total includes {t.get('total_includes') or 'CPU + DRAM'}",
        f"     = {energy_text(t['kwh'])}, {co2_text(t['co2_g'])} CO2, "
        f"{money_text(t['cost'], cur)}",
    ]
    lines[2:2] = _slurm_state_lines(s.get("slurm"))
    lines += _slurm_energy_lines(s.get("slurm"), t)
    if t.get("measured_energy_total_j") is not None:
        lines += _wrap(f"Measured {num(t['measured_energy_total_j'])} J (CPU "
                       f"{num(t['measured_energy_cpu_j'])} J): whole packages, other jobs' "
                       "energy included; never add it up across jobs")
    if t.get("dram_not_measured"):
        lines += _wrap(f"DRAM not measured on {t['dram_not_measured']}")
    if t.get("steps_unmeasured"):
        lines.append(f"({t['steps_unmeasured']} step(s) without an energy "
                     "measurement are not in these totals)")
    if t["saving_status"] == "estimated":
        basis = (t.get("saving_basis") or "cpu+dram").upper()
        lines += _wrap(f"Estimated saving vs {t.get('saving_vs') or 'original clock'}"
                       f": {num(t['saving_j'])} J (fitted power model applied "
                       f"to the {basis} energy it was fitted on)")
    elif t["saving_status"] == "not estimated":
        why = "; ".join(dict.fromkeys(st["saving_note"] for st in s["steps"]
                                      if st.get("saving_note"))) or \
            "no fitted power model; see `joulestep model dvfs --save`"
        lines += _wrap(f"Saving vs original clock: not estimated ({why})")
    return lines


def _job_step_lines(s: dict, requeued: bool) -> list[str]:
    """The steps' table and the lines about single steps."""
    rows, lines = [], []
    for st in s["steps"]:
        name = st["step_id"] if not st["het_component"] else \
            f"{st['step_id']}+{st['het_component']}"
        if requeued:       # which run of the requeued job
            name += f"#{st['incarnation']}"
        rows.append([name, st["node"], st["policy"] or "-",
                     num(st["duration_s"]), num(st["energy_cpu_j"]),
                     _dram(st, st["energy_dram_j"]), num(st["energy_total_j"]),
                     num(st["avg_power_w"]), num(st["freq_mhz"]),
                     num_fixed(None if st["kwh"] is None else st["kwh"] * 1000),
                     _saving(st)])
    lines.append(table(["STEP", "NODE", "POLICY", "TIME_S", "CPU_J", "DRAM_J",
                        "TOTAL_J", "AVG_W", "MHZ", "WH", "SAVING"], rows,
                       right={3, 4, 5, 6, 7, 8, 9, 10}))
    lines += _gpu_lines(s["steps"])
    lines += _shared_lines(s["steps"])
    for st in s["steps"]:
        if st.get("node_meter_sources"):
            lines += _wrap(f"Node meter, step {st['step_id']} on {st['node']}: "
                           + (f"{num(st['energy_node_j'])} J "
                              f"({st['node_meter_sources']}"
                              f"{', integrated power' if st['node_meter_integrated'] else ''})"
                              f" against RAPL's {num(st['energy_total_j'])} J"
                              if st["energy_node_j"] is not None else
                              f"not measured ({st['node_meter_sources']})"))
    for st in s["steps"]:
        capped = [f"{p['seq']} {_phase_name(p)}" for p in st["phases"]
                  if p.get("uncore_max_mhz")]
        if capped:
            mhz = {p["uncore_max_mhz"] for p in st["phases"] if p.get("uncore_max_mhz")}
            lines += _wrap(f"Uncore: step {st['step_id']} on {st['node']} capped its "
                           f"packages' uncore at {'/'.join(num(m) for m in sorted(mhz))} MHz "
                           f"in phase(s) {', '.join(capped)}")
    for st in s["steps"]:
        if st.get("smt_aside_cpus"):
            lines += _wrap(f"SMT: step {st['step_id']} on {st['node']} left the clock "
                           f"of CPUs {st['smt_aside_cpus']} alone (their cores have "
                           "threads that are not the step's)")
    lines += _saving_legend(s["steps"])
    if any(st.get("dram_not_measured") for st in s["steps"]):
        lines.append("(n/m: DRAM not measured, no dram zone on the node; TOTAL_J is "
                     "the CPU's)")
    return lines


def _job_phase_lines(s: dict) -> list[str]:
    """A table of each step's phases, and the phases shown without energy."""
    lines = []
    for st in s["steps"]:
        if not st["phases"]:
            continue
        lines += ["", f"Phases of step {st['step_id']} on {st['node']}:"]
        rows = []
        for p in st["phases"]:
            kind = "  " * p["depth"] + p["kind"] + (
                f":{p['label']}" if p["label"] else "")
            rows.append([str(p["seq"]), kind, num(p["duration_s"]),
                         num(p["energy_cpu_j"]), _dram(st, p["energy_dram_j"]),
                         num(p["energy_total_j"]), num(p["avg_power_w"]),
                         num(None if p["bytes"] is None else p["bytes"] / 2**30),
                         num(p["gib_per_s"]), num(p["j_per_gib"]),
                         num(p["freq_mhz"]), _saving(p)])
        lines.append(table(["SEQ", "PHASE", "TIME_S", "CPU_J", "DRAM_J", "TOTAL_J",
                            "AVG_W", "GIB", "GIB/S", "J/GIB", "MHZ", "SAVING"], rows,
                           right={0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}))
    hidden = [(st, p) for st in s["steps"] for p in st["phases"]
              if p.get("energy_note")]
    if hidden:
        lines += ["", "Phases shown without energy (RAPL side channel; "
                  "docs/security.md):"]
        for st, p in hidden:
            lines += _wrap(f"- step {st['step_id']} on {st['node']}: "
                           f"{_phase_name(p)} (seq {p['seq']}): {p['energy_note']}",
                           "  ")
    return lines


def _job_note_lines(s: dict) -> list[str]:
    """Nested phases, the what-if, steps inside steps, caveats, the scope."""
    lines = []
    lines += _nested_phase_notes(s["steps"])
    if s.get("what_if"):
        lines += [""] + whatif_job_lines(s["what_if"])
    notes = [st for st in s["steps"] if st.get("note")]
    if notes:
        lines += ["", "Steps inside other steps (RAPL measures the whole node;"
                  " counted once):"]
        for st in notes:
            name = st["step_id"] if not st["het_component"] else \
                f"{st['step_id']}+{st['het_component']}"
            lines += _wrap(f"- step {name} on {st['node']}: {st['note']}", "  ")
    if s["caveats"]:
        lines += ["", "Caveats:"]
        for c in s["caveats"]:
            lines += _wrap(f"- {c}", "  ")
    lines += [""] + _wrap(s["scope_note"] + ". Per-phase kWh, CO2 and cost: "
                          "--format json or csv.")
    return lines




def _saving_legend(steps: list) -> list[str]:
    """What the SAVING column's words mean, when the tables show one (issue
    25: `n/est` read as an error)."""
    cells = {_saving(d) for st in steps for d in (st, *st["phases"])}
    if "no model" not in cells:
        return []
    return _wrap("(SAVING: no model = no fitted power model for this node "
                 "model and phase kind, so no estimate of what the lower clock "
                 "saved (`joulestep model dvfs --save` fits one); - = nothing "
                 "to estimate: ran at its base clock, or not measured)")


def _slurm_state_lines(sl: dict | None) -> list[str]:
    """State, ExitCode, Elapsed and NNodes as Slurm's accounting has them
    (stored by ingest from sacct; none without slurmdbd)."""
    if not sl:
        return []
    from .slurmview import elapsed_text
    return [f"State {sl['state'] or '-'}, ExitCode {sl['exit_code'] or '-'}, "
            f"Elapsed {elapsed_text(sl['elapsed_s'])}, NNodes "
            f"{'-' if sl['nnodes'] is None else sl['nnodes']} (Slurm accounting)"]


def _slurm_energy_lines(sl: dict | None, t: dict) -> list[str]:
    """The node's meter as Slurm's acct_gather_energy read it, beside (never
    added to) joulestep's total; per step where Slurm has one."""
    if not sl or not any(st["energy_node_j"] is not None for st in sl["steps"]):
        return []
    out = _wrap(
        "Node meter (Slurm acct_gather_energy, whole nodes): "
        + (f"{num(sl['energy_node_j'])} J over the same steps, against "
           f"{num(t['energy_total_j'])} J above (not added to it)"
           if sl["energy_node_j"] is not None else
           f"no job figure ({sl['energy_node_note'] or 'see the steps'})"))
    for st in sl["steps"]:
        if st["energy_node_j"] is None:
            continue
        out += _wrap(f"  step {st['step_id']}: {num(st['energy_node_j'])} J on "
                     f"{st['nnodes'] or '?'} node(s)"
                     + (f", joulestep {num(st['energy_joulestep_j'])} J"
                        if st["energy_joulestep_j"] is not None else
                        ", not recorded by joulestep"), "  ")
    return out


def _phase_name(p: dict) -> str:
    return p["kind"] + (f":{p['label']}" if p["label"] else "")


def _nested_phase_notes(steps: list) -> list[str]:
    """Lines naming each phase marked inside another (indented above)."""
    out = []
    for st in steps:
        by_seq = {p["seq"]: p for p in st["phases"]}
        for p in st["phases"]:
            outer = by_seq.get(p.get("inside_phase"))
            if outer is None:
                continue
            own = outer.get("counted_energy_total_j")
            out += _wrap(f"- step {st['step_id']} on {st['node']}: {_phase_name(p)} "
                         f"(seq {p['seq']}) ran inside {_phase_name(outer)} (seq "
                         f"{outer['seq']}): its energy is part of that phase's "
                         f"{num(outer['energy_total_j'])} J"
                         + (f", which adds only the other {num(own)} J" if own is not None
                            else ""), "  ")
    if out:
        out = ["", "Phases inside other phases (counted once):"] + out
    return out


def report_text(r: dict, utc: bool = False) -> str:
    t = r["totals"]
    span = (f"{local_time(r['since'], utc) or 'start'} .. "
            f"{local_time(r['until'], utc) or 'now'}")
    lines = [
        f"Energy report by {r['by']}, {span}"
        + (f", cluster {r['cluster']}" if r["cluster"] else ""),
        {"estimated": "Total (estimated: shared nodes) ",
         "whole package": "Total (whole packages of shared nodes on some steps) "}.get(
            t.get("energy_basis"), "Total ")
        + f"{num(t['energy_total_j'])} J = {energy_text(t['kwh'])}, "
        f"{co2_text(t['co2_g'])} CO2, {money_text(t['cost'], r['currency'])}",
        f"Total includes {t['total_includes']}"
        + (f"; GPU {num(t['energy_gpu_j'])} J" if t["energy_gpu_j"] is not None
           else ""),
        f"{t['jobs']} jobs, {t['steps']} steps. Frequency policy adoption: "
        f"{t['policy_steps_pct']:.1f} % of steps,",
        f"{t['policy_energy_pct']:.1f} % of energy",
        f"Records lost (spool and fallback not writable): {t.get('records_lost', 0)}",
        "",
    ]
    rows = []
    # one unit for the energy column, from the total: Wh below 1 kWh
    wh = t["kwh"] < 1
    scale, unit = (1000, "WH") if wh else (1, "KWH")
    for g in r["top"]:
        rows.append([str(g["key"]), str(g["jobs"]), str(g["steps"]),
                     _gpu_cell(g), num(g["energy_total_j"]),
                     _includes_cell(g), f"{g['share_pct']:.1f}",
                     num_fixed(g["kwh"] * scale), money_cell(g["cost"]),
                     num(g["avg_power_w"]), f"{g['policy_steps_pct']:.0f}"])
    rest = r["groups"][len(r["top"]):]
    if rest:
        e = sum(g["energy_total_j"] for g in rest)
        rows.append([f"({len(rest)} others)", str(sum(g["jobs"] for g in rest)),
                     str(sum(g["steps"] for g in rest)),
                     _gpu_cell({"energy_gpu_j": sum(g["energy_gpu_j"] or 0 for g in rest),
                                "gpu_steps": sum(g["gpu_steps"] for g in rest),
                                "gpu_not_measured_steps": sum(
                                    g["gpu_not_measured_steps"] for g in rest)}),
                     num(e), "-",
                     f"{sum(g['share_pct'] for g in rest):.1f}",
                     num_fixed(sum(g["kwh"] for g in rest) * scale),
                     money_cell(sum(g["cost"] for g in rest)), "-",
                     "-"])
    head = [r["by"].upper(), "JOBS", "STEPS", "GPU_J", "ENERGY_J", "INCLUDES",
            "SHARE%", unit, "COST_" + r["currency"].upper(), "AVG_W", "POLICY%"]
    if t["total_includes"] == "CPU + DRAM":
        # every total holds CPU + DRAM (the headline says so): no GPU_J,
        # no INCLUDES column
        head, *rows = [[x for i, x in enumerate(row) if i not in (3, 5)]
                       for row in [head] + rows]
    lines.append(table(head, rows))
    if t.get("dram_not_measured_steps"):
        lines += [""] + _wrap(f"DRAM not measured on {t['dram_not_measured_steps']} of "
                              f"{t['steps']} steps (no dram zone on their nodes, as on "
                              "AMD): their energy is the CPU's alone, and no DRAM "
                              "total is given.")
    if t.get("gpu_not_measured_steps"):
        lines += [""] + _wrap(f"GPUs not measured on {t['gpu_not_measured_steps']} of "
                              f"{t['gpu_steps'] + t['gpu_not_measured_steps']} GPU "
                              "steps (a GPU split by MIG or shared with another job, "
                              "an uncertain counter, or no vendor library: see `joulestep "
                              "job`): their totals are CPU + DRAM, and GPU_J leaves them out.")
    if any(g["total_includes"].endswith(")") for g in r["top"]):
        lines += [""] + _wrap("INCLUDES: what ENERGY_J holds (cpu, dram, gpu); * some "
                              "steps' DRAM or GPUs not measured (--format json: "
                              "total_includes).")
    lines += [""] + _wrap(r["scope_note"] + ".")
    return "\n".join(lines) + "\n"


def _gpu_cell(g: dict) -> str:
    """report's GPU_J: the GPU energy in the total, n/m where no step's GPUs
    were measured, - for no GPU steps."""
    if g["gpu_steps"]:
        return num(g["energy_gpu_j"])
    return "n/m" if g["gpu_not_measured_steps"] else "-"


def _includes_cell(g: dict) -> str:
    """report's INCLUDES: "cpu+dram+gpu", "*" when some steps lack a part."""
    text = g["total_includes"]
    head = text.split(" (", 1)[0]
    return head.lower().replace(" ", "") + ("*" if text != head else "")


_SHORT = {"estimated": "est", "estimated (same duration assumed)": "est, same t",
          "unchanged": "unchanged", "not estimated": "no model",
          "partly estimated": "partial"}


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1f}"


def _whatif_row(label: str, kind: str, k: dict) -> list[str]:
    n_est = k["status"] == "not estimated"
    return [label, kind, num(k["duration_s"]), num(k["energy_j"]),
            num(k.get("freq_mhz")), "-" if n_est else num(k["saving_j"]),
            _pct(k["saving_pct"]), "-" if n_est else num(k["extra_time_s"]),
            _SHORT.get(k["status"], k["status"])]


def whatif_job_lines(w: dict) -> list[str]:
    """`job`'s what-if section: per policy and phase kind."""
    lines = _wrap("What if this job had run under a frequency policy? "
                  "ESTIMATE from the fitted power models, not measured (CPU+"
                  "DRAM energy; the phases taken to have run at the original "
                  "clock; a phase's own part, without the phases inside it; "
                  "kinds a policy leaves alone not listed); steps "
                  f"{', '.join(w['steps'])}:")
    rows, notes = [], {}
    for pol in w["policies"]:
        for k in pol["kinds"]:
            if k["status"] != "unchanged":
                rows.append(_whatif_row(pol["policy"], k["kind"], k))
        if pol["totals"] is None:
            rows.append([pol["policy"], "(all)"] + ["-"] * 6 + ["no model"])
        else:
            rows.append(_whatif_row(pol["policy"], "(all)",
                                    {**pol["totals"], "status": pol["status"]}))
        if pol["why"]:
            notes[pol["policy"]] = pol["why"]
    lines.append(table(["POLICY", "KIND", "TIME_S", "ENERGY_J", "MHZ", "SAVING_J",
                        "SAVING%", "EXTRA_S", "STATUS"], rows,
                       right={2, 3, 4, 5, 6, 7}))
    for pol, why in notes.items():
        lines += _wrap(f"- {pol}: not estimated: {why}", "  ")
    return lines


def whatif_report_text(r: dict, top: int, utc: bool = False) -> str:
    """`report --what-if`: totals, the top groups, and per phase kind."""
    t, cur = r["totals"], r["currency"]
    span = (f"{local_time(r['since'], utc) or 'start'} .. "
            f"{local_time(r['until'], utc) or 'now'}")
    lines = _wrap(f"What if {r['what_if']} had run instead of monitor, by "
                  f"{r['by']}, {span}"
                  + (f", cluster {r['cluster']}" if r["cluster"] else ""))
    lines += _wrap(f"ESTIMATE from the fitted power models, not measured: the "
                   f"phases of the {t['jobs']} jobs ({t['steps']} steps) that "
                   f"ran under monitor and marked phases, "
                   f"{num_fixed(t['energy_mwh'])} MWh.")
    lines += _wrap(f"Saving {num_fixed(t['saving_mwh'])} MWh ({_pct(t['saving_pct'])} "
                   f"% of the estimated phases' CPU+DRAM energy) = "
                   f"{num_fixed(t['co2_g'] / 1000)} kg "
                   f"CO2, {money_text(t['cost'], cur)}; step time "
                   f"{'+' if t['extra_time_s'] >= 0 else ''}"
                   f"{num(t['extra_time_s'] / 3600)} h.")
    if t["not_estimated_j"]:
        why = "; ".join(dict.fromkeys(k["why"] for k in r["kinds"] if k["why"]))
        lines += _wrap(f"Not estimated: {num_fixed(t['not_estimated_mwh'])} MWh:"
                       f" {why}.")
    rows = [[str(g["key"]), str(g["jobs"]), str(g["steps"]), num_fixed(g["energy_mwh"]),
             num_fixed(g["saving_mwh"]), _pct(g["saving_pct"]), num_fixed(g["co2_g"] / 1000),
             money_cell(g["cost"]), num(g["extra_time_s"] / 3600)]
            for g in r["groups"][:top]]
    if len(r["groups"]) > top:
        lines.append(f"(the top {top} of {len(r['groups'])} groups; all with "
                     "--format json|csv)")
    lines += ["", table([r["by"].upper(), "JOBS", "STEPS", "PHASE_MWH",
                         "SAVING_MWH", "SAVING%", "CO2_KG", "COST", "EXTRA_H"],
                        rows), "", "Per phase kind (a phase's own part):"]
    rows = [[k["kind"], num_fixed(k["energy_mwh"]), num(k["freq_mhz"]),
             num_fixed(k["saving_mwh"]) if k["status"] != "not estimated" else "-",
             _pct(k["saving_pct"]), num(k["extra_time_s"] / 3600)
             if k["status"] != "not estimated" else "-",
             _SHORT.get(k["status"], k["status"])] for k in r["kinds"]]
    lines.append(table(["KIND", "PHASE_MWH", "MHZ", "SAVING_MWH", "SAVING%",
                        "EXTRA_H", "STATUS"], rows))
    lines += [""] + _wrap(r["scope_note"] + " (SAVING% is of the CPU+DRAM "
                          "energy).")
    return "\n".join(lines) + "\n"
