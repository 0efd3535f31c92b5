"""GPU energy per step and per phase from the plugin, on a live cluster whose node has
two GPUs in gres.conf (issue 26): File= character devices the harness makes, the NVML
stand-in (tests/fakehw/gpu) as the plugstack's gpu_lib=, one fakehw GPU model behind it
(tests/fakehw/fakegpu.py) whose root reaches slurmstepd through slurmd's environment.

Truth: fakegpu.energy_mj over the record's own intervals (CLOCK_REALTIME in the record,
CLOCK_MONOTONIC in the model: the offset is measured here). The job drives the GPU's
load and makes the driver reload (a counter reset) between its phases.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import time

import pytest

import fakegpu
import fakehw
import spool
from harness import Cluster, make_workdir
from procs import cmdline, job_pids, stepd_pid, wait_for

pytestmark = pytest.mark.cluster

USER = "jsuser"
REPO = pathlib.Path(__file__).resolve().parents[2]


def mono_offset_ns() -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC now (the least of a few tries)."""
    best = None
    for _ in range(5):
        a = time.monotonic_ns()
        r = time.clock_gettime_ns(time.CLOCK_REALTIME)
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, r - (a + b) // 2)
    return best[1]


class GpuNode:
    def __init__(self, build: pathlib.Path, config: str = "linuxproc"):
        self.workdir = make_workdir("pytest-gpu-")
        self.gpu_root = self.workdir / "gpus"
        fakegpu.create(self.gpu_root, n=1)
        fakegpu.create(self.gpu_root, n=1, first=1, mig=1)  # GPU 1: split by MIG
        for i in (0, 1):  # the job's user drives the model's load, resets and wrap
            for f in ("load", "resets", "wrap_mj"):
                os.chmod(fakegpu.gpu_dir(self.gpu_root, i) / f, 0o666)
        self.c = Cluster(self.workdir, gpus=2, config=config,
                         daemon_env={"FAKEHW_GPU_ROOT": str(self.gpu_root)})
        self.root = self.workdir / "js"
        self.root.mkdir(mode=0o755)
        self.hw = self.root / "hw"
        fakehw.create(str(self.hw), packages=1, cpus_per_package=max(1, self.c.cpus))
        self.spool, self.state = self.root / "spool", self.root / "state"
        # a copy of the stand-in with its root beside it (<lib>.root): the job
        # prolog and epilog run with slurmd's own environment for them, without
        # FAKEHW_GPU_ROOT; slurmstepd gets it through slurmd's environment too
        (self.workdir / "lib").mkdir(mode=0o755)
        self.lib = self.workdir / "lib" / "libnvidia-ml.so.1"
        shutil.copy2(build / "tests" / "fakehw" / "libnvidia-ml.so.1", self.lib)
        self.lib.with_name(self.lib.name + ".root").write_text(f"{self.gpu_root}\n")
        self.so = build / "spank" / "joulestep.so"
        self.c.plugin_so = self.so
        self.c.plugstack_args = self.args()

    def args(self, **extra) -> dict:
        a = {"spool": self.spool, "state": self.state, "sysfs": self.hw,
             "socket_dir": self.root / "sock", "backend": "sysfs", "sample_ms": 200,
             "gpu_lib": self.lib}
        a.update(extra)
        return a

    def configure(self, **extra):
        self.c.write_plugstack(self.so, self.args(**extra))

    def gpu_cmd(self, what: str, i: int, *arg) -> str:
        fg = self.c.public_path(REPO / "tests" / "fakehw" / "fakegpu.py")
        return (f"python3 -c \"import sys; sys.path.insert(0, sys.argv[1]); import fakegpu; "
                f"fakegpu.{what}(sys.argv[2], {i}{''.join(', ' + str(a) for a in arg)})\" "
                f"{fg.parent} {self.gpu_root}")

    def phase(self, *args) -> str:
        return f"{self.c.public_path(REPO / 'build' / 'bin')}/joulestep-phase " + " ".join(args)


@pytest.fixture(scope="module")
def gnode(cluster_users, build_dir, slurm_config):
    g = GpuNode(build_dir, slurm_config)
    try:
        g.c.start()
    except BaseException:
        g.c.stop()
        raise
    try:
        yield g
    finally:
        g.c.stop()
        shutil.rmtree(g.workdir, ignore_errors=True)


@pytest.fixture
def gpu(gnode):
    gnode.configure()
    gnode.c.wait_idle()
    return gnode


def close(a, b, rel=0.005):
    return abs(a - b) <= rel * abs(b), (a, b)


FORGED = "export CUDA_VISIBLE_DEVICES=1 SLURM_STEP_GPUS=1 SLURM_JOB_GPUS=1 GPU_DEVICE_ORDINAL=1"


@pytest.mark.site
def test_step_and_phase_gpu_energy_match_the_model_across_a_counter_reset_and_a_wrap(gpu):
    """One GPU (--gres=gpu:1: GPU 0), a compute and a checkpoint phase with a driver
    reload between them, then a counter that wraps at 150 J (from the reload on:
    ~0.7 s into the checkpoint, away from its boundaries); the job's environment
    names GPU 1 everywhere a user can."""
    wrap = fakegpu.gpu_dir(gpu.gpu_root, 0) / "wrap_mj"
    script = f"""#!/bin/sh
#SBATCH -n1 --gres=gpu:1
echo "JOBGPUS $SLURM_JOB_GPUS"
{FORGED}
srun -n1 --gres=gpu:1 sh -c '{FORGED}
{gpu.phase("begin", "compute")}
{gpu.gpu_cmd("load", 0, 0.9)}
sleep 1
{gpu.phase("end")}
{gpu.gpu_cmd("reset", 0)}
echo 150000 > {wrap}
sleep 0.3
{gpu.phase("begin", "checkpoint")}
{gpu.gpu_cmd("load", 0, 0.2)}
sleep 1
{gpu.phase("end")}
{gpu.gpu_cmd("load", 0, 0)}
sleep 0.3'
"""
    try:
        job, out = gpu.c.run_job(script, user=USER)
    finally:
        wrap.write_text("0\n")
    assert "JOBGPUS 0" in out, out
    recs = spool.wait_records(gpu.spool, job, ["batch", "0"], gpu.c.logs)
    off = mono_offset_ns()
    uuid0 = (fakegpu.gpu_dir(gpu.gpu_root, 0) / "uuid").read_text().strip()
    for step, r in recs.items():
        assert r["version"] == 4
        assert r["provenance"]["errors"] == [], (step, r["provenance"]["errors"])
        assert r["provenance"]["gpu_backend"] == "nvml", step
        assert r["provenance"]["gpus_unmeasured"] is None, step
        # the prolog's SLURM_JOB_GPUS from slurmd: GPU 0 only, whatever the job set
        assert [g["uuid"] for g in r["gpus"]] == [uuid0], (step, r["gpus"])
        g = r["gpus"][0]
        st = r["step"]
        truth = fakegpu.energy_mj(gpu.gpu_root, 0, st["start_ns"] - off, st["end_ns"] - off) * 1000
        assert g["energy_uj"] is not None and g["reason"] is None, (step, g)
        assert close(g["energy_uj"], truth), step
        # the reload and the wrap(s): each span bridged by the power integral
        assert g["integrated"] is False and g["resets"] >= 2, (step, g)
        assert st["energy_gpu_uj"] == g["energy_uj"]
        assert st["total_includes"] == "cpu+dram+gpu"
        assert st["energy_total_uj"] == st["energy_cpu_uj"] + st["energy_dram_uj"] + g["energy_uj"]
    phases = recs["0"]["phases"]
    assert [p["kind"] for p in phases] == ["compute", "checkpoint"]
    for p in phases:
        truth = fakegpu.energy_mj(gpu.gpu_root, 0, p["start_ns"] - off, p["end_ns"] - off) * 1000
        assert [x["uuid"] for x in p["gpus"]] == [uuid0]
        assert close(p["gpus"][0]["energy_uj"], truth), p["kind"]
        assert p["energy_gpu_uj"] == p["gpus"][0]["energy_uj"]
    # the loads were real: compute drew far more than checkpoint per second
    pw = [p["energy_gpu_uj"] / p["duration_ns"] for p in phases]
    assert pw[0] > 2 * pw[1], pw


def test_a_gpu_another_job_holds_is_null_not_charged_whole(gpu):
    """Another live job on the node lists GPU 0 in its prolog cache (as with Slurm's
    GPU sharing): this job's GPU 0 is shared, so it has no per-job figure."""
    jobs = gpu.state / "jobs"
    for d in (gpu.state, jobs):  # as the plugin makes them (root, 0700)
        d.mkdir(mode=0o700, exist_ok=True)
    other = jobs / "999990"
    other.write_text(json.dumps({"account": "", "cluster": "jstest", "first_seen_ns": 1,
                                 "gpus": "0", "job_id": 999990, "partition": "",
                                 "uid": 0}, separators=(",", ":")))
    os.chmod(other, 0o600)
    try:
        job, _ = gpu.c.run_job("#!/bin/sh\n#SBATCH -n1 --gres=gpu:1\nsleep 0.2\n", user=USER)
    finally:
        other.unlink()
    r = spool.wait_records(gpu.spool, job, ["batch"], gpu.c.logs)["batch"]
    assert len(r["gpus"]) == 1 and r["gpus"][0]["index"] == 0
    assert r["gpus"][0]["energy_uj"] is None
    assert "shared with another job" in r["gpus"][0]["reason"]
    assert r["step"]["energy_gpu_uj"] is None
    assert r["step"]["total_includes"] == "cpu+dram"


def test_a_job_without_gpus_measures_none_whatever_its_environment(gpu):
    script = f"""#!/bin/sh
#SBATCH -n1
{FORGED}
export SLURM_JOB_GPUS=0 SLURM_STEP_GPUS=0 CUDA_VISIBLE_DEVICES=0
srun -n1 true
"""
    job, _ = gpu.c.run_job(script, user=USER)
    recs = spool.wait_records(gpu.spool, job, ["batch", "0"], gpu.c.logs)
    for step, r in recs.items():
        assert r["gpus"] == [], step
        assert r["step"]["energy_gpu_uj"] is None
        assert r["step"]["total_includes"] == "cpu+dram"
        assert r["provenance"]["gpu_backend"] is None
        assert r["step"]["energy_cpu_uj"] is not None


def test_a_mig_gpu_is_null_with_the_reason_and_not_in_any_sum(gpu):
    job, _ = gpu.c.run_job("#!/bin/sh\n#SBATCH -n1 --gres=gpu:2\nsleep 0.5\n", user=USER)
    r = spool.wait_records(gpu.spool, job, ["batch"], gpu.c.logs)["batch"]
    by_index = {g["index"]: g for g in r["gpus"]}
    assert sorted(by_index) == [0, 1]
    assert by_index[0]["energy_uj"] is not None and by_index[0]["reason"] is None
    assert by_index[1]["energy_uj"] is None and "MIG" in by_index[1]["reason"]
    assert r["step"]["energy_gpu_uj"] is None
    assert r["step"]["total_includes"] == "cpu+dram"
    assert r["step"]["energy_total_uj"] == r["step"]["energy_cpu_uj"] + r["step"]["energy_dram_uj"]


def test_a_node_without_the_gpu_library_records_cpu_and_dram_and_says_why(gpu):
    gpu.configure(gpu_lib=gpu.root / "no-such" / "libnvidia-ml.so.1")
    job, _ = gpu.c.run_job("#!/bin/sh\n#SBATCH -n1 --gres=gpu:1\nsleep 0.2\n", user=USER)
    r = spool.wait_records(gpu.spool, job, ["batch"], gpu.c.logs)["batch"]
    assert r["gpus"] == []
    assert r["step"]["energy_cpu_uj"] is not None
    assert r["step"]["total_includes"] == "cpu+dram"
    assert "no-such" in r["provenance"]["gpus_unmeasured"], r["provenance"]
    assert r["provenance"]["errors"] == []


# ------------------------------------------------------------ +gpu-io: GPU clocks
def locks_since(gpu, t0):
    return [lk for lk in fakegpu.locks(gpu.gpu_root, 0) if lk[0] >= t0]


def lk_last(gpu, t0):
    return locks_since(gpu, t0)[-1][2:]


def gpu_journal(gpu) -> list:
    return sorted(p.name for p in gpu.state.glob("gpu-*")) if gpu.state.exists() else []


@pytest.mark.site
def test_gpu_clock_is_lowered_only_in_io_phases_and_restored(gpu):
    """monitor+gpu-io with gpu_io_mhz=800: the GPU is locked to [min, 800] MHz in a
    write phase nested in compute and in a checkpoint, and unlocked at their ends;
    compute is left alone; the energy truth (the model follows the locks) holds."""
    gpu.configure(gpu_io_mhz=800)
    t0 = time.monotonic_ns()
    script = f"""#!/bin/sh
#SBATCH -n1 --gres=gpu:1 --energy-policy=monitor+gpu-io
srun -n1 sh -c '{gpu.phase("begin", "compute")}
{gpu.gpu_cmd("load", 0, 0.9)}
sleep 0.4
{gpu.phase("begin", "write")}
sleep 0.4
{gpu.phase("end")}
sleep 0.3
{gpu.phase("end")}
{gpu.phase("begin", "checkpoint")}
sleep 0.4
{gpu.phase("end")}
{gpu.gpu_cmd("load", 0, 0)}'
"""
    job, _ = gpu.c.run_job(script, user=USER)
    recs = spool.wait_records(gpu.spool, job, ["batch", "0"], gpu.c.logs)
    off = mono_offset_ns()
    r = recs["0"]
    assert r["provenance"]["errors"] == [], r["provenance"]["errors"]
    assert r["provenance"]["gpu_clock_control"] == "joulestep"
    assert r["step"]["policy"] == "monitor+gpu-io"
    ph = {p["kind"]: p for p in r["phases"]}
    assert ph["compute"]["gpu_clock_mhz"] is None
    assert ph["write"]["gpu_clock_mhz"] == 800 and ph["checkpoint"]["gpu_clock_mhz"] == 800
    lk = locks_since(gpu, t0)
    lo = float((fakegpu.gpu_dir(gpu.gpu_root, 0) / "min_mhz").read_text())
    assert [(a, b) for _, a, b in lk] == [(lo, 800), (0, 0), (lo, 800), (0, 0)], lk
    # each lock inside its phase's energy interval (set when the BEGIN is handled)
    for (t_lock, _, _), (t_unlock, _, _), kind in ((lk[0], lk[1], "write"),
                                                   (lk[2], lk[3], "checkpoint")):
        p = ph[kind]
        assert p["start_ns"] - off - 2_000_000 <= t_lock <= p["end_ns"] - off, kind
        assert p["end_ns"] - off - 2_000_000 <= t_unlock, kind
    for p in r["phases"]:  # the model's energy, with the locks applied
        truth = fakegpu.energy_mj(gpu.gpu_root, 0, p["start_ns"] - off, p["end_ns"] - off) * 1000
        assert close(p["gpus"][0]["energy_uj"], truth), p["kind"]
    assert recs["batch"]["provenance"]["gpu_clock_control"] == "joulestep"
    assert all(p.get("gpu_clock_mhz") is None for p in recs["batch"]["phases"])
    assert gpu_journal(gpu) == []


def test_gpu_clock_left_to_slurm_when_the_job_asks_for_gpu_freq(gpu):
    """sbatch --gpu-freq: Slurm sets the GPU clocks, +gpu-io steps aside in the job's
    srun steps (SLURMD_TRES_FREQ, from the batch script's environment)."""
    gpu.configure(gpu_io_mhz=800)
    t0 = time.monotonic_ns()
    script = f"""#!/bin/sh
#SBATCH -n1 --gres=gpu:1 --gpu-freq=medium --energy-policy=monitor+gpu-io
srun -n1 sh -c '{gpu.phase("begin", "checkpoint")}
sleep 0.2
{gpu.phase("end")}'
"""
    job, out = gpu.c.run_job(script, user=USER)
    r = spool.wait_records(gpu.spool, job, ["0"], gpu.c.logs)["0"]
    assert r["provenance"]["gpu_clock_control"] == "slurm-gpu-freq", out
    assert r["phases"][0]["gpu_clock_mhz"] is None
    assert locks_since(gpu, t0) == []


def _kill_in_checkpoint(gpu, tag):
    """A batch step locks GPU 0 in a checkpoint phase; its slurmstepd and the
    orphaned script are SIGKILLed there. Returns (job, t0): still locked and
    journaled."""
    gpu.configure(gpu_io_mhz=800)
    d = gpu.c.user_dir(USER)
    (d / f"{tag}.in").unlink(missing_ok=True)
    t0 = time.monotonic_ns()
    script = f"""#!/bin/sh
#SBATCH -n1 --gres=gpu:1 --energy-policy=monitor+gpu-io
{gpu.phase("begin", "checkpoint")}
touch {d}/{tag}.in
sleep 300
"""
    res, job = gpu.c.sbatch(script, user=USER)
    assert res.returncode == 0 and job, res.stderr
    wait_for(lambda: (d / f"{tag}.in").exists() and locks_since(gpu, t0), "the checkpoint's lock")
    assert gpu_journal(gpu) != []
    pid = stepd_pid(job, "batch", gpu.c)
    assert pid
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not cmdline(pid) or "slurmstepd" not in cmdline(pid), "slurmstepd gone", 10)
    for p in job_pids(job, gpu.c):  # the orphaned script and its sleep
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert lk_last(gpu, t0) == (800,)  # still locked: nobody unlocked it
    assert gpu_journal(gpu) != []
    return job, t0


def test_gpu_left_locked_by_a_killed_step_is_unlocked_by_the_epilog(gpu):
    """kill -9 of slurmstepd inside a checkpoint phase: the GPU stays locked and
    journaled until the job's epilog unlocks it (the owner is dead)."""
    job, t0 = _kill_in_checkpoint(gpu, "epi")
    gpu.c.scancel(job)
    gpu.c.wait_job(job)
    # no further step: only the epilog can unlock it
    wait_for(lambda: gpu_journal(gpu) == [], "the epilog's unlock", timeout=60)
    assert lk_last(gpu, t0) == (0,)


def test_gpu_left_locked_by_a_killed_step_is_unlocked_by_joulestep_restore(gpu, build_dir):
    job, t0 = _kill_in_checkpoint(gpu, "rst")
    try:
        r = subprocess.run([str(build_dir / "bin" / "joulestep-restore"), "--state", str(gpu.state),
                            "--sysfs", str(gpu.hw), "--gpu-lib", str(gpu.lib)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert gpu_journal(gpu) == []
        assert lk_last(gpu, t0) == (0,)
    finally:
        gpu.c.scancel(job)
        gpu.c.wait_job(job)


def _step_pids(gpu, job, step) -> list[int]:
    """The tasks of one step of the job (not its slurmstepd)."""
    out = []
    for p in job_pids(job, gpu.c):
        try:
            env = pathlib.Path(f"/proc/{p}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"SLURM_STEP_ID={step}".encode() in env and not cmdline(p).startswith("slurmstepd"):
            out.append(p)
    return out


def test_gpu_left_locked_by_a_killed_step_is_unlocked_by_the_next_step(gpu):
    """srun step 0 locks GPU 0 in a write phase; its slurmstepd is SIGKILLed there, so
    the lock and its journal entry stay (the job goes on: no epilog, no prolog). Step 1
    of the same job finds the dead owner's entry when it starts and unlocks the GPU
    before its task runs: the stand-in's lock log has the unlock between step 1's start
    and the first thing its task does, the task sees the GPU unlocked, and step 1's own
    checkpoint then locks and unlocks from there."""
    gpu.configure(gpu_io_mhz=800)
    d = gpu.c.user_dir(USER)
    up, go = d / "nx.up", d / "nx.go"
    for f in (up, go):
        f.unlink(missing_ok=True)
    locks = fakegpu.gpu_dir(gpu.gpu_root, 0) / "locks"
    t0 = time.monotonic_ns()
    script = f"""#!/bin/sh
#SBATCH -n1 --gres=gpu:1
srun --overlap -n1 --energy-policy=monitor+gpu-io sh -c '{gpu.phase("begin", "write")}; touch {up}; exec sleep 300' &
i=0; while [ ! -e {go} ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
srun --overlap -n1 --energy-policy=monitor+gpu-io sh -c 'echo "T1 $(python3 -c "import time; print(time.monotonic_ns())")"
echo "LASTLOCK $(tail -n1 {locks})"
{gpu.phase("begin", "checkpoint")}
sleep 0.2
{gpu.phase("end")}'
"""
    res, job = gpu.c.sbatch(script, user=USER)
    assert res.returncode == 0 and job, res.stderr
    try:
        wait_for(lambda: up.exists() and locks_since(gpu, t0), "step 0's lock", 60)
        assert gpu_journal(gpu) != []
        pid = stepd_pid(job, "0", gpu.c)
        assert pid, f"no slurmstepd for {job}.0"
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: "slurmstepd" not in cmdline(pid), "slurmstepd gone", 20)
        for p in _step_pids(gpu, job, "0"):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        t_kill = time.monotonic_ns()
        time.sleep(0.5)
        assert lk_last(gpu, t0) == (800,)  # still locked, still journaled: step 1 must undo it
        assert gpu_journal(gpu) != []
        go.touch()
        st = gpu.c.wait_job(job, 120)
        out = gpu.c.job_output(job)
        assert st == "COMPLETED", f"{st}\n{out}"
    finally:
        gpu.c.scancel(job)
        gpu.c.wait_job(job)
    r = spool.wait_records(gpu.spool, job, ["1"], gpu.c.logs)["1"]
    off = mono_offset_ns()
    t1 = int(next(ln.split()[1] for ln in out.splitlines() if ln.startswith("T1 ")))
    last = next(ln.split()[1:] for ln in out.splitlines() if ln.startswith("LASTLOCK "))
    lo = float((fakegpu.gpu_dir(gpu.gpu_root, 0) / "min_mhz").read_text())
    lk = locks_since(gpu, t0)
    # step 0's lock, step 1's recovery, step 1's own checkpoint lock and unlock
    assert [(a, b) for _, a, b in lk] == [(lo, 800), (0, 0), (lo, 800), (0, 0)], lk
    t_unlock = lk[1][0]
    assert t_kill < t_unlock < t1, (t_kill, t_unlock, t1)
    assert r["step"]["start_ns"] - off - 2_000_000 <= t_unlock, (r["step"]["start_ns"] - off, t_unlock)
    assert [float(x) for x in last[1:]] == [0.0, 0.0], last  # the task saw the GPU unlocked
    assert r["provenance"]["errors"] == [], r["provenance"]["errors"]
    assert r["phases"][0]["gpu_clock_mhz"] == 800
    assert gpu_journal(gpu) == []


def test_slurm_gpu_numbers_are_mapped_by_device_minor_not_the_library_index(gpu):
    """A node whose NVML order (PCI bus id) is not its /dev/nvidiaN order: NVML's GPU 0
    is /dev/nvidia1 and its GPU 1 is /dev/nvidia0. Slurm gives the job its GPU 0 (the
    N of /dev/nvidiaN), so the plugin must measure and lock NVML's GPU 1 (device minor
    0) and leave NVML's GPU 0 alone; another live job holding Slurm's GPU 1 does not
    make this job's GPU look shared."""
    d0, d1 = fakegpu.gpu_dir(gpu.gpu_root, 0), fakegpu.gpu_dir(gpu.gpu_root, 1)
    jobs = gpu.state / "jobs"
    for d in (gpu.state, jobs):
        d.mkdir(mode=0o700, exist_ok=True)
    other = jobs / "999991"
    other.write_text(json.dumps({"account": "", "cluster": "jstest", "first_seen_ns": 1,
                                 "gpus": "1", "job_id": 999991, "partition": "",
                                 "uid": 0}, separators=(",", ":")))
    os.chmod(other, 0o600)
    (d0 / "minor").write_text("1\n")
    (d1 / "minor").write_text("0\n")
    (d1 / "mig").write_text("0\n")
    gpu.configure(gpu_io_mhz=800)
    t0 = time.monotonic_ns()
    script = f"""#!/bin/sh
#SBATCH -n1 --gres=gpu:1 --energy-policy=monitor+gpu-io
echo "JOBGPUS $SLURM_JOB_GPUS"
{gpu.gpu_cmd("load", 0, 0.9)}
{gpu.gpu_cmd("load", 1, 0.5)}
{gpu.phase("begin", "checkpoint")}
sleep 0.5
{gpu.phase("end")}
{gpu.gpu_cmd("load", 0, 0)}
{gpu.gpu_cmd("load", 1, 0)}
"""
    try:
        job, out = gpu.c.run_job(script, user=USER)
    finally:
        other.unlink()
        (d0 / "minor").unlink()
        (d1 / "minor").unlink()
        (d1 / "mig").write_text("1\n")
    assert "JOBGPUS 0" in out, out
    r = spool.wait_records(gpu.spool, job, ["batch"], gpu.c.logs)["batch"]
    off = mono_offset_ns()
    uuid1 = (d1 / "uuid").read_text().strip()
    assert r["provenance"]["errors"] == [], r["provenance"]["errors"]
    assert [(g["index"], g["uuid"]) for g in r["gpus"]] == [(1, uuid1)], r["gpus"]
    g = r["gpus"][0]
    assert g["reason"] is None, g
    st = r["step"]
    truth = fakegpu.energy_mj(gpu.gpu_root, 1, st["start_ns"] - off, st["end_ns"] - off) * 1000
    assert close(g["energy_uj"], truth)
    p = r["phases"][0]
    truth = fakegpu.energy_mj(gpu.gpu_root, 1, p["start_ns"] - off, p["end_ns"] - off) * 1000
    assert close(p["gpus"][0]["energy_uj"], truth)
    assert p["gpu_clock_mhz"] == 800
    lo = float((d1 / "min_mhz").read_text())
    assert [(a, b) for t, a, b in fakegpu.locks(gpu.gpu_root, 1) if t >= t0] == [(lo, 800), (0, 0)]
    assert locks_since(gpu, t0) == []  # NVML's GPU 0 (/dev/nvidia1) untouched


def test_amd_gpus_are_mapped_by_render_minor(gpu, build_dir):
    """The same on AMD SMI: the node's two GPUs shown by the AMD stand-in, whose GPU 0
    is /dev/dri/renderD129 and GPU 1 renderD128. Slurm's GPU 0 is AMD SMI's GPU 1."""
    d0, d1 = fakegpu.gpu_dir(gpu.gpu_root, 0), fakegpu.gpu_dir(gpu.gpu_root, 1)
    lib = gpu.workdir / "lib" / "libamd_smi.so"
    shutil.copy2(build_dir / "tests" / "fakehw" / "libamd_smi.so", lib)
    lib.with_name(lib.name + ".root").write_text(f"{gpu.gpu_root}\n")
    saved = {p: p.read_text() for p in (d0 / "vendor", d1 / "vendor", d1 / "mig")}
    for d, minor in ((d0, 1), (d1, 0)):
        (d / "vendor").write_text("amd\n")
        (d / "minor").write_text(f"{minor}\n")
    (d1 / "mig").write_text("0\n")
    gpu.configure(gpu_lib=lib, gpu_backend="amdsmi")
    script = f"""#!/bin/sh
#SBATCH -n1 --gres=gpu:1
echo "JOBGPUS $SLURM_JOB_GPUS"
{gpu.gpu_cmd("load", 1, 0.5)}
sleep 0.5
{gpu.gpu_cmd("load", 1, 0)}
"""
    try:
        job, out = gpu.c.run_job(script, user=USER)
    finally:
        for p, text in saved.items():
            p.write_text(text)
        (d0 / "minor").unlink()
        (d1 / "minor").unlink()
    assert "JOBGPUS 0" in out, out
    r = spool.wait_records(gpu.spool, job, ["batch"], gpu.c.logs)["batch"]
    off = mono_offset_ns()
    assert r["provenance"]["gpu_backend"] == "amdsmi", r["provenance"]
    assert [(g["index"], g["uuid"]) for g in r["gpus"]] == [(1, (d1 / "uuid").read_text().strip())]
    st = r["step"]
    truth = fakegpu.energy_mj(gpu.gpu_root, 1, st["start_ns"] - off, st["end_ns"] - off) * 1000
    assert close(r["gpus"][0]["energy_uj"], truth)


def _report(gpu, gres, body):
    """srun --energy-report on the node's GPUs: (job, stderr, the step's record)."""
    res = gpu.c.srun(["-n1", f"--gres=gpu:{gres}", "--energy-report", "sh", "-c", body],
                     user=USER, timeout=120)
    assert res.returncode == 0, res.stderr
    m = re.search(r"joulestep: step (\d+)\.0 on ", res.stderr)
    assert m, res.stderr
    job = int(m.group(1))
    return job, res.stderr, spool.wait_records(gpu.spool, job, ["0"], gpu.c.logs)["0"]


def test_energy_report_shows_the_steps_gpus(gpu):
    """srun --energy-report: the step line adds the GPU's energy to the total, a line
    per GPU, the phase line its GPU energy; a MIG GPU is listed with its reason and
    the total says the GPUs are not in it."""
    uuid0 = (fakegpu.gpu_dir(gpu.gpu_root, 0) / "uuid").read_text().strip()
    uuid1 = (fakegpu.gpu_dir(gpu.gpu_root, 1) / "uuid").read_text().strip()
    body = (f'{gpu.gpu_cmd("load", 0, 0.8)}; {gpu.phase("begin", "compute")}; sleep 0.5; '
            f'{gpu.phase("end")}; {gpu.gpu_cmd("load", 0, 0)}')
    job, err, r = _report(gpu, 1, body)
    off = mono_offset_ns()
    st, p = r["step"], r["phases"][0]
    truth_j = fakegpu.energy_mj(gpu.gpu_root, 0, st["start_ns"] - off, st["end_ns"] - off) / 1e3
    ptruth_j = fakegpu.energy_mj(gpu.gpu_root, 0, p["start_ns"] - off, p["end_ns"] - off) / 1e3
    m = re.search(rf"step {job}\.0 on \S+: [\d.]+ s, CPU ([\d.]+) J, DRAM ([\d.]+) J, "
                  r"GPU ([\d.]+) J, total ([\d.]+) J", err)
    assert m, err
    cpu, dram, g, total = map(float, m.groups())
    assert close(g, truth_j), err
    assert abs(total - (cpu + dram + g)) <= 0.002, err
    m = re.search(rf"joulestep:   GPU {uuid0}: ([\d.]+) J\n", err)
    assert m and close(float(m.group(1)), truth_j), err
    m = re.search(r"phase 0 compute: [\d.]+ s, CPU [\d.]+ J, DRAM [\d.]+ J, GPU ([\d.]+) J", err)
    assert m and close(float(m.group(1)), ptruth_j), err
    assert uuid1 not in err

    job, err, r = _report(gpu, 2, "sleep 0.3")
    m = re.search(rf"step {job}\.0 on \S+: [\d.]+ s, CPU ([\d.]+) J, DRAM ([\d.]+) J, "
                  r"GPUs not in the total, total ([\d.]+) J", err)
    assert m, err
    cpu, dram, total = map(float, m.groups())
    assert abs(total - (cpu + dram)) <= 0.002, err
    st = r["step"]
    off = mono_offset_ns()
    truth_j = fakegpu.energy_mj(gpu.gpu_root, 0, st["start_ns"] - off, st["end_ns"] - off) / 1e3
    m = re.search(rf"joulestep:   GPU {uuid0}: ([\d.]+) J\n", err)
    assert m and close(float(m.group(1)), truth_j), err
    assert re.search(rf"joulestep:   GPU {uuid1}: energy not shown \(split by MIG[^)]*\)", err), err


def test_phases_handled_while_the_step_ends_get_their_gpu_energy(gpu):
    """Markers queued at step end: the task sends 40 asynchronous write phases and exits
    at once, so the step thread handles them while slurmstepd takes the step's final
    readings. Every phase recorded has its GPU energy (those handled between the CPU's
    final reading and the GPU's got none, with a wrong reason: the end flag and the GPU
    reading were shared between the threads), and together they are within the step's."""
    flood = gpu.root / "flood.py"
    flood.write_text("import ctypes, sys\n"
                     "lib = ctypes.CDLL(sys.argv[1])\n"
                     "for _ in range(40):\n"
                     "    lib.js_phase_begin(b'write', None)\n"
                     "    lib.js_phase_end(ctypes.c_longlong(-1))\n")
    flood.chmod(0o644)
    client = gpu.c.public_path(REPO / "build" / "lib" / "libjoulestep-client.so")
    script = f"""#!/bin/sh
#SBATCH -n1 --gres=gpu:1
srun -n1 --gres=gpu:1 sh -c '{gpu.gpu_cmd("load", 0, 0.5)}
sleep 0.3
python3 {flood} {client}'
"""
    job, _ = gpu.c.run_job(script, user=USER)
    rec = spool.wait_records(gpu.spool, job, ["batch", "0"], gpu.c.logs)["0"]
    phases = rec["phases"]
    assert phases, rec["provenance"]
    for p in phases:
        g = p["gpus"][0]
        assert g["energy_uj"] is not None and g["reason"] is None, (p["seq"], p)
        assert p["energy_gpu_uj"] == g["energy_uj"]
    step_uj = rec["gpus"][0]["energy_uj"]
    assert step_uj is not None
    assert sum(p["energy_gpu_uj"] for p in phases) <= step_uj
