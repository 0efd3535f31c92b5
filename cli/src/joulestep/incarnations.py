"""A requeued job's incarnations (issue 23, defect 5; docs/design.md, "A
requeued job's incarnations").

A requeued job runs again under the same job ID.  Each of its steps carries
the incarnation marker of its node (steps.incarnation_ns, migration 012: the
job prolog's time on that node, taken by root), so the two runs' steps are
stored apart.  Which steps of different nodes form one run: a node's steps of
one marker span [marker, their last end]; the runs of a job never overlap in
time (slurmctld starts the next one after the last one's epilogs), while all
nodes of one run overlap its batch step, which spans the run.  So the spans
that overlap are one run, numbered 1, 2, ... in time.  Only batch jobs are
requeued: a job without a batch step is one run.  A step stored before
migration 012 (marker 0) spans its own window.
"""
from __future__ import annotations


def runs(steps) -> dict:
    """steps: (step_pk, step_id, node, incarnation_ns, start_ns, end_ns) of
    one job.  {step_pk: run number (1, 2, ...)}."""
    steps = list(steps)
    if not any(s[1] == "batch" for s in steps):
        return {s[0]: 1 for s in steps}
    spans: dict = {}            # (node, marker) or ("", step_pk) -> [lo, hi, pks]
    for pk, _, node, inc, start, end in steps:
        key = (node, inc) if inc else ("", pk)
        lo = min(inc, start) if inc else start
        sp = spans.setdefault(key, [lo, end, []])
        sp[0], sp[1] = min(sp[0], lo), max(sp[1], end)
        sp[2].append(pk)
    out, n, hi = {}, 0, None
    for lo, end, pks in sorted(spans.values(), key=lambda s: (s[0], s[1])):
        if hi is None or lo > hi:
            n += 1              # starts after every span so far ended: a new run
            hi = end
        else:
            hi = max(hi, end)
        for pk in pks:
            out[pk] = n
    return out


def summary(items) -> list:
    """items: (run, start_ns, end_ns, node, counted_total_uj) of a job's
    steps.  One dict per run, in order: its first step's start and last
    step's end, its steps and nodes, and the energy its steps count
    (energy_total_j; None when none of them is measured)."""
    by: dict = {}
    for run, start, end, node, total in items:
        r = by.setdefault(run, {"incarnation": run, "start_ns": start, "end_ns": end,
                                "steps_n": 0, "nodes": set(), "energy_total_j": None,
                                "steps_unmeasured": 0})
        r["start_ns"], r["end_ns"] = min(r["start_ns"], start), max(r["end_ns"], end)
        r["steps_n"] += 1
        r["nodes"].add(node)
        if total is None:
            r["steps_unmeasured"] += 1
        else:
            r["energy_total_j"] = (r["energy_total_j"] or 0.0) + total / 1e6
    return [dict(r, nodes=sorted(r["nodes"])) for _, r in sorted(by.items())]
