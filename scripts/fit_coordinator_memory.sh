#!/usr/bin/env bash
# fit_coordinator_memory.sh — peak RSS of each process of a cluster fit
# from metadata (`emsf fit --nats` on a dataset: the workers ingest it, cut
# the shards, draw the init and hold the model; the coordinator reads no
# data), at n and 4n: a nats-server, P `emsf worker` processes and the
# coordinator, each under /usr/bin/time -v. Issue 25 item 1 (the
# coordinator's peak must not grow with n or nnz); results in
# docs/scaling.md, "The coordinator of a fit from metadata".
#
#   scripts/fit_coordinator_memory.sh
#   SIZES="100000:2000000" P=3 CHECK=1 scripts/fit_coordinator_memory.sh
#
# Environment: SIZES ("100000:2000000 400000:8000000", states:transitions),
# P (2 workers), ORDER (16), ITERS (3), KEEP (a directory to keep the data
# in and reuse it), CHECK=1 (also run the local `emsf fit --plain` and
# compare the files byte for byte). Peak RSS is not disturbed by other
# load on the machine; the seconds are.
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${SIZES:-100000:2000000 400000:8000000}
P=${P:-2}
ORDER=${ORDER:-16}
ITERS=${ITERS:-3}
CHECK=${CHECK:-0}

tmp=$(mktemp -d)
pids=()
cleanup() {
	# The workers run under time: end each emsf (the child), then time.
	for p in "${pids[@]}"; do
		kill "$(pgrep -P "$p")" 2>/dev/null || true
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

rss() { awk '/Maximum resident set size/ {printf "%.0f", $6/1024}' "$1"; }
secs() { awk '/Elapsed \(wall clock\)/ {print $NF}' "$1"; }

printf '%-8s %-10s %-3s %16s %18s %10s %9s  %s\n' n transitions P "coordinator MiB" "each worker MiB" "local MiB" seconds "file"
for size in $SIZES; do
	n=${size%%:*}
	tr=${size##*:}
	input="$data/t-$n-$tr.csv"
	if [ ! -s "$input" ]; then
		"$tmp/emsf" gen --states "$n" --transitions "$tr" --seed 1 --out "$input" --truth "" >/dev/null
	fi
	args=(fit --input "$input" --order "$ORDER" --iters "$ITERS" --tol 0 --plain --seed 1)
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	url="nats://127.0.0.1:$port"
	"$tmp/nats-server" -a 127.0.0.1 -p "$port" -js -sd "$tmp/js-$n" >"$tmp/nats-$n.log" 2>&1 &
	nats=$!
	pids+=($nats)
	for _ in $(seq 100); do
		if (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
		sleep 0.1
	done
	wpids=()
	for k in $(seq "$P"); do
		/usr/bin/time -v -o "$tmp/w-$n-$k.time" "$tmp/emsf" worker --nats "$url" --log-level warn >"$tmp/w-$n-$k.log" 2>&1 &
		wpids+=($!)
		pids+=($!)
	done
	/usr/bin/time -v -o "$tmp/c-$n.time" "$tmp/emsf" "${args[@]}" --nats "$url" --min-workers "$P" --wait-workers 2m \
		--out "$tmp/cluster-$n.arrow" >"$tmp/c-$n.out" 2>&1 || { cat "$tmp/c-$n.out"; exit 1; }
	grep -q "cluster fit from metadata" "$tmp/c-$n.out" || { echo "the fit did not run from metadata:"; cat "$tmp/c-$n.out"; exit 1; }
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
		ws+=("$(rss "$tmp/w-$n-$k.time")")
	done
	lmib=- same=-
	if [ "$CHECK" = 1 ]; then
		/usr/bin/time -v -o "$tmp/l-$n.time" "$tmp/emsf" "${args[@]}" --quiet --out "$tmp/local-$n.arrow" >/dev/null
		lmib=$(rss "$tmp/l-$n.time")
		same=differs
		if cmp -s "$tmp/local-$n.arrow" "$tmp/cluster-$n.arrow"; then same="= local"; fi
	fi
	printf '%-8s %-10s %-3s %16s %18s %10s %9s  %s\n' "$n" "$tr" "$P" "$(rss "$tmp/c-$n.time")" "$(IFS=,; echo "${ws[*]}")" "$lmib" "$(secs "$tmp/c-$n.time")" "$same"
	rm -rf "$tmp/js-$n"
done
