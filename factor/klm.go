package factor

import (
	"context"
	"fmt"
	"math"
	"time"
)

// KLMOptions configures KLM.
type KLMOptions struct {
	// Converger stops the multiplicative updates. The value it watches is
	// the negated generalized KL divergence −Σ_a D(P̂^a ‖ W^a H^a) (see
	// KLM), so Tol is a relative change of the divergence.
	Converger Converger
}

// KLMResult says how a KLM fit ended.
type KLMResult struct {
	Status     Status
	Iterations int
	// Divergence is Σ_a D(P̂^a ‖ W^a H^a), the generalized KL divergence of
	// the last evaluated iterate (NaN when never evaluated).
	Divergence float64
	Elapsed    time.Duration
}

// KLM is the baseline "KLM" of incremental-emsf §5 (Fig. 2): Lee and
// Seung's (2001) multiplicative updates for non-negative matrix
// factorization under the (generalized) KL divergence, incremental-emsf
// eq. 8, applied to the counting estimate P̂^a (the rows of CNT with β = 0:
// C^a_ij/x^a_i, a row never seen uniform 1/n), then turned into a
// stochastic factorization as Cohen and Rothblum (1991) show one can
// (incremental-emsf §3, "one can always derive an SF from a NMF of a
// stochastic matrix"). Unlike EMSF, which weighs row i by its count x^a_i
// (eq. 11), eq. 8 weighs every row of P̂ the same.
//
// For each action independently, with V = P̂^a (n×n), W (n×m), H (m×n),
// one iteration is (Lee & Seung 2001, Theorem 2; H first, then W):
//
//	H_lj ← H_lj · Σ_i W_il V_ij/(WH)_ij / Σ_i W_il
//	W_il ← W_il · Σ_j H_lj V_ij/(WH)_ij / Σ_j H_lj
//
// It does not increase D(V ‖ WH) = Σ_ij V_ij log(V_ij/(WH)_ij) − V_ij +
// (WH)_ij. The sums run over the nonzeros of V only (a zero V_ij adds
// nothing to a numerator), so an iteration costs O(m·nnz(V)) where V's
// unseen rows count n nonzeros each.
//
// Normalisation (Cohen & Rothblum 1991): with s_l = Σ_j H_lj,
//
//	K = diag(s)⁻¹ H,   D = diag(r)⁻¹ W diag(s),   r = W diag(s) 1 = W H 1,
//
// so that D K = diag(r)⁻¹ W H with D and K row-stochastic. After a W step
// r_i = Σ_j (WH)_ij = Σ_j V_ij = 1 exactly in exact arithmetic (substitute
// the W update), so D K = W H: the division by r only removes rounding. A
// hidden state with s_l = 0 gets a uniform row of K (its column of D is 0).
//
// W and H start from NewRandom(n, m, u, TieNone, seed) (W = D^a, H = K^a),
// the same start EMSF gets from that seed. The result is a TieNone *Model
// with Iteration, Seed, LogLik and WKL (on blocks) set; it is deterministic
// given the blocks, m and seed. Data errors (a block out of shape, a bad
// count, no data) are errors, and so is an observed transition to which
// the iterate gives probability 0 (possible only by underflow).
func KLM(ctx context.Context, n, m, u int, blocks []*Block, seed uint64, opts KLMOptions) (*Model, KLMResult, error) {
	conv := opts.Converger
	res := KLMResult{Divergence: math.NaN()}
	if err := conv.Validate(); err != nil {
		return nil, res, err
	}
	if m < 1 || m > n {
		return nil, res, fmt.Errorf("factor: KLM: order m = %d must be in [1, n = %d]", m, n)
	}
	cnt, err := NewCNT(n, u, blocks, 0)
	if err != nil {
		return nil, res, fmt.Errorf("factor: KLM: %w", err)
	}
	if total := TotalCount(blocks); !(total > 0) {
		return nil, res, fmt.Errorf("factor: KLM: no data: the total count is %v", total)
	}
	md := NewRandom(n, m, u, TieNone, seed)
	vs := make([]klmMatrix, u)
	for a := range u {
		vs[a] = newKLMMatrix(cnt, a)
	}
	ws := newKLMWork(n, m)
	start := time.Now()
	for iter := 1; ; iter++ {
		if err := ctx.Err(); err != nil {
			return nil, res, fmt.Errorf("factor: KLM: %w", err)
		}
		withDiv := conv.NeedsLogLik(iter)
		div := 0.0
		for a := range u {
			d, err := ws.iterate(&vs[a], md.D[a], md.KT[a], withDiv)
			if err != nil {
				return nil, res, err
			}
			div += d
		}
		obj := math.NaN()
		if withDiv {
			res.Divergence = div
			obj = -div
		}
		res.Iterations = iter
		res.Elapsed = time.Since(start)
		if s := conv.Check(iter, obj, res.Elapsed); s != NotTerminated {
			res.Status = s
			break
		}
	}
	for a := range u {
		stochasticFromNMF(md.D[a], md.KT[a], n, m)
	}
	md.Iteration = res.Iterations
	if md.LogLik, _, err = LogLikelihood(md, blocks); err != nil {
		return nil, res, fmt.Errorf("factor: KLM: %w", err)
	}
	if md.WKL, err = WKL(md, blocks); err != nil {
		return nil, res, fmt.Errorf("factor: KLM: %w", err)
	}
	return md, res, nil
}

// klmMatrix is P̂^a in compressed sparse row form over all n rows.
type klmMatrix struct {
	action int
	ptr    []int
	cols   []int32
	vals   []float64
}

func newKLMMatrix(cnt *CNT, a int) klmMatrix {
	n := cnt.n
	v := klmMatrix{action: a, ptr: make([]int, n+1)}
	row := make([]float64, n)
	for i := range n {
		if x := cnt.RowTotal(a, i); x > 0 {
			lo, hi := cnt.ptr[a][i], cnt.ptr[a][i+1]
			for q := lo; q < hi; q++ {
				v.cols = append(v.cols, cnt.cols[a][q])
				v.vals = append(v.vals, cnt.cnt[a][q]/x)
			}
		} else {
			cnt.Row(a, i, row)
			for j, p := range row {
				v.cols = append(v.cols, int32(j))
				v.vals = append(v.vals, p)
			}
		}
		v.ptr[i+1] = len(v.cols)
	}
	return v
}

// klmWork holds the scratch space of one iteration.
type klmWork struct {
	n, m    int
	num     []float64 // n×m numerators
	den     []float64 // m column sums
	colSumW []float64 // m column sums of W, for Σ_ij (WH)_ij
}

func newKLMWork(n, m int) *klmWork {
	return &klmWork{n: n, m: m, num: make([]float64, n*m), den: make([]float64, m),
		colSumW: make([]float64, m)}
}

// iterate does one H step and one W step on W (n×m) and HT = Hᵀ (n×m) in
// place and returns D(V ‖ WH) of the iterate between the two steps when
// withDiv is set (0 otherwise).
func (ws *klmWork) iterate(v *klmMatrix, w, ht []float64, withDiv bool) (float64, error) {
	n, m := ws.n, ws.m
	// H step: numT[j,l] = Σ_i W_il V_ij/(WH)_ij, den_l = Σ_i W_il.
	clear(ws.num)
	clear(ws.den)
	for i := range n {
		wi := w[i*m : (i+1)*m]
		for l, x := range wi {
			ws.den[l] += x
		}
		for q := v.ptr[i]; q < v.ptr[i+1]; q++ {
			j := int(v.cols[q])
			hj := ht[j*m : (j+1)*m]
			g := dot(wi, hj)
			if !(g > 0) {
				return 0, fmt.Errorf("factor: KLM: (WH)_ij = %v for observed transition %d --%d--> %d (underflow)", g, i, v.action, j)
			}
			r := v.vals[q] / g
			nj := ws.num[j*m : (j+1)*m]
			for l, x := range wi {
				nj[l] += x * r
			}
		}
	}
	for j := range n {
		for l := range m {
			if ws.den[l] > 0 {
				ht[j*m+l] *= ws.num[j*m+l] / ws.den[l]
			}
		}
	}
	// W step: num[i,l] = Σ_j H_lj V_ij/(WH)_ij, den_l = Σ_j H_lj.
	clear(ws.num)
	clear(ws.den)
	for j := range n {
		for l := range m {
			ws.den[l] += ht[j*m+l]
		}
	}
	div := 0.0
	for i := range n {
		wi := w[i*m : (i+1)*m]
		ni := ws.num[i*m : (i+1)*m]
		for q := v.ptr[i]; q < v.ptr[i+1]; q++ {
			j := int(v.cols[q])
			hj := ht[j*m : (j+1)*m]
			g := dot(wi, hj)
			if !(g > 0) {
				return 0, fmt.Errorf("factor: KLM: (WH)_ij = %v for observed transition %d --%d--> %d (underflow)", g, i, v.action, j)
			}
			p := v.vals[q]
			r := p / g
			if withDiv {
				div += p*math.Log(r) - p
			}
			for l, x := range hj {
				ni[l] += x * r
			}
		}
	}
	if withDiv {
		// Σ_ij (WH)_ij = Σ_l (Σ_i W_il)(Σ_j H_lj), before the W step.
		clear(ws.colSumW)
		for i := range n {
			for l := range m {
				ws.colSumW[l] += w[i*m+l]
			}
		}
		for l := range m {
			div += ws.colSumW[l] * ws.den[l]
		}
	}
	for i := range n {
		for l := range m {
			if ws.den[l] > 0 {
				w[i*m+l] *= ws.num[i*m+l] / ws.den[l]
			}
		}
	}
	return div, nil
}

// stochasticFromNMF turns W (n×m, in d) and H (stored transposed in kt)
// into D and K of a stochastic factorization in place (see KLM).
func stochasticFromNMF(d, kt []float64, n, m int) {
	s := make([]float64, m)
	for j := range n {
		for l := range m {
			s[l] += kt[j*m+l]
		}
	}
	for j := range n {
		for l := range m {
			if s[l] > 0 {
				kt[j*m+l] /= s[l]
			} else {
				kt[j*m+l] = 1 / float64(n)
			}
		}
	}
	for i := range n {
		row := d[i*m : (i+1)*m]
		r := 0.0
		for l := range row {
			row[l] *= s[l]
			r += row[l]
		}
		if !(r > 0) {
			for l := range row {
				row[l] = 1 / float64(m)
			}
			continue
		}
		for l := range row {
			row[l] /= r
		}
	}
}
