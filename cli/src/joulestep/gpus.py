"""GPU energy of a job's steps and phases (record version 2, migration 009;
docs/record-format.md, "Fields ingest reads" (GPUs)), for `joulestep job`.

A step's total includes its GPUs only when every GPU of the step has its
energy (the record's ``total_includes``); a GPU split by MIG, shared with
another job or uncertain has none, with the reason, and is never charged
whole to the job."""
from __future__ import annotations

INCLUDES = {"cpu+dram": "CPU + DRAM", "cpu+dram+gpu": "CPU + DRAM + GPU",
            "cpu": "CPU (DRAM not measured)", "cpu+gpu": "CPU + GPU (DRAM not measured)"}


def _j(uj):
    return None if uj is None else uj / 1e6


def for_job(step_rows, gpu_rows, phase_rows) -> tuple[dict, dict]:
    """({step_pk: {energy_gpu_j, total_includes, gpus_unmeasured, gpus}},
    {(step_pk, seq): (energy_gpu_j, gpu_clock_mhz)}) of a job's steps and
    phases, from store/read_jobs.py's gpu_step_rows, gpu_rows and
    gpu_phase_rows."""
    steps: dict = {}
    for spk, gpu, inc, why in step_rows:
        steps[spk] = {"energy_gpu_j": _j(gpu),
                      "total_includes": INCLUDES.get(inc or "cpu+dram", inc),
                      "gpus_unmeasured": why, "gpus": []}
    for spk, idx, uuid, model, uj, reason, integ, resets in gpu_rows:
        steps[spk]["gpus"].append({
            "index": idx, "uuid": uuid, "model": model, "energy_j": _j(uj),
            "reason": reason, "integrated": bool(integ), "resets": resets})
    phases = {(spk, seq): (_j(uj), mhz) for spk, seq, uj, mhz in phase_rows}
    return steps, phases


def job_includes(steps: list) -> str:
    """What the job's total holds: CPU + DRAM + GPU when a step's total has
    its GPUs, else CPU + DRAM."""
    if any(st.get("total_includes") == INCLUDES["cpu+dram+gpu"] for st in steps):
        return INCLUDES["cpu+dram+gpu"]
    return INCLUDES["cpu+dram"]


def step_lines(st: dict) -> list[str]:
    """The GPU lines of one step of `joulestep job`'s text."""
    out = []
    if st.get("gpus_unmeasured"):
        out.append(f"  GPUs not measured: {st['gpus_unmeasured']}")
    for g in st.get("gpus", ()):
        what = (f"{g['energy_j']:.6g} J" + (" (power integral: no counter)"
                                             if g["integrated"] else "")
                if g["energy_j"] is not None else f"no energy: {g['reason']}")
        out.append(f"  GPU {g['index'] if g['index'] is not None else '-'} "
                   f"{g['model'] or '-'} {g['uuid']}: {what}")
    return out


# --------------------------------------------------------------------------
# sums over many steps (`report`, the exporter): one rule for both

#: SQL (steps s): the step's total includes its GPUs
IN_TOTAL_SQL = "s.total_includes LIKE '%gpu'"
#: SQL (steps s): the GPU part of the step's counted total (nesting.py
#: subtracts the steps inside it from every figure alike), or NULL
COUNTED_SQL = (f"CASE WHEN {IN_TOTAL_SQL} THEN s.counted_total_uj - "
               "s.counted_cpu_uj - coalesce(s.counted_dram_uj, 0) END")
#: SQL (steps s): the step has GPUs whose energy its total lacks (a GPU
#: without energy: MIG, shared, uncertain), or GPUs not measured at all
#: (provenance.gpus_unmeasured says why)
UNMEASURED_SQL = (f"NOT ({IN_TOTAL_SQL}) AND (s.gpu_backend IS NOT NULL OR "
                  "s.gpus_unmeasured IS NOT NULL)")


def in_total(total_includes) -> bool:
    """Whether a step's total includes its GPUs (IN_TOTAL_SQL)."""
    return isinstance(total_includes, str) and total_includes.endswith("gpu")


def in_total_text(includes) -> bool:
    """Whether a "total includes" text (INCLUDES' values) has the GPUs."""
    return isinstance(includes, str) and "GPU" in includes


def counted_uj(total_includes, ccpu, cdram, ctotal):
    """The GPU part of a step's counted total (COUNTED_SQL), or None."""
    if not in_total(total_includes) or ctotal is None:
        return None
    return ctotal - (ccpu or 0) - (cdram or 0)


def unmeasured(total_includes, gpu_backend, gpus_unmeasured) -> bool:
    """UNMEASURED_SQL on one step's columns."""
    return not in_total(total_includes) and (
        gpu_backend is not None or gpus_unmeasured is not None)


def includes_text(steps: int, no_dram: int, gpu_steps: int, no_gpu: int) -> str:
    """What a sum over steps holds, e.g. "CPU + DRAM + GPU", with the steps
    whose DRAM or GPUs are not in it: "CPU + DRAM + GPU (DRAM not measured
    on 1 of 3 steps; GPUs not measured on 1 of 2 GPU steps)"."""
    parts = ["CPU"] + (["DRAM"] if no_dram < steps or not steps else []) \
        + (["GPU"] if gpu_steps else [])
    notes = []
    if no_dram and no_dram < steps:
        notes.append(f"DRAM not measured on {no_dram} of {steps} steps")
    elif no_dram:
        notes.append("DRAM not measured")
    if no_gpu:
        notes.append(f"GPUs not measured on {no_gpu} of {gpu_steps + no_gpu} "
                     "GPU steps")
    return " + ".join(parts) + (f" ({'; '.join(notes)})" if notes else "")
