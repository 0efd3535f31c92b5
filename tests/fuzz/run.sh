#!/usr/bin/env bash
# Run the libFuzzer harnesses of build/fuzz/ (docs/reliability.md, "Fuzzing").
#   tests/fuzz/run.sh -runs=N TARGET...            short, fixed seed (make test)
#   tests/fuzz/run.sh -max_total_time=S TARGET...  long (make fuzz)
# Each target starts from its committed seed corpus tests/fuzz/corpus/<t>/
# (never written to). Short runs work in a fresh temporary directory, so the
# result depends on nothing left by an earlier run; long runs keep what they
# find in build/fuzz/work/<t>/ (and start from it next time). A crash, leak,
# timeout or broken contract writes build/fuzz/crashes/<t>/ and fails.
# Prints executions and crashes per target.
set -uo pipefail
cd "$(dirname "$0")/../.."
limit=$1; shift
B=${B:-build}
SEED=${FUZZ_SEED:-1}
declare -A DICT=([msg]=msg [conf]=conf [policy]=policy [tags]=policy [tuned]=tuned [auto]=auto [jobcache]=tuned)
declare -A MAXLEN=([msg]=300 [conf]=2048 [policy]=600 [tags]=2048 [tuned]=4096 [auto]=4096 [cpuset]=256 [jobcache]=1024 [cgroup]=2048)
tmp=""
case $limit in
	-runs=*) tmp=$(mktemp -d) ; trap 'rm -rf "$tmp"' EXIT ;;
	-max_total_time=*) ;;
	*) echo "usage: $0 -runs=N|-max_total_time=S TARGET..." >&2; exit 2 ;;
esac
rc=0
total_runs=0
printf '%-10s %12s %8s %10s %8s %8s\n' target executions seconds exec/s corpus crashes
for t in "$@"; do
	bin=$B/fuzz/fuzz_$t
	if [ ! -x "$bin" ]; then echo "fuzz: $bin missing (make fuzz-build)" >&2; exit 1; fi
	if [ -n "$tmp" ]; then work=$tmp/$t; else work=$B/fuzz/work/$t; fi
	crashes=$B/fuzz/crashes/$t
	mkdir -p "$work" "$crashes"
	log=$B/fuzz/$t.log
	opts=("$limit" -seed="$SEED" -max_len="${MAXLEN[$t]:-1024}" -timeout=10 -print_final_stats=1
	      -artifact_prefix="$crashes/")
	[ -n "${DICT[$t]:-}" ] && opts+=(-dict="tests/fuzz/dict/${DICT[$t]}.dict")
	start=$(date +%s.%N)
	"$bin" "${opts[@]}" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1
	st=$?
	secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
	runs=$(awk '/stat::number_of_executed_units/ {print $NF}' "$log" | tail -1)
	if [ -z "$runs" ]; then runs=$(sed -n 's/^#\([0-9]*\).*/\1/p' "$log" | tail -1); fi
	runs=${runs:-0}
	ncorp=$(ls "$work" | wc -l)
	nc=0
	if [ $st -ne 0 ]; then
		nc=1
		rc=1
	fi
	total_runs=$((total_runs + runs))
	printf '%-10s %12s %8.1f %10.0f %8s %8s\n' "$t" "$runs" "$secs" \
		"$(awk -v r="$runs" -v s="$secs" 'BEGIN {print r / (s + 0.001)}')" "$ncorp" "$nc"
	if [ $st -ne 0 ]; then
		echo "fuzz: $t FAILED (exit $st); reproducer in $crashes/, log $log:" >&2
		grep -E "ERROR|contract broken|SUMMARY|Test unit written" "$log" | head -20 >&2
	fi
done
echo "fuzz: $total_runs executions in all"
exit $rc
