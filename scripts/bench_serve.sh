#!/usr/bin/env bash
# Service-mode throughput: emsf publish sends N transitions to an emsf serve
# (embedded NATS server, 127.0.0.1:PORT), which counts them; then one refit.
# Prints: publish+ingest seconds, transitions/s, retrain seconds, serve's RSS.
#   bash scripts/bench_serve.sh [N=1000000] [PORT=14444]
set -euo pipefail
n=${1:-1000000}
port=${2:-14444}
url=nats://127.0.0.1:$port
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
cd "$(dirname "$0")/.."
go build -o "$dir/emsf" ./cmd/emsf
emsf=$dir/emsf
"$emsf" gen --out "$dir/t.arrow" --truth "" --transitions "$n" --states 2000 --actions 4 >/dev/null
"$emsf" serve --embedded --store "$dir/store" --port "$port" --name bench --order 8 --use-workers no --quiet \
	>"$dir/serve.out" 2>"$dir/serve.err" &
pid=$!
for _ in $(seq 100); do "$emsf" model status bench --nats "$url" >/dev/null 2>&1 && break; sleep 0.1; done
t0=$(date +%s.%N)
"$emsf" publish --nats "$url" --name bench --input "$dir/t.arrow"
while :; do
	st=$("$emsf" model status bench --nats "$url")
	[ "$(echo "$st" | sed -n 's/.*"transitions": \([0-9]*\).*/\1/p')" = "$n" ] && break
	sleep 0.02
done
t1=$(date +%s.%N)
echo "publish + ingest: $(echo "$t1 - $t0" | bc) s ($(echo "$n / ($t1 - $t0)" | bc) transitions/s)"
t0=$(date +%s.%N)
"$emsf" retrain --nats "$url" --name bench | grep -E '"(iterations|seconds)"'
t1=$(date +%s.%N)
echo "retrain request to reply (fit + store + checkpoint): $(echo "$t1 - $t0" | bc) s"
echo "serve RSS: $(ps -o rss= -p $pid) KiB"
