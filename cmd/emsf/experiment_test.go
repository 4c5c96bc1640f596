package main

import (
	"encoding/csv"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// readCSV returns the rows of an experiment's CSV, header first.
func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// checkPNG fails unless path is a PNG image of the plot's size.
func checkPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() < 300 || b.Dy() < 200 {
		t.Errorf("%s: %v, want a plot of at least 300×200", path, b)
	}
}

// TestExperimentSampleSize: 2 runs × 2 sizes × (EMSF m = 5, 10, 20 and
// CNT) = 16 rows with the documented columns, finite positive errors,
// seeds 7 and 8, and a PNG; the same flags give the same CSV bytes for 1
// and 2 workers.
func TestExperimentSampleSize(t *testing.T) {
	dir := t.TempDir()
	args := []string{"experiment", "sample-size", "--sizes", "200,800", "--runs", "2", "--seed", "7", "--iters", "60", "--quiet"}
	out := mustEmsf(t, append(args, "--out", dir, "--workers", "2")...)
	if !strings.Contains(out, "wrote "+filepath.Join(dir, "sample-size.csv")+" (16 runs)") {
		t.Errorf("output:\n%s", out)
	}
	rows := readCSV(t, filepath.Join(dir, "sample-size.csv"))
	if got := strings.Join(rows[0], ","); got != "setting,method,m,x_name,x,seed,measure,value" {
		t.Fatalf("header %q", got)
	}
	if len(rows) != 17 {
		t.Fatalf("%d rows, want 16 and a header", len(rows)-1)
	}
	count := map[string]int{}
	for _, r := range rows[1:] {
		count[r[1]+" "+r[2]]++
		if r[0] != "uniform" || r[3] != "transitions" || (r[4] != "200" && r[4] != "800") || (r[5] != "7" && r[5] != "8") || r[6] != "frobenius" {
			t.Errorf("row %v", r)
		}
		if v, err := strconv.ParseFloat(r[7], 64); err != nil || !(v > 0) {
			t.Errorf("row %v: error %q", r, r[7])
		}
	}
	for _, k := range []string{"EMSF 5", "EMSF 10", "EMSF 20", "CNT "} {
		if count[k] != 4 {
			t.Errorf("%q: %d rows, want 4 (%v)", k, count[k], count)
		}
	}
	checkPNG(t, filepath.Join(dir, "sample-size.png"))

	dir1 := t.TempDir()
	mustEmsf(t, append(args, "--out", dir1, "--workers", "1")...)
	a, _ := os.ReadFile(filepath.Join(dir, "sample-size.csv"))
	b, _ := os.ReadFile(filepath.Join(dir1, "sample-size.csv"))
	if string(a) != string(b) {
		t.Error("the CSV depends on --workers")
	}
}

// TestExperimentSampling: uniform and skewed sampling, EMSF and KLM, two
// measures each: 1 run × 1 size × 2 × 2 × 2 = 8 rows, and a PNG.
func TestExperimentSampling(t *testing.T) {
	dir := t.TempDir()
	mustEmsf(t, "experiment", "sampling", "--sizes", "2000", "--runs", "1", "--iters", "40", "--out", dir, "--quiet")
	rows := readCSV(t, filepath.Join(dir, "sampling.csv"))
	if len(rows) != 9 {
		t.Fatalf("%d rows, want 8 and a header", len(rows)-1)
	}
	seen := map[string]bool{}
	for _, r := range rows[1:] {
		seen[r[0]+" "+r[1]+" "+r[6]] = true
		if r[2] != "10" || r[3] != "transitions" || r[4] != "2000" {
			t.Errorf("row %v", r)
		}
	}
	if len(seen) != 8 {
		t.Errorf("settings × methods × measures: %v", seen)
	}
	checkPNG(t, filepath.Join(dir, "sampling.png"))
}

// TestExperimentBadFlags: usage errors (exit 2) that name the problem, and
// no output folder created.
func TestExperimentBadFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"experiment"}, "name an experiment"},
		{[]string{"experiment", "blackjak"}, `unknown experiment "blackjak"`},
		{[]string{"experiment", "sample-size", "--runs", "0"}, "--runs 0"},
		{[]string{"experiment", "sample-size", "--sizes", "100,x"}, `--sizes "100,x"`},
		{[]string{"experiment", "sample-size", "--sizes", "0"}, "--sizes"},
		{[]string{"experiment", "sample-size", "--orders", "5,200"}, "--orders"},
		{[]string{"experiment", "sampling", "--order", "0"}, "--order 0"},
		{[]string{"experiment", "sampling", "--bogus"}, "-bogus"},
		{[]string{"experiment", "sampling", "extra"}, `unexpected argument "extra"`},
	} {
		code, _, errs := emsf(t, append(tc.args, "--out", dir)...)
		if tc.args[len(tc.args)-1] == "experiment" {
			code, _, errs = emsf(t, tc.args...)
		}
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a failed experiment created %s", dir)
	}
	if code, errs, _ := emsf(t, "experiment", "-h"); code != 0 || !strings.Contains(errs, "sample-size") || !strings.Contains(errs, "sampling") {
		t.Errorf("experiment -h: exit %d\n%s", code, errs)
	}
}
