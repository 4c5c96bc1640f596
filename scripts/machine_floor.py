#!/usr/bin/python3
"""What a machine charges every emsf process before any fit work, the
figures that set the floor of docs/quality.md's wall-time ratios
(issue 28): the cost of touching fresh memory (an anonymous page faulted
in on first write; a VM can charge ten times bare metal for it), the
start of the binary (`emsf --help`: the Go runtime and every package's
initialization, no work), and for comparison a process that does nothing
(/bin/true). Each figure is the median of RUNS.

usage: scripts/machine_floor.py EMSF_BIN [--runs 20] [--mib 256]
"""
import mmap, statistics, subprocess, sys, time


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def fault_us(mib):
    """Microseconds per 4 KiB page written for the first time."""
    n = mib << 20
    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    t0 = time.perf_counter()
    for off in range(0, n, 4096):
        m[off] = 1
    dt = time.perf_counter() - t0
    m.close()
    # The loop's own cost, on pages already faulted in.
    m = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    t0 = time.perf_counter()
    for _ in range(0, n, 4096):
        m[0] = 1
    loop = time.perf_counter() - t0
    m.close()
    return (dt - loop) / (n / 4096) * 1e6


def start_ms(cmd, runs):
    xs = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        xs.append(time.perf_counter() - t0)
    return statistics.median(xs) * 1e3


def main():
    if len(sys.argv) < 2 or sys.argv[1].startswith("--"):
        sys.exit(__doc__)
    emsf = sys.argv[1]
    runs, mib = int(arg("--runs", "20")), int(arg("--mib", "256"))
    print("fresh memory: %.2f µs per 4 KiB page (%d MiB, median of 3)" % (
        statistics.median(fault_us(mib) for _ in range(3)), mib))
    print("/bin/true: %.1f ms" % start_ms(["/bin/true"], runs))
    print("emsf --help: %.1f ms" % start_ms([emsf, "--help"], runs))


if __name__ == "__main__":
    main()
