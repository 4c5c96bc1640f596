#!/usr/bin/env bash
# Peak memory of `emsf model split` and `emsf model assemble` on models far
# larger than one record batch (4 MiB of values): both stream, so their
# peak RSS must not grow with the model; `emsf gen` and `emsf inspect`,
# which hold the whole model, are measured beside them for contrast. Each
# assembled Arrow file must be byte for byte the model file the dataset was
# split from, and the Parquet one must split back into the very parts it
# came from.
#
#   scripts/model-parts-memory.sh            # Arrow at n = 250000, 1000000, 2000000; Parquet at n = 100000
#   NS="2000000" PARQUET_N=0 M=32 scripts/model-parts-memory.sh   # NS= (empty): Parquet only
#
# M (default 32) is the order, u = 1 (two blocks: n·M·16 bytes of values,
# 1 GiB at n = 2·10^6). PARQUET_N=0 skips Parquet: arrow-go v15's Parquet
# writer encodes the repetition levels of a list column in time quadratic
# in a page (the same writer as emsf fit --out model.parquet): n = 10^5 takes
# about 8 minutes on a busy 2-core machine. Peak RSS is from /usr/bin/time -v
# (GNU time) and does not depend on the machine's load; the seconds do.
# Needs about 3·n·M·16 bytes of disk in $TMPDIR and, for gen and inspect,
# about 2·n·M·16 bytes of memory.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ns=${NS-250000 1000000 2000000}
m=${M:-32}
pn=${PARQUET_N:-100000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/emsf" ./cmd/emsf
emsf=$work/emsf

# peak LABEL CMD...: runs CMD under /usr/bin/time -v and prints its wall
# time and peak RSS.
peak() {
	local label=$1
	shift
	if ! /usr/bin/time -v "$@" >"$work/out" 2>"$work/time"; then
		cat "$work/out" "$work/time" >&2
		exit 1
	fi
	printf '%-58s %12s %8d MB\n' "$label" \
		"$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/time")" \
		$(($(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/time") / 1024))
}

printf '%-58s %12s %11s\n' "step (m=$m, u=1)" "wall" "peak RSS"
for n in $ns; do
	echo "-- n=$n: $((2 * n * m * 8 / 1048576)) MiB of values"
	peak "emsf gen (writes the model: holds it)" "$emsf" gen --states "$n" --true-order "$m" --transitions 1 --seed 1 \
		--out "$work/t.csv" --truth "$work/big.arrow"
	peak "emsf model split big.arrow, parts of n/8 rows" "$emsf" model split "$work/big.arrow" --out "$work/ds" --part-rows $((n / 8))
	peak "emsf model assemble ds --out back.arrow" "$emsf" model assemble "$work/ds" --out "$work/back.arrow"
	cmp "$work/big.arrow" "$work/back.arrow"
	echo "   back.arrow is byte for byte big.arrow ($(stat -c %s "$work/back.arrow") bytes)"
	peak "emsf inspect --model ds (holds the model)" "$emsf" inspect --model "$work/ds"
	rm -rf "$work/ds" "$work/back.arrow" "$work/big.arrow"
done
[ "$pn" = 0 ] && exit 0
echo "-- Parquet, n=$pn: $((2 * pn * m * 8 / 1048576)) MiB of values"
peak "emsf gen n=$pn" "$emsf" gen --states "$pn" --true-order "$m" --transitions 1 --seed 1 \
	--out "$work/t.csv" --truth "$work/small.arrow"
peak "emsf model split small.arrow, parts of n/8 rows" "$emsf" model split "$work/small.arrow" --out "$work/dsp" --part-rows $((pn / 8))
peak "emsf model assemble dsp --out back.parquet" "$emsf" model assemble "$work/dsp" --out "$work/back.parquet"
peak "emsf model split back.parquet (the same cut)" "$emsf" model split "$work/back.parquet" --out "$work/dsp2" --part-rows $((pn / 8))
cmp "$work/dsp/manifest.json" "$work/dsp2/manifest.json"
echo "   back.parquet splits into the very parts of small.arrow (same manifest: every part's SHA-256)"
