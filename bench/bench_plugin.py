#!/usr/bin/env python3
"""Benchmarks of the joulestep SPANK plugin (figures, not tests). Run as root:

    python3 bench/bench_plugin.py [--allocs 40] [--steps 25] [--launches 30] [--markers 20000]
                                  [--phases 1200] [--launch-only]

Starts its own single-node Slurm cluster (tests/cluster/harness.py) with fake RAPL/cpufreq
and prints, each with the same-run baseline:
  1. srun step launch time with the plugin vs without            goal median <= 1.02x
     a. step launch: `srun -n1 true` inside an existing allocation (salloc), timed by a
        driver in the allocation with a monotonic clock; jobs with and without the plugin
        alternate (plugstack.conf is re-read per job and per step). Steps 2..N of each
        allocation are the figure (the job's submit time comes from the plugin's job cache);
        step 1 pays the slurmctld lookup and is shown apart. Printed beside the gap of the
        medians: its spread, the half-width of a 95 % bootstrap interval over allocations
        (allocation-to-allocation noise dominates): the gap is resolved when the spread is
        smaller; raise --allocs until it is.
     b. whole job: `srun -n1 true` outside an allocation (allocation + first step + job
        end), alternating per launch.
  2. marker cost seen by the app (libjoulestep-client, asynchronous, to the plugin's
     thread in slurmstepd) vs a bare send of the same message on a UNIX SEQPACKET socket
     to another process, as a rank's marker crosses a process boundary   goal <= 2x
  3. marker -> clock written (freq_lag_ns: the client's t= to the clock written), over
     --phases clock-changing BEGINs from a C client; beside the clock write alone
     (freq_change_ns) and a sync PING round trip to the same plugin   goal p99 <= 1 ms
  4. sampler CPU use (the library's js_meter at the plugin's period) goal <= 0.1 % of a core
slurmd is restarted once with the plugin in plugstack.conf, as in production (slurmd
decides at start whether a plugin has a job epilog, which removes the job cache file);
the baselines then differ only by plugstack.conf.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests" / "cluster"), str(REPO / "tests" / "fakehw")]

import fakehw  # noqa: E402
from harness import Cluster, ensure_user, make_workdir  # noqa: E402

MARKER_C = r"""
#define _GNU_SOURCE
#include <joulestep/client.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static long long now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000LL+t.tv_nsec;}
int main(int argc,char**argv){
  int n=atoi(argv[1]), sv[2];
  /* baseline: a bare send of a same-size message on a UNIX SEQPACKET socket to another
   * process that reads it, as a rank's marker crosses into slurmstepd */
  socketpair(AF_UNIX,SOCK_SEQPACKET|SOCK_CLOEXEC,0,sv);
  pid_t pid=fork();
  if(pid==0){char b[512];close(sv[0]);while(recv(sv[1],b,sizeof b,0)>0);_exit(0);}
  close(sv[1]);
  /* the same two messages, back to back, as js_phase_begin/end below */
  char m1[]="JS1 BEGIN compute - rank=0 t=123456789012345", m2[]="JS1 END bytes=- rank=0 t=123456789012345";
  for(int i=0;i<n;i++){long long a=now();send(sv[0],m1,sizeof m1-1,MSG_NOSIGNAL);long long b=now();
    send(sv[0],m2,sizeof m2-1,MSG_NOSIGNAL);long long c=now();printf("BARE %lld\nBARE %lld\n",b-a,c-b);
    struct timespec s={0,20000};nanosleep(&s,NULL);}
  shutdown(sv[0],SHUT_WR);waitpid(pid,NULL,0);
  js_phase_begin("compute",NULL); js_phase_end(-1); /* connect */
  for(int i=0;i<n;i++){long long a=now();int rc=js_phase_begin("compute",NULL);long long b=now();
    js_phase_end(-1);long long c=now();if(rc){fprintf(stderr,"rc %d\n",rc);return 1;}
    printf("MARK %lld\nMARK %lld\n",b-a,c-b);struct timespec s={0,20000};nanosleep(&s,NULL);}
  return 0;}
"""

# Clock-changing markers (io-dvfs: compress and write BEGINs lower the clock, ENDs restore
# it), asynchronous as an application sends them, 1 ms apart; then sync PING round trips.
LAG_C = r"""
#define _GNU_SOURCE
#include <joulestep/client.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static long long now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000LL+t.tv_nsec;}
int main(int argc,char**argv){
  int n=atoi(argv[1]);
  struct timespec ms={0,1000000};
  for(int i=0;i<n;i++){
    if(js_phase_begin(i%2?"write":"compress",NULL)){fprintf(stderr,"begin failed\n");return 1;}
    nanosleep(&ms,NULL);
    if(js_phase_end(-1)){fprintf(stderr,"end failed\n");return 1;}
    nanosleep(&ms,NULL);}
  for(int i=0;i<n;i++){long long a=now();int rc=js_phase_ping();printf("PING %lld\n",now()-a);
    if(rc){fprintf(stderr,"ping %d\n",rc);return 1;} nanosleep(&ms,NULL);}
  printf("JOB %s\n",getenv("SLURM_JOB_ID"));
  return 0;}
"""

SAMPLER_C = r"""
#include <joulestep/energy.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
int main(int argc,char**argv){
  struct js_energy *e; struct js_meter *m; char why[512];
  struct js_energy_opts o={.sysfs_root=argv[1],.order="sysfs"};
  if(js_energy_open(&o,&e,why,sizeof why)){fprintf(stderr,"%s\n",why);return 1;}
  double secs=atof(argv[3]);
  struct rusage r0,r1; getrusage(RUSAGE_SELF,&r0);
  if(js_meter_start(e,(unsigned long long)atoll(argv[2])*1000000ULL,true,&m))return 1;
  struct timespec t={(time_t)secs,(long)((secs-(time_t)secs)*1e9)}; nanosleep(&t,NULL);
  js_meter_stop(m); getrusage(RUSAGE_SELF,&r1);
  double cpu=(r1.ru_utime.tv_sec-r0.ru_utime.tv_sec)+(r1.ru_utime.tv_usec-r0.ru_utime.tv_usec)/1e6
            +(r1.ru_stime.tv_sec-r0.ru_stime.tv_sec)+(r1.ru_stime.tv_usec-r0.ru_stime.tv_usec)/1e6;
  printf("%.9f %.3f %llu\n",cpu,secs,(unsigned long long)js_meter_period_ns(m?m:NULL));
  return 0;}
"""


# Runs inside the allocation as the job user: times N step launches with a monotonic clock.
STEP_DRIVER = """
import os, subprocess, sys, time
ts = []
for i in range(int(sys.argv[1])):
    t0 = time.monotonic()
    r = subprocess.run(["srun", "-n1", "true"])
    ts.append(time.monotonic() - t0)
    if r.returncode:
        sys.exit(f"srun step {i} failed: {r.returncode}")
print("T", " ".join(f"{t:.6f}" for t in ts))
print("J", os.environ["SLURM_JOB_ID"])
"""


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def line(name, xs, unit, scale=1.0):
    return (f"{name:<34} median {statistics.median(xs) / scale:10.3f} {unit}   "
            f"p99 {pct(xs, 99) / scale:10.3f} {unit}   (n={len(xs)})")


def gap_spread(groups_with, groups_without, rounds=2000, seed=1):
    """The gap of the medians (with - without) and its spread: half the width of a 95 %
    bootstrap interval, resampling whole allocations (their noise dominates)."""
    rnd = random.Random(seed)
    gap = (statistics.median([x for g in groups_with for x in g])
           - statistics.median([x for g in groups_without for x in g]))
    gaps = []
    for _ in range(rounds):
        w = [x for _ in groups_with for x in rnd.choice(groups_with)]
        o = [x for _ in groups_without for x in rnd.choice(groups_without)]
        gaps.append(statistics.median(w) - statistics.median(o))
    gaps.sort()
    lo, hi = gaps[int(0.025 * rounds)], gaps[int(0.975 * rounds) - 1]
    return gap, (hi - lo) / 2


def print_launch(a, groups, first, sources, t_with, t_without):
    steps = {k: [x for g in v for x in g] for k, v in groups.items()}
    print("joulestep SPANK plugin benchmarks (same run, same node)")
    print(f"step launch in an allocation (salloc -n1; srun -n1 true, steps 2..{a.steps} "
          f"of {a.allocs} allocations each):")
    print(line("  srun step, with plugin", steps[True], "ms", 1e-3))
    print(line("  srun step, without plugin", steps[False], "ms", 1e-3))
    ratio = statistics.median(steps[True]) / statistics.median(steps[False])
    r99 = pct(steps[True], 99) / pct(steps[False], 99)
    print(f"{'  step launch ratio (median)':<34} {ratio:.3f}x   (p99 {r99:.3f}x)   goal <= 1.02x   "
          f"{'OK' if ratio <= 1.02 else 'MISSED'}")
    gap, spread = gap_spread(groups[True], groups[False])
    print(f"{'  gap of the medians (plugin cost)':<34} {gap * 1e3:+.3f} ms   spread (95 % bootstrap "
          f"over allocations) +-{spread * 1e3:.3f} ms   "
          f"{'resolved: spread < gap' if spread < abs(gap) else 'NOT resolved: spread >= gap (more --allocs)'}")
    print(line("  first step, with plugin", first[True], "ms", 1e-3))
    print(line("  first step, without plugin", first[False], "ms", 1e-3))
    print(f"  job_source of the plugin steps: "
          + ", ".join(f"{k[0]} {k[1]} x{v}" for k, v in sorted(sources.items())))
    print("whole job (srun -n1 true outside an allocation: allocation, first step, job end):")
    print(line("  srun -n1 true, with plugin", t_with, "ms", 1e-3))
    print(line("  srun -n1 true, without plugin", t_without, "ms", 1e-3))
    wr = statistics.median(t_with) / statistics.median(t_without)
    print(f"{'  whole-job ratio (median)':<34} {wr:.3f}x   (p99 {pct(t_with, 99) / pct(t_without, 99):.3f}x)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=30, help="whole-job launches per variant")
    ap.add_argument("--allocs", type=int, default=40, help="allocations per variant (step launch)")
    ap.add_argument("--steps", type=int, default=25, help="srun steps per allocation")
    ap.add_argument("--markers", type=int, default=20000)
    ap.add_argument("--phases", type=int, default=1200, help="clock-changing markers (>= 1000)")
    ap.add_argument("--sampler-seconds", type=float, default=20.0)
    ap.add_argument("--launch-only", action="store_true", help="only figure 1 (step and job launch)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_plugin.py must run as root (it starts a private Slurm cluster)")
    build = REPO / "build"
    w = make_workdir("bench-")
    c = Cluster(w)
    server = None
    hw_mounted = False
    try:
        c.start()
        ensure_user("jsuser")
        root = w / "jsplug"
        root.mkdir(mode=0o755)
        # Real cpufreq and powercap files live in memory (sysfs), and socket_dir's default
        # /run/joulestep is on a tmpfs: the fake tree and the sockets go on a private tmpfs,
        # so that a clock write or a bind is not an ext4 write with its journal stalls.
        mem = root / "mem"
        mem.mkdir(mode=0o755)
        hw_mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=64m", "jsbench-mem",
                                     str(mem)], capture_output=True).returncode == 0
        if not hw_mounted:
            print("note: could not mount a tmpfs for the fake hardware and the sockets; they are on "
                  f"{subprocess.run(['stat', '-f', '-c', '%T', str(mem)], capture_output=True, text=True).stdout.strip()}")
        hw = mem / "hw"
        fakehw.create(str(hw), packages=2, cpus_per_package=max(1, c.cpus // 2), fmax_khz=4000000)
        server = fakehw.serve_background(str(hw), manual=True, ctl=str(root / "ctl"))
        args = {"spool": root / "spool", "state": root / "state", "sysfs": hw,
                "socket_dir": mem / "sock", "backend": "sysfs", "rate": 1000000,
                "max_phases": 100000}  # the most allowed (docs/record-format.md "Size")
        pub = c.public_path(build)
        with tempfile.TemporaryDirectory() as td:
            exe = root / "markers"
            src = pathlib.Path(td) / "m.c"
            src.write_text(MARKER_C)
            subprocess.run(["cc", "-O2", "-pthread", f"-I{REPO / 'spank/client'}", str(src), "-o", str(exe),
                            f"-L{pub / 'lib'}", "-ljoulestep-client", f"-Wl,-rpath,{pub / 'lib'}"], check=True)
            lag_exe = root / "lag"
            src3 = pathlib.Path(td) / "l.c"
            src3.write_text(LAG_C)
            subprocess.run(["cc", "-O2", f"-I{REPO / 'spank/client'}", str(src3), "-o", str(lag_exe),
                            f"-L{pub / 'lib'}", "-ljoulestep-client", f"-Wl,-rpath,{pub / 'lib'}"], check=True)
            samp = root / "sampler"
            src2 = pathlib.Path(td) / "s.c"
            src2.write_text(SAMPLER_C)
            subprocess.run(["cc", "-O2", "-pthread", f"-I{REPO / 'accounting/include'}", str(src2), "-o",
                            str(samp), str(build / "lib/libjoulestep-acct.a"), "-lpowercap", "-ldl",
                            "-ljansson"], check=True)
        os.chmod(exe, 0o755)
        os.chmod(lag_exe, 0o755)

        so = build / "spank/joulestep.so"
        c.write_plugstack(so, args)
        c.restart_slurmd()

        # 1a. step launch inside an allocation: alternate whole allocations
        steps = {True: [], False: []}   # steps 2..N, one list per allocation
        first = {True: [], False: []}   # step 1
        jobs_with = []
        for i in range(a.allocs):
            for plugged in ((True, False) if i % 2 == 0 else (False, True)):
                c.write_plugstack(so if plugged else None, args)
                r = c.run(["salloc", "-n1", "python3", "-c", STEP_DRIVER, str(a.steps)], user="jsuser",
                          timeout=300)
                assert r.returncode == 0, r.stderr
                out = dict(l.split(None, 1) for l in r.stdout.splitlines() if l[:2] in ("T ", "J "))
                ts = [float(x) for x in out["T"].split()]
                first[plugged].append(ts[0])
                steps[plugged].append(ts[1:])
                if plugged:
                    jobs_with.append(out["J"].strip())
        # 1b. whole job (srun outside an allocation), alternating per launch
        t_with, t_without = [], []
        for i in range(a.launches):
            for plugged, acc in ((True, t_with), (False, t_without)):
                c.write_plugstack(so if plugged else None, args)
                t0 = time.monotonic()
                r = c.srun(["-n1", "true"], user="jsuser")
                acc.append(time.monotonic() - t0)
                assert r.returncode == 0, r.stderr
        c.write_plugstack(so, args)
        # where the steps took the job fields from (prolog cache or their own start)
        sources = {}
        for job in jobs_with:
            for f in (root / "spool").glob(f"*/{job}/{job}.*.json"):
                rec = json.loads(f.read_text())
                k = ("step1" if rec["step"]["step_id"] == "0" else "later",
                     rec["provenance"].get("job_source"))
                sources[k] = sources.get(k, 0) + 1

        if a.launch_only:
            print_launch(a, steps, first, sources, t_with, t_without)
            return
        # 2. marker cost
        r = c.srun(["-n1", str(exe), str(a.markers)], user="jsuser", timeout=600)
        assert r.returncode == 0, r.stderr
        bare = [int(x.split()[1]) for x in r.stdout.splitlines() if x.startswith("BARE")]
        mark = [int(x.split()[1]) for x in r.stdout.splitlines() if x.startswith("MARK")]

        # 3. marker -> clock lag (asynchronous markers, io-dvfs write/compress phases)
        r = c.srun(["-n1", "--energy-policy=io-dvfs", str(lag_exe), str(a.phases)], user="jsuser",
                   timeout=600)
        assert r.returncode == 0, r.stderr
        job = r.stdout.split()[-1]
        pings = [int(x.split()[1]) for x in r.stdout.splitlines() if x.startswith("PING")]
        rec = None
        for _ in range(50):
            f = list((root / "spool").glob(f"*/{job}/{job}.0.*.json"))
            if f:
                rec = json.loads(f[0].read_text())
                break
            time.sleep(0.1)
        lags = [p["freq_lag_ns"] for p in rec["phases"] if p["freq_lag_ns"] is not None]
        changes = [p["freq_change_ns"] for p in rec["phases"] if p["freq_change_ns"] is not None]

        # 4. sampler CPU use at the plugin's default period (1000 ms)
        r = subprocess.run([str(samp), str(hw), "1000", str(a.sampler_seconds)], capture_output=True,
                           text=True, check=True)
        cpu_s, secs, period = r.stdout.split()
        cpu_pct = 100 * float(cpu_s) / float(secs)

        print_launch(a, steps, first, sources, t_with, t_without)
        print("marker cost seen by the application:")
        print(line("  bare send to another process", bare, "us", 1e3))
        print(line("  js_phase_begin/end (async)", mark, "us", 1e3))
        mr = statistics.median(mark) / statistics.median(bare)
        print(f"{'  marker cost ratio (median)':<34} {mr:.2f}x    goal <= 2x      {'OK' if mr <= 2 else 'MISSED'}")
        print(f"marker -> clock written ({len(lags)} clock-changing markers, io-dvfs, "
              f"{rec['step']['ncpus']} step CPU(s)):")
        print(line("  marker -> clock written (lag)", lags, "us", 1e3))
        print(line("  baseline: clock write alone", changes, "us", 1e3))
        print(line("  baseline: sync PING round trip", pings, "us", 1e3))
        print(f"{'  lag p99':<34} {pct(lags, 99) / 1e6:.3f} ms    goal <= 1 ms (n >= 1000)   "
              f"{'OK' if pct(lags, 99) <= 1e6 and len(lags) >= 1000 else 'MISSED'}")
        print(f"{'sampler CPU (period %s ms)' % (int(period) // 1000000):<34} {cpu_pct:.4f} % of a core "
              f"over {float(secs):.0f} s   goal <= 0.1 %   {'OK' if cpu_pct <= 0.1 else 'MISSED'}")
    finally:
        if server:
            server.terminate()
            server.wait(10)
        c.stop()
        if hw_mounted:
            subprocess.run(["umount", str(w / "jsplug" / "mem")], check=False)


if __name__ == "__main__":
    main()
