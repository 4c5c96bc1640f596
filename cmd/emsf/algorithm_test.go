package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
)

// TestFitAlgorithms: --algorithm klm writes a stochastic TieNone model
// recorded as klm; --algorithm cnt writes nothing and says so; bad
// combinations are usage errors that name the flag.
func TestFitAlgorithms(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "t.csv")
	mustEmsf(t, "gen", "--states", "20", "--true-order", "3", "--transitions", "3000", "--actions", "2",
		"--out", data, "--truth", "")
	out := filepath.Join(dir, "klm.arrow")
	stdout := mustEmsf(t, "fit", "--input", data, "--order", "3", "--algorithm", "klm", "--out", out, "--quiet")
	if !strings.Contains(stdout, "KLM model n=20 m=3 u=2") {
		t.Errorf("klm output: %s", stdout)
	}
	mf, err := arrowio.ReadModel(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := mf.Model.Validate(); err != nil {
		t.Error(err)
	}
	if mf.Model.Tie != factor.TieNone || mf.Params["algorithm"] != "klm" {
		t.Errorf("tie %s, params %v", mf.Model.Tie, mf.Params)
	}
	if mf.Status != "converged" && mf.Status != "iteration limit" {
		t.Errorf("klm status %q; want converged or iteration limit", mf.Status)
	}
	// emsf.status says how KLM stopped: a loose --tol converges, a few
	// --iters with a tight one stop at the limit, with a WARN line.
	for _, tc := range []struct {
		args   []string
		status string
	}{{[]string{"--tol", "0.5"}, "converged"}, {[]string{"--iters", "3", "--tol", "1e-12"}, "iteration limit"}} {
		code, stdout, errs := emsf(t, append([]string{"fit", "--input", data, "--order", "3", "--algorithm", "klm", "--out", out}, tc.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errs)
		}
		mf, err := arrowio.ReadModel(out)
		if err != nil {
			t.Fatal(err)
		}
		if mf.Status != tc.status || !strings.Contains(stdout, "("+tc.status+")") {
			t.Errorf("%v: status %q, output %q; want %q", tc.args, mf.Status, stdout, tc.status)
		}
		if warned := strings.Contains(errs, "stopped before converging"); warned != (tc.status == "iteration limit") {
			t.Errorf("%v: warning %v, stderr:\n%s", tc.args, warned, errs)
		}
	}

	cntOut := filepath.Join(dir, "cnt.arrow")
	stdout = mustEmsf(t, "fit", "--input", data, "--algorithm", "cnt", "--holdout", "0.2", "--out", cntOut, "--quiet")
	for _, want := range []string{"CNT (counting) n=20 u=2", "held-out log-likelihood", "no model written"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("cnt output lacks %q:\n%s", want, stdout)
		}
	}
	assertOnlyFiles(t, dir, "klm.arrow", "t.csv")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--order", "3", "--algorithm", "nmf"}, `--algorithm "nmf"`},
		{[]string{"--order", "3", "--algorithm", "klm", "--tie", "shared-k"}, "--tie must be none"},
		{[]string{"--order", "3", "--algorithm", "klm", "--alpha", "0.5"}, "--alpha"},
		{[]string{"--order", "3,4", "--holdout", "0.1", "--algorithm", "klm"}, "--holdout"},
		{[]string{"--algorithm", "cnt", "--incremental"}, "--incremental"},
	} {
		code, _, errs := emsf(t, append([]string{"fit", "--input", data, "--quiet", "--out", filepath.Join(dir, "x.arrow")}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}
