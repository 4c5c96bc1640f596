#!/usr/bin/env bash
# bench_query.sh — issue 27 item 2: exact top-10 queries at n = 10^6, m = 32
# (results in docs/benchmarks.md, "Asking a model").
#
#   scripts/bench_query.sh              # RUNS=3 runs, each: the four measures below
#   RUNS=1 LOAD_SECONDS=10 scripts/bench_query.sh
#
# Each run, one after the other (never two at once: each takes ≈ 1.3 GB):
#   1. emsf query --bench on the true model of `emsf gen --rows local`
#      (structured: every D row on two hidden states, K rows on windows of
#      2n/m states): top-10 queries per CPU second in one goroutine, the
#      index's read depth, the exact scans of K;
#   2. emsf query --bench on the true model of `emsf gen --rows uniform`
#      (unstructured: D rows and K rows dense, every query falls back to
#      the scan): the slowest queries against one scan of K;
#   3. scripts/scan_simd.py: one blocked SIMD scan of an n×m matrix
#      (numpy, OpenBLAS gemv on one thread, float64 and float32) for the
#      yardstick "no query slower than one blocked SIMD scan";
#   4. emsf query --load --embedded on the local model: 16 clients, each
#      its own NATS connection over loopback TCP, closed loop, top-10.
# Then the median of each figure over the runs (CPU-time figures are the
# ones to read on a shared machine: "thread CPU" times each query and each
# scan in its own thread's CPU time, so "slowest query / float64 scan" and
# "/ float32 scan" there are the issue's ratio). Environment: RUNS
# (default 3), LOAD_SECONDS (default 20), WORK (a directory for the two
# 540 MB models, default a temporary one, removed at the end; kept and
# reused when given), BASE (an emsf binary built from another commit, e.g.
# main's: its measures 1 and 2 run too, interleaved with this tree's in
# every run, and get their own medians; it must print the "thread CPU"
# line, which emsf query --bench prints since the float32 shadow).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
LOAD_SECONDS=${LOAD_SECONDS:-20}
PY=/usr/bin/python3
if ! "$PY" -c 'import numpy' 2>/dev/null; then
	echo "bench_query: installing Debian's python3-numpy" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-numpy >/dev/null
fi
if [[ -n ${WORK:-} ]]; then
	mkdir -p "$WORK"
else
	WORK=$(mktemp -d)
	trap 'rm -rf "$WORK"' EXIT
fi
EMSF=$WORK/emsf
go build -o "$EMSF" ./cmd/emsf
for rows in local uniform; do
	if [[ ! -f $WORK/$rows.arrow ]]; then
		"$EMSF" gen --states 1000000 --actions 1 --true-order 32 --rows "$rows" --transitions 1000 --seed 3 \
			--out "$WORK/$rows.csv" --truth "$WORK/$rows.arrow" >/dev/null
	fi
done

rm -f "$WORK"/run.*
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(go version | cut -d' ' -f3), commit $(git rev-parse --short HEAD)"
for r in $(seq 1 "$RUNS"); do
	echo "== run $r"
	"$EMSF" query --model "$WORK/local.arrow" --bench --k 10 | tee "$WORK/run.$r.local"
	"$EMSF" query --model "$WORK/uniform.arrow" --bench --k 10 --queries 200 | tee "$WORK/run.$r.uniform"
	if [[ -n ${BASE:-} ]]; then
		echo "-- BASE $BASE"
		"$BASE" query --model "$WORK/local.arrow" --bench --k 10 | tee "$WORK/run.$r.baselocal"
		"$BASE" query --model "$WORK/uniform.arrow" --bench --k 10 --queries 200 | tee "$WORK/run.$r.baseuniform"
	fi
	OPENBLAS_NUM_THREADS=1 "$PY" scripts/scan_simd.py 1000000 32 10 | tee "$WORK/run.$r.simd"
	"$EMSF" query --load --embedded --model "$WORK/local.arrow" --k 10 --clients 16 \
		--duration "${LOAD_SECONDS}s" --warmup 5s | tee "$WORK/run.$r.load"
	echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
done

# median FILEPATTERN SED-EXPRESSION: the median of one number per run;
# ms FILEPATTERN SED-EXPRESSION: the same for a Go duration (12.3µs,
# 4.5ms, 1.2s), in milliseconds.
median() {
	local pat=$1 expr=$2
	for f in "$WORK"/run.*."$pat"; do sed -nE "$expr" "$f"; done | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'
}
ms() {
	local pat=$1 expr=$2
	for f in "$WORK"/run.*."$pat"; do sed -nE "$expr" "$f"; done | awk '
		/µs$/ {sub(/µs$/, ""); print $1 / 1000; next}
		/ms$/ {sub(/ms$/, ""); print $1; next}
		/ns$/ {sub(/ns$/, ""); print $1 / 1e6; next}
		/s$/ {sub(/s$/, ""); print $1 * 1000; next}' | sort -g | awk '{v[NR]=$1} END {printf "%.3g ms\n", v[int((NR+1)/2)]}'
}
echo "== medians of $RUNS runs"
# thread TAG: the thread-CPU line of emsf query --bench on the uniform model.
thread() {
	local u=$1
	echo "$u thread CPU: query p50 $(ms "$u" 's/^thread CPU time: query p50 ([^ ]+) .*/\1/p'), max $(ms "$u" 's/^thread CPU time: .* max ([^;]+); .*/\1/p');" \
		"scans float64 $(ms "$u" 's/^thread CPU time: .*; a scan, float64 ([^,]+), .*/\1/p'), float32 $(ms "$u" 's/^thread CPU time: .*, float32 ([^ ]+) \(medians.*/\1/p');" \
		"slowest query / float64 scan $(median "$u" 's/^thread CPU time: .*slowest query \/ float64 scan = ([0-9.]+),.*/\1/p')," \
		"/ float32 scan $(median "$u" 's/^thread CPU time: .*slowest query .*, \/ float32 scan = ([0-9.]+); p99.*/\1/p')"
}
if [[ -n ${BASE:-} ]]; then
	echo "BASE local: $(median baselocal 's/.*one goroutine: ([0-9]+) queries per CPU second.*/\1/p') queries per CPU second;" \
		"items scored p50 $(median baselocal 's/.*items scored p50 ([0-9]+) .*/\1/p'), p99 $(median baselocal 's/.*items scored p50 [0-9]+ p99 ([0-9]+).*/\1/p')"
	thread baseuniform
fi
thread uniform
echo "local:   $(median local 's/.*one goroutine: ([0-9]+) queries per CPU second.*/\1/p') queries per CPU second" \
	"($(median local 's/.*Engine.Do "topk"\): ([0-9]+) queries per CPU second.*/\1/p') as JSON requests);" \
	"latency p50 $(ms local 's/.*latency p50 ([^ ]+) p90.*/\1/p'), p99 $(ms local 's/.* p99 ([^ ]+) p99\.9.*/\1/p');" \
	"items scored p50 $(median local 's/.*items scored p50 ([0-9]+) .*/\1/p'), p99 $(median local 's/.*items scored p50 [0-9]+ p99 ([0-9]+).*/\1/p');" \
	"answered by the scan $(median local 's/.*answered by the scan: ([0-9]+).*/\1/p')"
echo "uniform: query p50 $(ms uniform 's/.*latency p50 ([^ ]+) p90.*/\1/p')," \
	"p99 $(ms uniform 's/.* p99 ([^ ]+) p99\.9.*/\1/p'), max $(ms uniform 's/.* max ([^ ;]+)$/\1/p');" \
	"Go scans of K: float64 $(ms uniform 's/.*float64 exact ([^ ]+) .*/\1/p'), float32 $(ms uniform 's/.*\), float32 ([^ ]+) .*/\1/p');" \
	"CPU time: a query $(ms uniform 's/^CPU time: a query ([^ ]+) .*/\1/p'), a float64 scan $(ms uniform 's/^CPU time.*float64 ([^ ,]+),.*/\1/p')," \
	"mean query / float64 scan $(median uniform 's/.*mean query \/ float64 scan = ([0-9.]+).*/\1/p')"
echo "SIMD (numpy, 1 thread): float64 $(median simd 's/numpy scan float64: ([0-9.]+) ms.*/\1/p') ms with the top 10," \
	"gemv alone $(median simd 's/numpy scan float64.*gemv alone ([0-9.]+) ms.*/\1/p') ms;" \
	"float32 $(median simd 's/numpy scan float32: ([0-9.]+) ms.*/\1/p') ms, gemv alone $(median simd 's/numpy scan float32.*gemv alone ([0-9.]+) ms.*/\1/p') ms"
echo "NATS:    $(median load 's/.* ([0-9]+)\/s; latency.*/\1/p') answers/s; p50 $(ms load 's/.*latency p50 ([^ ]+) p90.*/\1/p')," \
	"p99 $(ms load 's/.* p99 ([^ ]+) p99\.9.*/\1/p'), max $(ms load 's/.* max ([^ ]+)$/\1/p')"
