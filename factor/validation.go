package factor

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"unsafe"
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

// String describes r for logs and version records.
func (r RuleParams) String() string {
	return fmt.Sprintf("λ=%g κ=%g d=%g μ=%g δ=%g ρ=%g", r.Lambda, r.Kappa, r.Discount, r.Mu, r.Delta, r.Rho)
}

// RulesString describes the rules of the actions: "a0: λ=… ; a1: …".
func RulesString(rules []RuleParams) string {
	parts := make([]string, len(rules))
	for a, r := range rules {
		parts[a] = fmt.Sprintf("a%d: %v", a, r)
	}
	return strings.Join(parts, "; ")
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
	ents []valEnts
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
	// tuned reports whether Tune ran (TuneLambda needs its choice);
	// tunedAct[a] whether it ran, or TuneLambdaOf's first choice, for
	// action a.
	tuned    bool
	tunedAct []bool
	// NoCounts keeps κ at +Inf: the rule without counts (a stochastic
	// factorization of order m+1).
	NoCounts bool
	// counting holds per action the scores of rules with λ = 1, which
	// ignore the factors (the counting baselines Tune starts from, ever
	// again): the same for every model, so scored once.
	counting []map[RuleParams]float64
	// memo holds per action the scores of the other rules on the
	// current factors (v.g), cleared by factorProbs: Tune's coordinate
	// ascent rescans whole grids round after round and TuneLocal's
	// climbs step back to rules they scored, and a rule scored again on
	// the same factors scores the same bits.
	memo []map[RuleParams]float64
	// qs caches q per validation nonzero (qCache): q depends on δ and
	// ρ only, never on the factors.
	qs qCache
	// lgBuf holds each nonzero's probability under the rules being
	// scored, then its logarithm (scratch of scoreRules).
	lgBuf []float64
	// unseen[a] reports whether some validation nonzero of action a has
	// a row without fit counts (scored with the marginal π); xtot[b] is
	// Σ_i x_i over D block b's rows with counts, in row order.
	unseen []bool
	xtot   []float64
	// rowI[a][r] is the state of the r-th row of action a in the mass
	// table.
	rowI [][]int32
}

// valEnts are the validation nonzeros of one action, a column per
// statistic (scoreRule reads a few of them, in order): each nonzero's
// count c, the fit part's count cf of the same transition, its row's
// total x, the next state's count nj and continuation count tj
// (distinct predecessors), and off, where its row's m begin in the mass
// table (the row's index times len(DiscountGrid)).
type valEnts struct {
	c, cf, x, nj, tj []float64
	off              []int32
}

// len returns the number of nonzeros.
func (e *valEnts) len() int { return len(e.c) }

// NewValidation prepares scoring on the validation counts val of a model
// of n states, u actions and tie mode tie fitted on fit.
func NewValidation(n, u int, tie Tie, fit, val []*Block) (*Validation, error) {
	cnt, err := NewCNT(n, u, fit, 0)
	if err != nil {
		return nil, err
	}
	v := &Validation{n: n, u: u, fit: cnt, nf: make([]float64, u), tf: make([]float64, u), tot: make([]float64, u),
		ents: make([]valEnts, u), rowI: make([][]int32, u), i: make([][]int32, u), j: make([][]int32, u), g: make([][]float64, u), mass: make([][]float64, u)}
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
	dblock := func(a int) int {
		if tie == TieSharedD {
			return 0
		}
		return a
	}
	for _, b := range fit {
		db := dblock(b.Action)
		for r, i := range b.Rows {
			for q := b.Ptr[r]; q < b.Ptr[r+1]; q++ {
				v.xd[db][i] += b.Vals[q]
			}
		}
	}
	v.xtot = make([]float64, len(v.xd))
	for b, xs := range v.xd {
		for _, x := range xs {
			if x > 0 {
				v.xtot[b] += x
			}
		}
	}
	v.unseen = make([]bool, u)
	nd := len(DiscountGrid)
	// The columns at their final size (as NewCNT's): growing them by
	// append would copy them and touch up to twice the fresh memory.
	nnz, rows := make([]int, u), make([]int, u)
	for _, b := range val {
		if b.Action >= 0 && b.Action < u { // else CheckShape's error below
			nnz[b.Action] += len(b.Vals)
			rows[b.Action] += len(b.Rows)
		}
	}
	for a := range u {
		e, k := &v.ents[a], nnz[a]
		e.c, e.cf, e.x = make([]float64, 0, k), make([]float64, 0, k), make([]float64, 0, k)
		e.nj, e.tj, e.off = make([]float64, 0, k), make([]float64, 0, k), make([]int32, 0, k)
		v.i[a], v.j[a] = make([]int32, 0, k), make([]int32, 0, k)
		v.rowI[a], v.mass[a] = make([]int32, 0, rows[a]), make([]float64, 0, rows[a]*nd)
	}
	for k, b := range val {
		if err := b.CheckShape(n, u); err != nil {
			return nil, fmt.Errorf("factor: validation block %d: %w", k, err)
		}
		a := b.Action
		for r, i := range b.Rows {
			x := cnt.RowTotal(a, int(i))
			row := int32(len(v.mass[a]) / nd)
			v.rowI[a] = append(v.rowI[a], i)
			for _, d := range DiscountGrid {
				v.mass[a] = append(v.mass[a], cnt.discounted(a, int(i), d))
			}
			for q := b.Ptr[r]; q < b.Ptr[r+1]; q++ {
				j := b.Cols[q]
				e := &v.ents[a]
				e.c, e.cf, e.x = append(e.c, b.Vals[q]), append(e.cf, cnt.count(a, int(i), int(j))), append(e.x, x)
				e.nj, e.tj, e.off = append(e.nj, nj[a][j]), append(e.tj, tj[a][j]), append(e.off, row*int32(nd))
				v.i[a] = append(v.i[a], i)
				v.j[a] = append(v.j[a], j)
				if !(v.xd[dblock(a)][i] > 0) {
					v.unseen[a] = true
				}
				v.tot[a] += b.Vals[q]
				v.total += b.Vals[q]
			}
		}
	}
	if !(v.total > 0) {
		return nil, fmt.Errorf("factor: the validation split holds no transitions")
	}
	v.last = make([]RuleParams, u)
	v.qs.budget = qCacheBytes
	v.counting, v.memo = make([]map[RuleParams]float64, u), make([]map[RuleParams]float64, u)
	for a := range u {
		v.counting[a], v.memo[a] = map[RuleParams]float64{}, map[RuleParams]float64{}
		v.g[a] = make([]float64, v.ents[a].len())
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
// workers), and forgets the scores of the earlier factors (v.memo).
// The work is split evenly over every action's nonzeros (spans of
// spanRows), the dot products run four side by side (dot4: four chains
// of additions instead of one, each dot's own bits) and the rows of K of
// the nonzeros 8 ahead are prefetched (their columns are scattered: at
// the dependency graph's size, K is a cache miss).
func (v *Validation) factorProbs(md *Model, workers int) {
	v.factorProbsOf(md, -1, workers)
}

// factorProbsOf is factorProbs for action only's nonzeros alone (every
// action's when only < 0): the others' v.g and scores are left as they
// were (each nonzero's value and each score its own).
func (v *Validation) factorProbsOf(md *Model, only, workers int) {
	pis := v.marginals(md, only, workers)
	start := make([]int, v.u+1) // the first span of each action
	for a := range v.u {
		start[a+1] = start[a]
		if only < 0 || a == only {
			start[a+1] += (len(v.g[a]) + spanRows - 1) / spanRows
		}
	}
	spread(start[v.u], workers, func(t int) {
		a, _ := slices.BinarySearch(start, t+1)
		a--
		lo := (t - start[a]) * spanRows
		is, js, g := v.i[a], v.j[a], v.g[a]
		hi := min(len(g), lo+spanRows)
		db, xd := md.DBlock(a), v.xd[md.DBlock(a)]
		row := func(k int) []float64 {
			if i := int(is[k]); xd[i] > 0 {
				return md.DRow(a, i)
			}
			return pis[db]
		}
		kt, mb := md.KT[md.KBlock(a)], 8*md.M
		k := lo
		for ; k+4 <= hi; k += 4 {
			for _, j := range js[min(hi, k+8):min(hi, k+12)] {
				prefetchR(&kt[int(j)*md.M], mb)
			}
			g[k], g[k+1], g[k+2], g[k+3] = dot4(row(k), row(k+1), row(k+2), row(k+3),
				md.KCol(a, int(js[k])), md.KCol(a, int(js[k+1])), md.KCol(a, int(js[k+2])), md.KCol(a, int(js[k+3])))
		}
		for ; k < hi; k++ {
			g[k] = dot(row(k), md.KCol(a, int(js[k])))
		}
	})
	for a, memo := range v.memo {
		if only < 0 || a == only {
			clear(memo)
		}
	}
}

// marginals returns, per D block that some validation nonzero's row
// without fit counts reads (nil for the others), the hidden-state
// marginal π_l = Σ_i x_i D_il / Σ_i x_i over the rows with fit counts,
// each π_l summed in row order (SetUnseenRows' sums): spans of 8 of the
// m coordinates, of every block, on up to workers goroutines.
func (v *Validation) marginals(md *Model, only, workers int) [][]float64 {
	m := md.M
	pis := make([][]float64, len(md.D))
	var need []int
	for a, un := range v.unseen {
		if b := md.DBlock(a); un && pis[b] == nil && (only < 0 || a == only) {
			pis[b] = make([]float64, m)
			need = append(need, b)
		}
	}
	per := (m + 7) / 8
	spread(len(need)*per, workers, func(t int) {
		b := need[t/per]
		lo := (t % per) * 8
		marginalSpan(pis[b][lo:min(m, lo+8)], md.D[b], v.xd[b], m, lo)
		for l := range pis[b][lo:min(m, lo+8)] {
			pis[b][lo+l] /= v.xtot[b]
		}
	})
	return pis
}

// marginalSpan adds x_i·d_il to pi[l−lo] for l in [lo, lo+len(pi)),
// over the rows i of d (m columns) with x_i > 0 in row order: eight
// coordinates in registers at a time (a sum held in memory waits on
// its own store every row), each the same sum in the same order.
func marginalSpan(pi, d, xs []float64, m, lo int) {
	if len(pi) != 8 {
		for i, x := range xs {
			if x > 0 {
				for l, dv := range d[i*m+lo : i*m+lo+len(pi)] {
					pi[l] += float64(x * dv)
				}
			}
		}
		return
	}
	var p0, p1, p2, p3, p4, p5, p6, p7 float64
	for i, x := range xs {
		if x > 0 {
			r := (*[8]float64)(d[i*m+lo : i*m+lo+8])
			p0 += float64(x * r[0])
			p1 += float64(x * r[1])
			p2 += float64(x * r[2])
			p3 += float64(x * r[3])
			p4 += float64(x * r[4])
			p5 += float64(x * r[5])
			p6 += float64(x * r[6])
			p7 += float64(x * r[7])
		}
	}
	copy(pi, []float64{p0, p1, p2, p3, p4, p5, p6, p7})
}

// dot4 returns dot(x0, y0), …, dot(x3, y3), the four sums side by side:
// each summed left to right without fused multiply-add as dot sums it
// (bitwise dot's), four independent chains of additions where dot waits
// on one.
func dot4(x0, x1, x2, x3, y0, y1, y2, y3 []float64) (s0, s1, s2, s3 float64) {
	m := len(x0)
	x1, x2, x3 = x1[:m], x2[:m], x3[:m]
	y0, y1, y2, y3 = y0[:m], y1[:m], y2[:m], y3[:m]
	for l := range m {
		s0 += float64(x0[l] * y0[l])
		s1 += float64(x1[l] * y1[l])
		s2 += float64(x2[l] * y2[l])
		s3 += float64(x3[l] * y3[l])
	}
	return s0, s1, s2, s3
}

// score returns Σ c·log P̃ over the validation nonzeros of action a
// under the rule p (with the fit part's counts and q): scores of one
// rule.
func (v *Validation) score(a int, p RuleParams, workers int) float64 {
	return v.scores(a, []RuleParams{p}, workers)[0]
}

// kept returns the score of rule p for action a where it is kept: a rule
// with λ = 1 ignores the factors ((1−λ)·g is +0 for every finite g), its
// score is the counts' alone, kept for the whole fit (v.counting); any
// other is kept while the factors are (v.memo).
func (v *Validation) kept(a int, p RuleParams) (map[RuleParams]float64, float64, bool) {
	memo := v.memo[a]
	if p.Lambda == 1 {
		memo = v.counting[a]
	}
	s, ok := memo[p]
	return memo, s, ok
}

// scores returns score(a, p) for each rule p of ps, those not kept
// (v.kept) computed together and kept. A rule's score is Σ c·log P̃
// over pieces of chunkRows nonzeros, each piece's sum in nonzero order
// and the pieces' sums folded in order, a piece with a probability not
// > 0 counting −Inf: the sum of one piece per goroutine it was, bitwise,
// for any workers. The work runs on one pool of workers goroutines per
// call: a task per (rule, piece), each piece's probabilities, their
// logarithms and its sum together, where there are rules enough to
// spread (Tune's candidates and each of its scans along a grid are one
// call); else a task per (rule, span of spanRows nonzeros) for the
// probabilities and their logarithms, then one per (rule, piece) for
// its sum, so that the score of one rule on about 5 000 nonzeros (a
// piece and a bit) runs on every worker. Neither split changes an
// operation. q comes from v.qs.
func (v *Validation) scores(a int, ps []RuleParams, workers int) []float64 {
	out := make([]float64, len(ps))
	var todo []int // the first of each rule not kept, in order
	first := map[RuleParams]int{}
	for k, p := range ps {
		if _, s, ok := v.kept(a, p); ok {
			out[k] = s
		} else if _, dup := first[p]; !dup {
			first[p] = k
			todo = append(todo, k)
		}
	}
	if len(todo) > 0 {
		v.scoreRules(a, ps, todo, out, workers)
	}
	for k, p := range ps {
		if f, ok := first[p]; ok && f != k {
			out[k] = out[f]
		}
	}
	return out
}

// scoreRules sets out[k], for k in idx, to the score of ps[k] (scores),
// and keeps it.
func (v *Validation) scoreRules(a int, ps []RuleParams, idx []int, out []float64, workers int) {
	es, n := &v.ents[a], v.ents[a].len()
	spans, pieces := (n+spanRows-1)/spanRows, (n+chunkRows-1)/chunkRows
	type rule struct {
		p    RuleParams
		q    []float64 // nil: uniform
		mass []float64 // each row's m at the rule's d, from its off
		part []float64 // the pieces' sums
		lg   []float64 // by spans: the probabilities, then their logarithms
		bad  []bool    // by spans: per span, a probability not > 0
	}
	v.qs.next()
	rs := make([]rule, len(idx))
	var fills []int // the rules that fill their q (one per q)
	for r, k := range idx {
		p := ps[k]
		rs[r] = rule{p: p, part: make([]float64, pieces)}
		var fill bool
		if rs[r].q, fill = v.qs.get(a, p.Delta, p.Rho, n); fill {
			fills = append(fills, r)
		}
		mass, dk := v.mass[a], slices.Index(DiscountGrid, p.Discount)
		if dk < 0 {
			// Off the grid: each row's m summed once (where the rule
			// keeps counts), in the place of d = 0's.
			mass, dk = make([]float64, len(v.mass[a])), 0
			if nd := len(DiscountGrid); !math.IsInf(p.Kappa, 1) {
				for row, i := range v.rowI[a] {
					mass[row*nd] = v.fit.discounted(a, int(i), p.Discount)
				}
			}
		}
		rs[r].mass = mass[dk:]
	}
	spread(len(fills)*spans, workers, func(t int) {
		r, lo := fills[t/spans], (t%spans)*spanRows
		v.fillQ(a, rs[r].p.Delta, rs[r].p.Rho, rs[r].q[lo:min(n, lo+spanRows)], lo)
	})
	qu := 1 / float64(v.n)
	// probs sets pr to the probabilities of r's nonzeros from lo on and
	// reports whether all are > 0 (ruleProbs).
	probs := func(r *rule, pr []float64, lo int) bool {
		hi := lo + len(pr)
		q := r.q
		if q != nil {
			q = q[lo:hi]
		}
		return ruleProbs(pr, v.g[a][lo:hi], q, qu, es.x[lo:hi], es.cf[lo:hi], es.off[lo:hi], r.mass, r.p)
	}
	// sum returns Σ c·lg over the piece from lo on (lg its logarithms).
	sum := func(lg []float64, lo int) float64 {
		s := 0.0
		for k, c := range es.c[lo : lo+len(lg)] {
			s += float64(c * lg[k])
		}
		return s
	}
	if len(rs) >= 2*workers {
		spread(len(rs)*pieces, workers, func(t int) {
			r := &rs[t/pieces]
			lo := (t % pieces) * chunkRows
			var buf [chunkRows]float64
			lg := buf[:min(n, lo+chunkRows)-lo]
			if !probs(r, lg, lo) {
				r.part[t%pieces] = math.Inf(-1)
				return
			}
			// Four at a time (logAll: math.Log's bits).
			logAll(lg, lg)
			r.part[t%pieces] = sum(lg, lo)
		})
	} else {
		if cap(v.lgBuf) < len(rs)*n {
			v.lgBuf = make([]float64, len(rs)*n)
		}
		for r := range rs {
			rs[r].lg, rs[r].bad = v.lgBuf[r*n:(r+1)*n], make([]bool, spans)
		}
		spread(len(rs)*spans, workers, func(t int) {
			r := &rs[t/spans]
			lo := (t % spans) * spanRows
			lg := r.lg[lo:min(n, lo+spanRows)]
			if !probs(r, lg, lo) {
				r.bad[t%spans] = true
				return
			}
			logAll(lg, lg)
		})
		spread(len(rs)*pieces, workers, func(t int) {
			r := &rs[t/pieces]
			lo := (t % pieces) * chunkRows
			hi := min(n, lo+chunkRows)
			if slices.Contains(r.bad[lo/spanRows:(hi+spanRows-1)/spanRows], true) {
				r.part[t%pieces] = math.Inf(-1)
				return
			}
			r.part[t%pieces] = sum(r.lg[lo:hi], lo)
		})
	}
	for r, k := range idx {
		s := 0.0
		for _, x := range rs[r].part {
			s += x
		}
		out[k] = s
		memo, _, _ := v.kept(a, ps[k])
		memo[ps[k]] = s
	}
}

// ruleProbs sets pr[k] to P̃ of a validation nonzero under the rule p,
// with g[k] its (D K)_ij, q[k] its q_j (nil: qu for every k), x[k] its
// row's fit total, cf[k] its fit count and mass[off[k]] its row's m,
// and reports whether every one is > 0 (it stops at the first group of
// four, or the first nonzero of the tail, that is not). Each operation is
// the rule's (Smoothing), in its order, each product rounded apart (no
// fused multiply-add); with AVX2 four nonzeros at a time
// (ruleProbsAVX2: the same operations lane by lane, the same bits).
func ruleProbs(pr, g, q []float64, qu float64, x, cf []float64, off []int32, mass []float64, p RuleParams) bool {
	g, x, cf, off = g[:len(pr)], x[:len(pr)], cf[:len(pr)], off[:len(pr)]
	lam, lam1 := p.Lambda, 1-p.Lambda
	kappa, disc, mu, mu1 := p.Kappa, p.Discount, p.Mu, 1-p.Mu
	counts := !math.IsInf(kappa, 1)
	k := 0
	if groups := len(pr) / 4; useAVX2() && groups > 0 {
		c := ruleConsts{lam: lam, lam1: lam1, mu: mu, mu1: mu1, kappa: kappa, disc: disc, qstride: 32}
		if counts {
			c.counts = 1
		}
		qs := [4]float64{qu, qu, qu, qu}
		qp := &qs[0]
		if q != nil {
			qp = &q[0]
		} else {
			c.qstride = 0
		}
		if ruleProbsAVX2(&pr[0], &g[0], qp, &x[0], &cf[0], &off[0], unsafe.SliceData(mass), groups, &c) < groups {
			return false
		}
		k = 4 * groups
	}
	for ; k < len(pr); k++ {
		qk := qu
		if q != nil {
			qk = q[k]
		}
		b := float64(lam1*g[k]) + float64(lam*qk)
		if counts && x[k] > 0 {
			m := mass[off[k]]
			b = float64(mu1*(float64(max(cf[k]-disc, 0)+float64((kappa+m)*b)))/(x[k]+kappa)) + float64(mu*b)
		}
		if !(b > 0) {
			return false
		}
		pr[k] = b
	}
	return true
}

// ruleConsts are the parameters ruleProbsAVX2 reads: λ, 1 − λ, μ,
// 1 − μ, κ and d, the bytes q advances by per group of four (0: q is
// four copies of the uniform value) and whether the rule keeps counts.
type ruleConsts struct {
	lam, lam1, mu, mu1, kappa, disc float64
	qstride, counts                 int64
}

// fillQ sets q[k], for the validation nonzeros lo+k of action a, to
// q^a_j of their next state under δ and ρ (NewQRule's values, with the
// fit part's frequencies): (1−ρ)·(N_j + δ)/(N + n·δ) +
// ρ·(T_j + δ)/(T + n·δ), the second term only where ρ > 0.
func (v *Validation) fillQ(a int, delta, rho float64, q []float64, lo int) {
	n := float64(v.n)
	qden, cden := v.nf[a]+delta*n, v.tf[a]+delta*n
	nj, tj := v.ents[a].nj[lo:lo+len(q)], v.ents[a].tj[lo:lo+len(q)]
	for k := range q {
		x := (nj[k] + delta) / qden
		if rho > 0 {
			x = float64((1-rho)*x) + float64(rho*(tj[k]+delta)/cden)
		}
		q[k] = x
	}
}

// qCacheBytes bounds the memory a Validation's qCache holds: 64 MiB,
// the q of every (δ, ρ) of DeltaGrid × RhoGrid at about 270 000
// validation nonzeros (the real-data benchmark's have at most 30 000),
// eight of them at the medium job's (about 10^6).
const qCacheBytes = 64 << 20

// qCache keeps q per validation nonzero for the (action, δ, ρ) scored
// last, the least recently used given up beyond qCacheBytes: Tune's
// coordinate ascent scores every rule of a grid of λ, κ, d or μ with
// one q, and the fit's scores after it mostly the last choice's, so
// the one or two divisions of q per nonzero are made once per (δ, ρ)
// rather than once per score. The q of the group of rules being scored
// are kept even over the budget.
type qCache struct {
	qs     []cachedQ
	bytes  int
	budget int // bytes: qCacheBytes
	tick   uint64
}

type cachedQ struct {
	a          int
	delta, rho float64
	q          []float64
	used       uint64
}

// next starts a group of scores: the q that get returns from now on are
// kept until the next call (the q of one group never give up each
// other's room).
func (c *qCache) next() { c.tick++ }

// get returns the q of action a under δ and ρ for n nonzeros, nil for
// δ = +Inf (uniform q); fill reports that q is not computed yet (the
// caller fills it, every entry, before it is read again).
func (c *qCache) get(a int, delta, rho float64, n int) (q []float64, fill bool) {
	if math.IsInf(delta, 1) {
		return nil, false
	}
	for k := range c.qs {
		if e := &c.qs[k]; e.a == a && e.delta == delta && e.rho == rho {
			e.used = c.tick
			return e.q, false
		}
	}
	var buf []float64
	for c.bytes+8*n > c.budget {
		old := -1
		for k, e := range c.qs {
			if e.used < c.tick && (old < 0 || e.used < c.qs[old].used) {
				old = k
			}
		}
		if old < 0 {
			break
		}
		if cap(c.qs[old].q) >= n {
			buf = c.qs[old].q[:n]
		}
		c.bytes -= 8 * cap(c.qs[old].q)
		c.qs = slices.Delete(c.qs, old, old+1)
	}
	if buf == nil {
		buf = make([]float64, n)
	}
	c.qs = append(c.qs, cachedQ{a: a, delta: delta, rho: rho, q: buf, used: c.tick})
	c.bytes += 8 * cap(buf)
	return buf, true
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
		ll += v.tuneAction(a, workers)
	}
	v.tuned = true
	return ll / v.total, slices.Clone(v.last)
}

// tuneAction is Tune's choice for action a (on the factors' probabilities
// v.g already set): it sets v.last[a] and returns the choice's score.
func (v *Validation) tuneAction(a, workers int) float64 {
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
	ss := v.scores(a, cands, workers)
	p, best := cands[0], ss[0]
	for k, c := range cands[1:] {
		if s := ss[k+1]; s > best {
			p, best = c, s
		}
	}
	for range 8 {
		changed := false
		for _, c := range v.coords(&p) {
			// The scan along c's grid, its rules scored together:
			// which rules it scores does not depend on their scores.
			// It skips c's value x0 at its start, whose score is best
			// there (best is always p's score) and so never gains.
			keep := *c.at
			var xs []float64
			var rules []RuleParams
			for _, x := range c.grid {
				if x != keep {
					*c.at = x
					xs, rules = append(xs, x), append(rules, p)
				}
			}
			for k, s := range v.scores(a, rules, workers) {
				if s > best {
					best, keep, changed = s, xs[k], true
				}
			}
			*c.at = keep
		}
		if !changed {
			break
		}
	}
	v.last[a] = p
	if v.tunedAct == nil {
		v.tunedAct = make([]bool, v.u)
	}
	v.tunedAct[a] = true
	return best
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
	return v.retune(md, workers, v.localSearch(workers))
}

// TuneLocalOf is TuneLocal for action a alone (TuneLambdaOf).
func (v *Validation) TuneLocalOf(md *Model, a, workers int) float64 {
	return v.retuneOf(md, a, workers, v.localSearch(workers))
}

// localSearch is TuneLocal's search of an action's rule.
func (v *Validation) localSearch(workers int) func(a int, p *RuleParams, best *float64) {
	return func(a int, p *RuleParams, best *float64) {
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
	}
}

// TuneLambda scores md's factors on the validation split with the last
// choice of Tune, λ chosen anew per action (the weight of the factors,
// the one parameter that follows them from iterate to iterate): a local
// search on LambdaGrid from the last λ, exact since the score is concave
// in λ (the rule is affine in it). It runs Tune when Tune never ran. It
// returns the validation log-likelihood per transition.
func (v *Validation) TuneLambda(md *Model, workers int) float64 {
	return v.retune(md, workers, v.lambdaSearch(workers))
}

// TuneLambdaOf is TuneLambda for action a alone: the validation
// log-likelihood per transition of a's validation counts under md's
// factors of action a, λ of a's rule chosen anew from its last choice
// (Tune's choice for a, where a never had one). The other actions'
// factors are not read, nor their choices or scores changed: the
// held-out rule of a SQUAREM fit's component (EarlyStop.ScoreOf).
func (v *Validation) TuneLambdaOf(md *Model, a, workers int) float64 {
	return v.retuneOf(md, a, workers, v.lambdaSearch(workers))
}

// lambdaSearch is TuneLambda's search of an action's rule.
func (v *Validation) lambdaSearch(workers int) func(a int, p *RuleParams, best *float64) {
	return func(a int, p *RuleParams, best *float64) {
		v.climb(a, p, coord{LambdaGrid, &p.Lambda}, best, workers)
	}
}

// retuneOf is retune for action a alone (TuneLambdaOf), which must have
// validation counts.
func (v *Validation) retuneOf(md *Model, a, workers int, search func(a int, p *RuleParams, best *float64)) float64 {
	v.factorProbsOf(md, a, workers)
	if v.tunedAct == nil || !v.tunedAct[a] {
		return v.tuneAction(a, workers) / v.tot[a]
	}
	return v.searchAction(a, workers, search) / v.tot[a]
}

// searchAction re-tunes action a's rule by search from its last choice
// on the factors' probabilities v.g already set, keeps the result as the
// last choice and returns its score (retune's and retuneOf's step).
func (v *Validation) searchAction(a, workers int, search func(a int, p *RuleParams, best *float64)) float64 {
	p := v.last[a]
	best := v.score(a, p, workers)
	search(a, &p, &best)
	v.last[a] = p
	return best
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
		ll += v.searchAction(a, workers, search)
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
