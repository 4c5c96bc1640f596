#!/usr/bin/env bash
# verify_cost.sh — what --verify costs a cluster fit: the same fit with
# --verify 0 and with --verify RATE (default 0.02: the sampled tasks
# computed again on another worker), alternated ROUNDS times (default 3),
# on an embedded cluster of P in-process workers (default 2), with
# EXCHANGE (default coordinator; or owners). Prints each run's wall
# seconds and the median ratio; both fits must write the same model
# (cmp). Issue 26 item 3.
#
#   scripts/verify_cost.sh
#   N=100000 T=2000000 P=3 RATE=0.05 ROUNDS=5 EXCHANGE=owners scripts/verify_cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-50000}
T=${T:-1000000}
P=${P:-2}
RATE=${RATE:-0.02}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-10}
EXCHANGE=${EXCHANGE:-coordinator}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/emsf" ./cmd/emsf
"$tmp/emsf" gen --states "$N" --transitions "$T" --seed 1 --out "$tmp/t.csv" --truth "" >/dev/null
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); n=$N, $T transitions, P=$P, $ITERS iterations, --exchange $EXCHANGE"
run() {
	local v=$1 out=$2
	local t0 t1
	t0=$(date +%s.%N)
	"$tmp/emsf" fit --input "$tmp/t.csv" --order 16 --iters "$ITERS" --tol 0 --plain --seed 1 --embedded --workers "$P" \
		--exchange "$EXCHANGE" --verify "$v" --out "$out" --quiet >/dev/null
	t1=$(date +%s.%N)
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }'
}
ratios=()
for r in $(seq 1 "$ROUNDS"); do
	a=$(run 0 "$tmp/a.arrow")
	b=$(run "$RATE" "$tmp/b.arrow")
	cmp "$tmp/a.arrow" "$tmp/b.arrow"
	ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')
	ratios+=("$ratio")
	echo "round $r: --verify 0: ${a}s, --verify $RATE: ${b}s, ratio $ratio (same model)"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END { printf "median ratio %s over %d rounds\n", v[int((NR + 1) / 2)], NR }'
