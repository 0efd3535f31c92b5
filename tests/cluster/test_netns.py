"""A three-node cluster, each node a "host" in its own network namespace (issue 11.1).

`Cluster(nodes=3, netns=True)` (harness.py, netns.py): slurmctld and the test's clients in
the root namespace, each slurmd in its own network and mount namespace, reached only at
its namespace address (NodeAddr). Each node has its own directory, seen by the node at
the same path `<workdir>/local`: its fake hardware tree (manual mode), its joulestep spool,
journal (state) and socket directory. plugstack.conf is the same on every node, without
%n, as at a site with node-local /var/spool/joulestep.

Every task advances its own node's fake hardware by a per-node amount (node k: k
seconds), so each node's ground truth is known from the fake tree's replies, and the
nodes' records cannot be swapped or shared unnoticed. Checked: a multi-node srun from the
root namespace; a Damaris DN job (srun --mpi=pmix from the batch script on node1, so
slurmstepd and Open MPI talk across namespaces) whose I/O rank runs alone on node3,
which none of the compute ranks use; one record per node per step, in that node's spool
only; ingest of the three spools (several sources, or node by node from inside each
node's namespaces) into one database; `compare --what io` per-node statistics against
the truth computed here.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import time

import pytest

import fakehw
import iolibs
import netns
import spool
from harness import Cluster, make_workdir
from test_plugin import adv_truth, close

pytestmark = pytest.mark.cluster

USER = "jsuser"
NODES = ("node1", "node2", "node3")
SECONDS = {"node1": 1, "node2": 2, "node3": 3}  # how far a task advances its node's hardware
FMAX, FMIN = 4000000, 800000
REPO = pathlib.Path(__file__).resolve().parents[2]
GRID, ITERS, EVERY, VARS = (16, 16, 6), 4, 2, 1


class NetnsEnv:
    def __init__(self, cluster: Cluster, build: pathlib.Path):
        self.c = cluster
        self.local = cluster.netns.local          # each node's own directory, in its view
        self.dirs = {n: cluster.netns.host_dir(n) for n in NODES}  # the same, from here
        self.servers = []
        for n in NODES:
            fakehw.create(str(self.dirs[n] / "hw"), packages=1, cpus_per_package=cluster.cpus,
                          fmax_khz=FMAX, fmin_khz=FMIN)
            self.servers.append(fakehw.serve_background(
                str(self.dirs[n] / "hw"), manual=True, ctl=str(self.dirs[n] / "hw.ctl")))
        self.fakehw_py = cluster.public_path(REPO / "tests" / "fakehw" / "fakehw.py")
        self.build = cluster.public_path(build)
        cluster.write_plugstack(build / "spank" / "joulestep.so", {
            "spool": self.local / "spool", "state": self.local / "state",
            "sysfs": self.local / "hw", "socket_dir": self.local / "sock",
            "backend": "sysfs", "sample_ms": 200})
        cluster.restart_slurmd()  # slurmd looks for plugins' job epilogs only at start

    def close(self):
        for s in self.servers:
            s.terminate()
            s.wait(10)

    def adv(self, step: str) -> str:
        """Shell line for a task: advance this node's hardware (its `local` tree) by the
        node's SECONDS and print the reply tagged <step>@<node>."""
        secs = " ".join(f"{n}) S={s};;" for n, s in SECONDS.items())
        return (f'case $SLURMD_NODENAME in {secs} *) S=0;; esac; '
                f'echo "ADV {step}@$SLURMD_NODENAME $(python3 {self.fakehw_py} ctl '
                f'{self.local}/hw.ctl advance $S --util 1 | tr -d "\\n")"')

    def spool(self, node) -> pathlib.Path:
        return self.dirs[node] / "spool"

    def records(self, job, want) -> dict:
        """(step, node) -> record, each read from its own node's spool; none elsewhere."""
        out = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            out = {}
            for n in NODES:
                for key, rec in spool.records(self.spool(n), job, by_node=True).items():
                    assert key[1] == n, f"{key} in the spool of {n}"
                    out[key] = rec
            if set(want) <= set(out):
                break
            time.sleep(0.2)
        assert set(out) == set(want), (sorted(out), sorted(want), self.c.logs())
        return out


@pytest.fixture(scope="module")
def ns3(request, cluster_users, build_dir):
    if not (build_dir / "bench" / "js-damaris").exists():
        pytest.fail("build/bench/js-damaris is missing: run `make` (needs make deps: openmpi)")
    workdir = make_workdir("pytest-netns-")
    c = Cluster(workdir, nodes=3, netns=True)
    failed_before = request.session.testsfailed
    env = None
    try:
        c.start()  # fails (never skips) with the reason when namespaces are unavailable
        env = NetnsEnv(c, build_dir)
        yield env
    finally:
        if env:
            env.close()
        c.stop()
        left = c.netns.state()
        if request.session.testsfailed == failed_before and not os.environ.get("JOULESTEP_KEEP_CLUSTER"):
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"\n[netns cluster] logs kept in {workdir}/log")
        assert left == {"namespaces": [], "link": False}, f"teardown left {left}"


JOBS: dict = {}  # test -> job id, for the ingest test at the end


def _cli(*args, prefix=()) -> str:
    res = subprocess.run([*prefix, str(REPO / ".venv" / "bin" / "joulestep"), *map(str, args)],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def _node_j(truth: dict, step: str) -> dict:
    """node -> joules (CPU + DRAM) the tasks of `step` put on it (the fake tree's replies)."""
    return {n: sum(truth[f"{step}@{n}"]) / 1e6 for n in NODES}


def test_nodes_are_separate_hosts(ns3):
    """Each task sees only its own node's address and its own node-local directory."""
    c = ns3.c
    for n in NODES:
        (ns3.dirs[n] / "whoami").write_text(n + "\n")
    res = c.srun(["-N3", "-n3", "sh", "-c",
                  f'echo "JOB $SLURM_JOB_ID"; echo "HOST $SLURMD_NODENAME $(cat {ns3.local}/whoami) $(hostname)"; '
                  f'ip -4 -o addr show | awk \'{{print "ADDR", ENVIRON["SLURMD_NODENAME"], $2, $4}}\''],
                 user=USER)
    assert res.returncode == 0, res.stderr + c.logs()
    # its own node-local directory and its own host name (UTS namespace)
    assert sorted(re.findall(r"^HOST (\S+) (\S+) (\S+)$", res.stdout, re.M)) == [(n, n, n) for n in NODES]
    addrs = {}
    for node, dev, cidr in re.findall(r"^ADDR (\S+) (\S+) (\S+)$", res.stdout, re.M):
        addrs.setdefault(node, set()).add((dev, cidr.split("/")[0]))
    assert addrs == {n: {("lo", "127.0.0.1"), (netns.NODE_IF, c.netns.addr[n])} for n in NODES}
    assert len(set(c.netns.addr.values())) == 3
    conf = c.conf.read_text()
    for n in NODES:
        assert f"NodeName={n} NodeAddr={c.netns.addr[n]} " in conf
    assert f"({c.netns.ctld_addr})" in conf and "127.0.0.1" not in conf
    JOBS["hosts"] = re.search(r"^JOB (\d+)$", res.stdout, re.M).group(1)


def test_srun_three_nodes_one_record_per_node(ns3):
    """srun in the root namespace, tasks on three namespaced nodes: one record per node,
    in that node's spool, with that node's energy."""
    res = ns3.c.srun(["-N3", "-n3", "--energy-tag=io=spread,layout=netns", "sh", "-c",
                      f'echo "JOB $SLURM_JOB_ID"; {ns3.adv("0")}'], user=USER)
    assert res.returncode == 0, res.stderr + ns3.c.logs()
    job = re.search(r"^JOB (\d+)$", res.stdout, re.M).group(1)
    truth = adv_truth(res.stdout)
    recs = ns3.records(job, [("0", n) for n in NODES])
    for n in NODES:
        r = recs[("0", n)]
        assert r["job"]["job_id"] == int(job) and r["job"]["user"] == USER
        assert r["step"]["nnodes"] == 3 and r["step"]["exit_code"] == 0
        assert r["provenance"]["errors"] == []
        assert close(r["step"]["energy_cpu_uj"], truth[f"0@{n}"][0]), (n, r["step"], truth)
        assert close(r["step"]["energy_dram_uj"], truth[f"0@{n}"][1]), (n, r["step"], truth)
    e = [recs[("0", n)]["step"]["energy_cpu_uj"] for n in NODES]
    assert close(e[1], 2 * e[0], 0.01) and close(e[2], 3 * e[0], 0.01)  # not swapped
    JOBS["spread"] = job


def test_damaris_dn_io_node_apart(ns3):
    """Damaris DN 2:1 on -N3 -n3: node3's rank writes for the compute ranks of node1 and
    node2 and computes nothing; launched by srun --mpi=pmix in the batch script (node1's
    namespace), Open MPI over each node's own interface."""
    c = ns3.c
    out = c.user_dir(USER) / f"dn-out-{time.monotonic_ns()}"
    dam = (f"{ns3.build}/bench/js-damaris --mode dn --ratio 2:1 --grid {'x'.join(map(str, GRID))} "
           f"--iters {ITERS} --every {EVERY} --vars {VARS} --out {out} --keep --no-fsync")
    script = f"""#!/bin/sh
#SBATCH -N3 -n3
#SBATCH --energy-tag=io=dn,layout=netns
mkdir -p {out}
srun --mpi=pmix -o dn-%j-%t.out sh -c '{dam} && {ns3.adv("0")}'
cat dn-$SLURM_JOB_ID-*.out
"""
    job, text = c.run_job(script, USER, timeout=150)
    truth = adv_truth(text)
    assert set(truth) == {f"0@{n}" for n in NODES} | {"*"}, text
    # compute ranks 0 (node1) and 1 (node2) split NZ; rank 2 (node3) writes all of it
    nx, ny, nz = GRID
    slabs = {r: (nz // 2 + (r < nz % 2)) * nx * ny * 8 * VARS for r in (0, 1)}
    outputs = ITERS // EVERY
    assert {p.name: p.stat().st_size for p in out.iterdir()} == {
        f"dam-{job}.0.dn.o{o}.w0": sum(slabs.values()) for o in range(1, outputs + 1)}
    recs = ns3.records(job, [("batch", "node1")] + [("0", n) for n in NODES])
    rank_of = {"node1": 0, "node2": 1, "node3": 2}
    for n in NODES:
        r = recs[("0", n)]
        kinds: dict = {}
        for p in r["phases"]:
            kinds.setdefault(p["kind"], []).append(p)
            assert [x["rank"] for x in p["ranks"]] == [rank_of[n]], (n, p)
        if n == "node3":   # the I/O node: writes only
            assert set(kinds) == {"write"}, (n, sorted(kinds))
            assert len(kinds["write"]) == outputs
            assert all(p["bytes"] == sum(slabs.values()) for p in kinds["write"])
        else:              # compute nodes: compute and hand off, never write
            assert set(kinds) == {"compute", "send"}, (n, sorted(kinds))
            assert all(p["bytes"] == slabs[rank_of[n]] for p in kinds["send"])
        assert close(r["step"]["energy_cpu_uj"], truth[f"0@{n}"][0]), (n, r["step"], truth)
    JOBS["dn"] = job


def test_ingest_three_spools_and_compare(ns3, tmp_path):
    if set(JOBS) != {"hosts", "spread", "dn"}:
        pytest.skip("needs the jobs of the tests above (run the module whole)")
    want = {"hosts": {("0", n) for n in NODES}, "spread": {("0", n) for n in NODES},
            "dn": {("batch", "node1")} | {("0", n) for n in NODES}}
    nrec = sum(len(v) for v in want.values())
    # one command, the three node spools as sources (spools collected centrally)
    db = tmp_path / "central.db"
    first = _cli("--db", db, "ingest", *(ns3.spool(n) for n in NODES))
    assert f"{nrec} files: {nrec} new steps" in first and "0 quarantined" in first, first
    # node by node, each from inside its own namespaces, its node-local path
    db2 = tmp_path / "central2.db"
    for n in NODES:
        got = _cli("--db", db2, "ingest", ns3.local / "spool", prefix=ns3.c.netns.on_node(n, []))
        mine = sum(1 for v in want.values() for k in v if k[1] == n)
        assert f"{mine} new steps" in got, (n, got)
    again = _cli("--db", db2, "ingest", *(ns3.spool(n) for n in NODES))
    assert f"0 new steps, {nrec} already present" in again or f"{nrec} unchanged" in again, again

    q = ("SELECT j.job_id, s.step_id, n.name, count(*) FROM steps s JOIN jobs j USING (job_pk) "
         "JOIN nodes n USING (node_pk) GROUP BY j.job_id, s.step_id, n.name")
    for d in (db, db2):
        with sqlite3.connect(d) as conn:
            rows = conn.execute(q).fetchall()
        assert all(cnt == 1 for *_, cnt in rows), rows
        assert {(str(j), s, n) for j, s, n, _ in rows} == {
            (JOBS[k], s, n) for k, v in want.items() for s, n in v}

    # compare --what io: per approach, each node's energy (batch left out: numbered
    # steps exist) and the statistics over the three nodes, from the fake tree's truth
    got = json.loads(_cli("--db", db, "--format", "json", "compare", "--what", "io",
                          "--by", "tag:io", "--where", "layout=netns"))
    rows = {r["tag:io"]: r for r in got["table"]}
    assert set(rows) == {"spread", "dn"}
    for k, job in JOBS.items():
        if k == "hosts":
            continue  # no tags
        recs = ns3.records(job, want[k])
        node_j = {n: recs[("0", n)]["step"]["energy_total_uj"] / 1e6 for n in NODES}
        row, vals = rows[k], list(node_j.values())
        assert row["runs"] == 1 and row["nodes"] == 3
        # exactly what the raw records say ...
        assert row["energy_j"] == pytest.approx(sum(vals), rel=1e-9)
        assert row["node_min_j"] == pytest.approx(min(vals), rel=1e-9)
        assert row["node_max_j"] == pytest.approx(max(vals), rel=1e-9)
        assert row["node_mean_j"] == pytest.approx(statistics.mean(vals), rel=1e-9)
        assert row["node_std_j"] == pytest.approx(statistics.stdev(vals), rel=1e-9)
        # ... and node k carries k times node1's energy (the hardware's truth)
        assert node_j["node2"] == pytest.approx(2 * node_j["node1"], rel=0.01)
        assert node_j["node3"] == pytest.approx(3 * node_j["node1"], rel=0.01)
        assert row["node_min_j"] == pytest.approx(node_j["node1"], rel=1e-9)
        assert row["node_max_j"] == pytest.approx(node_j["node3"], rel=1e-9)


def damaris_node_id(host: str) -> int:
    """Damaris 1.7.1's node id of a host (src/env/Hardware.cpp, GetNodeID): a 64-bit
    FNV-style hash of MPI_Get_processor_name, cast to int, made non-negative. Damaris
    orders the ranks by it, and its first nodes (of d) become the dedicated ones."""
    h, fnv = 14695981039346656037, (1 << 40) + (1 << 8) + 0xB3
    for ch in host.encode():
        h = ((h ^ ch) * fnv) & ((1 << 64) - 1)
    v = h & 0xFFFFFFFF
    v = v - (1 << 32) if v >= 1 << 31 else v
    return v if v >= 0 else -v


REAL: dict = {}  # the real-Damaris DN job, for the model test


def test_damaris_real_dedicated_node(ns3):
    """The real Damaris 1.7.1 with one dedicated node (<dedicated cores="0" nodes="1"/>)
    and its HDF5 plugin, on -N3 -n3 (one rank per node): the rank of the node Damaris
    orders first (by the hash of its host name: the UTS namespace's node name) is the
    server and computes nothing; the two others compute and hand their blocks over.
    Checked: which node is the dedicated one, the files the plugin wrote, each client's
    phases and bytes, and each node's energy against the fake hardware's truth."""
    bench = ns3.c.public_path(REPO / "build" / "bench" / "js-damaris-real")
    if not iolibs.need("damaris") or not pathlib.Path(bench).exists():
        pytest.fail("build/bench/js-damaris-real is missing: run `make` after make iolibs")
    c = ns3.c
    # 256 KiB blocks: above Open MPI's TCP eager limit (64 KiB), so a client's block
    # travels to the server after damaris_write returned (Damaris' RemoteClient sends it
    # with MPI_Isend); 6 outputs, the last just before the clients stop
    nx, ny, nz, iters, every = 64, 64, 16, 6, 1
    out = c.user_dir(USER) / f"dnr-out-{time.monotonic_ns()}"
    dam = (f"{bench} --mode dn --nodes 1 --grid {nx}x{ny}x{nz} --iters {iters} "
           f"--every {every} --sweeps 2 --out {out}")
    script = f"""#!/bin/sh
#SBATCH -N3 -n3
#SBATCH --energy-tag=lib=damaris-1.7.1,approach=dn2:1,exp=netns-real
mkdir -p {out}
srun --mpi=pmix --kill-on-bad-exit=1 -o dnr-%j-%t.out sh -c '{dam} && {ns3.adv("0")}'
cat dnr-$SLURM_JOB_ID-*.out
"""
    job, text = c.run_job(script, USER, timeout=120)
    truth = adv_truth(text)
    assert set(truth) == {f"0@{n}" for n in NODES} | {"*"}, text
    assert f"library=Damaris-1.7.1 mode=dn clients=2 outputs={iters // every}" in text, text
    server = min(NODES, key=lambda n: (damaris_node_id(n), NODES.index(n)))
    outputs = iters // every
    block = nx * ny * (nz // 2) * 8
    files = {p.name: p.stat().st_size for p in out.iterdir() if p.suffix == ".h5"}
    assert set(files) == {f"jsdam_It{o}_Pr0.h5" for o in range(outputs)}, (files, text)
    for size in files.values():  # both clients' blocks and HDF5's metadata
        assert 2 * block < size < 2 * block + 65536, files
    recs = ns3.records(job, [("batch", "node1")] + [("0", n) for n in NODES])
    for n in NODES:
        r = recs[("0", n)]
        kinds: dict = {}
        for p in r["phases"]:
            kinds.setdefault(p["kind"], []).append(p)
        if n == server:  # the dedicated node: Damaris' server, no phase of ours
            assert kinds == {}, (n, sorted(kinds))
        else:
            assert {k: len(v) for k, v in kinds.items()} == {"compute": iters, "send": outputs}
            assert all(len(p["ranks"]) == 1 and p["bytes"] == block for p in kinds["send"])
        assert close(r["step"]["energy_cpu_uj"], truth[f"0@{n}"][0]), (n, r["step"], truth)
        assert close(r["step"]["energy_dram_uj"], truth[f"0@{n}"][1]), (n, r["step"], truth)
    REAL.update(job=job, truth=truth, recs=recs)


def test_model_damaris_on_real_records(ns3, tmp_path):
    """`joulestep model damaris` and `compare --what io` on the records of the real DN
    job: the measured energy is the job's (every node's) energy, the accuracy Dorier's
    Table 3 formula against the prediction computed here from the calibration."""
    if not REAL:
        pytest.skip("needs test_damaris_real_dedicated_node's job (run the module whole)")
    db = tmp_path / "real.db"
    _cli("--db", db, "ingest", *(ns3.spool(n) for n in NODES))
    recs = REAL["recs"]
    node_j = {n: recs[("0", n)]["step"]["energy_total_uj"] / 1e6 for n in NODES}
    # what the fake hardware put on the nodes (the batch step on node1 holds step 0's
    # node1 part: counted once)
    truth_j = sum(sum(REAL["truth"][f"0@{n}"]) / 1e6 for n in NODES)
    t_base, p_idle, p_max = 12.0, 40.0, 100.0
    got = json.loads(_cli("--db", db, "--format", "json", "model", "damaris",
                          "--t-base", t_base, "--s-cores", "1:1", "--s-nodes", "1:1,2:1,3:1",
                          "--p-idle", p_idle, "--p-max", p_max, "--nodes", 3,
                          "--cores-per-node", 1, "--approach", "DN(2:1)",
                          "--where", "exp=netns-real"))
    acc = got["accuracy"]
    assert len(acc) == 1 and acc[0]["config"] == "DN(2:1)" and acc[0]["runs"] == 1, got
    assert acc[0]["measured_j"] == pytest.approx(truth_j, rel=0.01)
    assert acc[0]["measured_j"] == pytest.approx(sum(node_j.values()), rel=1e-6)
    # Dorier eqs. 1-4: T_sim = T_base / (1 core x 2 compute nodes), P_sim = (2 P_max +
    # (P_idle + P_max) / 2) / 3 per node, times the 3 nodes of the allocation
    pred = t_base / 2 * (2 * p_max + (p_idle + p_max) / 2) / 3 * 3
    assert acc[0]["predicted_j"] == pytest.approx(pred, rel=1e-9)
    assert acc[0]["accuracy_pct"] == pytest.approx(
        100 * (1 - abs(pred - truth_j) / truth_j), rel=0.01, abs=0.5)
    # compare --what io: the per-node statistics of the real run
    rows = json.loads(_cli("--db", db, "--format", "json", "compare", "--what", "io", "--by",
                           "tag:approach", "--where", "exp=netns-real"))["table"]
    assert len(rows) == 1 and rows[0]["tag:approach"] == "dn2:1" and rows[0]["nodes"] == 3
    vals = list(node_j.values())
    assert rows[0]["node_min_j"] == pytest.approx(min(vals), rel=1e-9)
    assert rows[0]["node_max_j"] == pytest.approx(max(vals), rel=1e-9)
    assert rows[0]["energy_j"] == pytest.approx(sum(vals), rel=1e-9)


# ------------------------------------------------------------ namespaces themselves

def _hosts() -> netns.Hosts:
    """Namespaces for two nodes a and b, without a cluster: switch, a, b."""
    return netns.Hosts(secrets.token_hex(8), ["a", "b"], make_workdir("pytest-netns-hosts-"))


def test_teardown_and_stale_reaping(cluster_users):
    """setup/teardown leave nothing; namespaces of an owner killed with -9 are removed by
    the next reap (make_workdir runs it) and only those."""
    h = _hosts()
    try:
        h.setup()
        assert len(h.state()["namespaces"]) == 3 and h.state()["link"]
    finally:
        h.teardown()
    assert h.state() == {"namespaces": [], "link": False}
    shutil.rmtree(h.workdir, ignore_errors=True)

    # an owner that dies (SIGKILL) without teardown
    cid = secrets.token_hex(8)
    w = make_workdir("pytest-netns-stale-")
    code = (f"import sys, signal; sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r}); "
            f"import netns; netns.Hosts({cid!r}, ['a'], {str(w)!r}).setup(); "
            f"print('UP', flush=True); signal.pause()")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "UP"
        stale = netns.Hosts(cid, ["a"], w)
        live = _hosts().setup()
        try:
            assert len(stale.state()["namespaces"]) == 2
            netns.reap_stale()
            assert len(stale.state()["namespaces"]) == 2, "reaped a live owner's namespaces"
            p.send_signal(signal.SIGKILL)
            p.wait(10)
            shutil.rmtree(make_workdir("pytest-netns-reap-"))  # reaps, as every new cluster does
            assert stale.state() == {"namespaces": [], "link": False}
            assert len(live.state()["namespaces"]) == 3  # its owner (this process) is alive
        finally:
            live.teardown()
            shutil.rmtree(live.workdir, ignore_errors=True)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        stale.teardown() if "stale" in locals() else None
        shutil.rmtree(w, ignore_errors=True)


def test_no_capability_fails_with_reason(cluster_users):
    """Without CAP_SYS_ADMIN (here: an unprivileged user) the netns cluster does not
    start and says why; it never skips."""
    pub = make_workdir("pytest-netns-nocap-")  # readable by the user, wherever the repo is
    try:
        shutil.copy(netns.__file__, pub / "netns.py")
        os.chmod(pub / "netns.py", 0o644)
        code = (f"import sys; sys.path.insert(0, {str(pub)!r}); import netns\n"
                "try:\n    netns.require_netns()\nexcept netns.NetnsError as e:\n    print('ERR', e)\n"
                "else:\n    print('OK')\n")
        res = subprocess.run(["runuser", "-u", USER, "--", shutil.which("python3", path=netns.SBIN),
                              "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    finally:
        shutil.rmtree(pub)
    assert res.stdout.startswith("ERR "), res.stdout + res.stderr
    assert "network namespaces are unavailable" in res.stdout and "CAP_SYS_ADMIN" in res.stdout
    netns.require_netns()  # as root here: available
