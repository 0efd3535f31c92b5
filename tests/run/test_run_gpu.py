"""joulestep-run --gpus on the NVML stand-in (tests/fakehw/gpu/fake_nvml.c).

The command (gpu_job.py) drives the fake GPUs' utilisation and marks phases;
the truth of each phase is the fakehw GPU model integrated by the test over the
marker times (fakegpu.energy_mj). joulestep-run must agree within 0.5 % with
the counter, across a driver reload, and lower the GPU clock only inside the
I/O phases it was asked to.
"""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

import fakegpu

JOB = [sys.executable, str(__import__("pathlib").Path(__file__).with_name("gpu_job.py"))]


@pytest.fixture
def run_exe(build_dir):
    return str(build_dir / "bin" / "joulestep-run")


@pytest.fixture
def nvml(build_dir):
    return str(build_dir / "tests" / "fakehw" / "libnvidia-ml.so.1")


@pytest.fixture
def amdsmi(build_dir):
    return str(build_dir / "tests" / "fakehw" / "libamd_smi.so")


def run(run_exe, nvml, root, tmp_path, steps, extra=(), ok=True):
    out = tmp_path / "job.json"
    cmd = [run_exe, "--sysfs", str(tmp_path / "no-sysfs"), "--state", str(tmp_path / "state"),
           "--gpus", "--gpu-lib", nvml, "--phases", "--json", *extra, "--", *JOB, str(root),
           str(out), *steps]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=fakegpu.env(root))
    if ok:
        assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout) if p.returncode == 0 else None
    return rep, (json.loads(out.read_text()) if out.exists() else None), p


def phase_times(log):
    """[(t_begin, t_end)] from the command's marker log."""
    spans, begin = [], None
    for verb, _args, t in log["markers"]:
        if verb == "begin":
            begin = t
        else:
            spans.append((begin, t))
    return spans


def test_phase_energy_matches_the_model_across_a_driver_reload(tmp_path, run_exe, nvml):
    # No idle power: the truth is taken over the marker times, and joulestep-run
    # reads a little later (its reader thread); at idle that lag costs nothing.
    root = fakegpu.create(tmp_path / "gpus", n=2, idle_mw=0)
    steps = ["begin:compute:c1", "sleep:0.05", "load:0:1.0", "load:1:0.4", "sleep:0.8",
             "load:0:0", "load:1:0", "sleep:0.05", "end",
             "begin:checkpoint:k1", "sleep:0.05", "load:0:1.0", "sleep:0.5", "load:0:0.1",
             "sleep:0.3", "reset:0", "sleep:0.3", "load:0:1.0", "sleep:0.5", "load:0:0",
             "sleep:0.05", "end"]
    # Sampling every 200 ms, the span around the reload is ~14 J at 70 W: filled
    # from the power integral, or the phase would be 2 % short. (The counter is seen
    # in 10 ms steps: the part of one step lost at the reload is at most 0.7 J.)
    rep, log, _ = run(run_exe, nvml, root, tmp_path, steps, extra=["--gpu-sample-ms", "200"])
    assert rep["total_includes"] == "gpu"  # no RAPL here: CPU/DRAM are not measured
    assert rep["energy_cpu_j"] is None and "cpu_not_measured" in rep
    spans = phase_times(log)
    assert [p["kind"] for p in rep["phases"]] == ["compute", "checkpoint"]
    for ph, (t0, t1) in zip(rep["phases"], spans):
        for g in ph["gpus"]:
            truth_j = fakegpu.energy_mj(root, g["index"], t0, t1) / 1e3
            assert g["energy_j"] == pytest.approx(truth_j, rel=5e-3), (ph["kind"], g)
            assert g["integrated"] is False
        assert ph["energy_gpu_j"] == pytest.approx(sum(g["energy_j"] for g in ph["gpus"]))
    # the GPU 0 reload fell inside the checkpoint phase: still followed
    assert rep["phases"][1]["gpus"][0]["uncertain"] is False
    assert [g["uuid"] for g in rep["gpus"]] == [
        (root / f"gpu{i}" / "uuid").read_text().strip() for i in range(2)]


def test_gpu_without_counter_is_integrated(tmp_path, run_exe, nvml):
    root = fakegpu.create(tmp_path / "gpus", n=1, counter=0)
    steps = ["begin:compute", "sleep:0.05", "load:0:1.0", "sleep:0.6", "load:0:0",
             "sleep:0.05", "end"]
    rep, log, _ = run(run_exe, nvml, root, tmp_path, steps, extra=["--gpu-sample-ms", "2"])
    (t0, t1), = phase_times(log)
    g = rep["phases"][0]["gpus"][0]
    assert g["integrated"] is True
    # sampling every 2 ms: each power step is off by at most ~1 ms of 640 W
    assert g["energy_j"] == pytest.approx(fakegpu.energy_mj(root, 0, t0, t1) / 1e3, rel=1e-2)


def test_clock_is_lowered_only_in_io_phases(tmp_path, run_exe, nvml):
    root = fakegpu.create(tmp_path / "gpus", n=1, idle_mw=0)  # as above: lag at idle is free
    # the job starts its load 50 ms into the checkpoint: after the lock, however
    # busy the machine (the energy check is then of the locked clock alone)
    steps = ["begin:compute", "load:0:1.0", "sleep:0.2", "locks", "load:0:0", "end",
             "begin:checkpoint", "sleep:0.05", "load:0:1.0", "sleep:0.4", "locks", "load:0:0",
             "sleep:0.02", "end", "sleep:0.1", "locks", "begin:write", "sleep:0.05", "end"]
    rep, log, _ = run(run_exe, nvml, root, tmp_path, steps, extra=["--gpu-io-clock-mhz", "900"])
    in_compute, in_ckpt, after = (seen[0] for seen in log["locks_seen"])
    assert in_compute == []                       # compute: not touched
    assert len(in_ckpt) == 1 and in_ckpt[0][2] == 900 and in_ckpt[0][1] == 345
    assert tuple(after[-1][1:]) == (0, 0)         # unlocked at the end marker
    final = fakegpu.locks(root, 0)
    assert len(final) == 4 and final[-1][1:] == (0, 0)   # write: locked, then reset
    ck = rep["phases"][1]
    assert ck["gpu_clock"]["lowered"] is True and ck["gpu_clock"]["max_mhz"] == 900
    assert rep["phases"][0]["gpu_clock"] is None
    (t0, t1) = phase_times(log)[1]
    truth_j = fakegpu.energy_mj(root, 0, t0, t1) / 1e3
    assert ck["gpus"][0]["energy_j"] == pytest.approx(truth_j, rel=5e-3)
    # the model at 900 of 1980 MHz: far below the same load unlocked
    assert truth_j < 0.5 * 700 * 0.4


def test_back_to_back_phases_split_at_the_marker_not_the_counter_update(tmp_path, run_exe, nvml):
    """NVML's counter moves every ~10 ms: read as is at a boundary it is up to
    10 ms x 700 W = 7 J stale, and that energy lands in the next phase."""
    root = fakegpu.create(tmp_path / "gpus", n=1)
    steps = ["load:0:1.0", "begin:compute", "sleep:0.8", "end", "begin:write", "sleep:0.8",
             "end", "begin:compute", "sleep:0.8", "end", "load:0:0"]
    rep, log, _ = run(run_exe, nvml, root, tmp_path, steps)
    # 1 %: the counter's update is located between two polls ~0.2 ms apart, but a
    # thread preempted for a few ms on a busy 2-core VM widens that (700 W x 4 ms)
    for ph, (t0, t1) in zip(rep["phases"], phase_times(log)):
        truth_j = fakegpu.energy_mj(root, 0, t0, t1) / 1e3
        assert ph["gpus"][0]["energy_j"] == pytest.approx(truth_j, rel=1e-2), ph["kind"]


def test_refused_lock_is_reported_and_measuring_goes_on(tmp_path, run_exe, nvml):
    root = fakegpu.create(tmp_path / "gpus", n=1, lock_permission=0)
    rep, _, p = run(run_exe, nvml, root, tmp_path, ["begin:checkpoint", "sleep:0.1", "end"],
                    extra=["--gpu-io-clock-mhz", "900"])
    clk = rep["phases"][0]["gpu_clock"]
    assert clk["lowered"] is False
    assert "Insufficient Permissions" in clk["error"]
    assert "Insufficient Permissions" in p.stderr
    assert fakegpu.locks(root, 0) == []
    assert rep["phases"][0]["energy_gpu_j"] > 0


def test_bad_marker_lines_are_refused_and_the_rest_survive(tmp_path, run_exe, nvml):
    root = fakegpu.create(tmp_path / "gpus", n=1)
    steps = ["raw:end", "raw:begin Bad!kind", "begin:compute:ok", "raw:begin write nested",
             "sleep:0.05", "end", "raw:bogus"]
    rep, _, p = run(run_exe, nvml, root, tmp_path, steps)
    assert [ph["kind"] for ph in rep["phases"]] == ["compute"]
    assert p.stderr.count("ignored marker line") == 4
    assert "'begin KIND [LABEL] [t=NS]'" in p.stderr


def test_unterminated_phase_is_closed_and_clock_restored(tmp_path, run_exe, nvml):
    root = fakegpu.create(tmp_path / "gpus", n=1)
    rep, _, _ = run(run_exe, nvml, root, tmp_path, ["begin:flush", "sleep:0.1"],
                    extra=["--gpu-io-clock-mhz", "600"])
    assert rep["phases"][0]["unterminated"] is True
    assert fakegpu.locks(root, 0)[-1][1:] == (0, 0)


def test_missing_nvml_is_a_clear_error(tmp_path, run_exe):
    p = subprocess.run([run_exe, "--gpus", "--gpu-lib", str(tmp_path / "nope.so"), "--", "true"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 125
    assert "--gpus: nvml: cannot load" in p.stderr and "amdsmi: cannot load" in p.stderr


def test_selecting_gpus_by_index_and_uuid(tmp_path, run_exe, nvml):
    root = fakegpu.create(tmp_path / "gpus", n=3)
    uuid2 = (root / "gpu2" / "uuid").read_text().strip()
    p = subprocess.run([run_exe, "--sysfs", str(tmp_path), "--gpus=0," + uuid2, "--gpu-lib", nvml,
                        "--json", "--", "true"], capture_output=True, text=True, timeout=60,
                       env=fakegpu.env(root))
    assert p.returncode == 0, p.stderr
    assert [g["index"] for g in json.loads(p.stdout)["gpus"]] == [0, 2]


def test_amd_energy_is_the_accumulator_times_its_resolution(tmp_path, run_exe, amdsmi):
    """AMD SMI returns an accumulator in units of a resolution (15.259 uJ here):
    without the multiplication every figure would be 15 times too small."""
    root = fakegpu.create(tmp_path / "gpus", n=2, vendor="amd", idle_mw=0)
    steps = ["begin:compute", "sleep:0.05", "load:0:1.0", "load:1:0.3", "sleep:0.8", "load:0:0",
             "load:1:0", "sleep:0.05", "end"]
    rep, log, _ = run(run_exe, amdsmi, root, tmp_path, steps, extra=["--gpu-backend", "amdsmi"])
    (t0, t1), = phase_times(log)
    for g in rep["phases"][0]["gpus"]:
        truth_j = fakegpu.energy_mj(root, g["index"], t0, t1) / 1e3
        assert g["energy_j"] == pytest.approx(truth_j, rel=5e-3), g
    assert rep["gpus"][0]["uuid"] == (root / "gpu0" / "uuid").read_text().strip()


def test_amd_clock_change_is_refused_with_the_reason(tmp_path, run_exe, amdsmi):
    root = fakegpu.create(tmp_path / "gpus", n=1, vendor="amd")
    rep, _, _ = run(run_exe, amdsmi, root, tmp_path, ["begin:checkpoint", "sleep:0.05", "end"],
                    extra=["--gpu-backend", "amdsmi", "--gpu-io-clock-mhz", "900"])
    clk = rep["phases"][0]["gpu_clock"]
    assert clk["lowered"] is False and "not implemented for AMD" in clk["error"]


def test_each_stand_in_sees_only_its_vendor(tmp_path, run_exe, nvml, amdsmi):
    root = fakegpu.create(tmp_path / "gpus", n=1)                      # gpu0: NVIDIA
    fakegpu.create(root, n=2, first=1, vendor="amd")                    # gpu1, gpu2: AMD
    for lib, backend, want in ((nvml, "nvml", 1), (amdsmi, "amdsmi", 2)):
        p = subprocess.run([run_exe, "--sysfs", str(tmp_path), "--gpus", "--gpu-backend", backend,
                            "--gpu-lib", lib, "--json", "--", "true"], capture_output=True,
                           text=True, timeout=60, env=fakegpu.env(root))
        assert p.returncode == 0, p.stderr
        assert len(json.loads(p.stdout)["gpus"]) == want


def _starttime(pid):
    stat = open(f"/proc/{pid}/stat").read()
    return int(stat[stat.rindex(")") + 2:].split()[19])


def _journal(tmp_path):
    d = tmp_path / "state"
    return sorted(p.name for p in d.glob("gpu-*")) if d.exists() else []


def test_kill_9_leaves_a_journal_entry_that_joulestep_restore_undoes(tmp_path, run_exe, nvml,
                                                                      build_dir):
    root = fakegpu.create(tmp_path / "gpus", n=2)
    out = tmp_path / "job.json"
    cmd = [run_exe, "--sysfs", str(tmp_path / "no"), "--state", str(tmp_path / "state"), "--gpus",
           "--gpu-lib", nvml, "--phases", "--gpu-io-clock-mhz", "700", "--", *JOB, str(root),
           str(out), "begin:checkpoint", "sleep:60", "end"]
    p = subprocess.Popen(cmd, env=fakegpu.env(root), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while len(_journal(tmp_path)) < 2 or len(fakegpu.locks(root, 1)) < 1:
            assert time.monotonic() < deadline, "the GPUs were never locked"
            time.sleep(0.05)
        os.kill(p.pid, signal.SIGKILL)          # joulestep-run dies inside the phase
        p.wait(timeout=10)
    finally:
        os.killpg(p.pid, signal.SIGKILL)        # and its job
    assert [lk[1:] for lk in fakegpu.locks(root, 0)] == [(345, 700)]   # still locked
    assert len(_journal(tmp_path)) == 2
    restore = [str(build_dir / "bin" / "joulestep-restore"), "--state", str(tmp_path / "state"),
               "--sysfs", str(tmp_path / "no"), "--gpu-lib", nvml]
    r = subprocess.run(restore, capture_output=True, text=True, timeout=60, env=fakegpu.env(root))
    assert r.returncode == 0, r.stderr
    assert "unlocked 2 GPUs" in r.stdout
    for i in range(2):
        assert fakegpu.locks(root, i)[-1][1:] == (0, 0)
    assert _journal(tmp_path) == []
    # a second run has nothing left to do
    r = subprocess.run(restore, capture_output=True, text=True, timeout=60, env=fakegpu.env(root))
    assert r.returncode == 0 and "GPU" not in r.stdout


def test_a_gpu_held_by_a_live_process_is_left_alone(tmp_path, run_exe, nvml, build_dir):
    root = fakegpu.create(tmp_path / "gpus", n=1)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    uuid = (root / "gpu0" / "uuid").read_text().strip()
    (state / f"gpu-{uuid}").write_text(f"{os.getpid()} {_starttime(os.getpid())}\n")
    rep, _, _ = run(run_exe, nvml, root, tmp_path, ["begin:write", "sleep:0.05", "end"],
                    extra=["--gpu-io-clock-mhz", "900"])
    clk = rep["phases"][0]["gpu_clock"]
    assert clk["lowered"] is False and "another live process" in clk["error"]
    assert fakegpu.locks(root, 0) == []
    r = subprocess.run([str(build_dir / "bin" / "joulestep-restore"), "--state", str(state),
                        "--sysfs", str(tmp_path), "--gpu-lib", nvml], capture_output=True,
                       text=True, timeout=60, env=fakegpu.env(root))
    assert "1 still held by running processes" in r.stdout
    assert fakegpu.locks(root, 0) == [] and (state / f"gpu-{uuid}").exists()


def test_journal_is_empty_after_a_clean_run(tmp_path, run_exe, nvml):
    root = fakegpu.create(tmp_path / "gpus", n=2)
    run(run_exe, nvml, root, tmp_path, ["begin:checkpoint", "sleep:0.05", "end"],
        extra=["--gpu-io-clock-mhz", "900"])
    assert _journal(tmp_path) == []
    assert all(fakegpu.locks(root, i)[-1][1:] == (0, 0) for i in range(2))


def test_restore_unlocks_gpus_even_when_an_uncore_clock_cannot_be_put_back(tmp_path, nvml,
                                                                          build_dir):
    """joulestep-restore puts back every kind of clock it can: an uncore
    entry that fails (its domain is gone from the sysfs) is reported with
    exit 1, but the GPU a dead process left locked is still unlocked (it
    returned before the GPUs)."""
    root = fakegpu.create(tmp_path / "gpus", n=1)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    uuid = (root / "gpu0" / "uuid").read_text().strip()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (state / f"gpu-{uuid}").write_text(f"{dead.pid} 1\n")
    boot = open("/proc/sys/kernel/random/boot_id").read().strip()
    (state / "uncore-package_00_die_00").write_text(f"{dead.pid} 1 {boot} 800000 2400000\n")
    for p in state.iterdir():
        p.chmod(0o600)
    r = subprocess.run([str(build_dir / "bin" / "joulestep-restore"), "--state", str(state),
                        "--sysfs", str(tmp_path / "no-sysfs"), "--gpu-lib", nvml],
                       capture_output=True, text=True, timeout=60, env=fakegpu.env(root))
    assert r.returncode == 1
    assert "1 uncore clock could not be restored" in r.stderr
    assert "unlocked 1 GPU" in r.stdout, (r.stdout, r.stderr)
    assert fakegpu.locks(root, 0)[-1][1:] == (0, 0)
    assert not (state / f"gpu-{uuid}").exists()
    assert (state / "uncore-package_00_die_00").exists()   # kept for the next try


def test_restore_list_shows_every_kind_of_clock_entry(tmp_path, build_dir):
    """--list shows the whole clock journal: CPU backups, uncore and GPU entries with
    their owners (it showed the CPU backups alone)."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    boot = pathlib.Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    (state / "cpu3.orig").write_text("cpu=3\ngovernor=performance\nmin_khz=800000\n"
                                     f"max_khz=3000000\nsetspeed_khz=0\nboot_id={boot}\n")
    (state / "uncore-package_00_die_00").write_text(f"4242 77 {boot} 800000 2400000\n")
    (state / "gpu-GPU-abc").write_text(f"4343 88 {boot}\n")
    r = subprocess.run([str(build_dir / "bin" / "joulestep-restore"), "--state", str(state),
                        "--list"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "cpu3 governor=performance min_khz=800000 max_khz=3000000" in r.stdout
    assert f"uncore-package_00_die_00: owner pid 4242 (start 77, boot {boot}), saved 800000 2400000" \
        in r.stdout
    assert f"gpu-GPU-abc: owner pid 4343 (start 88, boot {boot})" in r.stdout
    # listing changes nothing
    assert sorted(p.name for p in state.iterdir()) == [
        "cpu3.orig", "gpu-GPU-abc", "lock", "uncore-package_00_die_00"]
