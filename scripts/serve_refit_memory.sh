#!/usr/bin/env bash
# What a refit of emsf serve costs in time and memory, with serve's
# defaults (emsf fit's quality), without the validation split and rule
# (--smooth none --stop tol: MAP-EM with SQUAREM to the relative change),
# and with --plain (the refit before issue 28): serve --embedded counts
# DATA, retrains once; prints the serve process's RSS after counting and
# after the retrain (ps), its peak (/usr/bin/time -v), and the version's
# status, passes, seconds and model file size.
#   bash scripts/serve_refit_memory.sh BIN DATA [ORDER=8]
#   (docs/quality.md round 9: DATA from emsf gen --transitions 2000000 --states 200000 --actions 2)
set -euo pipefail
bin=$1 data=$2 order=${3:-8}
port=14788
url=nats://127.0.0.1:$port
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for side in default nosplit plain; do
	case $side in
	default) flags=() ;;
	nosplit) flags=(--smooth none --stop tol) ;;
	plain) flags=(--plain) ;;
	esac
	/usr/bin/time -v -o "$dir/time" "$bin" serve --embedded --store "$dir/store-$side" --port $port --name m --order "$order" \
		--use-workers no --quiet "${flags[@]}" >"$dir/out" 2>"$dir/err" &
	pid=$!
	for _ in $(seq 200); do "$bin" model status m --nats "$url" >/dev/null 2>&1 && break; sleep 0.05; done
	"$bin" publish --nats "$url" --name m --input "$data" >/dev/null
	rss0=$(ps -o rss= -p "$(pgrep -P $pid)")
	v=$("$bin" retrain --nats "$url" --name m)
	rss1=$(ps -o rss= -p "$(pgrep -P $pid)")
	pkill -TERM -P $pid
	wait $pid || true
	echo "$side: RSS after counting $rss0 kB, after the retrain $rss1 kB, peak $(sed -n 's/.*Maximum resident set size (kbytes): //p' "$dir/time") kB;" \
		"$(echo "$v" | grep -E '"(status|iterations|seconds|size)"' | tr -d '\n' | tr -s ' ')"
done
