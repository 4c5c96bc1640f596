#!/usr/bin/env bash
# bench_query_realdata.sh — issue 27 item 2 on the fitted real-data models:
# the cost of a top-10 query against one float64 scan of K, this tree's
# binary and another's (BASE, e.g. main's) interleaved in every run
# (results in docs/benchmarks.md, "Asking a model").
#
#   scripts/query_depth_realdata.sh /tmp/rd /tmp/qdepth     # fits the models
#   BASE=/tmp/emsf-main RUNS=3 scripts/bench_query_realdata.sh /tmp/qdepth /tmp/rd
#
# For each set (changelog, gotokens, depgraph), RUNS (default 3) runs of
# `emsf query --model MODELDIR/SET.arrow --bench --input DATADIR/SET/test.csv
# --k 10`, then per binary the median over the runs of the thread-CPU
# figures (each query and each scan timed in its own thread's CPU time):
# p99 query / float64 scan, slowest query / float64 scan, mean query /
# float64 scan (CPU time), how the scanned queries were answered, and the
# slowest query timed again like the scans (the slowest 1 % of the
# queries, median of 3 each; the tree's binary only, if BASE's has no
# such line) against the float64 and the float32 scan.
set -euo pipefail
cd "$(dirname "$0")/.."
models=${1:?usage: scripts/bench_query_realdata.sh MODELDIR DATADIR}
data=${2:?usage: scripts/bench_query_realdata.sh MODELDIR DATADIR}
RUNS=${RUNS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/emsf" ./cmd/emsf
bins=(tree)
if [[ -n ${BASE:-} ]]; then
	bins+=(base)
fi
bin() { if [[ $1 == tree ]]; then echo "$work/emsf"; else echo "$BASE"; fi; }
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD)${BASE:+, BASE $BASE}"
for r in $(seq 1 "$RUNS"); do
	for set in changelog gotokens depgraph; do
		for b in "${bins[@]}"; do
			"$(bin "$b")" query --model "$models/$set.arrow" --bench --input "$data/$set/test.csv" --k 10 >"$work/$set.$b.$r"
		done
	done
	echo "run $r done, load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
# med SET BIN SED-EXPRESSION: the median and the range of one number per run.
med() {
	for f in "$work/$1.$2".*; do sed -nE "$3" "$f"; done | sort -g |
		awk '{v[NR]=$1} END {printf "%s (%s–%s)", v[int((NR+1)/2)], v[1], v[NR]}'
}
for set in changelog gotokens depgraph; do
	for b in "${bins[@]}"; do
		echo "$set $b: p99 query / float64 scan $(med "$set" "$b" 's/^thread CPU time: .*p99 query \/ float64 scan = ([0-9.]+),.*/\1/p');" \
			"slowest $(med "$set" "$b" 's/^thread CPU time: .*slowest query \/ float64 scan = ([0-9.]+),.*/\1/p');" \
			"mean $(med "$set" "$b" 's/^CPU time: .*mean query \/ float64 scan = ([0-9.]+).*/\1/p');" \
			"$(sed -nE 's/.*answered by the scan: ([0-9]+) .*%\), (.*)/scanned \1, \2/p' "$work/$set.$b.1")"
		if grep -q '^the slowest .* timed again' "$work/$set.$b.1"; then
			echo "$set $b: slowest query timed again / float64 scan $(med "$set" "$b" 's/^the slowest .* timed again.* \/ float64 scan = ([0-9.]+),.*/\1/p')," \
				"/ float32 scan $(med "$set" "$b" 's/^the slowest .* timed again.* \/ float32 scan = ([0-9.]+).*/\1/p')"
		fi
	done
done
