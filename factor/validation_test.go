package factor

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
)

// TestValidationMatchesOracle: validation scoring with its scores kept
// per factors, q cached and the work spread over spans is bitwise the
// scoring it replaced (oldValidation, the code of main 0da5eb0) for any
// workers: every factor product, every score of random rules (on and off
// the grids, counts or none, uniform q or not, a rule scoring −Inf), and
// every score and choice of a fit's sequence of Tune, TuneLambda,
// TuneLocal, Score and Rescore on changing factors; with q's cache
// small enough to give q up and compute it again (or to keep none), on
// one action and
// several, every tie, rows of the validation split without fit counts,
// and more nonzeros than a piece of chunkRows.
func TestValidationMatchesOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 6))
	for trial := range 12 {
		n, u := 60+50*trial, 1+trial%3
		tie := []Tie{TieNone, TieSharedD, TieSharedK}[trial/3%3]
		if u == 1 {
			tie = TieNone
		}
		perVal := 2 + trial%3
		if trial >= 9 {
			perVal = 4096/n + 3 // over a piece of nonzeros per action
		}
		fit := dropRows(RandomCounts(n, u, 1+trial%4, 4, uint64(trial)), 7)
		val := RandomCounts(n, u, perVal, 3, uint64(trial)+100)
		if trial%2 == 1 {
			fit = dropRows(chainCounts(n, u, 4*n, 0.7, uint64(trial)), 11)
		}
		md := NewRandom(n, 5, u, tie, uint64(trial))
		next := func(md *Model, iters int) {
			t.Helper()
			if _, err := Fit(context.Background(), md, fit, FitOptions{Converger: Converger{MaxIter: iters}}); err != nil {
				t.Fatal(err)
			}
		}
		next(md, 5)
		for workers := 1; workers <= 3; workers++ {
			md := md.Clone()
			v, err := NewValidation(n, u, tie, fit, val)
			if err != nil {
				t.Fatal(err)
			}
			ov, _ := NewValidation(n, u, tie, fit, val)
			old := (*oldValidation)(ov)
			switch trial % 3 {
			case 1:
				v.qs.budget = 8 * (v.ents[0].len() + 1) // one q kept
			case 2:
				v.qs.budget = 0 // none kept beyond a call
			}
			check := func(what string, got, want float64) {
				t.Helper()
				if math.Float64bits(got) != math.Float64bits(want) {
					t.Fatalf("trial %d, %d workers: %s %v, the oracle %v", trial, workers, what, got, want)
				}
			}
			checkRules := func(what string) {
				t.Helper()
				for a := range u {
					if v.last[a] != old.last[a] {
						t.Fatalf("trial %d, %d workers: %s chose %+v for action %d, the oracle %+v", trial, workers, what, v.last[a], a, old.last[a])
					}
				}
			}
			s, rules := v.Tune(md, workers)
			os, orules := old.Tune(md, 1)
			check("Tune", s, os)
			checkRules("Tune")
			for a := range u {
				if rules[a] != orules[a] {
					t.Fatalf("trial %d: Tune returned %+v for action %d, the oracle %+v", trial, rules[a], a, orules[a])
				}
				for k := range v.g[a] {
					check("(D K)_ij", v.g[a][k], old.g[a][k])
				}
				for range 40 {
					p := randomRule(rng)
					check("a rule's score", v.score(a, p, workers), old.scoreRule(a, p, 1))
					check("a rule's score kept", v.score(a, p, workers), old.scoreRule(a, p, 1))
				}
			}
			if trial%4 == 2 {
				// A next state the factors give 0: λ = 0 without
				// counts scores −Inf.
				zero := md.Clone()
				clear(zero.KCol(0, int(val[0].Cols[0])))
				rs := make([]RuleParams, u)
				for a := range rs {
					rs[a] = RuleParams{Lambda: 0, Kappa: math.Inf(1), Delta: QHalf}
				}
				s := v.Score(zero, rs, workers)
				check("a score of −Inf", s, old.Score(zero, rs, 1))
				if !math.IsInf(s, -1) {
					t.Fatalf("trial %d: a transition of probability 0 scores %v", trial, s)
				}
				s, _ = v.Tune(zero, workers)
				os, _ = old.Tune(zero, 1)
				check("Tune with a next state of probability 0", s, os)
				checkRules("Tune with a next state of probability 0")
			}
			next(md, 3)
			check("TuneLambda", v.TuneLambda(md, workers), old.TuneLambda(md, 1))
			checkRules("TuneLambda")
			next(md, 2)
			check("TuneLocal", v.TuneLocal(md, workers), old.TuneLocal(md, 1))
			checkRules("TuneLocal")
			check("Rescore", v.Rescore(md, workers), old.Rescore(md, 1))
			next(md, 2)
			check("Rescore on new factors", v.Rescore(md, workers), old.Rescore(md, 1))
			rs := make([]RuleParams, u)
			for a := range rs {
				rs[a] = randomRule(rng)
			}
			check("Score", v.Score(md, rs, workers), old.Score(md, rs, 1))
			check("TuneLambda after Score", v.TuneLambda(md, workers), old.TuneLambda(md, 1))
			next(md, 2)
			s, _ = v.Tune(md, workers)
			os, _ = old.Tune(md, 1)
			check("Tune again", s, os)
			checkRules("Tune again")
		}
	}
}

// randomRule draws each parameter of a rule from its grid, or off it.
func randomRule(rng *rand.Rand) RuleParams {
	pick := func(grid []float64, off float64) float64 {
		if rng.IntN(5) == 0 {
			return off
		}
		return grid[rng.IntN(len(grid))]
	}
	return RuleParams{Lambda: pick(LambdaGrid, 0.37), Kappa: pick(KappaGrid, 2.5), Delta: pick(DeltaGrid, 0.7),
		Mu: pick(MuGrid, 0.15), Discount: pick(DiscountGrid, 0.33), Rho: pick(RhoGrid, 0.6)}
}

// dropRows returns the blocks without every k-th of their rows: states
// the validation split has and the fit part has not.
func dropRows(blocks []*Block, k int) []*Block {
	out := make([]*Block, len(blocks))
	for bi, b := range blocks {
		nb := &Block{Action: b.Action, Ptr: []int64{0}}
		for r, i := range b.Rows {
			if int(i)%k == k-1 {
				continue
			}
			nb.Rows = append(nb.Rows, i)
			nb.Cols = append(nb.Cols, b.Cols[b.Ptr[r]:b.Ptr[r+1]]...)
			nb.Vals = append(nb.Vals, b.Vals[b.Ptr[r]:b.Ptr[r+1]]...)
			nb.Ptr = append(nb.Ptr, int64(len(nb.Cols)))
		}
		out[bi] = nb
	}
	return out
}
