package topk

import (
	"math"
	"math/bits"
	"slices"
)

// Option tunes NewIndex.
type Option func(*Index)

// QuantizedShadow makes NewIndex keep an 8-bit copy of the items (and of
// the extra coordinate) that the fallback scans instead of the float64
// items (default: off; then the fallback is the exact float64 scan):
// for each item a scale and one code 0..255 per coordinate, the row
// padded with zero codes to a multiple of 16. It costs
// n·(⌈dims/16⌉·16 + 4) bytes: 36 MB at n = 10^6, m = 32, a seventh of the
// items; beside it, where it takes at most Float32ShadowBudget's bytes
// (default Float32Budget, 16 MB), a float32 copy that the fallback scans
// when the 8-bit one gives a query up. The answers are the same bits
// either way (see shadowScan).
func QuantizedShadow(on bool) Option {
	return func(ix *Index) { ix.wantShadow = on }
}

// shadow is the 8-bit copy of the items the fallback scans: coordinate l
// of item j is 2^e_l·σ_j·(q_jl + ε_jl) with |ε_jl| <= 1/2 + 2^-44 (plus
// 2^e_l·2^-1074 where k_jl·2^-e_l underflows).
type shadow struct {
	stride int       // codes per row: dims rounded up to a multiple of 16
	codes  []uint8   // ⌈n/8⌉·8 rows of stride codes q_jl; padding 0
	scales []float32 // σ_j of each row (padding rows 0): below 2^-7
	exps   []int     // e_l of each coordinate: its largest value is in [2^(e_l−1), 2^e_l)
}

// newShadow returns the 8-bit copy of items and extra. Coordinate l is
// first scaled by 2^-e_l, the power of two that puts its largest value
// (over all items) in [1/2, 1); item j's scale is then
// σ_j = max_l k_jl·2^-e_l / 255 rounded up to a float32 (0 for a zero
// row) and its codes q_jl = round(k_jl·2^-e_l / σ_j), at most 255. The
// exponents keep every scale in float32's range whatever the items'
// magnitude (σ_j falls below float32's normal range only for items
// 2^118 times smaller than the largest, whose scores are then below the
// bound's absolute term), and they give each coordinate's largest values
// codes of at least 127: the items a query on few coordinates asks for
// are the largest of those coordinates, and with one scale per item
// alone, an item whose largest value lies on another coordinate would
// have a code of a few units there (on fitted models, a hidden state
// whose next states are each more likely from other hidden states).
func newShadow(items []float64, n, m int, extra []float64) *shadow {
	dims := m
	if extra != nil {
		dims++
	}
	sh := &shadow{stride: (dims + 15) &^ 15, exps: make([]int, dims)}
	padded := (n + 7) &^ 7
	sh.codes = make([]uint8, padded*sh.stride)
	sh.scales = make([]float32, padded)
	coord := func(j, l int) float64 {
		if l == m {
			return extra[j]
		}
		return items[j*m+l]
	}
	for l := range dims {
		mx := 0.0
		for j := range n {
			mx = max(mx, coord(j, l))
		}
		_, sh.exps[l] = math.Frexp(mx) // mx = f·2^e, f in [0.5, 1) (e = 0 for 0)
	}
	for j := range n {
		x := 0.0
		for l := range dims {
			x = max(x, math.Ldexp(coord(j, l), -sh.exps[l]))
		}
		sigma := roundUp(x / 255)
		for float64(sigma)*255 < x { // exact products: 24 + 8 bits
			sigma = math.Nextafter32(sigma, float32(math.Inf(1)))
		}
		sh.scales[j] = sigma
		if sigma == 0 {
			continue
		}
		row := sh.codes[j*sh.stride : j*sh.stride+dims]
		for l := range dims {
			// x/σ <= 255 exactly, so its rounding is too.
			row[l] = uint8(math.Round(math.Ldexp(coord(j, l), -sh.exps[l]) / float64(sigma)))
		}
	}
	return sh
}

// bound8 turns the 8-bit kernel's outputs into intervals that contain the
// exact float64 scores, in kernel units (scores times 2^a).
//
// Let w be the query (d = dims weights >= 0), v_l = w_l·2^(e_l+a) with a
// the exponent that puts max_l v_l in [1, 2), V = Σ_l v_l, and ω_l the
// integer nearest v_l·2^c (at most 2^(c+1) − 1: c = 14 unless the row is
// longer than 256 codes, so that Σ_l ω_l·255 stays below 2^31), off by
// δ_l = v_l·2^c − ω_l (|δ_l| <= 1, E = Σ_l |δ_l|). With
// k_jl·2^-e_l = σ_j·(q_jl + ε_jl), |ε_jl| <= 1/2 + 2^-44 (plus at most
// 2^-1074 where it underflows, d·2^-1073 in all in kernel units), the
// real score is
//
//	S_j·2^a = Σ_l v_l·k_jl·2^-e_l = σ_j·(A_j·2^-c + 2^-c·Σ_l δ_l·q_jl + Σ_l v_l·ε_jl),
//	A_j = Σ_l ω_l·q_jl (an exact integer, below 2^31),
//
// and the last two sums are at most H = 255·2^-c·E + (1/2 + 2^-44)·V in
// magnitude (rounded up to a float32): the weights' and the codes'
// quantization. The kernel computes U_j = fl(σ_j·fl(fl(A_j)·2^-c + H)):
// three roundings of relative u = 2^-24 (the product by 2^-c is exact:
// A_j·2^-c is 0 or at least 2^-14), and an absolute 2^-150 where the last
// product underflows. With Ŝ_j the float64 score the answers hold (Dot:
// d terms, each through at most d+1 roundings, |Ŝ_j − S_j| <= γ64·S_j +
// d·2^-1073, γ64 = (d+1)·2^-53/(1−(d+1)·2^-53), d < 2^22) and Higham's
// γ_3 ("Accuracy and Stability of Numerical Algorithms", §3.1), with
// g = 2^-20, which exceeds (1+γ64)/(1−γ_3) − 1 and 1 − (1−γ64)/(1+γ_3),
//
//	Ŝ_j·2^a <= U_j·(1+g) + e              (upper)
//	Ŝ_j·2^a >= U_j·(1−g) − 2·σ_j·H − e    (lower)
//	e = 2^-140 + d·2^-1070 + d·2^(a−1072)
//
// (the last product's underflow; the codes' underflows; Dot's underflows
// in kernel units). An item can reach a score L (Ŝ_j·2^a >= L) only if
// U_j >= (L − e)/(1+g) (minU). The factors are computed with a relative
// slack of 2^-40 and the subtracted terms with 2^-30, above the rounding
// of the few float64 operations that compute them, so each computed
// threshold is below the real one and each computed lower bound below
// the real one (a threshold <= 0 excludes nothing: every U_j >= 0).
type bound8 struct {
	a    int     // the query's exponent: exact scores times 2^a are kernel units
	unit float32 // 2^-c
	h    float32 // H
	r    float64 // minU(L) = (L − e1)·r
	e1   float64 // e, with slack
	c1   float64 // lower(U, σ) = U·c1 − σ·c2 − e1
	c2   float64
}

// weightBits is c for rows of stride codes: the largest c <= 14 with
// 2^(c+1)·255·stride < 2^31 (the kernel's integer sums), -1 when none.
func weightBits(stride int) int {
	c := 14
	for c >= 0 && int64(1)<<(c+1)*255*int64(stride) >= 1<<31 {
		c--
	}
	return c
}

// newBound8 returns the bound of the query w on the shadow sh and the
// kernel's integer weights ω (in dst's memory, padded with zeros to the
// stride), or false when the bound cannot serve: a weight of +Inf, scores
// that may overflow float64, scores so small that float64's underflow
// (Dot's) is not small in kernel units, or rows too long for int32 sums.
func newBound8(sh *shadow, w []float64, dst []int16) (bound8, []int16, bool) {
	c := weightBits(sh.stride)
	// top: the largest exponent of w_l·2^e_l (w_l·2^e_l < 2^top).
	top, found := 0, false
	for l, v := range w {
		if v == 0 {
			continue
		}
		if math.IsInf(v, 0) {
			return bound8{}, dst, false
		}
		_, ew := math.Frexp(v)
		if ew+sh.exps[l] > top || !found {
			top, found = ew+sh.exps[l], true
		}
	}
	d := len(w)
	// Scores are below d·2^top: with top + bits(d) <= 1000 Dot cannot
	// overflow.
	if !found || c < 0 || top+bits.Len(uint(d)) > 1000 {
		return bound8{}, dst, false
	}
	bd := bound8{a: 1 - top, unit: float32(math.Ldexp(1, -c))}
	dst = slices.Grow(dst[:0], sh.stride)[:sh.stride]
	clear(dst)
	omax := float64(int(1)<<(c+1) - 1)
	vsum, errs := 0.0, 0.0
	for l, w := range w {
		v := math.Ldexp(w, sh.exps[l]+bd.a) // v_l, below 2
		vsum += v
		x := math.Ldexp(v, c) // below 2^(c+1)
		o := min(math.Round(x), omax)
		dst[l] = int16(o)
		errs += math.Abs(x - o) // exact: |x − o| <= 1 and x's ulp divides it
	}
	// Upper bounds of V and E (float64 sums of d non-negative terms; the
	// terms' own underflows, at most 2^-1074 each).
	vsum = vsum*(1+float64(d+1)*0x1p-52) + float64(d)*0x1p-1074
	errs = errs*(1+float64(d+1)*0x1p-52) + float64(d)*0x1p-1074
	bd.h = roundUp((255*math.Ldexp(errs, -c) + vsum*(0.5+0x1p-44)) * (1 + 0x1p-50))
	const g = 0x1p-20
	e := 0x1p-140 + float64(d)*0x1p-1070 + math.Ldexp(float64(d), bd.a-1072)
	if !(e < 0x1p-30) {
		return bound8{}, dst, false
	}
	bd.e1 = e * (1 + 0x1p-30)
	bd.r = 1 / (1 + g) * (1 - 0x1p-40)
	bd.c1 = (1 - g) * (1 - 0x1p-40)
	bd.c2 = 2 * float64(bd.h) * (1 + 0x1p-30)
	return bd, dst, true
}

// rule is the sweep's affine maps of these bounds: lower and minU.
func (bd bound8) rule() affine {
	return affine{c1: bd.c1, c2: bd.c2, e1: bd.e1, t0: bd.e1, t1: bd.r}
}

// minU is the least kernel output of an item that may reach the score L
// (kernel units): (L − e1)·r.
func (bd bound8) minU(L float64) float64 { return bd.rule().threshold(L) }

// lower is a lower bound of the exact score (kernel units) of an item
// whose kernel output is u and scale sigma: u·c1 − σ·c2 − e1.
func (bd bound8) lower(u, sigma float32) float64 { return bd.rule().value(u, sigma) }

// units converts an exact score to kernel units, rounded to nearest (the
// rounding is below e's slack).
func (bd bound8) units(h float64) float64 { return math.Ldexp(h, bd.a) }

// shadowBlock is how many rows the shadow scans score per kernel call.
const shadowBlock = 512

// candidate is an item a shadow scan kept, with its kernel output.
type candidate struct {
	j int32
	u float32
}

// shadowScan answers the query of weights w (default score) by scanning
// a copy of the items smaller than the float64 ones and rescoring exactly
// (Dot's bits, in batches) the items it cannot exclude: the answer of the
// exact scan, bit for bit. The first stage scans the 8-bit shadow
// (scan8); a query it gives up (near ties at 8 bits) goes to the float32
// copy (scan32) where the index keeps one (Float32Budget). The k best
// exact hits the lists found (s.heap, when full) set the first
// threshold; the items they scored are not scored again. It reports
// false, having changed nothing but scratch space, when it cannot answer:
// no shadow, k above n/16, or both stages gave up, for which the caller
// scans exactly. A stage gives up with more than
// most = max(64+4k, n/(4·lines)) items within the bound of the k-th best
// (lines: the cache lines of a row the query's weights read): an item
// read at random costs about 4 rows of a scan per cache line of it that
// the query reads (DefaultBudget's measure: 16 rows for four lines at
// n = 10^6, 11 at n = 4 000), so rescoring more would cost about an
// exact scan.
func (ix *Index) shadowScan(w []float64, k int, s *Searcher, dst []Hit, st *Stats) ([]Hit, bool) {
	if ix.shadow == nil || k > ix.n/16 {
		return nil, false
	}
	if len(s.out) < shadowBlock {
		s.out = make([]float32, shadowBlock)
	}
	most := max(64+4*k, ix.n/(4*ix.lines(s.act)))
	hits, ok, floor := ix.scan8(w, k, most, s, dst, st)
	if ok || ix.shadow32 == nil {
		return hits, ok
	}
	return ix.scan32(w, k, most, floor, s, dst, st)
}

// scan8 is the fallback's first stage: it scans the 8-bit shadow and
// rescores exactly the items whose interval (bound8) reaches the k-th
// best lower bound, at the cost of reading one byte per coordinate
// instead of 8 plus a few exact scores. It reports false, having changed
// nothing but scratch space, for a query newBound8 refuses or with more
// than most items whose interval reaches the k-th best lower bound (a
// model with that many near ties at 8 bits), and then a lower bound of
// the k-th best exact score (-Inf when it has none).
func (ix *Index) scan8(w []float64, k, most int, s *Searcher, dst []Hit, st *Stats) ([]Hit, bool, float64) {
	sh := ix.shadow
	bd, w16, ok := newBound8(sh, w, s.w16)
	s.w16 = w16
	if !ok {
		return nil, false, math.Inf(-1)
	}
	thr := math.Inf(-1) // the least U_j of an item that may enter the answer
	if len(s.heap) == k {
		thr = bd.minU(bd.units(s.heap[0].Score))
	}
	sw := sweep{k: k, most: most, thr: thr, best: s.low[:0], cand: s.cand[:0], rule: bd.rule(), scales: sh.scales}
	kept := sw.run(ix.n, s.out, func(out []float32, j0, rows int) float32 {
		return dots8(out, w16, sh.codes[j0*sh.stride:], sh.scales[j0:], bd.unit, bd.h, rows, sh.stride)
	})
	s.low, s.cand = sw.best[:0], sw.cand[:0]
	if !kept {
		floor := math.Inf(-1)
		if len(sw.best) == k {
			floor = bd.floorOf(sw.best[0])
		}
		return nil, false, floor
	}
	st.Shadow = true
	return ix.rescore(w, k, sw.cand, s, dst, st), true, 0
}

// rescore scores exactly (the default score, in batches) the candidates
// the items the lists gave have not been, offers them to the heap of the
// k best and returns the answer: a shadow scan's last step, which counts
// the scan (every item) in st.
func (ix *Index) rescore(w []float64, k int, cand []candidate, s *Searcher, dst []Hit, st *Stats) []Hit {
	st.Scored += ix.n
	var js [batch]int32
	var scores [batch]float64
	pend := js[:0]
	flush := func() {
		ix.sparseDots(w, s.act, pend, scores[:len(pend)])
		for b, j := range pend {
			s.push(Hit{int(j), scores[b]}, k)
		}
		pend = pend[:0]
	}
	for _, c := range cand {
		if s.see(c.j) {
			st.Rescored++
			if pend = append(pend, c.j); len(pend) == batch {
				flush()
			}
		}
	}
	flush()
	s.cand = cand[:0]
	return s.sorted(dst)
}

// affine is how a sweep values a row and sets its threshold: a row of
// kernel output u and scale σ (0 without scales) is worth
// value(u, σ) = u·c1 − σ·c2 − e1, and k values whose least is L admit
// the rows of output at least threshold(L) = (L − t0)·t1 − t2 (the
// operations in this order: the bounds' roundings are argued for it).
type affine struct {
	c1, c2, e1 float64
	t0, t1, t2 float64
}

func (a affine) value(u, sigma float32) float64 {
	return float64(u)*a.c1 - float64(sigma)*a.c2 - a.e1
}

func (a affine) threshold(L float64) float64 { return (L-a.t0)*a.t1 - a.t2 }

// sweep is a shadow scan's pass over the rows: the candidates it keeps,
// the heap of the k best of their values (lower bounds, or float32
// scores) and the threshold those set.
type sweep struct {
	k, most int
	thr     float64     // the least kernel output of an item that may enter the answer
	best    []float64   // the k best values (a min-heap)
	cand    []candidate // the items kept
	rule    affine      // values and thresholds
	scales  []float32   // σ_j of each row (nil: 0)
}

// run computes the kernel's outputs for the rows in blocks of
// shadowBlock (kernel(out, j0, rows) sets out[:rows] for rows j0.., rows
// a multiple of 8 past n, and returns their largest), passes over a
// block whose largest output is below the threshold, and keeps each item
// j < n whose output reaches it, its value offered to the heap of the k
// best, which raises the threshold once full. It reports false when more
// than most candidates reach the threshold (checked whenever 2·most have
// been kept, and at the end).
func (sw *sweep) run(n int, out []float32, kernel func(out []float32, j0, rows int) float32) bool {
	padded, thr, best, cand := (n+7)&^7, sw.thr, sw.best, sw.cand
	defer func() { sw.thr, sw.best, sw.cand = thr, best, cand }()
	for j0 := 0; j0 < padded; j0 += shadowBlock {
		rows := min(shadowBlock, padded-j0)
		block := out[:rows]
		if float64(kernel(block, j0, rows)) < thr {
			continue // no row of the block reaches the threshold
		}
		if j0+rows > n {
			block = block[:n-j0]
		}
		for r, u := range block {
			if float64(u) < thr {
				continue
			}
			j := j0 + r
			cand = append(cand, candidate{int32(j), u})
			var sigma float32
			if sw.scales != nil {
				sigma = sw.scales[j]
			}
			v := sw.rule.value(u, sigma)
			if len(best) < sw.k {
				best = pushMin(best, v)
				if len(best) == sw.k {
					thr = max(thr, sw.rule.threshold(best[0]))
				}
			} else if v > best[0] {
				replaceMin(best, v)
				thr = max(thr, sw.rule.threshold(best[0]))
			}
			if len(cand) >= 2*sw.most {
				if cand = keepAbove(cand, thr); len(cand) > sw.most {
					return false
				}
			}
		}
	}
	cand = keepAbove(cand, thr)
	return len(cand) <= sw.most
}

// keepAbove keeps the candidates whose kernel output is at least thr.
func keepAbove(cand []candidate, thr float64) []candidate {
	return slices.DeleteFunc(cand, func(c candidate) bool { return float64(c.u) < thr })
}

// pushMin adds v to the min-heap h.
func pushMin(h []float64, v float64) []float64 {
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

// replaceMin replaces the root of the min-heap h by v.
func replaceMin(h []float64, v float64) {
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

// dots8Go is the pure-Go 8-bit kernel: out[r] = (float32(A_r)·unit +
// h)·scales[r], A_r = Σ_c w[c]·codes[r·stride+c] in int32 (exact: the
// caller keeps it below 2^31), for r < nrows; it returns the largest
// out[r] (0 when all are 0: the outputs of non-negative w, unit, h and
// scales are >= 0).
func dots8Go(out []float32, w []int16, codes []uint8, scales []float32, unit, h float32, nrows, stride int) float32 {
	w = w[:stride]
	var top float32
	for r := range nrows {
		row := codes[r*stride : (r+1)*stride : (r+1)*stride]
		var a int32
		for c, wc := range w {
			a += int32(wc) * int32(row[c])
		}
		v := (float32(a)*unit + h) * scales[r]
		out[r] = v
		top = max(top, v)
	}
	return top
}
