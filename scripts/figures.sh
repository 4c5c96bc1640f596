#!/usr/bin/env bash
# figures.sh — regenerate every figure in docs/img with the commands
# docs/experiments.md shows (reduced settings; online-paper.png with
# --paper), and copy the PNGs into docs/img. Look at each one before you
# commit it.
#
#   scripts/figures.sh              # every figure (the --paper online run takes minutes)
#   SKIP_PAPER=1 scripts/figures.sh # the reduced ones only
#
# Environment: OUT (the experiments' folder, default a temporary one),
# SKIP_PAPER (leave online-paper.png as it is).
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=${OUT:-$tmp/out}
mkdir -p "$out"
go build -o "$tmp/emsf" ./cmd/emsf
emsf() { "$tmp/emsf" "$@"; }

run() { # run NAME: emsf experiment NAME --out $out, timed
	local t0=$SECONDS
	emsf experiment "$1" --out "$out" --quiet >"$out/$1.txt"
	echo "emsf experiment $1 --out out: $((SECONDS - t0)) s (load average $(cut -d' ' -f1 /proc/loadavg))"
}
for x in sample-size sampling blackjack; do
	run "$x"
	cp "$out/$x.png" "docs/img/experiment-$x.png"
done
run online
cp "$out/online.png" docs/img/online.png
run mu-hmm
cp "$out/mu-hmm.png" "$out/mu-hmm-gen.png" docs/img/
run online-em
cp "$out/online-em.png" "$out/online-em-nmf.png" docs/img/
run epca
cp "$out/epca.png" "$out/epca-blackjack.png" "$out/epca-kl.png" docs/img/
if [ -z "${SKIP_PAPER:-}" ]; then
	t0=$SECONDS
	emsf experiment online --paper --out "$out/paper" --quiet >"$out/online-paper.txt"
	echo "emsf experiment online --paper --out paper/: $((SECONDS - t0)) s"
	cp "$out/paper/online.png" docs/img/online-paper.png
fi
echo "wrote docs/img/*.png from $out"
