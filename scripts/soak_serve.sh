#!/usr/bin/env bash
# Soak test of the service mode (issue 29): one nats-server process (JetStream,
# store in a temporary directory), one `emsf serve --nats`, and ROUNDS rounds of
# PUBLISHERS `emsf publish` processes sending PER transitions in all per round
# (each publisher its own file, generated with its own seed by `emsf gen`), with
# a retrain after every round. After each round it prints one line:
#
#   round  rows(M)  nnz  csr_MB  counts_MB  serve_rss_MB  serve_peak_MB  rss/csr \
#     rss-2csr_MB  store_MB  stream_MB  ingest_Mrows/s  retrain_s  rss_after_retrain_MB
#
# rows: transitions published so far; nnz: distinct (state, action, next_state)
# counted (status); csr_MB: 12·nnz + 12·n·u bytes, the fit's CSR of the same
# counts; counts_MB: the count table's own accounting (status counts_bytes;
# "-" for a build without it); serve_rss_MB / serve_peak_MB: VmRSS / VmHWM of emsf serve once the
# round is counted and checkpointed (before the retrain); rss-2csr_MB: what
# the process holds beyond twice the CSR (the bound's fixed part); store_MB: du of the whole JetStream
# store; stream_MB: du of the transitions stream's directory, js_stream_MB the
# bytes JetStream says the stream holds (status, "-" for a build without it;
# files of purged messages can outlive the purge a while); ingest: rows of
# the round / seconds from the publishers' start to serve having counted them
# (stream_seq, before the checkpoint); serve_cpu_us/row and nats_cpu_us/row:
# CPU time (user + system) of emsf serve and of nats-server over that same
# span, per transition (what the load of a shared machine does not change
# much: 1/serve_cpu_us/row is serve's ingest rate on one free core);
# retrain_s: `emsf retrain` request to reply; rss_after_retrain_MB: VmRSS
# after it.
#
#   bash scripts/soak_serve.sh [--rounds 5] [--per 10000000] [--publishers 2]
#        [--states 2000] [--actions 4] [--iters 10] [--bin DIR] [--keep-data DIR]
#        [-- extra serve flags...]
#
# --bin DIR takes emsf and nats-server from DIR (to measure another build with
# the same script); otherwise both are built from this checkout. --keep-data
# DIR keeps (and reuses) the generated transitions there.
set -euo pipefail
rounds=5 per=10000000 pubs=2 states=2000 actions=4 iters=10 bin="" data="" port=${SOAK_PORT:-14555}
extra=()
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) rounds=$2; shift 2 ;;
	--per) per=$2; shift 2 ;;
	--publishers) pubs=$2; shift 2 ;;
	--states) states=$2; shift 2 ;;
	--actions) actions=$2; shift 2 ;;
	--iters) iters=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	--keep-data) data=$2; shift 2 ;;
	--) shift; extra=("$@"); break ;;
	*) echo "soak_serve: unknown argument $1" >&2; exit 2 ;;
	esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$dir"
}
trap cleanup EXIT
if [ -z "$bin" ]; then
	bin=$dir/bin
	mkdir -p "$bin"
	(cd "$root" && go build -o "$bin/emsf" ./cmd/emsf && go build -o "$bin/nats-server" github.com/nats-io/nats-server/v2)
fi
emsf=$bin/emsf
[ -n "$data" ] || data=$dir/data
mkdir -p "$data"
each=$((per / pubs))
for r in $(seq "$rounds"); do
	for p in $(seq "$pubs"); do
		f=$data/r$r-p$p-$each-$states-$actions.arrow
		[ -s "$f" ] || "$emsf" gen --out "$f" --truth "" --transitions "$each" --states "$states" --actions "$actions" \
			--seed $((r * 100 + p)) >/dev/null
	done
done

url=nats://127.0.0.1:$port
"$bin/nats-server" -js -sd "$dir/store" -a 127.0.0.1 -p "$port" >"$dir/nats.log" 2>&1 &
nspid=$!
pids+=("$nspid")
for _ in $(seq 100); do "$emsf" model status x --nats "$url" --timeout 1s 2>&1 | grep -q "no emsf serve" && break; sleep 0.1; done
"$emsf" serve --nats "$url" --name soak --order 8 --iters "$iters" --tol 0 --use-workers no --log-level info "${extra[@]}" \
	>"$dir/serve.out" 2>"$dir/serve.err" &
spid=$!
pids+=("$spid")
for _ in $(seq 200); do "$emsf" model status soak --nats "$url" >/dev/null 2>&1 && break; sleep 0.1; done

field() { sed -n "s/^  \"$1\": \([0-9.e+-]*\).*/\1/p" | head -1; } # top-level keys only (2 spaces)
kb() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # user + system clock ticks
mb() { echo "scale=1; $1 / 1048576" | bc; }
printf "%-5s %8s %10s %8s %9s %12s %13s %7s %14s %9s %9s %11s %14s %15s %13s %9s %20s\n" round "rows(M)" nnz csr_MB counts_MB serve_rss_MB serve_peak_MB rss/csr \
	rss-2csr_MB store_MB stream_MB js_stream_MB "ingest_Mrows/s" serve_cpu_us/row nats_cpu_us/row retrain_s rss_after_retrain_MB
total=0
for r in $(seq "$rounds"); do
	t0=$(date +%s.%N)
	c0=$(cpu "$spid") n0=$(cpu "$nspid")
	ppids=()
	for p in $(seq "$pubs"); do
		"$emsf" publish --nats "$url" --name soak --input "$data/r$r-p$p-$each-$states-$actions.arrow" >"$dir/pub-$r-$p.out" 2>&1 &
		ppids+=($!)
	done
	for p in "${ppids[@]}"; do wait "$p" || { cat "$dir"/pub-"$r"-*.out >&2; exit 1; }; done
	last=$(cat "$dir"/pub-"$r"-*.out | sed -n 's/^stream sequence reached: \([0-9]*\).*/\1/p' | sort -n | tail -1)
	total=$((total + each * pubs))
	while :; do
		st=$("$emsf" model status soak --nats "$url" --timeout 10s)
		seq=$(echo "$st" | field stream_seq)
		[ "${seq:-0}" -ge "$last" ] && break
		sleep 0.05
	done
	t1=$(date +%s.%N)
	c1=$(cpu "$spid") n1=$(cpu "$nspid")
	# The figures below once the counts up to there are checkpointed (the
	# table's buffer merged, the stream purged where the build does that).
	while :; do
		st=$("$emsf" model status soak --nats "$url" --timeout 10s)
		[ "$(echo "$st" | field checkpointed_seq)" -ge "$last" ] && break
		sleep 0.1
	done
	nnz=$(echo "$st" | field nnz)
	csr=$((12 * nnz + 12 * states * actions))
	rss=$(($(kb "$spid" VmRSS) * 1024))
	peak=$(($(kb "$spid" VmHWM) * 1024))
	store=$(du -sb "$dir/store" | cut -f1)
	stream=$(du -sb "$dir/store/jetstream/\$G/streams/EMSF_soak" 2>/dev/null | cut -f1)
	rate=$(echo "scale=3; $each * $pubs / ($t1 - $t0) / 1000000" | bc)
	t2=$(date +%s.%N)
	"$emsf" retrain --nats "$url" --name soak --timeout 60m >"$dir/retrain-$r.out"
	t3=$(date +%s.%N)
	after=$(($(kb "$spid" VmRSS) * 1024))
	counts=$(echo "$st" | field counts_bytes)
	held=$(echo "$st" | sed -n 's/^    "bytes": \([0-9]*\).*/\1/p' | head -1) # status's stream.bytes
	hz=$(getconf CLK_TCK)
	printf "%-5s %8s %10s %8s %9s %12s %13s %7s %14s %9s %9s %11s %14s %15s %13s %9s %20s\n" "$r" "$(echo "scale=1; $total / 1000000" | bc)" "$nnz" \
		"$(mb $csr)" "$([ -n "$counts" ] && mb "$counts" || echo -)" "$(mb $rss)" "$(mb $peak)" "$(echo "scale=2; $rss / $csr" | bc)" \
		"$(mb $((rss - 2 * csr)))" "$(mb "$store")" "$(mb "${stream:-0}")" "$([ -n "$held" ] && mb "$held" || echo -)" \
		"$rate" "$(echo "scale=2; ($c1 - $c0) * 1000000 / $hz / ($each * $pubs)" | bc)" "$(echo "scale=2; ($n1 - $n0) * 1000000 / $hz / ($each * $pubs)" | bc)" \
		"$(echo "scale=1; ($t3 - $t2) / 1" | bc)" "$(mb $after)"
done
kill -TERM "$spid"
t0=$(date +%s.%N)
rc=0
wait "$spid" || rc=$?
t1=$(date +%s.%N)
echo "serve: SIGTERM to exit $(echo "scale=2; ($t1 - $t0) / 1" | bc) s, exit status $rc; ERROR lines in its log: $(grep -c '\[ERROR\]' "$dir/serve.err" || true)"
pids=("$nspid")
