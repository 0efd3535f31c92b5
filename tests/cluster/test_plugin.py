"""The joulestep SPANK plugin on the live Slurm cluster, with fake RAPL/cpufreq in manual mode.

Every job advances the fake hardware itself (`fakehw.py ctl SOCK advance S --util 1`) inside
its phases, so the ground truth of a phase is the sum of the advance replies printed inside it
("ADV <tag> <json>" lines in the job output). Nothing else moves the counters. Jobs run as the
unprivileged user jsuser.
"""
from __future__ import annotations

import json
import os
import pathlib
import pwd
import re
import shutil
import signal
import subprocess
import time

import pytest

from harness import plugin_for_slurm, slurm_version
from nodeenv import NodeEnv
from procs import cmdline, expand_cpus, freq_lines, job_pids, stepd_pid, wait_file

pytestmark = pytest.mark.cluster

FMAX = 4000000  # 0.875·fmax and 0.85·fmax fall on the acpi 100 MHz steps
GOV = "schedutil"  # the fake acpi tree's governor: never changed, clocks are capped (scaling_max_freq)
FMIN = 800000
USER = "jsuser"
REPO = pathlib.Path(__file__).resolve().parents[2]


class PluginEnv(NodeEnv):
    """Fake hardware + plugin configuration for the session cluster; slurmd restarted
    so that the plugin's job prolog and epilog run."""

    def __init__(self, cluster, repo: pathlib.Path, build: pathlib.Path):
        super().__init__(cluster, build, "jsplug", FMAX, FMIN)
        self.cli_src = cluster.public_path(repo / "cli" / "src")
        self.configure()
        # slurmd looks for the plugins' job prolog and epilog only at start; the prolog
        # gives every step its trusted job fields (account, partition, cluster)
        self.c.restart_slurmd()
        self.snapshot_clocks()

    def close(self):
        super().close()
        self.c.write_plugstack(None)
        self.c.restart_slurmd()


def adv_truth(out: str) -> dict:
    """tag -> (cpu_uj, dram_uj) summed over the ADV lines with that tag; '*' = all."""
    tot = {}
    for m in re.finditer(r"^ADV (\S+) (\{.*\})$", out, re.M):
        r = json.loads(m.group(2))
        for tag in (m.group(1), "*"):
            c, d = tot.get(tag, (0, 0))
            tot[tag] = (c + r["energy_cpu_uj"], d + r["energy_dram_uj"])
    return tot


def close(measured, truth, rel=0.005):
    return abs(measured - truth) <= rel * truth


@pytest.fixture(scope="module")
def js(cluster, repo, build_dir):
    env = PluginEnv(cluster, repo, build_dir)
    try:
        yield env
    finally:
        env.close()


@pytest.fixture
def plug(js):
    js.configure()
    js.c.wait_idle()
    yield js
    js.c.wait_idle()
    js.assert_restored()


def queued_jobs(c, user=USER):
    return c.run(["squeue", "-h", "-u", user, "-o", "%i"]).stdout.split()


# ------------------------------------------------------------------ options
@pytest.mark.parametrize("opt, msg", [
    ("--energy-policy=turbo", "unknown policy 'turbo'"),
    ("--energy-policy=fixed:0.3", "below the minimum ratio 0.5"),
    ("--energy-policy=fixed:1.5", "R must be a number in (0, 1]"),
    ("--energy-policy=phase:write", "is not KIND=R"),
    ("--energy-tag=strategy=ve;loc", "allowed: KEY=VALUE"),
    ("--energy-tag=nokey", "allowed: KEY=VALUE"),
])
def test_bad_sbatch_option_is_refused_and_not_queued(plug, opt, msg):
    before = queued_jobs(plug.c)
    res, job = plug.c.sbatch(f"#!/bin/sh\n#SBATCH {opt}\ntrue\n", user=USER)
    assert res.returncode != 0 and job is None
    assert msg in res.stderr and "allowed" in res.stderr, res.stderr
    assert queued_jobs(plug.c) == before
    # same on the command line, for srun and salloc
    res = plug.c.srun([opt, "true"], user=USER)
    assert res.returncode != 0 and msg in res.stderr
    res = plug.c.run(["salloc", opt, "true"], user=USER, timeout=30)
    assert res.returncode != 0 and msg in res.stderr


def test_policy_not_allowed_by_admin_is_refused(plug):
    plug.configure(policies="monitor,io-dvfs")
    res, job = plug.c.sbatch("#!/bin/sh\n#SBATCH --energy-policy=fixed:0.8\ntrue\n", user=USER)
    assert res.returncode != 0 and job is None
    assert "not allowed on this cluster (allowed: monitor, io-dvfs)" in res.stderr


def test_env_option_forms(plug):
    env_name = "SLURM_SPANK__SLURM_SPANK_OPTION_joulestep_energy_policy"
    res = plug.c.run(["env", f"{env_name}=turbo", "srun", "true"], user=USER)
    assert res.returncode != 0 and "unknown policy 'turbo'" in res.stderr
    res = plug.c.run(["env", f"{env_name}=fixed:0.75",
                      "SLURM_SPANK__SLURM_SPANK_OPTION_joulestep_energy_tag=io=dc,k=1",
                      "srun", "-n1", "sh", "-c", 'echo JOB $SLURM_JOB_ID; ' + plug.cat_freq("in")],
                     user=USER)
    assert res.returncode == 0, res.stderr
    job = re.search(r"^JOB (\d+)$", res.stdout, re.M).group(1)
    rec = plug.wait_records(job, ["0"])["0"]
    assert rec["step"]["policy"] == "fixed:0.75"
    assert rec["job"]["tags"] == {"io": "dc", "k": "1"}
    fl = freq_lines(res.stdout)["in"]
    for cpu in expand_cpus(rec["step"]["cpus"]):
        assert fl[cpu] == (GOV, str(int(0.75 * FMAX)))


@pytest.mark.site
def test_unknown_plugstack_key_disables_plugin_but_jobs_run(plug):
    plug.configure(colour="blue")
    job, out = plug.run_job("#!/bin/sh\necho ok\n")
    assert "ok" in out
    time.sleep(1)
    assert plug.records(job) == {}
    res = plug.c.sbatch("#!/bin/sh\ntrue\n", user=USER, args=["--energy-policy=monitor"])[0]
    assert res.returncode != 0
    assert "joulestep: plugstack.conf: unknown key 'colour'" in res.stderr


@pytest.mark.site
def test_failing_init_of_a_required_plugin_is_the_nodes_fault(plug):
    """joulestep leaves slurm_spank_init_failure_mode (Slurm 26.05) unset: its
    init fails only on a broken plugstack line, the same for every job on the node,
    so a site that made it `required` gets Slurm's default, the node's fault (the
    node drained, the job requeued), never ESPANK_JOB_FAILURE's (each job sent
    there failed, the node taking the next one). The line is broken after
    submission, as on a node whose plugstack.conf differs from the submit host's."""
    so = plugin_for_slurm(plug.so)
    syms = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True,
                          text=True, check=True).stdout
    assert "slurm_spank_init" in syms and "slurm_spank_init_failure_mode" not in syms
    ran = plug.c.user_dir(USER) / "required-ran"
    ran.unlink(missing_ok=True)
    plug.c.write_plugstack(plug.so, plug.args(), required=True)
    res, job = plug.c.sbatch(f"#!/bin/sh\ntouch {ran}\n", user=USER, args=["--hold"])
    assert res.returncode == 0, res.stderr
    try:
        plug.c.write_plugstack(plug.so, plug.args(colour="blue"), required=True)
        plug.c.run(["scontrol", "release", job], check=True)
        deadline = time.monotonic() + 90
        while "DRAIN" not in plug.c.node_state() and time.monotonic() < deadline:
            time.sleep(0.5)
        info = plug.c.job_info(job)
        assert "DRAIN" in plug.c.node_state(), (info, plug.c.logs())
        # the job's script never ran, and Slurm does not call it the job's
        # failure: 22.05 ends the job COMPLETED (exit 0), 26.05 requeues it
        # (docs/design.md, "Slurm 22.05 and 26.05")
        assert not ran.exists(), info
        assert info.get("JobState") == ("COMPLETED" if slurm_version().startswith("22.")
                                        else "PENDING"), info
        print("required plugin, failing init:", plug.c.node_state(), info.get("JobState"),
              info.get("ExitCode"), info.get("Reason"))
    finally:
        plug.c.scancel(job)
        plug.configure()
        plug.c.run(["scontrol", "update", f"NodeName={plug.c.node}", "State=RESUME"])
        plug.c.wait_idle(60)


@pytest.mark.site
def test_a_plugin_built_for_another_slurm_is_refused_and_jobs_run(plug, build_dir):
    """A SPANK plugin is built for one Slurm release (its plugin_version): the
    other Slurm's build (make slurm-latest's under Debian's Slurm, the default
    build under the current Slurm) is refused at load, by sbatch and by
    slurmstepd, and with the `optional` line the job runs, unmeasured."""
    import harness
    other = (build_dir / "spank" / "joulestep.so" if harness.SLURM_PREFIX
             else build_dir / "slurm-latest" / "joulestep" / "joulestep.so")
    if not other.exists():
        pytest.skip(f"{other} not built (make slurm-latest)")
    copy = plug.root / "other-slurm" / "joulestep-other.so"
    copy.parent.mkdir(mode=0o755, exist_ok=True)
    shutil.copy2(other, copy)
    plug.c.write_plugstack(copy, plug.args())
    ran = plug.c.user_dir(USER) / "other-ran"
    ran.unlink(missing_ok=True)
    try:
        res, job = plug.c.sbatch(f"#!/bin/sh\ntouch {ran}\n", user=USER)
        assert res.returncode == 0 and job, res.stderr
        assert "Incompatible Slurm plugin" in res.stderr, res.stderr
        assert plug.c.wait_job(job) == "COMPLETED" and ran.exists()
        time.sleep(1)
        assert plug.records(job) == {}
        logs = "".join(f.read_text(errors="replace") for f in plug.c.log_dir.glob("slurmd*.log"))
        assert f"Incompatible Slurm plugin {plug.c.public_path(copy)}" in logs
    finally:
        plug.configure()


# ------------------------------------------------------------------ records
@pytest.mark.site
def test_batch_and_srun_steps_recorded_with_truth(plug):
    script = f"""#!/bin/sh
#SBATCH -n1 --job-name=recs
#SBATCH --energy-tag=strategy=genericio
{plug.adv("batch", 2)}
srun -n1 sh -c '{plug.adv("step0", 3)}'
"""
    job, out = plug.run_job(script)
    recs = plug.wait_records(job, ["batch", "0"])
    truth = adv_truth(out)
    b, s0 = recs["batch"], recs["0"]
    for r in (b, s0):
        assert r["format"] == "joulestep-record" and r["version"] == 4
        assert "exclusive" not in r["step"]   # dropped in version 4
        assert r["step"]["dram_not_measured"] is None   # the Intel tree has dram zones
        # no GPU on this node: none measured, the total is CPU + DRAM
        assert r["gpus"] == [] and r["step"]["energy_gpu_uj"] is None
        assert r["step"]["total_includes"] == "cpu+dram"
        assert r["cluster"] == "jstest"
        assert r["job"]["user"] == USER and r["job"]["uid"] == pwd.getpwnam(USER).pw_uid
        assert r["job"]["tags"] == {"strategy": "genericio"}
        assert r["job"]["name"] is None  # no trusted source on the node
        assert r["job"]["partition"] == "debug"  # slurmd's, through the job prolog
        assert r["job"]["submit_time_ns"] is None
        assert r["provenance"]["job_source"] == "prolog"
        assert r["job"]["first_seen_ns"] <= r["step"]["start_ns"]
        assert r["step"]["policy"] == "monitor"
        assert r["step"]["node"] == plug.c.node
        assert r["provenance"]["backend"] == "sysfs"
        assert r["provenance"]["errors"] == []
        assert r["provenance"]["wrap_uncertain"] is False
        assert r["step"]["ncpus"] >= 1
        assert r["step"]["exit_code"] == 0
    # the same job key on every step of the node
    assert b["job"]["first_seen_ns"] == s0["job"]["first_seen_ns"]
    # the batch step saw every advance; the srun step only its own
    assert close(b["step"]["energy_cpu_uj"], truth["*"][0])
    assert close(b["step"]["energy_dram_uj"], truth["*"][1])
    assert close(s0["step"]["energy_cpu_uj"], truth["step0"][0])
    assert close(s0["step"]["energy_dram_uj"], truth["step0"][1])
    assert s0["step"]["energy_total_uj"] == s0["step"]["energy_cpu_uj"] + s0["step"]["energy_dram_uj"]
    zsum = sum(z["energy_uj"] for z in s0["zones"])
    assert zsum == s0["step"]["energy_total_uj"]
    # the shared-node inputs (issue 24 part 1): every fake CPU was busy through
    # each advance (util 1), so each package's busy time over a step is its
    # advances' seconds x the package's CPUs, from the tree's proc/stat (procfs=)
    per_pkg = plug.ncpus // 2
    for r, secs in ((s0, 3), (b, 5)):
        pk = r["packages"]
        assert sorted(p["package"] for p in pk) == sorted({p["package"] for p in pk})
        assert all(p["cpus"] == per_pkg and 1 <= p["step_cpus"] <= per_pkg for p in pk)
        assert sum(p["step_cpus"] for p in pk) == r["step"]["ncpus"]
        for p in pk:
            assert p["busy_ns"] == p["total_ns"] == secs * per_pkg * 1_000_000_000, p
        # the task's CPU time (sh, python3 fakehw ctl): some, less than its wall time
        assert 0 < r["step"]["cpu_time_ns"] < r["step"]["duration_ns"] * r["step"]["ncpus"]
    # record files are complete JSON only (no tmp leftovers), each with its user's
    # summary (docs/security.md), root-owned dirs
    d = plug.spool / "jstest" / job
    assert all(p.suffix in (".json", ".summary") for p in d.iterdir())
    assert os.stat(d).st_uid == 0 and not os.stat(d).st_mode & 0o022


# ------------------------------------------------------------------ phases: clients
C_PROG = r"""
#include <stdio.h>
#include <stdlib.h>
#include <joulestep/client.h>
int main(int argc, char **argv) {
    int rc = js_phase_begin("compress", "c-lib");
    printf("C begin %d\n", rc); fflush(stdout);
    if (system(argv[1]) != 0) return 3;
    rc = js_phase_end(4096);
    printf("C end %d\n", rc);
    return rc == 0 ? 0 : 4;
}
"""


@pytest.mark.site
def test_phases_from_c_shell_and_python_match_truth(plug, tmp_path):
    src = plug.root / "phase_c.c"
    src.write_text(C_PROG)
    exe = plug.root / "phase_c"
    subprocess.run(["cc", "-std=c11", f"-I{REPO / 'spank' / 'client'}", str(src),
                    "-o", str(exe), f"-L{plug.build / 'lib'}", "-ljoulestep-client",
                    f"-Wl,-rpath,{plug.build / 'lib'}"], check=True)
    os.chmod(exe, 0o755)
    py = (f"import sys; sys.path.insert(0, '{plug.cli_src}'); import joulestep.phase as jsp, subprocess\n"
          f"with jsp.phase('write', 'py-lib', nbytes=8192):\n"
          f"    subprocess.run({plug.adv('python', 2)!r}, shell=True, check=True)\n")
    (plug.root / "phase_py.py").write_text(py)
    script = f"""#!/bin/sh
#SBATCH -n1
export JOULESTEP_SYNC=1
{plug.phase("begin", "checkpoint", "shell-ckpt")}
{plug.adv("shell", 1)}
{plug.phase("end", "--bytes", 123)}
{exe} '{plug.adv("c", 1.5)}'
python3 {plug.root / "phase_py.py"}
{plug.phase("begin", "restart")}
{plug.adv("restart", 0.5)}
{plug.phase("end")}
"""
    job, out = plug.run_job(script)
    assert "C begin 0" in out and "C end 0" in out, out
    rec = plug.wait_records(job, ["batch"])["batch"]
    truth = adv_truth(out)
    ph = rec["phases"]
    assert [(p["kind"], p["label"], p["bytes"]) for p in ph] == [
        ("checkpoint", "shell-ckpt", 123), ("compress", "c-lib", 4096),
        ("write", "py-lib", 8192), ("restart", None, None)]
    for p, tag in zip(ph, ("shell", "c", "python", "restart")):
        assert close(p["energy_cpu_uj"], truth[tag][0]), (tag, p, truth[tag])
        assert close(p["energy_dram_uj"], truth[tag][1]), (tag, p, truth[tag])
        assert p["freq_khz"] is None  # monitor
        assert p["nranks"] == 1 and p["ranks"][0]["rank"] == 0
        assert p["depth"] == 0 and p["parent_seq"] is None
        assert rec["step"]["start_ns"] <= p["start_ns"] < p["end_ns"] <= rec["step"]["end_ns"]
    assert close(rec["step"]["energy_cpu_uj"], truth["*"][0])


def test_done_when_io_dvfs_veloc(plug):
    """The issue's acceptance scenario."""
    script = f"""#!/bin/sh
#SBATCH -n1
#SBATCH --energy-policy=io-dvfs
#SBATCH --energy-tag=strategy=veloc
{plug.cat_freq("before")}
{plug.adv("compute", 1)}
{plug.phase("begin", "checkpoint", "ckpt-1")}
{plug.adv("ckpt", 0.5)}
{plug.phase("begin", "compress")}
{plug.cat_freq("compress")}
{plug.adv("compress", 2)}
{plug.phase("end", "--bytes", 1000)}
{plug.cat_freq("between")}
{plug.phase("begin", "write")}
{plug.cat_freq("write")}
{plug.adv("write", 2)}
{plug.phase("end", "--bytes", 500)}
{plug.phase("end")}
{plug.cat_freq("after")}
"""
    job, out = plug.run_job(script)
    rec = plug.wait_records(job, ["batch"])["batch"]
    truth = adv_truth(out)
    fl = freq_lines(out)
    cpus = sorted(int(c) for c in expand_cpus(rec["step"]["cpus"]))
    others = [i for i in range(plug.ncpus) if i not in cpus]
    orig = {i: (plug.orig[i]["scaling_governor"], str(plug.orig[i]["scaling_max_freq"]))
            for i in range(plug.ncpus)}
    for cpu in cpus:
        assert fl["compress"][cpu] == (GOV, str(int(0.875 * FMAX)))
        assert fl["write"][cpu] == (GOV, str(int(0.85 * FMAX)))
        assert fl["between"][cpu] == orig[cpu]   # back to the original settings
        assert fl["after"][cpu] == orig[cpu]
        assert fl["before"][cpu][0] == orig[cpu][0]
    for cpu in others:  # never touch CPUs outside the step
        for tag in ("compress", "write", "between", "after"):
            assert fl[tag][cpu] == fl["before"][cpu]
    assert rec["job"]["tags"] == {"strategy": "veloc"}
    assert rec["step"]["policy"] == "io-dvfs"
    assert rec["step"]["base_freq_khz"] == FMAX
    ph = {p["kind"]: p for p in rec["phases"]}
    assert ph["checkpoint"]["freq_khz"] is None
    assert ph["compress"]["freq_khz"] == int(0.875 * FMAX)
    assert ph["write"]["freq_khz"] == int(0.85 * FMAX)
    assert ph["compress"]["parent_seq"] == ph["checkpoint"]["seq"] == ph["write"]["parent_seq"]
    assert ph["compress"]["depth"] == 1
    assert ph["compress"]["freq_change_ns"] > 0
    assert ph["compress"]["bytes"] == 1000 and ph["write"]["bytes"] == 500
    for kind, tags in (("compress", ["compress"]), ("write", ["write"]),
                       ("checkpoint", ["ckpt", "compress", "write"])):
        t_cpu = sum(truth[t][0] for t in tags)
        t_dram = sum(truth[t][1] for t in tags)
        assert close(ph[kind]["energy_cpu_uj"], t_cpu), (kind, ph[kind], t_cpu)
        assert close(ph[kind]["energy_dram_uj"], t_dram)
    assert close(rec["step"]["energy_cpu_uj"], truth["*"][0])
    assert close(rec["step"]["energy_dram_uj"], truth["*"][1])
    # lower clocks really cost less per second in the model: compress at 0.875 fmax
    assert truth["compress"][0] / 2 < truth["compute"][0] / 1


def test_ckpt_dvfs_and_fixed(plug):
    script = f"""#!/bin/sh
#SBATCH -n1
{plug.phase("begin", "checkpoint")}
{plug.cat_freq("ckpt")}
{plug.adv("ckpt", 1)}
{plug.phase("end")}
{plug.phase("begin", "flush")}
{plug.cat_freq("flush")}
{plug.phase("end")}
"""
    job, out = plug.run_job(script, args=["--energy-policy=ckpt-dvfs"])
    rec = plug.wait_records(job, ["batch"])["batch"]
    fl = freq_lines(out)
    cpus = expand_cpus(rec["step"]["cpus"])
    for cpu in cpus:
        assert fl["ckpt"][cpu] == (GOV, str(int(0.5 * FMAX)))  # min_ratio·fmax >= fmin
        assert fl["flush"][cpu] == (GOV, str(FMAX))              # never throttled
    ph = rec["phases"]
    assert ph[0]["freq_khz"] == int(0.5 * FMAX) and ph[1]["freq_khz"] is None
    plug.c.wait_idle()
    plug.assert_restored()

    # a stricter admin floor wins over the policy: ckpt at min_ratio=0.75
    plug.configure(min_ratio=0.75)
    job, out = plug.run_job(script, args=["--energy-policy=ckpt-dvfs"])
    fl = freq_lines(out)
    for cpu in expand_cpus(plug.wait_records(job, ["batch"])["batch"]["step"]["cpus"]):
        assert fl["ckpt"][cpu] == (GOV, str(int(0.75 * FMAX)))
    plug.c.wait_idle()
    plug.assert_restored()
    plug.configure()

    script = f"""#!/bin/sh
#SBATCH -n1
{plug.cat_freq("start")}
{plug.adv("all", 1)}
"""
    job, out = plug.run_job(script, args=["--energy-policy=fixed:0.6"])
    rec = plug.wait_records(job, ["batch"])["batch"]
    assert rec["step"]["base_freq_khz"] == FMAX          # the original clock (issue 8, defect 9)
    assert rec["step"]["fixed_freq_khz"] == int(0.6 * FMAX)
    for cpu in expand_cpus(rec["step"]["cpus"]):
        assert freq_lines(out)["start"][cpu] == (GOV, str(int(0.6 * FMAX)))


# ------------------------------------------------------------------ security
def _job_with_socket(plug, name, max_wait_ticks=600):
    """Start a batch job as USER that publishes its JOULESTEP_SOCKET and waits
    (up to max_wait_ticks x 0.1 s) until <name>.done appears. Returns
    (job, socket path, done flag)."""
    flag = plug.c.user_dir(USER) / name
    done = plug.c.user_dir(USER) / f"{name}.done"
    flag.unlink(missing_ok=True)
    done.unlink(missing_ok=True)
    script = f"""#!/bin/sh
#SBATCH -n1
echo "$JOULESTEP_SOCKET" > {flag}.tmp && mv {flag}.tmp {flag}
i=0; while [ ! -e {done} ] && [ $i -lt {max_wait_ticks} ]; do sleep 0.1; i=$((i+1)); done
"""
    res, job = plug.c.sbatch(script, user=USER)
    assert res.returncode == 0, res.stderr
    wait_file(flag)
    return job, flag.read_text().strip(), done


def test_other_user_cannot_connect(plug):
    job, path, done = _job_with_socket(plug, "sockpath")
    try:
        assert path.startswith(str(plug.sock) + "/") and path.endswith(f"{job}.batch.sock")
        st = os.stat(plug.sock)
        assert st.st_uid == 0 and not st.st_mode & 0o022
        probe = ("import socket,sys; s=socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); "
                 "s.settimeout(5); s.connect(sys.argv[1])\n"
                 "try: s.send(b'JS1 PING id=1 sync')\n"
                 "except OSError as e: print('send failed', e.errno)\n"
                 "print(s.recv(300).decode())")
        other = plug.c.run(["python3", "-c", probe, path], user="jsother")
        assert "JS1 ERR 13" in other.stdout and "permission denied" in other.stdout, other
        # the job's user, but not a process of the step (test_plugin_markers.py)
        mine = plug.c.run(["python3", "-c", probe, path], user=USER)
        assert "JS1 ERR 13" in mine.stdout, mine
        root = plug.c.run(["python3", "-c", probe, path])
        assert root.stdout.startswith("JS1 OK id=1 PONG")
        # malformed and oversized messages get an error reply; the step goes on
        # (sent as root: the only peer outside the step that is accepted)
        bad = plug.c.run(["python3", "-c",
                          "import socket,sys; s=socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET);"
                          "s.settimeout(5); s.connect(sys.argv[1]);"
                          "s.send(b'JS1 BEGIN Bad$ id=2 sync'); print(s.recv(300).decode());"
                          "s.send(b'x'*1000); print(s.recv(300).decode());"
                          "s.send(b'JS9 BEGIN write'); print(s.recv(300).decode());"
                          "s.send(b'JS1 END id=3 sync'); print(s.recv(300).decode())", path])
        lines = bad.stdout.splitlines()
        assert lines[0].startswith("JS1 ERR 22 id=2"), lines
        assert lines[1].startswith("JS1 ERR 90"), lines
        assert lines[2].startswith("JS1 ERR 71"), lines
        assert lines[3].startswith("JS1 ERR 2 id=3 no open phase"), lines
    finally:
        done.touch()
    assert plug.c.wait_job(job) == "COMPLETED"
    rec = plug.wait_records(job, ["batch"])["batch"]
    assert rec["provenance"]["markers_rejected"] == 4
    assert rec["phases"] == []
    assert not pathlib.Path(path).exists()  # socket removed at step end


def test_hostile_markers_are_bounded(plug):
    """Untrusted input cannot grow the step's state without bound or flood the
    log: at most 4096 distinct ranks (ERR 87 after), byte sums saturate at
    2^63-1, and only the first 16 refused connections of a step are logged."""
    plug.configure(rate=1000000)  # the bounds, not the rate limit, are under test
    job, path, done = _job_with_socket(plug, "hostile", max_wait_ticks=1200)
    try:
        refuse = ("import socket,sys\n"
                  "for i in range(20):\n"
                  "    s=socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.settimeout(5)\n"
                  "    s.connect(sys.argv[1]); print(s.recv(300).decode()); s.close()")
        other = plug.c.run(["python3", "-c", refuse, path], user="jsother")
        assert other.stdout.count("JS1 ERR 13") == 20, other
        flood = ("import socket,sys; s=socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET);"
                 "s.settimeout(30); s.connect(sys.argv[1])\n"
                 "def upto(i):\n"
                 "    while True:\n"
                 "        m = s.recv(300).decode(); print(m)\n"
                 "        if f' id={i} ' in m: return\n"
                 "for r in range(4100): s.send(b'JS1 BEGIN write - rank=%d' % r)\n"
                 "s.send(b'JS1 BEGIN write - rank=999999 id=1 sync'); upto(1)\n"
                 "for r in (0, 1): s.send(b'JS1 END bytes=9223372036854775807 rank=%d' % r)\n"
                 "s.send(b'JS1 PING id=2 sync'); upto(2)")
        # as root: the only peer outside the step that is accepted
        out = plug.c.run(["python3", "-c", flood, path]).stdout.splitlines()
        # the 4 async BEGINs past the bound got ERR 87 without an id, then ours
        assert out[:4] == ["JS1 ERR 87 more than 4096 distinct ranks in this step"] * 4, out
        assert out[4].startswith("JS1 ERR 87 id=1 more than 4096 distinct ranks"), out
        assert out[5].startswith("JS1 OK id=2 PONG"), out
    finally:
        done.touch()
    assert plug.c.wait_job(job) == "COMPLETED"
    rec = plug.wait_records(job, ["batch"])["batch"]
    assert len(rec["phases"]) == 1
    ph = rec["phases"][0]
    assert ph["nranks"] == 4096 and len(ph["ranks"]) == 4096
    assert ph["bytes"] == 2**63 - 1
    assert rec["provenance"]["markers_rejected"] == 5
    logged = []
    for f in plug.c.log_dir.glob("*"):
        logged += [l for l in f.read_text(errors="replace").splitlines()
                   if f"job {job} step batch: refused phase connection" in l]
    # the daemon may log to both its .log and .stdout: count distinct lines per file
    per_file = {}
    for f in plug.c.log_dir.glob("*"):
        n = sum(f"job {job} step batch: refused phase connection" in l
                for l in f.read_text(errors="replace").splitlines())
        if n:
            per_file[f.name] = n
    assert per_file and set(per_file.values()) == {16}, per_file
    assert any("further refusals in this step are not logged" in l for l in logged)


def test_no_fd_leaks_into_tasks(plug):
    script = f"""#!/bin/sh
#SBATCH -n1
for f in /proc/$$/fd/*; do echo "FD $f $(readlink $f)"; done
srun -n1 sh -c 'for f in /proc/$$/fd/*; do echo "FD $f $(readlink $f)"; done'
"""
    job, out = plug.run_job(script)
    fds = re.findall(r"^FD (\S+) (.*)$", out, re.M)
    assert len(fds) >= 6, out
    for fd, target in fds:
        assert not any(x in target for x in ("jsplug", "socket:", "anon_inode", "powercap",
                                                "cpufreq", "/spool/joulestep")), (fd, target)


# ------------------------------------------------------------------ failure behaviour
def _in_write_phase_script(plug, flag):
    return f"""#!/bin/sh
#SBATCH -n1
#SBATCH --energy-policy=io-dvfs
{plug.phase("begin", "write")}
touch {flag}
sleep 300
"""


def test_scancel_in_a_phase_restores_the_clock(plug):
    flag = plug.c.user_dir(USER) / "in-phase"
    flag.unlink(missing_ok=True)
    res, job = plug.c.sbatch(_in_write_phase_script(plug, flag), user=USER)
    assert res.returncode == 0
    wait_file(flag)
    changed = [i for i in range(plug.ncpus) if plug.cpufreq(i)["effective_khz"] == int(0.85 * FMAX)]
    assert len(changed) == 1
    plug.c.scancel(job)
    assert plug.c.wait_job(job) == "CANCELLED"
    rec = plug.wait_records(job, ["batch"])["batch"]
    plug.assert_restored()
    assert rec["phases"][0]["kind"] == "write" and rec["phases"][0]["open_at_step_end"] is True
    assert rec["phases"][0]["freq_khz"] == int(0.85 * FMAX)


def test_task_crash_in_a_phase_restores_the_clock(plug):
    """The task dies of SIGSEGV inside a write phase: the step ends, the
    record says the phase was still open, and the clock is back."""
    flag = plug.c.user_dir(USER) / "crash-phase"
    flag.unlink(missing_ok=True)
    script = f"""#!/bin/sh
#SBATCH -n1
#SBATCH --energy-policy=io-dvfs
srun -n1 sh -c '{plug.phase("begin", "write")}; touch {flag}; sleep 1; kill -SEGV $$'
"""
    job, _ = plug.run_job(script, state="FAILED")
    assert flag.exists()
    rec = plug.wait_records(job, ["batch", "0"])["0"]
    plug.assert_restored()
    ph = rec["phases"][0]
    assert ph["kind"] == "write" and ph["open_at_step_end"] is True
    assert ph["freq_khz"] == int(0.85 * FMAX)


def test_time_limit_in_a_phase_restores_the_clock(plug):
    """Slurm kills the job at its time limit (1 minute, the shortest Slurm
    has) while a write phase holds the clock down."""
    flag = plug.c.user_dir(USER) / "timelimit-phase"
    flag.unlink(missing_ok=True)
    res, job = plug.c.sbatch(_in_write_phase_script(plug, flag), user=USER, args=["--time=1"])
    assert res.returncode == 0, res.stderr
    wait_file(flag)
    assert any(plug.cpufreq(i)["effective_khz"] == int(0.85 * FMAX) for i in range(plug.ncpus))
    assert plug.c.wait_job(job, timeout=240) == "TIMEOUT"
    rec = plug.wait_records(job, ["batch"])["batch"]
    plug.assert_restored()
    assert rec["phases"][0]["open_at_step_end"] is True


@pytest.mark.site
def test_kill9_slurmstepd_then_next_step_restores(plug):
    flag = plug.c.user_dir(USER) / "in-phase-k"
    flag.unlink(missing_ok=True)
    res, job = plug.c.sbatch(_in_write_phase_script(plug, flag), user=USER)
    assert res.returncode == 0
    wait_file(flag)
    pid = stepd_pid(job)
    assert pid
    owners = list((plug.state).glob("cpu*.owners/*"))
    assert [o.read_text().split()[0] for o in owners] == [str(pid)]  # slurmstepd owns the CPU
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while cmdline(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    # nobody restored it: slurmstepd died (before the job ends, nothing runs for it)
    changed = [i for i in range(plug.ncpus) if plug.cpufreq(i)["effective_khz"] == int(0.85 * FMAX)]
    assert len(changed) == 1
    assert (plug.state).exists()
    # (slurmstepd may linger as a zombie of pid 1: the journal must treat it as dead)
    for p in job_pids(job):  # the orphaned script and its sleep
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    plug.c.scancel(job)
    # the job epilog (or else the next step on the node) restores from the journal
    plug.c.wait_job(job)
    plug.c.wait_idle(60)
    job2, out = plug.run_job(f"#!/bin/sh\n#SBATCH -n1\n{plug.cat_freq('next')}\n")
    fl = freq_lines(out)["next"]
    for i in range(plug.ncpus):
        assert fl[i][0] == plug.orig[i]["scaling_governor"], fl
    plug.assert_restored()


@pytest.mark.site
def test_two_concurrent_steps_on_one_node(plug):
    if plug.c.cpus < 2:
        pytest.skip("needs 2 CPUs")
    d = plug.c.user_dir(USER)
    for n in ("a.in", "b.in"):
        (d / n).unlink(missing_ok=True)
    step = lambda me, other, kind: (
        f"{plug.phase('begin', kind)}; touch {d}/{me}.in; "
        f"i=0; while [ ! -e {d}/{other}.in ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; "
        f"{plug.cat_freq(me)}; sleep 1; {plug.phase('end')}")
    script = f"""#!/bin/sh
#SBATCH -n2 -c1
#SBATCH --energy-policy=io-dvfs
srun -n1 -c1 --exact sh -c '{step("a", "b", "write")}' > {d}/a.out &
srun -n1 -c1 --exact sh -c '{step("b", "a", "compress")}' > {d}/b.out &
wait
cat {d}/a.out {d}/b.out
"""
    job, out = plug.run_job(script)
    recs = plug.wait_records(job, ["batch", "0", "1"])
    fl = freq_lines(out)
    by_kind = {recs[s]["phases"][0]["kind"]: recs[s] for s in ("0", "1")}
    ca = expand_cpus(by_kind["write"]["step"]["cpus"])
    cb = expand_cpus(by_kind["compress"]["step"]["cpus"])
    assert len(ca) == 1 and len(cb) == 1 and ca != cb
    for view in ("a", "b"):  # both steps see each own clock on its own CPU only
        assert fl[view][ca[0]] == (GOV, str(int(0.85 * FMAX)))
        assert fl[view][cb[0]] == (GOV, str(int(0.875 * FMAX)))
    assert by_kind["write"]["phases"][0]["freq_khz"] == int(0.85 * FMAX)
    assert by_kind["compress"]["phases"][0]["freq_khz"] == int(0.875 * FMAX)


def test_energy_report_printed_by_srun(plug):
    res = plug.c.srun(["-n1", "--energy-report", "--energy-policy=fixed:0.75", "sh", "-c",
                       plug.adv("rep", 1)], user=USER)
    assert res.returncode == 0, res.stderr
    truth = adv_truth(res.stdout)["rep"]
    m = re.search(r"joulestep: step (\d+)\.0 on (\S+): [\d.]+ s, CPU ([\d.]+) J, DRAM ([\d.]+) J, "
                  r"total [\d.]+ J \([\d.]+ W\), policy fixed:0.75, 0 phase\(s\)", res.stderr)
    assert m, res.stderr
    assert m.group(2) == plug.c.node
    assert close(float(m.group(3)) * 1e6, truth[0], 0.01)
    assert close(float(m.group(4)) * 1e6, truth[1], 0.01)


# ------------------------------------------------------- records into the CLI
def _cli(repo, *args):
    res = subprocess.run([str(repo / ".venv" / "bin" / "joulestep"), *map(str, args)],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def test_live_records_ingest_and_summarise(plug, repo, tmp_path):
    """Records the plugin wrote on the live cluster land in the CLI's store, the
    after-job summary shows the measured energies and clocks, the srun step
    that ran inside the batch step is not added twice, and ingesting again
    changes nothing."""
    script = f"""#!/bin/sh
#SBATCH -n1
#SBATCH --energy-policy=io-dvfs
#SBATCH --energy-tag=strategy=veloc,tier=dram
{plug.adv("serial", 1)}
srun -n1 sh -c '{plug.phase("begin", "compress")}; {plug.adv("compress", 2)}; {plug.phase("end", "--bytes", 4096)}; {plug.phase("begin", "write")}; {plug.adv("write", 1)}; {plug.phase("end", "--bytes", 2048)}'
"""
    job, out = plug.run_job(script)
    recs = plug.wait_records(job, ["batch", "0"])
    truth = adv_truth(out)
    db = tmp_path / "js.db"
    job_spool = plug.spool / "jstest" / str(job)
    first = _cli(repo, "--db", db, "ingest", job_spool)
    assert "2 new steps" in first and "0 quarantined" in first
    import sqlite3
    dump1 = list(sqlite3.connect(db).iterdump())
    again = _cli(repo, "--db", db, "ingest", job_spool)
    assert "0 new steps" in again
    assert list(sqlite3.connect(db).iterdump()) == dump1

    s = json.loads(_cli(repo, "--db", db, "--format", "json", "job", job))
    assert s["job"]["tags"] == {"strategy": "veloc", "tier": "dram"}
    steps = {st["step_id"]: st for st in s["steps"]}
    assert set(steps) == {"batch", "0"}
    # the node's energy is the batch step's measurement, counted once
    batch_uj = recs["batch"]["step"]["energy_total_uj"]
    assert close(batch_uj, truth["*"][0] + truth["*"][1])
    assert s["totals"]["energy_total_j"] == pytest.approx(batch_uj / 1e6, rel=1e-9)
    assert steps["0"]["inside_step"] == "batch"
    # per phase: what the plugin measured, at the clocks io-dvfs sets
    ph = {p["kind"]: p for p in steps["0"]["phases"]}
    for kind, khz, nbytes in (("compress", 0.875 * FMAX, 4096), ("write", 0.85 * FMAX, 2048)):
        rec_ph = next(p for p in recs["0"]["phases"] if p["kind"] == kind)
        assert ph[kind]["energy_cpu_j"] == pytest.approx(rec_ph["energy_cpu_uj"] / 1e6)
        assert close(rec_ph["energy_cpu_uj"], truth[kind][0])
        assert ph[kind]["freq_mhz"] == pytest.approx(khz / 1000)
        assert ph[kind]["bytes"] == nbytes


# ------------------------------------------------------------------ tuned policy
def _khz(ratio: float) -> int:
    """ratio·fmax on the fake hardware: the nearest 100 MHz step (ties down) in [FMIN, FMAX]."""
    want = ratio * FMAX
    steps = range(FMIN, FMAX + 1, 100000)
    return min(steps, key=lambda k: (abs(k - want), k))


@pytest.fixture(scope="module")
def tuned_file(js, repo, tmp_path_factory):
    """A tuned policy file made the way an admin makes one: a recorded frequency
    sweep (compress: mostly CPU-bound; write: mostly I/O-bound) ingested into a
    database, then `joulestep model dvfs --save`. Installed root-owned 0644 under
    the plugin's root-owned work directory."""
    import sys
    sys.path.insert(0, str(repo / "tests" / "cli"))
    import recgen
    work = tmp_path_factory.mktemp("tuned")
    job = 9000
    for kind, alpha in (("compress", 0.6), ("write", 0.2)):
        for i in range(17):  # 0.8 .. 2.4 GHz
            fr = round(0.8 + 0.1 * i, 3)
            job += 1
            p = 40.0 * (0.0133 * fr ** 3.379 + 0.7985)
            t = 10.0 * (alpha * 2.4 / fr + 1 - alpha)
            ph = [recgen.phase(0, kind, 1, t, p * t, 0, freq_khz=int(round(fr * 1e6)),
                               t0=recgen.T0 + (job - 1) * recgen.S)]  # inside its step
            recgen.write(work / "spool", recgen.record(
                job, "0", "node01", start_s=job, submit_s=job, dur_s=t + 2, cpu_j=p * t + 10,
                dram_j=0, policy="monitor", tags={"sweep": "tuned"}, node_model="sweep-model-x",
                phases=ph))
    db = work / "js.db"
    _cli(repo, "--db", db, "ingest", work / "spool")
    out = _cli(repo, "--db", db, "model", "dvfs", "--where", "sweep=tuned", "--save", work / "tuned.json")
    assert "Wrote" in out, out
    dst = js.root / "tuned.json"
    dst.write_text((work / "tuned.json").read_text())
    os.chown(dst, 0, 0)
    os.chmod(dst, 0o644)
    doc = json.loads(dst.read_text())
    ratios = {k: v["ratio"] for k, v in doc["phases"].items()}
    # the two kinds get different clocks, both inside the admin's default bounds
    assert set(ratios) == {"compress", "write"}
    assert 0.5 <= ratios["write"] < ratios["compress"] < 1.0, ratios
    assert _khz(ratios["write"]) != _khz(ratios["compress"])
    return dst, ratios


def _tuned_script(plug):
    return f"""#!/bin/sh
#SBATCH -n1
#SBATCH --energy-policy=tuned
{plug.cat_freq("before")}
{plug.phase("begin", "compress")}
{plug.cat_freq("compress")}
{plug.adv("compress", 1)}
{plug.phase("end")}
{plug.cat_freq("between")}
{plug.phase("begin", "write")}
{plug.cat_freq("write")}
{plug.adv("write", 1)}
{plug.phase("end")}
{plug.phase("begin", "checkpoint")}
{plug.cat_freq("ckpt")}
{plug.phase("end")}
"""


def test_tuned_policy_applies_the_admin_file(plug, tuned_file):
    path, ratios = tuned_file
    plug.configure(tuned=path)
    job, out = plug.run_job(_tuned_script(plug))
    rec = plug.wait_records(job, ["batch"])["batch"]
    fl = freq_lines(out)
    cpus = expand_cpus(rec["step"]["cpus"])
    others = [i for i in range(plug.ncpus) if i not in cpus]
    for cpu in cpus:
        assert fl["compress"][cpu] == (GOV, str(_khz(ratios["compress"])))
        assert fl["write"][cpu] == (GOV, str(_khz(ratios["write"])))
        assert fl["between"][cpu] == (GOV, str(FMAX))  # base clock between phases
        assert fl["ckpt"][cpu] == (GOV, str(FMAX))     # kind not in the file: inherits
    for cpu in others:
        for tag in ("compress", "write"):
            assert fl[tag][cpu] == fl["before"][cpu]
    st = rec["step"]
    assert st["policy"] == "tuned"
    assert st["policy_map"] == pytest.approx(ratios)
    ph = {p["kind"]: p for p in rec["phases"]}
    assert ph["compress"]["freq_khz"] == _khz(ratios["compress"])
    assert ph["write"]["freq_khz"] == _khz(ratios["write"])
    assert ph["checkpoint"]["freq_khz"] is None
    prov = rec["provenance"]
    assert prov["tuned_file"] == str(path)
    assert prov["tuned_node_model"] == "sweep-model-x"
    # made on another node model: applied, and said so (the only error)
    assert st["node_model"] != "sweep-model-x"
    assert len(prov["errors"]) == 1, prov["errors"]
    assert "made for node model 'sweep-model-x'" in prov["errors"][0]
    assert "applied anyway" in prov["errors"][0]
    plug.c.wait_idle()
    plug.assert_restored()

    # a stricter admin floor clamps the file's ratios, and the record says so
    plug.configure(tuned=path, min_ratio=0.8)
    job, out = plug.run_job(_tuned_script(plug))
    rec = plug.wait_records(job, ["batch"])["batch"]
    fl = freq_lines(out)
    for cpu in expand_cpus(rec["step"]["cpus"]):
        assert fl["write"][cpu] == (GOV, str(_khz(0.8)))
        assert fl["compress"][cpu] == (GOV, str(_khz(max(0.8, ratios["compress"]))))
    assert rec["step"]["policy_map"]["write"] == pytest.approx(0.8)
    assert any(f"tuned:write={ratios['write']:g} clamped to min_ratio 0.8" in e
               for e in rec["provenance"]["errors"]), rec["provenance"]["errors"]


def test_tuned_refused_at_submission_without_a_tuned_file(plug):
    before = queued_jobs(plug.c)
    res, job = plug.c.sbatch("#!/bin/sh\n#SBATCH --energy-policy=tuned\ntrue\n", user=USER)
    assert res.returncode != 0 and job is None
    assert "tuned needs the admin's tuned= file" in res.stderr, res.stderr
    assert "allowed on this cluster: monitor" in res.stderr
    assert queued_jobs(plug.c) == before
    res = plug.c.srun(["--energy-policy=tuned", "true"], user=USER)
    assert res.returncode != 0 and "tuned needs the admin's tuned= file" in res.stderr


@pytest.mark.parametrize("owner, mode, why", [
    (USER, 0o644, "must be owned by root"),
    ("root", 0o666, "must be writable by root only"),
])
def test_tuned_file_a_user_controls_is_refused(plug, tuned_file, owner, mode, why):
    """slurmstepd never takes a policy decision from a file a user could write:
    the step runs as monitor, the record says why, the job completes."""
    src, _ = tuned_file
    bad = plug.root / "tuned-bad.json"
    bad.write_text(src.read_text())
    pw = pwd.getpwnam(owner)
    os.chown(bad, pw.pw_uid, pw.pw_gid)
    os.chmod(bad, mode)
    plug.configure(tuned=bad)
    try:
        job, out = plug.run_job(_tuned_script(plug))
    finally:
        bad.unlink()
    rec = plug.wait_records(job, ["batch"])["batch"]
    fl = freq_lines(out)
    for cpu in range(plug.ncpus):  # no clock changed
        assert fl["write"][cpu] == fl["before"][cpu] == fl["compress"][cpu]
    assert rec["step"]["policy"] == "monitor"
    assert "policy_map" not in rec["step"]
    assert [p["freq_khz"] for p in rec["phases"]] == [None, None, None]
    errs = rec["provenance"]["errors"]
    assert len(errs) == 1 and f"tuned file {bad}" in errs[0] and why in errs[0], errs
    assert "runs as monitor" in errs[0]
    assert rec["step"]["exit_code"] == 0


def test_collective_phase_of_two_ranks(plug):
    """Both ranks of an srun step mark the same write phase: one step-level
    phase from the first begin to the last end, with per-rank timings and
    bytes, at the io-dvfs clock."""
    # two ranks on a one-CPU node only run overcommitted (else the job pends forever)
    oc = " -O" if plug.c.cpus < 2 else ""
    script = f"""#!/bin/sh
#SBATCH -n2 -c1{oc}
#SBATCH --energy-policy=io-dvfs
srun -n2 -c1{oc} sh -c '{plug.phase("begin", "write", "dump-1")}; sleep 0.$((3 * SLURM_PROCID + 2)); {plug.phase("end", "--bytes", "$((1000 * (SLURM_PROCID + 1)))")}'
"""
    job, _ = plug.run_job(script)
    rec = plug.wait_records(job, ["batch", "0"])["0"]
    writes = [p for p in rec["phases"] if p["kind"] == "write"]
    assert len(writes) == 1, rec["phases"]
    w = writes[0]
    assert w["label"] == "dump-1" and w["nranks"] == 2
    ranks = {r["rank"]: r for r in w["ranks"]}
    assert set(ranks) == {0, 1}
    # the ranks' own times (the phase's start/end are when its energy was read)
    assert w["marker_start_ns"] == min(r["start_ns"] for r in ranks.values())
    assert w["marker_end_ns"] == max(r["end_ns"] for r in ranks.values())
    # rank 1 sleeps 0.5 s, rank 0 0.2 s: the step-level phase spans the slower one
    assert ranks[1]["end_ns"] - ranks[1]["start_ns"] > ranks[0]["end_ns"] - ranks[0]["start_ns"]
    assert ranks[0]["bytes"] == 1000 and ranks[1]["bytes"] == 2000
    assert w["bytes"] == 3000
    assert w["freq_khz"] == int(0.85 * FMAX)
