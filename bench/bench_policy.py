#!/usr/bin/env python3
"""Policy quality: the auto policy's learner against a sweep oracle, on the
time-faithful simulator (`fakehw serve --throttle-under`). Run as root:

    python3 bench/bench_policy.py [--reps 4] [--runs 20] [--bound-pct 5]

One application with three phase kinds, each with its own share alpha of its
time at fmax that scales with the clock, t(f) = t_max (alpha fmax/f + 1 - alpha)
(docs/models.md):
  compress  alpha = 1     CPU work
  write     alpha = 0     busy until a deadline (polling, as an MPI progress engine
                          waits for the I/O to complete)
  flush     alpha = 0.25  CPU work for a quarter of its time at fmax, then polling
In the simulator a task throttled to r of its CPU is fully busy at a clock of r, so
polling draws the power of a busy CPU at the lowered clock without taking longer:
only busy time that does not scale with the clock saves energy (an idle wait draws
idle power at any clock).

Oracle: every allowed ratio, --reps jobs each, all three kinds at it
(phase:compress=R,write=R,flush=R); per kind the ratio of least mean energy whose
mean slowdown is within the bound. auto: --runs jobs under --energy-policy=auto with
`joulestep ingest` and `joulestep policy update` between them. io-dvfs: --reps jobs
under io-dvfs (compress 0.875, write 0.85, flush at fmax). Energies are the phases'
package + DRAM energy from the plugin's records; savings are against the oracle's
mean at fmax, measured in the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests" / "cluster"), str(REPO / "tests" / "fakehw")]

import fakehw  # noqa: E402
import spool as spoolmod  # noqa: E402
from harness import Cluster, ensure_user, make_workdir  # noqa: E402

USER = "jsuser"
CLI = REPO / ".venv" / "bin" / "joulestep"
FMAX, FMIN = 4000000, 800000   # every allowed ratio is a whole 100 MHz step of fmax
RATIOS = (1.0, 0.85, 0.7, 0.55)
FULL_SPEED = 0.25              # fmax = a quarter of a real CPU: room for the host's other load
# g(f) = a f^b + c (f in GHz): g(4) = 1; small constant terms, so that lowering the
# clock of busy work saves energy and a slower phase pays for its longer static draw
MODEL = dict(a=0.0125, b=3.0, c=0.2, p_core_max_w=20.0, p_core_idle_w=0.5, p_uncore_w=2.0,
             p_dram_idle_w=0.5, p_dram_dyn_w=1.0, p_platform_w=1.0)
KINDS = {"compress": (1.0, 1.2), "write": (0.0, 1.0), "flush": (0.25, 1.6)}  # alpha, t at fmax (s)
IO_DVFS = {"compress": 0.875, "write": 0.85, "flush": 1.0}

APP = r"""import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("jsphase", sys.argv[1])
ph = importlib.util.module_from_spec(spec); spec.loader.exec_module(ph)
full_speed = float(sys.argv[2])   # the share of a real CPU a task gets at fmax
kinds = {k: (float(a), float(t)) for k, a, t in (x.split(":") for x in sys.argv[3:])}
t0 = time.monotonic()   # a new task runs unthrottled until the simulator moves it
while "joulestep-fakehw" not in open("/proc/self/cgroup").read() and time.monotonic() - t0 < 5:
    time.sleep(0.005)
def cpu(seconds):
    # CPU work defined as CPU time, not a loop count: the host's own clock and its
    # other load change how fast a loop runs, not how much CPU time the work needs
    end = time.process_time() + seconds
    x = 0
    while time.process_time() < end:
        for i in range(2000):
            x += i * i
def poll(s):
    end = time.monotonic() + s
    while time.monotonic() < end:
        pass
for kind, (alpha, t) in kinds.items():
    ph.begin(kind, sync=True)
    cpu(alpha * t * full_speed)   # alpha * t wall seconds at fmax
    poll((1 - alpha) * t)
    ph.end(sync=True)
"""


def cli(*args, db):
    r = subprocess.run([str(CLI), "--db", str(db), *map(str, args)], capture_output=True,
                       text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"joulestep {args}: {r.stdout}\n{r.stderr}")
    return r.stdout


class Sim:
    def __init__(self, c, root, build):
        self.c, self.root, self.build = c, root, build
        self.hw = root / "hw"
        fakehw.create(str(self.hw), packages=1, cpus_per_package=c.cpus, fmax_khz=FMAX,
                      fmin_khz=FMIN, model=MODEL)
        self.log = root / "fakehw.log"
        c.serve_fakehw(self.hw, tick_ms=20, throttle=True, log=self.log, full_speed=FULL_SPEED)
        if "throttling via" not in self.log.read_text():
            raise RuntimeError(f"no CPU bandwidth control: {self.log.read_text()}")
        self.spool = root / "spool"
        self.auto = root / "auto.json"
        self.db = root / "js.db"
        self.app = root / "app.py"
        self.app.write_text(APP)
        os.chmod(self.app, 0o644)
        self.phase_py = c.public_path(REPO / "cli" / "src" / "joulestep" / "phase.py")
        c.write_plugstack(build / "spank" / "joulestep.so",
                          {"spool": self.spool, "state": root / "state", "sysfs": self.hw,
                           "socket_dir": root / "sock", "backend": "sysfs", "sample_ms": 200,
                           "min_ratio": 0.5, "auto": self.auto})
        c.restart_slurmd()

    def job(self, policy, tags=None, body=None):
        tag = f"#SBATCH --energy-tag={tags}\n" if tags else ""
        body = body or (f"python3 {self.app} {self.phase_py} {FULL_SPEED} "
                        + " ".join(f"{k}:{a}:{t}" for k, (a, t) in KINDS.items()))
        job, out = self.c.run_job(f"#!/bin/sh\n#SBATCH -n1\n#SBATCH --energy-policy={policy}\n"
                                  f"{tag}{body}\n", USER, (), 120)
        rec = spoolmod.wait_records(self.spool, job, ["batch"], self.c.logs, 60)["batch"]
        return int(job), rec, out


def phases(rec):
    """kind -> (energy J, time s, ratio) of the record's phases."""
    fmax = rec["step"].get("fmax_khz") or FMAX
    out = {}
    for p in rec["phases"]:
        e = (p["energy_cpu_uj"] or 0) + (p["energy_dram_uj"] or 0)
        out[p["kind"]] = (e / 1e6, p["duration_ns"] / 1e9,
                          (p["freq_khz"] or fmax) / fmax)
    return out


def mean(xs):
    return statistics.fmean(xs) if xs else float("nan")


def oracle(sim, reps, bound):
    rows = {k: {r: [] for r in RATIOS} for k in KINDS}
    for _ in range(reps):
        for r in RATIOS:
            _, rec, _ = sim.job("phase:" + ",".join(f"{k}={r:g}" for k in KINDS))
            for k, (e, t, _) in phases(rec).items():
                rows[k][r].append((e, t))
    table = {}
    for k in KINDS:
        e1, t1 = mean([e for e, _ in rows[k][1.0]]), mean([t for _, t in rows[k][1.0]])
        per = {r: dict(e=mean([e for e, _ in xs]), t=mean([t for _, t in xs]),
                       e_sd=statistics.stdev([e for e, _ in xs]) if len(xs) > 1 else 0.0,
                       t_sd=statistics.stdev([t for _, t in xs]) if len(xs) > 1 else 0.0)
               for r, xs in rows[k].items()}
        for r, v in per.items():
            v["slow"] = v["t"] / t1 - 1
            v["save"] = 1 - v["e"] / e1
        ok = [r for r in RATIOS if per[r]["slow"] <= bound]
        best = min(ok, key=lambda r: per[r]["e"])
        alphas = [per[r]["slow"] / (1 / r - 1) for r in RATIOS if r < 1]
        table[k] = dict(per=per, best=best, e1=e1, t1=t1, alpha=mean(alphas))
    return table


def auto_runs(sim, runs, bound_pct):
    sim.spool.mkdir(exist_ok=True)
    cli("ingest", sim.spool, db=sim.db)
    cli("policy", "update", "--save", sim.auto, "--bound-pct", bound_pct,
        "--ratios", ",".join(f"{r:g}" for r in RATIOS), "--apps", "sim", db=sim.db)
    log = []
    for i in range(runs):
        job, rec, _ = sim.job("auto", tags="app=sim")
        st = rec["step"]
        states = st.get("policy_states") or {}
        log.append(dict(job=job, baseline=st.get("policy_baseline"),
                        ph={k: (*v, states.get(k, "none")) for k, v in phases(rec).items()}))
        cli("ingest", sim.spool, db=sim.db)
        cli("policy", "update", "--save", sim.auto, db=sim.db)
    final = json.loads(sim.auto.read_text())["apps"].get("sim", {}).get("phases", {})
    show = json.loads(cli("--format", "json", "policy", "show", "--file", sim.auto, "--app",
                          "sim", db=sim.db))
    return log, final, show


def report(table, log, final, show, iod, bound):
    print(f"\noracle sweep (mean of the jobs at each ratio; slowdown and saving vs fmax, "
          f"the same run):")
    print(f"{'kind':9} {'ratio':>5} {'energy J':>9} {'sd':>6} {'time s':>7} {'sd':>6} "
          f"{'slowdown':>9} {'saving':>7}")
    for k, v in table.items():
        for r in RATIOS:
            p = v["per"][r]
            print(f"{k:9} {r:5.2f} {p['e']:9.3f} {p['e_sd']:6.3f} {p['t']:7.3f} {p['t_sd']:6.3f} "
                  f"{100 * p['slow']:8.1f}% {100 * p['save']:6.1f}%")
    kinds = {k["kind"]: k for k in show["kinds"]}
    print(f"\npolicy quality over {len(log)} auto runs (bound {100 * bound:g} %):")
    hdr = (f"{'kind':9} {'alpha':>5} | {'oracle':>6} {'saving':>7} | {'auto':>5} {'state':>9} "
           f"{'saving':>7} {'%oracle':>7} {'slowdown':>8} {'explore%':>8} {'settled@':>8} | "
           f"{'io-dvfs':>7} {'saving':>7} {'slowdown':>8}")
    print(hdr)
    print("-" * len(hdr))
    for k, v in table.items():
        per, e1 = v["per"], v["e1"]
        ob = v["best"]
        fk = final.get(k, {})
        ar = fk.get("ratio", float("nan"))
        ast = fk.get("state", "-")
        settled = ast == "settled"
        ap = per.get(ar) if settled else None
        a_save = ap["save"] if ap else float("nan")
        o_save = per[ob]["save"]
        if not settled:
            pct = "-"
        elif o_save > 0.005:
            pct = f"{100 * a_save / o_save:.0f}%"
        else:
            pct = "n/a" if ar == ob else f"{100 * a_save:+.1f}pt"
        # energy spent exploring: the runs not at the settled ratio as settled (baseline
        # runs included), over what the settled ratio uses; as % of the runs' saving
        save_all = sum(e1 - run["ph"][k][0] for run in log if k in run["ph"])
        ex = "-"
        if ap:
            explore = sum(run["ph"][k][0] - ap["e"] for run in log
                          if k in run["ph"] and not (run["ph"][k][3] == "settled"
                                                     and not run["baseline"]))
            ex = (f"{100 * explore / save_all:.0f}%" if save_all > 0.01 * e1 and o_save > 0.005
                  else "n/a")
        settled_at = next((i + 1 for i, run in enumerate(log)
                           if k in run["ph"] and run["ph"][k][3] == "settled"), None)
        io_r = IO_DVFS[k]
        slow = f"{100 * ap['slow']:.1f}%" if ap else "-"
        save = f"{100 * a_save:.1f}%" if ap else "-"
        print(f"{k:9} {v['alpha']:5.2f} | {ob:6.2f} {100 * o_save:6.1f}% | {ar:5.2f} {ast:>9} "
              f"{save:>7} {pct:>7} {slow:>8} {ex:>8} {str(settled_at or '-'):>8} | {io_r:7.3f} "
              f"{100 * iod[k]['save']:6.1f}% {100 * iod[k]['slow']:7.1f}%")
        print(f"{'':9} {len(log)} runs: {100 * save_all / (e1 * len(log)):.1f} % less energy than at fmax")
        print(f"{'':9} learner: {kinds.get(k, {}).get('reason', '-')}")
    print("\nper auto run (ratio applied / state from the file):")
    for i, run in enumerate(log, 1):
        print(f"  {i:2d} job {run['job']}{' baseline' if run['baseline'] else ''}: " + ", ".join(
            f"{k} {v[2]:.2f}/{v[3]}" for k, v in sorted(run["ph"].items())))


def io_dvfs(sim, table, reps):
    rows = {k: [] for k in KINDS}
    for _ in range(reps):
        _, rec, _ = sim.job("io-dvfs")
        for k, (e, t, _) in phases(rec).items():
            rows[k].append((e, t))
    return {k: dict(save=1 - mean([e for e, _ in xs]) / table[k]["e1"],
                    slow=mean([t for _, t in xs]) / table[k]["t1"] - 1) for k, xs in rows.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=4, help="oracle jobs per ratio")
    ap.add_argument("--runs", type=int, default=20, help="auto runs")
    ap.add_argument("--bound-pct", type=float, default=5.0)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_policy.py must run as root (it starts a private Slurm cluster)")
    ok, why = fakehw.throttle_available()
    if not ok:
        print(f"skipped: no CPU bandwidth control on this host ({why})")
        return 0
    build = REPO / "build"
    w = make_workdir("bench-policy-")
    c = Cluster(w)
    try:
        c.start()
        ensure_user(USER)
        root = w / "jspol"
        root.mkdir(mode=0o755)
        sim = Sim(c, root, build)
        t0 = time.monotonic()
        table = oracle(sim, a.reps, a.bound_pct / 100)
        iod = io_dvfs(sim, table, a.reps)
        log, final, show = auto_runs(sim, a.runs, a.bound_pct)
        report(table, log, final, show, iod, a.bound_pct / 100)
        print(f"\n({len(log) + (len(RATIOS) + 1) * a.reps} jobs in "
              f"{time.monotonic() - t0:.0f} s; host load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} CPUs)")
    finally:
        c.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
