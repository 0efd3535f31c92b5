#!/usr/bin/env bash
# The H100 check (issue 26): joulestep-run and the NVML backend on a real GPU.
# No Slurm. Needs: a built tree (make; or build/bin/joulestep-run and, where the
# machine lacks them, libpowercap.so.0 and libjansson.so.4 in build/device/lib:
# `bench/gpu/bundle.sh`), python3 with torch, nvidia-smi. Writes into $OUT (default
# build/device-check). About 2 minutes. Steps:
#   1. a 10 s GPU load measured by joulestep-run --gpus, beside the script's own
#      integral of nvmlDeviceGetPowerUsage (goal: within 5 %);
#   2. 5 x (compute = matrix products, checkpoint = torch.save to /dev/shm + fsync),
#      GPU energy of each phase;
#   3. the same with the clock locked low in checkpoint phases, checked with
#      nvidia-smi, and the SM clock under load before and after (the lock is gone).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-build/device-check}
mkdir -p "$OUT"
RUN=${JS_RUN:-build/bin/joulestep-run}
HERE=bench/gpu
export LD_LIBRARY_PATH="$PWD/build/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec > >(tee "$OUT/device_check.log") 2>&1

echo "== machine"
date -u; uname -r; (ldd --version | head -1) 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm,power.draw,power.limit --format=csv
"$RUN" --help >/dev/null || { echo "joulestep-run does not run here:"; ldd "$RUN"; exit 1; }
MAXMHZ=$(nvidia-smi --query-gpu=clocks.max.sm --format=csv,noheader,nounits | head -1 | tr -d ' ')
LOW=$(( ${MAXMHZ:-1980} * 2 / 5 ))
echo "lock for checkpoint phases: at most $LOW MHz (of $MAXMHZ)"

echo "== clock under load, before"
nvidia-smi -q -d CLOCK,PERFORMANCE > "$OUT/smi_clock_before.txt" 2>&1
timeout 60 python3 $HERE/clock_probe.py | tee "$OUT/clock_before.json"

echo "== 1. 10 s load"
timeout 120 "$RUN" --gpus=0 --phases --json -- python3 $HERE/phase_job.py load10 "$OUT/load10.json" \
  > "$OUT/run_load10.json"; echo "rc=$?"

echo "== 2. phases, clock as the driver sets it"
timeout 120 "$RUN" --gpus=0 --phases --json -- python3 $HERE/phase_job.py phases "$OUT/phases_plain.json" \
  > "$OUT/run_plain.json"; echo "rc=$?"

echo "== 3. phases, GPU clock locked at most at $LOW MHz in checkpoint and write phases"
timeout 120 "$RUN" --gpus=0 --phases --json --gpu-io-clock-mhz "$LOW" -- \
  python3 $HERE/phase_job.py phases-verify "$OUT/phases_low.json" > "$OUT/run_low.json"; echo "rc=$?"

echo "== clock under load, after"
nvidia-smi -q -d CLOCK,PERFORMANCE > "$OUT/smi_clock_after.txt" 2>&1
timeout 60 python3 $HERE/clock_probe.py | tee "$OUT/clock_after.json"
echo "== nvidia-smi -q -d CLOCK,PERFORMANCE: settings before -> after (current readings left out)"
diff <(grep -iE "applications|default|locked|setting" "$OUT/smi_clock_before.txt") \
     <(grep -iE "applications|default|locked|setting" "$OUT/smi_clock_after.txt") && echo "   the same"

echo "== summary"
python3 $HERE/report.py "$OUT" "$LOW"
# A safety net only after the check above has looked: never leave the machine locked.
nvidia-smi -rgc >/dev/null 2>&1 || true
