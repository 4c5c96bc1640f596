#!/usr/bin/env bash
# bench_ingest_ab.sh — ingest speed of this checkout against another
# revision (default main), in one run: `emsf bench --ingest` on the same
# generated files, the two binaries interleaved, RUNS times each; the
# median rate of each, their ratio, and this checkout's rate on the
# gzip-compressed CSV and on the CSV read from standard input (which the
# base may not read).
#
#   scripts/bench_ingest_ab.sh                  # 2M transitions, base main
#   BASE=e06be13 TRANSITIONS=10000000 RUNS=5 scripts/bench_ingest_ab.sh
#   IDS=1 scripts/bench_ingest_ab.sh            # states and actions named by ids
#
# Environment: BASE (a git revision, default main), TRANSITIONS (default
# 2000000), STATES (10000), ACTIONS (4), RUNS (3), IDS (default empty:
# integer indices; 1: emsf gen --string-ids, ids such as s00042 and a1).
# Exits 0 whatever the figures; on a shared machine read the ratios, not
# the rates.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=${BASE:-main}
TRANSITIONS=${TRANSITIONS:-2000000}
STATES=${STATES:-10000}
ACTIONS=${ACTIONS:-4}
RUNS=${RUNS:-3}
IDS=${IDS:-}

tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/base" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $(go env GOVERSION); load average $(cut -d' ' -f1-3 /proc/loadavg)"
go build -o "$tmp/new" ./cmd/emsf
git worktree add --detach -q "$tmp/base" "$BASE"
(cd "$tmp/base" && go build -o "$tmp/old" ./cmd/emsf)
echo "base: $BASE ($(git rev-parse --short "$BASE")); new: this checkout ($(git rev-parse --short HEAD)$(git diff --quiet || echo ', modified'))"
for ext in csv arrow parquet; do
	"$tmp/new" gen --states "$STATES" --actions "$ACTIONS" --transitions "$TRANSITIONS" --seed 1 ${IDS:+--string-ids} --out "$tmp/t.$ext" --truth "" >/dev/null
done
gzip -k "$tmp/t.csv"

# rate BIN FILE [stdin]: the Mtransitions/s that emsf bench --ingest prints.
rate() {
	local out
	if [ "${3:-}" = stdin ]; then
		out=$("$1" bench --ingest - <"$2")
	else
		out=$("$1" bench --ingest "$2")
	fi
	sed -E 's/.*: ([0-9.]+)M transitions\/s.*/\1/' <<<"$out"
}
median() { sort -n | sed -n "$(((RUNS + 1) / 2))p"; }

printf '%-22s %12s %12s %8s\n' input "base M/s" "new M/s" new/base
for ext in csv arrow parquet; do
	: >"$tmp/old.r"
	: >"$tmp/new.r"
	for _ in $(seq "$RUNS"); do
		rate "$tmp/old" "$tmp/t.$ext" >>"$tmp/old.r"
		rate "$tmp/new" "$tmp/t.$ext" >>"$tmp/new.r"
	done
	o=$(median <"$tmp/old.r")
	n=$(median <"$tmp/new.r")
	printf '%-22s %12s %12s %8s   (runs: %s | %s)\n' "$ext" "$o" "$n" "$(awk -v a="$n" -v b="$o" 'BEGIN {printf "%.2f", a / b}')" \
		"$(paste -sd' ' "$tmp/old.r")" "$(paste -sd' ' "$tmp/new.r")"
done
for what in csv.gz "csv on stdin" "csv.gz on stdin"; do
	: >"$tmp/new.r"
	for _ in $(seq "$RUNS"); do
		case $what in
		csv.gz) rate "$tmp/new" "$tmp/t.csv.gz" >>"$tmp/new.r" ;;
		"csv on stdin") rate "$tmp/new" "$tmp/t.csv" stdin >>"$tmp/new.r" ;;
		*) rate "$tmp/new" "$tmp/t.csv.gz" stdin >>"$tmp/new.r" ;;
		esac
	done
	printf '%-22s %12s %12s %8s   (runs: %s)\n' "$what" - "$(median <"$tmp/new.r")" - "$(paste -sd' ' "$tmp/new.r")"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
