package topk

import (
	"math"
	"slices"
)

// Option tunes NewIndex.
type Option func(*Index)

// Float32Shadow makes NewIndex keep a float32 copy of the items (and of
// the extra coordinate), each row padded with zeros to a multiple of 8
// floats, that the fallback scans instead of the float64 items (default:
// off; then the fallback is the exact float64 scan). It costs
// 4·n·⌈dims/8⌉·8 bytes: 128 MB at n = 10^6, m = 32, half of the items.
// The answers are the same bits either way (see shadowScan).
func Float32Shadow(on bool) Option {
	return func(ix *Index) { ix.wantShadow = on }
}

// shadow is the float32 copy of the items the fallback scans.
type shadow struct {
	stride int       // floats per row: dims rounded up to a multiple of 8
	rows   []float32 // ⌈n/8⌉·8 rows of stride floats, each rounded to nearest; padding 0
	kmax   float64   // the largest item (or extra) value
}

// maxShadow is the largest item value or query weight the shadow scan
// takes: products stay below 2^100 and sums of them below 2^107, far from
// float32's overflow at 2^128. A larger one makes the index keep no
// shadow, a larger weight makes the query scan exactly.
const maxShadow = 0x1p50

// newShadow returns the float32 copy of items and extra, or nil when a
// value is too large for it (above maxShadow).
func newShadow(items []float64, n, m int, extra []float64) *shadow {
	dims := m
	if extra != nil {
		dims++
	}
	sh := &shadow{stride: (dims + 7) &^ 7}
	sh.rows = make([]float32, (n+7)&^7*sh.stride)
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

// bound32 turns float32 scores of the shadow into thresholds that are
// safe for the exact float64 scores.
//
// Let S_j be item j's real score Σ_l w_l·k_jl (all terms >= 0), Ŝ_j the
// float64 score the answers hold (Dot, d = dims terms: |Ŝ_j − S_j| <=
// d·2^-53·S_j) and s_j the shadow's float32 score: w and the items
// rounded to float32 (relative error u = 2^-24 each, or an absolute
// 2^-150 below float32's normal range), products and a sum of at most
// stride terms in any order with or without fused multiply-add (each
// operation relative u, or absolute 2^-150 where it underflows; the
// padding adds exact zeros). Then, with γ = (stride+3)·u/(1−(stride+3)·u)
// (Higham, "Accuracy and Stability of Numerical Algorithms", §3.1) and
// the absolute part bounded by stride·(w_max + k_max + 2)·2^-150,
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

// fromShadow is the least float32 score of an item that may enter an
// answer whose k-th best float32 score is x.
func (b bound32) fromShadow(x float32) float64 { return float64(x)*b.r - b.e }

// fromExact is the least float32 score of an item that may beat the
// exact score h.
func (b bound32) fromExact(h float64) float64 { return h*b.r2 - b.e2 }

// shadowBlock is how many rows the shadow scan scores per kernel call.
const shadowBlock = 512

// cand32 is an item the shadow scan kept, with its float32 score.
type cand32 struct {
	j int32
	v float32
}

// shadowScan answers the query of weights w (default score) by scanning
// the float32 shadow and rescoring exactly the items whose float32 score
// could reach the k-th best (see bound32): the answer of the exact scan,
// bit for bit, at the cost of reading 4 bytes per coordinate instead of 8
// plus a few exact scores. The k best exact hits the lists found
// (s.heap, when full) set the first threshold; the items they scored are
// not scored again. It reports false, having changed nothing but
// scratch space, when it cannot answer: no shadow, a weight above
// maxShadow, k above n/16, or more than max(64+4k, n/64) items within the
// bound of the k-th best (a model with that many near ties), for which
// the caller scans exactly.
func (ix *Index) shadowScan(w []float64, k int, s *Searcher, dst []Hit, st *Stats) ([]Hit, bool) {
	sh := ix.shadow
	if sh == nil || k > ix.n/16 {
		return nil, false
	}
	wmax := 0.0
	for _, v := range w {
		wmax = max(wmax, v)
	}
	if wmax > maxShadow {
		return nil, false
	}
	w32 := slices.Grow(s.w32[:0], sh.stride)[:sh.stride]
	clear(w32)
	for l, v := range w {
		w32[l] = float32(v)
	}
	s.w32 = w32
	if len(s.out) < shadowBlock {
		s.out = make([]float32, shadowBlock)
	}
	b := newBound32(ix.dims, wmax, sh.kmax)
	thr := math.Inf(-1)
	if len(s.heap) == k {
		thr = b.fromExact(s.heap[0].Score)
	}
	h32, cand := s.h32[:0], s.cand[:0]
	most := max(64+4*k, ix.n/64)
	n, padded := ix.n, (ix.n+7)&^7
	for j0 := 0; j0 < padded; j0 += shadowBlock {
		rows := min(shadowBlock, padded-j0)
		out := s.out[:rows]
		if float64(dots32(out, w32, sh.rows[j0*sh.stride:], rows, sh.stride)) < thr {
			continue // no row of the block reaches the threshold
		}
		if j0+rows > n {
			out = out[:n-j0]
		}
		for r, v := range out {
			if float64(v) < thr {
				continue
			}
			cand = append(cand, cand32{int32(j0 + r), v})
			if len(h32) < k {
				h32 = pushMin32(h32, v)
				if len(h32) == k {
					thr = max(thr, b.fromShadow(h32[0]))
				}
			} else if v > h32[0] {
				replaceMin32(h32, v)
				thr = max(thr, b.fromShadow(h32[0]))
			}
			if len(cand) >= most {
				cand = keepAbove(cand, thr)
				if len(cand) > most/2 {
					s.h32, s.cand = h32[:0], cand[:0]
					return nil, false
				}
			}
		}
	}
	cand = keepAbove(cand, thr)
	st.Scored += n
	st.Shadow = true
	score := ix.dotScore(w)
	for _, c := range cand {
		if s.see(c.j) {
			st.Rescored++
			s.push(Hit{int(c.j), score(int(c.j))}, k)
		}
	}
	s.h32, s.cand = h32[:0], cand[:0]
	return s.sorted(dst), true
}

// keepAbove keeps the candidates whose float32 score is at least thr.
func keepAbove(cand []cand32, thr float64) []cand32 {
	return slices.DeleteFunc(cand, func(c cand32) bool { return float64(c.v) < thr })
}

// pushMin32 adds v to the min-heap h.
func pushMin32(h []float32, v float32) []float32 {
	h = append(h, v)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if h[p] <= h[i] {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

// replaceMin32 replaces the root of the min-heap h by v.
func replaceMin32(h []float32, v float32) {
	h[0] = v
	for i := 0; ; {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1] < h[c] {
			c++
		}
		if h[i] <= h[c] {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// dots32Go is the pure-Go float32 kernel: out[r] = Σ_c w[c]·rows[r·stride+c]
// for r < nrows, eight rows at a time; it returns the largest out[r] (0
// when all are 0 or less: the scores of non-negative w and rows are >= 0).
func dots32Go(out, w, rows []float32, nrows, stride int) float32 {
	w = w[:stride]
	var top float32
	for r := 0; r < nrows; r += 8 {
		var acc [8]float32
		rs := rows[r*stride : (r+8)*stride : (r+8)*stride]
		for c, wc := range w {
			acc[0] += wc * rs[c]
			acc[1] += wc * rs[stride+c]
			acc[2] += wc * rs[2*stride+c]
			acc[3] += wc * rs[3*stride+c]
			acc[4] += wc * rs[4*stride+c]
			acc[5] += wc * rs[5*stride+c]
			acc[6] += wc * rs[6*stride+c]
			acc[7] += wc * rs[7*stride+c]
		}
		copy(out[r:r+8], acc[:])
		for _, v := range acc {
			top = max(top, v)
		}
	}
	return top
}
