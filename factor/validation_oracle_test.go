package factor

import (
	"math"
	"slices"
)

// oldValidation is Validation scored as before the scores were kept
// (v.memo), q cached (v.qs) and the work spread over spans: the code of
// factorProbs, score, scoreRule, Tune, climb, TuneLocal, TuneLambda,
// retune, Rescore and Score at main 0da5eb0, verbatim but for the
// receiver and the nonzeros' statistics read through at (they were
// stored as valEntry, a struct per nonzero), kept as the oracle of TestValidationMatchesOracle (every
// score, choice and factor product bitwise the same).
type oldValidation Validation

// factorProbs sets v.g to (D K)_ij of every validation nonzero, a row
// without counts in the fit part taking the hidden-state marginal π
// (SetUnseenRows) in place of its row of D, on up to workers goroutines
// (each nonzero's value is its own: the result does not depend on
// workers).
func (v *oldValidation) factorProbs(md *Model, workers int) {
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
	for a := range v.u {
		is, js, g := v.i[a], v.j[a], v.g[a]
		db := md.DBlock(a)
		pieces(len(g), workers, func(_, lo, hi int) {
			for k := lo; k < hi; k++ {
				i := int(is[k])
				d := pis[db]
				if v.xd[db][i] > 0 {
					d = md.DRow(a, i)
				}
				g[k] = dot(d, md.KCol(a, int(js[k])))
			}
		})
	}
}

// score returns Σ c·log P̃ over the validation nonzeros of action a
// under the rule p (with the fit part's counts and q). The sum runs over
// pieces of nonzeros folded in order: the same for any workers.
func (v *oldValidation) score(a int, p RuleParams, workers int) float64 {
	if p.Lambda != 1 {
		return v.scoreRule(a, p, workers)
	}
	// (1−λ)·g is +0 for every (finite) g: the score is the counts' alone.
	if s, ok := v.counting[a][p]; ok {
		return s
	}
	s := v.scoreRule(a, p, workers)
	v.counting[a][p] = s
	return s
}

// scoreRule is score, computed.
func (v *oldValidation) scoreRule(a int, p RuleParams, workers int) float64 {
	es, g := v.ents[a], v.g[a]
	nd := len(DiscountGrid)
	dk := slices.Index(DiscountGrid, p.Discount) // -1: off the grid
	n := float64(v.n)
	uniform := math.IsInf(p.Delta, 1)
	qden, cden := v.nf[a]+p.Delta*n, v.tf[a]+p.Delta*n
	counts := !math.IsInf(p.Kappa, 1)
	part := make([]float64, (es.len()+chunkRows-1)/chunkRows)
	pieces(es.len(), workers, func(pc, lo, hi int) {
		// The probabilities of the piece, then their logarithms taken
		// four at a time (logAll: math.Log's bits) and added in order.
		var buf [chunkRows]float64
		prs := buf[:0]
		for k := lo; k < hi; k++ {
			e := es.at(k)
			q := 1 / n
			if !uniform {
				q = (e.nj + p.Delta) / qden
				if p.Rho > 0 {
					q = float64((1-p.Rho)*q) + float64(p.Rho*(e.tj+p.Delta)/cden)
				}
			}
			pr := float64((1-p.Lambda)*g[k]) + float64(p.Lambda*q)
			if counts && e.x > 0 {
				var m float64
				if dk >= 0 {
					m = v.mass[a][int(e.row)*nd+dk]
				} else {
					m = v.fit.discounted(a, int(v.i[a][k]), p.Discount)
				}
				den := e.x + p.Kappa
				pr = float64((1-p.Mu)*(float64(max(e.cf-p.Discount, 0)+float64((p.Kappa+m)*pr)))/den) + float64(p.Mu*pr)
			}
			if !(pr > 0) {
				part[pc] = math.Inf(-1)
				return
			}
			prs = append(prs, pr)
		}
		logAll(prs, prs)
		s := 0.0
		for k, lg := range prs {
			s += float64(es.c[lo+k] * lg)
		}
		part[pc] = s
	})
	s := 0.0
	for _, x := range part {
		s += x
	}
	return s
}

// Tune scores md's factors on the validation split and chooses the
// rule's parameters per action: it starts from the best of the last
// choice and the counting baselines as special cases of the rule
// (JMRule over JMGrid, AddBetaRule over AddBetaGrid, KNRule over
// DiscountGrid × DeltaGrid), then climbs by coordinate ascent over the
// grids (ties to the earlier value). So the choice scores at least as
// well on the validation split as Jelinek–Mercer, add-β and interpolated
// Kneser–Ney counting tuned on it (emsf eval's baselines, there scored
// with the held-out mixture). It
// returns the validation log-likelihood per transition under the choice
// and the choice; the result is a function of md and the earlier
// choices only, never of workers.
func (v *oldValidation) Tune(md *Model, workers int) (perTransition float64, rules []RuleParams) {
	v.factorProbs(md, workers)
	ll := 0.0
	for a := range v.u {
		if v.tot[a] == 0 {
			continue
		}
		cands := []RuleParams{v.last[a]}
		if !v.NoCounts {
			for _, l := range JMGrid {
				cands = append(cands, JMRule(l))
			}
			for _, b := range AddBetaGrid {
				cands = append(cands, AddBetaRule(v.n, b))
			}
			for _, d := range DiscountGrid {
				for _, delta := range DeltaGrid {
					cands = append(cands, KNRule(d, delta))
				}
			}
		}
		p, best := cands[0], v.score(a, cands[0], workers)
		for _, c := range cands[1:] {
			if s := v.score(a, c, workers); s > best {
				p, best = c, s
			}
		}
		for range 8 {
			changed := false
			for _, c := range (*Validation)(v).coords(&p) {
				keep := *c.at
				for _, x := range c.grid {
					if x == keep {
						continue
					}
					*c.at = x
					if s := v.score(a, p, workers); s > best {
						best, keep, changed = s, x, true
					}
				}
				*c.at = keep
			}
			if !changed {
				break
			}
		}
		v.last[a] = p
		ll += best
	}
	v.tuned = true
	return ll / v.total, slices.Clone(v.last)
}

// climb moves the parameter c of p (the rule of action a, scoring
// *best) along its grid, one step at a time in the first direction that
// gains, while the score gains, and reports whether it moved; a value
// off the grid stays.
func (v *oldValidation) climb(a int, p *RuleParams, c coord, best *float64, workers int) bool {
	k := slices.Index(c.grid, *c.at)
	if k < 0 {
		return false
	}
	for _, step := range []int{1, -1} {
		moved := false
		for t := k + step; t >= 0 && t < len(c.grid); t += step {
			keep := *c.at
			*c.at = c.grid[t]
			s := v.score(a, *p, workers)
			if !(s > *best) {
				*c.at = keep
				break
			}
			*best, moved = s, true
		}
		if moved {
			return true
		}
	}
	return false
}

// TuneLocal scores md's factors on the validation split with the rule
// tuned from the last choice by a local search: each parameter in turn
// climbs its grid step by step while the score gains (climb), rounds
// repeated until none moves (at most 8). A few scores per parameter
// where Tune scans every grid: the held-out stopping rule's check that
// an iterate has not gained (EarlyStop.Confirm), the rule's other
// parameters following the factors as λ does. It runs Tune when Tune
// never ran. It returns the validation log-likelihood per transition,
// at least that of the last choice.
func (v *oldValidation) TuneLocal(md *Model, workers int) float64 {
	return v.retune(md, workers, func(a int, p *RuleParams, best *float64) {
		cs := (*Validation)(v).coords(p)
		for range 8 {
			changed := false
			for _, c := range cs {
				if v.climb(a, p, c, best, workers) {
					changed = true
				}
			}
			if !changed {
				break
			}
		}
	})
}

// TuneLambda scores md's factors on the validation split with the last
// choice of Tune, λ chosen anew per action (the weight of the factors,
// the one parameter that follows them from iterate to iterate): a local
// search on LambdaGrid from the last λ, exact since the score is concave
// in λ (the rule is affine in it). It runs Tune when Tune never ran. It
// returns the validation log-likelihood per transition.
func (v *oldValidation) TuneLambda(md *Model, workers int) float64 {
	return v.retune(md, workers, func(a int, p *RuleParams, best *float64) {
		v.climb(a, p, coord{LambdaGrid, &p.Lambda}, best, workers)
	})
}

// retune is TuneLocal and TuneLambda: md's factors scored on the
// validation split, each action with data re-tuned by search from its
// last choice (best: that choice's score, raised by the search), the
// result kept as the last choice. It runs Tune when Tune never ran. It
// returns the validation log-likelihood per transition.
func (v *oldValidation) retune(md *Model, workers int, search func(a int, p *RuleParams, best *float64)) float64 {
	if !v.tuned {
		s, _ := v.Tune(md, workers)
		return s
	}
	v.factorProbs(md, workers)
	ll := 0.0
	for a := range v.u {
		if v.tot[a] == 0 {
			continue
		}
		p := v.last[a]
		best := v.score(a, p, workers)
		search(a, &p, &best)
		v.last[a] = p
		ll += best
	}
	return ll / v.total
}

// Rescore is Score with the last choice (Tune, TuneLambda): one pass
// over the validation nonzeros.
func (v *oldValidation) Rescore(md *Model, workers int) float64 {
	return v.Score(md, v.last, workers)
}

// Score returns the validation log-likelihood per transition of md's
// factors under the rule with the given parameters per action (no
// tuning).
func (v *oldValidation) Score(md *Model, rules []RuleParams, workers int) float64 {
	v.factorProbs(md, workers)
	ll := 0.0
	for a := range v.u {
		if v.tot[a] > 0 {
			ll += v.score(a, rules[a], workers)
		}
	}
	return ll / v.total
}

// valEntry is one validation nonzero as oldValidation read it: its
// count c, the fit part's count cf, the row's total x, the next state's
// count nj and continuation count tj, and the index of its row in the
// mass table.
type valEntry struct {
	c, cf, x, nj, tj float64
	row              int32
}

// at returns nonzero k.
func (e *valEnts) at(k int) valEntry {
	return valEntry{c: e.c[k], cf: e.cf[k], x: e.x[k], nj: e.nj[k], tj: e.tj[k], row: e.off[k] / int32(len(DiscountGrid))}
}
