#!/usr/bin/env bash
# bench_goals.sh — every speed goal of issue 13 ("one node at full speed") in
# one run on this machine, each beside its peer, and a last table that says
# which goals the run met:
#
#   1. ingest: scripts/bench_ingest.sh (10M transitions; CSV against pandas
#      read_csv + groupby, >= 10x; Arrow and Parquet >= 30M transitions/s);
#   2. the DRAM-regime iteration: emsf bench at n = 10^6, 20M nonzeros,
#      m = 32, float64 and float32 (<= 60 ns per nonzero on one goroutine,
#      <= 30 wall on two, float64);
#      Beside it, the memory floor of the same access pattern on this
#      machine in the same minutes (scripts/dram_floor.c, run just before
#      and just after emsf's float64 figures, where a C compiler is
#      installed): the host moves both by up to 2x from minute to minute,
#      and emsf / floor says how far from the machine's limit emsf is;
#   3. the in-cache iteration against scikit-learn's KL-NMF:
#      scripts/bench_compare.sh at n = 20 000 (>= 40x).
#
#   scripts/bench_goals.sh
#   KEEP=/tmp/emsf-bench scripts/bench_goals.sh   # keep and reuse the data files
#
# Environment: KEEP (passed to bench_ingest.sh), ITERS (emsf bench iterations,
# default 5). Exits 0 whether or not the goals are met. docs/benchmarks.md
# records the runs.
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${ITERS:-5}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $(go env GOVERSION); load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%FT%TZ)"

echo
echo "== 1. ingest (scripts/bench_ingest.sh)"
scripts/bench_ingest.sh | tee "$tmp/ingest.txt"

echo
echo "== 2. DRAM regime (emsf bench --states 1000000 --per-row 20 --iters $ITERS)"
go build -o "$tmp/emsf" ./cmd/emsf
floor=""
if cc -O2 -mavx2 -mfma -pthread scripts/dram_floor.c -o "$tmp/dram_floor" 2>"$tmp/cc.txt"; then
	floor="$tmp/dram_floor"
else
	echo "(no memory floor: scripts/dram_floor.c did not build: $(head -1 "$tmp/cc.txt"))"
fi
# probe NAME: the memory floor now (scripts/dram_floor.c), kept as NAME.
probe() { [ -z "$floor" ] || "$floor" 1000000 20 3 | tee "$tmp/floor-$1.txt"; }
probe before
for p in float64 float32; do
	echo "-- precision $p"
	"$tmp/emsf" bench --states 1000000 --per-row 20 --iters "$ITERS" --precision "$p" | tee "$tmp/large-$p.txt"
	[ "$p" != float64 ] || probe after
done

echo
echo "== 3. in cache against scikit-learn (scripts/bench_compare.sh, bar 40x)"
BAR=40 scripts/bench_compare.sh | tee "$tmp/compare.txt"

# ns/nonzero of emsf bench's row (workers, loglik false) in FILE.
large() { awk -v w="$2" '$1 == w && $2 == "false" {print $4}' "$1"; }
# verdict VALUE OP BOUND: met or MISSED.
verdict() { awk -v v="$1" -v b="$3" -v op="$2" 'BEGIN {ok = (op == ">=") ? v + 0 >= b : v + 0 <= b; print ok ? "met" : "MISSED"}'; }

csv=$(sed -n 's/^CSV: emsf \/ pandas = \([0-9.]*\)x.*/\1/p' "$tmp/ingest.txt")
arrow=$(sed -n 's/^arrow: \([0-9.]*\)M.*/\1/p' "$tmp/ingest.txt")
parquet=$(sed -n 's/^parquet: \([0-9.]*\)M.*/\1/p' "$tmp/ingest.txt")
l1=$(large "$tmp/large-float64.txt" 1)
l2=$(large "$tmp/large-float64.txt" 2)
f1=$(large "$tmp/large-float32.txt" 1)
f2=$(large "$tmp/large-float32.txt" 2)
# The floor on T threads: the mean of the probes before and after.
fl() { cat "$tmp"/floor-*.txt 2>/dev/null | awk -v t="$1" '$1 == "floor," && $2 == t {s += $(NF - 1); k++} END {if (k) printf "%.1f", s / k}'; }
fl1=$(fl 1)
fl2=$(fl 2)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b}'; }
sk=$(sed -n 's/^best Go\/sklearn wall-time speed-up without loglik: \([0-9.]*\)x.*/\1/p' "$tmp/compare.txt")

echo
echo "== goals (issue 13), this run; load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-52s %12s %8s\n' goal measured verdict
printf '%-52s %11sx %8s\n' "CSV ingest >= 10x pandas (wall)" "$csv" "$(verdict "$csv" '>=' 10)"
printf '%-52s %10sM/s %8s\n' "Arrow ingest >= 30M transitions/s" "$arrow" "$(verdict "$arrow" '>=' 30)"
printf '%-52s %10sM/s %8s\n' "Parquet ingest >= 30M transitions/s" "$parquet" "$(verdict "$parquet" '>=' 30)"
printf '%-52s %9s ns %8s\n' "n=10^6 float64, 1 goroutine <= 60 ns/nonzero" "$l1" "$(verdict "$l1" '<=' 60)"
printf '%-52s %9s ns %8s\n' "n=10^6 float64, 2 goroutines <= 30 ns/nonzero wall" "$l2" "$(verdict "$l2" '<=' 30)"
if [ -n "$fl1" ]; then
	printf '%-52s %9s ns %8s\n' "  memory floor now, 1 thread (dram_floor.c)" "$fl1" "x$(ratio "$l1" "$fl1")"
	printf '%-52s %9s ns %8s\n' "  memory floor now, 2 threads" "$fl2" "x$(ratio "$l2" "$fl2")"
fi
printf '%-52s %9s ns %8s\n' "n=10^6 float32, 1 goroutine (beside float64)" "$f1" ""
printf '%-52s %9s ns %8s\n' "n=10^6 float32, 2 goroutines" "$f2" ""
printf '%-52s %11sx %8s\n' "n=20 000 >= 40x scikit-learn per iteration" "$sk" "$(verdict "$sk" '>=' 40)"
