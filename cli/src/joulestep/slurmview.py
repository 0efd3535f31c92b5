"""What Slurm's accounting says about a job, for `joulestep job`: its state,
exit code, elapsed time and node count, and the energy Slurm's own
acct_gather_energy plugin (ipmi, pm_counters, xcc, ...) read from the node's
meter, beside joulestep's CPU + DRAM (+ GPU) figures and never added to them.

`joulestep ingest` stores these from sacct (slurmacct.py, migration 015); a
store without slurmdbd has none, and `job` then shows none.

Slurm gives a step's energy summed over its nodes, and the job's own row a
figure of its own.  A step run inside another one on the same node (srun
inside the batch script) is inside that step's meter reading too, so the job's
node figure here is the sum over the steps that joulestep recorded and that
are not inside another step (nesting.py decides that, as for joulestep's own
total): the same steps, each joule once.
"""
from __future__ import annotations


def for_job(row, step_rows, steps: list[dict]) -> dict | None:
    """The "slurm" part of the job summary; None when sacct never gave the
    job.  row, step_rows: store/read_jobs.py's slurm_job and slurm_steps.
    steps: the summary's step dicts (step_id, het_component, inside_step,
    energy_total_j); each step dict of a step Slurm has gains
    ``energy_node_slurm_j`` (Slurm's figure for the whole step, all nodes)."""
    if row is None or row[0] is None:
        return None
    _, state, exit_code, elapsed_ns, nnodes, energy_uj = row
    ours: dict = {}
    for st in steps:
        if not st.get("het_component"):
            ours.setdefault(st["step_id"], []).append(st)
    out_steps, counted, why = [], 0, []
    for step_id, s_state, s_exit, s_elapsed, s_nnodes, s_energy in sorted(
            step_rows, key=lambda r: _order(r[0])):
        s_elapsed, s_energy = _in(s_elapsed, 1e9), _in(s_energy, 1e6)
        mine = ours.get(step_id, [])
        rapl = [st.get("energy_total_j") for st in mine]
        out_steps.append({"step_id": step_id, "state": s_state, "exit_code": s_exit,
                          "elapsed_s": s_elapsed, "nnodes": s_nnodes,
                          "energy_node_j": s_energy,
                          "energy_joulestep_j": sum(rapl) if mine and None not in rapl
                          else None})
        for st in mine:
            st["energy_node_slurm_j"] = s_energy
        inside = {st.get("inside_step") is not None for st in mine}
        if not mine or inside == {True}:
            continue            # not recorded by joulestep, or inside another step
        if inside == {True, False}:
            why.append(f"step {step_id} is inside another step on some of its nodes "
                       "only, and Slurm gives its energy for all nodes together")
        elif s_energy is None:
            why.append(f"Slurm has no energy for step {step_id}")
        if counted is not None and not why:
            counted += s_energy
    if not any(st["energy_node_j"] is not None for st in out_steps):
        counted, why = None, []       # no energy plugin: nothing to say
    elif why:
        counted = None
    return {"state": state, "exit_code": exit_code, "elapsed_s": _in(elapsed_ns, 1e9),
            "nnodes": nnodes, "energy_job_row_j": _in(energy_uj, 1e6),
            "energy_node_j": counted, "energy_node_note": "; ".join(why) or None,
            "steps": out_steps}


def _in(v, unit: float):
    return None if v is None else v / unit


def _order(step_id: str):
    """batch first, then numbered steps, then the rest (extern, interactive)."""
    if step_id == "batch":
        return (0, 0, "")
    if step_id.isdigit():
        return (1, int(step_id), "")
    return (2, 0, step_id)


def elapsed_text(seconds: int | None) -> str:
    """Elapsed time as sacct prints it: [D-]HH:MM:SS."""
    if seconds is None:
        return "-"
    d, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"
