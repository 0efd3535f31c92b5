"""Summarise the device check's files (bench/gpu/device_check.sh) into summary.txt/json."""
import json
import pathlib
import statistics as st
import sys

OUT = pathlib.Path(sys.argv[1])
LOW = int(sys.argv[2]) if len(sys.argv) > 2 else None
S = {}
lines = []


def say(s=""):
    print(s)
    lines.append(s)


def load(name):
    p = OUT / name
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError) as e:
        say(f"  ({name}: {e})")
        return None


def mean_sd(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "n/a", None, None
    m = st.mean(xs)
    sd = st.stdev(xs) if len(xs) > 1 else 0.0
    return f"{m:.3f} ± {sd:.3f}", m, sd


run, job = load("run_load10.json"), load("load10.json")
say("1. 10 s GPU load: joulestep-run's counter against the script's own NVML power integral")
if run and job:
    ph = run["phases"][0]
    e = ph["gpus"][0]["energy_j"]
    pu, pi = job["script_power_usage_j"], job["script_instant_j"]
    S["load10"] = {"joulestep_counter_j": e, "script_power_usage_j": pu, "script_instant_j": pi,
                   "duration_s": ph["duration_s"], "integrated": ph["gpus"][0]["integrated"],
                   "samples": job["samples"]}
    say(f"   phase {ph['duration_s']:.3f} s; joulestep-run (counter): {e:.1f} J "
        f"({e / ph['duration_s']:.1f} W); integrated={ph['gpus'][0]['integrated']}")
    say(f"   script: nvmlDeviceGetPowerUsage integral {pu:.1f} J over {job['samples']} samples "
        f"-> difference {100 * (e - pu) / pu:+.2f} % (goal within 5 %)")
    if pi is not None:
        say(f"   script: instantaneous power field integral {pi:.1f} J -> {100 * (e - pi) / pi:+.2f} %")
    S["load10"]["diff_pct"] = 100 * (e - pu) / pu

for tag, name in (("plain", "run_plain.json"), ("low", "run_low.json")):
    r = load(name)
    if not r:
        continue
    S[tag] = {"phases": [{k: p[k] for k in ("kind", "label", "duration_s", "energy_gpu_j", "gpu_clock")}
                         for p in r["phases"]]}
say()
say("2. Marked phases, GPU energy per phase (clock as the driver sets it)")
if "plain" in S:
    say(f"   {'phase':<12} {'label':<8} {'s':>7} {'GPU J':>9} {'W':>7}")
    for p in S["plain"]["phases"]:
        e = p["energy_gpu_j"]
        say(f"   {p['kind']:<12} {p['label']:<8} {p['duration_s']:7.3f} "
            f"{e if e is not None else float('nan'):9.2f} {(e or 0) / p['duration_s']:7.1f}")

say()
say(f"3. Checkpoint phases with the GPU clock locked at most at {LOW} MHz against unlocked (5 each)")
for tag in ("plain", "low"):
    if tag not in S:
        continue
    ck = [p for p in S[tag]["phases"] if p["kind"] == "checkpoint"]
    es, m_e, _ = mean_sd([p["energy_gpu_j"] for p in ck])
    ds, _, _ = mean_sd([p["duration_s"] for p in ck])
    S[tag]["checkpoint_energy_j"] = [p["energy_gpu_j"] for p in ck]
    S[tag]["checkpoint_duration_s"] = [p["duration_s"] for p in ck]
    say(f"   {tag:<6} energy {es} J, duration {ds} s")
    if tag == "low":
        clk = [p["gpu_clock"] for p in ck]
        errs = {c["error"] for c in clk if c and c["error"]}
        say(f"   lowered in {sum(1 for c in clk if c and c['lowered'])} of {len(clk)} checkpoint phases"
            + (f"; NVML said: {'; '.join(sorted(errs))}" if errs else ""))
        say(f"   SM clock read right after each lock: {[c['sm_mhz_after_lock'] for c in clk if c]}")
verify = load("phases_low.json")
if verify:
    say(f"   nvidia-smi during a loaded write phase with the lock: {verify.get('smi_during_write')}")
    S["smi_during_write"] = verify.get("smi_during_write")
before, after = load("clock_before.json"), load("clock_after.json")
if before and after:
    say(f"   SM clock under load before the check: max {before['max']} MHz; after: max {after['max']} MHz "
        f"({'restored' if after['max'] and before['max'] and after['max'] >= before['max'] - 30 else 'NOT restored?'})")
    S["clock_before"], S["clock_after"] = before, after
(OUT / "summary.txt").write_text("\n".join(lines) + "\n")
(OUT / "summary.json").write_text(json.dumps(S, indent=1))
