#!/bin/sh
# Demo job: a CPU-bound step, its solver loop marked as a "compute" phase.
# JS_PHASE: path of joulestep-phase (optional: without it, or without the
# plugin, the job runs the same and only the markers are skipped).
# JS_SECONDS: how long to compute (default 3).
step=$(cat <<'STEP'
phase() {
	if [ -n "$JS_PHASE" ] && [ -x "$JS_PHASE" ]; then
		"$JS_PHASE" "$@" || echo "note: joulestep-phase $* failed (no plugin?)" >&2
	fi
}
echo "step $SLURM_JOB_ID.$SLURM_STEP_ID on $(hostname) as $(id -un), cpus $(grep Cpus_allowed_list /proc/self/status | cut -f2)"
phase begin compute solver
timeout "${JS_SECONDS:-3}" sh -c 'while :; do :; done'
phase end
echo "compute done"
STEP
)
srun -n1 -c1 sh -c "$step"
