#!/usr/bin/env bash
# The retraining service's versions against the data sets of
# docs/quality.md: for each SET:FRACTION, emsf serve (embedded NATS server)
# counts train_FRACTION.csv, retrains once, and the version is fetched and
# scored on test.csv (emsf eval --mix 0.001, as the tables) -- with serve's
# defaults (emsf fit's quality: validation split, MAP-EM, held-out stop,
# stored rule) and with --plain (the refit before issue 28). Prints one line
# per run: the version's status, iterations, retrain seconds, its rule, the
# test score, and the peak RSS of the serve process (/usr/bin/time -v).
#   bash scripts/quality_serve.sh DATADIR BIN [ORDER=32] [ROWS=changelog:20,gotokens:100,depgraph:20]
set -euo pipefail
data=$1 bin=$2 order=${3:-32} rows=${4:-changelog:20,gotokens:100,depgraph:20}
dir=$(mktemp -d)
port=14777
url=nats://127.0.0.1:$port
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
for row in ${rows//,/ }; do
	set=${row%:*} frac=${row#*:}
	for side in default plain; do
		flags=()
		[ "$side" = plain ] && flags=(--plain)
		rm -rf "$dir/store"
		/usr/bin/time -v -o "$dir/time" "$bin" serve --embedded --store "$dir/store" --port $port --name q --order "$order" \
			--use-workers no --quiet "${flags[@]}" >"$dir/serve.out" 2>"$dir/serve.err" &
		pid=$!
		for _ in $(seq 200); do "$bin" model status q --nats "$url" >/dev/null 2>&1 && break; sleep 0.05; done
		"$bin" publish --nats "$url" --name q --input "$data/$set/train_$frac.csv" >/dev/null
		v=$("$bin" retrain --nats "$url" --name q)
		"$bin" model get q --nats "$url" --out "$dir/m.arrow" >/dev/null
		pkill -TERM -P $pid
		wait $pid || true
		score=$("$bin" eval --model "$dir/m.arrow" --input "$data/$set/test.csv" --baselines none --mix 0.001 |
			sed -n 's/^  model [^ ]* *[^ ]* *\([-0-9.e+]*\).*/\1/p')
		field() { echo "$v" | sed -n "s/.*\"$1\": \"*\([^\",]*\)\"*,*$/\1/p" | head -1; }
		echo "$set $frac% $side: status=$(field status) iterations=$(field iterations) best=$(field best_iteration)" \
			"seconds=$(field seconds) test=$score rule=\"$(field rule)\"" \
			"peak_rss_kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$dir/time")"
	done
done
