package factor

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// ftData is a small weighted problem with two actions: transitions sampled
// from a random model with n = 15, m = 3, in blocks of 2 rows.
func ftData(t testing.TB, tie Tie) (*Model, []*Block) {
	t.Helper()
	c := ivCase{n: 15, m: 3, u: 2, tie: tie, seed: 77, visited: 0.9, noDataAction: -1, weighted: true}
	md, blocks, _, _ := c.data(t, 400, 2)
	return md, blocks
}

// TestFitLogLikMatchesMetric: the loglik Fit records (of the model before
// the last commit) equals LogLikelihood of that model bitwise, for 1 and 3
// workers, and the recorded WKL equals the metric WKL up to the order in
// which N is summed.
func TestFitLogLikMatchesMetric(t *testing.T) {
	for _, tie := range []Tie{TieNone, TieSharedK, TieSharedD} {
		for _, w := range []int{1, 3} {
			md, blocks := ftData(t, tie)
			if _, err := Fit(context.Background(), md, blocks, FitOptions{Workers: w, Converger: Converger{MaxIter: 4}}); err != nil {
				t.Fatal(err)
			}
			before := md.Clone()
			res, err := Fit(context.Background(), md, blocks, FitOptions{Workers: w, Converger: Converger{MaxIter: 1}})
			if err != nil {
				t.Fatal(err)
			}
			ll, _, err := LogLikelihood(before, blocks)
			if err != nil {
				t.Fatal(err)
			}
			if math.Float64bits(ll) != math.Float64bits(md.LogLik) || math.Float64bits(ll) != math.Float64bits(res.LogLik) {
				t.Errorf("%s workers %d: LogLikelihood %.17g, model %.17g, result %.17g", tie, w, ll, md.LogLik, res.LogLik)
			}
			wkl, err := WKL(before, blocks)
			if err != nil {
				t.Fatal(err)
			}
			// Both divide the same numerator by N summed in two orders
			// (by block vs by row): they agree to a few ulps.
			if math.Abs(wkl-md.WKL) > 1e-13*math.Abs(wkl) {
				t.Errorf("%s workers %d: WKL metric %.17g, Commit %.17g", tie, w, wkl, md.WKL)
			}
			if md.Iteration != 5 {
				t.Errorf("Iteration = %d, want 5", md.Iteration)
			}
		}
	}
}

// TestFitConvergesMonotone: with a tolerance, Fit stops with Converged,
// reports every iteration to Progress in order, and the reported loglik
// never decreases (α = 1; slack as in TestInvariantsRandom).
func TestFitConvergesMonotone(t *testing.T) {
	md, blocks := ftData(t, TieNone)
	var stats []IterStats
	res, err := Fit(context.Background(), md, blocks, FitOptions{
		Workers:   2,
		Converger: Converger{Tol: 1e-7, MaxIter: 2000},
		Progress:  func(s IterStats) { stats = append(stats, s) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != Converged || res.Iterations >= 2000 {
		t.Fatalf("status %v after %d iterations, want converged", res.Status, res.Iterations)
	}
	if len(stats) != res.Iterations {
		t.Fatalf("Progress called %d times for %d iterations", len(stats), res.Iterations)
	}
	total := TotalCount(blocks)
	for k, s := range stats {
		if s.Iteration != k+1 || math.IsNaN(s.LogLik) || s.NNZ == 0 || CheckSumX(s.SumX, total) != nil {
			t.Fatalf("stats %d: %+v", k, s)
		}
		if k == 0 {
			if !math.IsNaN(s.RelChange) {
				t.Errorf("first RelChange = %v, want NaN", s.RelChange)
			}
			continue
		}
		prev := stats[k-1].LogLik
		if s.LogLik < prev-1e-9*math.Abs(prev) {
			t.Fatalf("iteration %d: loglik fell from %.17g to %.17g", s.Iteration, prev, s.LogLik)
		}
		if want := (s.LogLik - prev) / math.Abs(s.LogLik); s.RelChange != want {
			t.Errorf("iteration %d: RelChange %v, want %v", s.Iteration, s.RelChange, want)
		}
	}
	if last := stats[len(stats)-1]; math.Abs(last.RelChange) > 1e-7 || res.LogLik != last.LogLik {
		t.Errorf("last RelChange %v (tol 1e-7), result loglik %v vs %v", last.RelChange, res.LogLik, last.LogLik)
	}
	if err := md.Validate(); err != nil {
		t.Error(err)
	}
}

// TestFitLogLikOnlyWhenNeeded: without a tolerance only the last pass
// computes the loglik (DESIGN §8: logs are expensive).
func TestFitLogLikOnlyWhenNeeded(t *testing.T) {
	md, blocks := ftData(t, TieSharedK)
	var lls []float64
	res, err := Fit(context.Background(), md, blocks, FitOptions{Converger: Converger{MaxIter: 4},
		Progress: func(s IterStats) { lls = append(lls, s.LogLik) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(lls) != 4 || !math.IsNaN(lls[0]) || !math.IsNaN(lls[2]) || math.IsNaN(lls[3]) {
		t.Fatalf("logliks per iteration %v: want NaN, NaN, NaN, value", lls)
	}
	if res.LogLik != lls[3] || md.LogLik != lls[3] || math.IsNaN(md.WKL) {
		t.Errorf("result loglik %v, model %v / WKL %v, last %v", res.LogLik, md.LogLik, md.WKL, lls[3])
	}
}

// TestFitAlpha: a fit with α < 1 keeps the model valid and, being a damped
// EM, still raises the likelihood of the data over the random init.
func TestFitAlpha(t *testing.T) {
	md, blocks := ftData(t, TieSharedD)
	ll0, _, err := LogLikelihood(md, blocks)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Fit(context.Background(), md, blocks, FitOptions{Alpha: 0.3, Converger: Converger{MaxIter: 20}}); err != nil {
		t.Fatal(err)
	}
	if err := md.Validate(); err != nil {
		t.Fatal(err)
	}
	ll1, _, err := LogLikelihood(md, blocks)
	if err != nil {
		t.Fatal(err)
	}
	if !(ll1 > ll0) {
		t.Errorf("loglik %v after 20 damped iterations, %v at init", ll1, ll0)
	}
}

// TestFitErrors: bad options and bad data are errors that leave the model
// untouched.
func TestFitErrors(t *testing.T) {
	md, blocks := ftData(t, TieNone)
	outOfShape, err := NewBlock(0, []int32{3}, []int32{15}, []float64{1})
	if err != nil {
		t.Fatal(err)
	}
	badAction, err := NewBlock(2, []int32{3}, []int32{1}, []float64{1})
	if err != nil {
		t.Fatal(err)
	}
	ok := Converger{MaxIter: 2}
	cases := []struct {
		name   string
		blocks []*Block
		opts   FitOptions
		want   string
	}{
		{"no stopping rule", blocks, FitOptions{}, "no stopping rule"},
		{"negative tol", blocks, FitOptions{Converger: Converger{Tol: -1, MaxIter: 1}}, "tolerance"},
		{"negative max iter", blocks, FitOptions{Converger: Converger{MaxIter: -1, Tol: 1}}, "iteration limit"},
		{"alpha > 1", blocks, FitOptions{Alpha: 1.5, Converger: ok}, "learning rate"},
		{"alpha < 0", blocks, FitOptions{Alpha: -0.1, Converger: ok}, "learning rate"},
		{"alpha NaN", blocks, FitOptions{Alpha: math.NaN(), Converger: ok}, "learning rate"},
		{"no blocks", nil, FitOptions{Converger: ok}, "no data"},
		{"state out of range", append(blocks[:1:1], outOfShape), FitOptions{Converger: ok}, "out of range"},
		{"action out of range", append(blocks[:1:1], badAction), FitOptions{Converger: ok}, "action 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fit := md.Clone()
			_, err := Fit(context.Background(), fit, tc.blocks, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "factor: ") {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if !fit.Equal(md) || fit.Iteration != md.Iteration {
				t.Error("a failed Fit changed the model")
			}
		})
	}
}

// TestFitCancel: a cancelled context stops Fit with its error.
func TestFitCancel(t *testing.T) {
	for _, w := range []int{1, 2} {
		md, blocks := ftData(t, TieNone)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := Fit(ctx, md, blocks, FitOptions{Workers: w, Converger: Converger{MaxIter: 100000}})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("workers %d: error %v, want context.Canceled", w, err)
		}
	}
}

// TestFitWorkersMoreThanBlocks: more workers than blocks, and Workers 0,
// give the single-worker result.
func TestFitWorkersMoreThanBlocks(t *testing.T) {
	md, blocks := ftData(t, TieSharedK)
	blocks = blocks[:3]
	var ref *Model
	for _, w := range []int{0, 1, 16} {
		fit := md.Clone()
		if _, err := Fit(context.Background(), fit, blocks, FitOptions{Workers: w, Converger: Converger{MaxIter: 3}}); err != nil {
			t.Fatal(err)
		}
		if ref == nil {
			ref = fit
		} else if !fit.Equal(ref) {
			t.Errorf("workers %d differs from workers 0", w)
		}
	}
}

// TestConverger covers the stopping rules and their validation.
func TestConverger(t *testing.T) {
	c := Converger{Tol: 1e-3, MaxIter: 10}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// Relative change |L_t − L_{t−1}|/|L_t|: 100 → 99 is 1/99 > 1e-3; 99 →
	// 98.95 is 0.05/98.95 ≈ 5.1e-4 ≤ 1e-3.
	steps := []struct {
		ll   float64
		want Status
	}{{-100, NotTerminated}, {math.NaN(), NotTerminated}, {-99, NotTerminated}, {-98.95, Converged}}
	for k, s := range steps {
		if got := c.Check(k+1, s.ll, 0); got != s.want {
			t.Errorf("step %d (loglik %v): %v, want %v", k+1, s.ll, got, s.want)
		}
	}
	c = Converger{MaxIter: 3}
	if !c.NeedsLogLik(3) || c.NeedsLogLik(2) {
		t.Error("NeedsLogLik without tolerance: want only the last iteration")
	}
	if c.Check(2, -1, 0) != NotTerminated || c.Check(3, -1, 0) != IterationLimit {
		t.Error("iteration limit")
	}
	c = Converger{TimeLimit: time.Second}
	if c.Check(50, math.NaN(), time.Second/2) != NotTerminated || c.Check(51, math.NaN(), time.Second) != TimeLimit {
		t.Error("time limit")
	}
	for s, want := range map[Status]string{NotTerminated: "not terminated", Converged: "converged",
		IterationLimit: "iteration limit", TimeLimit: "time limit", Status(9): "Status(9)"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(s), s.String(), want)
		}
	}
	if err := (&Converger{Tol: math.NaN(), MaxIter: 1}).Validate(); err == nil {
		t.Error("NaN tolerance accepted")
	}
}

// TestFitReducesFrobeniusError: EMSF of the right order on data sampled
// from a true factorization gets closer to the truth than its random init
// (the experiment of emsf-ijcai2015 Fig. 2 in miniature).
func TestFitReducesFrobeniusError(t *testing.T) {
	truth := NewRandom(20, 2, 1, TieNone, 3)
	rng := rand.New(rand.NewPCG(3, 3))
	states := make([]int, 20)
	for i := range states {
		states[i] = i
	}
	blocks := ivBlocks(t, 1, ivSample(rng, truth, 4000, []int{0}, states, false), 5)
	md := NewRandom(20, 2, 1, TieNone, 4)
	e0 := FrobeniusError(truth, md)
	if _, err := Fit(context.Background(), md, blocks, FitOptions{Converger: Converger{MaxIter: 200, Tol: 1e-9}}); err != nil {
		t.Fatal(err)
	}
	if e1 := FrobeniusError(truth, md); !(e1 < e0/2) {
		t.Errorf("Frobenius error %v after fit, %v at init: want at most half", e1, e0)
	}
}
