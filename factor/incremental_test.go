package factor_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// incTransition is one logged transition of the incremental tests.
type incTransition struct {
	i, a, j int
	c       float64
}

// incStream returns a stream of transitions over n states and u actions with
// many duplicates, non-integer counts and a few states never visited.
func incStream(n, u, count int, seed uint64) []incTransition {
	rng := rand.New(rand.NewPCG(seed, 4))
	out := make([]incTransition, count)
	for k := range out {
		i := rng.IntN(n - 2) // states n-2, n-1 are never a source
		out[k] = incTransition{i: i, a: rng.IntN(u), j: (i + rng.IntN(5)) % n, c: float64(1+rng.IntN(3)) * 0.75}
	}
	return out
}

// batchBlocks counts the stream the way `emsf fit` does.
func batchBlocks(t *testing.T, ts []incTransition, u int) []*factor.Block {
	t.Helper()
	var ct shard.Counter
	for _, x := range ts {
		if err := ct.Add(x.i, x.a, x.j, x.c); err != nil {
			t.Fatal(err)
		}
	}
	return ct.Matrices(u)
}

// closeRel fails unless every entry of got is within tol of want,
// relative to the entry.
func closeRel(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	for k := range want {
		if d := math.Abs(got[k] - want[k]); d > tol*math.Abs(want[k]) {
			t.Fatalf("%s[%d] = %.17g, batch %.17g (relative difference %.3g > %g)", what, k, got[k], want[k], d/math.Abs(want[k]), tol)
		}
	}
}

func runPass(t *testing.T, inc *factor.Incremental, ts []incTransition) {
	t.Helper()
	for _, x := range ts {
		if err := inc.Add(x.i, x.a, x.j, x.c); err != nil {
			t.Fatal(err)
		}
	}
	if err := inc.EndPass(); err != nil {
		t.Fatal(err)
	}
}

// TestIncrementalEqualsBatchIteration: with t_c = all data and α = 1, each
// pass of incremental EMSF is one batch EM iteration, whatever η_max
// (DESIGN.md invariant 5), to 1e-12 relative; and η_max bounds the buffer.
func TestIncrementalEqualsBatchIteration(t *testing.T) {
	const n, u = 17, 2
	ts := incStream(n, u, 600, 9)
	total := 0.0
	for _, x := range ts {
		total += x.c
	}
	blocks := batchBlocks(t, ts, u)
	for _, c := range []struct {
		tie factor.Tie
		m   int
	}{{factor.TieNone, 3}, {factor.TieNone, 4}, {factor.TieSharedK, 3}, {factor.TieSharedD, 4}} {
		tie, m := c.tie, c.m
		for _, passes := range []int{1, 2} {
			want := factor.NewRandom(n, m, u, tie, 5)
			if _, err := factor.Fit(context.Background(), want, blocks, factor.FitOptions{Converger: factor.Converger{MaxIter: passes}}); err != nil {
				t.Fatal(err)
			}
			for _, eta := range []int{1, 7, 1000, 0} {
				for _, every := range []float64{0, total} {
					md := factor.NewRandom(n, m, u, tie, 5)
					inc, err := factor.NewIncremental(md, factor.IncrementalOptions{EtaMax: eta, CommitEvery: every, Alpha: 1})
					if err != nil {
						t.Fatal(err)
					}
					for range passes {
						runPass(t, inc, ts)
					}
					st := inc.Stats()
					if eta > 0 && st.PeakBuffered > eta {
						t.Errorf("η_max %d: peak buffered %d", eta, st.PeakBuffered)
					}
					if st.Commits != passes || md.Iteration != passes || st.Transitions != passes*len(ts) {
						t.Errorf("η_max %d: %d commits, iteration %d, %d transitions; want %d, %d, %d", eta, st.Commits, md.Iteration, st.Transitions, passes, passes, passes*len(ts))
					}
					for b := range md.D {
						closeRel(t, "D", md.D[b], want.D[b], 1e-12)
					}
					for b := range md.KT {
						closeRel(t, "KT", md.KT[b], want.KT[b], 1e-12)
					}
					if d := math.Abs(md.LogLik - want.LogLik); d > 1e-12*math.Abs(want.LogLik) {
						t.Errorf("%s η_max %d: loglik %.17g, batch %.17g", tie, eta, md.LogLik, want.LogLik)
					}
					if !math.IsNaN(md.WKL) {
						t.Errorf("WKL = %v, want NaN (no data term in incremental mode)", md.WKL)
					}
				}
			}
		}
	}
}

// checkStochastic fails unless every row of D and of K sums to 1 within
// 1e-12 and no entry is negative.
func checkStochastic(t *testing.T, md *factor.Model, when string) {
	t.Helper()
	n, m := md.N, md.M
	for b, d := range md.D {
		for i := range n {
			s := 0.0
			for _, v := range d[i*m : i*m+m] {
				if v < 0 {
					t.Fatalf("%s: D block %d row %d has %v", when, b, i, v)
				}
				s += v
			}
			if math.Abs(s-1) > 1e-12 {
				t.Fatalf("%s: D block %d row %d sums to %.17g", when, b, i, s)
			}
		}
	}
	for b, kt := range md.KT {
		sums := make([]float64, m)
		for j := range n {
			for l, v := range kt[j*m : j*m+m] {
				if v < 0 {
					t.Fatalf("%s: K block %d [%d,%d] = %v", when, b, l, j, v)
				}
				sums[l] += v
			}
		}
		for l, s := range sums {
			if math.Abs(s-1) > 1e-12 {
				t.Fatalf("%s: K block %d row %d sums to %.17g", when, b, l, s)
			}
		}
	}
}

// TestIncrementalAlphaStaysStochastic: with α < 1 and frequent commits the
// rows of D and K stay stochastic after every commit, η_max bounds the
// buffer, and the fit improves the log-likelihood of the data.
func TestIncrementalAlphaStaysStochastic(t *testing.T) {
	const n, m, u = 23, 4, 3
	ts := incStream(n, u, 3000, 11)
	for _, tie := range []factor.Tie{factor.TieNone, factor.TieSharedK, factor.TieSharedD} {
		for _, eta := range []int{1, 5, 0} {
			md := factor.NewRandom(n, m, u, tie, 3)
			ll0, _, err := factor.LogLikelihood(md, batchBlocks(t, ts, u))
			if err != nil {
				t.Fatal(err)
			}
			inc, err := factor.NewIncremental(md, factor.IncrementalOptions{EtaMax: eta, CommitEvery: 50, Alpha: 0.3})
			if err != nil {
				t.Fatal(err)
			}
			for pass := range 3 {
				for k, x := range ts {
					before := inc.Stats().Commits
					if err := inc.Add(x.i, x.a, x.j, x.c); err != nil {
						t.Fatal(err)
					}
					if eta > 0 && inc.Buffered() > eta {
						t.Fatalf("η_max %d: %d buffered", eta, inc.Buffered())
					}
					if inc.Stats().Commits != before {
						checkStochastic(t, md, fmt.Sprintf("pass %d transition %d", pass, k))
					}
				}
				if err := inc.EndPass(); err != nil {
					t.Fatal(err)
				}
				checkStochastic(t, md, "end of pass")
			}
			st := inc.Stats()
			if eta > 0 && st.PeakBuffered > eta {
				t.Errorf("η_max %d: peak buffered %d", eta, st.PeakBuffered)
			}
			if st.Commits < 3*len(ts)/50/3 {
				t.Errorf("only %d commits", st.Commits)
			}
			ll, _, err := factor.LogLikelihood(md, batchBlocks(t, ts, u))
			if err != nil {
				t.Fatal(err)
			}
			if !(ll > ll0) {
				t.Errorf("%s η_max %d: log-likelihood %v did not improve on the random init's %v", tie, eta, ll, ll0)
			}
		}
	}
}

// TestIncrementalRejectsBadInput: zero, negative, NaN and infinite counts,
// negative and out-of-range indices and bad options are errors that name
// the problem, and a rejected transition changes nothing.
func TestIncrementalRejectsBadInput(t *testing.T) {
	md := factor.NewRandom(4, 2, 2, factor.TieNone, 1)
	inc, err := factor.NewIncremental(md, factor.IncrementalOptions{EtaMax: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		i, a, j int
		c       float64
		want    string
	}{
		{0, 0, 1, 0, "count 0"},
		{0, 0, 1, -1, "count -1"},
		{0, 0, 1, math.NaN(), "count NaN"},
		{0, 0, 1, math.Inf(1), "count +Inf"},
		{-1, 0, 1, 1, "out of range"},
		{0, -1, 1, 1, "out of range"},
		{0, 0, -2, 1, "out of range"},
		{4, 0, 1, 1, "out of range"},
		{0, 2, 1, 1, "out of range"},
		{0, 0, 4, 1, "out of range"},
	} {
		err := inc.Add(tc.i, tc.a, tc.j, tc.c)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "factor: ") {
			t.Errorf("Add(%d, %d, %d, %v) = %v; want an error with %q", tc.i, tc.a, tc.j, tc.c, err, tc.want)
		}
	}
	if st := inc.Stats(); st.Transitions != 0 || inc.Buffered() != 0 {
		t.Errorf("rejected transitions were counted: %+v, %d buffered", st, inc.Buffered())
	}
	if err := inc.EndPass(); err != nil || inc.Stats().Commits != 0 || md.Iteration != 0 {
		t.Errorf("EndPass with no data: %v, %d commits, iteration %d", err, inc.Stats().Commits, md.Iteration)
	}
	for _, o := range []factor.IncrementalOptions{
		{EtaMax: -1}, {Alpha: 1.5}, {Alpha: -0.1}, {Alpha: math.NaN()},
		{CommitEvery: -1}, {CommitEvery: math.NaN()}, {CommitEvery: math.Inf(1)},
	} {
		if _, err := factor.NewIncremental(md, o); err == nil || !strings.HasPrefix(err.Error(), "factor: incremental: ") {
			t.Errorf("NewIncremental(%+v) = %v; want an error", o, err)
		}
	}
	if _, err := factor.NewIncremental(nil, factor.IncrementalOptions{}); err == nil {
		t.Error("NewIncremental(nil) succeeded")
	}
}
