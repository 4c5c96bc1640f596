package factor

import (
	"fmt"
	"math"
	"slices"
)

// The grids Validation.Tune chooses the rule's parameters (Smoothing,
// RuleParams) from, per action. λ = 0 trusts the factors alone, 1
// ignores them; κ = 0 with d = μ = 0 is counting, +Inf keeps no counts
// (the rule is then a stochastic factorization); d is the absolute
// discount of every count, μ the Jelinek–Mercer weight of the backoff;
// δ the pseudo-counts per state of q (½ keeps the next-state
// frequencies, +Inf makes q uniform), ρ the weight of the Kneser–Ney
// continuation frequencies in q.
var (
	LambdaGrid   = []float64{0, 0.001, 0.003, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.95, 0.98, 0.99, 1}
	KappaGrid    = []float64{0, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100, 300, 1000, 3000, 10000, math.Inf(1)}
	DiscountGrid = []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1}
	MuGrid       = []float64{0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9}
	DeltaGrid    = []float64{0.01, 0.1, 0.5, 2, 10, 100, math.Inf(1)}
	RhoGrid      = []float64{0, 0.25, 0.5, 0.75, 1}
)

// The grids of the counting baselines (emsf eval --train): the weight λ
// of Jelinek–Mercer counting (NewJM) and the β of add-β counting
// (NewCNT); Kneser–Ney counting's d and δ are on DiscountGrid and
// DeltaGrid (KNRule). Tune starts from each of them as a special case
// of the rule, so the rule it chooses scores at least as well on the
// validation split as the best of those baselines tuned on the same
// split.
var (
	JMGrid      = []float64{0.001, 0.003, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.95, 0.98, 0.99}
	AddBetaGrid = []float64{1e-4, 3e-4, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1}
)

// RuleParams are the parameters of the smoothing rule for one action
// (Smoothing): λ, κ, δ, μ, the discount d and ρ.
type RuleParams struct {
	Lambda, Kappa, Delta, Mu, Discount, Rho float64
}

// JMRule is Jelinek–Mercer counting with weight lambda as the rule
// (κ = d = 0, λ = 1, δ = ½, ρ = 0, μ = lambda).
func JMRule(lambda float64) RuleParams {
	return RuleParams{Lambda: 1, Kappa: 0, Delta: QHalf, Mu: lambda}
}

// KNRule is interpolated Kneser–Ney counting (Kneser & Ney 1995; Chen &
// Goodman 1999) with discount d as the rule: each count gives up d, and
// the mass d·(distinct next states of the row) goes to the continuation
// frequencies (T^a_j + δ)/(T^a + n·δ) (κ = μ = 0, λ = 1, ρ = 1).
func KNRule(d, delta float64) RuleParams {
	return RuleParams{Lambda: 1, Kappa: 0, Delta: delta, Discount: d, Rho: 1}
}

// AddBetaRule is add-β counting over n states as the rule (d = μ = 0,
// λ = 1, δ = +Inf, κ = n·β).
func AddBetaRule(n int, beta float64) RuleParams {
	return RuleParams{Lambda: 1, Kappa: float64(n) * beta, Delta: math.Inf(1)}
}

// Validation scores models on held-out counts (a validation split of the
// training data) under the smoothing rule, and chooses the rule's
// parameters per action: the score that the held-out stopping rule
// watches and the choice that --smooth auto stores in the model. The
// rule's counts and q are those of the fit part (the data the factors
// were fitted on): the scores are honest estimates of how the rule
// predicts data it has not seen.
type Validation struct {
	n, u int
	// ents are the validation nonzeros per action in block order, with
	// the fit part's statistics; i and j their states, g the factors'
	// (D K)_ij (scratch).
	ents [][]valEntry
	i, j [][]int32
	g    [][]float64
	// mass[a][r·len(DiscountGrid)+k] is Σ_j min(c_ij, DiscountGrid[k])
	// over the fit counts of the r-th row of action a in the validation
	// blocks (block order).
	mass [][]float64
	// nf and tf are the fit part's total count and number of distinct
	// (state, next state) per action; tot the validation's total count
	// per action.
	nf, tf, tot []float64
	total       float64
	// xd are the fit part's row totals per D block (for the marginal of
	// rows without counts).
	xd  [][]float64
	fit *CNT
	// last is the last choice, where the next Tune starts.
	last []RuleParams
	// tuned reports whether Tune ran (TuneLambda needs its choice).
	tuned bool
	// NoCounts keeps κ at +Inf: the rule without counts (a stochastic
	// factorization of order m+1).
	NoCounts bool
	// counting holds per action the scores of rules with λ = 1, which
	// ignore the factors (the counting baselines Tune starts from, ever
	// again): the same for every model, so scored once.
	counting []map[RuleParams]float64
}

// valEntry is one validation nonzero: its count c, the fit part's count
// cf of the same transition, the row's total x, the next state's count
// nj and continuation count tj (distinct predecessors), and the index
// of its row in the mass table.
type valEntry struct {
	c, cf, x, nj, tj float64
	row              int32
}

// NewValidation prepares scoring on the validation counts val of a model
// of n states, u actions and tie mode tie fitted on fit.
func NewValidation(n, u int, tie Tie, fit, val []*Block) (*Validation, error) {
	cnt, err := NewCNT(n, u, fit, 0)
	if err != nil {
		return nil, err
	}
	v := &Validation{n: n, u: u, fit: cnt, nf: make([]float64, u), tf: make([]float64, u), tot: make([]float64, u),
		ents: make([][]valEntry, u), i: make([][]int32, u), j: make([][]int32, u), g: make([][]float64, u), mass: make([][]float64, u)}
	nj := make([][]float64, u)
	tj := make([][]float64, u)
	for a := range u {
		nj[a] = make([]float64, n)
		if cnt.x[a] != nil {
			tj[a], v.tf[a] = cnt.continuation(a)
		} else {
			tj[a] = make([]float64, n)
		}
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
	nd := len(DiscountGrid)
	for k, b := range val {
		if err := b.CheckShape(n, u); err != nil {
			return nil, fmt.Errorf("factor: validation block %d: %w", k, err)
		}
		a := b.Action
		for r, i := range b.Rows {
			x := cnt.RowTotal(a, int(i))
			row := int32(len(v.mass[a]) / nd)
			for _, d := range DiscountGrid {
				v.mass[a] = append(v.mass[a], cnt.discounted(a, int(i), d))
			}
			for q := b.Ptr[r]; q < b.Ptr[r+1]; q++ {
				j := b.Cols[q]
				v.ents[a] = append(v.ents[a], valEntry{c: b.Vals[q], cf: cnt.count(a, int(i), int(j)), x: x,
					nj: nj[a][j], tj: tj[a][j], row: row})
				v.i[a] = append(v.i[a], i)
				v.j[a] = append(v.j[a], j)
				v.tot[a] += b.Vals[q]
				v.total += b.Vals[q]
			}
		}
	}
	if !(v.total > 0) {
		return nil, fmt.Errorf("factor: the validation split holds no transitions")
	}
	v.last = make([]RuleParams, u)
	v.counting = make([]map[RuleParams]float64, u)
	for a := range u {
		v.counting[a] = map[RuleParams]float64{}
		v.g[a] = make([]float64, len(v.ents[a]))
		v.last[a] = RuleParams{Lambda: 0.1, Kappa: math.Inf(1), Delta: QHalf}
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
func (v *Validation) score(a int, p RuleParams, workers int) float64 {
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
func (v *Validation) scoreRule(a int, p RuleParams, workers int) float64 {
	es, g := v.ents[a], v.g[a]
	nd := len(DiscountGrid)
	dk := slices.Index(DiscountGrid, p.Discount) // -1: off the grid
	n := float64(v.n)
	uniform := math.IsInf(p.Delta, 1)
	qden, cden := v.nf[a]+p.Delta*n, v.tf[a]+p.Delta*n
	counts := !math.IsInf(p.Kappa, 1)
	part := make([]float64, (len(es)+chunkRows-1)/chunkRows)
	pieces(len(es), workers, func(pc, lo, hi int) {
		// The probabilities of the piece, then their logarithms taken
		// four at a time (logAll: math.Log's bits) and added in order.
		var buf [chunkRows]float64
		prs := buf[:0]
		for k := lo; k < hi; k++ {
			e := &es[k]
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
			s += float64(es[lo+k].c * lg)
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
func (v *Validation) Tune(md *Model, workers int) (perTransition float64, rules []RuleParams) {
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
			for _, c := range v.coords(&p) {
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

// coord is one parameter of the rule that Tune and TuneLocal choose: its
// grid and where it is in the rule being tuned.
type coord struct {
	grid []float64
	at   *float64
}

// coords returns the parameters of p that are tuned, in the order of
// the coordinate ascent (κ, d and μ only where the rule keeps counts).
func (v *Validation) coords(p *RuleParams) []coord {
	cs := []coord{{LambdaGrid, &p.Lambda}, {DeltaGrid, &p.Delta}, {RhoGrid, &p.Rho}}
	if !v.NoCounts {
		cs = append(cs, coord{KappaGrid, &p.Kappa}, coord{DiscountGrid, &p.Discount}, coord{MuGrid, &p.Mu})
	}
	return cs
}

// climb moves the parameter c of p (the rule of action a, scoring
// *best) along its grid, one step at a time in the first direction that
// gains, while the score gains, and reports whether it moved; a value
// off the grid stays.
func (v *Validation) climb(a int, p *RuleParams, c coord, best *float64, workers int) bool {
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
func (v *Validation) TuneLocal(md *Model, workers int) float64 {
	return v.retune(md, workers, func(a int, p *RuleParams, best *float64) {
		cs := v.coords(p)
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
func (v *Validation) TuneLambda(md *Model, workers int) float64 {
	return v.retune(md, workers, func(a int, p *RuleParams, best *float64) {
		v.climb(a, p, coord{LambdaGrid, &p.Lambda}, best, workers)
	})
}

// retune is TuneLocal and TuneLambda: md's factors scored on the
// validation split, each action with data re-tuned by search from its
// last choice (best: that choice's score, raised by the search), the
// result kept as the last choice. It runs Tune when Tune never ran. It
// returns the validation log-likelihood per transition.
func (v *Validation) retune(md *Model, workers int, search func(a int, p *RuleParams, best *float64)) float64 {
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
func (v *Validation) Rescore(md *Model, workers int) float64 {
	return v.Score(md, v.last, workers)
}

// Score returns the validation log-likelihood per transition of md's
// factors under the rule with the given parameters per action (no
// tuning).
func (v *Validation) Score(md *Model, rules []RuleParams, workers int) float64 {
	v.factorProbs(md, workers)
	ll := 0.0
	for a := range v.u {
		if v.tot[a] > 0 {
			ll += v.score(a, rules[a], workers)
		}
	}
	return ll / v.total
}

// NewSmoothing returns the rule with the parameters per action, q and
// the counts from the blocks (all the training data: the rule stores
// what the model saw), or no counts when every κ is +Inf.
func NewSmoothing(n, u int, blocks []*Block, rules []RuleParams) (*Smoothing, error) {
	return newSmoothing(n, u, blocks, nil, rules)
}

// newSmoothing is NewSmoothing with the counts of blocks already made
// (cnt), or nil to count them where the rule needs them.
func newSmoothing(n, u int, blocks []*Block, cnt *CNT, rules []RuleParams) (*Smoothing, error) {
	if len(rules) != u {
		return nil, fmt.Errorf("factor: %d smoothing rules, want one per action (%d)", len(rules), u)
	}
	s := &Smoothing{}
	var mu, disc, rho []float64
	for _, r := range rules {
		s.Lambda = append(s.Lambda, r.Lambda)
		s.Kappa = append(s.Kappa, r.Kappa)
		s.Delta = append(s.Delta, r.Delta)
		mu, disc, rho = append(mu, r.Mu), append(disc, r.Discount), append(rho, r.Rho)
	}
	// The parameters of interpolation-v2 are stored only where they are
	// used (a Dirichlet rule stays an interpolation-v1 model).
	if slices.ContainsFunc(rules, func(r RuleParams) bool { return r.Mu != 0 || r.Discount != 0 || r.Rho != 0 }) {
		s.Mu, s.Discount, s.Rho = mu, disc, rho
	}
	needCounts := slices.ContainsFunc(rules, func(r RuleParams) bool { return !math.IsInf(r.Kappa, 1) || r.Rho > 0 })
	if needCounts && cnt == nil {
		c, err := NewCNT(n, u, blocks, 0)
		if err != nil {
			return nil, err
		}
		cnt = c
	}
	s.Q = NewQRule(n, u, blocks, cnt, s.Delta, s.Rho)
	if slices.ContainsFunc(rules, func(r RuleParams) bool { return !math.IsInf(r.Kappa, 1) }) {
		s.Counts = cnt
	}
	if err := s.Prepare(n, u); err != nil {
		return nil, err
	}
	return s, nil
}
