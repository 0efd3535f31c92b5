"""Generate valid joulestep spool records (format v1, docs/record-format.md).

Numbers are chosen so test expectations can be checked by hand: energies are
whole joules (x 1e6 uJ), durations whole seconds.
"""
from __future__ import annotations

import copy
import json
import os
import pathlib

S = 1_000_000_000          # ns per second
J = 1_000_000              # uJ per joule
T0 = 1_763_769_600 * S     # 2025-11-22T00:00:00Z
GIB = 1 << 30


def phase(seq, kind, start_s, dur_s, cpu_j, dram_j, *, label=None, freq_khz=None,
          nbytes=None, depth=0, parent=None, t0=T0, nranks=None, ranks=None):
    st = t0 + int(start_s * S)
    p = {"seq": seq, "kind": kind, "label": label, "depth": depth,
         "parent_seq": parent, "start_ns": st, "end_ns": st + int(dur_s * S),
         "duration_ns": int(dur_s * S), "freq_khz": freq_khz,
         "freq_change_ns": 35000 if freq_khz else None,
         "energy_cpu_uj": int(cpu_j * J), "energy_dram_uj": int(dram_j * J),
         "bytes": nbytes, "nranks": nranks}
    if ranks is not None:
        p["ranks"] = ranks
    return p


def shifted(pairs, by_s):
    """(phase, x) pairs with each phase moved by_s later: phases built from
    T0 for a step that starts by_s after it."""
    out = []
    for p, x in pairs:
        p = copy.deepcopy(p)
        p["start_ns"] += int(by_s * S)
        p["end_ns"] += int(by_s * S)
        out.append((p, x))
    return out


def record(job_id=42, step_id="0", node="node01", *, cluster="demo",
           submit_s=0, start_s=1, dur_s=10, cpu_j=100, dram_j=20, user="alice",
           account="physics", partition="debug", name="ckpt", tags=None,
           policy="io-dvfs", base_khz=2_400_000, exclusive=True, het=0,
           node_model="fake-acpi-2x2", phases=(), errors=(), wrap_uncertain=False,
           t0=T0, ncpus=2, nnodes=1, first_seen_s=None, job_source="prolog"):
    """One record: job submitted at t0+submit_s, step from t0+start_s.

    With first_seen_s: a record of the current plugin (docs/record-format.md,
    job identity): no submit time, no job name, job.first_seen_ns at
    t0+first_seen_s and provenance.job_source (prolog or step)."""
    st = t0 + int(start_s * S)
    rec = {
        "format": "joulestep-record", "version": 1, "cluster": cluster,
        "job": {"job_id": job_id, "submit_time_ns": t0 + int(submit_s * S),
                "start_time_ns": st, "name": name, "user": user, "uid": 1001,
                "gid": 1001, "account": account, "partition": partition,
                "tags": dict(tags or {})},
        "step": {"step_id": step_id, "het_component": het, "node": node,
                 "node_model": node_model, "ntasks": 2, "nnodes": nnodes,
                 "cpus": f"0-{ncpus - 1}" if ncpus > 1 else "0", "ncpus": ncpus,
                 "exclusive": exclusive,
                 "policy": policy, "base_freq_khz": base_khz,
                 "freq_min_ratio": 0.5, "start_ns": st,
                 "end_ns": st + int(dur_s * S), "duration_ns": int(dur_s * S),
                 "energy_cpu_uj": int(cpu_j * J), "energy_dram_uj": int(dram_j * J),
                 "energy_total_uj": int(cpu_j * J) + int(dram_j * J), "exit_code": 0},
        "zones": [
            {"name": "package-0", "id": "intel-rapl:0", "kind": "package",
             "energy_uj": int(cpu_j * J) // 2, "wraps": 0},
            {"name": "package-1", "id": "intel-rapl:1", "kind": "package",
             "energy_uj": int(cpu_j * J) - int(cpu_j * J) // 2, "wraps": 1},
            {"name": "dram", "id": "intel-rapl:0:0", "kind": "dram",
             "energy_uj": int(dram_j * J), "wraps": 0}],
        "phases": [copy.deepcopy(p) for p in phases],
        "provenance": {"backend": "sysfs", "wrap_uncertain": wrap_uncertain,
                       "sample_period_ns": S, "errors": list(errors),
                       "plugin_version": "0.1.0"},
    }
    if first_seen_s is not None:
        rec["job"].update(submit_time_ns=None, name=None,
                          first_seen_ns=t0 + int(first_seen_s * S))
        rec["provenance"]["job_source"] = job_source
    return rec


def path_for(spool, rec) -> pathlib.Path:
    j, s = rec["job"], rec["step"]
    return (pathlib.Path(spool) / rec["cluster"] / str(j["job_id"]) /
            f"{j['job_id']}.{s['step_id']}.{s['het_component']}.{s['node']}.json")


def write(spool, rec, name=None) -> pathlib.Path:
    """Write like the plugin: tmp file, then rename into place."""
    p = path_for(spool, rec) if name is None else pathlib.Path(spool) / name
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + f".tmp.{os.getpid()}")
    tmp.write_text(json.dumps(rec))
    os.rename(tmp, p)
    return p


def fixture_records():
    """The hand-checked fixture used across tests/cli.

    job 42 (alice, physics, strategy=veloc): step 0 on node01 with a
      checkpoint (freq lowered to 1.2 GHz, 1 GiB, 2 s, 20+4 J) nested flush
      and a compute phase; step batch on node01, shared node, 12 s from the
      same start: step 0 runs inside it, so batch's 130+26 J include step
      0's 100+20 J (batch counts the other 30+6 J; the job 156 J).
    job 43 (bob, chem, strategy=genericio): step 0 on node02, 2 phases.
    job 42 again, submitted 3 days later (recycled ID: more than the 24 h
      job gap after alice's job ended): carol.
    """
    ph42 = [
        phase(0, "compute", 1, 4, 40, 8, label="iter", t0=T0),
        phase(1, "checkpoint", 5, 2, 20, 4, label="ckpt-1", freq_khz=1_200_000,
              nbytes=GIB, nranks=2,
              ranks=[{"rank": 0, "start_ns": T0 + 5 * S, "end_ns": T0 + 7 * S,
                      "bytes": GIB // 2},
                     {"rank": 1, "start_ns": T0 + 5 * S, "end_ns": T0 + 7 * S,
                      "bytes": GIB // 2}]),
        phase(2, "flush", 5, 1, 6, 2, label="ckpt-1", depth=1, parent=1,
              freq_khz=1_200_000, nbytes=GIB),
    ]
    ph43 = [
        phase(0, "compute", 2, 3, 60, 6),
        phase(1, "checkpoint", 5, 4, 80, 8, label="sync", nbytes=2 * GIB),
    ]
    return [
        record(42, "0", "node01", start_s=1, dur_s=10, cpu_j=100, dram_j=20,
               tags={"strategy": "veloc", "tier": "dram"}, phases=ph42),
        record(42, "batch", "node01", start_s=1, dur_s=12, cpu_j=130, dram_j=26,
               tags={"strategy": "veloc", "tier": "dram"}, exclusive=False,
               policy="none"),
        record(43, "0", "node02", user="bob", account="chem", name="gio",
               start_s=2, dur_s=10, cpu_j=200, dram_j=20,
               tags={"strategy": "genericio"}, policy=None, phases=ph43),
        record(42, "0", "node02", user="carol", account="bio", name="wrapped",
               submit_s=3 * 86400, start_s=3 * 86400 + 1, dur_s=5, cpu_j=50,
               dram_j=10,
               policy=None, tags={}),
    ]


# --------------------------------------------------------------------------
# experiment-shaped records for compare / model / plot tests

def checkpoint_study(reps=3, ranks=(1, 2, 4), gib_per_rank=1):
    """VELOC-style (checkpoint + flush) vs GenericIO-style (one checkpoint
    phase) runs.  Per rank and GiB: veloc local 2 J/GiB CPU + 0.5 DRAM in
    0.5 s, flush 1 J/GiB + 0.5 in 1 s; genericio 6 J/GiB + 1 in 2 s.  Each
    repetition r adds r J to every phase's CPU energy (spread)."""
    recs, job = [], 5000
    for strat in ("veloc", "genericio"):
        for n in ranks:
            for r in range(reps):
                job += 1
                g = n * gib_per_rank
                t0 = T0 + (job - 1) * S     # phases from the step's start
                if strat == "veloc":
                    ph = [phase(0, "checkpoint", 1, 0.5 * g, 2 * g + r, 0.5 * g,
                                nbytes=g * GIB, nranks=n, label="c1", t0=t0),
                          phase(1, "flush", 1 + 0.5 * g, 1.0 * g, 1 * g + r, 0.5 * g,
                                nbytes=g * GIB, nranks=n, label="c1", t0=t0)]
                else:
                    ph = [phase(0, "checkpoint", 1, 2.0 * g, 6 * g + r, 1 * g,
                                nbytes=g * GIB, nranks=n, label="c1", t0=t0)]
                recs.append(record(job, "0", "node01", name="ckpt", start_s=job,
                                   submit_s=job, dur_s=10, cpu_j=50, dram_j=5,
                                   tags={"strategy": strat, "study": "ckpt"},
                                   phases=ph))
    return recs


def io_study(reps=2):
    """TP / DC(1) / DN(3:1) on 4 nodes; energy per node given."""
    recs, job = [], 6000
    per_node = {"TP": [100, 110, 90, 100], "DC(1)": [80, 80, 80, 80],
                "DN(3:1)": [85, 85, 85, 40]}
    for appr, energies in per_node.items():
        for r in range(reps):
            job += 1
            for i, e in enumerate(energies):
                recs.append(record(job, "0", f"node{i + 1:02d}", start_s=job,
                                   submit_s=job, dur_s=10, cpu_j=e + r, dram_j=0,
                                   tags={"approach": appr, "study": "io"}))
    return recs


def sweep_study(a=0.0133, b=3.379, c=0.7985, fmax_ghz=2.4, alpha=0.3, reps=3):
    """A noiseless frequency sweep as the plugin would record it: one job per
    frequency and repetition, one 'write' phase at that frequency."""
    recs, job = [], 7000
    freqs = [round(0.8 + 0.1 * i, 3) for i in range(int(round((fmax_ghz - 0.8) / 0.1)) + 1)]
    for fr in freqs:
        for r in range(reps):
            job += 1
            p = 40.0 * (a * fr ** b + c)
            t = 10.0 * (alpha * fmax_ghz / fr + 1 - alpha)
            ph = [phase(0, "write", 1, t, p * t, 0, freq_khz=int(round(fr * 1e6)),
                        t0=T0 + (job - 1) * S)]
            recs.append(record(job, "0", "node01", start_s=job, submit_s=job,
                               dur_s=t + 2, cpu_j=p * t + 10, dram_j=0,
                               policy=f"fixed:{fr / fmax_ghz:.4f}",
                               tags={"sweep": "s1"}, phases=ph))
    return recs


def noisy_sweep_study(a, b, c, fmax_ghz, alpha=0.3, noise=0.01, reps=3, step_ghz=0.1,
                      seed=1, sweep="noisy", job0=9000):
    """Like sweep_study, with multiplicative Gaussian noise (seeded) on every
    power and duration: 0.8 GHz .. fmax in step_ghz, reps jobs per
    frequency, one 'write' phase each.  Returns (records, samples) where
    samples lists (freq_ghz, power_w) as recorded (energy/duration of the
    phase after rounding to uJ and ns), for a truth computed in the test."""
    import numpy as np
    rng = np.random.default_rng(seed)
    n = int(round((fmax_ghz - 0.8) / step_ghz))
    recs, samples, job = [], [], job0
    for fr in [round(0.8 + step_ghz * i, 6) for i in range(n + 1)]:
        for r in range(reps):
            job += 1
            p = 40.0 * (a * fr ** b + c) * (1 + noise * rng.standard_normal())
            t = 10.0 * (alpha * fmax_ghz / fr + 1 - alpha) * (1 + noise * rng.standard_normal())
            ph = phase(0, "write", 1, t, p * t, 0, freq_khz=int(round(fr * 1e6)),
                       t0=T0 + (job - 1) * S)
            samples.append((fr, ph["energy_cpu_uj"] / ph["duration_ns"] * 1e3))
            recs.append(record(job, "0", "node01", start_s=job, submit_s=job,
                               dur_s=t + 2, cpu_j=p * t + 10, dram_j=0,
                               node_model="skylake-like",
                               policy=f"fixed:{fr / fmax_ghz:.4f}",
                               tags={"sweep": sweep}, phases=[ph]))
    return recs, samples


#: calibration used by damaris_study (hand-checkable)
DAMARIS = dict(t_base_s=1200.0, s_cores={1: 1.0, 2: 0.9, 4: 0.75},
               s_nodes={1: 1.0, 2: 0.95, 4: 0.9}, p_idle_w=30.0, p_max_w=100.0)


def damaris_study(reps=2, cal=DAMARIS, measured=None):
    """Runs for fitting the Dorier model (`model damaris --fit-where io=none`).

    Calibration runs without I/O (tags io=none, study=damaris), one job per
    (nodes x cores) in 1x1, 1x2, 1x4, 2x4, 4x4 and repetition, one record per
    node: run time T = T_base / ((c s_cores(c)) (n s_nodes(n))), times 0.99
    (rep 0) and 1.01 (rep 1), so the mean is T exactly; node power P_max at
    4 cores per node, 20 + 20 c W below that (80% CPU, 20% DRAM).  Job 8001
    also has a batch step around step 0 (+50 s, +5000 J on node01) that the
    fit must ignore (numbered steps only).  Idle runs (tag state=idle): 1 and
    2 nodes, 60 s at P_idle per node.  measured: {config: [J per node]} runs
    on 4 nodes tagged approach=config, study=damaris (one run each)."""
    recs, job = [], 8000
    scale = [0.99, 1.01] if reps == 2 else [1.0] * reps
    for n, c in ((1, 1), (1, 2), (1, 4), (2, 4), (4, 4)):
        t = cal["t_base_s"] / ((c * cal["s_cores"][c]) * (n * cal["s_nodes"][n]))
        p = cal["p_max_w"] if c == 4 else 20.0 + 20.0 * c
        for r in range(reps):
            job += 1
            d = t * scale[r]
            for i in range(n):
                node = f"node{i + 1:02d}"
                recs.append(record(job, "0", node, start_s=job * 1000, submit_s=job * 1000,
                                   dur_s=d, cpu_j=0.8 * p * d, dram_j=0.2 * p * d,
                                   ncpus=c, nnodes=n, policy="monitor",
                                   tags={"io": "none", "study": "damaris"}))
                if job == 8001 and i == 0:
                    recs.append(record(job, "batch", node, start_s=job * 1000 - 20,
                                       submit_s=job * 1000, dur_s=d + 50,
                                       cpu_j=0.8 * p * d + 4000, dram_j=0.2 * p * d + 1000,
                                       ncpus=c, nnodes=n, policy="monitor", exclusive=False,
                                       tags={"io": "none", "study": "damaris"}))
    for n in (1, 2):
        job += 1
        for i in range(n):
            recs.append(record(job, "0", f"node{i + 1:02d}", start_s=job * 1000,
                               submit_s=job * 1000, dur_s=60, cpu_j=0.8 * 60 * cal["p_idle_w"],
                               dram_j=0.2 * 60 * cal["p_idle_w"], ncpus=1, nnodes=n,
                               policy="monitor", tags={"state": "idle", "study": "damaris"}))
    for cfg, energies in (measured or {}).items():
        job += 1
        for i, e in enumerate(energies):
            recs.append(record(job, "0", f"node{i + 1:02d}", start_s=job * 1000,
                               submit_s=job * 1000, dur_s=100, cpu_j=e, dram_j=0,
                               ncpus=4, nnodes=len(energies), policy="monitor",
                               tags={"approach": cfg, "study": "damaris"}))
    return recs
