package factor

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
)

// Estimate is an estimate of the u transition matrices P^a (n×n,
// row-stochastic) of an MDP: what the metrics of this file need. *Model (a
// stochastic factorization D^a K^a), *CNT (counting) and *Dense (an explicit
// matrix, e.g. the true P of a synthetic problem) implement it.
type Estimate interface {
	// States returns n, Actions returns u.
	States() int
	Actions() int
	// Prob returns P^a_ij.
	Prob(a, i, j int) float64
	// Row sets dst[j] = P^a_ij for j in [0, n); len(dst) must be n.
	Row(a, i int, dst []float64)
}

var (
	_ Estimate = (*Model)(nil)
	_ Estimate = (*Dense)(nil)
	_ Estimate = (*CNT)(nil)
)

// States returns the number of states n.
func (md *Model) States() int { return md.N }

// Actions returns the number of actions u.
func (md *Model) Actions() int { return md.U }

// Row is NextRow: the model's predictive distribution (Estimate).
func (md *Model) Row(a, i int, dst []float64) { md.NextRow(a, i, dst) }

// Dense returns D^a K^a as a row-major n×n slice (n² memory: for small n,
// e.g. to compare with a known P).
func (md *Model) Dense(a int) []float64 {
	n := md.N
	p := make([]float64, n*n)
	for i := 0; i < n; i++ {
		md.Row(a, i, p[i*n:i*n+n])
	}
	return p
}

// Dense is an explicit estimate: P[a] is the n×n matrix P^a in row-major
// order. It is meant for small n (a known true P, or a model materialised
// for inspection).
type Dense struct {
	N int
	P [][]float64
}

// NewDense materialises any estimate as a Dense (n²·u memory).
func NewDense(e Estimate) *Dense {
	n, u := e.States(), e.Actions()
	d := &Dense{N: n, P: make([][]float64, u)}
	for a := range d.P {
		d.P[a] = make([]float64, n*n)
		for i := 0; i < n; i++ {
			e.Row(a, i, d.P[a][i*n:i*n+n])
		}
	}
	return d
}

// DenseFromMat copies square gonum matrices, one per action, into a Dense.
// It returns an error unless they are all n×n for the same n ≥ 1.
func DenseFromMat(ps ...*mat.Dense) (*Dense, error) {
	if len(ps) == 0 {
		return nil, fmt.Errorf("factor: DenseFromMat: no matrices")
	}
	n, _ := ps[0].Dims()
	d := &Dense{N: n, P: make([][]float64, len(ps))}
	for a, p := range ps {
		r, c := p.Dims()
		if r != n || c != n || n < 1 {
			return nil, fmt.Errorf("factor: DenseFromMat: matrix of action %d is %d×%d, want %d×%d", a, r, c, n, n)
		}
		d.P[a] = make([]float64, n*n)
		for i := 0; i < n; i++ {
			mat.Row(d.P[a][i*n:i*n+n], i, p)
		}
	}
	return d, nil
}

// States returns n.
func (d *Dense) States() int { return d.N }

// Actions returns u = len(d.P).
func (d *Dense) Actions() int { return len(d.P) }

// Prob returns P^a_ij.
func (d *Dense) Prob(a, i, j int) float64 { return d.P[a][i*d.N+j] }

// Row copies row i of P^a into dst (len n).
func (d *Dense) Row(a, i int, dst []float64) {
	if len(dst) != d.N {
		panic(fmt.Sprintf("factor: Dense.Row: len(dst) = %d, want n = %d", len(dst), d.N))
	}
	copy(dst, d.P[a][i*d.N:(i+1)*d.N])
}

// Validate checks that every P^a is n×n with finite non-negative entries
// and rows summing to 1 within StochasticTol.
func (d *Dense) Validate() error {
	n := d.N
	if n < 1 || len(d.P) < 1 {
		return fmt.Errorf("factor: dense estimate has n=%d states and %d actions", n, len(d.P))
	}
	for a, p := range d.P {
		if len(p) != n*n {
			return fmt.Errorf("factor: dense P of action %d has %d entries, want %d", a, len(p), n*n)
		}
		for i := 0; i < n; i++ {
			if err := checkStochastic(p[i*n : i*n+n]); err != nil {
				return fmt.Errorf("factor: dense P of action %d row %d: %w", a, i, err)
			}
		}
	}
	return nil
}

// checkStochastic returns an error unless row is a probability vector
// within StochasticTol.
func checkStochastic(row []float64) error {
	s := 0.0
	for j, v := range row {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("entry %d = %v must be finite and >= 0", j, v)
		}
		s += v
	}
	if math.Abs(s-1) > StochasticTol {
		return fmt.Errorf("sums to %v: %w", s, ErrNotStochastic)
	}
	return nil
}

// LogLikelihood returns ll = Σ c·log P^a_ij over the nonzeros (i, j, c) of
// the blocks (incremental-emsf eq. 10, the part of the log-likelihood (9)
// that depends on the model) and total = Σ c. For a *Model, P^a_ij is
// computed with the arithmetic of Compute and ll summed in the order of a
// pass (ReducePlan with DefaultGroupNNZ), so on the training blocks ll
// equals bitwise the loglik of a Pass under md; for other estimates ll
// sums block by block in order.
//
// An observed transition with probability 0 (or NaN) gives a
// *TransitionError; a block that does not fit the estimate's shape gives an
// error.
func LogLikelihood(e Estimate, blocks []*Block) (ll, total float64, err error) {
	n, u := e.States(), e.Actions()
	md, isModel := e.(*Model)
	// A smoothed model is scored by its rule, as any estimate.
	isModel = isModel && md.Smoothing == nil
	var t []float64
	if isModel {
		t = make([]float64, md.M)
	}
	bls := make([]float64, len(blocks))
	var count []int32
	for k, b := range blocks {
		if err := b.CheckShape(n, u); err != nil {
			return 0, 0, fmt.Errorf("factor: block %d: %w", k, err)
		}
		total += b.Sum()
		if isModel {
			// Compute's order: column by column.
			ci := b.columns(&count)
			for c, j := range ci.cols {
				kcol := md.KCol(b.Action, int(j))
				for q := ci.ptr[c]; q < ci.ptr[c+1]; q++ {
					i := int(b.Rows[ci.rows[q]])
					g := prodSum(t, md.DRow(b.Action, i), kcol)
					if !(g > 0) {
						return 0, 0, &TransitionError{Action: b.Action, From: i, To: int(j), Count: ci.vals[q]}
					}
					bls[k] += ci.vals[q] * math.Log(g)
				}
			}
			continue
		}
		for r, i := range b.Rows {
			for q := b.Ptr[r]; q < b.Ptr[r+1]; q++ {
				j, c := int(b.Cols[q]), b.Vals[q]
				g := e.Prob(b.Action, int(i), j)
				if !(g > 0) {
					return 0, 0, &TransitionError{Action: b.Action, From: int(i), To: j, Count: c}
				}
				bls[k] += c * math.Log(g)
			}
		}
	}
	if !isModel {
		for _, bl := range bls {
			ll += bl
		}
		return ll, total, nil
	}
	// A pass's order (ReducePlan with DefaultGroupNNZ): per K block a tree
	// over groups, left folds inside; the roots folded in K block order.
	plan := PlanBlocks(blocks, md.Tie, DefaultGroupNNZ)
	add := func(l, r float64) float64 { return l + r }
	for _, tr := range plan.Trees {
		fold := NewTreeFold(tr.Groups(), add)
		for g := range tr.Groups() {
			leaf := 0.0
			for _, k := range plan.Order[tr.Start[g]:tr.Start[g+1]] {
				leaf += bls[k]
			}
			if err := fold.Push(Piece{g, 0}, leaf); err != nil {
				panic(err) // pushed in order
			}
		}
		root, _ := fold.Root()
		ll += root
	}
	return ll, total, nil
}

// HeldOut returns the held-out log-likelihood per transition,
// LogLikelihood / Σc (incremental-emsf eq. 10 divided by τ−1), the measure
// for choosing the order m on data not used for fitting. It is an error if
// the blocks hold no data or an observed transition has probability 0.
func HeldOut(e Estimate, blocks []*Block) (float64, error) {
	ll, total, err := LogLikelihood(e, blocks)
	if err != nil {
		return math.NaN(), err
	}
	if !(total > 0) {
		return math.NaN(), fmt.Errorf("factor: held-out log-likelihood: no data (total count %v)", total)
	}
	return ll / total, nil
}

// WKL returns the weighted KL divergence of incremental-emsf eq. 11,
//
//	WKL = Σ_a Σ_i (x^a_i/N)·KL(P̂^a_i ‖ P^a_i) = (Σ c·log(c/x^a_i) − ll)/N,
//
// where x^a_i = Σ_j C^a_ij, P̂ is the counting estimate and ll is
// LogLikelihood. Unlike DataTerm, the row totals x^a_i are summed over all
// blocks, so WKL is exact even when a row is split across blocks; when no
// row is split, the data term equals DataTerm(blocks) bitwise.
func WKL(e Estimate, blocks []*Block) (float64, error) {
	ll, total, err := LogLikelihood(e, blocks)
	if err != nil {
		return math.NaN(), err
	}
	if !(total > 0) {
		return math.NaN(), fmt.Errorf("factor: WKL: no data (total count %v)", total)
	}
	return (dataTermSplit(blocks, e.States(), e.Actions()) - ll) / total, nil
}

// dataTermSplit is Σ c·log(c/x^a_i) with row totals x^a_i summed over all
// blocks in order (the blocks' shapes were checked by the caller).
func dataTermSplit(blocks []*Block, n, u int) float64 {
	return SumDataTerms(dataTermsSplit(blocks, n, u))
}

// dataTermsSplit is each block's share of dataTermSplit.
func dataTermsSplit(blocks []*Block, n, u int) []float64 {
	x := make([][]float64, u)
	for _, b := range blocks {
		if x[b.Action] == nil {
			x[b.Action] = make([]float64, n)
		}
		xa := x[b.Action]
		for r, i := range b.Rows {
			for _, c := range b.Vals[b.Ptr[r]:b.Ptr[r+1]] {
				xa[i] += c
			}
		}
	}
	out := make([]float64, len(blocks))
	for k, b := range blocks {
		xa := x[b.Action]
		bt := 0.0
		for r, i := range b.Rows {
			for _, c := range b.Vals[b.Ptr[r]:b.Ptr[r+1]] {
				bt += c * math.Log(c/xa[i])
			}
		}
		out[k] = bt
	}
	return out
}

// checkSameShape panics unless two estimates have the same n and u.
func checkSameShape(fn string, p, q Estimate) {
	if p.States() != q.States() || p.Actions() != q.Actions() {
		panic(fmt.Sprintf("factor: %s: estimates differ in shape (n=%d u=%d vs n=%d u=%d)",
			fn, p.States(), p.Actions(), q.States(), q.Actions()))
	}
}

// FrobeniusErrorAction returns ‖P^a − P̃^a‖_F, the Frobenius distance
// between the matrices of action a of a known P (truth) and an estimate
// (emsf-ijcai2015 Fig. 2). It costs O(n²) Prob evaluations of each.
func FrobeniusErrorAction(truth, est Estimate, a int) float64 {
	checkSameShape("FrobeniusErrorAction", truth, est)
	return math.Sqrt(frobeniusSq(truth, est, a))
}

// FrobeniusError returns sqrt(Σ_a ‖P^a − P̃^a‖_F²): the Frobenius distance
// of emsf-ijcai2015 Fig. 2 summed over all actions (the Frobenius norm of
// the u matrices stacked). For u = 1 it is ‖P − P̃‖_F.
func FrobeniusError(truth, est Estimate) float64 {
	checkSameShape("FrobeniusError", truth, est)
	s := 0.0
	for a := 0; a < truth.Actions(); a++ {
		s += frobeniusSq(truth, est, a)
	}
	return math.Sqrt(s)
}

func frobeniusSq(truth, est Estimate, a int) float64 {
	n := truth.States()
	p, q := make([]float64, n), make([]float64, n)
	s := 0.0
	for i := 0; i < n; i++ {
		truth.Row(a, i, p)
		est.Row(a, i, q)
		for j, v := range p {
			d := v - q[j]
			s += d * d
		}
	}
	return s
}

// KL returns the Kullback-Leibler divergence Σ_j p_j·log(p_j/q_j) of two
// rows (incremental-emsf eq. 8, one row). Terms with p_j = 0 are 0; a term
// with q_j = 0 < p_j makes the result +Inf (q cannot explain an outcome
// that p allows). Rows are used as given, not renormalised, so rounding
// can make a result for p ≈ q slightly negative.
func KL(p, q []float64) float64 {
	if len(p) != len(q) {
		panic(fmt.Sprintf("factor: KL: rows differ in length (%d, %d)", len(p), len(q)))
	}
	s := 0.0
	for j, v := range p {
		if v == 0 {
			continue
		}
		if !(q[j] > 0) {
			return math.Inf(1)
		}
		s += v * math.Log(v/q[j])
	}
	return s
}

// KLRho returns the weighted KL divergence of incremental-emsf eq. 12,
//
//	KL_ρ(P ‖ P̃) = E_{(i,a)∼ρ}[ KL(P^a_i ‖ P̃^a_i) ] = Σ_a Σ_i w_ai·KL(P^a_i ‖ P̃^a_i),
//
// between a known P (truth) and an estimate, with weights
//   - len(rho) = n: ρ is a distribution over states and actions are taken
//     uniformly, w_ai = ρ_i/u (for u = 1 this is the KL_ρ of
//     incremental-emsf Fig. 3, where ρ is the stationary distribution of P);
//   - len(rho) = u·n: ρ is the joint distribution of (state, action),
//     w_ai = rho[a*n+i] (μ and Π of eq. 12 combined).
//
// Weights are used as given (not renormalised); they must be finite and
// non-negative. Rows with weight 0 are skipped, so a row the estimate
// cannot explain matters only if it has weight; where it has weight and the
// estimate gives 0 to a transition P allows, the result is +Inf.
func KLRho(truth, est Estimate, rho []float64) float64 {
	checkSameShape("KLRho", truth, est)
	n, u := truth.States(), truth.Actions()
	if len(rho) != n && len(rho) != n*u {
		panic(fmt.Sprintf("factor: KLRho: len(rho) = %d, want n = %d or u·n = %d", len(rho), n, n*u))
	}
	for k, w := range rho {
		if !(w >= 0) || math.IsInf(w, 0) {
			panic(fmt.Sprintf("factor: KLRho: rho[%d] = %v must be finite and >= 0", k, w))
		}
	}
	p, q := make([]float64, n), make([]float64, n)
	s := 0.0
	for a := 0; a < u; a++ {
		for i := 0; i < n; i++ {
			var w float64
			if len(rho) == n*u && u > 1 {
				w = rho[a*n+i]
			} else {
				w = rho[i] / float64(u)
			}
			if w == 0 {
				continue
			}
			truth.Row(a, i, p)
			est.Row(a, i, q)
			s += w * KL(p, q)
		}
	}
	return s
}
