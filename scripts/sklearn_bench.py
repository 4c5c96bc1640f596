#!/usr/bin/python3
"""Time scikit-learn's KL-NMF (multiplicative updates) per iteration on the
benchmark data set of factor/bench_test.go: the peer EMSF must beat
(DESIGN §8; docs/benchmarks.md).

The data file is written by
    go test -run TestBenchDataDump ./factor/ -args -emsf.benchdump=FILE
in the format (little-endian): b"EMSFCOO1", int64 n, int64 nnz,
int32 rows[nnz], int32 cols[nnz], float64 counts[nnz].

Method: NMF(n_components, beta_loss='kullback-leibler', solver='mu', tol=0,
init='random') is fitted with max_iter=1 and with max_iter=1+K on the same
csr matrix; (t(1+K) - t(1)) / K is the time of one iteration, free of the
fixed costs both fits share (input validation, random init, the divergence
sklearn computes once before and once after the loop), after one untimed
warm-up fit. With tol=0 sklearn
computes no divergence inside the loop, so an iteration is exactly the
W and H multiplicative updates, as one EMSF iteration without loglik is
the D and K updates. The median over --repeats is reported, as wall time
and as process CPU time (user + system, all threads): on a machine shared
with other work the CPU time is the steadier of the two.

Needs Debian's python3-sklearn and python3-scipy (scripts/bench_compare.sh
installs them when missing).
"""

import argparse
import statistics
import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.decomposition import NMF
from sklearn.exceptions import ConvergenceWarning


def load(path):
    with open(path, "rb") as f:
        buf = f.read()
    if buf[:8] != b"EMSFCOO1":
        sys.exit(f"{path}: not an EMSFCOO1 file")
    n, nnz = np.frombuffer(buf, dtype="<i8", count=2, offset=8)
    n, nnz = int(n), int(nnz)
    off = 24
    rows = np.frombuffer(buf, dtype="<i4", count=nnz, offset=off)
    off += 4 * nnz
    cols = np.frombuffer(buf, dtype="<i4", count=nnz, offset=off)
    off += 4 * nnz
    vals = np.frombuffer(buf, dtype="<f8", count=nnz, offset=off)
    if off + 8 * nnz != len(buf):
        sys.exit(f"{path}: {len(buf)} bytes, want {off + 8 * nnz} for nnz={nnz}")
    x = sp.csr_matrix((vals, (rows, cols)), shape=(n, n))
    if x.nnz != nnz:
        sys.exit(f"{path}: duplicate entries ({x.nnz} distinct of {nnz})")
    return x


def fit_seconds(x, k, iters, seed):
    model = NMF(
        n_components=k,
        beta_loss="kullback-leibler",
        solver="mu",
        max_iter=iters,
        tol=0,
        init="random",
        random_state=seed,
    )
    t0, c0 = time.perf_counter(), time.process_time()
    model.fit(x)
    t, c = time.perf_counter() - t0, time.process_time() - c0
    if model.n_iter_ != iters:
        sys.exit(f"sklearn ran {model.n_iter_} iterations, asked for {iters}")
    return t, c


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="EMSFCOO1 file from TestBenchDataDump")
    ap.add_argument("--components", type=int, default=32, help="n_components (m), default 32")
    ap.add_argument("--iters", type=int, default=5, help="K extra iterations timed, default 5")
    ap.add_argument("--repeats", type=int, default=2, help="repeats, median reported, default 2")
    a = ap.parse_args()

    warnings.filterwarnings("ignore", category=ConvergenceWarning)
    x = load(a.data)
    import sklearn

    print(
        f"sklearn {sklearn.__version__}, numpy {np.__version__}: n={x.shape[0]} nnz={x.nnz} "
        f"sum={x.sum():.7g} m={a.components}",
        flush=True,
    )
    # Warm-up: the first fit in a process pays one-time costs (lazy imports,
    # threadpool inspection: ≈0.25 s here) that would otherwise inflate t(1)
    # and bias the difference low.
    fit_seconds(x, a.components, 1, 0)
    per, cpu = [], []
    for r in range(a.repeats):
        t1, c1 = fit_seconds(x, a.components, 1, r)
        tk, ck = fit_seconds(x, a.components, 1 + a.iters, r)
        per.append((tk - t1) / a.iters)
        cpu.append((ck - c1) / a.iters)
        print(
            f"repeat {r}: fit(1) {t1:.3f} s, fit({1 + a.iters}) {tk:.3f} s -> {per[-1]:.4f} s/iter "
            f"(CPU {cpu[-1]:.4f} s/iter)",
            flush=True,
        )
    s = statistics.median(per)
    print(f"sklearn_s_per_iter={s:.6f}")
    print(f"sklearn_cpu_s_per_iter={statistics.median(cpu):.6f}")
    print(f"sklearn_ns_per_nnz={s / x.nnz * 1e9:.1f}")


if __name__ == "__main__":
    main()
