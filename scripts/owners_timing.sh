#!/usr/bin/env bash
# owners_timing.sh: the wall time of an embedded owners fit for two emsf
# binaries, interleaved (A B A B ...), so that both see the same machine
# load; prints one line per run and the medians. Used for docs/scaling.md
# §9.3 (early pulls of K̂ slices against the pull at the commit).
#
# Usage: scripts/owners_timing.sh BIN_A BIN_B [RUNS] [-- fit flags]
#   default data: emsf gen --states 20000 --actions 1 --transitions 2000000
#   --seed 5; default flags: --embedded --workers 2 --exchange owners
#   --col-blocks 8 --shard-nnz 200000 --order 32 --iters 10 --tol 0
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,12p' "$0"; exit 2; }
a=$1 b=$2
shift 2
runs=3
if [ $# -gt 0 ] && [ "$1" != "--" ]; then runs=$1; shift; fi
if [ "${1:-}" = "--" ]; then shift; fi
flags=("$@")
if [ ${#flags[@]} -eq 0 ]; then
	flags=(--embedded --workers 2 --exchange owners --col-blocks 8 --shard-nnz 200000 --order 32 --iters 10 --tol 0)
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/emsf-owners-timing.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$a" gen --states 20000 --actions 1 --transitions 2000000 --seed 5 --out "$work/t.csv" --truth "" >/dev/null
declare -a ta tb
for r in $(seq 1 "$runs"); do
	for which in a b; do
		bin=$a
		[ $which = b ] && bin=$b
		s=$(date +%s.%N)
		"$bin" fit --input "$work/t.csv" "${flags[@]}" --quiet --out "$work/$which.arrow" >/dev/null
		t=$(echo "$(date +%s.%N) - $s" | bc)
		echo "run $r $which $t s"
		if [ $which = a ]; then ta+=("$t"); else tb+=("$t"); fi
	done
done
cmp -s "$work/a.arrow" "$work/b.arrow" && echo "models: identical" || echo "models: differ"
med() { printf '%s\n' "$@" | sort -g | awk '{ x[NR] = $1 } END { print x[int((NR + 1) / 2)] }'; }
echo "median: a $(med "${ta[@]}") s, b $(med "${tb[@]}") s"
