package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
)

// TestIncrementalOnlineEM: fit --incremental --online-em writes a
// stochastic model recording its settings, whose log-likelihood beats the
// random start's, deterministically; bad flags are usage errors naming
// the flag.
func TestIncrementalOnlineEM(t *testing.T) {
	dir := t.TempDir()
	input := writeFile(t, dir, "data.csv", incCSV(30, 2, 3000, 5))
	out := filepath.Join(dir, "oem.arrow")
	args := []string{"fit", "--incremental", "--online-em", "--gamma-exp", "0.8", "--burn-in", "100", "--input", input,
		"--order", "4", "--quiet", "--seed", "3", "--passes", "2"}
	mustEmsf(t, append(args, "--out", out)...)
	mf, err := arrowio.ReadModel(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := mf.Model.Validate(); err != nil {
		t.Fatal(err)
	}
	if mf.Params["online_em"] != "true" || mf.Params["gamma_exp"] != "0.8" || mf.Params["burn_in"] != "100" {
		t.Errorf("params %v", mf.Params)
	}
	data, err := loadData(t.Context(), &inputFlags{input: input, state: "state", action: "action", next: "next_state"}, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	fitted, _, err := factor.LogLikelihood(mf.Model, data.train)
	if err != nil {
		t.Fatal(err)
	}
	init, _, err := factor.LogLikelihood(factor.NewRandom(mf.Model.N, 4, mf.Model.U, factor.TieNone, 3), data.train)
	if err != nil {
		t.Fatal(err)
	}
	if !(fitted > init) {
		t.Errorf("online EM log-likelihood %v is not above the random start's %v", fitted, init)
	}
	again := filepath.Join(dir, "again.arrow")
	mustEmsf(t, append(args, "--out", again)...)
	mf2, err := arrowio.ReadModel(again)
	if err != nil {
		t.Fatal(err)
	}
	if !mf2.Model.Equal(mf.Model) {
		t.Error("two runs differ")
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--online-em"}, "add --incremental"},
		{[]string{"--incremental", "--online-em", "--gamma-exp", "0.5"}, "--gamma-exp 0.5"},
		{[]string{"--incremental", "--online-em", "--burn-in", "0"}, "--burn-in 0"},
		{[]string{"--incremental", "--online-em", "--online-em-floor", "1"}, "--online-em-floor 1"},
		{[]string{"--incremental", "--online-em", "--alpha", "0.5"}, "--alpha"},
	} {
		code, _, errs := emsf(t, append([]string{"fit", "--input", input, "--order", "3", "--quiet", "--out", filepath.Join(dir, "x.arrow")}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}
