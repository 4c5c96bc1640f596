#!/usr/bin/python3
"""Wall time of emsf's default fit against plain EM, per row of
docs/quality.md (issue 28's 1/5 target): on each data set and training
size, `emsf fit` with its defaults and `emsf fit --plain` (EM as before
issue 28, --iters 1000 --tol 1e-7) run in turn, interleaved (default,
plain, default, plain, ...), REPEATS times each; the median wall time of
each side (the whole process, reading the file included), their ratio,
and the held-out log-likelihood per test transition of each side's
model (emsf eval --mix 0.001, as the tables; the fits are deterministic,
so every repeat writes the same model: checked). A third process,
interleaved too, is the floor: `emsf fit --plain --iters 1`, the same
start, reading, one pass and writing of the model that any fit of the
file costs; where the floor is above a fifth of plain EM's time, no fit
can take a fifth of it (the column floor / plain).

usage: scripts/quality_walltime.py DATADIR OUTDIR [--emsf BIN] [--order 32]
       [--rows changelog:1,changelog:5,gotokens:100] [--repeats 3]

Run it on a quiet machine for figures to trust; on a shared one both
sides are disturbed alike only on average (hence the interleaving and
the median).
"""
import hashlib, json, os, re, statistics, sys

from quality_bench import arg, run  # the same flags and runner as the benchmark


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    data, outdir = sys.argv[1], sys.argv[2]
    emsf = arg("--emsf", "emsf")
    order = arg("--order", "32")
    rows = [r.split(":") for r in arg("--rows", "changelog:1,changelog:5,gotokens:100").split(",")]
    repeats = int(arg("--repeats", "3"))
    os.makedirs(outdir, exist_ok=True)
    sides = [("default", []), ("plain", ["--plain"]), ("floor", ["--plain", "--iters", "1"])]
    results = []
    for name, frac in rows:
        train = os.path.join(data, name, "train_%s.csv" % frac)
        test = os.path.join(data, name, "test.csv")
        row = {"set": name, "fraction": int(frac)}
        times = {s: [] for s, _ in sides}
        sums = {}
        for _ in range(repeats):
            for side, flags in sides:
                model = os.path.join(outdir, "%s_%s_%s.arrow" % (name, frac, side))
                out, _, dt = run([emsf, "fit", "--input", train, "--order", order, "--out", model, "--quiet"] + flags)
                times[side].append(dt)
                h = digest(model)
                if sums.setdefault(side, h) != h:
                    raise RuntimeError("%s %s %%: the %s fit wrote another model on a repeat" % (name, frac, side))
                it = re.search(r": (\d+) iterations \(([^)]*)\)", out)
                row[side + "_iters"] = "%s (%s)" % (it.group(1), it.group(2)) if it else "?"
        row["floor_s"] = statistics.median(times["floor"])
        row["floor_runs_s"] = times["floor"]
        for side, _ in sides[:2]:
            model = os.path.join(outdir, "%s_%s_%s.arrow" % (name, frac, side))
            out, _, _ = run([emsf, "eval", "--model", model, "--input", test, "--baselines", "none", "--mix", "0.001"])
            m = re.search(r"^\s{2}model \S+\s+\S+\s+(-?[0-9.e+-]+)", out, re.M)
            row[side] = float(m.group(1))
            row[side + "_s"] = statistics.median(times[side])
            row[side + "_runs_s"] = times[side]
        row["ratio"] = row["default_s"] / row["plain_s"]
        row["floor_ratio"] = row["floor_s"] / row["plain_s"]
        row["default_minus_plain"] = row["default"] - row["plain"]
        print(json.dumps(row), flush=True)
        results.append(row)
    with open(os.path.join(outdir, "walltime.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(outdir, "walltime.md"), "w") as f:
        f.write("| set | training | default: wall (median of %d), its | plain: wall, its | floor: wall | default / plain | floor / plain | held-out default | held-out plain | default − plain |\n" % repeats)
        f.write("|---|---|---|---|---|---|---|---|---|---|\n")
        for r in results:
            f.write("| %s | %d %% | %.2f s, %s | %.2f s, %s | %.2f s | 1/%.1f | 1/%.1f | %.4f | %.4f | %+.4f |\n" % (
                r["set"], r["fraction"], r["default_s"], r["default_iters"], r["plain_s"], r["plain_iters"], r["floor_s"],
                1 / r["ratio"], 1 / r["floor_ratio"], r["default"], r["plain"], r["default_minus_plain"]))


if __name__ == "__main__":
    main()
