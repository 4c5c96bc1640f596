#!/usr/bin/env bash
# ingest_memory.sh — peak RSS of the distributed ingest (emsf data ingest:
# the shards of a dataset built on the workers, bitwise the local fit's),
# per process, with real processes: a nats-server, P `emsf worker` and the
# `emsf data ingest` coordinator, each under /usr/bin/time -v; beside it
# the local ingest (emsf bench --ingest: loadData, what emsf fit does before
# its first iteration) on the same file. Issue 25 item 2; results in
# docs/benchmarks.md, section "Distributed ingest".
#
#   scripts/ingest_memory.sh                 # n = 400 000, 8M transitions, P = 1 3 6
#   PS="1 2" TRANSITIONS=1000000 scripts/ingest_memory.sh
#
# Environment: STATES (400000), TRANSITIONS (8000000), PS ("1 3 6"),
# FORMAT (csv: one file; or parquet: a directory of 8 files), KEEP (a
# directory to keep the data in and reuse it), EXTRA (more flags for emsf
# data ingest, e.g. "--holdout 0.1"). Peak RSS is not disturbed by other
# load on the machine; the seconds are.
set -euo pipefail
cd "$(dirname "$0")/.."

STATES=${STATES:-400000}
TRANSITIONS=${TRANSITIONS:-8000000}
PS=${PS:-1 3 6}
FORMAT=${FORMAT:-csv}
EXTRA=${EXTRA:-}

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
data=${KEEP:-$tmp}
mkdir -p "$data"

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $(go env GOVERSION); load average $(cut -d' ' -f1-3 /proc/loadavg)"
go build -o "$tmp/emsf" ./cmd/emsf
go build -o "$tmp/nats-server" github.com/nats-io/nats-server/v2

if [ "$FORMAT" = parquet ]; then
	# A directory of 8 Parquet files (row groups of 64K rows), read in
	# path order.
	input="$data/t-$STATES-$TRANSITIONS.parquet.d"
	if [ ! -d "$input" ]; then
		mkdir -p "$input.tmp"
		for k in 1 2 3 4 5 6 7 8; do
			"$tmp/emsf" gen --states "$STATES" --transitions $((TRANSITIONS / 8)) --seed "$k" --out "$input.tmp/part-$k.parquet" --truth "" >/dev/null
		done
		mv "$input.tmp" "$input"
	fi
else
	input="$data/t-$STATES-$TRANSITIONS.csv"
	if [ ! -s "$input" ]; then
		"$tmp/emsf" gen --states "$STATES" --transitions "$TRANSITIONS" --seed 1 --out "$input" --truth "" >/dev/null
	fi
fi
echo "data: $input, $(du -smL "$input" | cut -f1) MB, n=$STATES, $TRANSITIONS transitions"

# rss FILE: the peak RSS in MiB that /usr/bin/time -v wrote to FILE.
rss() { awk '/Maximum resident set size/ {printf "%.0f", $6/1024}' "$1"; }
secs() { awk '/Elapsed \(wall clock\)/ {print $NF}' "$1"; }

/usr/bin/time -v -o "$tmp/local.time" "$tmp/emsf" bench --ingest "$input" >"$tmp/local.out"
echo
echo "local ingest (emsf bench --ingest, loadData): peak $(rss "$tmp/local.time") MiB, $(secs "$tmp/local.time")"
sed 's/^/  /' "$tmp/local.out"

printf '\n%-3s %14s %22s %10s %8s  %s\n' P "coordinator MiB" "each worker MiB" "max/(local/P)" seconds "coordinator's summary"
for P in $PS; do
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	url="nats://127.0.0.1:$port"
	"$tmp/nats-server" -a 127.0.0.1 -p "$port" -js -sd "$tmp/js-$P" >"$tmp/nats-$P.log" 2>&1 &
	pids+=($!)
	nats=$!
	for _ in $(seq 100); do
		if (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
		sleep 0.1
	done
	wpids=()
	for k in $(seq "$P"); do
		/usr/bin/time -v -o "$tmp/w-$P-$k.time" "$tmp/emsf" worker --nats "$url" --log-level warn >"$tmp/w-$P-$k.log" 2>&1 &
		wpids+=($!)
		pids+=($!)
	done
	# shellcheck disable=SC2086
	/usr/bin/time -v -o "$tmp/c-$P.time" "$tmp/emsf" data ingest --nats "$url" --input "$input" --min-workers "$P" \
		--wait-workers 2m --log-level warn $EXTRA >"$tmp/c-$P.out"
	# Stop the workers (SIGTERM to each emsf worker, the child of its
	# time): they exit 0 and time reports.
	for t in "${wpids[@]}"; do
		kill -TERM "$(pgrep -P "$t")" 2>/dev/null || true
	done
	for t in "${wpids[@]}"; do
		wait "$t" || true
	done
	kill "$nats" 2>/dev/null || true
	wait "$nats" 2>/dev/null || true
	ws=()
	for k in $(seq "$P"); do
		ws+=("$(rss "$tmp/w-$P-$k.time")")
	done
	max=$(printf '%s\n' "${ws[@]}" | sort -n | tail -1)
	ratio=$(awk -v m="$max" -v l="$(rss "$tmp/local.time")" -v p="$P" 'BEGIN {printf "%.2f", m / (l / p)}')
	printf '%-3s %14s %22s %10s %8s  %s\n' "$P" "$(rss "$tmp/c-$P.time")" "$(IFS=,; echo "${ws[*]}")" "$ratio" "$(secs "$tmp/c-$P.time")" "$(head -1 "$tmp/c-$P.out" | sed 's/.*fingerprint/fingerprint/')"
done
