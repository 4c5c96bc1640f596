package main

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestExperimentOnline: 2 runs × (t_c = 1000, 10000) × (α = 0.5, 1) × 3
// sizes = 24 rows with the documented columns; a finite KL_ρ comes with
// transitions/t_c commits; for t_c = 10000, α = 1 (three commits, plain EM
// steps on windows that see every state) the mean KL_ρ falls from the first
// point to the last; a PNG; the same CSV bytes for 1 and 2 workers.
func TestExperimentOnline(t *testing.T) {
	dir := t.TempDir()
	args := []string{"experiment", "online", "--sizes", "1000,10000,30000", "--commit-every", "1000,10000",
		"--alpha", "0.5,1", "--runs", "2", "--seed", "3", "--quiet"}
	out := mustEmsf(t, append(args, "--out", dir, "--workers", "2")...)
	if !strings.Contains(out, "wrote "+filepath.Join(dir, "online.csv")+" (24 rows)") {
		t.Errorf("output:\n%s", out)
	}
	rows := readCSV(t, filepath.Join(dir, "online.csv"))
	if got := strings.Join(rows[0], ","); got != "run,seed,commit_every,alpha,transitions,commits,kl_rho" {
		t.Fatalf("header %q", got)
	}
	if len(rows) != 25 {
		t.Fatalf("%d rows, want 24 and a header", len(rows)-1)
	}
	count := map[string]int{}
	first, last := map[string]float64{}, map[string]float64{}
	for _, r := range rows[1:] {
		setting := r[2] + " " + r[3]
		count[setting]++
		if (r[0] != "0" || r[1] != "3") && (r[0] != "1" || r[1] != "4") {
			t.Errorf("row %v: run and seed", r)
		}
		tc, err1 := strconv.Atoi(r[2])
		x, err2 := strconv.Atoi(r[4])
		commits, err3 := strconv.Atoi(r[5])
		kl, err4 := strconv.ParseFloat(r[6], 64)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil || !(kl > 0) {
			t.Fatalf("row %v: bad values", r)
		}
		if !math.IsInf(kl, 1) && commits != x/tc {
			t.Errorf("row %v: %d commits, want %d", r, commits, x/tc)
		}
		switch x {
		case 1000:
			first[setting] += kl / 2
		case 30000:
			last[setting] += kl / 2
		}
	}
	for _, s := range []string{"1000 0.5", "1000 1", "10000 0.5", "10000 1"} {
		if count[s] != 6 {
			t.Errorf("setting %q: %d rows, want 6 (%v)", s, count[s], count)
		}
	}
	if f, l := first["10000 1"], last["10000 1"]; !(l < f) {
		t.Errorf("t_c = 10000, α = 1: mean KL_ρ %v after 1000 transitions, %v after 30000: want a decrease", f, l)
	}
	checkPNG(t, filepath.Join(dir, "online.png"))

	dir1 := t.TempDir()
	mustEmsf(t, append(args, "--out", dir1, "--workers", "1")...)
	a, _ := os.ReadFile(filepath.Join(dir, "online.csv"))
	b, _ := os.ReadFile(filepath.Join(dir1, "online.csv"))
	if string(a) != string(b) {
		t.Error("the CSV depends on --workers")
	}
}

// TestExperimentOnlineBadFlags: each bad value is a usage error (exit 2)
// naming the flag and the value, and nothing is written.
func TestExperimentOnlineBadFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--alpha", "0"}, `--alpha "0": α = 0: must be in (0, 1]`},
		{[]string{"--alpha", "0.5,1.5"}, `--alpha "0.5,1.5": α = 1.5: must be in (0, 1]`},
		{[]string{"--alpha", "NaN"}, `--alpha "NaN"`},
		{[]string{"--alpha", "0.1,x"}, `--alpha "0.1,x": "x" is not a number`},
		{[]string{"--alpha", ""}, `--alpha "": "" is not a number`},
		{[]string{"--commit-every", "0"}, `--commit-every "0": t_c = 0: must be >= 1`},
		{[]string{"--commit-every", "100,-5"}, `--commit-every "100,-5": t_c = -5`},
		{[]string{"--commit-every", ""}, `--commit-every ""`},
		{[]string{"--commit-every", "1e3"}, `--commit-every "1e3": "1e3" is not an integer`},
		{[]string{"--sizes", "1000,500"}, `--sizes "1000,500": must be increasing`},
		{[]string{"--sizes", "0"}, "--sizes: 0 transitions"},
		{[]string{"--order", "101"}, "--order 101"},
		{[]string{"--runs", "0"}, "--runs 0"},
		{[]string{"--workers", "0"}, "--workers 0"},
		{[]string{"--iters", "10"}, "-iters"}, // no convergence test in a stream
	} {
		args := append([]string{"experiment", "online", "--out", dir}, tc.args...)
		code, _, errs := emsf(t, args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a failed experiment created %s", dir)
	}
	if code, errs, _ := emsf(t, "experiment", "online", "-h"); code != 0 || !strings.Contains(errs, "-commit-every") || strings.Contains(errs, "-tol") {
		t.Errorf("experiment online -h: exit %d\n%s", code, errs)
	}
}
