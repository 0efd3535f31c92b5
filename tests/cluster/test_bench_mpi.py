"""The MPI experiment jobs of bench/jobs (checkpointing, Damaris I/O approaches) on a
live two-node Slurm cluster with the plugin, Open MPI launched by `srun --mpi=pmix`.

The cluster runs two slurmd on this host (node1, node2; harness `Cluster(nodes=2)`,
one CPU each, ranks overcommitted with -O), each node with its own fake RAPL/cpufreq
tree in live mode (energy follows time and real CPU use). Each job is the bench/jobs
script itself, short sizes given through its JS_* variables. Checked against truths
computed here from the options: the phases of every record (kinds, labels, which ranks),
the bytes each rank reported, the files left on the "parallel FS" (--keep), the clock
of every phase under ckpt-dvfs, energies (parts within their totals, each counted once),
and `joulestep ingest` + `joulestep compare` on the records.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import time

import pytest

import fakehw
import iolibs
import spool
from harness import Cluster, make_workdir

pytestmark = pytest.mark.cluster

USER = "jsuser"
NODES = ("node1", "node2")
FMAX = 4000000
FMIN = 800000
REPO = pathlib.Path(__file__).resolve().parents[2]
JOBS = REPO / "bench" / "jobs"


class BenchEnv:
    def __init__(self, cluster: Cluster, build: pathlib.Path):
        self.c = cluster
        self.root = cluster.workdir / "jsbench"
        self.root.mkdir(mode=0o755, exist_ok=True)
        os.chmod(self.root, 0o755)
        (self.root / "hw").mkdir(mode=0o755, exist_ok=True)
        self.hw = {n: self.root / "hw" / n for n in NODES}
        self.servers = []
        for n in NODES:
            fakehw.create(str(self.hw[n]), packages=1, cpus_per_package=max(1, cluster.cpus),
                          fmax_khz=FMAX, fmin_khz=FMIN)
            self.servers.append(fakehw.serve_background(str(self.hw[n]), tick_ms=20))
        self.spool = self.root / "spool"
        self.build = cluster.public_path(build)
        self.bench = self.build / "bench"
        self.c.write_plugstack(build / "spank" / "joulestep.so", {
            "spool": self.spool, "state": self.root / "state" / "%n",
            "sysfs": self.root / "hw" / "%n", "socket_dir": self.root / "sock" / "%n",
            "backend": "sysfs", "sample_ms": 200})
        self.c.restart_slurmd()
        self.orig = self.cpufreq()
        self.n = 0

    def cpufreq(self) -> dict:
        return {(n, cpu): fakehw.read_cpufreq(str(self.hw[n]), cpu)
                for n in NODES for cpu in range(max(1, self.c.cpus))}

    def close(self):
        for s in self.servers:
            s.terminate()
            s.wait(10)

    def dirs(self, what: str) -> pathlib.Path:
        """A fresh path in the job user's directory (the job creates it)."""
        self.n += 1
        return self.c.user_dir(USER) / f"{what}-{self.n}"

    def run(self, script: str, sbatch_args, env: dict, timeout=180):
        exports = ",".join(["ALL", f"JS_BENCH={self.bench}"] + [f"{k}={v}" for k, v in env.items()])
        return self.c.run_job((JOBS / script).read_text(), USER,
                              [*sbatch_args, f"--export={exports}"], timeout)

    def records(self, job, steps) -> dict:
        return spool.wait_records(self.spool, job, steps, self.c.logs, by_node=True)


@pytest.fixture(scope="module")
def benv(cluster_users, build_dir):
    for b in ("js-ckpt", "js-damaris"):
        if not (build_dir / "bench" / b).exists():
            pytest.fail(f"build/bench/{b} is missing: run `make` (needs make deps: openmpi)")
    workdir = make_workdir("bench-")
    c = Cluster(workdir, nodes=2)
    env = None
    try:
        c.start()
        env = BenchEnv(c, build_dir)
        yield env
    finally:
        if env:
            env.close()
        c.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def bench(benv):
    yield benv
    benv.c.wait_idle()
    assert benv.cpufreq() == benv.orig  # no CPU left at a changed clock


def ranks_per_node(nranks: int) -> dict:
    """Slurm's block distribution of -N2 -n<nranks>: node1 gets the first half (rounded up)."""
    first = (nranks + 1) // 2
    return {"node1": list(range(first)), "node2": list(range(first, nranks))}


def lowest_khz(hw: pathlib.Path) -> int:
    """ckpt-dvfs' checkpoint clock: max(min_ratio 0.5 x fmax, cpuinfo_min), rounded to the
    nearest available frequency (docs/phase-protocol.md)."""
    f = fakehw.read_cpufreq(str(hw), 0)
    want = max(0.5 * f["cpuinfo_max_freq"], f["cpuinfo_min_freq"])
    avail = [int(x) for x in
             (hw / "devices/system/cpu/cpu0/cpufreq/scaling_available_frequencies").read_text().split()]
    return min(avail, key=lambda k: (abs(k - want), k))


def check_energy(rec):
    """Parts within their totals, each counted once: step total = CPU + DRAM; phases
    that never overlap (one rank per kind at a time) add up to at most the step."""
    st = rec["step"]
    assert st["energy_total_uj"] == st["energy_cpu_uj"] + st["energy_dram_uj"]
    assert st["energy_cpu_uj"] > 0
    for p in rec["phases"]:
        assert 0 <= p["energy_cpu_uj"] <= st["energy_cpu_uj"]
        assert st["start_ns"] <= p["start_ns"] <= p["end_ns"] <= st["end_ns"]


def check_disjoint_sum(rec):
    top = sorted((p for p in rec["phases"] if p["depth"] == 0), key=lambda p: p["start_ns"])
    for a, b in zip(top, top[1:]):
        assert a["end_ns"] <= b["start_ns"], (a, b)
    assert sum(p["energy_cpu_uj"] for p in top) <= rec["step"]["energy_cpu_uj"]
    assert sum(p["energy_dram_uj"] for p in top) <= rec["step"]["energy_dram_uj"]


def ranks_of(phase) -> list:
    return sorted(r["rank"] for r in phase["ranks"])


def cli(*args) -> str:
    res = subprocess.run([str(REPO / ".venv" / "bin" / "joulestep"), *map(str, args)],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


RESULTS: dict = {}  # test -> (job, records), for the ingest/compare test at the end


# ---------------------------------------------------------------- checkpointing

@pytest.mark.parametrize("policy", ["monitor", "ckpt-dvfs"])
def test_ckpt_async_local_then_flush(bench, policy):
    nranks, total, reps = 3, 3 * 700001 + 2, 2
    pfs = bench.dirs("pfs")
    job, out = bench.run("ckpt-veloc.sbatch",
                         ["-N2", f"-n{nranks}", "-O", f"--energy-policy={policy}",
                          "--energy-tag=strategy=veloc,tier=dram,config=veloc-dram"],
                         {"JS_TIER": "dram", "JS_TOTAL": total, "JS_REPS": reps, "JS_PFS": pfs,
                          "JS_CKPT_ARGS": "--keep"})
    shutil.rmtree(f"/dev/shm/js-ckpt-{job}", ignore_errors=True)
    mine = {r: total // nranks + (r < total % nranks) for r in range(nranks)}
    # the last checkpoint stays on the "parallel FS", one file per rank; earlier ones went
    files = {p.name: p.stat().st_size for p in pfs.iterdir()}
    assert files == {f"ckpt-{job}.0.veloc.{reps}.{r}": mine[r] for r in range(nranks)}
    low = {n: lowest_khz(bench.hw[n]) for n in NODES}
    per_node = ranks_per_node(nranks)
    recs = bench.records(job, [("batch", "node1")] + [("0", n) for n in NODES])
    for n in NODES:
        rec = recs[("0", n)]
        ph = rec["phases"]
        assert [(p["kind"], p["label"], p["depth"]) for p in ph] == [
            (k, f"ckpt-{i}", 0) for i in range(1, reps + 1) for k in ("checkpoint", "flush")]
        for p in ph:
            assert ranks_of(p) == per_node[n]
            assert {r["rank"]: r["bytes"] for r in p["ranks"]} == {r: mine[r] for r in per_node[n]}
            assert p["bytes"] == sum(mine[r] for r in per_node[n])
            assert p["nranks"] == len(per_node[n])
            # ckpt-dvfs: the blocking local write at the lowest clock, the flush never
            want = low[n] if policy == "ckpt-dvfs" and p["kind"] == "checkpoint" else None
            assert p["freq_khz"] == want, (n, p)
        assert rec["step"]["policy"] == policy
        check_energy(rec)
        check_disjoint_sum(rec)
    assert recs[("batch", "node1")]["phases"] == []
    RESULTS[f"veloc-{policy}"] = job


@pytest.mark.parametrize("io", ["mpiio", "posix"])
def test_ckpt_sync_aggregated(bench, io):
    nranks, size, reps, nfiles = 3, 1048579, 2, 2
    pfs = bench.dirs("pfs")
    job, out = bench.run("ckpt-gio.sbatch",
                         ["-N2", f"-n{nranks}", "-O", "--energy-policy=ckpt-dvfs",
                          f"--energy-tag=strategy=genericio,tier=pfs,io={io},config=genericio"],
                         {"JS_IO": io, "JS_SIZE": size, "JS_REPS": reps, "JS_FILES": nfiles,
                          "JS_PFS": pfs, "JS_CKPT_ARGS": "--keep"})
    # N -> M aggregation: file m holds the contiguous block of ranks r with r*M/N == m
    want = {}
    for r in range(nranks):
        m = r * nfiles // nranks
        want[f"ckpt-{job}.0.gio.{reps}.{m}"] = want.get(f"ckpt-{job}.0.gio.{reps}.{m}", 0) + size
    assert {p.name: p.stat().st_size for p in pfs.iterdir()} == want
    per_node = ranks_per_node(nranks)
    recs = bench.records(job, [("0", n) for n in NODES])
    for n in NODES:
        rec = recs[("0", n)]
        ph = rec["phases"]
        # synchronous: one blocking phase per checkpoint, no flush
        assert [(p["kind"], p["label"]) for p in ph] == [
            ("checkpoint", f"ckpt-{i}") for i in range(1, reps + 1)]
        for p in ph:
            assert ranks_of(p) == per_node[n]
            assert p["bytes"] == size * len(per_node[n])
            assert p["freq_khz"] == lowest_khz(bench.hw[n])
        check_energy(rec)
        check_disjoint_sum(rec)
    RESULTS[f"gio-{io}"] = job


# ---------------------------------------------------------------- the real libraries

SIZE_T, INT = 8, 4  # VELOC 1.8's checkpoint header: size_t count, then (int id, size_t size)


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_ckpt_real_veloc(bench, mode):
    """VELOC 1.8 itself (bench/jobs/ckpt-veloc-real.sbatch): per node, one checkpoint phase
    per VELOC_Checkpoint and, in async mode only, one flush phase per VELOC_Checkpoint_wait
    (Algorithm 1), with every rank's bytes; the persistent tier holds the last version of
    every rank (VELOC's header + the state); VELOC's backend daemon is gone after the job."""
    veloc = iolibs.need("veloc")
    uid = __import__("pwd").getpwnam(USER).pw_uid
    iolibs.stop_backend(uid)
    nranks, total, reps = 3, 3 * 300001 + 1, 2
    pfs = bench.dirs("pfs")
    # no strategy tag: test_ingest_and_compare's tables are of the imitations' jobs
    job, out = bench.run("ckpt-veloc-real.sbatch",
                         ["-N2", f"-n{nranks}", "-O", "--energy-policy=monitor",
                          f"--energy-tag=lib=veloc-1.8,mode={mode},tier=dram"],
                         {"JS_MODE": mode, "JS_TIER": "dram", "JS_TOTAL": total, "JS_REPS": reps,
                          "JS_PFS": pfs, "VELOC_BIN": bench.c.public_path(veloc / "bin")})
    try:
        assert iolibs.backend_pid(uid) is None, "the job left VELOC's backend running"
    finally:
        iolibs.stop_backend(uid)
    mine = {r: total // nranks + (r < total % nranks) for r in range(nranks)}
    files = {p.name: p.stat().st_size for p in pfs.iterdir() if p.suffix == ".dat"}
    assert files == {f"ckpt-{r}-{reps}.dat": mine[r] + SIZE_T + INT + SIZE_T for r in range(nranks)}
    assert not pathlib.Path(f"/dev/shm/js-veloc-{job}").exists()
    per_node = ranks_per_node(nranks)
    recs = bench.records(job, [("0", n) for n in NODES])
    kinds = ("checkpoint", "flush") if mode == "async" else ("checkpoint",)
    for n in NODES:
        rec = recs[("0", n)]
        assert [(p["kind"], p["label"]) for p in rec["phases"]] == [
            (k, "veloc") for _ in range(reps) for k in kinds], (n, out)
        for p in rec["phases"]:
            assert ranks_of(p) == per_node[n]
            assert {r["rank"]: r["bytes"] for r in p["ranks"]} == {r: mine[r] for r in per_node[n]}
        assert rec["job"]["tags"]["lib"] == "veloc-1.8"
        check_energy(rec)
        check_disjoint_sum(rec)
    assert "library=VELOC-1.8" in out, out


@pytest.mark.parametrize("io", ["posix", "mpiio"])
def test_ckpt_real_genericio(bench, io):
    """GenericIO itself (bench/jobs/ckpt-gio-real.sbatch): per node one blocking checkpoint
    phase per GenericIO::write with every rank's bytes; N ranks into M files (GenericIO's
    partitions, rank % M) plus its map file; GenericIO's own GenericIOVerify checks the
    kept checkpoint's CRCs."""
    gio = iolibs.need("genericio")
    nranks, size, reps, nfiles = 3, 524288 + 8 * 3, 2, 2
    pfs = bench.dirs("pfs")
    job, out = bench.run("ckpt-gio-real.sbatch",
                         ["-N2", f"-n{nranks}", "-O", "--energy-policy=monitor",
                          f"--energy-tag=lib=genericio,gio={io}"],
                         {"JS_IO": io, "JS_SIZE": size, "JS_REPS": reps, "JS_FILES": nfiles,
                          "JS_PFS": pfs, "JS_CKPT_ARGS": "--keep"})
    last = f"ckpt-{job}.{reps}"
    assert sorted(p.name for p in pfs.iterdir()) == sorted([last] + [f"{last}#{m}" for m in range(nfiles)])
    # each data file holds its partition's doubles (plus GenericIO's headers and CRCs)
    for m in range(nfiles):
        held = sum(size for r in range(nranks) if r % nfiles == m)
        assert held < (pfs / f"{last}#{m}").stat().st_size < held + 4096
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    res = subprocess.run([str(gio / "bin" / "GenericIOVerify"), str(pfs / last)], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and f"{pfs / last}: okay" in res.stdout, res.stdout + res.stderr
    per_node = ranks_per_node(nranks)
    recs = bench.records(job, [("0", n) for n in NODES])
    for n in NODES:
        rec = recs[("0", n)]
        assert [(p["kind"], p["label"]) for p in rec["phases"]] == [("checkpoint", "genericio")] * reps
        for p in rec["phases"]:
            assert ranks_of(p) == per_node[n]
            assert {r["rank"]: r["bytes"] for r in p["ranks"]} == {r: size for r in per_node[n]}
        check_energy(rec)
        check_disjoint_sum(rec)
    assert f"library=GenericIO io={io}" in out, out


@pytest.mark.parametrize("mode", ["tp", "dc"])
def test_damaris_real(bench, mode):
    """Damaris 1.7.1 itself (bench/jobs/damaris-real.sbatch), on one node: tp, every rank
    computes and writes its block to its own HDF5 file; dc, Damaris takes one dedicated
    core (<dedicated cores="1">) and its HDF5 plugin writes one file per output of the
    clients' blocks, while the clients compute and hand their blocks over (`send`).
    Checked: which ranks computed, the bytes of each write/send, the files."""
    iolibs.need("damaris")
    nranks = 2 if mode == "tp" else 3
    nx, ny, nz, iters, every = 16, 16, 8, 4, 2
    clients = nranks if mode == "tp" else nranks - 1
    block = nx * ny * (nz // clients) * 8
    out = bench.dirs("out")
    # no strategy/every tags: test_ingest_and_compare's tables are of the imitations' jobs
    tag = f"lib={'hdf5' if mode == 'tp' else 'damaris-1.7.1'},approach={mode}"
    job, text = bench.run("damaris-real.sbatch", ["-N1", f"-n{nranks}", "-O", f"--energy-tag={tag}"],
                          {"JS_IO": mode, "JS_K": 1, "JS_GRID": f"{nx}x{ny}x{nz}", "JS_ITERS": iters,
                           "JS_EVERY": every, "JS_SWEEPS": 2, "JS_OUT": out})
    outputs = iters // every
    files = {p.name: p.stat().st_size for p in out.iterdir() if p.suffix == ".h5"}
    if mode == "tp":
        want = {f"tp-{job}-o{o}-r{r}.h5" for o in range(1, outputs + 1) for r in range(nranks)}
        data = block
    else:  # Damaris' HDF5 plugin, FilePerCore: one file per dedicated core per iteration
        want = {f"jsdam_It{o}_Pr0.h5" for o in range(outputs)}
        data = block * clients
    assert set(files) == want, (files, text)
    for size in files.values():  # the data and HDF5's metadata
        assert data < size < data + 65536, (files, data)
    node = bench.c.job_info(job)["NodeList"]
    rec = bench.records(job, [("0", node)])[("0", node)]
    by_kind: dict = {}
    for p in rec["phases"]:
        by_kind.setdefault(p["kind"], []).append(p)
    io_kind = "write" if mode == "tp" else "send"
    assert set(by_kind) == {"compute", io_kind}, sorted(by_kind)
    assert len(by_kind["compute"]) == iters and len(by_kind[io_kind]) == outputs
    computing = ranks_of(by_kind["compute"][0])
    assert len(computing) == clients and set(computing) <= set(range(nranks))
    for p in by_kind[io_kind]:
        assert {r["rank"]: r["bytes"] for r in p["ranks"]} == {r: block for r in computing}
    assert rec["job"]["tags"]["approach"] == mode
    check_energy(rec)
    summary = "library=HDF5 mode=tp" if mode == "tp" else "library=Damaris-1.7.1 mode=dc"
    assert summary in text, text
    if mode == "dc":  # the shared-memory segment is the job's own (/dev/shm/<buffer name>)
        assert f'<buffer name="jsdam-{job}.0"' in (out / f"damaris-{job}.xml").read_text()


# ---------------------------------------------------------------- Damaris

GRID = (16, 16, 7)   # NZ=7: uneven slabs
VARS, ITERS, EVERY = 2, 6, 2


def slab_bytes(ncomp: int) -> list:
    nx, ny, nz = GRID
    return [(nz // ncomp + (i < nz % ncomp)) * nx * ny * 8 * VARS for i in range(ncomp)]


@pytest.mark.parametrize("mode", ["tp", "dc", "dn"])
def test_damaris_roles(bench, mode):
    nranks = 2 if mode == "tp" else 4
    per_node = ranks_per_node(nranks)
    if mode == "tp":
        writers, clients = list(range(nranks)), {r: r for r in range(nranks)}
    elif mode == "dc":   # the last rank of each node writes for the node's others
        writers = [per_node[n][-1] for n in NODES]
        clients = {r: per_node[n][-1] for n in NODES for r in per_node[n][:-1]}
    else:                # dn 1:1: node2 writes for node1
        writers = per_node["node2"]
        clients = {r: writers[i % len(writers)] for i, r in enumerate(per_node["node1"])}
    compute = sorted(clients)
    slabs = dict(zip(compute, slab_bytes(len(compute))))
    wbytes = {w: sum(slabs[c] for c in compute if clients[c] == w) for w in writers}
    outputs = ITERS // EVERY
    out = bench.dirs("out")
    # the tags bench/jobs/submit.sh gives (docs/experiments.md)
    tag = {"tp": "approach=tp,io=tp", "dc": "approach=dc1,io=dc,k=1",
           "dn": "approach=dn1,io=dn,ratio=1:1"}[mode]
    job, text = bench.run("damaris.sbatch",
                          ["-N2", f"-n{nranks}", "-O", f"--energy-tag={tag},every={EVERY}"],
                          {"JS_IO": mode, "JS_K": 1, "JS_RATIO": "1:1",
                           "JS_GRID": "x".join(map(str, GRID)), "JS_ITERS": ITERS,
                           "JS_EVERY": EVERY, "JS_VARS": VARS, "JS_OUT": out,
                           "JS_DAMARIS_ARGS": "--keep"})
    # files: one per writer per output, holding its clients' slabs
    files = {p.name: p.stat().st_size for p in out.iterdir()}
    if mode == "tp":
        want = {f"dam-{job}.0.tp.o{o}.r{w}": wbytes[w] for o in range(1, outputs + 1) for w in writers}
    else:
        want = {f"dam-{job}.0.{mode}.o{o}.w{i}": wbytes[w] for o in range(1, outputs + 1)
                for i, w in enumerate(writers)}
    assert files == want
    assert sum(wbytes.values()) == GRID[0] * GRID[1] * GRID[2] * 8 * VARS
    recs = bench.records(job, [("0", n) for n in NODES])
    for n in NODES:
        rec = recs[("0", n)]
        by_kind: dict = {}
        for p in rec["phases"]:
            by_kind.setdefault(p["kind"], []).append(p)
            assert p["depth"] == 0
        node_comp = [r for r in per_node[n] if r in compute]
        node_writ = [r for r in per_node[n] if r in writers]
        kinds = {"compute"} if node_comp else set()
        kinds |= {"write"} if node_writ else set()
        kinds |= {"send"} if node_comp and mode != "tp" else set()
        assert set(by_kind) == kinds, (n, sorted(by_kind))
        # which ranks computed, which wrote: the phases' ranks
        for p in by_kind.get("compute", []):
            assert ranks_of(p) == node_comp and p["label"] == "sim"
        assert len(by_kind.get("compute", [])) == (outputs if ITERS % EVERY == 0 else outputs + 1) * bool(node_comp)
        for p in by_kind.get("write", []):
            assert ranks_of(p) == node_writ and p["label"] == mode
            assert {r["rank"]: r["bytes"] for r in p["ranks"]} == {w: wbytes[w] for w in node_writ}
        assert len(by_kind.get("write", [])) == outputs * bool(node_writ)
        for p in by_kind.get("send", []):
            assert {r["rank"]: r["bytes"] for r in p["ranks"]} == {c: slabs[c] for c in node_comp}
        check_energy(rec)
        if mode == "tp":
            check_disjoint_sum(rec)
    RESULTS[f"damaris-{mode}"] = job


# ---------------------------------------------------------------- into the CLI

def test_ingest_and_compare(bench, tmp_path):
    need = {"veloc-monitor", "veloc-ckpt-dvfs", "gio-mpiio", "gio-posix",
            "damaris-tp", "damaris-dc", "damaris-dn"}
    if not need <= set(RESULTS):
        pytest.skip("needs the jobs of the tests above (run the module whole)")
    db = tmp_path / "js.db"
    cli("--db", db, "ingest", bench.spool)
    recs = {k: spool.records(bench.spool, job, by_node=True) for k, job in RESULTS.items()}

    # checkpointing: per strategy, local + flush = total, from the records' phases
    got = json.loads(cli("--db", db, "--format", "json", "compare", "--what", "checkpoint",
                         "--by", "tag:strategy", "--where", "policy=monitor",
                         "--where", "config=veloc-dram"))  # not the real libraries' jobs
    rows = {(r["tag:strategy"], r["part"]): r for r in got["table"]}
    assert set(rows) == {("veloc", "local"), ("veloc", "flush"), ("veloc", "total")}, sorted(rows)

    def phase_j(keys, kind):
        return sum((p["energy_cpu_uj"] + p["energy_dram_uj"]) / 1e6
                   for k in keys for r in recs[k].values() for p in r["phases"] if p["kind"] == kind)
    v_local, v_flush = phase_j(["veloc-monitor"], "checkpoint"), phase_j(["veloc-monitor"], "flush")
    assert rows[("veloc", "local")]["energy_j"] == pytest.approx(v_local, rel=1e-9, abs=1e-6)
    assert rows[("veloc", "flush")]["energy_j"] == pytest.approx(v_flush, rel=1e-9, abs=1e-6)
    assert rows[("veloc", "total")]["energy_j"] == pytest.approx(v_local + v_flush, rel=1e-9, abs=1e-6)

    # I/O approaches: per approach the job's energy, each step counted once (node1's
    # srun step is inside its batch step; node2 has no batch step), and per-node stats
    got = json.loads(cli("--db", db, "--format", "json", "compare", "--what", "io",
                         "--by", "tag:io", "--where", f"every={EVERY}"))
    rows = {r["tag:io"]: r for r in got["table"]}
    assert set(rows) == {"tp", "dc", "dn"}
    for mode in ("tp", "dc", "dn"):
        r = recs[f"damaris-{mode}"]
        node_j = {"node1": r[("batch", "node1")]["step"]["energy_total_uj"] / 1e6,
                  "node2": r[("0", "node2")]["step"]["energy_total_uj"] / 1e6}
        row = rows[mode]
        assert row["runs"] == 1 and row["nodes"] == 2
        assert row["energy_j"] == pytest.approx(sum(node_j.values()), rel=1e-9)
        assert row["node_min_j"] == pytest.approx(min(node_j.values()), rel=1e-9)
        assert row["node_max_j"] == pytest.approx(max(node_j.values()), rel=1e-9)


# ---------------------------------------------------------------- bench/jobs/submit.sh

def test_submit_sh_experiments(bench, tmp_path):
    """The experiment matrices as users submit them: ckpt-dvfs (monitor vs ckpt-dvfs) and
    a short damaris-frequency sweep; every job completes with the tags and policy
    submit.sh gave, and compare groups them."""
    import re
    submit = bench.c.public_path(JOBS) / "submit.sh"
    base = ["env", f"JS_BENCH={bench.bench}", "JS_SBATCH_ARGS=-O", "JS_RANKS=2", "JS_SIZE=262147",
            "JS_REPS=2", "JS_COMPUTE_MS=20", f"JS_PFS={bench.dirs('pfs')}",
            f"JS_OUT={bench.dirs('out')}", "JS_NODES=2", "JS_PPN=2", "JS_ITERS=4",
            "JS_EVERIES=2 4", "JS_GRID=16x16x8", "JS_VARS=1"]
    jobs = {}
    for exp in ("ckpt-dvfs", "damaris-frequency"):
        res = bench.c.run([*base, "sh", submit, exp], user=USER, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        lines = [l for l in res.stderr.splitlines() if l.startswith("sbatch ")]
        ids = re.findall(r"^Submitted batch job (\d+)$", res.stdout, re.M)
        assert len(ids) == len(lines) == {"ckpt-dvfs": 4, "damaris-frequency": 6}[exp], res
        for line, job in zip(lines, ids):
            jobs[job] = dict(kv.split("=", 1) for kv in
                             re.search(r"--energy-tag=(\S+)", line).group(1).split(","))
            jobs[job]["policy"] = re.search(r"--energy-policy=(\S+)", line).group(1)
    for job, want in jobs.items():
        st = bench.c.wait_job(job, 180)
        assert st == "COMPLETED", f"job {job} {st}\n{bench.c.job_output(job)}"
        # damaris: -N2; ckpt: -n2 on whichever node Slurm picked (submit.sh gives no -N)
        info = bench.c.job_info(job)
        nodes = NODES if "approach" in want else (info["NodeList"],)
        recs = bench.records(job, [("batch", info["BatchHost"])] + [("0", n) for n in nodes])
        assert len(recs) == 1 + len(nodes), sorted(recs)
        for r in (recs[("0", n)] for n in nodes):
            assert r["job"]["tags"] == {k: v for k, v in want.items() if k != "policy"}
            assert r["step"]["policy"] == want["policy"]
            kinds = {p["kind"] for p in r["phases"]}
            if "strategy" in want:
                assert kinds == ({"checkpoint", "flush"} if want["strategy"] == "veloc"
                                 else {"checkpoint"})
                for p in r["phases"]:
                    lowered = want["policy"] == "ckpt-dvfs" and p["kind"] == "checkpoint"
                    assert (p["freq_khz"] is not None) == lowered, p
            else:
                assert kinds <= {"compute", "send", "write"} and kinds
    db = tmp_path / "js.db"
    cli("--db", db, "ingest", bench.spool)
    got = json.loads(cli("--db", db, "--format", "json", "compare", "--what", "io",
                         "--by", "tag:approach", "--where", "every=4"))
    assert {r["tag:approach"] for r in got["table"]} == {"tp", "dc1", "dn1"}
    out = cli("--db", db, "compare", "--what", "checkpoint", "--by", "tag:config",
              "--where", "policy=ckpt-dvfs")
    assert "veloc-dram" in out and "genericio" in out


@pytest.mark.parametrize("script", ["damaris.sbatch", "ckpt-gio.sbatch", "ckpt-veloc.sbatch"])
def test_a_crashed_rank_ends_the_step(bench, script):
    """A rank that dies (here: SIGSEGV, as Open MPI start-up crashes do) ends the
    step at once (srun --kill-on-bad-exit): the other ranks, left waiting in
    MPI for it, do not hold the allocation until the time limit (seen in
    make demo: a step whose node1 ranks segfaulted in MPI_Init hung 400 s)."""
    fake = bench.root / f"crashbench-{script.split('.')[0]}"
    fake.mkdir(mode=0o755)
    for name in ("js-damaris", "js-ckpt"):   # stands in for the benchmark: rank 0 crashes
        p = fake / name
        p.write_text("#!/bin/sh\n[ \"$SLURM_PROCID\" = 0 ] && kill -SEGV $$\nexec sleep 300\n")
        p.chmod(0o755)
    exports = ",".join(["ALL", f"JS_BENCH={fake}", f"JS_OUT={bench.dirs('out')}",
                        f"JS_PFS={bench.dirs('pfs')}"])
    t0 = time.monotonic()
    job, _ = bench.c.run_job((JOBS / script).read_text(), USER,
                             ["-N2", "-n4", "-O", f"--export={exports}"], 240, state="FAILED")
    took = time.monotonic() - t0
    assert took < 120, f"job {job} took {took:.0f} s: the other ranks kept the step"
    out = bench.c.job_output(job)
    assert "Segmentation fault" in out or "signal 11" in out.lower() or "SIGSEGV" in out, out
