package factor

import (
	"fmt"
	"math"
	"slices"
)

// Smoothing is the predictive rule of a model: what it says about a
// transition beyond its factors. For action a, state i and next state j
//
//	P̃^a_ij = f_i·(c_ij − d_a)₊ + b_i·B^a_ij,
//	B^a_ij = (1 − λ_a)·(D^a K^a)_ij + λ_a·q^a_j,
//	f_i = (1 − μ_a)/(x_i + κ_a),
//	b_i = (1 − μ_a)·(κ_a + m_i)/(x_i + κ_a) + μ_a,   m_i = Σ_j min(c_ij, d_a),
//
// and P̃^a_ij = B^a_ij for a row without counts (x_i = 0) or κ_a = +Inf,
// where c and x = Σ_j c_ij are the training counts of action a. Each
// row of P̃ sums to 1. The backoff B mixes the factorization with q^a,
// the next-state frequencies of action a smoothed with δ_a counts per
// state, interpolated (weight ρ_a) with the Kneser–Ney continuation
// frequencies, the number of distinct states each next state follows
// (NewQRule; δ_a = +Inf: uniform). A row's own counts are discounted by
// d_a each (absolute discounting, Ney, Essen & Kneser 1994) and the
// discounted mass plus κ_a pseudo-counts go to the backoff (the
// hierarchical Pitman–Yor / Dirichlet rule of Teh 2006 and MacKay &
// Peto 1995), then μ_a more of the row is moved to the backoff
// (Jelinek–Mercer). Special cases: d = μ = 0 is the Dirichlet rule
// w_i = x_i/(x_i+κ) of interpolation-v1; κ = d = 0, λ = 1, ρ = 0 is
// Jelinek–Mercer counting (JM) with weight μ; d = μ = 0, λ = 1, δ = +Inf
// is add-β counting with β = κ/n. See the package doc, "The predictive
// rule", for why this rule, how its parameters are chosen and what it
// measured.
type Smoothing struct {
	// Lambda, Kappa and Delta are λ_a, κ_a and δ_a, one per action
	// (Delta only says how Q was made).
	Lambda, Kappa, Delta []float64
	// Mu, Discount and Rho are μ_a, d_a and ρ_a, one per action, or nil
	// for 0 (Rho only says how Q was made).
	Mu, Discount, Rho []float64
	// Q holds q^a, one n-vector per action, each summing to 1 with every
	// entry > 0.
	Q [][]float64
	// Counts are the training counts of the rule's first term; nil when
	// every κ_a is +Inf (the rule is then a stochastic factorization of
	// order m+1: D̃_i = [(1−λ)D_i, λ], K̃ = [K; q]).
	Counts *CNT
	// mass[a][i] is m_i of action a (Prepare); nil: summed per call.
	mass [][]float64
}

// QHalf is the pseudo-count of every next state in q^a (Jeffreys' ½):
// a next state never seen after action a still has a positive
// background probability.
const QHalf = 0.5

// NewQ returns q^a for every action: the next-state frequencies of the
// blocks, each smoothed with QHalf pseudo-counts per state.
func NewQ(n, u int, blocks []*Block) [][]float64 {
	delta := make([]float64, u)
	for a := range delta {
		delta[a] = QHalf
	}
	return NewQDelta(n, u, blocks, delta)
}

// NewQDelta is NewQ with delta[a] pseudo-counts per state for action a:
// q^a_j = (N^a_j + δ_a)/(N^a + n·δ_a); δ_a = +Inf gives the uniform
// distribution. The sums are of counts in block order.
func NewQDelta(n, u int, blocks []*Block, delta []float64) [][]float64 {
	q := make([][]float64, u)
	tot := make([]float64, u)
	for a := range q {
		q[a] = make([]float64, n)
	}
	for _, b := range blocks {
		qa := q[b.Action]
		for k, j := range b.Cols {
			qa[j] += b.Vals[k]
			tot[b.Action] += b.Vals[k]
		}
	}
	for a, qa := range q {
		smoothFreq(qa, tot[a], delta[a])
	}
	return q
}

// smoothFreq turns the counts f (total tot) into (f_j + δ)/(tot + n·δ)
// in place; δ = +Inf gives 1/n.
func smoothFreq(f []float64, tot, delta float64) {
	n := len(f)
	if math.IsInf(delta, 1) {
		for j := range f {
			f[j] = 1 / float64(n)
		}
		return
	}
	den := tot + delta*float64(n)
	for j := range f {
		f[j] = (f[j] + delta) / den
	}
}

// NewQRule is NewQDelta interpolated, per action, with the Kneser–Ney
// continuation frequencies of cnt (the counts of blocks):
//
//	q^a_j = (1 − ρ_a)·(N^a_j + δ_a)/(N^a + n·δ_a) + ρ_a·(T^a_j + δ_a)/(T^a + n·δ_a),
//
// with T^a_j the number of distinct states j follows under action a
// and T^a = Σ_j T^a_j. rho may be nil (0); cnt is needed only where
// some ρ_a > 0.
func NewQRule(n, u int, blocks []*Block, cnt *CNT, delta, rho []float64) [][]float64 {
	q := NewQDelta(n, u, blocks, delta)
	for a := range u {
		r := ruleAt(rho, a)
		if r == 0 || math.IsInf(delta[a], 1) {
			continue
		}
		t, tot := cnt.continuation(a)
		smoothFreq(t, tot, delta[a])
		for j, v := range t {
			q[a][j] = float64((1-r)*q[a][j]) + float64(r*v)
		}
	}
	return q
}

// continuation returns T^a_j, the number of distinct rows with a count
// of next state j under action a, and their sum.
func (e *CNT) continuation(a int) ([]float64, float64) {
	t := make([]float64, e.n)
	for _, j := range e.cols[a] {
		t[j]++
	}
	return t, float64(len(e.cols[a]))
}

// ruleAt returns xs[a], or 0 for a nil xs.
func ruleAt(xs []float64, a int) float64 {
	if xs == nil {
		return 0
	}
	return xs[a]
}

// Validate checks the rule against a model of n states and u actions.
func (s *Smoothing) Validate(n, u int) error {
	if len(s.Lambda) != u || len(s.Kappa) != u || len(s.Delta) != u || len(s.Q) != u {
		return fmt.Errorf("factor: smoothing has %d λ, %d κ, %d δ and %d q, want one per action (%d)", len(s.Lambda), len(s.Kappa), len(s.Delta), len(s.Q), u)
	}
	for _, opt := range []struct {
		name string
		xs   []float64
	}{{"μ", s.Mu}, {"d", s.Discount}, {"ρ", s.Rho}} {
		if opt.xs != nil && len(opt.xs) != u {
			return fmt.Errorf("factor: smoothing has %d %s, want one per action (%d) or none", len(opt.xs), opt.name, u)
		}
	}
	for a := range u {
		if l := s.Lambda[a]; !(l >= 0 && l <= 1) {
			return fmt.Errorf("factor: smoothing λ of action %d is %v, want a weight in [0, 1]", a, l)
		}
		if k := s.Kappa[a]; !(k >= 0) {
			return fmt.Errorf("factor: smoothing κ of action %d is %v, want >= 0 (+Inf: no counts)", a, k)
		}
		if d := s.Delta[a]; !(d > 0) {
			return fmt.Errorf("factor: smoothing δ of action %d is %v, want > 0 (+Inf: uniform q)", a, d)
		}
		if mu := ruleAt(s.Mu, a); !(mu >= 0 && mu <= 1) {
			return fmt.Errorf("factor: smoothing μ of action %d is %v, want a weight in [0, 1]", a, mu)
		}
		if d := ruleAt(s.Discount, a); !(d >= 0) || math.IsInf(d, 1) {
			return fmt.Errorf("factor: smoothing discount d of action %d is %v, want finite and >= 0", a, d)
		}
		if r := ruleAt(s.Rho, a); !(r >= 0 && r <= 1) {
			return fmt.Errorf("factor: smoothing ρ of action %d is %v, want a weight in [0, 1]", a, r)
		}
		if !math.IsInf(s.Kappa[a], 1) && s.Counts == nil {
			return fmt.Errorf("factor: smoothing κ of action %d is %v but the rule has no counts", a, s.Kappa[a])
		}
		if len(s.Q[a]) != n {
			return fmt.Errorf("factor: smoothing q of action %d has %d entries, want n = %d", a, len(s.Q[a]), n)
		}
		sum := 0.0
		for j, v := range s.Q[a] {
			if !(v > 0) || math.IsInf(v, 0) {
				return fmt.Errorf("factor: smoothing q of action %d, state %d is %v, want finite and > 0", a, j, v)
			}
			sum += v
		}
		if math.Abs(sum-1) > StochasticTol {
			return fmt.Errorf("factor: smoothing q of action %d sums to %v: %w", a, sum, ErrNotStochastic)
		}
	}
	if c := s.Counts; c != nil && (c.n != n || c.u != u || c.beta != 0) {
		return fmt.Errorf("factor: smoothing counts have n=%d u=%d β=%v, want n=%d u=%d β=0", c.n, c.u, c.beta, n, u)
	}
	return nil
}

// Prepare validates the rule (Validate) and computes each row's
// discounted mass m_i once, so that NextRow and Prob need not sum it.
// NewSmoothing and the model reader call it; a rule built field by field
// works without it, summing m_i per call.
func (s *Smoothing) Prepare(n, u int) error {
	if err := s.Validate(n, u); err != nil {
		return err
	}
	s.mass = nil
	if s.Counts == nil || s.Discount == nil {
		return nil
	}
	s.mass = make([][]float64, u)
	for a := range u {
		if d := s.Discount[a]; d > 0 && !math.IsInf(s.Kappa[a], 1) {
			s.mass[a] = make([]float64, n)
			for i := range n {
				s.mass[a][i] = s.Counts.discounted(a, i, d)
			}
		}
	}
	return nil
}

// discounted returns Σ_j min(C^a_ij, d) over row i of action a.
func (e *CNT) discounted(a, i int, d float64) float64 {
	_, cnt := e.rowNZ(a, i)
	m := 0.0
	for _, c := range cnt {
		m += min(c, d)
	}
	return m
}

// Clone returns a deep copy (the counts and per-row sums, never written
// after they are made, are shared).
func (s *Smoothing) Clone() *Smoothing {
	if s == nil {
		return nil
	}
	c := &Smoothing{Lambda: slices.Clone(s.Lambda), Kappa: slices.Clone(s.Kappa), Delta: slices.Clone(s.Delta),
		Mu: slices.Clone(s.Mu), Discount: slices.Clone(s.Discount), Rho: slices.Clone(s.Rho), Counts: s.Counts, mass: s.mass}
	c.Q = make([][]float64, len(s.Q))
	for a, q := range s.Q {
		c.Q[a] = slices.Clone(q)
	}
	return c
}

// Params returns the rule's parameters for action a.
func (s *Smoothing) Params(a int) RuleParams {
	return RuleParams{Lambda: s.Lambda[a], Kappa: s.Kappa[a], Delta: s.Delta[a],
		Mu: ruleAt(s.Mu, a), Discount: ruleAt(s.Discount, a), Rho: ruleAt(s.Rho, a)}
}

// weights returns the rule's weights for row i of action a: f and d of
// the counted term f·(c_ij − d)₊, wf on (D K)_ij and wq on q_j.
func (s *Smoothing) weights(a, i int) (f, d, wf, wq float64) {
	lambda, kappa := s.Lambda[a], s.Kappa[a]
	b := 1.0
	if s.Counts != nil && !math.IsInf(kappa, 1) {
		if x := s.Counts.RowTotal(a, i); x > 0 {
			mu := ruleAt(s.Mu, a)
			d = ruleAt(s.Discount, a)
			if mu == 0 && d == 0 {
				// The Dirichlet rule w = x/(x+κ), in interpolation-v1's
				// arithmetic (its files predict bitwise as before).
				wc := x / (x + kappa)
				f, b = wc/x, 1-wc
			} else {
				var m float64
				if s.mass != nil && s.mass[a] != nil {
					m = s.mass[a][i]
				} else if d > 0 {
					m = s.Counts.discounted(a, i, d)
				}
				den := x + kappa
				f = (1 - mu) / den
				b = float64((1-mu)*(kappa+m)/den) + mu
			}
		}
	}
	return f, d, b * (1 - lambda), b * lambda
}

// RowWeights returns, for row i of action a, the weights of the rule's
// terms: its counted next states add f·(c_ij − d)₊, and every next
// state gets wf·(D K)_ij + wq·q^a_j (a model without smoothing has
// f = 0, wf = 1). With them a consumer computes any entry, or the top k
// of a row, as an inner product: see the package doc, "The predictive
// rule".
func (md *Model) RowWeights(a, i int) (f, d, wf, wq float64) {
	if md.Smoothing == nil {
		return 0, 0, 1, 0
	}
	return md.Smoothing.weights(a, i)
}

// NextRow sets dst[j] to the model's predictive probability of next
// state j from state i under action a, for every j: (D^a K^a)_ij for a
// model without smoothing, else the rule of Smoothing. It is the one
// place every consumer (eval, trick, the service, queries) gets a
// model's next-state distribution from. len(dst) must be n.
func (md *Model) NextRow(a, i int, dst []float64) {
	if len(dst) != md.N {
		panic(fmt.Sprintf("factor: Model.NextRow: len(dst) = %d, want n = %d", len(dst), md.N))
	}
	md.FactorRow(a, i, dst)
	if s := md.Smoothing; s != nil {
		s.row(a, i, dst)
	}
}

// row turns dst, holding (D^a K^a)_ij for every j, into row i of the
// rule P̃^a.
func (s *Smoothing) row(a, i int, dst []float64) {
	f, d, wf, wq := s.weights(a, i)
	q := s.Q[a]
	for j, v := range dst {
		dst[j] = float64(wf*v) + float64(wq*q[j])
	}
	if f > 0 {
		cols, cnt := s.Counts.rowNZ(a, i)
		for k, j := range cols {
			dst[j] += float64(f * max(cnt[k]-d, 0))
		}
	}
}

// Prob returns the model's predictive probability of next state j from
// state i under action a: NextRow's entry j, computed alone (with the
// same arithmetic, so bitwise NextRow's).
func (md *Model) Prob(a, i, j int) float64 {
	g := md.FactorProb(a, i, j)
	if md.Smoothing == nil {
		return g
	}
	return md.Smoothing.prob(a, i, j, g)
}

// prob returns P̃^a_ij of the rule for a factors' entry (D^a K^a)_ij = g:
// row's entry j, computed alone with the same arithmetic.
func (s *Smoothing) prob(a, i, j int, g float64) float64 {
	f, d, wf, wq := s.weights(a, i)
	p := float64(wf*g) + float64(wq*s.Q[a][j])
	if f > 0 {
		p += float64(f * max(s.Counts.count(a, i, j)-d, 0))
	}
	return p
}

// FactorProb returns (D^a K^a)_ij, the factorization's own entry without
// the smoothing rule.
func (md *Model) FactorProb(a, i, j int) float64 {
	return dot(md.DRow(a, i), md.KCol(a, j))
}

// FactorRow sets dst[j] = (D^a K^a)_ij for every j (emsf-ijcai2015 Def.
// 4), without the smoothing rule. len(dst) must be n.
func (md *Model) FactorRow(a, i int, dst []float64) {
	if len(dst) != md.N {
		panic(fmt.Sprintf("factor: Model.FactorRow: len(dst) = %d, want n = %d", len(dst), md.N))
	}
	m := md.M
	d := md.DRow(a, i)
	kt := md.KT[md.KBlock(a)]
	for j := range dst {
		dst[j] = dot(d, kt[j*m:j*m+m])
	}
}

// UnseenRow sets dst to the model's prediction for a state it has no
// row for (an index at or beyond n, met in data scored later): the
// prediction of a state never seen in training, (1−λ)·π K + λ·q with π
// the hidden-state marginal (SetUnseenRows), or π K without smoothing.
// len(dst) must be n.
func (md *Model) UnseenRow(a int, dst []float64) {
	if len(dst) != md.N {
		panic(fmt.Sprintf("factor: Model.UnseenRow: len(dst) = %d, want n = %d", len(dst), md.N))
	}
	pi := md.marginal(a)
	m := md.M
	kt := md.KT[md.KBlock(a)]
	for j := range dst {
		dst[j] = dot(pi, kt[j*m:j*m+m])
	}
	if s := md.Smoothing; s != nil {
		lambda, q := s.Lambda[a], s.Q[a]
		for j, v := range dst {
			dst[j] = float64((1-lambda)*v) + float64(lambda*q[j])
		}
	}
}

// marginal returns π^a_l ∝ Σ_i D^a_il over every row (each row weighs
// the same: the marginal of the rows without counts to weigh them by).
func (md *Model) marginal(a int) []float64 {
	m := md.M
	d := md.D[md.DBlock(a)]
	pi := make([]float64, m)
	for i := 0; i < md.N; i++ {
		addTo(pi, d[i*m:i*m+m])
	}
	s := 0.0
	for _, v := range pi {
		s += v
	}
	for l := range pi {
		pi[l] /= s
	}
	return pi
}

// SetUnseenRows gives every row of D that has no count in blocks the
// hidden-state marginal of the data, π_l = Σ_i x_i D_il / Σ_i x_i (per D
// block; the K block it feeds is the one of its actions). At a fixed
// point of EM, π K is the data's next-state distribution
// (../shared/specs/quality-and-acceleration.md §1.4), so a state never
// seen is predicted like the average state, never by the random row it
// started from: the prediction does not depend on the seed. It returns
// how many rows it set. A Float32 model's rows are rounded.
func (md *Model) SetUnseenRows(blocks []*Block) int {
	n, m := md.N, md.M
	seen := make([][]bool, len(md.D))
	pis := make([][]float64, len(md.D))
	for b := range md.D {
		seen[b] = make([]bool, n)
		pis[b] = make([]float64, m)
	}
	// x per D block, summed in block order.
	xs := make([][]float64, len(md.D))
	for b := range xs {
		xs[b] = make([]float64, n)
	}
	for _, bl := range blocks {
		db := md.DBlock(bl.Action)
		for r, i := range bl.Rows {
			for q := bl.Ptr[r]; q < bl.Ptr[r+1]; q++ {
				xs[db][i] += bl.Vals[q]
			}
			seen[db][i] = true
		}
	}
	set := 0
	for b, d := range md.D {
		pi := pis[b]
		tot := 0.0
		for i := 0; i < n; i++ {
			if x := xs[b][i]; x > 0 {
				for l, v := range d[i*m : i*m+m] {
					pi[l] += float64(x * v)
				}
				tot += x
			}
		}
		if !(tot > 0) {
			continue // no data for this block: nothing to say
		}
		for l := range pi {
			pi[l] /= tot
		}
		if md.Precision == Float32 {
			round32Row(pi, nil, false)
		}
		for i := 0; i < n; i++ {
			if !seen[b][i] {
				copy(d[i*m:i*m+m], pi)
				set++
			}
		}
	}
	return set
}

// rowNZ returns the next states and counts of row i of action a.
func (e *CNT) rowNZ(a, i int) ([]int32, []float64) {
	if e.x[a] == nil {
		return nil, nil
	}
	lo, hi := e.ptr[a][i], e.ptr[a][i+1]
	return e.cols[a][lo:hi], e.cnt[a][lo:hi]
}

// count returns C^a_ij.
func (e *CNT) count(a, i, j int) float64 {
	cols, cnt := e.rowNZ(a, i)
	if q, ok := slices.BinarySearch(cols, int32(j)); ok {
		return cnt[q]
	}
	return 0
}

// NNZ returns the number of distinct (action, state, next state) counted.
func (e *CNT) NNZ() int {
	n := 0
	for _, c := range e.cols {
		n += len(c)
	}
	return n
}

// Entries calls f for every nonzero count, action by action, rows and
// next states ascending.
func (e *CNT) Entries(f func(a, i, j int, c float64)) {
	for a := range e.u {
		if e.x[a] == nil {
			continue
		}
		for i := 0; i < e.n; i++ {
			for k := e.ptr[a][i]; k < e.ptr[a][i+1]; k++ {
				f(a, i, int(e.cols[a][k]), e.cnt[a][k])
			}
		}
	}
}

// CountEntry is one nonzero count of a CNT: C^A_{I,J} = C.
type CountEntry struct {
	A, I, J int
	C       float64
}

// NewCNTFromEntries builds the counting estimate (β = 0) of n states and
// u actions from its nonzeros, which must be sorted by (action, state,
// next state) without repeats, each count finite and > 0 (as Entries
// lists them): a model file's stored counts.
func NewCNTFromEntries(n, u int, es []CountEntry) (*CNT, error) {
	e := &CNT{n: n, u: u, ptr: make([][]int64, u), cols: make([][]int32, u), cnt: make([][]float64, u), x: make([][]float64, u)}
	for k, en := range es {
		switch {
		case en.A < 0 || en.A >= u || en.I < 0 || en.I >= n || en.J < 0 || en.J >= n:
			return nil, fmt.Errorf("factor: count %d: (%d, %d, %d) out of range (n=%d, u=%d)", k, en.A, en.I, en.J, n, u)
		case !(en.C > 0) || math.IsInf(en.C, 0):
			return nil, fmt.Errorf("factor: count %d: %v must be finite and > 0", k, en.C)
		case k > 0 && !less(es[k-1], en):
			return nil, fmt.Errorf("factor: count %d: (%d, %d, %d) out of order", k, en.A, en.I, en.J)
		}
		a := en.A
		if e.x[a] == nil {
			e.ptr[a], e.x[a] = make([]int64, n+1), make([]float64, n)
		}
		e.cols[a] = append(e.cols[a], int32(en.J))
		e.cnt[a] = append(e.cnt[a], en.C)
		e.ptr[a][en.I+1]++
		e.x[a][en.I] += en.C
	}
	for a := range u {
		if e.ptr[a] != nil {
			for i := 0; i < n; i++ {
				e.ptr[a][i+1] += e.ptr[a][i]
			}
		}
	}
	return e, nil
}

func less(p, q CountEntry) bool {
	if p.A != q.A {
		return p.A < q.A
	}
	if p.I != q.I {
		return p.I < q.I
	}
	return p.J < q.J
}

// Augmented returns the smoothing rule's factored part as a stochastic
// factorization of order m+1, with one K block per action (tie none):
//
//	D̃^a_i = [(1−λ_a)·D^a_i, λ_a],   K̃^a = [K^a; q^a],
//
// so that D̃^a K̃^a = (1−λ_a) D^a K^a + λ_a·1 q^a: the rule itself where it
// keeps no counts (κ = +Inf), and its backoff where it does (a row's own
// frequencies are not low rank). The SF trick (Reduced, ReducedChain,
// Stationary) applies to it: the background is one more hidden state.
// A model without smoothing is returned as it is.
func (md *Model) Augmented() *Model {
	s := md.Smoothing
	if s == nil {
		return md
	}
	n, m, u := md.N, md.M, md.U
	out := NewModel(n, m+1, u, TieNone)
	out.Iteration, out.LogLik, out.WKL, out.Seed = md.Iteration, md.LogLik, md.WKL, md.Seed
	for a := range u {
		lam := s.Lambda[a]
		d, kt := md.D[md.DBlock(a)], md.KT[md.KBlock(a)]
		for i := range n {
			dst := out.D[a][i*(m+1) : (i+1)*(m+1)]
			for l, v := range d[i*m : i*m+m] {
				dst[l] = float64((1 - lam) * v)
			}
			dst[m] = lam
			copy(out.KT[a][i*(m+1):i*(m+1)+m], kt[i*m:i*m+m])
			out.KT[a][i*(m+1)+m] = s.Q[a][i]
		}
	}
	return out
}
