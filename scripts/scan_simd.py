#!/usr/bin/python3
"""scan_simd.py N M K — one blocked SIMD scan of K^T (N rows of M, row-major,
as factor.Model.KT holds it): scores = KT @ w (OpenBLAS gemv: AVX2) and the
top K by argpartition, in float64 and float32. Prints the median of 7 of
each, in milliseconds. The values do not matter for the time: random
non-negative. Run with OPENBLAS_NUM_THREADS=1 for one core (scripts/bench_query.sh).
"""
import sys
import time

import numpy as np

n, m, k = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(1)
kt64 = rng.random((n, m))
kt32 = kt64.astype(np.float32)
for name, kt in (("float64", kt64), ("float32", kt32)):
    times, gemv = [], []
    for r in range(8):
        w = rng.random(m).astype(kt.dtype)
        t = time.perf_counter()
        s = kt @ w
        g = time.perf_counter()
        top = np.argpartition(s, -k)[-k:]
        times.append(time.perf_counter() - t)
        gemv.append(g - t)
        assert len(top) == k
    times, gemv = sorted(times[1:]), sorted(gemv[1:])  # the first one warms up
    med = times[len(times) // 2]
    print(f"numpy scan {name}: {1000 * med:.1f} ms with the top {k} "
          f"(gemv alone {1000 * gemv[len(gemv) // 2]:.1f} ms, {kt.nbytes / gemv[len(gemv) // 2] / 1e9:.2f} GB/s)")
