#!/usr/bin/python3
"""How much emsf's default fit depends on --seed (docs/quality.md, round
3): on each data set and training size, `emsf fit` with its defaults and
--seed 1, 2, 3 (the random start of D and K and the validation split),
each model scored on the test file (emsf eval --mix 0.001, as the
tables), with the iterations run and the one the held-out rule kept.
With --before BIN the same runs of another binary (e.g. the build before
a change), side by side.

usage: scripts/quality_seeds.py DATADIR OUTDIR [--emsf BIN] [--before BIN]
       [--order 32] [--sets changelog,gotokens,depgraph] [--fractions 1,5,20,100]
       [--seeds 1,2,3]
"""
import json, os, re, sys

from quality_bench import arg, run  # the same flags and runner as the benchmark


def fit_score(emsf, train, test, order, seed, model):
    out, err, _ = run([emsf, "fit", "--input", train, "--order", order, "--out", model, "--seed", str(seed)])
    it = re.search(r": (\d+) iterations \(([^)]*)\)", out)
    best = re.search(r"best_iteration=(\d+)", err)
    ev, _, _ = run([emsf, "eval", "--model", model, "--input", test, "--baselines", "none", "--mix", "0.001"])
    m = re.search(r"^\s{2}model \S+\s+\S+\s+(-?[0-9.e+-]+)", ev, re.M)
    return {"score": float(m.group(1)), "iters": int(it.group(1)), "status": it.group(2),
            "best_iteration": int(best.group(1)) if best else None}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    data, outdir = sys.argv[1], sys.argv[2]
    bins = [("after", arg("--emsf", "emsf"))]
    if "--before" in sys.argv:
        bins.insert(0, ("before", arg("--before", None)))
    order = arg("--order", "32")
    sets = arg("--sets", "changelog,gotokens,depgraph").split(",")
    fracs = arg("--fractions", "1,5,20,100").split(",")
    seeds = [int(s) for s in arg("--seeds", "1,2,3").split(",")]
    os.makedirs(outdir, exist_ok=True)
    results = []
    for name in sets:
        for frac in fracs:
            train = os.path.join(data, name, "train_%s.csv" % frac)
            test = os.path.join(data, name, "test.csv")
            row = {"set": name, "fraction": int(frac)}
            for label, emsf in bins:
                runs = [fit_score(emsf, train, test, order, s, os.path.join(outdir, "m.arrow")) for s in seeds]
                scores = [r["score"] for r in runs]
                row[label] = runs
                row[label + "_spread"] = max(scores) - min(scores)
            print(json.dumps(row), flush=True)
            results.append(row)
    with open(os.path.join(outdir, "seeds.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(outdir, "seeds.md"), "w") as f:
        cols = [label for label, _ in bins]
        f.write("| set | training | " + " | ".join("%s: test score, seeds %s (its kept)" % (c, ", ".join(map(str, seeds))) for c in cols)
                + " | " + " | ".join("%s spread" % c for c in cols) + " |\n")
        f.write("|---|---|" + "---|" * (2 * len(cols)) + "\n")
        for r in results:
            cells = [", ".join("%.4f (%s)" % (x["score"], x["best_iteration"] if x["best_iteration"] is not None else x["iters"])
                               for x in r[c]) for c in cols]
            f.write("| %s | %d %% | %s | %s |\n" % (r["set"], r["fraction"], " | ".join(cells),
                                                   " | ".join("%.4f" % r[c + "_spread"] for c in cols)))


if __name__ == "__main__":
    main()
