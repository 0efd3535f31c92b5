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
     --what io` on the records;
  5. (--what damaris-nodes) DC(1) and dedicated nodes DN(2:1) against TP across output
     frequencies on three namespaced nodes, per-node energy (a netns cluster: root with
     CAP_SYS_ADMIN).
Every table names the library that produced it. Root, after `make deps all`:
    .venv/bin/python bench/ckpt/real_experiments.py [--what ckpt,damaris,damaris-nodes] [--reps R]
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "cluster"))
sys.path.insert(0, str(REPO / "tests" / "fakehw"))

import fakehw as fakehw_mod  # noqa: E402
import iolibs  # noqa: E402
import spool  # noqa: E402
from harness import Cluster, ClusterError, make_workdir  # noqa: E402
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


NODES3 = ("node1", "node2", "node3")


# ranks per node of each approach: DC(1) one client and one dedicated core per node; DN
# with one rank per node, because Damaris 1.7.1 with two server cores on its dedicated
# node never wrote the last output and its servers never stopped (seen every time, 2 of 2
# runs, -N3 --ntasks-per-node=2); TP as DN, the same compute ranks per node
PPN = {"tp": 1, "dc": 2, "dn": 1}


def damaris_nodes(reps: int, everies=(1, 2, 5), modes=("tp", "dc", "dn"), iters=10,
                  grid="64x64x48", sweeps=120) -> None:
    """TP, DC(1) and DN(2:1) on the real Damaris 1.7.1 (HDF5 plugin) against time
    partitioning, across output frequencies, on three nodes of 2 cores, each node a host
    of its own (network, mount and UTS namespaces: Damaris places dedicated nodes by host
    name) with its own fake RAPL tree in live mode whose utilisation is that node's jobs'
    alone: per-node energy. The same allocation (3 nodes of 2 cores) and the same work
    (grid, sweeps) for every approach: tp = 3 ranks (one per node) compute and write;
    dc1 = 3 clients + 3 dedicated cores; dn2:1 = 2 clients + the dedicated node's rank,
    Damaris' server (PPN: why one rank per node)."""
    iolibs.need("damaris")
    # the three nodes share this host's cores: no binding, or every node's first task
    # would be bound to the same core 0 (a waiting rank spins on it, in MPI, with a
    # computing one: seen, 4 s iterations beside 15 ms ones)
    os.environ.setdefault("JOULESTEP_TASK_PLUGIN", "task/none")
    workdir = make_workdir("dam-nodes-")
    c = Cluster(workdir, nodes=3, netns=True, cpus=2)
    rows, failed = [], []
    try:
        c.start()
        for n in NODES3:
            hw = c.netns.host_dir(n) / "hw"
            fakehw_mod.create(str(hw), packages=1, cpus_per_package=2, fmax_khz=2400000,
                              fmin_khz=800000)
            c.serve_fakehw(hw, tick_ms=20, throttle=True, node=n)
        loc = c.netns.local
        c.write_plugstack(REPO / "build" / "spank" / "joulestep.so", {
            "spool": loc / "spool", "state": loc / "state", "sysfs": loc / "hw",
            "socket_dir": loc / "sock", "backend": "sysfs", "sample_ms": 200})
        c.restart_slurmd()
        bench = c.public_path(REPO / "build" / "bench")
        script = (REPO / "bench" / "jobs" / "damaris-real.sbatch").read_text()
        for rep in range(reps):
            for every in everies:
                for mode, approach, lib in (("tp", "tp", "hdf5"), ("dc", "dc1", "damaris-1.7.1"),
                                            ("dn", "dn2:1", "damaris-1.7.1")):
                    if mode not in modes:
                        continue
                    out = c.user_dir(USER) / f"out-{mode}-{every}-{rep}"
                    exports = ",".join(["ALL", f"JS_BENCH={bench}", f"JS_IO={mode}", "JS_K=1",
                                        "JS_D=1", f"JS_GRID={grid}", f"JS_ITERS={iters}",
                                        f"JS_EVERY={every}", f"JS_SWEEPS={sweeps}",
                                        f"JS_OUT={out}"])
                    try:
                        job, _ = c.run_job(script, USER, [
                            "-N3", f"-n{3 * PPN[mode]}", f"--ntasks-per-node={PPN[mode]}",
                            "--energy-policy=monitor",
                            f"--energy-tag=lib={lib},approach={approach},every={every},"
                            "exp=real-nodes", f"--export={exports}"], timeout=300)
                    except ClusterError as e:  # reported, and the matrix goes on
                        tail = [ln for ln in str(e).splitlines()
                                if "srun:" in ln or "summary" in ln][:4]
                        print(f"  {approach} every {every} rep {rep}: FAILED: "
                              + " / ".join(tail), flush=True)
                        failed.append((approach, every, rep))
                        c.run(["scancel", "--user", USER], check=False)
                        c.wait_idle(120)
                        continue
                    recs = {}
                    for n in NODES3:
                        recs.update(spool.wait_records(c.netns.host_dir(n) / "spool", job,
                                                       [("0", n)], c.logs, by_node=True))
                    node_j = {n: recs[("0", n)]["step"]["energy_total_uj"] / 1e6 for n in NODES3}
                    st = [recs[("0", n)]["step"] for n in NODES3]
                    t = (max(x["end_ns"] for x in st) - min(x["start_ns"] for x in st)) / 1e9
                    io_s = max(sum((p["end_ns"] - p["start_ns"]) / 1e9 for p in
                                   recs[("0", n)]["phases"] if p["kind"] in ("write", "send"))
                               for n in NODES3)
                    rows.append((approach, every, rep, t, sum(node_j.values()),
                                 min(node_j.values()), max(node_j.values()), io_s))
                    print(f"  job {job}: {approach} every {every} rep {rep}: {t:.2f} s, "
                          f"{sum(node_j.values()):.1f} J", flush=True)
        print(f"\n# 5. Damaris 1.7.1 DC(1), DN(2:1) against TP; 3 nodes x 2 ranks, grid {grid} "
              f"doubles, {iters} iterations, {sweeps} sweeps, {reps} run(s) each")
        print("| approach | every | time s | energy J (3 nodes) | node min J | node max J | "
              "I/O phases s (slowest node) |")
        print("|---|---|---|---|---|---|---|")
        for approach in ("tp", "dc1", "dn2:1"):
            for every in everies:
                sel = [r for r in rows if r[0] == approach and r[1] == every]
                if not sel:
                    continue
                med = [statistics.median(r[i] for r in sel) for i in range(3, 8)]
                print(f"| {approach} | {every} | {med[0]:.2f} | {med[1]:.1f} | {med[2]:.1f} | "
                      f"{med[3]:.1f} | {med[4]:.3f} |")
        if failed:
            print("failed runs (left out of the table): "
                  + ", ".join(f"{a} every {e} rep {r}" for a, e, r in failed))
        db = workdir / "real-nodes.db"
        cli = str(REPO / ".venv" / "bin" / "joulestep")
        subprocess.run([cli, "--db", str(db), "ingest",
                        *(str(c.netns.host_dir(n) / "spool") for n in NODES3)],
                       check=True, capture_output=True)
        for every in everies:
            res = subprocess.run([cli, "--db", str(db), "compare", "--what", "io", "--by",
                                  "tag:approach", "--where", f"every={every}",
                                  "--where", "exp=real-nodes"], capture_output=True, text=True)
            print(f"\njoulestep compare --what io --by tag:approach --where every={every}:\n"
                  + (res.stdout or res.stderr))
    finally:
        c.stop()
        if os.environ.get("JOULESTEP_KEEP_CLUSTER"):
            print(f"cluster files kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--what", default="ckpt,damaris")
    ap.add_argument("--every", default="1,2,5", help="damaris-nodes: output frequencies")
    ap.add_argument("--modes", default="tp,dc,dn", help="damaris-nodes: approaches")
    ap.add_argument("--iters", type=int, default=10, help="damaris-nodes: iterations")
    ap.add_argument("--grid", default="64x64x48", help="damaris-nodes: NXxNYxNZ doubles")
    ap.add_argument("--sweeps", type=int, default=120, help="damaris-nodes: compute per iteration")
    a = ap.parse_args()
    what = set(a.what.split(","))
    if "damaris-nodes" in what:
        damaris_nodes(a.reps if a.reps != 5 else 1, tuple(int(e) for e in a.every.split(",")),
                      tuple(a.modes.split(",")), a.iters, a.grid, a.sweeps)
        what.discard("damaris-nodes")
        if not what:
            return 0
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
