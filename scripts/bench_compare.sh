#!/usr/bin/env bash
# bench_compare.sh — EMSF (Go, factor.Pass + Commit) against scikit-learn's
# KL-NMF (solver='mu') per iteration: the same nonzeros, the same machine,
# the same run (DESIGN §8; results in docs/benchmarks.md).
#
#   scripts/bench_compare.sh            # medium: n=20 000, 2M nonzeros, m=32
#   GO_COUNT=5 SK_REPEATS=3 scripts/bench_compare.sh
#
# Environment: GO_COUNT (go benchmark -count, default 3), GO_BENCHTIME
# (default 10x), SK_ITERS (sklearn iterations timed, default 5), SK_REPEATS
# (default 2), SIZE (small or medium, default medium), BAR (required
# speed-up, default 20). Exits 0 whether or not the bar is met; the last
# line says which.
set -euo pipefail
cd "$(dirname "$0")/.."

GO_COUNT=${GO_COUNT:-3}
GO_BENCHTIME=${GO_BENCHTIME:-10x}
SK_ITERS=${SK_ITERS:-5}
SK_REPEATS=${SK_REPEATS:-2}
SIZE=${SIZE:-medium}
BAR=${BAR:-20}
PY=/usr/bin/python3

if ! "$PY" -c 'import sklearn, scipy' 2>/dev/null; then
	echo "bench_compare: installing Debian's python3-sklearn and python3-scipy" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-sklearn python3-scipy >/dev/null
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $(go env GOVERSION); load average $(cut -d' ' -f1-3 /proc/loadavg)"
go test -c -o "$tmp/factor.test" ./factor/
"$tmp/factor.test" -test.run '^TestBenchDataDump$' -test.v \
	-emsf.benchdump="$tmp/data.bin" -emsf.benchsize="$SIZE" | grep 'wrote'

"$tmp/factor.test" -test.run NONE -test.bench "BenchmarkIteration/$SIZE/m=32/" \
	-test.benchtime "$GO_BENCHTIME" -test.count "$GO_COUNT" | tee "$tmp/go.txt"
"$PY" scripts/sklearn_bench.py --data "$tmp/data.bin" --components 32 \
	--iters "$SK_ITERS" --repeats "$SK_REPEATS" | tee "$tmp/sk.txt"

sk=$(sed -n 's/^sklearn_s_per_iter=//p' "$tmp/sk.txt")
skcpu=$(sed -n 's/^sklearn_cpu_s_per_iter=//p' "$tmp/sk.txt")
echo
echo "per iteration (median), $SIZE, m=32; ratio = sklearn / Go (wall; CPU time in parentheses)"
awk -v sk="$sk" -v skcpu="$skcpu" -v bar="$BAR" '
	/^BenchmarkIteration\// {
		name = $1; sub(/-[0-9]+$/, "", name); sub(/^BenchmarkIteration\//, "", name)
		for (f = 2; f < NF; f++) {
			if ($(f+1) == "ns/op") ns[name] = ns[name] " " $f
			if ($(f+1) == "ns/nnz") nz[name] = nz[name] " " $f
			if ($(f+1) == "cpu-ms/iter") cpu[name] = cpu[name] " " $f
		}
		if (!(name in seen)) { seen[name] = 1; order[++k] = name }
	}
	function median(s,   a, n, i, j, t) {
		n = split(s, a, " ")
		if (n == 0) return 0
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	END {
		printf "%-36s %10s %10s %12s %8s %8s\n", "config", "wall s", "ns/nnz", "CPU s", "ratio", "(CPU)"
		printf "%-36s %10.4f %10s %12.4f\n", "sklearn NMF(kl, mu)", sk, "", skcpu
		best = 0
		for (i = 1; i <= k; i++) {
			n = order[i]; s = median(ns[n]) / 1e9; c = median(cpu[n]) / 1e3; r = sk / s
			printf "%-36s %10.4f %10.1f %12.4f %7.1fx %7.1fx\n", "go " n, s, median(nz[n]), c, r, (c > 0) ? skcpu / c : 0
			if (n ~ /loglik=false/ && r > best) best = r
		}
		printf "best Go/sklearn wall-time speed-up without loglik: %.1fx; bar %sx: %s\n", best, bar, (best >= bar) ? "met" : "MISSED"
	}' "$tmp/go.txt"
