#!/usr/bin/env bash
# query_depth_realdata.sh — how deep the exact top-k index reads on models
# fitted to real data (issue 27 item 2: "report the index's read depth on
# the fitted models of the real-data benchmark too"). For each data set of
# scripts/realdata.py (changelog, gotokens, depgraph) it fits the default
# model of order M (default 32) on train_100.csv and runs
# `emsf query --bench` with the (state, action) pairs drawn from
# test.csv's rows: queries per CPU-second, the index's read depth and how
# many queries fell back to the blocked scan, against one scan of K.
#
#   scripts/realdata.py /tmp/rd && scripts/query_depth_realdata.sh /tmp/rd [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:?usage: scripts/query_depth_realdata.sh DATADIR [OUTDIR]}
out=${2:-$(mktemp -d)}
M=${M:-32}
K=${K:-10}
mkdir -p "$out"
go build -o "$out/emsf" ./cmd/emsf
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); order $M, top-$K, states and actions drawn from test.csv"
for name in changelog gotokens depgraph; do
	[ -f "$data/$name/train_100.csv" ] || { echo "no $data/$name/train_100.csv (scripts/realdata.py $data)" >&2; exit 1; }
	model=$out/$name.arrow
	"$out/emsf" fit --input "$data/$name/train_100.csv" --order "$M" --out "$model" --quiet
	echo "== $name ($(tail -n +2 "$data/$name/train_100.csv" | wc -l) training transitions)"
	"$out/emsf" query --model "$model" --bench --input "$data/$name/test.csv" --k "$K" 2>&1 | tee "$out/$name.txt"
done
echo "results: $out"
