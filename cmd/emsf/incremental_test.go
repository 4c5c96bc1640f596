package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emsf/emsf/arrowio"
)

// incCSV returns a CSV of count random transitions over n states and u
// actions, with duplicates and a count column.
func incCSV(n, u, count int, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 7))
	var b strings.Builder
	b.WriteString("state,action,next_state,count\n")
	for range count {
		i := rng.IntN(n)
		fmt.Fprintf(&b, "%d,%d,%d,%d\n", i, rng.IntN(u), (i+rng.IntN(4))%n, 1+rng.IntN(3))
	}
	return b.String()
}

// TestFitIncrementalBadFlags: each bad incremental flag or combination is a
// usage error naming the flag, and no model is written.
func TestFitIncrementalBadFlags(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		wants []string
	}{
		{"negative eta-max", []string{"--eta-max", "-1"}, []string{"--eta-max", "-1"}},
		{"negative commit-every", []string{"--commit-every", "-5"}, []string{"--commit-every", "-5"}},
		{"NaN commit-every", []string{"--commit-every", "NaN"}, []string{"--commit-every", "NaN"}},
		{"infinite commit-every", []string{"--commit-every", "+Inf"}, []string{"--commit-every", "Inf"}},
		{"zero passes", []string{"--passes", "0"}, []string{"--passes", "0"}},
		{"bad alpha", []string{"--alpha", "0"}, []string{"--alpha", "0"}},
		{"holdout", []string{"--holdout", "0.2"}, []string{"--incremental", "--holdout"}},
		{"several orders", []string{"--order", "1,2", "--holdout", "0.2"}, []string{"--incremental", "--order"}},
		{"restarts", []string{"--restarts", "3"}, []string{"--incremental", "--restarts 3"}},
		{"cluster", []string{"--embedded"}, []string{"--incremental", "cluster"}},
		{"order above n", []string{"--order", "4"}, []string{"--order 4", "n = 3"}},
		{"state out of range", []string{"--states", "2"}, []string{"data.csv", "row 2", "out of range"}},
		{"eta-max not a number", []string{"--eta-max", "lots"}, []string{"eta-max", "lots"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			input := writeFile(t, dir, "data.csv", goodCSV)
			args := append([]string{"fit", "--incremental", "--input", input, "--order", "2", "--quiet",
				"--out", filepath.Join(dir, "model.arrow")}, tc.args...)
			code, _, errs := emsf(t, args...)
			if code == 0 {
				t.Fatalf("exit 0; want an error")
			}
			for _, w := range tc.wants {
				if !strings.Contains(errs, w) {
					t.Errorf("error %q does not mention %q", errs, w)
				}
			}
			assertOnlyFiles(t, dir, "data.csv")
		})
	}
}

// TestFitIncrementalEqualsBatchIteration: `fit --incremental --commit-every
// 0 --passes P` gives the model of `fit --iters P --tol 0` on the same data
// within 1e-12 relative, for several --eta-max, with n and u inferred by a
// sizing pass or given, and records the same data fingerprint.
func TestFitIncrementalEqualsBatchIteration(t *testing.T) {
	dir := t.TempDir()
	input := writeFile(t, dir, "data.csv", incCSV(13, 2, 500, 3))
	prevLogLik := map[string]float64{}
	{
		prev := filepath.Join(dir, "prev.arrow")
		mustEmsf(t, "fit", "--input", input, "--order", "3", "--iters", "2", "--tol", "0", "--seed", "4", "--quiet", "--out", prev)
		mf, err := arrowio.ReadModel(prev)
		if err != nil {
			t.Fatal(err)
		}
		prevLogLik["3"] = mf.Model.LogLik
	}
	for _, passes := range []string{"1", "3"} {
		batch := filepath.Join(dir, "batch.arrow")
		mustEmsf(t, "fit", "--input", input, "--order", "3", "--iters", passes, "--tol", "0", "--seed", "4", "--quiet", "--out", batch)
		want, err := arrowio.ReadModel(batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, extra := range [][]string{
			{"--eta-max", "1"}, {"--eta-max", "7"}, {"--eta-max", "1000"}, {"--eta-max", "0"},
			{"--eta-max", "7", "--states", "13", "--actions", "2"},
		} {
			out := filepath.Join(dir, "inc.arrow")
			args := append([]string{"fit", "--incremental", "--commit-every", "0", "--passes", passes, "--input", input,
				"--order", "3", "--seed", "4", "--quiet", "--out", out}, extra...)
			stdout := mustEmsf(t, args...)
			if !strings.Contains(stdout, "wrote "+out) {
				t.Errorf("stdout %q does not say it wrote the model", stdout)
			}
			got, err := arrowio.ReadModel(out)
			if err != nil {
				t.Fatal(err)
			}
			g, w := got.Model, want.Model
			if g.N != w.N || g.M != w.M || g.U != w.U || g.Iteration != w.Iteration {
				t.Fatalf("%v: model n=%d m=%d u=%d iteration %d; batch n=%d m=%d u=%d iteration %d", extra, g.N, g.M, g.U, g.Iteration, w.N, w.M, w.U, w.Iteration)
			}
			if got.Fingerprint != want.Fingerprint {
				t.Errorf("%v: fingerprint %s, batch %s", extra, got.Fingerprint, want.Fingerprint)
			}
			if got.Params["incremental"] != "true" || got.Params["passes"] != passes {
				t.Errorf("%v: params %v", extra, got.Params)
			}
			for b := range w.D {
				relClose(t, fmt.Sprint(extra, " D"), g.D[b], w.D[b])
			}
			for b := range w.KT {
				relClose(t, fmt.Sprint(extra, " KT"), g.KT[b], w.KT[b])
			}
			// The incremental loglik is that of the last commit's counts,
			// i.e. of the model before the last pass: the batch model of
			// one iteration fewer (whose file carries its own loglik).
			if wantLL, ok := prevLogLik[passes]; ok {
				if d := math.Abs(g.LogLik - wantLL); d > 1e-12*math.Abs(wantLL) {
					t.Errorf("%v: loglik %.17g, batch of one iteration fewer %.17g", extra, g.LogLik, wantLL)
				}
			}
		}
	}
}

func relClose(t *testing.T, what string, got, want []float64) {
	t.Helper()
	for k := range want {
		if d := math.Abs(got[k] - want[k]); d > 1e-12*math.Abs(want[k]) {
			t.Fatalf("%s[%d] = %.17g, batch %.17g", what, k, got[k], want[k])
		}
	}
}

// TestFitIncrementalAlpha: frequent commits with α < 1 over several passes
// give a valid (stochastic) model with one commit per --commit-every.
func TestFitIncrementalAlpha(t *testing.T) {
	dir := t.TempDir()
	input := writeFile(t, dir, "data.csv", incCSV(11, 3, 400, 5))
	out := filepath.Join(dir, "m.arrow")
	stdout := mustEmsf(t, "fit", "--incremental", "--input", input, "--order", "2", "--alpha", "0.5",
		"--commit-every", "100", "--eta-max", "16", "--passes", "2", "--quiet", "--out", out)
	if !strings.Contains(stdout, "2 passes") {
		t.Errorf("stdout %q", stdout)
	}
	mf, err := arrowio.ReadModel(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := mf.Model.Validate(); err != nil {
		t.Fatal(err)
	}
	// 400 rows of counts 1..3 per pass: at least 400/100·2 commits.
	if mf.Model.Iteration < 8 {
		t.Errorf("iteration %d: want one commit per 100 transitions", mf.Model.Iteration)
	}
}
