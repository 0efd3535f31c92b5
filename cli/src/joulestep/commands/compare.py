"""joulestep compare: strategies in the papers' terms.

Loaded only when the command runs (cli.LazyGroup): see docs/cli.md,
"Start-up".
"""
from __future__ import annotations

import click

from ..options import (Ctx, emit_frames, period, where_filter, period_options, query_options,
                   where_option)


@click.command()
@click.option("--by", required=True, help="Strategy column: tag:KEY (e.g. "
              "tag:strategy), or policy, user, node_model.")
@where_option
@click.option("--what", type=click.Choice(["auto", "checkpoint", "io", "dump",
                                           "steps", "phases"]),
              default="auto", show_default=True,
              help="Comparison: checkpoint (phases checkpoint/flush), io "
                   "(TP/DC/DN per node), dump (compress/write by error bound), "
                   "or generic steps/phases; auto picks from the phase kinds.")
@click.option("--scaling", type=click.Choice(["weak", "strong"]), default="weak",
              show_default=True, help="Checkpoint tables: weak (by GiB per rank) "
              "or strong (by total GiB) scaling.")
@click.option("--baseline", help="Strategy (or policy, for dumps) the ratios "
                                 "are taken against (default: first in order; "
                                 "monitor for dumps).")
@click.option("--error-bound", default="tag:error_bound", show_default=True,
              help="Column holding the error bound (dump comparison).")
@period_options
@query_options
def compare(c: Ctx, by, where, what, scaling, baseline, error_bound, since, until):
    """Compare strategies in the papers' terms.

    checkpoint: per part (local checkpoint, flush, total) energy CPU/DRAM,
    throughput and J/GiB by rank count and size, mean and spread over
    repetitions, with ratios to the baseline (Wilkins et al. 2022).  io:
    total energy, run time, average power and per-node mean/min/max/std per
    approach (Dorier et al. 2016, Table 2).  dump: compress and write energy
    per compressor and error bound vs a raw write, and policy vs a baseline
    policy (Wilkins 2023, Fig. 2.6), saying what clock the baseline had:
    "governor default" for monitor, "base clock" only for runs held at the
    nominal clock.  A phase marked inside another (a flush inside its
    checkpoint) is counted once: local = checkpoint - flush, total = the
    enclosing measurement.  The papers, in full: docs/science.md.
    """
    from .. import studies
    since_ns, until_ns = period(since, until)
    conn = c.connect()
    try:
        r = studies.compare(conn, by, where_filter(where), what, scaling, baseline,
                            since_ns, until_ns, c.settings().cluster,
                            error_bound=error_bound)
    except studies.StudyError as e:
        raise click.ClickException(str(e)) from None
    finally:
        conn.close()
    col = r["table"].columns[0]
    pref = {
        "checkpoint": [col, "part", "gib_per_rank", "total_gib", "nranks",
                       "energy_j", "gpu_j", "throughput_gibs", "j_per_gib", "energy_j_std",
                       "runs", "throughput_gibs_std", "energy_cpu_j",
                       "energy_dram_j", "duration_s"],
        "io": [col, "runs", "energy_j", "energy_j_std", "gpu_j", "runtime_s", "avg_power_w",
               "node_mean_j", "node_min_j", "node_max_j", "node_std_j", "cpu_usage"],
        "dump": ["compressor", "error_bound", "policy", "runs", "total_j", "gpu_j",
                 "compress_j", "write_j", "ratio", "max_err", "total_vs_raw",
                 "raw_write_j"],
    }.get(r["what"])
    gpu = "gpu_j" in r["table"].columns or "gpu_j_sum" in r["table"].columns
    if r["what"] in ("phases", "steps") and gpu:
        pref = [col, "n", "energy_j_sum", "gpu_j_sum", "energy_j", "gpu_j",
                "duration_s", "energy_j_ratio", "gpu_j_ratio"] + list(r["table"].columns)
    head = f"{r['what']} comparison by {by}:"
    if r["what"] == "io" or gpu:    # what the energies hold (docs/cli.md, compare)
        part = {"dump": "compress_j, write_j and total_j are",
                "phases": "energy_j (and its sum) is",
                "steps": "energy_j (and its sum) is"}.get(r["what"], "energy_j is")
        head += (f" {part} CPU + DRAM; gpu_j the GPUs' (nan: a run with GPUs not "
                 "measured)" if gpu else " energy_j is CPU + DRAM")
    parts = [("table", r["table"], pref, head)]
    if r["ratios"] is not None:
        rp = ["part", "gib_per_rank", "total_gib", "nranks", r["ratios"].columns[3]
              if len(r["ratios"].columns) > 3 else None, "energy_j_ratio",
              "throughput_gibs_ratio", "j_per_gib_ratio"]
        parts.append(("ratios", r["ratios"], [x for x in rp if x] + list(
            r["ratios"].columns), f"ratios to {r['baseline']}:"))
    if r["policy_saving"] is not None:
        parts.append(("policy_saving", r["policy_saving"], None,
                      f"policy vs {r['baseline']} ({r['baseline_clock']}):"))
    emit_frames(c, parts, {"what": r["what"], "by": by,
                            "baseline": r.get("baseline"),
                            "baseline_clock": r.get("baseline_clock")})
