#!/bin/sh
# Demo job: compute, then write a checkpoint (compress + write), with nested
# phase markers: checkpoint > compress, checkpoint > write. Under
# --energy-policy=io-dvfs the plugin lowers the clock during those phases.
# JS_PHASE: path of joulestep-phase (optional, see compute.sh).
# JS_SECONDS: compute time (default 2); JS_CKPT_MB: checkpoint size (default 24).
step=$(cat <<'STEP'
phase() {
	if [ -n "$JS_PHASE" ] && [ -x "$JS_PHASE" ]; then
		"$JS_PHASE" "$@" || echo "note: joulestep-phase $* failed (no plugin?)" >&2
	fi
}
set -e
data="$PWD/ckpt-$SLURM_JOB_ID"
echo "step $SLURM_JOB_ID.$SLURM_STEP_ID on $(hostname) as $(id -un)"
phase begin compute solver
timeout "${JS_SECONDS:-2}" sh -c 'while :; do :; done' || true
phase end
phase begin checkpoint ckpt-1
phase begin compress ckpt-1
head -c "${JS_CKPT_MB:-24}M" /dev/urandom | gzip -1 > "$data.gz"
size=$(stat -c %s "$data.gz")
phase end --bytes "$size"
phase begin write ckpt-1
dd if="$data.gz" of="$data.ckpt" bs=1M conv=fsync status=none
phase end --bytes "$(stat -c %s "$data.ckpt")"
phase end --bytes "$size"
echo "checkpoint written: $size bytes"
rm -f "$data.gz" "$data.ckpt"
STEP
)
srun -n1 -c1 sh -c "$step"
