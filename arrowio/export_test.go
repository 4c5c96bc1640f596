package arrowio

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// python is /usr/bin/python3 with numpy, or the test is skipped saying why.
func python(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skipf("SKIP: %s is absent, so the export cannot be read with numpy here (apt-get install python3-numpy)", py)
	}
	if out, err := exec.Command(py, "-c", "import numpy").CombinedOutput(); err != nil {
		t.Skipf("SKIP: %s has no numpy (apt-get install python3-numpy): %v %s", py, err, out)
	}
	return py
}

// checkExport is what numpy, and nothing but numpy and the standard
// library, must read from an export: every array bitwise, in the shape
// and orientation docs/formats.md says, from the .npy files, the .npz
// and the CSV tables.
const checkExport = `
import csv, json, sys
import numpy as np
d = sys.argv[1]
want = json.load(open(sys.argv[2]))
n, m, u = want["n"], want["m"], want["u"]
h = lambda xs: np.array([float.fromhex(x) for x in xs])
def same(name, got, exp):
    if got.shape != exp.shape or not np.array_equal(got, exp):
        sys.exit(f"{name}: got shape {got.shape}, want {exp.shape}, equal {got.shape == exp.shape and np.array_equal(got, exp)}")
z = np.load(d + "/model.npz")
for b, vals in enumerate(want["D"]):
    exp = h(vals).reshape(n, m)
    same(f"D_{b}.npy", np.load(f"{d}/D_{b}.npy"), exp)
    same(f"npz D_{b}", z[f"D_{b}"], exp)
for b, vals in enumerate(want["KT"]):
    exp = h(vals).reshape(n, m).T   # K is m x n
    same(f"K_{b}.npy", np.load(f"{d}/K_{b}.npy"), exp)
    same(f"npz K_{b}", z[f"K_{b}"], exp)
    # K's rows are stochastic
    if not np.allclose(np.load(f"{d}/K_{b}.npy").sum(axis=1), 1):
        sys.exit("rows of K do not sum to 1")
red = h(want["reduced"]).reshape(u, m, m)
same("reduced.npy", np.load(d + "/reduced.npy"), red)
same("npz reduced", z["reduced"], red)
Dcsv = np.loadtxt(d + "/D.csv", delimiter=",", skiprows=1, usecols=range(2, 2 + m), ndmin=2, quotechar='"')
same("D.csv", Dcsv, np.concatenate([h(v).reshape(n, m) for v in want["D"]]))
Kcsv = np.loadtxt(d + "/K.csv", delimiter=",", skiprows=1, usecols=range(2, 2 + m), ndmin=2, quotechar='"')
same("K.csv", Kcsv, np.concatenate([h(v).reshape(n, m) for v in want["KT"]]))
rcsv = np.loadtxt(d + "/reduced.csv", delimiter=",", skiprows=1, usecols=(1, 2, 3), ndmin=2, quotechar='"')
same("reduced.csv", rcsv[:, 2].reshape(u, m, m), red)
for name in ("states", "actions"):
    if name not in want:
        continue
    ids = np.load(f"{d}/{name}.npy")
    if ids.dtype.kind != "U" or list(ids) != want[name] or list(z[name]) != want[name]:
        sys.exit(f"{name}.npy: {list(ids)[:5]}, want {want[name][:5]}")
    rows = list(csv.reader(open(f"{d}/{name}.csv", newline="", encoding="utf-8")))
    if rows[0] != ["index", "id"] or [r[1] for r in rows[1:]] != want[name]:
        sys.exit(f"{name}.csv: {rows[:3]}")
    col = list(csv.reader(open(d + "/D.csv", newline="", encoding="utf-8")))
    if name == "states" and [r[1] for r in col[1:n + 1]] != want[name]:
        sys.exit(f"D.csv states: {col[1:4]}")
print("ok")
`

func hexes(xs []float64) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = strconv.FormatFloat(x, 'x', -1, 64)
	}
	return out
}

// TestExportReadByNumpy: an export (.npy, .npz, CSV) of models with and
// without ids, of every tie mode, reads back with numpy alone, bitwise.
func TestExportReadByNumpy(t *testing.T) {
	py := python(t)
	for _, tc := range []struct {
		tie factor.Tie
		ids bool
	}{{factor.TieNone, true}, {factor.TieSharedK, false}, {factor.TieSharedD, true}} {
		t.Run(tc.tie.String(), func(t *testing.T) {
			md := factor.NewRandom(23, 4, 3, tc.tie, 9)
			md.D[0][5] = math.SmallestNonzeroFloat64 // floats that print long
			md.D[0][4] += md.D[0][5]
			md.D[0][4] -= md.D[0][5]
			mf := &ModelFile{Model: md}
			want := map[string]any{"n": md.N, "m": md.M, "u": md.U}
			if tc.ids {
				ids := make([]string, md.N)
				for i := range ids {
					ids[i] = "s" + strconv.Itoa(i)
				}
				ids[3], ids[7] = `a, "quoted" id`, "日本/カート"
				mf.States, _ = shard.NewVocab(ids)
				mf.Actions, _ = shard.NewVocab([]string{"left", "right", "up"})
				want["states"], want["actions"] = ids, mf.Actions.Strings()
			}
			var ds, ks [][]string
			for _, d := range md.D {
				ds = append(ds, hexes(d))
			}
			for _, kt := range md.KT {
				ks = append(ks, hexes(kt))
			}
			var red []float64
			for _, r := range factor.Reduced(md) {
				red = append(red, r.RawMatrix().Data...)
			}
			want["D"], want["KT"], want["reduced"] = ds, ks, hexes(red)
			dir := t.TempDir()
			out := filepath.Join(dir, "export")
			if err := ExportModel(out, mf, []string{ExportNPY, ExportNPZ, ExportCSV}); err != nil {
				t.Fatal(err)
			}
			js, _ := json.Marshal(want)
			wantPath := filepath.Join(dir, "want.json")
			if err := os.WriteFile(wantPath, js, 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := exec.Command(py, "-c", checkExport, out, wantPath).CombinedOutput()
			if err != nil || strings.TrimSpace(string(got)) != "ok" {
				t.Fatalf("numpy reads the export otherwise: %v\n%s", err, got)
			}
		})
	}
}

// TestExportRefuses: an unknown format or a directory that holds files
// is refused, and a failed export leaves nothing.
func TestExportRefuses(t *testing.T) {
	mf := &ModelFile{Model: factor.NewRandom(5, 2, 1, factor.TieNone, 1)}
	dir := t.TempDir()
	if err := ExportModel(filepath.Join(dir, "x"), mf, []string{"xlsx"}); err == nil || !strings.Contains(err.Error(), `unknown format "xlsx"`) {
		t.Errorf("format xlsx: %v", err)
	}
	full := filepath.Join(dir, "full")
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ExportModel(full, mf, []string{ExportNPY}); err == nil || !strings.Contains(err.Error(), "exists and is not empty") {
		t.Errorf("non-empty directory: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "full" {
		t.Errorf("left behind: %v", ents)
	}
}

// TestNPYVector: a reward vector np.save writes reads back (float64 and
// float32), and anything else is refused with a reason.
func TestNPYVector(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "r.npy")
	if err := WriteNPY(p, &NPY{Shape: []int{3}, F64: []float64{1, -0.5, 1e-300}}); err != nil {
		t.Fatal(err)
	}
	got, err := ReadNPYVector(p)
	if err != nil || len(got) != 3 || got[2] != 1e-300 {
		t.Fatalf("got %v, %v", got, err)
	}
	if err := WriteNPY(p, &NPY{Shape: []int{2, 2}, F64: []float64{1, 2, 3, 4}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadNPYVector(p); err == nil || !strings.Contains(err.Error(), "one-dimensional") {
		t.Errorf("a matrix: %v", err)
	}
	if err := os.WriteFile(p, []byte("state,reward\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadNPYVector(p); err == nil || !strings.Contains(err.Error(), "not a .npy file") {
		t.Errorf("CSV: %v", err)
	}
}
