#!/usr/bin/env python3
"""ingest_startup.py — how long emsf fit takes to read its input: seconds
from process start to the "data:" log line (the input read and counted),
to the process's exit, and the CPU seconds (user + system) of the whole
process, for two or more binaries on the same inputs, interleaved, RUNS
times each; medians, and each binary's ratio to the first.

  scripts/ingest_startup.py --runs 5 --bin old=/tmp/emsf-old --bin new=/tmp/emsf-new FILE...

Each run is `BIN fit --input FILE --order 32 --out TMP --log-level info
--iters 1`, with --plain (mode plain: no validation split) and without
(mode default: the default fit's reading, with its validation split); the
clock starts just before the process is spawned and the "data:" line is
timestamped as it arrives on the pipe. The process start itself (Go
runtime and package initialisation, ~20 ms: `emsf version`) is part of
every figure. On a shared machine read the ratios; CPU seconds are the
steadier figure.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

MODES = {"plain": ["--plain"], "default": []}


def one(binary, path, mode, out):
    cmd = [binary, "fit", "--input", path, "--order", "32", "--out", out, "--log-level", "info", "--iters", "1"] + MODES[mode]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    data = None
    for line in p.stderr:
        if data is None and b"emsf.fit: data:" in line:
            data = time.perf_counter() - t0
    _, status, ru = os.wait4(p.pid, 0)
    total = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0 or data is None:
        sys.exit(f"{' '.join(cmd)}: exit {rc}, data line {'seen' if data else 'missing'}")
    return data, total, ru.ru_utime + ru.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--bin", action="append", required=True, help="NAME=PATH (two or more)")
    ap.add_argument("--modes", default="plain,default", help="comma-separated: plain, default")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    bins = [b.split("=", 1) for b in a.bin]
    print(f"load average before: {' '.join(open('/proc/loadavg').read().split()[:3])}; {os.cpu_count()} CPUs; {a.runs} runs each, interleaved; medians")
    cols = ["data s", "exit s", "CPU s"]
    head = f"{'file':44} {'mode':8}" + "".join(f" {n + ' ' + c:>13}" for n, _ in bins for c in cols)
    head += "".join(f" {n + '/' + bins[0][0] + ' ' + c:>18}" for n, _ in bins[1:] for c in ("data", "CPU"))
    print(head)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "m.arrow")
        for path in a.files:
            for mode in a.modes.split(","):
                res = {n: [] for n, _ in bins}
                for _ in range(a.runs):
                    for n, b in bins:
                        res[n].append(one(b, path, mode, out))
                med = {n: [statistics.median(r[k] for r in v) for k in range(3)] for n, v in res.items()}
                name = path if len(path) <= 44 else "…" + path[-43:]
                row = f"{name:44} {mode:8}" + "".join(f" {med[n][k]:13.3f}" for n, _ in bins for k in range(3))
                b0 = med[bins[0][0]]
                row += "".join(f" {med[n][k] / b0[k]:18.2f}" for n, _ in bins[1:] for k in (0, 2))
                print(row, flush=True)
    print(f"load average after: {' '.join(open('/proc/loadavg').read().split()[:3])}")


main()
