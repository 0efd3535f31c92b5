#!/bin/sh
#SBATCH --job-name=dump-policy
#SBATCH --ntasks=1
#SBATCH --exclusive
#SBATCH --time=01:00:00
# Compressed dumps vs raw writes, base clock vs the frequency policy (docs/science.md §3;
# Wilkins thesis §2.6.2, Fig. 2.6, the 13 % / 6.5 kJ example): for a raw write and for
# every compressor x error bound, one srun step per policy in DUMP_POLICIES, in turn
# (policies interleaved, so drift over the run hits them alike). Each step compresses
# (phase compress, io-dvfs: 0.875 fmax), verifies (phase verify, base clock) and writes
# (phase write, io-dvfs: 0.85 fmax) its field DUMP_REPS times; tags dump=C,eb=E,field=F.
#
#   sbatch --export=ALL,JS_REPO=$PWD bench/jobs/dump-policy.sh           # 2-core default
#   joulestep ingest && joulestep compare --what dump --by dump --error-bound tag:eb
#
# Full size (the paper: NYX velocity-x, 512 GB over NFS, SZ): DUMP_INPUT, DUMP_DIMS,
# DUMP_OUT on the NFS, DUMP_REPS=10; settings in bench/dump/common.sh, docs/experiments.md.
set -eu
. "${JS_REPO:-$SLURM_SUBMIT_DIR}/bench/dump/common.sh"
DUMP_POLICIES=${DUMP_POLICIES:-monitor io-dvfs}
for c in raw $DUMP_COMPRESSORS; do
	for eb in $([ "$c" = raw ] && echo - || echo "$DUMP_BOUNDS"); do
		for pol in $DUMP_POLICIES; do
			dump_step "$pol" "$c" "$eb"
		done
	done
done
