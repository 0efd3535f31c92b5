"""Wilkins 2022's checkpointing findings, in form, on the real VELOC 1.8 and GenericIO
(docs/experiments.md, "Checkpointing on the real libraries").

Runs bench/jobs/ckpt-veloc-real.sbatch and ckpt-gio-real.sbatch on a private two-node
Slurm cluster with the plugin, on the fake RAPL tree in live mode (energy follows time
and CPU use: the "time-faithful simulator"), and prints, from the records' phases:
  1. async (VELOC) against sync (GenericIO POSIX; VELOC sync beside it): throughput of
     the blocking part and its energy;
  2. VELOC async with its scratch tier in DRAM (/dev/shm) against disk;
  3. energy against data size (VELOC async and GenericIO), with a linear fit;
  4. (--what damaris) Damaris 1.7.1 with one dedicated core (its HDF5 plugin) against
     time partitioning (every rank writes its HDF5 file) across output frequencies
     (Dorier 2016, Yildiz 2014): completion time and the node's energy, and `joulestep compare
     --what io` on the records.
Every table names the library that produced it. Root, after `make deps all`:
    .venv/bin/python bench/ckpt/real_experiments.py [--what ckpt,damaris] [--reps R]
"""
from __future__ import annotations

import argparse
import pathlib
import shutil
import statistics
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "cluster"))
sys.path.insert(0, str(REPO / "tests" / "fakehw"))

import iolibs  # noqa: E402
from harness import Cluster, make_workdir  # noqa: E402
from test_bench_mpi import USER, BenchEnv  # noqa: E402

MIB = 1 << 20


def run(env: BenchEnv, script: str, tags: str, vars_: dict, ranks: int) -> dict:
    """One job on one node; per phase kind: total seconds (node's phases end-start),
    energy (CPU+DRAM J), bytes."""
    job, out = env.run(script, ["-N1", f"-n{ranks}", "-O", "--energy-policy=monitor",
                                f"--energy-tag={tags}"], vars_, timeout=600)
    node = env.c.job_info(job)["NodeList"]
    rec = env.records(job, [("0", node)])[("0", node)]
    res: dict = {}
    for p in rec["phases"]:
        r = res.setdefault(p["kind"], {"s": 0.0, "j": 0.0, "bytes": 0, "n": 0})
        r["s"] += (p["end_ns"] - p["start_ns"]) / 1e9
        r["j"] += (p["energy_cpu_uj"] + p["energy_dram_uj"]) / 1e6
        r["bytes"] += p["bytes"] or 0
        r["n"] += 1
    return res


def gibps(r: dict) -> float:
    return r["bytes"] / (1 << 30) / r["s"] if r["s"] > 0 else float("nan")


def damaris(env: BenchEnv) -> None:
    """TP (2 ranks compute and write) against DC (1 client, 1 dedicated core: the
    papers' trade of a compute core for asynchronous I/O) on one 2-core node."""
    grid, iters, sweeps = "96x96x96", 20, 60
    print(f"\n# 4. Damaris 1.7.1 (DC, HDF5 plugin) against TP (HDF5 per rank); grid {grid} "
          f"doubles, {iters} iterations, one node, 2 ranks")
    print("| library | approach | every | s | node J | I/O phases s |")
    print("|---|---|---|---|---|---|")
    jobs = []
    for every in (1, 2, 5):
        for mode in ("tp", "dc"):
            lib = "hdf5" if mode == "tp" else "damaris-1.7.1"
            job, out = env.run("damaris-real.sbatch",
                               ["-N1", "-n2", "-O",
                                f"--energy-tag=lib={lib},approach={mode},every={every},exp=real"],
                               {"JS_IO": mode, "JS_K": 1, "JS_GRID": grid, "JS_ITERS": iters,
                                "JS_EVERY": every, "JS_SWEEPS": sweeps, "JS_OUT": env.dirs("out")},
                               timeout=600)
            node = env.c.job_info(job)["NodeList"]
            rec = env.records(job, [("0", node)])[("0", node)]
            st = rec["step"]
            io_s = sum((p["end_ns"] - p["start_ns"]) / 1e9 for p in rec["phases"]
                       if p["kind"] in ("write", "send"))
            print(f"| {'HDF5' if mode == 'tp' else 'Damaris 1.7.1'} | {mode} | {every} | "
                  f"{(st['end_ns'] - st['start_ns']) / 1e9:.2f} | {st['energy_total_uj'] / 1e6:.2f} | "
                  f"{io_s:.3f} |")
            jobs.append(job)
    db = env.root / "real.db"
    cli = str(REPO / ".venv" / "bin" / "joulestep")
    subprocess.run([cli, "--db", str(db), "ingest", str(env.spool)], check=True,
                   capture_output=True)
    for every in (1, 2, 5):
        res = subprocess.run([cli, "--db", str(db), "compare", "--what", "io", "--by", "tag:approach",
                              "--where", f"every={every}", "--where", "exp=real"],
                             capture_output=True, text=True)
        print(f"\njoulestep compare --what io --by tag:approach --where every={every}:\n"
              + (res.stdout or res.stderr))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--what", default="ckpt,damaris")
    a = ap.parse_args()
    what = set(a.what.split(","))
    veloc = iolibs.need("veloc")
    iolibs.need("genericio")
    if "damaris" in what:
        iolibs.need("damaris")
    uid = __import__("pwd").getpwnam(USER).pw_uid
    workdir = make_workdir("ckpt-real-")
    c = Cluster(workdir, nodes=2)
    env = None
    try:
        c.start()
        env = BenchEnv(c, REPO / "build")
        vbin = c.public_path(veloc / "bin")
        disk = c.user_dir(USER)  # on the workdir's disk (not tmpfs)

        def veloc_job(mode, tier, mib):
            iolibs.stop_backend(uid)
            v = {"JS_MODE": mode, "JS_TIER": tier, "JS_SIZE": f"{mib}M", "JS_REPS": a.reps,
                 "JS_PFS": env.dirs("pfs"), "VELOC_BIN": vbin, "JS_SSD": disk,
                 "JS_CKPT_ARGS": "--quiet"}
            try:
                return run(env, "ckpt-veloc-real.sbatch",
                           f"lib=veloc-1.8,strategy=veloc,mode={mode},tier={tier}", v, a.ranks)
            finally:
                iolibs.stop_backend(uid)

        def gio_job(io, mib):
            v = {"JS_IO": io, "JS_SIZE": f"{mib}M", "JS_REPS": a.reps, "JS_PFS": env.dirs("pfs"),
                 "JS_CKPT_ARGS": "--quiet"}
            return run(env, "ckpt-gio-real.sbatch", f"lib=genericio,strategy=genericio,io={io}",
                       v, a.ranks)

        if "damaris" in what:
            damaris(env)
        if "ckpt" not in what:
            return 0
        n = a.size_mib
        rows = {"VELOC 1.8 async, DRAM scratch": veloc_job("async", "dram", n),
                "VELOC 1.8 sync, DRAM scratch": veloc_job("sync", "dram", n),
                "GenericIO POSIX": gio_job("posix", n),
                "GenericIO MPI-IO": gio_job("mpiio", n),
                "VELOC 1.8 async, disk scratch": veloc_job("async", "ssd", n)}
        print(f"\n# 1-2. {a.ranks} ranks x {n} MiB, {a.reps} checkpoints, one node "
              "(fake RAPL, live); blocking part = `checkpoint` phases, flush = `flush`")
        print("| library, mode | blocking GiB/s | blocking J | J/GiB | flush s | flush J | total J |")
        print("|---|---|---|---|---|---|---|")
        for name, r in rows.items():
            ck, fl = r["checkpoint"], r.get("flush", {"s": 0.0, "j": 0.0})
            gib = ck["bytes"] / (1 << 30)
            print(f"| {name} | {gibps(ck):.2f} | {ck['j']:.3f} | {ck['j'] / gib:.3f} | "
                  f"{fl['s']:.3f} | {fl['j']:.3f} | {ck['j'] + fl['j']:.3f} |")
        a_ck = rows["VELOC 1.8 async, DRAM scratch"]["checkpoint"]
        for ref in ("GenericIO POSIX", "VELOC 1.8 sync, DRAM scratch"):
            s_ck = rows[ref]["checkpoint"]
            print(f"async VELOC / {ref}: throughput x{gibps(a_ck) / gibps(s_ck):.2f}, "
                  f"blocking energy x{a_ck['j'] / s_ck['j']:.2f}")
        d_ck = rows["VELOC 1.8 async, disk scratch"]["checkpoint"]
        print(f"DRAM / disk scratch (VELOC async): throughput x{gibps(a_ck) / gibps(d_ck):.2f}, "
              f"blocking energy x{a_ck['j'] / d_ck['j']:.2f}")

        print(f"\n# 3. energy against data size ({a.ranks} ranks, {a.reps} checkpoints)")
        print("| library | MiB per rank | blocking + flush J | s |")
        print("|---|---|---|---|")
        for name, job in (("VELOC 1.8 async, DRAM", lambda m: veloc_job("async", "dram", m)),
                          ("GenericIO POSIX", lambda m: gio_job("posix", m))):
            xs, ys = [], []
            for m in (n // 4, n // 2, n, 2 * n):
                r = job(m)
                j = sum(p["j"] for p in r.values())
                s = sum(p["s"] for p in r.values())
                xs.append(m)
                ys.append(j)
                print(f"| {name} | {m} | {j:.3f} | {s:.3f} |")
            slope, icpt = statistics.linear_regression(xs, ys)
            r2 = statistics.correlation(xs, ys) ** 2
            print(f"{name}: J = {slope:.5f} x MiB + {icpt:.3f}, R^2 = {r2:.4f}")
    finally:
        if env:
            env.close()
        c.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
