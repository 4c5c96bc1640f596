package topk

import "math"

// Float32Budget is the most bytes the float32 copy of the items (the
// second stage of the fallback, see shadowScan) may take: 16 MB, the
// float32 rows of n = 131 072 items of m = 32 (and 16 MB is then half of
// the float64 items the index references). A model above it keeps only
// the 8-bit shadow, so that the index of a large model stays an eighth of
// its items (52 MB at n = 10^6, m = 32, where the float32 copy would add
// 128 MB); the fitted models whose queries give the 8-bit shadow up (a
// hidden state with one large next state, the others apart by less than
// a code: docs/benchmarks.md) are far below it (n = 4 000: 0.5 MB).
const Float32Budget = 16 << 20

// Float32ShadowBudget sets the budget (bytes) of the float32 second stage that
// NewIndex keeps beside the 8-bit shadow (QuantizedShadow): the float32
// copy is kept when its bytes, 4·⌈n/8⌉·8·⌈dims/8⌉·8, are at most the
// budget (default Float32Budget; 0: never).
func Float32ShadowBudget(budget int) Option {
	return func(ix *Index) { ix.budget32 = budget }
}

// shadow32 is the float32 copy of the items the fallback scans when the
// 8-bit shadow gives a query up.
type shadow32 struct {
	stride int       // floats per row: dims rounded up to a multiple of 8
	rows   []float32 // ⌈n/8⌉·8 rows of stride floats, each rounded to nearest; padding 0
	kmax   float64   // the largest item (or extra) value
}

// shadow32Bytes is the size of the float32 copy of n items of dims
// coordinates.
func shadow32Bytes(n, dims int) int { return 4 * ((n + 7) &^ 7) * ((dims + 7) &^ 7) }

// maxShadow is the largest item value or query weight the float32 stage
// takes: products stay below 2^100 and sums of them below 2^107, far from
// float32's overflow at 2^128. A larger one makes the index keep no
// float32 copy, a larger weight makes the query scan exactly.
const maxShadow = 0x1p50

// newShadow32 returns the float32 copy of items and extra, or nil when a
// value is too large for it (above maxShadow).
func newShadow32(items []float64, n, m int, extra []float64) *shadow32 {
	dims := m
	if extra != nil {
		dims++
	}
	sh := &shadow32{stride: (dims + 7) &^ 7}
	sh.rows = make([]float32, shadow32Bytes(n, dims)/4)
	for j := range n {
		row := sh.rows[j*sh.stride : j*sh.stride+dims]
		for l, v := range items[j*m : (j+1)*m] {
			row[l] = float32(v)
			sh.kmax = max(sh.kmax, v)
		}
		if extra != nil {
			row[m] = float32(extra[j])
			sh.kmax = max(sh.kmax, extra[j])
		}
	}
	if sh.kmax > maxShadow {
		return nil
	}
	return sh
}

// bound32 turns float32 scores of the float32 copy into thresholds that
// are safe for the exact float64 scores.
//
// Let S_j be item j's real score Σ_l w_l·k_jl (all terms >= 0), Ŝ_j the
// float64 score the answers hold (Dot, d = dims terms: |Ŝ_j − S_j| <=
// d·2^-53·S_j) and s_j the float32 score: w and the items rounded to
// float32 (relative error u = 2^-24 each, or an absolute 2^-150 below
// float32's normal range), products and a sum of at most stride terms in
// any order with or without fused multiply-add (each operation relative
// u, or absolute 2^-150 where it underflows; the padding adds exact
// zeros). Then, with γ = (stride+3)·u/(1−(stride+3)·u) (Higham, "Accuracy
// and Stability of Numerical Algorithms", §3.1) and the absolute part
// bounded by stride·(w_max + k_max + 2)·2^-150,
//
//	|s_j − S_j| <= g·S_j + η,  g = (d+12)·2^-23 >= 2γ,  η = (d+8)·(w_max+k_max+2)·2^-148,
//
// and since d·2^-53 is far below g, (s_j − η)·(1 − 2g) <= Ŝ_j <= (s_j + η)·(1 + 2g).
// Hence an item j can beat a score h (Ŝ_j >= h) only if s_j >= h/(1+2g) − η
// (fromExact), and can beat the k-th largest float32 score x of k items
// (each of whose Ŝ >= (x − η)·(1 − 2g)) only if
// s_j >= x·(1−2g)/(1+2g) − 2η (fromShadow). The factors are computed with
// a relative slack of 2^-39 and the η terms with 2^-20, far above the
// rounding of the few float64 operations that compute a threshold, so
// each computed threshold is below the real one (a threshold <= 0 excludes
// nothing: every s_j >= 0).
type bound32 struct {
	r, e   float64 // fromShadow(x) = x·r − e
	r2, e2 float64 // fromExact(h) = h·r2 − e2
}

func newBound32(dims int, wmax, kmax float64) bound32 {
	g := float64(dims+12) * 0x1p-23
	eta := float64(dims+8) * (wmax + kmax + 2) * 0x1p-148
	return bound32{
		r: (1 - 2*g) / (1 + 2*g) * (1 - 0x1p-39), e: 2 * eta * (1 + 0x1p-20),
		r2: 1 / (1 + 2*g) * (1 - 0x1p-39), e2: eta * (1 + 0x1p-20),
	}
}

// rule is the sweep's affine maps of this bound: a row's value is its
// float32 score (u·1 − 0·0 − 0, exact), its threshold fromShadow.
func (b bound32) rule() affine { return affine{c1: 1, t1: b.r, t2: b.e} }

// fromShadow is the least float32 score of an item that may enter an
// answer whose k-th best float32 score is x: x·r − e.
func (b bound32) fromShadow(x float64) float64 { return b.rule().threshold(x) }

// fromExact is the least float32 score of an item that may beat the
// exact score h.
func (b bound32) fromExact(h float64) float64 { return h*b.r2 - b.e2 }

// scan32 is the fallback's second stage: it answers the query of weights
// w (default score) by scanning the float32 copy and rescoring exactly
// the items whose float32 score could reach the k-th best (bound32), as
// scan8 does with the 8-bit codes: 4 bytes per coordinate instead of 1,
// but intervals about 10^-5 wide instead of 10^-2, which separate the
// near ties that make scan8 give up. floor is a lower bound of the k-th
// best exact score (scan8's, or -Inf). It reports false, having changed
// nothing but scratch space, when it cannot answer: a weight above
// maxShadow, or more than most items within the bound of the k-th best.
func (ix *Index) scan32(w []float64, k, most int, floor float64, s *Searcher, dst []Hit, st *Stats) ([]Hit, bool) {
	sh := ix.shadow32
	wmax := 0.0
	for _, v := range w {
		wmax = max(wmax, v)
	}
	if wmax > maxShadow {
		return nil, false
	}
	w32 := s.w32[:0]
	for _, v := range w {
		w32 = append(w32, float32(v))
	}
	for len(w32) < sh.stride {
		w32 = append(w32, 0)
	}
	s.w32 = w32
	b := newBound32(ix.dims, wmax, sh.kmax)
	thr := b.fromExact(floor)
	if len(s.heap) == k {
		thr = max(thr, b.fromExact(s.heap[0].Score))
	}
	sw := sweep{k: k, most: most, thr: thr, best: s.low[:0], cand: s.cand[:0], rule: b.rule()}
	kept := sw.run(ix.n, s.out, func(out []float32, j0, rows int) float32 {
		return dots32(out, w32, sh.rows[j0*sh.stride:], rows, sh.stride)
	})
	s.low, s.cand = sw.best[:0], sw.cand[:0]
	if !kept {
		return nil, false
	}
	st.Float32 = true
	return ix.rescore(w, k, sw.cand, s, dst, st), true
}

// floorOf returns the lower bound lo (kernel units of bd) in exact units,
// or -Inf where that is not exact (below float64's normal range).
func (bd bound8) floorOf(lo float64) float64 {
	if f := math.Ldexp(lo, -bd.a); f >= 0x1p-1000 {
		return f
	}
	return math.Inf(-1)
}
