#!/usr/bin/env python3
"""`make bench`: print every benchmark figure the issues ask for.

Each figure is a median and p99 beside a baseline measured in the same run,
so ratios mean something on a noisy machine. Benchmarks live here, never in
timed tests. Sections run in turn; one that fails is reported and the others
still run (the exit status is then non-zero).
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
BUILD = REPO / "build"
sys.path.insert(0, str(REPO / "tests" / "fakehw"))


def header(title):
    print(f"\n=== {title} " + "=" * max(0, 70 - len(title)), flush=True)


REAL_SYSFS = "/sys/devices/system/cpu/online"   # a real sysfs file, for scale


def zone_reads():
    """Issue 2: cost of one full reading of all zones, per backend."""
    import fakehw  # noqa: E402  (stdlib-only simulator)

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="js-bench-"))
    try:
        root = tmp / "sys"
        fakehw.create(str(root), variant="acpi")
        base = root / "devices/virtual/powercap/intel-rapl/intel-rapl:0/energy_uj"
        exe = str(BUILD / "bench" / "bench_read")
        iters = os.environ.get("JOULESTEP_BENCH_ITERS", "200000")
        subprocess.run([exe, "--sysfs", str(root), "--backend", "sysfs",
                        "--iters", iters, "--baseline", str(base)]
                       + (["--baseline", REAL_SYSFS] if os.path.exists(REAL_SYSFS) else []),
                       check=True)
        # libpowercap reads only /sys/class/powercap: serve the fake tree
        # there in a private mount namespace.
        subprocess.run([sys.executable, str(REPO / "tests/fakehw/fakehw.py"), "nsexec",
                        str(root), "--", exe, "--backend", "powercap", "--iters", iters,
                        "--baseline", "/sys/class/powercap/intel-rapl/intel-rapl:0/energy_uj"],
                       check=True)
        subprocess.run([exe, "--sysfs", str(root), "--backend", "papi", "--iters", "100"],
                       check=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def clock_change():
    """Issue 8: one clock change of 128 CPUs on a 128-CPU fake tree (goal <= 1 ms),
    beside the bare pwrite of the same files."""
    import fakehw  # noqa: E402

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="js-bench-"))
    try:
        root = tmp / "sys"
        fakehw.create(str(root), variant="acpi", packages=2, cpus_per_package=64)
        iters = os.environ.get("JOULESTEP_BENCH_FREQ_ITERS", "2000")
        subprocess.run([str(BUILD / "bench" / "bench_read"), "--sysfs", str(root), "--cpufreq",
                        "--iters", iters], check=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def gpu():
    """Issue 26: one reading of all GPUs through the NVML backend beside the bare calls,
    on the NVML stand-in; and marker -> GPU clock locked latency through joulestep-run
    (goal p99 <= 1 ms), beside the bare lock call."""
    import fakegpu  # noqa: E402

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="js-bench-gpu-"))
    try:
        root = fakegpu.create(tmp / "gpus", n=4)
        lib = str(BUILD / "tests" / "fakehw" / "libnvidia-ml.so.1")
        subprocess.run([str(BUILD / "bench" / "bench_gpu"), "--nvml", lib, "--iters",
                        os.environ.get("JOULESTEP_BENCH_GPU_ITERS", "2000")],
                       check=True, env=fakegpu.env(root))
        one = fakegpu.create(tmp / "one", n=1)
        out = tmp / "marks.json"
        n = int(os.environ.get("JOULESTEP_BENCH_GPU_MARKERS", "300"))
        job = [sys.executable, str(REPO / "tests" / "run" / "gpu_job.py"), str(one), str(out)]
        # a marker every 20 ms: each reading waits for the counter's next update (~10 ms)
        steps = ["begin:checkpoint", "sleep:0.02", "end", "sleep:0.02"] * n
        subprocess.run([str(BUILD / "bin" / "joulestep-run"), "--sysfs", str(tmp), "--gpus",
                        "--gpu-lib", lib, "--phases", "--json", "--gpu-io-clock-mhz", "900", "--",
                        *job, *steps], check=True, env=fakegpu.env(one),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import json
        begins = [t for verb, _a, t in json.loads(out.read_text())["markers"] if verb == "begin"]
        locks = [t for t, _lo, hi in fakegpu.locks(one, 0) if hi > 0]
        lat = sorted((lk - b) / 1e3 for b, lk in zip(begins, locks))
        print(f"{'marker -> GPU clock locked (joulestep-run, ' + str(len(lat)) + ' markers)':<58} "
              f"median {lat[len(lat) // 2]:9.1f} us  p99 {lat[int(len(lat) * 0.99)]:9.1f} us"
              f"  goal p99 <= 1000 us: {'met' if lat[int(len(lat) * 0.99)] <= 1000 else 'MISSED'}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def phase_bookkeeping():
    """Issue 23 (defect 7): one phase BEGIN+END in the plugin's bookkeeping at 10,
    10,000 and 100,000 phases in one step, beside the cost at 10 phases (goal: flat,
    within 1.5x)."""
    subprocess.run([str(BUILD / "bench" / "bench_phase"), "10", "10000", "100000"], check=True)


def python_bench(name):
    script = REPO / "bench" / name
    if not script.exists():
        print(f"{name}: not present")
        return
    subprocess.run([sys.executable, str(script)], check=True)


def main():
    failed = []
    sections = [
        ("accounting: one reading of all RAPL zones (goal: sysfs <= 2 us/zone)", zone_reads),
        ("accounting: one clock change of 128 CPUs (goal <= 1 ms)", clock_change),
        ("GPUs: one reading of all GPUs, marker -> GPU clock (goal p99 <= 1 ms)", gpu),
        ("SPANK plugin: phase BEGIN+END vs phases in the step (goal: flat, within 1.5x of 10 phases)",
         phase_bookkeeping),
        ("SPANK plugin (goals: step launch median <= 1.02x with the gap resolved; marker cost "
         "<= 2x a send to another process; marker -> clock written p99 <= 1 ms over >= 1,000 markers)",
         lambda: python_bench("bench_plugin.py")),
        ("CLI (goals: ingest >= 2,000 records/s in one process, SQLite and PostgreSQL; "
         "three PostgreSQL ingesters at once >= 2x one)", lambda: python_bench("bench_cli.py")),
        ("CLI: `joulestep job JOBID` and `joulestep jobs` vs seff and sacct -j on the same job, "
         "slurmdbd cluster (goal: no slower than seff)", lambda: python_bench("bench_jobcmd.py")),
        ("--energy-hooks: cost per intercepted call vs the bare call (issue 10)",
         lambda: python_bench("hooks/bench_hooks.py")),
        ("policy quality: auto vs a sweep oracle and io-dvfs on the time-faithful simulator "
         "(goals: >= 90 % of the oracle's saving per kind, no settled kind slower than the "
         "5 % bound)", lambda: python_bench("bench_policy.py")),
    ]
    for title, fn in sections:
        header(title)
        try:
            fn()
        except Exception as exc:  # report and go on with the other figures
            print(f"FAILED: {exc}")
            failed.append(title)
    if failed:
        print("\nfailed sections: " + "; ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
