#!/usr/bin/env bash
# Runs the whole test suite (go test -race -count=1 ./...) RUNS times while
# one busy loop per core keeps every core busy, the way a loaded CI machine
# is: a test that assumes timing fails here. Prints each run's time and
# PASS/FAIL, and exits non-zero when any run failed.
#
#   scripts/stress-tests.sh [RUNS] [go test flags...]    (RUNS default 5)
#
# e.g. scripts/stress-tests.sh 20 -run 'TestFitNATS|TestServe' ./coordinator/...
# (with flags, the packages are the caller's: give them last). The output of
# a failed run is kept in a temporary file named in the report.
# Nothing to install: the burners are bash loops, killed on exit.
set -uo pipefail
cd "$(dirname "$0")/.."

runs=${1:-5}
shift || true
case $runs in '' | *[!0-9]* | 0)
	echo "stress-tests: RUNS must be a positive integer, got '$runs'" >&2
	exit 2
	;;
esac
args=("$@")
if [ ${#args[@]} -eq 0 ]; then args=(./...); fi

cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)
burners=()
stop_burners() {
	for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null; done
	for pid in "${burners[@]}"; do wait "$pid" 2>/dev/null; done
	burners=()
}
trap stop_burners EXIT
trap 'exit 130' INT TERM
for _ in $(seq "$cores"); do
	( while :; do :; done ) &
	burners+=($!)
done
echo "stress-tests: $cores busy loops on $cores cores; $runs runs of: go test -race -count=1 ${args[*]}"

failed=0
total_start=$(date +%s)
for k in $(seq "$runs"); do
	log=$(mktemp "${TMPDIR:-/tmp}/emsf-stress-$k.XXXXXX")
	start=$(date +%s)
	if go test -race -count=1 "${args[@]}" >"$log" 2>&1; then
		result=PASS
		rm -f "$log"
	else
		result="FAIL (output: $log)"
		failed=$((failed + 1))
		grep -E '^(--- FAIL|FAIL|panic:)' "$log" | head -20
	fi
	echo "run $k/$runs: $(($(date +%s) - start))s $result"
done
echo "stress-tests: $((runs - failed)) of $runs runs passed in $(($(date +%s) - total_start))s"
[ "$failed" -eq 0 ]
