#!/bin/sh
# Validation scoring, this tree against an older commit (issue 28, round
# 6): builds the factor package's tests of both (the older one with this
# tree's factor/validation_bench_test.go, which uses the exported API
# only), runs BenchmarkValidation of each in turn, REPEATS times, and
# prints per benchmark the median ns/op and cpu-ms/op of each side and
# their ratio. The scores and choices are the same bits
# (TestValidationMatchesOracle); only the time differs.
#
# usage: scripts/validation_bench.sh [BASE [REPEATS]]   (BASE: 0da5eb0)
set -eu
base=${1:-0da5eb0}
repeats=${2:-5}
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$root" archive "$base" | tar -x -C "$tmp" -f - --one-top-level=old
cp "$root/factor/validation_bench_test.go" "$tmp/old/factor/"
(cd "$tmp/old" && go test -c -o "$tmp/old.test" ./factor)
(cd "$root" && go test -c -o "$tmp/new.test" ./factor)
for _ in $(seq "$repeats"); do
	for side in old new; do
		"$tmp/$side.test" -test.run '^$' -test.bench BenchmarkValidation -test.count 1 |
			awk -v s="$side" '/^Benchmark/ {print s, $1, $3, $5}'
	done
done | sort -k2,2 -k1,1 -k3,3n | awk '
	{k = $2; v[$1 "," k] = v[$1 "," k] " " $3; c[$1 "," k] = c[$1 "," k] " " $4; keys[k] = 1}
	function med(s,   a, n, i, j, t) {
		n = split(s, a, " ")
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	END {
		printf "%-45s %14s %14s %7s %12s %12s %7s\n", "benchmark", "old ns/op", "new ns/op", "ratio", "old cpu-ms", "new cpu-ms", "ratio"
		for (k in keys) {
			o = med(v["old," k]); n = med(v["new," k]); oc = med(c["old," k]); nc = med(c["new," k])
			printf "%-45s %14.0f %14.0f %7.2f %12.3f %12.3f %7.2f\n", k, o, n, o / n, oc, nc, (nc > 0 ? oc / nc : 0)
		}
	}'
