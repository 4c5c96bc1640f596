#!/usr/bin/env bash
# local-cluster.sh: start a 3-node NATS JetStream cluster and N emsf workers
# on loopback, run a cluster fit against it (R3 buckets) with each exchange
# (coordinator, owners), run the same fit locally, and check that the model
# files are identical.
#
# Usage: deploy/local-cluster.sh [-w WORKERS] [-k]
#   -w N   number of emsf worker processes (default 3)
#   -k     keep the work directory (configs, logs, data, models)
#
# Needs only Go: emsf and nats-server are built from this module (a
# nats-server on PATH is used instead when NATS_SERVER=path is set).
set -euo pipefail

workers=3
keep=
while getopts "w:kh" opt; do
	case $opt in
	w) workers=$OPTARG ;;
	k) keep=1 ;;
	*) sed -n '2,12p' "$0"; exit 2 ;;
	esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/emsf-local-cluster.XXXXXX")
pids=()
cleanup() {
	local rc=$?
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [ "$rc" -ne 0 ]; then
		for f in "$work"/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }; done >&2
	fi
	if [ -n "$keep" ]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
	exit "$rc"
}
trap cleanup EXIT INT TERM

log() { echo "local-cluster: $*"; }

# free_port prints a TCP port on 127.0.0.1 that nothing listens on.
free_port() {
	local p
	for _ in $(seq 1 100); do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	echo "no free port" >&2
	return 1
}

cd "$root"
log "building emsf"
go build -o "$work/emsf" ./cmd/emsf
if [ -n "${NATS_SERVER:-}" ]; then
	nats_server=$NATS_SERVER
else
	log "building nats-server from the Go module"
	go build -o "$work/nats-server" github.com/nats-io/nats-server/v2
	nats_server=$work/nats-server
fi

declare -a client route monitor
for i in 1 2 3; do
	client[$i]=$(free_port)
	route[$i]=$(free_port)
	monitor[$i]=$(free_port)
done
routes="nats-route://127.0.0.1:${route[1]}, nats-route://127.0.0.1:${route[2]}, nats-route://127.0.0.1:${route[3]}"
urls="nats://127.0.0.1:${client[1]},nats://127.0.0.1:${client[2]},nats://127.0.0.1:${client[3]}"

for i in 1 2 3; do
	cat >"$work/n$i.conf" <<CONF
server_name: n$i
listen: 127.0.0.1:${client[$i]}
http: 127.0.0.1:${monitor[$i]}
max_payload: 1MB
jetstream {
  store_dir: "$work/store-n$i"
  max_memory_store: 256MB
  max_file_store: 4GB
  sync_interval: always
}
cluster {
  name: emsf-local
  listen: 127.0.0.1:${route[$i]}
  routes: [ $routes ]
}
CONF
	"$nats_server" -c "$work/n$i.conf" >"$work/nats-n$i.log" 2>&1 &
	pids+=($!)
done

log "waiting for the JetStream cluster"
for i in 1 2 3; do
	ok=
	for _ in $(seq 1 150); do
		if (exec 3<>"/dev/tcp/127.0.0.1/${monitor[$i]}" && printf 'GET /healthz HTTP/1.0\r\n\r\n' >&3 && grep -q '"status":"ok"' <&3) 2>/dev/null; then
			ok=1
			break
		fi
		sleep 0.2
	done
	[ -n "$ok" ] || { echo "nats server n$i not healthy" >&2; exit 1; }
done

for w in $(seq 1 "$workers"); do
	"$work/emsf" worker --nats "$urls" --name "emsf-worker-$w" >"$work/worker-$w.log" 2>&1 &
	pids+=($!)
done

log "generating data"
"$work/emsf" gen --states 300 --actions 2 --true-order 5 --transitions 20000 --seed 7 \
	--out "$work/data.csv" --truth "" >/dev/null
# --plain: the owners exchange runs plain EM (it refuses SQUAREM and held-out
# stopping), so every fit compared here names the same algorithm.
fit=(fit --input "$work/data.csv" --order 5 --iters 20 --tol 0 --seed 1 --shard-nnz 1000 --quiet --plain)

log "cluster fit with --exchange coordinator: $workers workers, 3 NATS servers"
"$work/emsf" "${fit[@]}" --out "$work/cluster.arrow" --nats "$urls" --replicas 3 --exchange coordinator \
	--min-workers "$workers" --worker-timeout 10s >"$work/fit-cluster.log" 2>&1
log "local fit"
"$work/emsf" "${fit[@]}" --out "$work/local.arrow" >"$work/fit-local.log" 2>&1

if cmp -s "$work/cluster.arrow" "$work/local.arrow"; then
	log "OK: the cluster model is identical to the local one"
	"$work/emsf" inspect --model "$work/cluster.arrow" | sed -n '1,8p'
else
	echo "local-cluster: FAIL: the cluster model differs from the local one" >&2
	"$work/emsf" inspect --model "$work/cluster.arrow" >&2 || true
	"$work/emsf" inspect --model "$work/local.arrow" >&2 || true
	exit 1
fi

log "cluster fit with --exchange owners: workers own column blocks, across 3 NATS servers"
"$work/emsf" "${fit[@]}" --out "$work/owners.arrow" --nats "$urls" --replicas 3 --exchange owners \
	--col-blocks 4 --checkpoint-every 5 --min-workers "$workers" --worker-timeout 10s --job local-cluster-owners \
	>"$work/fit-owners.log" 2>&1
if cmp -s "$work/owners.arrow" "$work/local.arrow"; then
	log "OK: the owners exchange's model is identical to the local one"
else
	echo "local-cluster: FAIL: the owners exchange's model differs from the local one" >&2
	tail -20 "$work/fit-owners.log" >&2 || true
	exit 1
fi
