#!/usr/bin/python3
"""Build the real data sets of docs/quality.md from material packaged for
this machine (nothing written by the project):

  changelog  word bigrams of the Debian changelogs under /usr/share/doc
             (2000 most frequent words; 1 action)
  gotokens   the token chain of Go's own source tree /usr/local/go/src
             (999 most frequent tokens + one "other"; 1 action)
  depgraph   a random walk on the dependency graph of the Debian archive's
             package metadata (apt-cache dumpavail; 4000 packages; 3 actions:
             0 follow a Depends edge, 1 a Recommends/Suggests edge, 2 a
             reverse Depends edge; from a package without such an edge the
             walk jumps to a uniform random package)

and three more, built after the defaults were chosen on the first three, to
check that those choices carry over to data nobody tuned on (--only; not
built by default; docs/quality.md, round 9):

  chars      the character chain of the licenses under /usr/share/common-licenses
             and the first 400 copyright files under /usr/share/doc
             (95 most frequent characters + one "other"; 1 action)
  pytokens   the token chain of the first 1500 modules of Python's standard
             library (/usr/lib/python3.*; 2999 most frequent tokens + one
             "other"; the action is the kind of the next token: 0 a name, 1 an
             operator, 2 a line break or indentation, 3 a literal, 4 any
             other, which this library never has: 4 actions)
  manwords   word bigrams of the first 4000 manual pages of section 1
             (/usr/share/man/man1; 19999 most frequent words + one "other";
             1 action: a wide, scarce chain)

For each: a fixed test set (test.csv) and nested training sets
train_1.csv, train_5.csv, train_20.csv, train_100.csv (1 %, 5 %, 20 % and
100 % of the training transitions), CSV with state,action,next_state.

usage: scripts/realdata.py OUTDIR [--max N] [--only changelog,gotokens,depgraph,chars,pytokens,manwords]
       (seeded: the same files every run; --max caps each set's transitions, sampled)
"""
import collections, glob, gzip, os, random, re, subprocess, sys

FRACTIONS = [1, 5, 20, 100]


def write(outdir, name, trans, test_frac=0.2, seed=1):
    rng = random.Random(seed)
    trans = list(trans)
    rng.shuffle(trans)
    ntest = int(len(trans) * test_frac)
    test, train = trans[:ntest], trans[ntest:]
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)

    def dump(path, rows):
        with open(path, "w") as f:
            f.write("state,action,next_state\n")
            for s, a, t in rows:
                f.write("%d,%d,%d\n" % (s, a, t))

    dump(os.path.join(d, "test.csv"), test)
    for p in FRACTIONS:
        dump(os.path.join(d, "train_%d.csv" % p), train[: len(train) * p // 100])
    print("%s: %d states, %d actions, %d training and %d test transitions" % (
        name, 1 + max(max(s, t) for s, _, t in trans), 1 + max(a for _, a, _ in trans), len(train), len(test)))


def changelog(maxn):
    words = re.compile(r"[a-z][a-z']*")
    lines = []
    for path in sorted(glob.glob("/usr/share/doc/*/changelog.Debian.gz")):
        try:
            with gzip.open(path, "rt", errors="replace") as f:
                for line in f:
                    if line.startswith("  "):  # entries, not headers/trailers
                        lines.append(words.findall(line.lower()))
        except OSError:
            continue
    freq = collections.Counter(w for ws in lines for w in ws)
    vocab = {w: k for k, (w, _) in enumerate(freq.most_common(2000))}
    trans = []
    for ws in lines:
        for a, b in zip(ws, ws[1:]):
            if a in vocab and b in vocab:
                trans.append((vocab[a], 0, vocab[b]))
    return trans[:maxn]


def gotokens(maxn):
    tok = re.compile(r'"(?:[^"\\\n]|\\.)*"|`[^`]*`|\'(?:[^\'\\\n]|\\.)*\'|[A-Za-z_][A-Za-z0-9_]*|[0-9][0-9A-Za-z_.]*|'
                     r'//[^\n]*|/\*.*?\*/|:=|\.\.\.|&&|\|\||<-|[-+*/%&|^<>=!]=?|[{}()\[\];,.:~]', re.S)
    files = sorted(p for p in glob.glob("/usr/local/go/src/**/*.go", recursive=True) if os.path.isfile(p))
    streams = []
    for path in files:
        with open(path, errors="replace") as f:
            src = f.read()
        ts = []
        for t in tok.findall(src):
            if t.startswith("//") or t.startswith("/*"):
                continue
            if t[0] in "\"`'":
                t = "STRING"
            elif t[0].isdigit():
                t = "NUMBER"
            ts.append(t)
        streams.append(ts)
    freq = collections.Counter(t for ts in streams for t in ts)
    vocab = {t: k for k, (t, _) in enumerate(freq.most_common(999))}
    other = 999
    trans = []
    for ts in streams:
        ids = [vocab.get(t, other) for t in ts]
        trans.extend((a, 0, b) for a, b in zip(ids, ids[1:]))
    rng = random.Random(2)
    if len(trans) > maxn:
        trans = rng.sample(trans, maxn)
    return trans


def depgraph(maxn):
    out = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True, check=True).stdout
    deps, recs = {}, {}
    name = None
    field = re.compile(r"^(Package|Depends|Pre-Depends|Recommends|Suggests): (.*)$")
    for line in out.splitlines():
        m = field.match(line)
        if not m:
            continue
        k, v = m.groups()
        if k == "Package":
            name = v.strip()
            deps.setdefault(name, set())
            recs.setdefault(name, set())
            continue
        targets = {alt.split("|")[0].split("(")[0].split(":")[0].strip() for alt in v.split(",")}
        (deps if k in ("Depends", "Pre-Depends") else recs)[name].update(t for t in targets if t)
    degree = collections.Counter()
    for p, ds in deps.items():
        for d in ds:
            if d in deps:
                degree[p] += 1
                degree[d] += 1
    keep = [p for p, _ in degree.most_common(4000)]
    idx = {p: k for k, p in enumerate(sorted(keep))}
    n = len(idx)
    fwd = [[] for _ in range(n)]
    soft = [[] for _ in range(n)]
    rev = [[] for _ in range(n)]
    for p, k in idx.items():
        for d in sorted(deps[p]):
            if d in idx:
                fwd[k].append(idx[d])
                rev[idx[d]].append(k)
        for d in sorted(recs[p]):
            if d in idx:
                soft[k].append(idx[d])
    edges = [fwd, soft, rev]
    rng = random.Random(3)
    trans = []
    s = rng.randrange(n)
    while len(trans) < maxn:
        a = rng.randrange(3)
        e = edges[a][s]
        t = e[rng.randrange(len(e))] if e else rng.randrange(n)
        trans.append((s, a, t))
        s = t
    return trans


def sample(trans, maxn, seed):
    """At most maxn of trans, drawn without replacement (seeded)."""
    trans = list(trans)
    if len(trans) > maxn:
        trans = random.Random(seed).sample(trans, maxn)
    return trans


def chars(maxn):
    text = []
    paths = sorted(glob.glob("/usr/share/common-licenses/*")) + sorted(glob.glob("/usr/share/doc/*/copyright"))[:400]
    for path in paths:
        try:
            with open(path, errors="replace") as f:
                text.append(f.read())
        except OSError:
            continue
    s = "".join(text)
    vocab = {c: k for k, (c, _) in enumerate(collections.Counter(s).most_common(95))}
    ids = [vocab.get(c, 95) for c in s]
    return sample(((a, 0, b) for a, b in zip(ids, ids[1:])), maxn, 7)


def pytokens(maxn):
    import io, tokenize
    lib = sorted(glob.glob("/usr/lib/python3.[0-9]*/"))[-1]
    toks = []
    for path in sorted(glob.glob(lib + "**/*.py", recursive=True))[:1500]:
        try:
            with open(path, "rb") as f:
                for t in tokenize.tokenize(f.readline):
                    if t.type in (tokenize.ENCODING, tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER):
                        continue
                    word = t.string if t.type in (tokenize.NAME, tokenize.OP) else tokenize.tok_name[t.type]
                    toks.append((word, t.type))
        except (OSError, SyntaxError, tokenize.TokenError, UnicodeDecodeError):
            continue
    vocab = {t: k for k, (t, _) in enumerate(collections.Counter(t for t, _ in toks).most_common(2999))}
    kind = {tokenize.NAME: 0, tokenize.OP: 1, tokenize.NEWLINE: 2, tokenize.INDENT: 2, tokenize.DEDENT: 2,
            tokenize.STRING: 3, tokenize.NUMBER: 3}
    trans = ((vocab.get(a, 2999), kind.get(kb, 4), vocab.get(b, 2999)) for (a, _), (b, kb) in zip(toks, toks[1:]))
    return sample(trans, maxn, 7)


def manwords(maxn):
    words = re.compile(r"[a-z][a-z]+")
    seq = []
    for path in sorted(glob.glob("/usr/share/man/man1/*.gz"))[:4000]:
        try:
            with gzip.open(path, "rt", errors="replace") as f:
                for line in f:
                    if line.startswith("."):  # a roff request: its arguments only
                        line = line.split(" ", 1)[1] if " " in line else ""
                    seq.extend(words.findall(line.lower()))
        except OSError:
            continue
    vocab = {w: k for k, (w, _) in enumerate(collections.Counter(seq).most_common(19999))}
    ids = [vocab.get(w, 19999) for w in seq]
    return sample(((a, 0, b) for a, b in zip(ids, ids[1:])), maxn, 7)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    outdir = sys.argv[1]
    maxn = 1000000
    if "--max" in sys.argv:
        maxn = int(sys.argv[sys.argv.index("--max") + 1])
    only = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else ["changelog", "gotokens", "depgraph"]
    for name in only:
        sets = {"changelog": changelog, "gotokens": gotokens, "depgraph": depgraph,
                "chars": chars, "pytokens": pytokens, "manwords": manwords}
        write(outdir, name, sets[name](maxn))


if __name__ == "__main__":
    main()
