#!/bin/sh
# Bitwise check of a change to the fit that must not move a bit of any
# model (issue 28, round 5: SQUAREM's cycle without copies): fits every
# training file of the real data sets (scripts/realdata.py builds them)
# with two binaries, in every mode below, and compares the model files
# byte for byte (cmp). Prints one line per fit and a summary; exits 1 if
# any pair differs or a fit fails.
#
# usage: scripts/bitwise_fits.sh BIN_A BIN_B DATADIR [OUTDIR]
#   DATADIR holds SET/train_F.csv for SET in changelog gotokens depgraph
#   and F in 1 5 20 100 (SETS and FRACS override the lists).
#   OUTDIR (default: a new temporary directory, removed at the end)
#   keeps the models.
#
# The modes: the default fit (SQUAREM, the MAP prior, the held-out
# stopping rule, --smooth auto), the same with --workers 1 and
# --workers 3 (the default is 2), --precision float32, --plain,
# SQUAREM without the prior (--accel squarem --prior-d 0 --prior-k 0),
# the prior on D only (--prior-k 0: hidden states that die keep their
# entries of K) and on K only (--prior-d 0: rows of D without data
# keep theirs). --resume is a cluster fit's: the cluster's tests cover it
# (TestResumeComponents, TestCoordinatorKillResumeDefault).
set -u
a=${1:?usage: scripts/bitwise_fits.sh BIN_A BIN_B DATADIR [OUTDIR]}
b=${2:?usage: scripts/bitwise_fits.sh BIN_A BIN_B DATADIR [OUTDIR]}
data=${3:?usage: scripts/bitwise_fits.sh BIN_A BIN_B DATADIR [OUTDIR]}
out=${4:-}
if [ -z "$out" ]; then
	out=$(mktemp -d)
	trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
sets=${SETS:-changelog gotokens depgraph}
fracs=${FRACS:-1 5 20 100}
fails=0
runs=0
mode() { # name, fit flags...
	name=$1
	shift
	for s in $sets; do
		for f in $fracs; do
			in="$data/$s/train_$f.csv"
			ma="$out/${s}_${f}_${name}_a.arrow"
			mb="$out/${s}_${f}_${name}_b.arrow"
			runs=$((runs + 1))
			if ! "$a" fit --input "$in" --order 32 --out "$ma" --quiet "$@" >"$out/${s}_${f}_${name}_a.log" 2>&1; then
				echo "FAIL $name $s $f: $a failed (see $out/${s}_${f}_${name}_a.log)"
				fails=$((fails + 1))
				continue
			fi
			if ! "$b" fit --input "$in" --order 32 --out "$mb" --quiet "$@" >"$out/${s}_${f}_${name}_b.log" 2>&1; then
				echo "FAIL $name $s $f: $b failed (see $out/${s}_${f}_${name}_b.log)"
				fails=$((fails + 1))
				continue
			fi
			if cmp -s "$ma" "$mb"; then
				echo "same $name $s $f"
			else
				echo "DIFF $name $s $f"
				fails=$((fails + 1))
			fi
		done
	done
}
mode default
mode workers1 --workers 1
mode workers3 --workers 3
mode float32 --precision float32
mode plain --plain
mode squarem-noprior --accel squarem --prior-d 0 --prior-k 0
mode prior-k0 --prior-k 0
mode prior-d0 --prior-d 0
echo "$runs pairs of fits, $fails differ or failed"
[ "$fails" -eq 0 ]
