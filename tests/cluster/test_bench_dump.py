"""The dump benchmark (bench/dump, bench/jobs/dump-policy.sh) as a real job on the live
cluster, with the plugin and fake RAPL/cpufreq in live mode (energy follows the real
CPU use). Short: a small SDRBench-format field made here, SZ3 and ZFP at two error
bounds plus a raw write, each under monitor and io-dvfs.

Truths the test computes itself: the field it wrote (its bytes, its values), the dump
files' sizes, the error of every dump (decompressed here, with the libraries), the clock
io-dvfs must set (docs/phase-protocol.md: compress 0.875 fmax, write 0.85 fmax, nearest
available frequency of the fake tree), and the energy sums from the records.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

import fakehw
import spool

pytestmark = pytest.mark.cluster

USER = "jsuser"
FMAX = 4000000
FMIN = 800000
REPO = pathlib.Path(__file__).resolve().parents[2]
RATIO = {"compress": 0.875, "write": 0.85}          # io-dvfs (Wilkins 2023 eq. 2.3, docs/science.md §3)
DIMS = (24, 40, 36)                                  # C order, SDRBench style
BOUNDS = ("1e-1", "1e-4")
COMPRESSORS = ("sz", "zfp")
POLICIES = ("monitor", "io-dvfs")
REPS = 2

# Decompress one dump file with the libraries themselves (not bench/dump/dump.py) and
# print the maximum absolute error against the original field.
READBACK = r'''
import json, sys
import numpy as np
comp, path, orig, dims = sys.argv[1], sys.argv[2], sys.argv[3], tuple(map(int, sys.argv[4].split("x")))
x = np.fromfile(orig, dtype="<f4").reshape(dims)
stream = open(path, "rb").read()
if comp == "zfp":
    import zfpy
    y = zfpy.decompress_numpy(stream)
else:
    from pysz import sz
    y, _ = sz.decompress(np.frombuffer(stream, dtype=np.uint8), np.float32, dims)
assert y.shape == x.shape, (y.shape, x.shape)
print(json.dumps({"max_err": float(np.max(np.abs(y.astype(np.float64) - x.astype(np.float64))))}))
'''


def field() -> np.ndarray:
    """A smooth field with a little deterministic noise (values of order 1)."""
    z, y, x = np.meshgrid(*(np.linspace(0, 1, n) for n in DIMS), indexing="ij")
    f = np.sin(2 * np.pi * x) * np.cos(np.pi * y) + 0.5 * np.sin(3 * np.pi * z * x)
    f += 1e-3 * np.random.default_rng(7).standard_normal(DIMS)
    return f.astype("<f4")


def nearest_khz(hw: pathlib.Path, ratio: float) -> int:
    d = hw / "devices/system/cpu/cpu0/cpufreq"
    avail = [int(v) for v in (d / "scaling_available_frequencies").read_text().split()]
    fmax = int((d / "cpuinfo_max_freq").read_text())
    return min(avail, key=lambda f: (abs(f - ratio * fmax), f))


class DumpEnv:
    def __init__(self, cluster, build: pathlib.Path):
        self.c = cluster
        self.root = cluster.workdir / "jsdump"
        self.root.mkdir(mode=0o755, exist_ok=True)
        os.chmod(self.root, 0o755)
        self.hw = self.root / "hw"
        self.ncpus = max(2, cluster.cpus + cluster.cpus % 2)
        fakehw.create(str(self.hw), packages=1, cpus_per_package=self.ncpus,
                      fmax_khz=FMAX, fmin_khz=FMIN)
        self.server = fakehw.serve_background(str(self.hw), tick_ms=20)
        self.spool, self.state, self.sock = (self.root / n for n in ("spool", "state", "sock"))
        self.c.write_plugstack(build / "spank" / "joulestep.so",
                               {"spool": self.spool, "state": self.state, "sysfs": self.hw,
                                "socket_dir": self.sock, "backend": "sysfs", "sample_ms": 200,
                                "cluster": "jstest"})
        venv = build / "dump-venv"
        if not (venv / "bin" / "python").exists():
            pytest.fail(f"{venv} missing: run `make deps` (bench/dump/venv.sh)")
        self.venv_python = venv / "bin" / "python"
        self.job_python = cluster.public_path(venv) / "bin" / "python"
        # bench/ and cli/src/ side by side as in the repository (a copy mirrors the path)
        self.repo = cluster.public_path(REPO / "bench").parent
        cluster.public_path(REPO / "cli" / "src")
        self.orig = {i: fakehw.read_cpufreq(str(self.hw), i) for i in range(self.ncpus)}

    def close(self):
        self.c.write_plugstack(None)
        self.server.terminate()
        self.server.wait(10)


@pytest.fixture(scope="module")
def denv(cluster, build_dir):
    env = DumpEnv(cluster, build_dir)
    try:
        yield env
    finally:
        env.close()


def cli(db, *args):
    res = subprocess.run([str(REPO / ".venv" / "bin" / "joulestep"), "--db", str(db),
                          *map(str, args)], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 0, f"joulestep {args}: {res.stderr}"
    return res.stdout


def energy_j(ph) -> float:
    return (ph["energy_cpu_uj"] + (ph["energy_dram_uj"] or 0)) / 1e6


def test_dump_policy_job(denv, tmp_path):
    c = denv.c
    ntasks = min(2, c.cpus)
    data = field()
    inp = denv.root / "field.f32"
    data.tofile(inp)
    os.chmod(inp, 0o644)
    raw_bytes = inp.stat().st_size
    assert raw_bytes == data.size * 4
    configs = [("raw", None)] + [(comp, eb) for comp in COMPRESSORS for eb in BOUNDS]
    env = ["ALL", f"JS_REPO={denv.repo}", f"DUMP_PYTHON={denv.job_python}",
           f"DUMP_INPUT={inp}", f"DUMP_DIMS={'x'.join(map(str, DIMS))}",
           f"DUMP_COMPRESSORS={' '.join(COMPRESSORS)}", f"DUMP_BOUNDS={' '.join(BOUNDS)}",
           f"DUMP_POLICIES={' '.join(POLICIES)}", f"DUMP_REPS={REPS}"]
    script = (REPO / "bench" / "jobs" / "dump-policy.sh").read_text()
    res, job = c.sbatch(script, user=USER, args=[f"-n{ntasks}", "--export=" + ",".join(env)])
    assert res.returncode == 0 and job, res.stderr
    state = c.wait_job(job, timeout=300)
    out = c.job_output(job)
    assert state == "COMPLETED", f"job {job} {state}\n{out}\n{c.logs()}"
    out_dir = c.user_dir(USER) / f"dump-{job}"
    try:
        nsteps = len(configs) * len(POLICIES)
        recs = spool.wait_records(denv.spool, job, ["batch"] + [str(i) for i in range(nsteps)],
                                  c.logs, timeout=60)
        _check(denv, job, recs, configs, ntasks, raw_bytes, inp, out_dir, tmp_path)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    # the clocks are back where they were
    for i in range(denv.ncpus):
        now = fakehw.read_cpufreq(str(denv.hw), i)
        for k in ("scaling_governor", "scaling_max_freq", "scaling_min_freq"):
            assert now[k] == denv.orig[i][k], (i, k)


def _check(denv, job, recs, configs, ntasks, raw_bytes, inp, out_dir, tmp_path):
    want_khz = {k: nearest_khz(denv.hw, r) for k, r in RATIO.items()}
    assert all(v < FMAX for v in want_khz.values())
    seen, sums, errs = set(), {}, {}
    for step, r in recs.items():
        st = r["step"]
        # totals: cpu = package zones, dram = dram zones, total = cpu + dram
        pk = sum(z["energy_uj"] for z in r["zones"] if z["kind"] == "package")
        dr = sum(z["energy_uj"] for z in r["zones"] if z["kind"] == "dram")
        assert (st["energy_cpu_uj"], st["energy_dram_uj"]) == (pk, dr), step
        assert st["energy_total_uj"] == pk + dr, step
        # the batch step too: its end-of-step clock reads once caught an srun step's
        # journal restore between truncate and write (fixed: js_write_file in place)
        assert r["provenance"]["errors"] == [], (step, r["provenance"]["errors"])
        if step == "batch":
            assert r["phases"] == []
            continue
        tags = r["job"]["tags"]
        comp, eb, pol = tags["dump"], tags.get("eb"), st["policy"]
        key = (comp, eb, pol)
        assert key not in seen and (comp, eb) in configs and pol in POLICIES, key
        seen.add(key)
        phases = r["phases"]
        kinds = [p["kind"] for p in phases]
        want = ["write"] * REPS if comp == "raw" else ["compress", "verify", "write"] * REPS
        assert kinds == want, (key, kinds)
        assert all(p["depth"] == 0 and p["nranks"] == ntasks and not p.get("open_at_step_end")
                   for p in phases), key
        # bytes: compress = the raw field per rank; write = the file each rank wrote
        files = {rk: out_dir / (f"dump-raw-rank{rk}.bin" if comp == "raw"
                                else f"dump-{comp}-{float(eb):g}-rank{rk}.bin")
                 for rk in range(ntasks)}
        sizes = {rk: f.stat().st_size for rk, f in files.items()}
        for p in phases:
            per_rank = {e["rank"]: e["bytes"] for e in p["ranks"]}
            if p["kind"] == "compress":
                assert per_rank == {rk: raw_bytes for rk in range(ntasks)}, key
                assert p["bytes"] == ntasks * raw_bytes, key
            elif p["kind"] == "write":
                assert per_rank == sizes, (key, per_rank, sizes)
                assert p["bytes"] == sum(sizes.values()), key
            else:
                assert p["bytes"] is None, key
        # clocks: io-dvfs lowers exactly compress and write; monitor nothing
        for p in phases:
            want_f = want_khz.get(p["kind"]) if pol == "io-dvfs" else None
            assert p["freq_khz"] == want_f, (key, p["kind"], p["freq_khz"], want_f)
        # phases do not overlap: their energies add up to at most the step's
        assert sum(p["energy_cpu_uj"] for p in phases) <= st["energy_cpu_uj"], key
        assert sum(p["energy_dram_uj"] or 0 for p in phases) <= st["energy_dram_uj"], key
        sums[key] = {k: sum(energy_j(p) for p in phases if p["kind"] == k)
                     for k in ("compress", "write")}
        # achieved error, from the files, and what the write label reports
        if comp == "raw":
            for f in files.values():
                assert f.read_bytes() == inp.read_bytes()
            continue
        mx = 0.0
        for f in files.values():
            res = subprocess.run([str(denv.venv_python), "-c", READBACK, comp, str(f), str(inp),
                                  "x".join(map(str, DIMS))], capture_output=True, text=True,
                                 timeout=120)
            assert res.returncode == 0, res.stderr
            mx = max(mx, json.loads(res.stdout)["max_err"])
        assert 0 < mx <= float(eb), (key, mx)
        errs[(comp, eb)] = mx
        cr = ntasks * raw_bytes / sum(sizes.values())
        for p in phases:
            if p["kind"] == "write":
                f = p["label"].split(":")
                assert f[0] == "cr" and f[2] == "maxerr", p["label"]
                assert float(f[1]) == pytest.approx(cr, rel=1e-3)
                assert float(f[3]) == pytest.approx(mx, rel=1e-3)
    assert seen == {(c, e, p) for c, e in configs for p in POLICIES}
    assert sum(v["compress"] + v["write"] for v in sums.values()) > 0

    # ingest and compare: one row per compressor x bound x policy, totals = compress + write
    db = tmp_path / "js.db"
    cli(db, "ingest", denv.spool)
    doc = json.loads(cli(db, "--format", "json", "compare", "--what", "dump", "--by", "dump",
                         "--error-bound", "tag:eb", "--where", f"job_id={job}"))
    rows = {(r["compressor"], None if r["error_bound"] == "-" else r["error_bound"],
             r["policy"]): r for r in doc["table"]}
    assert set(rows) == seen
    for key, row in rows.items():
        s = sums[key]
        assert row["runs"] == 1
        assert row["compress_j"] == pytest.approx(s["compress"], abs=1e-6)
        assert row["write_j"] == pytest.approx(s["write"], abs=1e-6)
        assert row["total_j"] == pytest.approx(s["compress"] + s["write"], abs=1e-6)
        assert row["raw_write_j"] == pytest.approx(sums[("raw", None, key[2])]["write"], abs=1e-6)
        if key[0] == "raw":
            assert (row["ratio"], row["max_err"]) == (1, 0)
        else:
            assert row["max_err"] == pytest.approx(errs[key[:2]], rel=1e-3)
    saving = {(r["compressor"], r["error_bound"]) for r in doc["policy_saving"]}
    assert saving == {(k[0], k[1] or "-") for k in seen}
    text = cli(db, "compare", "--what", "dump", "--by", "dump", "--error-bound", "tag:eb")
    for comp in ("raw",) + COMPRESSORS:
        assert comp in text
