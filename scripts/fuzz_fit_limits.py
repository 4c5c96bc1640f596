#!/usr/bin/env python3
"""fuzz_fit_limits.py: corrupt a small valid CSV many ways and run `emsf fit`
on each, under a time and address-space limit, printing the inputs that took
long or much memory (issue 26 item 4: "three of 640 corrupted inputs took
20-40 s and 2-2.5 GB for 500 rows"). Every such input should now get a clear
error or finish quickly; docs/scaling.md section 9.8 has a run.

Usage: scripts/fuzz_fit_limits.py EMSF [SEED] [CASES]
  (writes its files in a new temporary directory, kept when a case is slow)
"""
import os
import random
import subprocess
import sys
import tempfile
import time

emsf = sys.argv[1]
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
cases = int(sys.argv[3]) if len(sys.argv) > 3 else 100
random.seed(seed)
work = tempfile.mkdtemp(prefix="emsf-fuzz-limits.")
base = os.path.join(work, "base.csv")
subprocess.run([emsf, "gen", "--states", "50", "--actions", "2", "--transitions", "500", "--seed", "3",
                "--out", base, "--truth", ""], check=True, capture_output=True)
lines = open(base).read().split("\n")
header, rows = lines[0], [r for r in lines[1:] if r]


def mutate(rows):
    rows = list(rows)
    k = random.randrange(8)
    i = random.randrange(len(rows))
    f = rows[i].split(",")
    if k == 0:  # digits appended to a field
        f[random.randrange(len(f))] += str(random.randrange(10)) * random.randrange(1, 8)
    elif k == 1:  # a boundary value
        f[random.randrange(len(f))] = str(random.choice([2**31 - 1, 2**24 - 1, 2**24, 2**20, 10**7, 4095, 4096, 65535, 10**9, 2**63]))
    elif k == 2:  # not a count or an index
        f[random.randrange(len(f))] = random.choice(["-1", "1e9", "nan", "inf", "0x10", "", " 5", "1.5", "9" * 30])
    elif k == 3:  # a truncated row
        rows[i] = rows[i][:random.randrange(len(rows[i]) + 1)]
    elif k == 4:  # an extra field
        f.append(str(random.randrange(100)))
    elif k == 5:  # garbage
        rows[i] = "".join(random.choice('0123456789,\n"') for _ in range(random.randrange(1, 20)))
    elif k == 6:  # a large action
        f[1] = str(random.choice([1000, 4000, 4095]))
    else:  # a large state
        f[0] = str(random.choice([10**6, 5 * 10**6, 16 * 10**6, 2**24 - 1]))
    if k not in (3, 5):
        rows[i] = ",".join(f)
    return rows


slow = 0
for t in range(cases):
    bad = mutate(rows)
    for _ in range(random.randrange(3)):
        bad = mutate(bad)
    path = os.path.join(work, "c%d.csv" % t)
    open(path, "w").write(header + "\n" + "\n".join(bad) + "\n")
    t0 = time.time()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", "timeout", "60", "prlimit", "--as=6000000000", emsf, "fit",
                        "--input", path, "--order", "4", "--out", os.path.join(work, "m.arrow"), "--quiet"],
                       capture_output=True, text=True)
    dt = time.time() - t0
    last = p.stderr.strip().split("\n")[-1]
    rss = int(last) // 1024 if last.isdigit() else -1
    if dt > 3 or rss > 300:
        slow += 1
        changed = [r for r in bad if r not in rows][:3]
        print("case %d: exit %d, %.1f s, %d MB, rows %s: %s" % (t, p.returncode, dt, rss, changed,
              p.stderr.strip().split("\n")[0][:200]), flush=True)
    else:
        os.remove(path)
print("%d of %d cases took over 3 s or 300 MB (files in %s)" % (slow, cases, work))
