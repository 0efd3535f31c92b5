"""Load on a live three-node cluster (issue 11, "6. Load"); each test prints its figures.

One module cluster: three slurmd on this host (node1..node3), 64 CPUs each, overcommitting
the host's cores (Cluster(nodes=3, cpus=64): tasks are not bound, task/none). Each node has
its own fake RAPL/cpufreq tree (manual mode: nothing moves the counters; the clocks are what
the plugin wrote), frequency journal and socket directory (`%n` in plugstack.conf); the
spool is shared, as a site's central spool would be.

  - test_many_concurrent_steps_one_record_each: 200 short srun steps, launched 16 at a
    time; the steps meet in groups of 8 (each waits until its 7 group mates have started),
    so at least 8 run at once by construction. The records' start/end times must show
    that concurrency, and after ingest every launched step has exactly one row.
  - test_marker_flood_from_eight_ranks: 8 ranks send 10,000 markers per second in all
    (asynchronous BEGIN/END pairs through libjoulestep-client, io-dvfs: every step-level
    phase lowers and restores the clock) for 3 s: every pair is in the record, every rank
    finished, and the fake cpufreq files are back at their original values.
  - test_64_ranks_per_node_record_size: 64 ranks on each of 3 nodes, 70 phases each
    (4480 rank entries per node, past the 4096 of per-rank detail): each node's record is
    within docs/record-format.md's size bound and carries its 64 ranks as the format says.

The figures are printed (`pytest -s`) as one "LOAD <test> key=value ..." line each, and
after the module as one "LOAD SUMMARY ..." line, also written to build/load-figures.txt.
Timings are printed, never asserted (the machine is shared); the assertions are counts.
"""
from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shutil
import sqlite3
import subprocess
import time

import pytest

import fakehw
import spool
from harness import Cluster, make_workdir

pytestmark = pytest.mark.cluster

USER = "jsuser"
NODES = ("node1", "node2", "node3")
CPUS = 64           # per node, overcommitted
FMAX = 4000000
FMIN = 800000
HERE = pathlib.Path(__file__).resolve().parent

# docs/record-format.md "Size"
RECORD_FIXED_BYTES = 128 * 1024
RECORD_PHASE_BYTES = 1536
RECORD_RANK_BYTES = 160
RANK_DETAIL_MAX = 4096

STEPS, GROUP, WINDOW = 200, 8, 16          # test 1
FLOOD_RANKS, FLOOD_RATE, FLOOD_SECONDS = 8, 10000, 3   # test 2: markers/s in all
WIDE_RANKS, WIDE_PHASES = 64, 70           # test 3: per node


FIGURES: dict[str, str] = {}  # test -> its "k=v ..." figures, for the module's summary line
SUMMARY = pathlib.Path(__file__).resolve().parents[2] / "build" / "load-figures.txt"


def figures(name: str, **kv):
    FIGURES[name] = " ".join(f"{k}={v}" for k, v in kv.items())
    line = f"LOAD {name} {FIGURES[name]}"
    print("\n" + line, flush=True)
    return line


def summary_line() -> str:
    """One line with every load test's figures: printed after the module, and written to
    build/load-figures.txt (the closing note quotes it)."""
    return "LOAD SUMMARY " + " | ".join(f"{k}: {v}" for k, v in FIGURES.items())


class LoadEnv:
    def __init__(self, cluster: Cluster, repo: pathlib.Path, build: pathlib.Path):
        self.c = cluster
        self.repo = repo
        self.root = cluster.workdir / "jsload"
        self.root.mkdir(mode=0o755, exist_ok=True)
        os.chmod(self.root, 0o755)
        (self.root / "hw").mkdir(mode=0o755, exist_ok=True)
        self.hw = {n: self.root / "hw" / n for n in NODES}
        self.servers = []
        for n in NODES:
            fakehw.create(str(self.hw[n]), packages=2, cpus_per_package=CPUS // 2,
                          fmax_khz=FMAX, fmin_khz=FMIN)
            self.servers.append(fakehw.serve_background(str(self.hw[n]), manual=True,
                                                        ctl=str(self.root / f"{n}.ctl")))
        self.spool = self.root / "spool"
        self.build = cluster.public_path(build)
        self.so = build / "spank" / "joulestep.so"
        self.client = self.root / "load_client"
        subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror",
                        f"-I{repo / 'spank' / 'client'}", str(HERE / "load_client.c"),
                        "-o", str(self.client), f"-L{self.build / 'lib'}", "-ljoulestep-client",
                        f"-Wl,-rpath,{self.build / 'lib'}"], check=True)
        os.chmod(self.client, 0o755)
        self.configure()
        self.c.restart_slurmd()  # slurmd looks for plugins' job epilogs only at start
        self.orig = {n: [fakehw.read_cpufreq(str(self.hw[n]), i) for i in range(CPUS)]
                     for n in NODES}

    def configure(self, **extra):
        args = {"spool": self.spool, "state": self.root / "state" / "%n",
                "sysfs": self.root / "hw" / "%n", "socket_dir": self.root / "sock" / "%n",
                "backend": "sysfs", "sample_ms": 200, "cluster": "jstest"}
        args.update(extra)
        self.c.write_plugstack(self.so, args)

    def close(self):
        for s in self.servers:
            s.terminate()
            s.wait(10)

    def records(self, job) -> dict:
        """(step_id, node) -> record."""
        return spool.records(self.spool, job, by_node=True)

    def wait_records(self, job, keys, timeout=60) -> dict:
        return spool.wait_records(self.spool, job, keys, self.c.logs, timeout, by_node=True)

    def record_size(self, job, step, node) -> int:
        d = self.spool / "jstest" / str(job)
        return next(d.glob(f"{job}.{step}.*.{node}.json")).stat().st_size

    def changed_cpus(self) -> list:
        """(node, cpu) whose clock settings differ from the original ones."""
        keys = ("scaling_governor", "scaling_max_freq", "scaling_min_freq", "effective_khz")
        return [(n, i) for n in NODES for i in range(CPUS)
                if any(fakehw.read_cpufreq(str(self.hw[n]), i)[k] != self.orig[n][i][k] for k in keys)]

    def assert_restored(self):
        for n in NODES:
            for i in range(CPUS):
                now = fakehw.read_cpufreq(str(self.hw[n]), i)
                for k in ("scaling_governor", "scaling_max_freq", "scaling_min_freq", "effective_khz"):
                    assert now[k] == self.orig[n][i][k], (n, i, k, now[k], self.orig[n][i][k])

    def run_job(self, script: str, timeout: float) -> tuple[str, str, float]:
        t = time.monotonic()
        job, out = self.c.run_job(script, USER, (), timeout)
        return job, out, time.monotonic() - t


@pytest.fixture(scope="module")
def load(request, cluster_users, repo, build_dir):
    workdir = make_workdir("pytest-load-")
    c = Cluster(workdir, nodes=len(NODES), cpus=CPUS)
    failed_before = request.session.testsfailed
    env = None
    try:
        c.start()
        env = LoadEnv(c, repo, build_dir)
        yield env
    finally:
        if env:
            env.close()
        c.stop()
        if FIGURES:
            line = summary_line()
            print("\n" + line, flush=True)
            with contextlib.suppress(OSError), open(SUMMARY, "w") as f:
                f.write(line + "\n")
        if request.session.testsfailed == failed_before and not os.environ.get("JOULESTEP_KEEP_CLUSTER"):
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"\n[load cluster] logs kept in {workdir}/log")


@pytest.fixture
def plug(load):
    load.configure()
    load.c.wait_idle()
    yield load
    load.c.wait_idle()
    load.assert_restored()


def max_overlap(intervals) -> int:
    """The most intervals [start, end] open at one instant (an end at the same instant as
    a start does not overlap it)."""
    ev = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals],
                key=lambda x: (x[0], x[1]))
    run = best = 0
    for _, d in ev:
        run += d
        best = max(best, run)
    return best


def ingest_counts(repo, spool_dir, job, db) -> dict:
    """Ingest the job's records into a fresh database: (step_id, node) -> rows."""
    res = subprocess.run([str(repo / ".venv" / "bin" / "joulestep"), "--db", str(db), "ingest",
                          str(spool_dir / "jstest" / str(job))],
                         capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 quarantined" in res.stdout, res.stdout
    rows = sqlite3.connect(db).execute(
        "SELECT s.step_id, n.name, count(*) FROM steps s JOIN jobs j ON j.job_pk = s.job_pk "
        "JOIN nodes n ON n.node_pk = s.node_pk WHERE j.cluster = 'jstest' AND j.job_id = ? "
        "GROUP BY s.step_id, n.name", (int(job),)).fetchall()
    return {(s, n): k for s, n, k in rows}


# --------------------------------------------------------------- 1. many steps
STEP_SH = r'''#!/bin/sh
# one short step: i = its launch index; meet the other members of its group of G
i=$1; G=$2; N=$3; D=$4
echo "STEP $SLURM_STEP_ID $i $SLURMD_NODENAME"
touch "$D/started.$i"
g=$(( i / G * G )); last=$(( g + G - 1 )); [ $last -ge $N ] && last=$(( N - 1 ))
n=0
while [ $n -lt 2400 ]; do
  all=1; j=$g
  while [ $j -le $last ]; do [ -e "$D/started.$j" ] || { all=0; break; }; j=$(( j + 1 )); done
  [ $all = 1 ] && break
  sleep 0.05; n=$(( n + 1 ))
done
[ $all = 1 ] && echo "MET $i" || echo "ALONE $i"
'''


def test_many_concurrent_steps_one_record_each(plug, tmp_path):
    """200 srun steps, at least 8 at once: every launched step has exactly one record (one
    node each), and one row after ingest; the records' own times show >= 8 steps at once."""
    step_sh = plug.root / "step.sh"
    step_sh.write_text(STEP_SH)
    os.chmod(step_sh, 0o755)
    d = plug.c.user_dir(USER) / "meet"
    shutil.rmtree(d, ignore_errors=True)
    script = f"""#!/bin/bash
#SBATCH -N{len(NODES)} --ntasks-per-node=1
D={d}/$SLURM_JOB_ID; mkdir -p $D
for i in $(seq 0 {STEPS - 1}); do
  while [ $(jobs -rp | wc -l) -ge {WINDOW} ]; do wait -n; done
  srun --overlap -N1 -n1 --relative=$(( i % {len(NODES)} )) {step_sh} $i {GROUP} {STEPS} $D &
done
wait
echo LAUNCHED
"""
    job, out, secs = plug.run_job(script, timeout=900)
    assert "LAUNCHED" in out, out
    launched = {}
    for sid, i, node in re.findall(r"^STEP (\d+) (\d+) (\S+)$", out, re.M):
        assert sid not in launched, (sid, out)
        launched[sid] = (int(i), node)
    assert sorted(i for i, _ in launched.values()) == list(range(STEPS)), out
    assert len(re.findall(r"^MET \d+$", out, re.M)) == STEPS, out  # no group timed out
    want = {(sid, node) for sid, (_, node) in launched.items()} | {("batch", "node1")}
    recs = plug.wait_records(job, want)
    assert set(recs) == want  # exactly one record per launched step (spool.records: no twins)
    for (sid, node), r in recs.items():
        assert r["step"]["exit_code"] == 0, (sid, r["step"])
        assert r["provenance"]["errors"] == [], (sid, r["provenance"]["errors"])
    spans = [(r["step"]["start_ns"], r["step"]["end_ns"]) for (sid, _), r in recs.items()
             if sid != "batch"]
    conc = max_overlap(spans)
    assert conc >= GROUP, conc
    counts = ingest_counts(plug.repo, plug.spool, job, tmp_path / "load.db")
    assert counts == {k: 1 for k in want}, {k: v for k, v in counts.items() if v != 1}
    mean_ms = sum(e - s for s, e in spans) / len(spans) / 1e6
    figures("steps", steps=STEPS, nodes=len(NODES), records=len(recs) - 1, ingested_rows=sum(counts.values()) - 1,
            max_concurrent=conc, window=WINDOW, job_s=f"{secs:.1f}", steps_per_s=f"{STEPS / secs:.1f}",
            mean_step_ms=f"{mean_ms:.0f}")


# --------------------------------------------------------------- 2. marker flood
RANK_RE = re.compile(r"^RANK (\d+) (\S+) sent=(\d+) err_begin=(\d+) err_end=(\d+) first_rc=(-?\d+) "
                     r"max_lat_ns=(\d+) ping_rc=(-?\d+) t0_ns=(\d+) t1_ns=(\d+)$", re.M)


def rank_lines(out: str) -> dict:
    res = {}
    for m in RANK_RE.finditer(out):
        rank = int(m.group(1))
        assert rank not in res, rank
        res[rank] = {"node": m.group(2), **{k: int(m.group(i)) for i, k in enumerate(
            ("sent", "err_begin", "err_end", "first_rc", "max_lat_ns", "ping_rc", "t0", "t1"), 3)}}
    return res


def test_marker_flood_from_eight_ranks(plug):
    """8 ranks, 10,000 asynchronous markers per second in all, for 3 s: none lost (every
    BEGIN/END pair each rank sent is one rank entry of the record, with its bytes), none
    stalled (every rank finished and its final sync PING was answered), the clock restored.
    The plugin's per-step caps are set above the offered load (docs/phase-protocol.md
    "Limits": rate= BEGINs per second, max_phases=)."""
    per_rank = FLOOD_RATE / FLOOD_RANKS                 # markers per second per rank
    pairs = int(per_rank * FLOOD_SECONDS / 2)
    plug.configure(rate=4 * FLOOD_RATE, max_phases=4 * pairs)
    job, out, secs = plug.run_job(
        f"#!/bin/sh\n#SBATCH -N1 -n{FLOOD_RANKS}\n#SBATCH --energy-policy=io-dvfs\n"
        f"srun -n{FLOOD_RANKS} {plug.client} {pairs} {per_rank}\n", timeout=600)
    ranks = rank_lines(out)
    assert sorted(ranks) == list(range(FLOOD_RANKS)), out          # none stalled
    for r, x in ranks.items():
        assert x["ping_rc"] == 0, (r, x)
        assert (x["err_begin"], x["err_end"], x["first_rc"]) == (0, 0, 0), (r, x)  # none refused
        assert x["sent"] == pairs, (r, x)
    rec = plug.wait_records(job, [("0", "node1")])[("0", "node1")]
    prov = rec["provenance"]
    assert prov["markers_rate_dropped"] == 0 and prov["markers_rejected"] == 0, prov
    assert prov.get("markers_step_dropped", 0) == 0, prov  # a per-step cap, where there is one
    assert not prov.get("drain_truncated"), prov
    ph = [p for p in rec["phases"] if p["kind"] == "write"]
    assert len(ph) == len(rec["phases"]) == pairs
    entries = 0
    for k, p in enumerate(sorted(ph, key=lambda p: p["seq"])):
        assert p["nranks"] == FLOOD_RANKS, p
        assert p["bytes"] == sum(r * 1000000 + k for r in range(FLOOD_RANKS)), (k, p["bytes"])
        assert p["open_at_step_end"] is False
        entries += p["nranks"]
    assert entries == FLOOD_RANKS * pairs  # every pair of every rank: none lost
    size = plug.record_size(job, "0", "node1")
    assert size <= RECORD_FIXED_BYTES + RECORD_PHASE_BYTES * len(ph) + \
        RECORD_RANK_BYTES * min(entries, RANK_DETAIL_MAX), size
    plug.c.wait_idle()
    throttled = plug.changed_cpus()
    assert throttled == [], throttled  # the clock restored at the end
    t0 = min(x["t0"] for x in ranks.values())
    t1 = max(x["t1"] for x in ranks.values())
    markers = 2 * pairs * FLOOD_RANKS
    lowered = sum(1 for p in ph if p["freq_khz"])
    figures("markers", ranks=FLOOD_RANKS, offered_per_s=FLOOD_RATE, markers=markers,
            sent_s=f"{(t1 - t0) / 1e9:.2f}", achieved_per_s=f"{markers / ((t1 - t0) / 1e9):.0f}",
            recorded_pairs=entries, lost=FLOOD_RANKS * pairs - entries,
            max_call_latency_ms=f"{max(x['max_lat_ns'] for x in ranks.values()) / 1e6:.1f}",
            clock_lowered_phases=lowered, cpus_left_throttled=len(throttled), record_bytes=size,
            job_s=f"{secs:.1f}")


# ------------------------------------------------- 3. 64 ranks on each of 3 nodes
def test_64_ranks_per_node_record_size(plug):
    """One step, 64 ranks on each of 3 nodes, 70 phases per rank (4480 rank entries per
    node): every node's record is within the size bound of docs/record-format.md, and
    carries its own 64 ranks: per-rank detail for the step's first 4096 rank entries,
    rank_stats on the phases that lack some, nranks and byte sums on all."""
    n = len(NODES)
    plug.configure(rate=1000000)
    job, out, secs = plug.run_job(
        f"#!/bin/sh\n#SBATCH -N{n} --ntasks-per-node={WIDE_RANKS}\n"
        f"srun -N{n} --ntasks-per-node={WIDE_RANKS} {plug.client} {WIDE_PHASES} 0 compress\n",
        timeout=600)
    ranks = rank_lines(out)
    assert sorted(ranks) == list(range(n * WIDE_RANKS)), out
    for r, x in ranks.items():
        assert (x["sent"], x["ping_rc"]) == (WIDE_PHASES, 0), (r, x)
    on = {nd: sorted(r for r, x in ranks.items() if x["node"] == nd) for nd in NODES}
    assert all(len(v) == WIDE_RANKS for v in on.values()), on
    recs = plug.wait_records(job, [("0", nd) for nd in NODES])
    sizes, bounds = {}, {}
    for nd in NODES:
        rec = recs[("0", nd)]
        assert rec["provenance"]["markers_rejected"] == 0, rec["provenance"]
        ph = sorted(rec["phases"], key=lambda p: p["seq"])
        assert len(ph) == WIDE_PHASES
        nbytes = {k: dict((r, r * 1000000 + k) for r in on[nd]) for k in range(WIDE_PHASES)}
        detail = 0
        for k, p in enumerate(ph):
            assert (p["kind"], p["nranks"], p["open_at_step_end"]) == ("compress", WIDE_RANKS, False), p
            assert p["bytes"] == sum(nbytes[k].values()), (nd, k)
            # detailed entries (the step's first 4096, in arrival order): this node's ranks
            for e in p["ranks"]:
                assert nbytes[k].get(e["rank"]) == e["bytes"], (nd, k, e)
            assert len({e["rank"] for e in p["ranks"]}) == len(p["ranks"])
            detail += len(p["ranks"])
            if not p["ranks_truncated"]:
                assert len(p["ranks"]) == WIDE_RANKS, (nd, k)
            else:
                b = p["rank_stats"]["bytes"]  # over all its ranks
                assert (b["min"], b["max"]) == (min(nbytes[k].values()), max(nbytes[k].values())), (nd, k, b)
        assert detail == RANK_DETAIL_MAX, (nd, detail)
        entries = sum(p["nranks"] for p in ph)
        assert entries == WIDE_RANKS * WIDE_PHASES
        sizes[nd] = plug.record_size(job, "0", nd)
        bounds[nd] = (RECORD_FIXED_BYTES + RECORD_PHASE_BYTES * len(ph)
                      + RECORD_RANK_BYTES * min(entries, RANK_DETAIL_MAX))
        assert sizes[nd] <= bounds[nd], (nd, sizes[nd], bounds[nd])
    figures("wide", nodes=n, ranks_per_node=WIDE_RANKS, phases=WIDE_PHASES,
            rank_entries_per_node=WIDE_RANKS * WIDE_PHASES,
            record_bytes="/".join(str(sizes[nd]) for nd in NODES),
            bound_bytes=bounds[NODES[0]], job_s=f"{secs:.1f}")
