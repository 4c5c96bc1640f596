package main

import (
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/emsf/emsf/arrowio"
)

// TestFitColCells: `emsf fit --col-cells` gives one model, bit for bit,
// on any number of goroutines, on the embedded cluster with either
// exchange and any number of workers (the owners exchange then places a
// grid), with --tie none and shared-d; the job records col_cells; a bad
// value is one usage error naming the flag.
func TestFitColCells(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "t.csv")
	mustEmsf(t, "gen", "--states", "120", "--true-order", "4", "--transitions", "12000", "--actions", "2",
		"--seed", "3", "--out", data, "--truth", "")
	for _, tie := range []string{"none", "shared-d"} {
		base := []string{"fit", "--input", data, "--order", "4", "--iters", "4", "--tol", "0", "--tie", tie,
			"--col-cells", "2", "--shard-nnz", "800", "--quiet"}
		var want *arrowio.ModelFile
		for k, extra := range [][]string{
			{"--workers", "1"},
			{"--workers", "3"},
			{"--embedded", "--workers", "4", "--exchange", "owners", "--store", filepath.Join(dir, "s1-"+tie)},
			{"--embedded", "--workers", "3", "--exchange", "owners", "--store", filepath.Join(dir, "s2-"+tie)},
			{"--embedded", "--workers", "2", "--store", filepath.Join(dir, "s3-"+tie)},
		} {
			out := filepath.Join(dir, tie+"-"+strconv.Itoa(k)+".arrow")
			mustEmsf(t, append(append(base, extra...), "--out", out)...)
			mf, err := arrowio.ReadModel(out)
			if err != nil {
				t.Fatal(err)
			}
			if mf.Params["col_cells"] != "2" {
				t.Fatalf("%s %v: params %v, want col_cells 2", tie, extra, mf.Params)
			}
			if want == nil {
				want = mf
				// The WKL uses whole-row totals though the rows are cut
				// into cells: the uncut fit's up to rounding.
				whole := filepath.Join(dir, tie+"-whole.arrow")
				mustEmsf(t, "fit", "--input", data, "--order", "4", "--iters", "4", "--tol", "0", "--tie", tie,
					"--shard-nnz", "800", "--quiet", "--workers", "1", "--out", whole)
				if w := readFit(t, whole).Model.WKL; math.Abs(mf.Model.WKL-w) > 1e-6*math.Abs(w) {
					t.Fatalf("%s: WKL %v with 2 column cells, %v without", tie, mf.Model.WKL, w)
				}
				continue
			}
			if !mf.Model.Equal(want.Model) {
				t.Fatalf("%s %v: the model differs from --workers 1's", tie, extra)
			}
		}
	}
	code, _, errs := emsf(t, "fit", "--input", data, "--order", "4", "--col-cells", "0", "--out", filepath.Join(dir, "x.arrow"))
	if code != 2 || !strings.Contains(errs, "--col-cells 0") {
		t.Fatalf("--col-cells 0: exit %d, stderr %q", code, errs)
	}
}
