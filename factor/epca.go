package factor

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// EPCAOptions configures FitEPCA.
type EPCAOptions struct {
	// Bases is l >= 1, the number of basis vectors including the fixed
	// all-ones one (with l = 1 every row is uniform over the states).
	Bases int
	// Epsilon is ε of the regularized Newton steps (epca_004 eqs. 26, 27;
	// the paper uses 1e-5): each half-step is a Newton step on
	// L + (ε/2)·‖·‖². Must be >= 0.
	Epsilon float64
	// Converger watches the negated regularized objective after each
	// alternating sweep (Tol: its relative change).
	Converger Converger
	// Seed draws the free basis columns from N(0, 0.01).
	Seed    uint64
	Workers int
}

// EPCAResult says how an E-PCA fit ended.
type EPCAResult struct {
	Status     Status
	Iterations int
	// Objective is the regularized objective Σ_a [L_a + (ε/2)(‖U_free‖² +
	// ‖V‖²)] after the last sweep (epca_004 eq. 8 plus the ridge).
	Objective float64
	Elapsed   time.Duration
}

// EPCA is exponential-family PCA with the exponential link (Roy, Gordon &
// Thrun 2005, "Exponential family PCA", epca_004; Collins et al. 2002) fitted
// to the count rows of each action: a log-linear low-rank model
//
//	C_i ≈ exp(U v_i),   P̃_ij = exp((U v_i)_j) / Σ_j' exp((U v_i)_j'),
//
// with U (n×l) whose last column is fixed at all ones (the constant basis
// the paper says is needed) and one coordinate vector v_i (l) per row i
// with data. By the Poisson trick the gradient along the ones column makes
// Σ_j exp((U v_i)_j) = x_i at a V-step optimum (ε → 0), so the Poisson
// loss of eq. 8 equals −Σ C_ij log P̃_ij + const: E-PCA scores transitions
// by the same likelihood as EMSF (related-methods spec §3.4). It is a
// baseline, not a stochastic factorization: no D, K. A row never seen is
// uniform (as in CNT). EPCA implements Estimate.
type EPCA struct {
	n, u, l int
	// Per action: basis U (n×l row-major, last column 1), the rows with
	// data and their coordinates V (one l-vector per row, row-major).
	basis [][]float64
	rows  [][]int32
	coord [][]float64
	// index[a][i] is the position of row i in rows[a], or -1.
	index [][]int32
}

var _ Estimate = (*EPCA)(nil)

// States returns n.
func (e *EPCA) States() int { return e.n }

// Actions returns u.
func (e *EPCA) Actions() int { return e.u }

// Bases returns l.
func (e *EPCA) Bases() int { return e.l }

// Params returns the number of free parameters: n(l−1) + r·l per action
// (r its rows with data).
func (e *EPCA) Params() int {
	p := 0
	for a := range e.u {
		p += e.n*(e.l-1) + len(e.rows[a])*e.l
	}
	return p
}

// Row sets dst to the softmax of U v_i (uniform for a row never seen).
func (e *EPCA) Row(a, i int, dst []float64) {
	n, l := e.n, e.l
	r := e.index[a][i]
	if r < 0 {
		for j := range dst[:n] {
			dst[j] = 1 / float64(n)
		}
		return
	}
	v := e.coord[a][int(r)*l : int(r+1)*l]
	u := e.basis[a]
	top := math.Inf(-1)
	for j := range n {
		dst[j] = dot(u[j*l:(j+1)*l], v)
		top = max(top, dst[j])
	}
	s := 0.0
	for j := range n {
		dst[j] = math.Exp(dst[j] - top)
		s += dst[j]
	}
	for j := range n {
		dst[j] /= s
	}
}

// Prob returns P̃^a_ij.
func (e *EPCA) Prob(a, i, j int) float64 {
	row := make([]float64, e.n)
	e.Row(a, i, row)
	return row[j]
}

// FitEPCA fits E-PCA with opts.Bases bases to each action's count rows by
// the alternating Newton/IRLS half-steps of epca_004 (Table 1): every
// coordinate vector v_i with U fixed (eq. 26), then every free part of a
// basis row U_j· with V fixed (eq. 27), each a Newton step on the
// ε-regularized objective, v ← v + s·(H + εI)⁻¹(Uᵀ(y − e) − εv) with
// H = Uᵀ diag(e) U, e = exp(U v) (never W⁻¹: e may underflow). The step s
// starts at 1 and is halved until the half-problem's objective does not
// increase (backtracking, not in the paper: pure Newton on exp can
// diverge), so the regularized objective never increases. Each half-step
// is strictly convex; the joint problem is not. Init (spec §3.7): free
// columns of U ~ N(0, 0.01), v_i = 0 except the intercept log(x_i/n).
// Work per sweep O(n·r·l² + (n + r)·l³) per action (exp(UV) is dense); rows
// and basis rows are solved in parallel, each in a fixed order, so the
// result does not depend on Workers.
func FitEPCA(ctx context.Context, n, u int, blocks []*Block, opts EPCAOptions) (*EPCA, EPCAResult, error) {
	res := EPCAResult{Objective: math.NaN()}
	conv := opts.Converger
	if err := conv.Validate(); err != nil {
		return nil, res, err
	}
	l := opts.Bases
	if l < 1 || l > n {
		return nil, res, fmt.Errorf("factor: E-PCA: %d bases: must be in [1, n = %d]", l, n)
	}
	if !(opts.Epsilon >= 0) || math.IsInf(opts.Epsilon, 0) {
		return nil, res, fmt.Errorf("factor: E-PCA: ε = %v must be finite and >= 0", opts.Epsilon)
	}
	cnt, err := NewCNT(n, u, blocks, 0)
	if err != nil {
		return nil, res, fmt.Errorf("factor: E-PCA: %w", err)
	}
	if total := TotalCount(blocks); !(total > 0) {
		return nil, res, fmt.Errorf("factor: E-PCA: no data: the total count is %v", total)
	}
	rng := rand.New(rand.NewPCG(opts.Seed, 0x65706361)) // "epca"
	e := &EPCA{n: n, u: u, l: l}
	probs := make([]*epcaProblem, u)
	for a := range u {
		p := newEPCAProblem(cnt, a, l, opts.Epsilon, rng)
		probs[a] = p
		e.basis = append(e.basis, p.u)
		e.rows = append(e.rows, p.rows)
		e.coord = append(e.coord, p.v)
		idx := make([]int32, n)
		for i := range idx {
			idx[i] = -1
		}
		for r, i := range p.rows {
			idx[i] = int32(r)
		}
		e.index = append(e.index, idx)
	}
	workers := max(1, opts.Workers)
	start := time.Now()
	for iter := 1; ; iter++ {
		if err := ctx.Err(); err != nil {
			return nil, res, fmt.Errorf("factor: E-PCA: %w", err)
		}
		obj := 0.0
		for _, p := range probs {
			p.stepV(workers)
			p.stepU(workers)
			obj += p.objective()
		}
		res.Iterations, res.Objective, res.Elapsed = iter, obj, time.Since(start)
		if s := conv.Check(iter, -obj, res.Elapsed); s != NotTerminated {
			res.Status = s
			break
		}
	}
	return e, res, nil
}

// epcaProblem is one action's E-PCA: data rows y_i (sparse counts), U
// (n×l, last column 1) and V (r×l: row r is v_i).
type epcaProblem struct {
	n, l int
	eps  float64
	rows []int32
	ptr  []int64
	cols []int32
	vals []float64
	// colPtr/colRows/colVals: the same counts by column j (for U-steps).
	colPtr  []int64
	colRows []int32
	colVals []float64
	u, v    []float64
}

func newEPCAProblem(cnt *CNT, a, l int, eps float64, rng *rand.Rand) *epcaProblem {
	n := cnt.n
	p := &epcaProblem{n: n, l: l, eps: eps, ptr: []int64{0}, u: make([]float64, n*l)}
	for i := range n {
		x := cnt.RowTotal(a, i)
		if x == 0 {
			continue
		}
		p.rows = append(p.rows, int32(i))
		for q := cnt.ptr[a][i]; q < cnt.ptr[a][i+1]; q++ {
			p.cols = append(p.cols, cnt.cols[a][q])
			p.vals = append(p.vals, cnt.cnt[a][q])
		}
		p.ptr = append(p.ptr, int64(len(p.cols)))
		v := make([]float64, l)
		v[l-1] = math.Log(x / float64(n))
		p.v = append(p.v, v...)
	}
	for j := range n {
		for k := range l - 1 {
			p.u[j*l+k] = 0.1 * rng.NormFloat64()
		}
		p.u[j*l+l-1] = 1
	}
	p.colPtr = make([]int64, n+1)
	for _, j := range p.cols {
		p.colPtr[j+1]++
	}
	for j := range n {
		p.colPtr[j+1] += p.colPtr[j]
	}
	p.colRows, p.colVals = make([]int32, len(p.cols)), make([]float64, len(p.cols))
	next := append([]int64(nil), p.colPtr[:n]...)
	for r := range p.rows {
		for q := p.ptr[r]; q < p.ptr[r+1]; q++ {
			j := p.cols[q]
			p.colRows[next[j]], p.colVals[next[j]] = int32(r), p.vals[q]
			next[j]++
		}
	}
	return p
}

// objective returns L + (ε/2)(‖U_free‖² + ‖V‖²).
func (p *epcaProblem) objective() float64 {
	n, l := p.n, p.l
	obj := 0.0
	for r := range p.rows {
		v := p.v[r*l : (r+1)*l]
		for j := range n {
			obj += math.Exp(dot(p.u[j*l:(j+1)*l], v))
		}
		for q := p.ptr[r]; q < p.ptr[r+1]; q++ {
			obj -= p.vals[q] * dot(p.u[int(p.cols[q])*l:int(p.cols[q]+1)*l], v)
		}
		obj += p.eps / 2 * dot(v, v)
	}
	for j := range n {
		uj := p.u[j*l : j*l+l-1]
		obj += p.eps / 2 * dot(uj, uj)
	}
	return obj
}

// stepV does the V half-step: one backtracked Newton step per row.
func (p *epcaProblem) stepV(workers int) {
	n, l := p.n, p.l
	parallelRanges(len(p.rows), workers, func(lo, hi int) {
		w := newNewtonWork(l)
		y := make([]float64, n)
		for r := lo; r < hi; r++ {
			clear(y)
			for q := p.ptr[r]; q < p.ptr[r+1]; q++ {
				y[p.cols[q]] = p.vals[q]
			}
			w.step(p.v[r*l:(r+1)*l], p.u, y, n, l, p.eps)
		}
	})
}

// stepU does the U half-step: one backtracked Newton step per basis row,
// on its l−1 free coordinates (the ones column is fixed).
func (p *epcaProblem) stepU(workers int) {
	n, l, r := p.n, p.l, len(p.rows)
	if l == 1 || r == 0 {
		return
	}
	parallelRanges(n, workers, func(lo, hi int) {
		w := newNewtonWork(l - 1)
		y := make([]float64, r)
		// Design: row i of X is v_i's free part; offset o_i = v_i's intercept.
		x := make([]float64, r*(l-1))
		off := make([]float64, r)
		for i := range r {
			copy(x[i*(l-1):(i+1)*(l-1)], p.v[i*l:i*l+l-1])
			off[i] = p.v[i*l+l-1]
		}
		for j := lo; j < hi; j++ {
			clear(y)
			for q := p.colPtr[j]; q < p.colPtr[j+1]; q++ {
				y[p.colRows[q]] = p.colVals[q]
			}
			w.stepOffset(p.u[j*l:j*l+l-1], x, off, y, r, l-1, p.eps)
		}
	})
}

// newtonWork is the scratch space of one Newton step in k unknowns.
type newtonWork struct {
	k          int
	h, g, d, z []float64
	eta, trial []float64
}

func newNewtonWork(k int) *newtonWork {
	return &newtonWork{k: k, h: make([]float64, k*k), g: make([]float64, k), d: make([]float64, k), z: make([]float64, k)}
}

// step is one backtracked Newton step on f(v) = Σ_j exp((Xv)_j) − y·Xv +
// (ε/2)‖v‖², X the rows×k row-major design (X = U for a V-step).
func (w *newtonWork) step(v, x, y []float64, rows, k int, eps float64) {
	w.stepOffset(v, x, nil, y, rows, k, eps)
}

// stepOffset is step with η = Xv + off (off nil: 0).
func (w *newtonWork) stepOffset(v, x, off, y []float64, rows, k int, eps float64) {
	if cap(w.eta) < rows {
		w.eta, w.trial = make([]float64, rows), make([]float64, rows)
	}
	eta := w.eta[:rows]
	f0 := epcaHalfObjective(v, x, off, y, rows, k, eps, eta)
	clear(w.h)
	for q := range k {
		w.g[q] = -eps * v[q]
	}
	for j := range rows {
		e := math.Exp(eta[j])
		xj := x[j*k : (j+1)*k]
		rj := y[j] - e
		for q, a := range xj {
			w.g[q] += a * rj
			ea := e * a
			hq := w.h[q*k : (q+1)*k]
			for s, b := range xj {
				hq[s] += ea * b
			}
		}
	}
	for q := range k {
		w.h[q*k+q] += eps
	}
	if !cholSolve(w.h, w.g, w.d, k) {
		return // singular (ε = 0 and a rank-deficient design): no step
	}
	trial := w.trial[:rows]
	// gᵀd is twice the decrease Newton predicts; below the rounding of f
	// a comparison of objectives cannot judge the step: take it whole.
	if dot(w.g, w.d) < 1e-14*(math.Abs(f0)+1) {
		for q := range k {
			v[q] += w.d[q]
		}
		return
	}
	for s := 1.0; s > 1e-10; s /= 2 {
		for q := range k {
			w.z[q] = v[q] + s*w.d[q]
		}
		if f := epcaHalfObjective(w.z, x, off, y, rows, k, eps, trial); f <= f0 {
			copy(v, w.z)
			return
		}
	}
}

// epcaHalfObjective returns Σ_j exp(η_j) − y_j η_j + (ε/2)‖v‖² with η =
// Xv + off, writing η into eta.
func epcaHalfObjective(v, x, off, y []float64, rows, k int, eps float64, eta []float64) float64 {
	f := eps / 2 * dot(v, v)
	for j := range rows {
		t := dot(x[j*k:(j+1)*k], v)
		if off != nil {
			t += off[j]
		}
		eta[j] = t
		f += math.Exp(t) - y[j]*t
	}
	if math.IsNaN(f) {
		return math.Inf(1)
	}
	return f
}

// cholSolve solves H d = g for the k×k symmetric matrix h (overwritten by
// its Cholesky factor) and reports whether h was positive definite.
func cholSolve(h, g, d []float64, k int) bool {
	for j := range k {
		s := h[j*k+j]
		for q := range j {
			s -= h[j*k+q] * h[j*k+q]
		}
		if !(s > 0) {
			return false
		}
		h[j*k+j] = math.Sqrt(s)
		for i := j + 1; i < k; i++ {
			t := h[i*k+j]
			for q := range j {
				t -= h[i*k+q] * h[j*k+q]
			}
			h[i*k+j] = t / h[j*k+j]
		}
	}
	for i := range k {
		t := g[i]
		for q := range i {
			t -= h[i*k+q] * d[q]
		}
		d[i] = t / h[i*k+i]
	}
	for i := k - 1; i >= 0; i-- {
		t := d[i]
		for q := i + 1; q < k; q++ {
			t -= h[q*k+i] * d[q]
		}
		d[i] = t / h[i*k+i]
	}
	return true
}
