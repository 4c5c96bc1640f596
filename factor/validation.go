package factor

import (
	"fmt"
	"math"
	"slices"
	"sync"
)

// LambdaGrid and KappaGrid are the values of λ and κ (Smoothing) that
// Validation.Tune chooses from. λ = 0 trusts the factors alone, 0.95
// nearly ignores them; κ = +Inf keeps no counts (the rule is then a
// stochastic factorization), small κ lets a row's own frequencies win
// after a few counts.
var (
	LambdaGrid = []float64{0, 0.001, 0.003, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.95, 0.98, 0.99}
	KappaGrid  = []float64{0.1, 0.3, 1, 3, 10, 30, 100, 300, 1000, 3000, 10000, math.Inf(1)}
	// DeltaGrid are the pseudo-counts per state of q (NewQDelta): ½
	// keeps the next-state frequencies, +Inf makes q uniform (data whose
	// next states are nearly uniform, where frequencies are noise).
	DeltaGrid = []float64{0.01, 0.1, 0.5, 2, 10, 100, math.Inf(1)}
)

// Validation scores models on held-out counts (a validation split of the
// training data) under the smoothing rule, and chooses the rule's λ and
// κ per action: the score that the held-out stopping rule watches and
// the choice that --smooth auto stores in the model. The rule's counts
// and q are those of the fit part (the data the factors were fitted on):
// the scores are honest estimates of how the rule predicts data it has
// not seen.
type Validation struct {
	n, u int
	// Per validation nonzero, in block order: action, row, column,
	// count, the fit part's frequency c_ij/x_i, row total x_i and count
	// of next state j (N_j).
	act           []int32
	row, col      []int32
	c, cf, xf, nj []float64
	// nf is the fit part's total count per action.
	nf         []float64
	blockStart []int // nonzeros of block k: [blockStart[k], blockStart[k+1])
	tot        []float64
	total      float64
	// xd are the fit part's row totals per D block (for the marginal of
	// rows without counts).
	xd  [][]float64
	fit *CNT
	tie Tie
	// g is the factors' (D K)_ij of each validation nonzero (scratch).
	g []float64
	// lambda, kappa and delta are the last choice, where the next Tune
	// starts.
	lambda, kappa, delta []float64
	// NoCounts keeps κ at +Inf: the rule without counts (a stochastic
	// factorization of order m+1).
	NoCounts bool
}

// NewValidation prepares scoring on the validation counts val of a model
// of n states, u actions and tie mode tie fitted on fit.
func NewValidation(n, u int, tie Tie, fit, val []*Block) (*Validation, error) {
	cnt, err := NewCNT(n, u, fit, 0)
	if err != nil {
		return nil, err
	}
	v := &Validation{n: n, u: u, tie: tie, fit: cnt, tot: make([]float64, u), nf: make([]float64, u)}
	nj := make([][]float64, u)
	for a := range nj {
		nj[a] = make([]float64, n)
	}
	for _, b := range fit {
		for k, j := range b.Cols {
			nj[b.Action][j] += b.Vals[k]
			v.nf[b.Action] += b.Vals[k]
		}
	}
	v.xd = make([][]float64, NumD(u, tie))
	for b := range v.xd {
		v.xd[b] = make([]float64, n)
	}
	for _, b := range fit {
		db := b.Action
		if tie == TieSharedD {
			db = 0
		}
		for r, i := range b.Rows {
			for q := b.Ptr[r]; q < b.Ptr[r+1]; q++ {
				v.xd[db][i] += b.Vals[q]
			}
		}
	}
	for k, b := range val {
		if err := b.CheckShape(n, u); err != nil {
			return nil, fmt.Errorf("factor: validation block %d: %w", k, err)
		}
		v.blockStart = append(v.blockStart, len(v.c))
		for r, i := range b.Rows {
			x := cnt.RowTotal(b.Action, int(i))
			for q := b.Ptr[r]; q < b.Ptr[r+1]; q++ {
				j := b.Cols[q]
				v.act = append(v.act, int32(b.Action))
				v.row = append(v.row, i)
				v.col = append(v.col, j)
				v.c = append(v.c, b.Vals[q])
				f := 0.0
				if x > 0 {
					f = cnt.count(b.Action, int(i), int(j)) / x
				}
				v.cf = append(v.cf, f)
				v.xf = append(v.xf, x)
				v.nj = append(v.nj, nj[b.Action][j])
				v.tot[b.Action] += b.Vals[q]
				v.total += b.Vals[q]
			}
		}
	}
	v.blockStart = append(v.blockStart, len(v.c))
	if !(v.total > 0) {
		return nil, fmt.Errorf("factor: the validation split holds no transitions")
	}
	v.g = make([]float64, len(v.c))
	v.lambda = make([]float64, u)
	v.kappa = make([]float64, u)
	v.delta = make([]float64, u)
	for a := range u {
		v.lambda[a], v.kappa[a], v.delta[a] = 0.1, math.Inf(1), QHalf
	}
	return v, nil
}

// Total returns the validation split's total count.
func (v *Validation) Total() float64 { return v.total }

// FitCounts returns the fit part's counts.
func (v *Validation) FitCounts() *CNT { return v.fit }

// factorProbs sets v.g to (D K)_ij of every validation nonzero, a row
// without counts in the fit part taking the hidden-state marginal π
// (SetUnseenRows) in place of its row of D, on up to workers goroutines
// (each nonzero's value is its own: the result does not depend on
// workers).
func (v *Validation) factorProbs(md *Model, workers int) {
	m := md.M
	pis := make([][]float64, len(md.D))
	for b, d := range md.D {
		pi := make([]float64, m)
		tot := 0.0
		for i, x := range v.xd[b] {
			if x > 0 {
				for l, dv := range d[i*m : i*m+m] {
					pi[l] += float64(x * dv)
				}
				tot += x
			}
		}
		for l := range pi {
			pi[l] /= tot
		}
		pis[b] = pi
	}
	nb := len(v.blockStart) - 1
	workers = max(1, min(workers, nb))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < nb; k += workers {
				for q := v.blockStart[k]; q < v.blockStart[k+1]; q++ {
					a, i := int(v.act[q]), int(v.row[q])
					db := md.DBlock(a)
					d := pis[db]
					if v.xd[db][i] > 0 {
						d = md.DRow(a, i)
					}
					v.g[q] = dot(d, md.KCol(a, int(v.col[q])))
				}
			}
		}()
	}
	wg.Wait()
}

// score returns Σ c·log P̃ over the validation nonzeros of action a
// under λ and κ (the rule of Smoothing with the fit part's counts and
// q), summed in block order.
func (v *Validation) score(a int, lambda, kappa, delta float64) float64 {
	s := 0.0
	qu := math.IsInf(delta, 1)
	den := v.nf[a] + delta*float64(v.n)
	for k := range v.c {
		if int(v.act[k]) != a {
			continue
		}
		wc := 0.0
		if x := v.xf[k]; x > 0 && !math.IsInf(kappa, 1) {
			wc = x / (x + kappa)
		}
		rest := 1 - wc
		q := 1 / float64(v.n)
		if !qu {
			q = (v.nj[k] + delta) / den
		}
		p := float64(rest*(1-lambda))*v.g[k] + float64(rest*lambda)*q
		p = float64(p) + float64(wc*v.cf[k])
		if !(p > 0) {
			return math.Inf(-1)
		}
		s += float64(v.c[k] * math.Log(p))
	}
	return s
}

// Tune scores md's factors on the validation split: per action it
// chooses λ from LambdaGrid and κ from KappaGrid by coordinate ascent
// (from the last choice; ties to the earlier grid value) and returns the
// validation log-likelihood per transition under the chosen rule with
// the choice. The result is a function of md and the earlier choices
// only, never of workers.
func (v *Validation) Tune(md *Model, workers int) (perTransition float64, lambda, kappa, delta []float64) {
	v.factorProbs(md, workers)
	ll := 0.0
	for a := range v.u {
		if v.tot[a] == 0 {
			continue
		}
		l, k, d := v.lambda[a], v.kappa[a], v.delta[a]
		best := v.score(a, l, k, d)
		for range 4 {
			changed := false
			for _, c := range LambdaGrid {
				if s := v.score(a, c, k, d); s > best {
					best, l, changed = s, c, true
				}
			}
			for _, c := range KappaGrid {
				if v.NoCounts {
					break
				}
				if s := v.score(a, l, c, d); s > best {
					best, k, changed = s, c, true
				}
			}
			for _, c := range DeltaGrid {
				if s := v.score(a, l, k, c); s > best {
					best, d, changed = s, c, true
				}
			}
			if !changed {
				break
			}
		}
		v.lambda[a], v.kappa[a], v.delta[a] = l, k, d
		ll += best
	}
	return ll / v.total, slices.Clone(v.lambda), slices.Clone(v.kappa), slices.Clone(v.delta)
}

// Rescore is Score with the last choice Tune made (λ, κ and δ per
// action): one pass over the validation nonzeros, where Tune takes
// dozens. The held-out stopping rule uses it between full tunings.
func (v *Validation) Rescore(md *Model, workers int) float64 {
	return v.Score(md, v.lambda, v.kappa, v.delta, workers)
}

// Score returns the validation log-likelihood per transition of md's
// factors under the rule with the given λ and κ per action (no tuning).
func (v *Validation) Score(md *Model, lambda, kappa, delta []float64, workers int) float64 {
	v.factorProbs(md, workers)
	ll := 0.0
	for a := range v.u {
		if v.tot[a] > 0 {
			ll += v.score(a, lambda[a], kappa[a], delta[a])
		}
	}
	return ll / v.total
}

// NewSmoothing returns the rule with λ and κ per action, q and the
// counts from the blocks (all the training data: the rule stores what the
// model saw), or no counts when every κ is +Inf.
func NewSmoothing(n, u int, blocks []*Block, lambda, kappa, delta []float64) (*Smoothing, error) {
	s := &Smoothing{Lambda: slices.Clone(lambda), Kappa: slices.Clone(kappa), Delta: slices.Clone(delta), Q: NewQDelta(n, u, blocks, delta)}
	for _, k := range kappa {
		if !math.IsInf(k, 1) {
			c, err := NewCNT(n, u, blocks, 0)
			if err != nil {
				return nil, err
			}
			s.Counts = c
			break
		}
	}
	if err := s.Validate(n, u); err != nil {
		return nil, err
	}
	return s, nil
}
