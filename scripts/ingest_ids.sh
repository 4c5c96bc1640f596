#!/usr/bin/env bash
# ingest_ids.sh: what reading user ids costs the distributed ingest. The
# same transitions are generated twice (emsf gen, one seed): states and
# actions as integers, and as ids (--string-ids). Then, on a fresh
# nats-server and P `emsf worker` processes, `emsf data ingest` reads
# each file in turn, RUNS times interleaved; it prints each run's wall
# time and the coordinator's log of the phases (the vocabulary phase's
# steps: sample, scan, merge, number), and the median per side.
#
#   scripts/ingest_ids.sh                        # n = 400000, 8M transitions, P = 2
#   STATES=100000 TRANSITIONS=2000000 P=3 RUNS=3 scripts/ingest_ids.sh
#
# Environment: STATES, TRANSITIONS, P, RUNS (3), KEEP (a directory to keep
# and reuse the generated files), BIN (a directory with emsf and
# nats-server; default: built from this tree).
set -euo pipefail
cd "$(dirname "$0")/.."
STATES=${STATES:-400000}
TRANSITIONS=${TRANSITIONS:-8000000}
P=${P:-2}
RUNS=${RUNS:-3}
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
bin=${BIN:-$tmp/bin}
if [ -z "${BIN:-}" ]; then
	mkdir -p "$bin"
	go build -o "$bin/emsf" ./cmd/emsf
	go build -o "$bin/nats-server" github.com/nats-io/nats-server/v2
fi
data=${KEEP:-$tmp}
mkdir -p "$data"
for side in int ids; do
	f="$data/$side-$STATES-$TRANSITIONS.csv"
	if [ ! -s "$f" ]; then
		flag=""
		[ "$side" = ids ] && flag=--string-ids
		"$bin/emsf" gen --states "$STATES" --actions 1 --transitions "$TRANSITIONS" --seed 7 $flag --out "$f" --truth "$tmp/truth-$side.arrow" >/dev/null 2>&1
	fi
done
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); n=$STATES, $TRANSITIONS transitions, P=$P"
port=$((20000 + RANDOM % 20000))
"$bin/nats-server" -js -sd "$tmp/js" -p "$port" >"$tmp/nats.log" 2>&1 &
pids+=($!)
sleep 1
url=nats://127.0.0.1:$port
for k in $(seq "$P"); do
	"$bin/emsf" worker --nats "$url" --log-level warn >"$tmp/worker-$k.log" 2>&1 &
	pids+=($!)
done
declare -A times
for run in $(seq "$RUNS"); do
	for side in int ids; do
		f="$data/$side-$STATES-$TRANSITIONS.csv"
		t0=$(date +%s.%N)
		"$bin/emsf" data ingest --nats "$url" --min-workers "$P" --input "$f" >"$tmp/ingest.out" 2>"$tmp/ingest.log"
		t=$(echo "$(date +%s.%N) - $t0" | bc)
		times[$side]="${times[$side]:-} $t"
		printf '%s run %d: %.2f s  %s\n' "$side" "$run" "$t" "$(head -1 "$tmp/ingest.out" | sed 's/^dataset [^:]*: //')"
		grep -h -E 'vocabulary:|pass 1 done|pass 2 done' "$tmp/ingest.log" | sed 's/^[^ ]* \[INFO\]  /    /' | cut -c1-200
	done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mi=$(echo "${times[int]}" | median)
md=$(echo "${times[ids]}" | median)
printf 'median: integers %.2f s, ids %.2f s: ids / integers = %.2f\n' "$mi" "$md" "$(echo "$md / $mi" | bc -l)"
