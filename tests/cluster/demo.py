"""`make demo`: joulestep end to end on a real (single-node) Slurm cluster.

Stages: fake RAPL/cpufreq hardware in live mode -> Slurm with the freshly built
SPANK plugin -> a few bundled jobs (tests/cluster/jobs/) -> `joulestep ingest`
and `joulestep report --by tag:strategy` -> teardown. Runs as root on a fresh
machine after `make deps all`; everything lives under /run/joulestep-test/demo-*.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
BUILD = REPO / "build"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "fakehw"))

from harness import Cluster, ClusterError, ensure_user, make_workdir  # noqa: E402

USER = "jsuser"
PLUGIN = BUILD / "spank" / "joulestep.so"
PHASE = BUILD / "bin" / "joulestep-phase"
FAKEHW = REPO / "tests" / "fakehw" / "fakehw.py"
VENV_CLI = REPO / ".venv" / "bin" / "joulestep"
MAX_PKG_UJ = 262143328850  # package zones' max_energy_range_uj in the fake tree

# (job script, job name, policy, strategy tag, extra environment)
JOBS = [
    ("compute.sh", "compute", "monitor", "compute-only", {"JS_SECONDS": "3"}),
    ("checkpoint.sh", "ckpt-base", "monitor", "ckpt-baseline", {}),
    ("checkpoint.sh", "ckpt-dvfs", "io-dvfs", "ckpt-io-dvfs", {}),
]

_stage = 0


def header(title: str):
    global _stage
    _stage += 1
    print(f"\n=== [{_stage}] {title} " + "=" * max(3, 66 - len(title)), flush=True)


def show(res: subprocess.CompletedProcess, label: str):
    print(f"$ {label}  (exit {res.returncode})")
    for stream in (res.stdout, res.stderr):
        if stream and stream.strip():
            print("  " + stream.rstrip().replace("\n", "\n  "))


def start_fakehw(cluster: Cluster, root: pathlib.Path, log: pathlib.Path, throttle: bool) -> subprocess.Popen:
    """Live mode for the cluster; with throttle the jobs run at their fake clock's speed."""
    subprocess.run([sys.executable, str(FAKEHW), "create", str(root)], check=True,
                   stdin=subprocess.DEVNULL)
    try:
        return cluster.serve_fakehw(root, tick_ms=20, throttle=throttle, log=log)
    except Exception as e:
        raise RuntimeError(f"fakehw serve did not start ({e}):\n{log.read_text(errors='replace')}")


def log_line(log: pathlib.Path) -> str:
    """The fakehw daemon's lines (how it serves; a warning when it cannot throttle)."""
    try:
        return "\n  ".join(l for l in log.read_text(errors="replace").splitlines() if l.startswith("fakehw:"))
    except OSError:
        return ""


def package_energy_uj(root: pathlib.Path) -> dict:
    zones = {}
    base = root / "devices" / "virtual" / "powercap" / "intel-rapl"
    for z in sorted(base.glob("intel-rapl:*")):
        zones[(z / "name").read_text().strip()] = int((z / "energy_uj").read_text())
    return zones


def summarize_record(path: pathlib.Path):
    """One line per step and phase, straight from the plugin's JSON record."""
    try:
        rec = json.loads(path.read_text())
        st = rec["step"]
        tags = ",".join(f"{k}={v}" for k, v in (rec.get("job", {}).get("tags") or {}).items())
        print(f"    step {st['step_id']:<6} policy={st.get('policy')} {tags} "
              f"{st['duration_ns'] / 1e9:.2f} s  cpu {st['energy_cpu_uj'] / 1e6:.2f} J  "
              f"dram {st['energy_dram_uj'] / 1e6:.2f} J")
        for ph in rec.get("phases") or []:
            freq = f"{ph['freq_khz'] / 1e6:.1f} GHz" if ph.get("freq_khz") else "base clock"
            print(f"      {'  ' * ph.get('depth', 0)}{ph['kind']}/{ph.get('label') or '-'}: "
                  f"{ph['duration_ns'] / 1e9:.2f} s at {freq}, cpu {ph['energy_cpu_uj'] / 1e6:.2f} J"
                  + (f", {ph['bytes']} bytes" if ph.get("bytes") is not None else ""))
        errors = rec.get("provenance", {}).get("errors") or []
        for e in errors:
            print(f"      error: {e}")
    except (ValueError, KeyError, TypeError, OSError) as e:
        print(f"    (cannot summarize: {e})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="joulestep demo on a private Slurm cluster")
    ap.add_argument("--no-throttle", action="store_true",
                    help="the fake clock costs no time (by default a job's processes run at "
                         "their fake CPU's clock ratio of full speed)")
    opts = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("make demo must run as root (it starts slurmctld, slurmd and munged)", file=sys.stderr)
        return 2
    workdir = make_workdir("demo-")
    dirs = {k: workdir / k for k in ("spool", "state", "sock")}
    for d in dirs.values():
        d.mkdir()
        os.chmod(d, 0o755)
    hw_root = workdir / "fakehw"
    db = workdir / "joulestep.db"
    fakehw = cluster = None
    rc = 0
    try:
        header("Build products")
        for p in (PLUGIN, PHASE, VENV_CLI):
            print(f"  {'found  ' if p.exists() else 'MISSING'} {p.relative_to(REPO)}")
        if not PLUGIN.exists():
            print("  (the jobs run without the plugin: no energy records will be written)")

        header("Fake hardware (live mode, 20 ms ticks)")
        ensure_user(USER)
        args = {"spool": dirs["spool"], "state": dirs["state"], "sysfs": hw_root,
                "socket_dir": dirs["sock"], "cluster": "demo"}
        cluster = Cluster(workdir / "cluster", plugin_so=PLUGIN if PLUGIN.exists() else None,
                          plugstack_args=args)
        fakehw = start_fakehw(cluster, hw_root, workdir / "fakehw.log", not opts.no_throttle)
        print(f"  tree: {hw_root}")
        print("  " + (log_line(workdir / "fakehw.log") or "(no log line)"))
        time.sleep(0.3)
        for name, uj in package_energy_uj(hw_root).items():
            print(f"  {name:<12} energy_uj={uj}")

        header("Slurm cluster (munged, slurmctld, slurmd)")
        cluster.start()
        print(f"  up: SLURM_CONF={cluster.conf}  task plugin {cluster.task_plugin}")
        print("  plugstack.conf: " + (cluster.plugstack.read_text().splitlines()[-1]))
        show(cluster.run(["sinfo"]), "sinfo")

        header("Jobs")
        jobs_dir = cluster.public_path(HERE / "jobs")
        phase = ""
        if PHASE.exists():  # bin/ and lib/ side by side: the tool finds its library via $ORIGIN/../lib
            if (BUILD / "lib").exists():
                cluster.public_path(BUILD / "lib")
            phase = cluster.public_path(BUILD / "bin") / PHASE.name
        last_job = None
        for script, name, policy, strategy, env in JOBS:
            sb_args = [f"--job-name={name}", "-n1", "-c1"]
            if cluster.plugin_so:
                sb_args += [f"--energy-policy={policy}", f"--energy-tag=strategy={strategy}"]
            exports = ",".join(["ALL", f"JS_PHASE={phase}"] + [f"{k}={v}" for k, v in env.items()])
            sb_args.append(f"--export={exports}")
            text = (jobs_dir / script).read_text()
            before = package_energy_uj(hw_root)
            res, job = cluster.sbatch(text, user=USER, args=sb_args)
            label = f"sbatch {' '.join(a for a in sb_args if not a.startswith('--export'))} {script}"
            if job is None:
                show(res, label)
                rc = 1
                continue
            state = cluster.wait_job(job, timeout=180)
            after = package_energy_uj(hw_root)
            joules = sum(after[z] - before[z] + (MAX_PKG_UJ if after[z] < before[z] else 0)
                         for z in after if z.startswith("package")) / 1e6
            applied = "" if cluster.plugin_so else " (no plugin: not applied)"
            print(f"  job {job} {name:<10} policy={policy:<8} strategy={strategy:<14} -> {state}"
                  f"{applied}; fake packages used {joules:.1f} J while it ran")
            try:
                out = cluster.job_output(job)
                print("    " + out.rstrip().replace("\n", "\n    "))
            except (ClusterError, OSError) as e:
                print(f"    (no output: {e})")
            if state != "COMPLETED":
                rc = 1
            last_job = job
        cluster.wait_idle()

        header("Spool records written by the plugin")
        files = sorted(p for p in dirs["spool"].rglob("*") if p.is_file())
        for f in files:
            print(f"  {f.relative_to(dirs['spool'])}  ({f.stat().st_size} bytes)")
            summarize_record(f)
        if not files:
            print("  (none)")

        header("joulestep ingest, report --by tag:strategy, and the last job's summary")
        cli = str(VENV_CLI) if VENV_CLI.exists() else "joulestep"
        steps = [["ingest", str(dirs["spool"])], ["report", "--by", "tag:strategy"]]
        if last_job is not None:
            steps.append(["job", str(last_job)])
        for argv in steps:
            try:
                res = subprocess.run([cli, "--db", str(db), *argv], capture_output=True, text=True,
                                     stdin=subprocess.DEVNULL, timeout=120)
            except OSError as e:
                res = subprocess.CompletedProcess(argv, 127, "", str(e))
            show(res, f"joulestep --db {db.name} {' '.join(argv)}")
            if res.returncode != 0:
                rc = 1
                print("  spool files: " + (", ".join(str(f) for f in files) or "none"))
                break
    except (ClusterError, RuntimeError, subprocess.SubprocessError, OSError) as e:
        print(f"\ndemo failed: {e}", file=sys.stderr)
        rc = 1
    finally:
        header("Teardown")
        if cluster:
            cluster.stop()
            print("  cluster stopped")
        if fakehw:  # cluster.stop() stopped it, after the jobs
            print("  fake hardware stopped")
        print(f"  files kept in {workdir} (database {db.name}, spool/, cluster/log/)")
    print("\ndemo " + ("finished" if rc == 0 else "finished with errors (see above)"))
    return rc


if __name__ == "__main__":
    sys.exit(main())
