#!/usr/bin/env bash
# memproof.sh: run a cluster fit with every process under a hard memory
# limit and check that its model is byte-identical to a local fit run
# without limits (issue 25 item 5; specs/distributed-ingest.md §4.7).
#
# It first runs `emsf fit` locally (no cluster, no limit) under
# /usr/bin/time -v: its peak resident set L and its model are the
# reference. Then, for each cluster size P, it starts a fresh nats-server
# (JetStream), P `emsf worker` processes and the coordinator (`emsf fit
# --nats`), each process in its own memory cgroup (v1: memory.limit_in_bytes,
# v2: memory.max) and under its own /usr/bin/time -v, and prints per
# process: the limit, the peak RSS, the cgroup's max usage and failcnt (v1)
# or peak and oom events (v2), and the exit status; then the JetStream
# store's peak bytes (stream state, sampled every 0.5 s), and whether the
# model equals the local one byte for byte. An OOM kill fails the run.
#
# Limits:
#   worker:      --worker-limit target (default): 1.5·L/P + 150 MB, the
#                issue's per-worker bound (P = 1: L + 150 MB); or a
#                fraction of L (e.g. 0.4), or bytes (e.g. 800M, 2G)
#   coordinator: --coord-limit BYTES (default 256M, the issue's target: a
#                cluster fit from metadata reads no data and holds no part
#                of the model), or auto: 1.25·L, what a coordinator that
#                reads the data itself needs (string ids, quality flags);
#                the target (--coord-target, default 256M) is printed
#                beside it
#
# Both fits are --plain (plain EM stopped by --iters, what a cluster fit
# from metadata runs), so the two files can be compared byte for byte; the
# script fails when the coordinator did not run from metadata (its log
# names the reason).
#
# Usage: scripts/memproof.sh [flags]   (root, for the cgroups)
#   --states N --transitions T --actions U --order M --iters I --seed S
#                 the data (emsf gen) and the fit (default 400000, 8000000,
#                 1, 32, 3, 7)
#   --input FILE  fit this file instead of generated data
#   --workers "1 3 6"   cluster sizes P, one run each
#   --fit-args "..."    more emsf fit flags for both fits (e.g. "--col-cells 2")
#   --worker-args "..." more emsf worker flags
#   --worker-env "..."  environment of the workers (e.g. "GOGC=50")
#   --limit cgroup|prlimit|none   how to limit (default cgroup; prlimit --as
#                 limits address space, not RSS: a smoke check only)
#   --worker-limit target|FRACTION|BYTES, --coord-limit auto|BYTES,
#   --coord-target BYTES  (see above)
#   --memprofile  workers and coordinator write mem.tsv and heap profiles
#                 (emsf --memprofile-dir) under OUT/prof-P/
#   --bin DIR     emsf and nats-server from DIR (default: built from this tree)
#   --local DIR   reuse the local fit of an earlier run's OUT (its model and
#                 peak) instead of running it again (same data and flags)
#   --out DIR     results (default: a new directory under $TMPDIR)
#
# The issue's target size:
#   sudo scripts/memproof.sh --states 2000000 --transitions 40000000 --order 32 \
#       --workers 4 --worker-limit 0.4 --coord-limit 256M --fit-args "--col-cells 2"
#
# Output: OUT/summary.tsv (one line per process and run) and the table on
# stdout; OUT/logs/. Exit 1 when a model differs, a process fails or is
# killed, or a cgroup hit its limit with an OOM kill.
set -euo pipefail

states=400000
transitions=8000000
actions=1
order=32
iters=3
seed=7
input=
workers="1 3 6"
fit_args=
worker_args=
worker_env=
limit=cgroup
worker_limit=target
coord_limit=256M
coord_target=256M
memprofile=
local=
bin=
out=
while [ $# -gt 0 ]; do
	case $1 in
	--states) states=$2; shift ;;
	--transitions) transitions=$2; shift ;;
	--actions) actions=$2; shift ;;
	--order) order=$2; shift ;;
	--iters) iters=$2; shift ;;
	--seed) seed=$2; shift ;;
	--input) input=$2; shift ;;
	--workers) workers=$2; shift ;;
	--fit-args) fit_args=$2; shift ;;
	--worker-args) worker_args=$2; shift ;;
	--worker-env) worker_env=$2; shift ;;
	--limit) limit=$2; shift ;;
	--worker-limit) worker_limit=$2; shift ;;
	--coord-limit) coord_limit=$2; shift ;;
	--coord-target) coord_target=$2; shift ;;
	--memprofile) memprofile=1 ;;
	--bin) bin=$2; shift ;;
	--local) local=$2; shift ;;
	--out) out=$2; shift ;;
	-h | --help) sed -n '2,50p' "$0"; exit 0 ;;
	*) echo "memproof: unknown flag $1" >&2; exit 2 ;;
	esac
	shift
done

die() { echo "memproof: $*" >&2; exit 2; }
log() { echo "memproof: $*" >&2; }

# bytes converts 800M, 2G, 1.5G, 123456 into bytes.
bytes() {
	awk -v s="$1" 'BEGIN {
		u = toupper(substr(s, length(s))); v = s + 0; m = 1
		if (u == "K") m = 1024; else if (u == "M") m = 1024^2; else if (u == "G") m = 1024^3
		printf "%.0f\n", v * m }'
}
mib() { awk -v b="$1" 'BEGIN { printf "%.0f", b / 1048576 }'; }

case $limit in cgroup | prlimit | none) ;; *) die "--limit $limit: want cgroup, prlimit or none" ;; esac
command -v /usr/bin/time >/dev/null || die "needs /usr/bin/time (apt-get install time)"
command -v curl >/dev/null && command -v jq >/dev/null || die "needs curl and jq"

cgv=
cgroot=
if [ "$limit" = cgroup ]; then
	[ "$(id -u)" = 0 ] || die "--limit cgroup needs root (or --limit prlimit|none)"
	if [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
		cgv=1 cgroot=/sys/fs/cgroup/memory
	elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
		cgv=2 cgroot=/sys/fs/cgroup
		grep -qw memory "$cgroot/cgroup.subtree_control" || echo +memory >"$cgroot/cgroup.subtree_control"
	else
		die "no cgroup memory controller (v1 /sys/fs/cgroup/memory or v2 with memory): use --limit prlimit|none"
	fi
fi

root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$out" ]; then out=$(mktemp -d "${TMPDIR:-/tmp}/emsf-memproof.XXXXXX"); fi
mkdir -p "$out/logs"
out=$(cd "$out" && pwd)
if [ -z "$bin" ]; then
	bin=$out/bin
	mkdir -p "$bin"
	log "building emsf and nats-server into $bin"
	(cd "$root" && go build -o "$bin/emsf" ./cmd/emsf && go build -o "$bin/nats-server" github.com/nats-io/nats-server/v2)
fi
emsf=$bin/emsf
nats_server=$bin/nats-server
[ -x "$emsf" ] && [ -x "$nats_server" ] || die "no emsf or nats-server in $bin"

pids=()
cgroups=()
cleanup() {
	local rc=$?
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	for g in "${cgroups[@]}"; do rmdir "$g" 2>/dev/null || true; done
	exit "$rc"
}
trap cleanup EXIT INT TERM

free_port() {
	local p
	for _ in $(seq 1 100); do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	die "no free port"
}

# limited NAME LIMIT_BYTES TIMEFILE CMD...: runs CMD under /usr/bin/time -v
# (into TIMEFILE) in cgroup NAME limited to LIMIT_BYTES (0: no limit), in the
# foreground; the caller backgrounds it.
limited() {
	local name=$1 lim=$2 tf=$3
	shift 3
	local g=
	if [ "$limit" = cgroup ]; then
		g=$cgroot/emsf-memproof-$$-$name
		mkdir -p "$g"
		if [ "$cgv" = 1 ]; then
			if [ "$lim" -gt 0 ]; then
				echo "$lim" >"$g/memory.limit_in_bytes"
				[ -f "$g/memory.memsw.limit_in_bytes" ] && echo "$lim" >"$g/memory.memsw.limit_in_bytes" 2>/dev/null || true
			fi
		else
			[ "$lim" -gt 0 ] && echo "$lim" >"$g/memory.max"
			[ -f "$g/memory.swap.max" ] && echo 0 >"$g/memory.swap.max"
		fi
		exec sh -c 'echo $$ >"$1/cgroup.procs"; shift; exec "$@"' sh "$g" /usr/bin/time -v -o "$tf" "$@"
	elif [ "$limit" = prlimit ] && [ "$lim" -gt 0 ]; then
		exec /usr/bin/time -v -o "$tf" prlimit --as="$lim" "$@"
	else
		exec /usr/bin/time -v -o "$tf" "$@"
	fi
}

cgpath() { echo "$cgroot/emsf-memproof-$$-$1"; }

# peak_rss TIMEFILE: bytes of "Maximum resident set size".
peak_rss() { awk -F': ' '/Maximum resident set size/ { printf "%.0f\n", $2 * 1024 }' "$1" 2>/dev/null || echo 0; }
exit_of() { awk -F': ' '/Exit status/ { print $2 } /Command terminated by signal/ { print "signal " $NF }' "$1" 2>/dev/null | tail -1; }

# cgstat NAME: "max_usage failcnt" (v1) or "peak oom_kill" (v2), then removes the group.
cgstat() {
	[ "$limit" = cgroup ] || { echo "- -"; return; }
	local g
	g=$(cgpath "$1")
	if [ "$cgv" = 1 ]; then
		echo "$(cat "$g/memory.max_usage_in_bytes") $(cat "$g/memory.failcnt")"
	else
		echo "$(cat "$g/memory.peak" 2>/dev/null || echo -) $(awk '/^oom_kill / { print $2 }' "$g/memory.events")"
	fi
	rmdir "$g" 2>/dev/null || true
}

summary=$out/summary.tsv
printf 'run\tprocess\tlimit_bytes\ttarget_bytes\tpeak_rss_bytes\tcgroup_max_bytes\tcgroup_fail\texit\n' >"$summary"
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$summary"; }

if [ -z "$input" ]; then
	input=$out/data.csv
	if [ ! -f "$input" ]; then
		log "generating n=$states, $transitions transitions, u=$actions (seed $seed)"
		"$emsf" gen --states "$states" --actions "$actions" --transitions "$transitions" --seed "$seed" \
			--out "$input" --truth "" >/dev/null
	fi
fi
# shellcheck disable=SC2206
extra=($fit_args)
# shellcheck disable=SC2206
wextra=($worker_args)
# shellcheck disable=SC2206
wenv=(env $worker_env)
fit=(fit --input "$input" --order "$order" --iters "$iters" --tol 0 --plain --seed 1 "${extra[@]}")

if [ -n "$local" ]; then
	log "local fit of $local"
	cp "$local/local.arrow" "$out/local.arrow"
	cp "$local/logs/local.time" "$out/logs/local.time"
else
	log "local fit (no limit)"
	prof_env=()
	if [ -n "$memprofile" ]; then prof_env=(env EMSF_MEMPROFILE_DIR="$out/prof-local"); fi
	"${prof_env[@]}" /usr/bin/time -v -o "$out/logs/local.time" "$emsf" "${fit[@]}" --out "$out/local.arrow" \
		>"$out/logs/local.log" 2>&1 || { cat "$out/logs/local.log" >&2; die "the local fit failed"; }
fi
L=$(peak_rss "$out/logs/local.time")
row local local-fit 0 0 "$L" - - "$(exit_of "$out/logs/local.time")"
log "local fit: peak RSS $(mib "$L") MiB"

coord_lim=$(if [ "$coord_limit" = auto ]; then awk -v l="$L" 'BEGIN { printf "%.0f", 1.25 * l }'; else bytes "$coord_limit"; fi)
coord_tgt=$(bytes "$coord_target")

fail=0
for P in $workers; do
	case $worker_limit in
	target) wl=$(awk -v l="$L" -v p="$P" 'BEGIN { printf "%.0f", (p == 1 ? l : 1.5 * l / p) + 150 * 1048576 }') ;;
	0.* | 1.* | [0-9].[0-9]*) wl=$(awk -v l="$L" -v f="$worker_limit" 'BEGIN { printf "%.0f", f * l }') ;;
	*) wl=$(bytes "$worker_limit") ;;
	esac
	wt=$(awk -v l="$L" -v p="$P" 'BEGIN { printf "%.0f", (p == 1 ? l : 1.5 * l / p) + 150 * 1048576 }')
	run=P$P
	log "$run: $P workers limited to $(mib "$wl") MiB each (target $(mib "$wt")), coordinator to $(mib "$coord_lim") MiB (target $(mib "$coord_tgt"))"
	store=$out/store-$run
	rm -rf "$store"
	port=$(free_port)
	mon=$(free_port)
	cat >"$out/nats-$run.conf" <<CONF
listen: 127.0.0.1:$port
http: 127.0.0.1:$mon
max_payload: 1MB
jetstream {
  store_dir: "$store"
  max_memory_store: 256MB
  max_file_store: 16GB
}
CONF
	"$nats_server" -c "$out/nats-$run.conf" >"$out/logs/nats-$run.log" 2>&1 &
	npid=$!
	pids+=("$npid")
	for _ in $(seq 1 150); do
		curl -sf "http://127.0.0.1:$mon/healthz" >/dev/null 2>&1 && break
		sleep 0.2
	done
	url=nats://127.0.0.1:$port
	wpids=()
	for k in $(seq 1 "$P"); do
		wprof=()
		if [ -n "$memprofile" ]; then wprof=(--memprofile-dir "$out/prof-$run/worker-$k"); fi
		[ "$limit" = cgroup ] && cgroups+=("$(cgpath "$run-w$k")")
		limited "$run-w$k" "$wl" "$out/logs/$run-worker-$k.time" "${wenv[@]}" "$emsf" worker --nats "$url" --name "memproof-w$k" \
			"${wprof[@]}" "${wextra[@]}" >"$out/logs/$run-worker-$k.log" 2>&1 &
		wpids+=($!)
		pids+=($!)
	done
	# The store's bytes (every stream: the Object Store, the job KV), sampled.
	(
		peak=0
		while kill -0 "$npid" 2>/dev/null; do
			b=$(curl -sf "http://127.0.0.1:$mon/jsz?streams=true" | jq '[.account_details[]?.stream_detail[]?.state.bytes] | add // 0' 2>/dev/null || echo 0)
			[ "${b:-0}" -gt "$peak" ] && peak=$b && echo "$peak" >"$out/logs/$run-store.peak"
			sleep 0.5
		done
	) &
	spid=$!
	pids+=("$spid")
	cprof=()
	if [ -n "$memprofile" ]; then cprof=(env EMSF_MEMPROFILE_DIR="$out/prof-$run/coordinator"); fi
	[ "$limit" = cgroup ] && cgroups+=("$(cgpath "$run-coord")")
	set +e
	(limited "$run-coord" "$coord_lim" "$out/logs/$run-coordinator.time" "${cprof[@]}" "$emsf" "${fit[@]}" --out "$out/$run.arrow" \
		--nats "$url" --min-workers "$P" >"$out/logs/$run-coordinator.log" 2>&1)
	crc=$?
	set -e
	final_store=$(curl -sf "http://127.0.0.1:$mon/jsz?streams=true" | jq '[.account_details[]?.stream_detail[]?.state.bytes] | add // 0' 2>/dev/null || echo 0)
	# SIGTERM to each worker (the child of its /usr/bin/time): it drains
	# and exits 0, and time reports it.
	for p in "${wpids[@]}"; do
		for c in $(pgrep -P "$p"); do kill -TERM "$c" 2>/dev/null || true; done
	done
	for p in "${wpids[@]}"; do wait "$p" 2>/dev/null || true; done
	kill "$npid" "$spid" 2>/dev/null || true
	wait "$npid" "$spid" 2>/dev/null || true
	store_peak=$(cat "$out/logs/$run-store.peak" 2>/dev/null || echo 0)

	read -r cmax cfail <<<"$(cgstat "$run-coord")"
	cpeak=$(peak_rss "$out/logs/$run-coordinator.time")
	row "$run" coordinator "$coord_lim" "$coord_tgt" "$cpeak" "$cmax" "$cfail" "$crc"
	for k in $(seq 1 "$P"); do
		read -r wmax wfail <<<"$(cgstat "$run-w$k")"
		tf=$out/logs/$run-worker-$k.time
		wx=$(exit_of "$tf")
		row "$run" "worker-$k" "$wl" "$wt" "$(peak_rss "$tf")" "$wmax" "$wfail" "$wx"
		if [ "$wx" != 0 ]; then
			log "$run: worker $k ended with $wx (an OOM kill is signal 9)"
			fail=1
		fi
	done
	row "$run" store - - "$store_peak" - - "final $final_store"
	if [ "$crc" -eq 0 ] && ! grep -q "cluster fit from metadata" "$out/logs/$run-coordinator.log"; then
		log "$run: the coordinator read the data itself (not a fit from metadata):"
		grep -m1 "coordinator reads\|reads the data" "$out/logs/$run-coordinator.log" >&2 || true
		fail=1
	fi
	if [ "$crc" -ne 0 ]; then
		log "$run: the coordinator exited $crc"
		tail -5 "$out/logs/$run-coordinator.log" >&2
		fail=1
	elif cmp -s "$out/$run.arrow" "$out/local.arrow"; then
		log "$run: OK, the model is byte-identical to the local fit's"
		row "$run" model - - - - - identical
	else
		log "$run: FAIL, the model differs from the local fit's"
		row "$run" model - - - - - DIFFERENT
		fail=1
	fi
	rm -rf "$store"
done

echo
echo "peak memory per process (MiB); the local fit's peak L = $(mib "$L") MiB; limit: $limit"
awk -F'\t' 'NR > 1 {
	f = ($5 ~ /^[0-9]+$/) ? sprintf("%.0f", $5 / 1048576) : $5
	l = ($3 ~ /^[0-9]+$/ && $3 > 0) ? sprintf("%.0f", $3 / 1048576) : "-"
	t = ($4 ~ /^[0-9]+$/ && $4 > 0) ? sprintf("%.0f", $4 / 1048576) : "-"
	c = ($6 ~ /^[0-9]+$/) ? sprintf("%.0f", $6 / 1048576) : $6
	printf "%-6s %-12s limit %6s  target %6s  peak RSS %6s  cgroup max %6s  fail %4s  %s\n", $1, $2, l, t, f, c, $7, $8
}' "$summary"
echo "results: $out"
exit "$fail"
