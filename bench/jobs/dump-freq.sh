#!/bin/sh
#SBATCH --job-name=dump-freq
#SBATCH --ntasks=1
#SBATCH --exclusive
#SBATCH --time=04:00:00
# Power and run time of compression and of data writing against the CPU clock
# (docs/science.md §3; Wilkins 2023 §2.4-2.5: Figs. 2.1-2.4, Tables 2.4 and 2.5, and with
# DUMP_INPUT=Hurricane ISABEL, DUMP_BOUNDS=1e-4, Fig. 2.5): every compressor x error
# bound, and a raw write for the data-writing model, at each clock ratio of DUMP_RATIOS
# (policy fixed:R for the whole step), tagged sweep=$DUMP_SWEEP. Then fit eq. 2.2:
#
#   joulestep ingest
#   joulestep model dvfs --where sweep=dump-freq --kind compress   # Table 2.4
#   joulestep model dvfs --where sweep=dump-freq --kind write      # Table 2.5
#
# The paper swept from 0.8 GHz to fmax in 50 MHz steps, 10 repetitions: give DUMP_RATIOS
# accordingly (ratios below the site's min_ratio are refused) and DUMP_REPS=10.
set -eu
. "${JS_REPO:-$SLURM_SUBMIT_DIR}/bench/dump/common.sh"
DUMP_RATIOS=${DUMP_RATIOS:-1 0.9 0.8 0.7 0.6 0.5}
DUMP_SWEEP=${DUMP_SWEEP:-dump-freq}
for r in $DUMP_RATIOS; do
	for c in raw $DUMP_COMPRESSORS; do
		for eb in $([ "$c" = raw ] && echo - || echo "$DUMP_BOUNDS"); do
			dump_step "fixed:$r" "$c" "$eb" "sweep=$DUMP_SWEEP"
		done
	done
done
