#!/bin/sh
# Submit one experiment of the papers as Slurm jobs, one job per configuration
# (docs/experiments.md). Each job is bench/jobs/<script>.sbatch with the
# configuration in JS_* variables and the same configuration in --energy-tag, so
# `joulestep compare` can group the records (exp=EXPERIMENT too, for --where). Sizes default to a 2-core test
# machine; the variables below scale them to the papers' (docs/experiments.md).
#
#   bench/jobs/submit.sh EXPERIMENT
#     ckpt-weak           Wilkins 2022 Fig. 2-5: weak scaling, VELOC (DRAM, SSD) vs GenericIO
#     ckpt-strong         Wilkins 2022 Fig. 6-9: strong scaling, same strategies
#     ckpt-dvfs           Mills 2013 / docs/science.md §4: monitor vs ckpt-dvfs, VELOC DRAM and GenericIO
#     damaris-approaches  Yildiz Fig. 2, 4, 5 / Dorier Table 2: TP, DC(1), DC(2), DN(1), DN(2)
#     damaris-frequency   Yildiz Fig. 3, Table 1: the same at 5, 10 and 20 iterations per output
#
# Environment (defaults = the short version):
#   JS_RANKS "1 2"    rank counts (ckpt-weak/-strong; paper: 1 2 4 8 16 32 40)
#   JS_SIZE 8M        bytes per rank (weak; paper 1G, 2G)      JS_TOTAL 16M (strong; paper 40G, 80G)
#   JS_REPS 3         checkpoints per job (paper: 50 repetitions, as jobs or as reps)
#   JS_GIO_IO mpiio   GenericIO writes (paper: posix from 2 GiB per rank)
#   JS_COMPUTE_MS 200 ckpt-dvfs: compute between checkpoints
#   JS_NODES 2        damaris: nodes (Yildiz: 14)    JS_PPN 2: ranks per node (Yildiz: 4 or 24)
#   JS_ITERS 40       damaris iterations (Yildiz: 2400)   JS_GRID 64x64x64   JS_VARS 4
#   JS_EVERIES "5 10 20"  damaris-frequency output intervals; damaris-approaches uses 5
#   JS_SBATCH_ARGS    extra sbatch arguments, e.g. "-O" to put more ranks than cores on a node
#   JS_DRY=1          print the sbatch lines, submit nothing
# Other JS_* variables (JS_PFS, JS_SSD, JS_OUT, JS_BENCH) reach the jobs unchanged.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
exp=${1:-}

submit() { # submit SCRIPT SBATCH-ARGS... -- EXPORTS
	script=$1
	shift
	args=""
	while [ "$1" != "--" ]; do args="$args $1"; shift; done
	shift
	line="sbatch ${JS_SBATCH_ARGS:-}$args --export=ALL,$1 $here/$script"
	if [ -n "${JS_DRY:-}" ]; then
		echo "$line"
	else
		echo "$line" >&2
		$line
	fi
}

ckpt() { # ckpt CONFIG NRANKS POLICY SIZE-EXPORT
	case $1 in
	veloc-dram) s=ckpt-veloc.sbatch tags=strategy=veloc,tier=dram env=JS_TIER=dram ;;
	veloc-ssd) s=ckpt-veloc.sbatch tags=strategy=veloc,tier=ssd env=JS_TIER=ssd ;;
	genericio) io=${JS_GIO_IO:-mpiio}
		s=ckpt-gio.sbatch tags=strategy=genericio,tier=pfs,io=$io env=JS_IO=$io ;;
	esac
	submit $s -J "$1" -n "$2" "--energy-policy=$3" "--energy-tag=$tags,config=$1,exp=$exp" -- \
		"$env,$4,JS_REPS=${JS_REPS:-3},JS_COMPUTE_MS=${5:-0}"
}

damaris() { # damaris APPROACH EVERY
	nodes=${JS_NODES:-2} ppn=${JS_PPN:-2}
	case $1 in
	tp) env=JS_IO=tp tags=io=tp ;;
	dc1) env=JS_IO=dc,JS_K=1 tags=io=dc,k=1 ;;
	dc2) env=JS_IO=dc,JS_K=2 tags=io=dc,k=2 ;;
	dn1) env=JS_IO=dn,JS_RATIO=$((nodes - 1)):1 tags=io=dn,ratio=$((nodes - 1)):1 ;;
	dn2) env=JS_IO=dn,JS_RATIO=$((nodes - 2)):2 tags=io=dn,ratio=$((nodes - 2)):2 ;;
	esac
	submit damaris.sbatch -J "$1" -N "$nodes" -n $((nodes * ppn)) --energy-policy=monitor \
		"--energy-tag=approach=$1,$tags,every=$2,exp=$exp" -- \
		"$env,JS_EVERY=$2,JS_ITERS=${JS_ITERS:-40},JS_GRID=${JS_GRID:-64x64x64},JS_VARS=${JS_VARS:-4}"
}

approaches() { # the Yildiz scenarios that fit the node shape
	nodes=${JS_NODES:-2} ppn=${JS_PPN:-2}
	echo tp
	[ "$ppn" -gt 1 ] && echo dc1
	[ "$ppn" -gt 2 ] && echo dc2
	[ "$nodes" -gt 1 ] && echo dn1
	[ "$nodes" -gt 2 ] && echo dn2
	return 0
}

case $exp in
ckpt-weak)
	for n in ${JS_RANKS:-1 2}; do
		for c in veloc-dram veloc-ssd genericio; do
			ckpt $c "$n" monitor "JS_SIZE=${JS_SIZE:-8M}"
		done
	done ;;
ckpt-strong)
	for n in ${JS_RANKS:-1 2}; do
		for c in veloc-dram veloc-ssd genericio; do
			ckpt $c "$n" monitor "JS_TOTAL=${JS_TOTAL:-16M}"
		done
	done ;;
ckpt-dvfs)
	n=$(echo ${JS_RANKS:-2} | awk '{print $NF}')
	for p in monitor ckpt-dvfs; do
		for c in veloc-dram genericio; do
			ckpt $c "$n" $p "JS_SIZE=${JS_SIZE:-8M}" "${JS_COMPUTE_MS:-200}"
		done
	done ;;
damaris-approaches)
	for a in $(approaches); do damaris "$a" 5; done ;;
damaris-frequency)
	for e in ${JS_EVERIES:-5 10 20}; do
		for a in $(approaches); do damaris "$a" "$e"; done
	done ;;
*)
	sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2 ;;
esac
