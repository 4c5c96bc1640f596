package factor

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// MURule is how a multiplicative update keeps the rows of D and K
// stochastic (multiplicative-stochastic_002 §2; see MU).
type MURule int

// The rules of MU.
const (
	// MUNorm is the plain multiplicative step W ← W∘∇⁻/∇⁺ followed by a row
	// normalization (002 §2.1).
	MUNorm MURule = iota
	// MURepa reparametrizes W = U/rowsum(U) and steps on U (002 eq. 3).
	MURepa
	// MURela solves the Lagrange multipliers in closed form with the
	// "moving term" trick (002 eq. 4); rows stay only approximately
	// stochastic under the Frobenius losses.
	MURela
)

var muRuleNames = []string{"norm", "repa", "rela"}

func (r MURule) String() string {
	if r >= 0 && int(r) < len(muRuleNames) {
		return muRuleNames[r]
	}
	return fmt.Sprintf("MURule(%d)", int(r))
}

// ParseMURule parses norm, repa or rela.
func ParseMURule(s string) (MURule, error) {
	for k, name := range muRuleNames {
		if s == name {
			return MURule(k), nil
		}
	}
	return 0, fmt.Errorf("factor: unknown multiplicative rule %q (want norm, repa or rela)", s)
}

// MULoss is the objective of MU.
type MULoss int

// The losses of MU (related-methods spec §1.3.3).
const (
	// LossWKL is EMSF's objective: the count-weighted KL divergence
	// (incremental-emsf eq. 11), in its generalized (I-divergence) form
	// Σ C log(C/DK) − C + x_i·(DK)_ij; on stochastic factors it is the
	// negated log-likelihood plus a constant.
	LossWKL MULoss = iota
	// LossKL is the same on the counting estimate P̂ (CNT with β = 0, an
	// unseen row uniform), every row weighted 1: KLM's objective.
	LossKL
	// LossFrob is ½ Σ_i ‖P̂_i − (DK)_i‖², the loss of paper 002.
	LossFrob
	// LossWFrob is ½ Σ_i x_i ‖P̂_i − (DK)_i‖²: rows weighted by their
	// counts, unseen rows drop out.
	LossWFrob
)

var muLossNames = []string{"wkl", "kl", "frob", "wfrob"}

func (l MULoss) String() string {
	if l >= 0 && int(l) < len(muLossNames) {
		return muLossNames[l]
	}
	return fmt.Sprintf("MULoss(%d)", int(l))
}

// ParseMULoss parses wkl, kl, frob or wfrob.
func ParseMULoss(s string) (MULoss, error) {
	for k, name := range muLossNames {
		if s == name {
			return MULoss(k), nil
		}
	}
	return 0, fmt.Errorf("factor: unknown loss %q (want wkl, kl, frob or wfrob)", s)
}

// MUOptions configures MU.
type MUOptions struct {
	Rule MURule
	Loss MULoss
	// Tie is the tie mode of the model MU starts (LossWKL and LossKL
	// only; the Frobenius losses need TieNone).
	Tie Tie
	// Workers is the number of goroutines; 0 means 1. The result does not
	// depend on it.
	Workers int
	// GroupNNZ is the target nonzeros per reduction group of the passes
	// under LossWKL and LossKL (FitOptions.GroupNNZ); 0 means
	// DefaultGroupNNZ. A cluster fit equals a local one bitwise only with
	// the same GroupNNZ.
	GroupNNZ int
	// Converger stops the iteration. It watches the objective of the
	// iterate before each step: the log-likelihood Σ C log(DK) for
	// LossWKL, Σ P̂ log(DK) for LossKL and −J for the Frobenius losses.
	Converger Converger
	// Progress, if set, is called after every step.
	Progress func(IterStats)
}

// MUResult says how an MU fit ended.
type MUResult struct {
	Status     Status
	Iterations int
	// Objective is the converger's value (see MUOptions.Converger) of the
	// last evaluated iterate; NaN when never evaluated.
	Objective float64
	// MaxRowDeviation is max |Σ_k W_ik − 1| over the rows of D and K of
	// the last iterate, before the model is normalized for output: 0 up
	// to rounding for norm and repa, and for rela under wkl and kl; the
	// diagnostic of 002 §2.3 for rela under frob and wfrob.
	MaxRowDeviation float64
	Elapsed         time.Duration
}

// MU fits a stochastic factorization of order m from the random start
// NewRandom(n, m, u, opts.Tie, seed) by the multiplicative updates of
// Zhu, Yang and Oja, "Multiplicative updates for learning with stochastic
// matrices" (multiplicative-stochastic_002), as MUFrom does.
func MU(ctx context.Context, n, m, u int, blocks []*Block, seed uint64, opts MUOptions) (*Model, MUResult, error) {
	if m < 1 || m > n {
		return nil, MUResult{Objective: math.NaN()}, fmt.Errorf("factor: MU: order m = %d must be in [1, n = %d]", m, n)
	}
	md := NewRandom(n, m, u, opts.Tie, seed)
	res, err := MUFrom(ctx, md, blocks, opts)
	if err != nil {
		return nil, res, err
	}
	return md, res, nil
}

// MUFrom runs the multiplicative updates of multiplicative-stochastic_002
// on md in place until opts.Converger stops them. Each step updates D and
// K simultaneously (both from the same old model, as an EMSF iteration
// does) by the rule opts.Rule on the gradient split of opts.Loss
// (related-methods spec §1.3.3), row by row with W a row of D or of K:
//
//	norm:  W_k ← W_k ∇⁻_k/∇⁺_k, then W ← W/Σ W
//	repa:  W_k ← W_k (∇⁻_k + Σ_b ∇⁺_b W_b)/(∇⁺_k + Σ_b ∇⁻_b W_b), then W ← W/Σ W
//	rela:  W_k ← W_k (∇⁻_k A + 1)/(∇⁺_k A + B),  A = Σ_b W_b/∇⁺_b, B = Σ_b W_b ∇⁻_b/∇⁺_b
//
// An entry at 0 stays 0 (sparsity masks persist), and a row with ∇⁺ = 0
// at a positive entry (a row of D without data, a hidden state no data
// reaches) keeps its values.
//
// Under LossWKL, with e_il = Σ_j C_ij K_lj/(DK)_ij, gK_lj = Σ_i D_il
// C_ij/(DK)_ij and q_l = Σ_i x_i D_il, ∇⁺_D = x_i, ∇⁻_D = e, ∇⁺_K = q_l,
// ∇⁻_K = gK: the statistics of an EMSF pass (Pass, Accumulator), so a step
// costs what an EMSF iteration costs, O(m·nnz + n·m), runs on the same
// blocks with the same parallel, deterministic reduction, and
//   - norm is exactly one EMSF iteration;
//   - repa and rela are both the damped iteration D ← ½(D + D^EM),
//     K_l ← (q_l K_l + y_l K^EM_l)/(q_l + y_l);
//   - none of them decreases the log-likelihood.
//
// LossKL is the same on the counting estimate P̂ (every row weighted 1,
// an unseen row uniform: it costs n entries, as in KLM). The Frobenius
// losses use ∇⁺_D = diag(ω) D KKᵀ, ∇⁻_D = R Kᵀ, ∇⁺_K = Dᵀdiag(ω)D K,
// ∇⁻_K = DᵀR with R = diag(ω)P̂ (ω = 1 for LossFrob, x for LossWFrob),
// computed per nonzero, never as an n×n product: O(m·nnz + n·m²) per step;
// they need TieNone and guarantee no monotonicity.
//
// Under rela with a Frobenius loss the rows drift from 1 (the paper's
// "approximately"); the result reports the largest deviation and the
// model is normalized at the end. md.LogLik and md.WKL are set on blocks
// at the end (as KLM does), md.Iteration counts the steps.
func MUFrom(ctx context.Context, md *Model, blocks []*Block, opts MUOptions) (MUResult, error) {
	res := MUResult{Objective: math.NaN()}
	conv := opts.Converger
	if err := conv.Validate(); err != nil {
		return res, err
	}
	st, err := newMUState(md, blocks, opts)
	if err != nil {
		return res, err
	}
	start := time.Now()
	prev := math.NaN()
	for iter := 1; ; iter++ {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("factor: MU: %w", err)
		}
		t0 := time.Now()
		withObj := conv.NeedsLogLik(iter)
		obj, err := st.step(ctx, md, withObj)
		if err != nil {
			return res, err
		}
		res.Iterations = iter
		now := time.Now()
		res.Elapsed = now.Sub(start)
		if !withObj {
			obj = math.NaN()
		}
		if opts.Progress != nil {
			s := IterStats{Iteration: iter, LogLik: obj, RelChange: math.NaN(), IterTime: now.Sub(t0), Elapsed: res.Elapsed, NNZ: st.nnz}
			if withObj && !math.IsNaN(prev) {
				s.RelChange = (obj - prev) / math.Abs(obj)
			}
			opts.Progress(s)
		}
		if withObj {
			res.Objective, prev = obj, obj
		}
		if s := conv.Check(iter, obj, res.Elapsed); s != NotTerminated {
			res.Status = s
			break
		}
	}
	res.MaxRowDeviation, err = MUFinish(md, blocks)
	return res, err
}

// MUFinish ends an MU fit of md on blocks (the counts, whatever the
// loss): it returns the largest deviation of a row of D or K from 1
// (MUResult.MaxRowDeviation), normalizes every row and sets md.LogLik and
// md.WKL on blocks. MUFrom ends with it; so must a fit that runs MU by
// Loop with MUCommit.
func MUFinish(md *Model, blocks []*Block) (float64, error) {
	dev := maxRowDeviation(md)
	normalizeModel(md)
	var err error
	if md.LogLik, _, err = LogLikelihood(md, blocks); err != nil {
		return dev, fmt.Errorf("factor: MU: %w", err)
	}
	if md.WKL, err = WKL(md, blocks); err != nil {
		return dev, fmt.Errorf("factor: MU: %w", err)
	}
	return dev, nil
}

// muState is the data and working memory of MU's steps.
type muState struct {
	opts    MUOptions
	workers int
	nnz     int

	// LossWKL and LossKL: the blocks EMSF's pass runs on (the counts, or
	// P̂ as pseudo-counts), their total, and the commit rule.
	blocks []*Block
	total  float64
	ps     Passer
	acc    *Accumulator
	commit *MUCommit

	// Frobenius losses, per action.
	frob []muFrobData

	// Row buffers.
	w, gp, gm []float64
}

func newMUState(md *Model, blocks []*Block, opts MUOptions) (*muState, error) {
	if err := md.Validate(); err != nil {
		return nil, fmt.Errorf("factor: MU: %w", err)
	}
	if md.Precision != Float64 {
		return nil, fmt.Errorf("factor: MU: precision %s: MU runs float64 models only", md.Precision)
	}
	if opts.Rule < MUNorm || opts.Rule > MURela {
		return nil, fmt.Errorf("factor: MU: unknown rule %v", opts.Rule)
	}
	if opts.Loss < LossWKL || opts.Loss > LossWFrob {
		return nil, fmt.Errorf("factor: MU: unknown loss %v", opts.Loss)
	}
	n, u := md.N, md.U
	for k, b := range blocks {
		if err := b.CheckShape(n, u); err != nil {
			return nil, fmt.Errorf("factor: MU: block %d: %w", k, err)
		}
	}
	if total := TotalCount(blocks); !(total > 0) {
		return nil, fmt.Errorf("factor: MU: no data: the total count is %v", total)
	}
	st := &muState{opts: opts, workers: max(1, opts.Workers), ps: Passer{GroupNNZ: opts.GroupNNZ}}
	st.w, st.gp, st.gm = make([]float64, n), make([]float64, n), make([]float64, n)
	switch opts.Loss {
	case LossWKL:
		st.blocks = blocks
	case LossKL:
		cnt, err := NewCNT(n, u, blocks, 0)
		if err != nil {
			return nil, fmt.Errorf("factor: MU: %w", err)
		}
		st.blocks = pseudoCountBlocks(cnt, muPseudoRows)
	default:
		if md.Tie != TieNone {
			return nil, fmt.Errorf("factor: MU: loss %v needs tie mode none, not %v", opts.Loss, md.Tie)
		}
		cnt, err := NewCNT(n, u, blocks, 0)
		if err != nil {
			return nil, fmt.Errorf("factor: MU: %w", err)
		}
		st.frob = make([]muFrobData, u)
		for a := range u {
			st.frob[a] = newMUFrobData(cnt, a, opts.Loss == LossWFrob)
			st.nnz += len(st.frob[a].vals)
		}
		return st, nil
	}
	st.total = TotalCount(st.blocks)
	for _, b := range st.blocks {
		st.nnz += b.NNZ()
	}
	st.acc = NewAccumulator(md)
	commit, err := NewMUCommit(md, st.blocks, opts.Rule)
	st.commit = commit
	return st, err
}

// muPseudoRows is the number of rows of P̂ per block under LossKL: a
// constant, so that the blocks (hence the reduce order and the result)
// do not depend on the number of workers.
const muPseudoRows = 256

// pseudoCountBlocks returns P̂ of cnt (β = 0, unseen rows uniform) as
// blocks of per rows of one action: pseudo-counts whose rows all sum
// to 1.
func pseudoCountBlocks(cnt *CNT, per int) []*Block {
	n := cnt.n
	var out []*Block
	row := make([]float64, n)
	for a := range cnt.u {
		for lo := 0; lo < n; lo += per {
			b := &Block{Action: a}
			for i := lo; i < min(n, lo+per); i++ {
				b.Rows = append(b.Rows, int32(i))
				b.Ptr = append(b.Ptr, int64(len(b.Cols)))
				if x := cnt.RowTotal(a, i); x > 0 {
					for q := cnt.ptr[a][i]; q < cnt.ptr[a][i+1]; q++ {
						b.Cols = append(b.Cols, cnt.cols[a][q])
						b.Vals = append(b.Vals, cnt.cnt[a][q]/x)
					}
					continue
				}
				cnt.Row(a, i, row)
				for j, p := range row {
					b.Cols = append(b.Cols, int32(j))
					b.Vals = append(b.Vals, p)
				}
			}
			b.Ptr = append(b.Ptr, int64(len(b.Cols)))
			out = append(out, b)
		}
	}
	return out
}

// step does one simultaneous update of md and returns the objective of
// the model before it (when withObj).
func (st *muState) step(ctx context.Context, md *Model, withObj bool) (float64, error) {
	if st.frob != nil {
		return st.stepFrob(md, withObj)
	}
	return st.stepKL(ctx, md, withObj)
}

// stepKL is a step under LossWKL or LossKL (on st.blocks): an EMSF pass
// and MU's commit.
func (st *muState) stepKL(ctx context.Context, md *Model, withObj bool) (float64, error) {
	acc := st.acc
	if err := st.ps.Pass(ctx, md, st.blocks, acc, st.workers, withObj); err != nil {
		return 0, fmt.Errorf("factor: MU: %w", err)
	}
	if err := CheckSumX(acc.SumX, st.total); err != nil {
		return 0, fmt.Errorf("factor: MU: %w", err)
	}
	st.commit.Commit(md, acc)
	return acc.LogLik, nil
}

// MUCommit is MU's step under LossWKL as a commit rule of Loop
// (FitOptions.Commit; coordinator.Options.Commit on a cluster): under
// that loss ∇⁺ and ∇⁻ are the statistics of an EMSF pass (D̂, K̂, x; see
// MUFrom) plus q_l = Σ_i x_i D_il, which MUCommit sums from the old D and
// the data's row totals. So MU runs wherever EMSF's passes run, on the
// same blocks or shards and partials, and the result depends only on the
// pass's statistics: a cluster fit equals MUFrom bitwise (with the same
// GroupNNZ). End such a fit with MUFinish. MUFrom commits with it too
// (on P̂ under LossKL); the Frobenius losses need other statistics.
type MUCommit struct {
	rule      MURule
	xa        [][]float64 // x^a_i per action
	q         [][]float64 // q per K block
	w, gp, gm []float64   // row buffers
}

// NewMUCommit returns MU's commit rule by rule for models of md's shape
// fitted on blocks (their row totals per action are summed once here).
func NewMUCommit(md *Model, blocks []*Block, rule MURule) (*MUCommit, error) {
	if rule < MUNorm || rule > MURela {
		return nil, fmt.Errorf("factor: MU: unknown rule %v", rule)
	}
	n, u := md.N, md.U
	c := &MUCommit{rule: rule, xa: make([][]float64, u), q: make([][]float64, NumK(u, md.Tie)),
		w: make([]float64, n), gp: make([]float64, n), gm: make([]float64, n)}
	for a := range c.xa {
		c.xa[a] = make([]float64, n)
	}
	for k, b := range blocks {
		if err := b.CheckShape(n, u); err != nil {
			return nil, fmt.Errorf("factor: MU: block %d: %w", k, err)
		}
		x := c.xa[b.Action]
		for r, i := range b.Rows {
			for _, v := range b.Vals[b.Ptr[r]:b.Ptr[r+1]] {
				x[i] += v
			}
		}
	}
	for b := range c.q {
		c.q[b] = make([]float64, md.M)
	}
	return c, nil
}

// Commit updates D and K of md simultaneously by c's rule from acc, the
// statistics of a pass under md, and counts the iteration; md.LogLik
// becomes the pass's (the model's before the commit, as after
// Accumulator.Commit), md.WKL NaN until MUFinish sets it.
func (c *MUCommit) Commit(md *Model, acc *Accumulator) {
	n, m := md.N, md.M
	// q from the old D, before D changes.
	for _, q := range c.q {
		clear(q)
	}
	for a := range md.U {
		q, d, x := c.q[md.KBlock(a)], md.D[md.DBlock(a)], c.xa[a]
		for i := range n {
			if x[i] == 0 {
				continue
			}
			for l, v := range d[i*m : (i+1)*m] {
				q[l] += x[i] * v
			}
		}
	}
	w, gp, gm := c.w[:m], c.gp[:m], c.gm[:m]
	for b, d := range md.D {
		dh, x := acc.Dh[b], acc.X[b]
		for i := range n {
			row := d[i*m : (i+1)*m]
			for l := range row {
				gp[l] = x[i]
				gm[l] = ratio(dh[i*m+l], row[l])
			}
			muRow(c.rule, row, gp, gm)
		}
	}
	w, gp, gm = c.w[:n], c.gp[:n], c.gm[:n]
	for b, kt := range md.KT {
		kh, q := acc.KhT[b], c.q[b]
		for l := range m {
			for j := range n {
				w[j] = kt[j*m+l]
				gp[j] = q[l]
				gm[j] = ratio(kh[j*m+l], w[j])
			}
			if muRow(c.rule, w, gp, gm) {
				for j := range n {
					kt[j*m+l] = w[j]
				}
			}
		}
	}
	md.Iteration++
	md.LogLik, md.WKL = acc.LogLik, math.NaN()
}

// ratio returns num/w, the ∇⁻ of an entry whose W·∇⁻ is num, or 0 at
// w = 0 (an entry at 0 stays 0 whatever its gradient).
func ratio(num, w float64) float64 {
	if w == 0 {
		return 0
	}
	return num / w
}

// MUVector applies rule to one stochastic vector w (a row of a
// right-stochastic matrix, a column of a left-stochastic one, or all
// entries of a vectorized-stochastic one: 002 §2 and its appendix) with
// the gradient parts gp = ∇⁺ and gm = ∇⁻ at w, in place, and reports
// whether it changed w. A vector with ∇⁺ = 0 at a positive entry, or
// whose update does not sum to a finite positive value, is kept.
func MUVector(rule MURule, w, gp, gm []float64) bool { return muRow(rule, w, gp, gm) }

// muRow is MUVector.
func muRow(rule MURule, w, gp, gm []float64) bool {
	for k, v := range w {
		if v > 0 && !(gp[k] > 0) {
			return false
		}
	}
	var a, b float64
	switch rule {
	case MURepa:
		for k, v := range w {
			a += gp[k] * v
			b += gm[k] * v
		}
	case MURela:
		for k, v := range w {
			if v > 0 {
				a += v / gp[k]
				b += v * gm[k] / gp[k]
			}
		}
	}
	factor := func(k int) float64 {
		switch rule {
		case MUNorm:
			return gm[k] / gp[k]
		case MURepa:
			return (gm[k] + a) / (gp[k] + b)
		default:
			return (gm[k]*a + 1) / (gp[k]*a + b)
		}
	}
	sum := 0.0
	for k, v := range w {
		if v > 0 {
			sum += v * factor(k)
		}
	}
	if !(sum > 0) || math.IsInf(sum, 0) {
		// Every numerator vanished (no data reaches the row's support):
		// keep the row rather than divide by 0.
		return false
	}
	scale := 1 / sum
	if rule == MURela {
		scale = 1 // no normalization: the rule itself keeps Σ ≈ 1
	}
	for k, v := range w {
		if v > 0 {
			w[k] = v * factor(k) * scale
		}
	}
	return true
}

// muFrobData is one action's data for the Frobenius losses: R =
// diag(ω)P̂ in CSR (rows) and CSC (columns), plus the uniform part uvec
// of P̂'s unseen rows (R = S + uvec·1ᵀ), the weights ω and the constant
// ½ Σ_i ω_i ‖P̂_i‖².
type muFrobData struct {
	n        int
	rowPtr   []int64
	cols     []int32
	vals     []float64
	colPtr   []int64
	rows     []int32
	colVals  []float64
	uvec     []float64
	omega    []float64
	constant float64
}

func newMUFrobData(cnt *CNT, a int, weighted bool) muFrobData {
	n := cnt.n
	f := muFrobData{n: n, rowPtr: make([]int64, n+1), uvec: make([]float64, n), omega: make([]float64, n)}
	colCount := make([]int64, n+1)
	for i := range n {
		x := cnt.RowTotal(a, i)
		switch {
		case x > 0:
			f.omega[i] = 1
			if weighted {
				f.omega[i] = x
			}
			ss := 0.0
			for q := cnt.ptr[a][i]; q < cnt.ptr[a][i+1]; q++ {
				p := cnt.cnt[a][q] / x
				ss += p * p
				f.cols = append(f.cols, cnt.cols[a][q])
				f.vals = append(f.vals, f.omega[i]*p)
				colCount[cnt.cols[a][q]+1]++
			}
			f.constant += f.omega[i] * ss / 2
		case !weighted:
			f.omega[i] = 1
			f.uvec[i] = 1 / float64(n)
			f.constant += 1 / (2 * float64(n))
		}
		f.rowPtr[i+1] = int64(len(f.cols))
	}
	for j := range n {
		colCount[j+1] += colCount[j]
	}
	f.colPtr = colCount
	f.rows = make([]int32, len(f.cols))
	f.colVals = make([]float64, len(f.cols))
	next := append([]int64(nil), colCount[:n]...)
	for i := range n {
		for q := f.rowPtr[i]; q < f.rowPtr[i+1]; q++ {
			j := f.cols[q]
			f.rows[next[j]] = int32(i)
			f.colVals[next[j]] = f.vals[q]
			next[j]++
		}
	}
	return f
}

// parallelRanges calls fn on [lo, hi) ranges covering [0, n) on up to
// workers goroutines and waits for them.
func parallelRanges(n, workers int, fn func(lo, hi int)) {
	workers = max(1, min(workers, n))
	if workers == 1 {
		fn(0, n)
		return
	}
	per := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += per {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			fn(lo, hi)
		}(lo, min(n, lo+per))
	}
	wg.Wait()
}

// stepFrob is a step under LossFrob or LossWFrob (TieNone: D and K of
// action a are md.D[a] and md.KT[a]). Every sum runs in a fixed order
// (per row or per column), so the result does not depend on the workers.
func (st *muState) stepFrob(md *Model, withObj bool) (float64, error) {
	n, m := md.N, md.M
	obj := 0.0
	newD := make([]float64, n*m)
	newKT := make([]float64, n*m)
	rowDot := make([]float64, n) // ⟨R_i, (DK)_i⟩ per row
	for a := range md.U {
		f := &st.frob[a]
		d, kt := md.D[a], md.KT[a]
		gk := gram(kt, n, m, nil)   // K Kᵀ
		h := gram(d, n, m, f.omega) // Dᵀ diag(ω) D
		ksum := make([]float64, m)  // K 1
		dtu := make([]float64, m)   // Dᵀ uvec
		for j := range n {
			for l := range m {
				ksum[l] += kt[j*m+l]
			}
		}
		for i := range n {
			if f.uvec[i] != 0 {
				for l := range m {
					dtu[l] += d[i*m+l] * f.uvec[i]
				}
			}
		}
		parallelRanges(n, st.workers, func(lo, hi int) {
			gp, gm := make([]float64, m), make([]float64, m)
			for i := lo; i < hi; i++ {
				di := d[i*m : (i+1)*m]
				// gm = R_i Kᵀ, gp = ω_i D_i KKᵀ.
				for l := range m {
					gm[l] = f.uvec[i] * ksum[l]
				}
				s := 0.0
				for q := f.rowPtr[i]; q < f.rowPtr[i+1]; q++ {
					kj := kt[int(f.cols[q])*m : int(f.cols[q]+1)*m]
					v := f.vals[q]
					for l := range m {
						gm[l] += v * kj[l]
					}
					s += v * dot(di, kj)
				}
				rowDot[i] = s + f.uvec[i]*dot(di, ksum)
				for l := range m {
					gp[l] = f.omega[i] * dot(di, gk[l*m:(l+1)*m])
				}
				row := newD[i*m : (i+1)*m]
				copy(row, di)
				muRow(st.opts.Rule, row, gp, gm)
			}
		})
		if withObj {
			inner := 0.0
			for _, v := range rowDot {
				inner += v
			}
			tr := 0.0
			for k := range h {
				tr += h[k] * gk[k]
			}
			obj -= f.constant - inner + tr/2
		}
		// K: per row l, ∇⁺_K(l,j) = (H K)_lj, ∇⁻_K(l,j) = (DᵀR)_lj. Computed
		// per column j (independent), then the rule per row l.
		gpK, gmK := make([]float64, n*m), make([]float64, n*m) // transposed like KT
		parallelRanges(n, st.workers, func(lo, hi int) {
			for j := lo; j < hi; j++ {
				kj := kt[j*m : (j+1)*m]
				g := gmK[j*m : (j+1)*m]
				copy(g, dtu)
				for q := f.colPtr[j]; q < f.colPtr[j+1]; q++ {
					di := d[int(f.rows[q])*m : int(f.rows[q]+1)*m]
					v := f.colVals[q]
					for l := range m {
						g[l] += v * di[l]
					}
				}
				for l := range m {
					gpK[j*m+l] = dot(h[l*m:(l+1)*m], kj)
				}
			}
		})
		w, gp, gm := st.w[:n], st.gp[:n], st.gm[:n]
		for l := range m {
			for j := range n {
				w[j], gp[j], gm[j] = kt[j*m+l], gpK[j*m+l], gmK[j*m+l]
			}
			muRow(st.opts.Rule, w, gp, gm)
			for j := range n {
				newKT[j*m+l] = w[j]
			}
		}
		copy(d, newD)
		copy(kt, newKT)
	}
	md.Iteration++
	return obj, nil
}

// gram returns the m×m matrix Σ_i ω_i x_i x_iᵀ of the rows x_i of the
// row-major n×m slice x (ω = nil: all weights 1).
func gram(x []float64, n, m int, omega []float64) []float64 {
	g := make([]float64, m*m)
	for i := range n {
		w := 1.0
		if omega != nil {
			if w = omega[i]; w == 0 {
				continue
			}
		}
		r := x[i*m : (i+1)*m]
		for l, v := range r {
			if v == 0 {
				continue
			}
			wv := w * v
			gl := g[l*m : (l+1)*m]
			for k, u := range r {
				gl[k] += wv * u
			}
		}
	}
	return g
}

// maxRowDeviation returns max |Σ row − 1| over the rows of D and K.
func maxRowDeviation(md *Model) float64 {
	n, m := md.N, md.M
	dev := 0.0
	for _, d := range md.D {
		for i := range n {
			s := 0.0
			for _, v := range d[i*m : (i+1)*m] {
				s += v
			}
			dev = max(dev, math.Abs(s-1))
		}
	}
	for _, kt := range md.KT {
		s := make([]float64, m)
		for j := range n {
			for l := range m {
				s[l] += kt[j*m+l]
			}
		}
		for _, v := range s {
			dev = max(dev, math.Abs(v-1))
		}
	}
	return dev
}

// normalizeModel rescales every row of D and K to sum 1.
func normalizeModel(md *Model) {
	for _, d := range md.D {
		normalizeRows(d, md.N, md.M)
	}
	for _, kt := range md.KT {
		normalizeCols(kt, md.N, md.M)
	}
}
