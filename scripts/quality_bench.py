#!/usr/bin/python3
"""The benchmark of docs/quality.md, in one run: on each real data set
(scripts/realdata.py) and training size, the held-out log-likelihood per
test transition and the wall time of CNT, add-β, Jelinek–Mercer and
interpolated Kneser–Ney counting (emsf eval --train: parameters chosen on
a validation split of the training file), KLM (emsf fit --algorithm klm), scikit-learn's KL-NMF
(multiplicative updates on the row-normalized counts) and emsf, plain
(--accel none --smooth none --stop tol, as before issue 28) and default.
Every estimate is scored by the same rule: emsf eval's --mix 0.001 (its
probabilities mixed with the uniform distribution at weight 0.001; a
state beyond the training data is an unseen row).

Then the curves: validation log-likelihood per transition against wall
time of plain EM and of SQUAREM (both scored by the held-out rule at every
iterate, run to --iters 1000 / --tol 1e-7), with the point where the
default fit stopped; one PNG per data set.

usage: scripts/quality_bench.py DATADIR OUTDIR [--emsf BIN] [--order M]
       [--sets changelog,gotokens,depgraph] [--fractions 1,5,20,100] [--no-sklearn]
       [--klm-iters 100] [--no-klm] [--curve-iters 1000] [--no-curves]

KLM fits the counted estimate with a dense row for every state never seen
(O(n²·m) per iteration): 1071 s for 50 iterations at n = 2000 on the shared
2-core machine; --no-klm leaves it out.
"""
import json, math, os, re, subprocess, sys, time

MIX = 0.001
COUNTING = ("CNT", "add-β", "JM", "KN")


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def run(cmd):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError("%s failed:\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))
    return p.stdout, p.stderr, dt


ROW = re.compile(r"^\s{2}(model \S+|CNT \(counting\)|add-β counting|Jelinek–Mercer counting|Kneser–Ney counting)\s+(-?[0-9.e+-]+)\s+(-?[0-9.e+-]+)\s*(.*?)\s*$")


def eval_scores(out):
    res = {}
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            name = m.group(1)
            key = "model" if name.startswith("model") else {"CNT (counting)": "CNT", "add-β counting": "add-β",
                                                           "Jelinek–Mercer counting": "JM", "Kneser–Ney counting": "KN"}[name]
            res[key] = (float(m.group(3)), m.group(4))
    return res


def sklearn_klnmf(train, test, m, iters):
    import numpy as np
    import scipy.sparse as sp
    from sklearn.decomposition import NMF

    def load(path):
        a = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
        return a[:, 0], a[:, 1], a[:, 2]

    s, a, t = load(train)
    ts, ta, tt = load(test)
    n = int(max(s.max(), t.max(), ts.max(), tt.max())) + 1
    u = int(max(a.max(), ta.max())) + 1
    ll, tot = 0.0, 0
    t0 = time.perf_counter()
    models = []
    for act in range(u):
        sel = a == act
        c = sp.csr_matrix((np.ones(sel.sum()), (s[sel], t[sel])), shape=(n, n))
        x = np.asarray(c.sum(axis=1)).ravel()
        seen = x > 0
        p = sp.diags(np.where(seen, 1 / np.maximum(x, 1), 0)) @ c
        nmf = NMF(n_components=min(m, n), beta_loss="kullback-leibler", solver="mu", init="random", max_iter=iters,
                  tol=1e-7, random_state=1)
        w = nmf.fit_transform(p[seen])
        models.append((seen, w, nmf.components_))
    fit_time = time.perf_counter() - t0
    for act in range(u):
        seen, w, h = models[act]
        sel = ta == act
        rows = np.full(n, -1)
        rows[np.flatnonzero(seen)] = np.arange(seen.sum())
        for i, j in zip(ts[sel], tt[sel]):
            r = rows[i]
            if r < 0:
                pij = 1 / n
            else:
                row = w[r] @ h
                tot_r = row.sum()
                pij = row[j] / tot_r if tot_r > 0 else 1 / n
            ll += math.log((1 - MIX) * pij + MIX / n)
            tot += 1
    return ll / tot, fit_time


DUR = re.compile(r"([0-9.]+)(h|ms|µs|us|ns|m|s)")


def seconds(d):
    mult = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}
    return sum(float(v) * mult[u] for v, u in DUR.findall(d))


def curve(emsf, train, order, accel, out, iters):
    _, err, _ = run([emsf, "fit", "--input", train, "--order", str(order), "--out", out, "--accel", accel, "--iters", iters,
                     "--stop", "validation", "--patience", "1000000", "--verbose", "--log-every", "0"])
    pts = []
    for line in err.splitlines():
        h = re.search(r"heldout=(-?[0-9.e+-]+)", line)
        e = re.search(r"elapsed=(\S+)", line)
        it = re.search(r"iter=([0-9]+)", line)
        if h and e and it:
            pts.append((seconds(e.group(1)), float(h.group(1)), int(it.group(1))))
    return pts


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    data, outdir = sys.argv[1], sys.argv[2]
    emsf = arg("--emsf", "emsf")
    order = int(arg("--order", "32"))
    sets = arg("--sets", "changelog,gotokens,depgraph").split(",")
    fracs = [int(f) for f in arg("--fractions", "1,5,20,100").split(",")]
    # KLM fits the counted estimate with a dense row for every state
    # never seen: O(n²·m) per iteration.
    klm_iters = arg("--klm-iters", "100")
    curve_iters = arg("--curve-iters", "1000")
    os.makedirs(outdir, exist_ok=True)
    results = []
    for name in sets:
        d = os.path.join(data, name)
        test = os.path.join(d, "test.csv")
        for frac in fracs:
            train = os.path.join(d, "train_%d.csv" % frac)
            row = {"set": name, "fraction": frac}
            out, _, dt = run([emsf, "eval", "--train", train, "--input", test, "--mix", str(MIX)])
            for k, (v, chosen) in eval_scores(out).items():
                row[k] = v
                row[k + "_chosen"] = chosen
            row["counting_s"] = dt
            fits = [("emsf plain", ["--plain"]), ("emsf default", [])]
            if "--no-klm" not in sys.argv:
                fits.insert(0, ("KLM", ["--algorithm", "klm", "--iters", klm_iters, "--tol", "1e-5"]))
            for label, flags in fits:
                model = os.path.join(outdir, "%s_%d_%s.arrow" % (name, frac, label.replace(" ", "_")))
                fout, ferr, dt = run([emsf, "fit", "--input", train, "--order", str(order), "--out", model, "--quiet"] + flags)
                eout, _, _ = run([emsf, "eval", "--model", model, "--input", test, "--baselines", "none", "--mix", str(MIX)])
                row[label] = eval_scores(eout)["model"][0]
                row[label + "_s"] = dt
                it = re.search(r": (\d+) iterations \(([^)]*)\)", fout)
                if it:
                    row[label + "_iters"] = "%s (%s)" % (it.group(1), it.group(2))
            if "--no-sklearn" not in sys.argv:
                v, dt = sklearn_klnmf(train, test, order, 200)
                row["sklearn KL-NMF"], row["sklearn KL-NMF_s"] = v, dt
            print(json.dumps(row), flush=True)
            results.append(row)
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    # Tables.
    methods = ["CNT", "add-β", "JM", "KN", "KLM", "sklearn KL-NMF", "emsf plain", "emsf default"]
    with open(os.path.join(outdir, "tables.md"), "w") as f:
        for name in sets:
            f.write("\n#### %s (order %d)\n\n" % (name, order))
            f.write("| training | " + " | ".join(methods) + " | default − best counting | chosen (add-β, JM, KN) | emsf plain its | emsf default its |\n")
            f.write("|---" * (len(methods) + 5) + "|\n")
            for r in results:
                if r["set"] != name:
                    continue
                cells = []
                for mth in methods:
                    v = r.get(mth)
                    t = r.get(mth + "_s", r.get("counting_s") if mth in COUNTING else None)
                    cells.append("—" if v is None else "%.4f (%.2f s)" % (v, t))
                counted = [r[c] for c in ("add-β", "JM", "KN") if c in r]
                margin = "%+.4f" % (r["emsf default"] - max(counted)) if counted and "emsf default" in r else "—"
                f.write("| %d %% | %s | %s | %s; %s; %s | %s | %s |\n" % (r["fraction"], " | ".join(cells), margin, r.get("add-β_chosen", ""),
                        r.get("JM_chosen", ""), r.get("KN_chosen", ""), r.get("emsf plain_iters", ""), r.get("emsf default_iters", "")))
    # Curves.
    if "--no-curves" in sys.argv:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for name in sets:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for ax, frac in zip(axes, [5, 100]):
            train = os.path.join(data, name, "train_%d.csv" % frac)
            for accel, style in [("none", "-"), ("squarem", "--")]:
                pts = curve(emsf, train, order, accel, os.path.join(outdir, "curve.arrow"), curve_iters)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label="EM" if accel == "none" else "SQUAREM")
            r = [x for x in results if x["set"] == name and x["fraction"] == frac]
            if r and "emsf default_s" in r[0]:
                ax.axvline(r[0]["emsf default_s"], color="gray", linestyle=":", label="default fit done (wall)")
            ax.set_xscale("log")
            ax.set_xlabel("seconds (fit, log scale)")
            ax.set_ylabel("validation log-likelihood per transition")
            ax.set_title("%s, %d %% of the training data, order %d" % (name, frac, order))
            ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, "curves_%s.png" % name), dpi=90)
        plt.close(fig)


if __name__ == "__main__":
    main()
