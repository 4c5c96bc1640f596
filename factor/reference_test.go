package factor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// refTol is the entrywise tolerance between the forward-backward iteration
// and the fused kernel. Both compute the same posteriors (Prop. 1) by
// different float operations: FB normalises α̂ ⊗ β̂ per step, the kernel
// scales d·k by c/g per nonzero, so each posterior differs by a few ulps
// (≈1e-16) and a row sum of at most a few hundred of them by < 1e-13.
const refTol = 1e-12

// randomEpisodes returns episodes of random states and actions whose
// lengths include the corner cases 0 (no state), 1 (a start only) and 2 (a
// single transition).
func randomEpisodes(rng *rand.Rand, n, u, count, maxLen int) []Episode {
	eps := []Episode{{}, {States: []int{rng.IntN(n)}}}
	for len(eps) < count {
		tau := 2 + rng.IntN(maxLen-1)
		ep := Episode{States: make([]int, tau), Actions: make([]int, tau-1)}
		for t := range ep.States {
			ep.States[t] = rng.IntN(n)
		}
		for t := range ep.Actions {
			ep.Actions[t] = rng.IntN(u)
		}
		eps = append(eps, ep)
	}
	return eps
}

// engineIteration runs one iteration of the production path on the count
// blocks of episodes: Pass + Commit.
func engineIteration(t *testing.T, md *Model, eps []Episode, alpha float64) (*Model, float64) {
	t.Helper()
	blocks, err := EpisodeBlocks(eps, md.N, md.U)
	if err != nil {
		t.Fatal(err)
	}
	next := md.Clone()
	acc := NewAccumulator(next)
	if err := Pass(context.Background(), next, blocks, acc, 1, true); err != nil {
		t.Fatal(err)
	}
	if err := CheckSumX(acc.SumX, TotalCount(blocks)); err != nil {
		t.Fatal(err)
	}
	acc.Commit(next, alpha, DataTerm(blocks))
	return next, acc.LogLik
}

// maxDiff returns the largest entrywise |a-b| over D and K and where it is.
func maxDiff(a, b *Model) (float64, string) {
	worst, where := 0.0, ""
	for k := range a.D {
		for e := range a.D[k] {
			if d := math.Abs(a.D[k][e] - b.D[k][e]); d > worst || math.IsNaN(d) {
				worst, where = d, fmt.Sprintf("D block %d [%d,%d]", k, e/a.M, e%a.M)
			}
		}
	}
	for k := range a.KT {
		for e := range a.KT[k] {
			if d := math.Abs(a.KT[k][e] - b.KT[k][e]); d > worst || math.IsNaN(d) {
				worst, where = d, fmt.Sprintf("K block %d [%d,%d]", k, e%a.M, e/a.M)
			}
		}
	}
	return worst, where
}

func relDiff(a, b float64) float64 {
	return math.Abs(a-b) / math.Max(math.Abs(a), math.Abs(b))
}

// unvisited counts the (D block, row) pairs no transition leaves from.
func unvisited(md *Model, eps []Episode) int {
	seen := make(map[[2]int]bool)
	for _, ep := range eps {
		for t, a := range ep.Actions {
			seen[[2]int{md.DBlock(a), ep.States[t]}] = true
		}
	}
	return len(md.D)*md.N - len(seen)
}

// TestReferenceMatchesPass checks incremental-emsf Prop. 1: one
// forward-backward iteration over episodes equals one Pass + Commit (α = 1)
// over the episodes' count matrices, entry by entry, for every tie mode.
func TestReferenceMatchesPass(t *testing.T) {
	for _, tie := range []Tie{TieNone, TieSharedK, TieSharedD} {
		for _, u := range []int{1, 2} {
			for _, m := range []int{3, 5} {
				for seed := uint64(1); seed <= 3; seed++ {
					t.Run(fmt.Sprintf("tie=%s/u=%d/m=%d/seed=%d", tie, u, m, seed), func(t *testing.T) {
						const n = 15
						rng := rand.New(rand.NewPCG(seed, 7))
						// Episodes over states 0..n-3 only, plus one whose
						// last state, n-1, is seen only as a target: so
						// state n-2 is never seen (its rows of D and its
						// column of K get no data) and n-1 has data for
						// K but not for D.
						eps := randomEpisodes(rng, n-2, u, 12, 20)
						eps = append(eps, Episode{States: []int{0, n - 1}, Actions: []int{u - 1}})
						md := NewRandom(n, m, u, tie, seed)
						orig := md.Clone()

						ref, refLL, err := ReferenceIteration(md, eps, ReferenceOptions{})
						if err != nil {
							t.Fatal(err)
						}
						if !md.Equal(orig) {
							t.Fatal("ReferenceIteration changed its input model")
						}
						eng, engLL := engineIteration(t, md, eps, 1)
						d, where := maxDiff(ref, eng)
						if !(d <= refTol) {
							t.Errorf("FB and fused kernel differ by %g at %s", d, where)
						}
						t.Logf("max |FB - kernel| = %g", d)
						// Σ of ≤ 240 log terms, each a few ulps apart.
						if r := relDiff(refLL, engLL); !(r <= 1e-12) {
							t.Errorf("loglik: FB %v, kernel %v (rel diff %g)", refLL, engLL, r)
						}
						if err := ref.Validate(); err != nil {
							t.Error(err)
						}
						// Rows never visited keep their values, bitwise.
						if unvisited(md, eps) == 0 {
							t.Fatal("test data visits every row; make it sparser")
						}
						for b := range ref.D {
							for i := 0; i < n; i++ {
								r0, r1 := orig.D[b][i*m:(i+1)*m], ref.D[b][i*m:(i+1)*m]
								same := true
								for l := range r0 {
									same = same && r0[l] == r1[l]
								}
								re := eng.D[b][i*m : (i+1)*m]
								engSame := true
								for l := range r0 {
									engSame = engSame && r0[l] == re[l]
								}
								if same != engSame {
									t.Errorf("D block %d row %d: kept by FB %v, by kernel %v", b, i, same, engSame)
								}
							}
						}
					})
				}
			}
		}
	}
}

// TestReferenceMatchesFit uses the public Fit (MaxIter 1) as the other side.
func TestReferenceMatchesFit(t *testing.T) {
	const n, m, u = 20, 4, 2
	rng := rand.New(rand.NewPCG(11, 12))
	truth, err := TrueModel(n, 3, u, RowsDirichlet, 0.5, rng)
	if err != nil {
		t.Fatal(err)
	}
	eps, err := SampleEpisodes(truth, 500, 25, rng)
	if err != nil {
		t.Fatal(err)
	}
	md := NewRandom(n, m, u, TieNone, 5)
	ref, refLL, err := ReferenceIteration(md, eps, ReferenceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := EpisodeBlocks(eps, n, u)
	if err != nil {
		t.Fatal(err)
	}
	fit := md.Clone()
	res, err := Fit(context.Background(), fit, blocks, FitOptions{Converger: Converger{MaxIter: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if d, where := maxDiff(ref, fit); !(d <= refTol) {
		t.Errorf("FB and Fit differ by %g at %s", d, where)
	}
	if r := relDiff(refLL, res.LogLik); !(r <= 1e-12) {
		t.Errorf("loglik: FB %v, Fit %v (rel diff %g)", refLL, res.LogLik, r)
	}
}

// TestReferenceLearningRate: with α < 1 both paths blend the same way.
func TestReferenceLearningRate(t *testing.T) {
	const n, m, u = 10, 3, 2
	rng := rand.New(rand.NewPCG(3, 4))
	eps := randomEpisodes(rng, n, u, 10, 15)
	md := NewRandom(n, m, u, TieSharedK, 9)
	ref, _, err := ReferenceIteration(md, eps, ReferenceOptions{Alpha: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	eng, _ := engineIteration(t, md, eps, 0.3)
	if d, where := maxDiff(ref, eng); !(d <= refTol) {
		t.Errorf("α=0.3: FB and kernel differ by %g at %s", d, where)
	}
	if _, _, err := ReferenceIteration(md, eps, ReferenceOptions{Alpha: 1.5}); err == nil {
		t.Error("α = 1.5 accepted")
	}
}

// TestReferenceMuPiCancel: μ and Π change the log-likelihood by the
// constant Σ log μ_{s_1} + Σ_t log π_{s_t a_t} (incremental-emsf eq. 9) and
// leave the posteriors, hence the model, unchanged.
func TestReferenceMuPiCancel(t *testing.T) {
	const n, m, u = 12, 4, 3
	rng := rand.New(rand.NewPCG(21, 22))
	eps := randomEpisodes(rng, n, u, 15, 30)
	mu := make([]float64, n)
	Dirichlet(mu, 2, rng)
	pi := make([]float64, n*u)
	for i := 0; i < n; i++ {
		Dirichlet(pi[i*u:(i+1)*u], 2, rng)
	}
	md := NewRandom(n, m, u, TieNone, 1)
	plain, plainLL, err := ReferenceIteration(md, eps, ReferenceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	full, fullLL, err := ReferenceIteration(md, eps, ReferenceOptions{Mu: mu, Pi: pi})
	if err != nil {
		t.Fatal(err)
	}
	if d, where := maxDiff(plain, full); !(d <= refTol) {
		t.Errorf("μ, Π changed the model by %g at %s", d, where)
	}
	want := plainLL
	for _, ep := range eps {
		if len(ep.States) > 0 {
			want += math.Log(mu[ep.States[0]])
		}
		for t, a := range ep.Actions {
			want += math.Log(pi[ep.States[t]*u+a])
		}
	}
	if r := relDiff(fullLL, want); !(r <= 1e-12) {
		t.Errorf("loglik with μ, Π = %v, want %v (rel diff %g)", fullLL, want, r)
	}

	// A start μ excludes, an action Π excludes: errors, not NaN.
	zmu := append([]float64(nil), mu...)
	zmu[eps[2].States[0]] = 0
	if _, _, err := ReferenceIteration(md, eps, ReferenceOptions{Mu: zmu}); err == nil {
		t.Error("start with μ = 0 accepted")
	}
	zpi := append([]float64(nil), pi...)
	zpi[eps[2].States[1]*u+eps[2].Actions[1]] = 0
	if _, _, err := ReferenceIteration(md, eps, ReferenceOptions{Pi: zpi}); err == nil {
		t.Error("action with π = 0 accepted")
	}
}

// TestReferenceHandComputed: with m = 1, D is all ones and one iteration
// sets K^a to the empirical next-state frequencies of action a; the
// log-likelihood is Σ_t log K_{s_{t+1}} of the initial K.
func TestReferenceHandComputed(t *testing.T) {
	md := NewModel(2, 1, 2, TieNone)
	for a := range 2 {
		md.D[a][0], md.D[a][1] = 1, 1
		md.KT[a][0], md.KT[a][1] = 0.5, 0.5
	}
	eps := []Episode{
		{States: []int{0, 1, 1, 0}, Actions: []int{0, 0, 1}},
		{States: []int{1, 1}, Actions: []int{0}},
	}
	// action 0: next states 1, 1, 1 → K^0 = (0, 1); action 1: next 0 → (1, 0).
	next, ll, err := ReferenceIteration(md, eps, ReferenceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]float64{{0, 1}, {1, 0}}
	for a := range 2 {
		for j := range 2 {
			if got := next.KT[a][j]; got != want[a][j] {
				t.Errorf("K^%d[0,%d] = %v, want %v", a, j, got, want[a][j])
			}
		}
	}
	if w := 4 * math.Log(0.5); math.Abs(ll-w) > 1e-15 {
		t.Errorf("loglik %v, want 4·log ½ = %v", ll, w)
	}
}

// TestReferenceZeroProbability: a transition the mask excludes is a
// *TransitionError naming it, in both paths.
func TestReferenceZeroProbability(t *testing.T) {
	md := NewModel(3, 1, 1, TieNone)
	for i := range 3 {
		md.D[0][i] = 1
	}
	md.KT[0][0], md.KT[0][1], md.KT[0][2] = 0.5, 0.5, 0 // state 2 unreachable
	eps := []Episode{{States: []int{0, 1, 2}, Actions: []int{0, 0}}}
	_, _, err := ReferenceIteration(md, eps, ReferenceOptions{})
	var te *TransitionError
	if !errors.As(err, &te) || te.From != 1 || te.To != 2 || te.Action != 0 {
		t.Fatalf("FB: err = %v, want a TransitionError for 1 --0--> 2", err)
	}
	blocks, err := EpisodeBlocks(eps, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	err = Pass(context.Background(), md, blocks, NewAccumulator(md), 1, true)
	if !errors.As(err, &te) || te.From != 1 || te.To != 2 {
		t.Fatalf("kernel: err = %v, want a TransitionError for 1 --0--> 2", err)
	}
}

func TestReferenceBadInput(t *testing.T) {
	md := NewRandom(4, 2, 2, TieNone, 1)
	for name, ep := range map[string]Episode{
		"actions without states": {Actions: []int{0}},
		"too few actions":        {States: []int{0, 1, 2}, Actions: []int{0}},
		"state out of range":     {States: []int{0, 4}, Actions: []int{0}},
		"negative state":         {States: []int{-1, 0}, Actions: []int{0}},
		"action out of range":    {States: []int{0, 1}, Actions: []int{2}},
	} {
		if _, _, err := ReferenceIteration(md, []Episode{ep}, ReferenceOptions{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, _, err := ReferenceIteration(md, nil, ReferenceOptions{Mu: make([]float64, 3)}); err == nil {
		t.Error("μ of the wrong length accepted")
	}
	if _, _, err := ReferenceIteration(md, nil, ReferenceOptions{Pi: make([]float64, 3)}); err == nil {
		t.Error("Π of the wrong length accepted")
	}
}

// TestReferenceMonotone: FB EM never decreases the log-likelihood
// (DESIGN §2 invariant 2) on trajectories sampled from a true model.
func TestReferenceMonotone(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	truth, err := TrueModel(30, 4, 2, RowsUniform, 0, rng)
	if err != nil {
		t.Fatal(err)
	}
	eps, err := SampleEpisodes(truth, 2000, 50, rng)
	if err != nil {
		t.Fatal(err)
	}
	md := NewRandom(30, 6, 2, TieNone, 2)
	prev := math.Inf(-1)
	for it := range 10 {
		next, ll, err := ReferenceIteration(md, eps, ReferenceOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// EM's monotonicity holds exactly in exact arithmetic; allow the
		// rounding of a sum of 2000 logs.
		if ll < prev-1e-12*math.Abs(prev) {
			t.Errorf("iteration %d: loglik %v < previous %v", it, ll, prev)
		}
		prev = ll
		md = next
	}
}
