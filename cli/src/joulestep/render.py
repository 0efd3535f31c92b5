"""Text renderings (80 columns) of the dicts built in report.py."""
from __future__ import annotations

from .output import (WIDTH, co2_text, energy_text, local_time, money_cell, money_text,
                     num, table, wrap)
from .render_units import fmt


def _j(x) -> str:
    """Energy in prose: "29.0 MJ" (render_units.fmt)."""
    return fmt(x, "J", " ")


def _wrap(text: str, indent: str = "") -> list[str]:
    return wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ")


def _saving(d: dict) -> str:
    st = d.get("saving_status")
    if st is None or st in ("base clock", "not measured"):
        return "-"
    if d.get("saving_j") is None:
        return "no model"        # not estimated: the note under the table says why
    pct = d.get("saving_pct")
    return fmt(d["saving_j"], "J") + (f" {pct:.0f}%" if pct is not None else "")


def _gpu_lines(steps: list) -> list[str]:
    """GPU energy per step and per phase, for steps with GPUs (gpus.py)."""
    from .gpus import step_lines
    out = []
    for st in steps:
        lines = step_lines(st)
        if not lines:
            continue
        out += ["", f"GPUs of step {st['step_id']} on {st['node']} (GPU "
                f"{_j(st.get('energy_gpu_j'))}; total includes "
                f"{st.get('total_includes') or 'CPU + DRAM'}):"] + lines
        for p in st["phases"]:
            if "energy_gpu_j" in p:
                clock = (f" (clock <= {p['gpu_clock_mhz']} MHz)"
                         if p.get("gpu_clock_mhz") else "")
                out.append(f"  phase {p['seq']} {_phase_name(p)}: GPU "
                           f"{_j(p['energy_gpu_j'])}{clock}")
    return out


def _dram(step: dict, j) -> str:
    """A DRAM figure; "n/m" (not measured) where the step's node has no
    dram zone, never a 0 or a blank that reads as one."""
    return "n/m" if step.get("dram_not_measured") and j is None else fmt(j, "J")


def _incarnation_lines(runs: list, utc: bool) -> list[str]:
    """A requeued job's runs (incarnations.py): one line each, never one
    figure for two runs without them."""
    out = [""] + _wrap(f"Incarnations: the job was requeued and ran {len(runs)} "
                       "times (the energy above adds them; STEP#N is run N):")
    rows = [[str(r["incarnation"]), local_time(r["start_time"], utc),
             local_time(r["end_time"], utc), str(r["steps_n"]),
             ",".join(r["nodes"]), fmt(r["energy_total_j"], "J")
             + (f" ({r['steps_unmeasured']} unmeasured)" if r["steps_unmeasured"] else "")]
            for r in runs]
    out.append(table(["RUN", "STARTED", "ENDED", "STEPS", "NODES", "TOTAL"], rows,
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
                         f"package figure, {_j(st['energy_total_j'])} "
                         f"({st['package_cpus']} were the job's; the other jobs on "
                         "it are not in the store): not this job's energy alone")
        if st.get("energy_basis") == "estimated":
            out += _wrap(f"Shared node, step {st['step_id']} on {st['node']}: estimated "
                         f"{_j(st['estimated_energy_total_j'])} (CPU "
                         f"{_j(st['estimated_energy_cpu_j'])}, DRAM "
                         f"{_j(st['estimated_energy_dram_j'])}); the table's "
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
        + f"{_j(t['energy_total_j'])} (CPU {_j(t['energy_cpu_j'])}, "
        + (f"DRAM {_j(t['energy_dram_j'])}" if not t.get("dram_not_measured")
           else "DRAM not measured")
        + (f", GPU {_j(t['energy_gpu_j'])}" if t.get("energy_gpu_j") is not None else "")
        + f"); total includes {t.get('total_includes') or 'CPU + DRAM'}",
        f"     = {energy_text(t['kwh'])}, {co2_text(t['co2_g'])} CO2, "
        f"{money_text(t['cost'], cur)}",
    ]
    lines[2:2] = _slurm_state_lines(s.get("slurm"))
    lines += _slurm_energy_lines(s.get("slurm"), t)
    if t.get("measured_energy_total_j") is not None:
        lines += _wrap(f"Measured {_j(t['measured_energy_total_j'])} (CPU "
                       f"{_j(t['measured_energy_cpu_j'])}): whole packages, other jobs' "
                       "energy included; never add it up across jobs")
    if t.get("dram_not_measured"):
        lines += _wrap(f"DRAM not measured on {t['dram_not_measured']}")
    if t.get("steps_unmeasured"):
        lines.append(f"({t['steps_unmeasured']} step(s) without an energy "
                     "measurement are not in these totals)")
    if t["saving_status"] == "estimated":
        basis = (t.get("saving_basis") or "cpu+dram").upper()
        lines += _wrap(f"Estimated saving vs {t.get('saving_vs') or 'original clock'}"
                       f": {_j(t['saving_j'])} (fitted power model applied "
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
                     fmt(st["duration_s"], "s"), fmt(st["energy_cpu_j"], "J"),
                     _dram(st, st["energy_dram_j"]), fmt(st["energy_total_j"], "J"),
                     fmt(st["avg_power_w"], "W"), num(st["freq_mhz"]),
                     _saving(st)])
    lines.append(table(["STEP", "NODE", "POLICY", "TIME", "CPU", "DRAM",
                        "TOTAL", "AVG_POWER", "MHZ", "SAVING"], rows,
                       right={3, 4, 5, 6, 7, 8, 9}))
    lines += _gpu_lines(s["steps"])
    lines += _shared_lines(s["steps"])
    for st in s["steps"]:
        if st.get("node_meter_sources"):
            lines += _wrap(f"Node meter, step {st['step_id']} on {st['node']}: "
                           + (f"{_j(st['energy_node_j'])} "
                              f"({st['node_meter_sources']}"
                              f"{', integrated power' if st['node_meter_integrated'] else ''})"
                              f" against RAPL's {_j(st['energy_total_j'])}"
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
        lines.append("(n/m: DRAM not measured, no dram zone on the node; TOTAL is "
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
            rows.append([str(p["seq"]), kind, fmt(p["duration_s"], "s"),
                         fmt(p["energy_cpu_j"], "J"), _dram(st, p["energy_dram_j"]),
                         fmt(p["energy_total_j"], "J"),
                         fmt(None if p["gib_per_s"] is None else p["gib_per_s"] * 2**30,
                             "B/s"),
                         fmt(p["j_per_gib"], "J"), num(p["freq_mhz"]), _saving(p)])
        # 80 columns with units in the cells: a phase's power and its bytes
        # (RATE x TIME) are in JSON and CSV (avg_power_w, bytes); RATE and
        # J/GIB are of TOTAL's data
        lines.append(table(["SEQ", "PHASE", "TIME", "CPU", "DRAM", "TOTAL", "RATE",
                            "J/GIB", "MHZ", "SAVING"], rows,
                           right={0, 2, 3, 4, 5, 6, 7, 8, 9}))
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
    lines += _intensity_lines(s)
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
        + (f"{_j(sl['energy_node_j'])} over the same steps, against "
           f"{_j(t['energy_total_j'])} above (not added to it)"
           if sl["energy_node_j"] is not None else
           f"no job figure ({sl['energy_node_note'] or 'see the steps'})"))
    for st in sl["steps"]:
        if st["energy_node_j"] is None:
            continue
        out += _wrap(f"  step {st['step_id']}: {_j(st['energy_node_j'])} on "
                     f"{st['nnodes'] or '?'} node(s)"
                     + (f", joulestep {_j(st['energy_joulestep_j'])}"
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
                         f"{_j(outer['energy_total_j'])}"
                         + (f", which adds only the other {_j(own)}" if own is not None
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
        + f"{_j(t['energy_total_j'])} = {energy_text(t['kwh'])}, "
        f"{co2_text(t['co2_g'])} CO2, {money_text(t['cost'], r['currency'])}",
        f"Total includes {t['total_includes']}"
        + (f"; GPU {_j(t['energy_gpu_j'])}" if t["energy_gpu_j"] is not None
           else ""),
        f"{t['jobs']} jobs, {t['steps']} steps. Frequency policy adoption: "
        f"{t['policy_steps_pct']:.1f} % of steps,",
        f"{t['policy_energy_pct']:.1f} % of energy",
        f"Records lost (spool and fallback not writable): {t.get('records_lost', 0)}",
        "",
    ]
    lines[-1:-1] = _report_intensity_lines(t, r["currency"])
    rows = []
    for g in r["top"]:
        rows.append([str(g["key"]), str(g["jobs"]), str(g["steps"]),
                     _gpu_cell(g), fmt(g["energy_total_j"], "J"),
                     _includes_cell(g), f"{g['share_pct']:.1f}",
                     fmt(g["kwh"] * 1000, "Wh"), money_cell(g["cost"]),
                     fmt(g["avg_power_w"], "W"), f"{g['policy_steps_pct']:.0f}"])
    rest = r["groups"][len(r["top"]):]
    if rest:
        e = sum(g["energy_total_j"] for g in rest)
        rows.append([f"({len(rest)} others)", str(sum(g["jobs"] for g in rest)),
                     str(sum(g["steps"] for g in rest)),
                     _gpu_cell({"energy_gpu_j": sum(g["energy_gpu_j"] or 0 for g in rest),
                                "gpu_steps": sum(g["gpu_steps"] for g in rest),
                                "gpu_not_measured_steps": sum(
                                    g["gpu_not_measured_steps"] for g in rest)}),
                     fmt(e, "J"), "-",
                     f"{sum(g['share_pct'] for g in rest):.1f}",
                     fmt(sum(g["kwh"] for g in rest) * 1000, "Wh"),
                     money_cell(sum(g["cost"] for g in rest)), "-",
                     "-"])
    head = [r["by"].upper(), "JOBS", "STEPS", "GPU", "ENERGY", "INCLUDES",
            "SHARE%", "WH", "COST_" + r["currency"].upper(), "AVG_POWER", "POLICY%"]
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
                              "job`): their totals are CPU + DRAM, and GPU leaves them out.")
    if any(g["total_includes"].endswith(")") for g in r["top"]):
        lines += [""] + _wrap("INCLUDES: what ENERGY holds (cpu, dram, gpu); * some "
                              "steps' DRAM or GPUs not measured (--format json: "
                              "total_includes).")
    lines += [""] + _wrap(r["scope_note"] + ".")
    return "\n".join(lines) + "\n"


def _gpu_cell(g: dict) -> str:
    """report's GPU_J: the GPU energy in the total, n/m where no step's GPUs
    were measured, - for no GPU steps."""
    if g["gpu_steps"]:
        return fmt(g["energy_gpu_j"], "J")
    return "n/m" if g["gpu_not_measured_steps"] else "-"


def _includes_cell(g: dict) -> str:
    """report's INCLUDES: "cpu+dram+gpu", "*" when some steps lack a part."""
    text = g["total_includes"]
    head = text.split(" (", 1)[0]
    return head.lower().replace(" ", "") + ("*" if text != head else "")


def _wh(mwh, sep: str = "") -> str:
    """Energy given in MWh, scaled (render_units.fmt)."""
    return fmt(None if mwh is None else mwh * 1e6, "Wh", sep)


_SHORT = {"estimated": "est", "estimated (same duration assumed)": "est, same t",
          "unchanged": "unchanged", "not estimated": "no model",
          "partly estimated": "partial"}


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1f}"


def _whatif_row(label: str, kind: str, k: dict) -> list[str]:
    n_est = k["status"] == "not estimated"
    return [label, kind, fmt(k["duration_s"], "s"), fmt(k["energy_j"], "J"),
            num(k.get("freq_mhz")), "-" if n_est else fmt(k["saving_j"], "J"),
            _pct(k["saving_pct"]), "-" if n_est else fmt(k["extra_time_s"], "s"),
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
    lines.append(table(["POLICY", "KIND", "TIME", "ENERGY", "MHZ", "SAVING",
                        "SAVING%", "EXTRA_TIME", "STATUS"], rows,
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
                   f"{_wh(t['energy_mwh'], ' ')}.")
    lines += _wrap(f"Saving {_wh(t['saving_mwh'], ' ')} ({_pct(t['saving_pct'])} "
                   f"% of the estimated phases' CPU+DRAM energy) = "
                   f"{co2_text(t['co2_g'])} "
                   f"CO2, {money_text(t['cost'], cur)}; step time "
                   f"{'+' if t['extra_time_s'] >= 0 else ''}"
                   f"{fmt(t['extra_time_s'], 's', ' ')}.")
    if t["not_estimated_j"]:
        why = "; ".join(dict.fromkeys(k["why"] for k in r["kinds"] if k["why"]))
        lines += _wrap(f"Not estimated: {_wh(t['not_estimated_mwh'], ' ')}:"
                       f" {why}.")
    rows = [[str(g["key"]), str(g["jobs"]), str(g["steps"]), _wh(g["energy_mwh"]),
             _wh(g["saving_mwh"]), _pct(g["saving_pct"]), fmt(g["co2_g"], "g"),
             money_cell(g["cost"]), fmt(g["extra_time_s"], "s")]
            for g in r["groups"][:top]]
    if len(r["groups"]) > top:
        lines.append(f"(the top {top} of {len(r['groups'])} groups; all with "
                     "--format json|csv)")
    lines += ["", table([r["by"].upper(), "JOBS", "STEPS", "PHASE_ENERGY",
                         "SAVING", "SAVING%", "CO2", "COST", "EXTRA_TIME"],
                        rows), "", "Per phase kind (a phase's own part):"]
    rows = [[k["kind"], _wh(k["energy_mwh"]), num(k["freq_mhz"]),
             _wh(k["saving_mwh"]) if k["status"] != "not estimated" else "-",
             _pct(k["saving_pct"]), fmt(k["extra_time_s"], "s")
             if k["status"] != "not estimated" else "-",
             _SHORT.get(k["status"], k["status"])] for k in r["kinds"]]
    lines.append(table(["KIND", "PHASE_ENERGY", "MHZ", "SAVING", "SAVING%",
                        "EXTRA_TIME", "STATUS"], rows))
    lines += [""] + _wrap(r["scope_note"] + " (SAVING% is of the CPU+DRAM "
                          "energy).")
    return "\n".join(lines) + "\n"


def _figure_note(d: dict, k: str, unit: str, static: float | None = None) -> str:
    """How a CO2 (k = co2) or cost (price) figure was made."""
    kind = "co2_g_per_kwh" if k == "co2" else "price_per_kwh"
    if d.get(f"{k}_method") != "time-varying":
        return f"static {num(d[kind] if static is None else static)} {unit}/kWh"
    cov = d[f"{k}_covered_pct"]
    out = f"{num(d[kind])} {unit}/kWh on average, time-varying ({cov:.0f} % covered"
    if cov < 99.95:
        out += (", the rest at the static factor" if static is None
                else f", the rest at the static {num(static)}")
    est = d.get(f"{k}_estimated_pct") or 0.0
    if est >= 0.05:
        out += f"; {est:.0f} % estimated by the source"
    return out + f"; {d[f'{k}_sources']})"


def _report_intensity_lines(t: dict, cur: str) -> list[str]:
    """How the report's CO2 and cost were made, when values were imported."""
    if t.get("co2_method", "static") == "static" and \
            t.get("price_method", "static") == "static":
        return []
    return _wrap(f"CO2: {_figure_note(t, 'co2', 'g')}; cost: "
                 f"{_figure_note(t, 'price', cur)}")


MAX_PHASE_LINES = 20       # per job, in the text; JSON and CSV have them all


def _intensity_lines(s: dict) -> list[str]:
    """CO2 and cost over time: how the totals were made, each step's and
    phase's figures when values were imported, the zone's day, the what-if."""
    t, site, info = s["totals"], s["site"], s.get("intensity") or {}
    cur = site["currency"]
    if t.get("co2_method") is None or (t["co2_method"] == "static" and
                                       t["price_method"] == "static" and
                                       not info.get("days")):
        return []
    out = ["", "CO2 and cost over time" + (f" (zone {t['zone']})" if t.get("zone")
                                           else "") + ":"]
    out += _wrap(f"CO2 {co2_text(t['co2_g'])}: "
                 + _figure_note(t, "co2", "g", site["co2_g_per_kwh"]), "  ")
    out += _wrap(f"Cost {money_text(t['cost'], cur)}: "
                 + _figure_note(t, "price", cur, site["price_per_kwh"]), "  ")
    shown = 0
    for st in s["steps"]:
        if st.get("kwh") is None:
            continue
        out += _wrap(f"step {st['step_id']} on {st['node']}: {co2_text(st['co2_g'])} "
                     f"CO2 ({num(st['co2_g_per_kwh'])} g/kWh), "
                     f"{money_text(st['cost'], cur)}", "  ")
        phases = [p for p in st["phases"] if p.get("co2_g") is not None]
        for p in phases[:max(MAX_PHASE_LINES - shown, 0)]:
            out += _wrap(f"phase {p['seq']} {_phase_name(p)}: {co2_text(p['co2_g'])} "
                         f"CO2 ({num(p['co2_g_per_kwh'])} g/kWh), "
                         f"{money_text(p['cost'], cur)}", "    ")
        more = len(phases) - max(MAX_PHASE_LINES - shown, 0)
        shown += len(phases)
        if more > 0:
            out.append(f"    ... {more} more phase(s): --format json or csv")
    for d in info.get("days") or []:
        for k, unit in (("co2", "g"), ("price", cur)):
            p = d.get(k)
            if p:
                out += _wrap(f"{d['zone']} on {d['day']}: {k} {num(p['day_avg_per_kwh'])} "
                             f"{unit}/kWh on average; lowest hour {p['lowest_hour']:02d}:00 "
                             f"({num(p['lowest_per_kwh'])}), highest "
                             f"{p['highest_hour']:02d}:00 ({num(p['highest_per_kwh'])})",
                             "  ")
    w = info.get("what_if")
    if w:
        parts = []
        if "co2_g_at_lowest_hour" in w:
            parts.append(f"{co2_text(w['co2_g_at_lowest_hour'])} .. "
                         f"{co2_text(w['co2_g_at_highest_hour'])} CO2")
        if "cost_at_lowest_hour" in w:
            parts.append(f"{money_text(w['cost_at_lowest_hour'], cur)} .. "
                         f"{money_text(w['cost_at_highest_hour'], cur)}")
        out += _wrap("What if (an estimate): the same energy at the day's lowest .. "
                     "highest hour: " + ", ".join(parts), "  ")
    return out


def hour_report_text(r: dict) -> str:
    """`report --by hour`: energy, CO2 and cost by hour of day."""
    t, cur = r["totals"], r["currency"]
    lines = [f"Energy by hour of day ({r['hours_in']}), "
             f"{local_time(r['since'], False) or 'start'} .. "
             f"{local_time(r['until'], False) or 'now'}",
             f"Total {_j(t['energy_total_j'])} = {energy_text(t['kwh'])}, "
             f"{co2_text(t['co2_g'])} CO2, {money_text(t['cost'], cur)}", ""]
    rows = [[g["key"], fmt(g["energy_total_j"], "J"), f"{g['share_pct']:.1f}",
             fmt(g["kwh"] * 1000, "Wh"), fmt(g["co2_g"], "g"), num(g["co2_g_per_kwh"]),
             f"{g['co2_covered_pct']:.0f}", money_cell(g["cost"])]
            for g in r["groups"]]
    lines.append(table(["HOUR", "ENERGY", "SHARE%", "WH", "CO2", "G/KWH",
                        "COVERED%", "COST_" + cur.upper()], rows,
                       right={1, 2, 3, 4, 5, 6, 7}))
    lines += [""] + _wrap("COVERED%: the share of the energy that imported "
                          "intensity values covered; the rest is at the site's "
                          "static factor. " + r["scope_note"] + ".")
    return "\n".join(lines) + "\n"
