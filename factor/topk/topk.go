// Package topk answers exact top-k maximum inner-product queries over the
// columns of a stochastic factor: given a query w (m non-negative weights,
// a row D^a_i of D) and the n items k_j (the columns of K^a, the rows of
// the model's K^T block), the k items with the largest scores
// s_j = ⟨w, k_j⟩ = P^a(j | i), ties broken by the smaller index. It is the
// top-k next states of (i, a) (spec ask-the-model §1).
//
// # Algorithm
//
// An Index is built once per model version: for each of the m coordinates
// a list of the items in decreasing order of that coordinate (Fagin,
// Lotem & Naor's Threshold Algorithm, "Optimal aggregation algorithms for
// middleware", PODS 2001), truncated to the first Depth entries, with the
// values stored as float32 rounded up (so every bound computed from them
// is a true upper bound). A query reads only the lists of its non-zero
// weights, one entry at a time, each new item scored exactly; when list l
// has given its first d_l entries, every item not seen yet scores at most
//
//	τ = Σ_l w_l · v_l[d_l]        (v_l[d]: the next unread value of list l)
//
// The next entry read is that of the list with the largest term of τ
// (best first: on fitted models most weights are small, and reading their
// lists at the pace of the large ones, round robin, read several times
// more entries), and the query stops as soon as the k-th best score
// exceeds τ (strictly,
// with a margin for rounding: an unseen item that ties must still be
// found, for the smaller-index rule). A query that has scored Budget
// items without proving its answer, or that reaches the end of the
// truncated lists, scans all n items instead: its cost is bounded by the
// budget's gathers (DefaultBudget: n/128 cache lines of random reads,
// about a thirtieth of a float64 scan, at least 16 items) plus the scan,
// while queries whose D row puts its mass on a few hidden states with
// concentrated columns of K — models of structured data — read a few
// hundred entries. A query whose k exceeds its budget cannot fill its k
// best within it and scans without reading the lists (Stats.Skipped).
// The lists' values alone cannot tell earlier that a query will fail:
// any bound of the k-th best score they give (e.g. the mean of the k
// best items' bounds) is at least τ at depth k-1, above τ at the budget.
//
// # The fallback: an 8-bit shadow, exact answers
//
// With QuantizedShadow the index keeps an 8-bit copy of the items: each
// coordinate l scaled by the power of two 2^-e_l that puts its largest
// value in [1/2, 1) (so that float32 holds every scale whatever the items'
// magnitude, and each coordinate's largest values get codes of at least
// 127), then for item j a float32 scale σ_j = max_l k_jl·2^-e_l/255
// rounded up and codes q_jl = round(k_jl·2^-e_l/σ_j) in 0..255, the extra
// coordinate included, rows padded to a multiple of 16 codes: 32 bytes and
// a scale per item at m = 32, about a seventh of the float64 items' bytes,
// and a memory-bound scan runs at the speed of its bytes. The fallback
// scans it with an AVX2 kernel (eight rows at a time: codes widened to
// int16 and multiplied by the query's weights rounded to 15-bit integers,
// VPMADDWD, exact int32 sums; pure Go without AVX2 or with -tags purego)
// that returns, per row, U_j = σ_j·(A_j·2^-14 + H) in float32, A_j = Σ_l
// ω_l·q_jl and H the quantization's half a code (and the weights'
// rounding) worth of the weights, and the largest U_j of its block of 512
// rows: a block below the threshold is passed over without a test per row
// (on a dense model, every block but the first few). A rigorous bound
// (bound8) turns U_j into an interval that contains the exact float64
// score: the quantization error (half a code per coordinate, σ_j·Σ_l
// w_l/2, for weights of any sum, and the weights' rounding), the float32
// rounding of the kernel's last three operations (Higham's γ, plus an
// absolute term for float32's subnormal range) and Dot's own. An item is
// rescored exactly in float64 (Dot, the model's bits, in batches) unless
// its interval lies below the k-th best lower bound — of the items the
// scan kept, or the k best exact scores the lists already found (the list
// phase's work is reused: its items are not scored again, its k-th best
// sets the first threshold). A few tens of items are rescored on a dense
// model (the intervals are about ±0.4 % wide); a query with more than
// max(64+4k, n/(4·lines)) items within the interval of the k-th best
// (lines: the cache lines of a row its weights read; rescoring more would
// cost about an exact scan: near ties at 8 bits, or, on fitted models, a
// hidden state with one large next state whose other next states are told
// apart by values below a code of their items) goes to the second stage,
// as does a query whose scores may overflow float64 or lie in its
// subnormal range; without a second stage these, and always k above n/16
// or a custom Score, fall back to the exact float64 scan (blocked, four
// rows at a time). At n = 10^6, m = 32 the shadow costs 36 MB
// (n·(32+4) bytes; the float32 shadow it replaced cost 128 MB); without
// it a dense query costs its budget plus one float64 scan.
//
// The second stage is a float32 copy of the items (rows padded to a
// multiple of 8 floats), kept beside the 8-bit one only where it takes at
// most Float32Budget bytes (16 MB: n <= 131 072 at m = 32), so that a
// large model's index stays an eighth of its items: scanned with an AVX2
// fused multiply-add kernel when the 8-bit stage gives a query up, its
// scores within a rigorous relative bound of about 10^-5 (bound32:
// Higham's γ for any order of a float32 sum of non-negative terms, an
// absolute term for float32's subnormal range) tell apart the values
// below a code that the 8-bit intervals cannot; the same rescoring keeps
// the exact scan's bits, and a query with more than max(64+4k,
// n/(4·lines)) items within the float32 bound (near ties in float32, a
// weight or item above 2^50) scans exactly. Above the budget the 8-bit
// stage's give-ups scan exactly.
//
// Measured (docs/benchmarks.md, "Asking a model", thread CPU time on a
// shared 2-core VM): the slowest dense query at n = 10^6 (every one
// spends its budget and scans the 8-bit shadow) costs about half of one
// float32 SIMD scan of K (with the float32 shadow: 1.3) and about a
// quarter of one float64 scan. On the fitted real-data model depgraph
// (n = 4 000) 4 % of the queries give the 8-bit stage up (the lonely
// hidden states above) and the float32 stage answers them: its p99
// query costs about 0.65 of one float64 scan (without the second stage,
// scanning exactly: 1.4–1.8; with the float32 shadow alone, before the
// 8-bit one: 0.55, the 8-bit pass these queries give up being the
// difference).
//
// Scores are computed by the query's Score function, or by default by
// Dot (Σ_l w_l·k_jl in index order, without fused multiply-add): bitwise
// the model's P^a(j|i) (factor.Model.Prob), so that a top-k answer and a
// probability asked for the same pair agree to the last bit. The default
// score sums only the query's non-zero weights (a zero weight's term is
// +0, which leaves a sum unchanged: the same bits), so an item costs the
// one or two cache lines that hold those coordinates of its row, not all
// m; and the items the lists give are scored in batches of 16, whose
// random reads of K are in flight together. At n = 10^6, m = 32 these
// reads are the query's cost (docs/benchmarks.md).
//
// One extra coordinate (NewIndex's extra argument) makes the index serve
// an interpolated model λ·D_i K^j + (1−λ)·q_j: query weights (λ·w, 1−λ)
// over items (k_j, q_j).
//
// The package is pure: no I/O; an Index is immutable once built and safe
// for concurrent queries, each with its own Searcher.
package topk

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"
)

// Index is the sorted lists of one n×m item matrix (plus an optional extra
// coordinate). It references the items; it does not copy them.
type Index struct {
	n, m  int       // items, coordinates of the matrix (the extra one is m)
	dims  int       // m, or m+1 with an extra coordinate
	items []float64 // n×m row-major: item j is items[j*m:(j+1)*m]
	extra []float64 // the extra coordinate (nil: none)
	depth int       // entries kept per list
	ids   []int32   // dims lists of depth ids: list l is ids[l*depth:(l+1)*depth]
	vals  []float32 // their values, rounded up; vals of list l at depth is 0 when depth == n
	tail  []float32 // tail[l]: an upper bound of list l's values past depth (0 when depth == n)

	readLists  bool      // tests only: read the lists even when k > budget
	wantShadow bool      // QuantizedShadow
	budget32   int       // Float32ShadowBudget
	shadow     *shadow   // the 8-bit copy the fallback scans (nil: none)
	shadow32   *shadow32 // the float32 copy it scans when the 8-bit one gives up (nil: none)
}

// Hit is one answer: an item and its score.
type Hit struct {
	Item  int
	Score float64
}

// DefaultDepth is the list depth NewIndex keeps for n items: all of them
// up to 4096, else max(4096, n/16). A query that needs more falls back to
// the scan, so deeper lists would not be read.
func DefaultDepth(n int) int {
	return min(n, max(4096, n/16))
}

// NewIndex builds the lists of items (n rows of m non-negative values,
// row-major) and of extra (n values, or nil), each truncated to depth
// entries (0: DefaultDepth(n)), on up to workers goroutines (0: one),
// with the options opts (QuantizedShadow). It panics on mismatched
// lengths and returns an error for a negative or non-finite value (items
// come from a model, which is validated).
func NewIndex(items []float64, n, m int, extra []float64, depth, workers int, opts ...Option) (*Index, error) {
	if len(items) != n*m || extra != nil && len(extra) != n || n < 1 || m < 1 {
		panic(fmt.Sprintf("topk: NewIndex: %d items of %d×%d, %d extra", len(items), n, m, len(extra)))
	}
	if depth <= 0 {
		depth = DefaultDepth(n)
	}
	depth = min(depth, n)
	dims := m
	if extra != nil {
		dims++
	}
	ix := &Index{n: n, m: m, dims: dims, items: items, extra: extra, depth: depth,
		ids: make([]int32, dims*depth), vals: make([]float32, dims*depth), tail: make([]float32, dims),
		budget32: Float32Budget}
	for _, o := range opts {
		o(ix)
	}
	coord := func(l int) func(j int) float64 {
		if l == m {
			return func(j int) float64 { return extra[j] }
		}
		return func(j int) float64 { return items[j*m+l] }
	}
	for j, v := range items {
		if !(v >= 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("topk: item %d coordinate %d is %v: want a finite value >= 0", j/m, j%m, v)
		}
	}
	for j, v := range extra {
		if !(v >= 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("topk: item %d extra coordinate is %v: want a finite value >= 0", j, v)
		}
	}
	var wg sync.WaitGroup
	next := make(chan int, dims)
	for l := range dims {
		next <- l
	}
	close(next)
	for range max(1, min(workers, dims)) {
		wg.Go(func() {
			scratch := make([]entry, n)
			for l := range next {
				ix.buildList(l, coord(l), scratch)
			}
		})
	}
	wg.Wait()
	if ix.wantShadow {
		ix.shadow = newShadow(items, n, m, extra)
		if shadow32Bytes(n, dims) <= ix.budget32 {
			ix.shadow32 = newShadow32(items, n, m, extra)
		}
	}
	return ix, nil
}

// entry is an item of a list being built.
type entry struct {
	v float64
	j int32
}

// before orders entries: larger value first, then smaller item.
func before(a, b entry) int {
	if c := cmp.Compare(b.v, a.v); c != 0 {
		return c
	}
	return cmp.Compare(a.j, b.j)
}

// buildList fills list l: its first depth entries in order, selected from
// all n (quickselect), and the bound of the rest.
func (ix *Index) buildList(l int, val func(int) float64, es []entry) {
	for j := range es {
		es[j] = entry{val(j), int32(j)}
	}
	d := ix.depth
	if d < len(es) {
		selectFirst(es, d)
		tail := es[d]
		for _, e := range es[d+1:] {
			if e.v > tail.v {
				tail = e
			}
		}
		ix.tail[l] = roundUp(tail.v)
	}
	top := es[:d]
	slices.SortFunc(top, before)
	ids, vals := ix.ids[l*d:(l+1)*d], ix.vals[l*d:(l+1)*d]
	for k, e := range top {
		ids[k], vals[k] = e.j, roundUp(e.v)
	}
}

// selectFirst reorders es so that its first d entries are the d first in
// the order of before (in any order among themselves): quickselect with
// the median of three as pivot.
func selectFirst(es []entry, d int) {
	lo, hi := 0, len(es)
	for hi-lo > 16 {
		mid := lo + (hi-lo)/2
		a, b, c := es[lo], es[mid], es[hi-1]
		if before(a, b) > 0 {
			a, b = b, a
		}
		if before(b, c) > 0 {
			b = c
			if before(a, b) > 0 {
				b = a
			}
		}
		pivot := b
		// Three-way partition: [lo, lt) before pivot, [lt, gt) equal, [gt, hi) after.
		lt, i, gt := lo, lo, hi
		for i < gt {
			switch c := before(es[i], pivot); {
			case c < 0:
				es[lt], es[i] = es[i], es[lt]
				lt++
				i++
			case c > 0:
				gt--
				es[gt], es[i] = es[i], es[gt]
			default:
				i++
			}
		}
		switch {
		case d < lt:
			hi = lt
		case d > gt:
			lo = gt
		default:
			return
		}
	}
	slices.SortFunc(es[lo:hi], before)
}

// roundUp returns the smallest float32 >= v.
func roundUp(v float64) float32 {
	f := float32(v)
	if float64(f) < v {
		f = math.Nextafter32(f, float32(math.Inf(1)))
	}
	return f
}

// N returns the number of items, M the coordinates of the matrix, Depth
// the entries kept per list.
func (ix *Index) N() int     { return ix.n }
func (ix *Index) M() int     { return ix.m }
func (ix *Index) Depth() int { return ix.depth }

// Extra reports whether the index has an extra coordinate.
func (ix *Index) Extra() bool { return ix.extra != nil }

// Bytes returns the memory of the lists and of the shadows.
func (ix *Index) Bytes() int {
	b := 8 * len(ix.ids)
	if ix.shadow != nil {
		b += len(ix.shadow.codes) + 4*len(ix.shadow.scales)
	}
	if ix.shadow32 != nil {
		b += 4 * len(ix.shadow32.rows)
	}
	return b
}

// Shadow reports whether the index keeps an 8-bit shadow of the items
// (QuantizedShadow).
func (ix *Index) Shadow() bool { return ix.shadow != nil }

// Dot returns Σ_l w_l·k_l summed left to right without fused
// multiply-add: factor.Model.Prob's arithmetic, bit for bit.
func Dot(w, k []float64) float64 {
	k = k[:len(w)]
	s := 0.0
	for l, v := range w {
		s += float64(v * k[l])
	}
	return s
}

// Query is one top-k question.
type Query struct {
	// W holds the weights: m of them, plus one for the extra coordinate
	// when the index has one; all >= 0.
	W []float64
	// K is the number of answers wanted (at most n are given).
	K int
	// Score, when not nil, is the exact score of item j (for example a
	// smoothed probability); it must not exceed Σ_l W_l·(coordinate l of
	// j) by more than rounding. Nil: Dot(W[:m], item j) (plus W[m]·extra_j
	// with an extra coordinate).
	Score func(j int) float64
	// Budget is the most items scored through the lists before the query
	// scans instead (0: DefaultBudget of n and the lines a score reads).
	Budget int
}

// DefaultBudget is the default Query.Budget for n items whose scores
// each read lines cache lines of a row (the lines holding the query's
// non-zero weights' coordinates; a custom score: the whole row): n/128
// lines of random reads, n/(128·lines) items, at least 16. At n = 10^6,
// m = 32 (docs/benchmarks.md) a CPU profile of dense queries put 62 500
// items of four lines scored through the lists (random reads from DRAM,
// batched) at about the time of one scan of all 10^6 rows, so a query
// that spends its budget (1953 such items) costs about 1/32 of a float64
// scan before it scans; the queries of the structured model, two weights
// on one line, stop far below theirs (at most 898 items of 7812). The
// same rule holds at small n (a floor of 1024 items was many scans at
// n = 4 000, where an item through the lists costs about 20 rows of a
// scan): a structured query there that needs more than its budget scans
// the shadow (then float32, now 8-bit), a fraction of a float64 scan.
func DefaultBudget(n, lines int) int { return max(16, n/(128*max(1, lines))) }

// lines returns how many cache lines (64 bytes, 8 float64) of a row the
// coordinates act (ascending) touch, counting the extra coordinate, a
// separate array, as one: the rows of K^T start on a line when m is a
// multiple of 8, and the count is an estimate of the reads otherwise.
func (ix *Index) lines(act []int) int {
	c, last := 0, -1
	for _, l := range act {
		if l == ix.m || l>>3 != last {
			c++
			last = l >> 3
		}
	}
	return c
}

// Stats says how a query was answered.
type Stats struct {
	Lists   int  // lists read (non-zero weights)
	Sorted  int  // list entries read
	Scored  int  // items scored exactly
	Scanned bool // answered by the scan
	Shadow  bool // the scan was the 8-bit shadow's (see shadowScan)
	// Float32: the scan was the float32 copy's, the 8-bit shadow having
	// given the query up (see shadowScan).
	Float32 bool
	// Skipped: the lists were not read, the query wanting more items
	// than its budget (TopK).
	Skipped bool
	// Rescored is how many items the shadow scan could not exclude and
	// scored exactly (the items the lists scored are not scored again).
	Rescored int
}

// Searcher holds one goroutine's scratch space for queries. The zero
// value is ready to use.
type Searcher struct {
	// seen is an open-addressing set of the items scored in this query:
	// slot = epoch<<32 | item+1, a slot of another epoch is empty, so a
	// query starts with an empty set without clearing it. Small (a query
	// scores a few hundred items), it stays in cache where an n-long
	// array of marks would miss.
	seen  []uint64
	used  int
	epoch uint32
	heap  []Hit
	act   []int
	pos   []int
	pend  []int32

	// The shadow scans': the integer and float32 weights, a block's
	// kernel outputs, the heap of the k best lower bounds (or float32
	// scores), the candidates.
	w16  []int16
	w32  []float32
	out  []float32
	low  []float64
	cand []candidate
}

// minSeen is the initial size of the seen set.
const minSeen = 1 << 10

func (s *Searcher) reset() {
	if len(s.seen) == 0 {
		s.seen = make([]uint64, minSeen)
	}
	s.epoch++
	if s.epoch == 0 { // wrapped: every stamp is stale only after a clear
		clear(s.seen)
		s.epoch = 1
	}
	s.used = 0
	s.heap = s.heap[:0]
}

// see adds item j to the seen set and reports whether it was new.
func (s *Searcher) see(j int32) bool {
	mask := uint32(len(s.seen) - 1)
	key := uint64(s.epoch)<<32 | uint64(uint32(j)+1)
	for p := (uint32(j) * 0x9E3779B1) & mask; ; p = (p + 1) & mask {
		switch v := s.seen[p]; {
		case v == key:
			return false
		case uint32(v>>32) != s.epoch:
			s.seen[p] = key
			if s.used++; 2*s.used > len(s.seen) {
				s.grow()
			}
			return true
		}
	}
}

// grow doubles the seen set, keeping this query's items.
func (s *Searcher) grow() {
	old := s.seen
	s.seen, s.used = make([]uint64, 2*len(old)), 0
	for _, v := range old {
		if uint32(v>>32) == s.epoch {
			s.see(int32(uint32(v) - 1))
		}
	}
}

// worse orders hits for the answer: a lower score, or the same score and a
// larger item, is worse.
func worse(a, b Hit) bool {
	return a.Score < b.Score || a.Score == b.Score && a.Item > b.Item
}

// push offers h to the min-heap of the k best hits (its root the worst).
func (s *Searcher) push(h Hit, k int) {
	hs := s.heap
	if len(hs) < k {
		hs = append(hs, h)
		for i := len(hs) - 1; i > 0; {
			p := (i - 1) / 2
			if !worse(hs[i], hs[p]) {
				break
			}
			hs[i], hs[p] = hs[p], hs[i]
			i = p
		}
		s.heap = hs
		return
	}
	if !worse(hs[0], h) {
		return
	}
	hs[0] = h
	for i := 0; ; {
		c := 2*i + 1
		if c >= len(hs) {
			break
		}
		if c+1 < len(hs) && worse(hs[c+1], hs[c]) {
			c++
		}
		if !worse(hs[c], hs[i]) {
			break
		}
		hs[i], hs[c] = hs[c], hs[i]
		i = c
	}
}

// boundMargin makes a bound computed from rounded values safe against the
// rounding of the exact scores: a score exceeds its bound by at most a
// relative (m+2)·2^-52.
func boundMargin(dims int) float64 { return 1 + float64(dims+2)*0x1p-52 }

// TopK returns the q.K best items (score descending, then item ascending),
// appended to dst[:0], and how it found them. s is the caller's scratch
// space; nil allocates one.
func (ix *Index) TopK(q Query, s *Searcher, dst []Hit) ([]Hit, Stats) {
	if len(q.W) != ix.dims {
		panic(fmt.Sprintf("topk: query of %d weights on an index of %d coordinates", len(q.W), ix.dims))
	}
	if s == nil {
		s = &Searcher{}
	}
	k := min(q.K, ix.n)
	if k <= 0 {
		return dst[:0], Stats{}
	}
	score := q.Score
	if score == nil {
		score = ix.dotScore(q.W)
	}
	s.reset()
	var st Stats
	act := s.act[:0]
	for l, w := range q.W {
		if w < 0 || math.IsNaN(w) {
			panic(fmt.Sprintf("topk: weight %d is %v", l, w))
		}
		if w > 0 {
			act = append(act, l)
		}
	}
	s.act = act
	st.Lists = len(act)
	if len(act) == 0 { // every score is 0: the first k items
		for j := range k {
			s.push(Hit{j, score(j)}, k)
		}
		return s.sorted(dst), st
	}
	budget := q.Budget
	if budget <= 0 {
		var lines int
		switch {
		case q.Score == nil:
			lines = ix.lines(act)
		case act[len(act)-1] == ix.m: // a custom score reads the row and the extra coordinate
			lines = (ix.m+7)/8 + 1
		default:
			lines = (ix.m + 7) / 8
		}
		budget = DefaultBudget(ix.n, lines)
	}
	d := ix.depth
	// A query that wants more than its budget of items cannot fill its k
	// best through the lists within it (it scores at most budget items
	// before it gives up): it goes to the scan without reading them.
	// (Any bound of the k-th best score from the lists' values alone is
	// at least τ at depth k-1, so the values cannot tell earlier that a
	// query with k <= budget will fail: docs/benchmarks.md.)
	if k > budget && !ix.readLists {
		st.Scanned, st.Skipped = true, true
		if q.Score == nil {
			if hits, ok := ix.shadowScan(q.W, k, s, dst, &st); ok {
				return hits, st
			}
		}
		return ix.scan(q.W, q.Score, k, s, dst, &st), st
	}
	margin := boundMargin(ix.dims)
	pos := s.pos[:0] // entries read of each active list
	for range act {
		pos = append(pos, 0)
	}
	s.pos = pos
	pend := s.pend[:0] // items seen, not scored yet
	for {
		// τ: the bound of every item no list has given yet; and the list
		// whose term of τ is largest, which is read next (best first).
		tau, best, bestTerm := 0.0, -1, -1.0
		for x, l := range act {
			v := ix.tail[l]
			if pos[x] < d {
				v = ix.vals[l*d+pos[x]]
			}
			term := q.W[l] * float64(v)
			tau += term
			if pos[x] < d && term > bestTerm {
				best, bestTerm = x, term
			}
		}
		if len(s.heap) == k && s.heap[0].Score > tau*margin {
			// The pending items were seen before τ fell this low: they
			// may still enter the answer.
			ix.scoreBatch(q, pend, k, s)
			s.pend = pend[:0]
			return s.sorted(dst), st
		}
		if best < 0 || st.Scored >= budget {
			break
		}
		l := act[best]
		j := ix.ids[l*d+pos[best]]
		pos[best]++
		st.Sorted++
		if s.see(j) {
			st.Scored++
			if pend = append(pend, j); len(pend) == batch {
				ix.scoreBatch(q, pend, k, s)
				pend = pend[:0]
			}
		}
	}
	// The budget is spent, or the lists end before they prove the
	// answer: score everything, with the 8-bit shadow when the index
	// has one (the pending items are scored first: the shadow scan skips
	// the items the lists gave).
	st.Scanned = true
	if ix.shadow != nil && q.Score == nil {
		ix.scoreBatch(q, pend, k, s)
		s.pend = pend[:0]
		if hits, ok := ix.shadowScan(q.W, k, s, dst, &st); ok {
			return hits, st
		}
	}
	s.pend = pend[:0]
	return ix.scan(q.W, q.Score, k, s, dst, &st), st
}

// batch is how many items seen in the lists are scored together: their
// reads of K are independent, so the core has that many in flight at
// once instead of waiting for each in turn (the reads are random, from
// DRAM at n·m·8 bytes beyond the caches).
const batch = 16

// scoreBatch scores the items js and offers them to the heap of the k
// best. With the default score only the query's non-zero weights are
// read (s.act, ascending): a term w_l·k_jl with w_l = 0 is +0, and adding
// +0 leaves a sum unchanged, so the sum over them alone is Dot's, bit for
// bit, and reads one or two cache lines of item j instead of all m
// coordinates' when the query has few non-zero weights.
func (ix *Index) scoreBatch(q Query, js []int32, k int, s *Searcher) {
	var buf [batch]float64
	scores := buf[:len(js)]
	if q.Score != nil {
		for b, j := range js {
			scores[b] = q.Score(int(j))
		}
	} else {
		ix.sparseDots(q.W, s.act, js, scores)
	}
	for b, j := range js {
		s.push(Hit{int(j), scores[b]}, k)
	}
}

// sparseDots sets out[b] to the default score of item js[b], summing
// only the coordinates act (the non-zero weights, ascending).
func (ix *Index) sparseDots(w []float64, act []int, js []int32, out []float64) {
	m, items := ix.m, ix.items
	n := len(act)
	if n > 0 && act[n-1] == m { // the extra coordinate is summed last
		n--
	}
	lists := act[:n]
	for b, j := range js {
		row := items[int(j)*m : int(j)*m+m : int(j)*m+m]
		v := 0.0
		for _, l := range lists {
			v += float64(w[l] * row[l])
		}
		if n < len(act) {
			v += float64(w[m] * ix.extra[j])
		}
		out[b] = v
	}
}

// dotScore is the default score: Dot with the item (and the extra
// coordinate).
func (ix *Index) dotScore(w []float64) func(int) float64 {
	m := ix.m
	if ix.extra == nil {
		return func(j int) float64 { return Dot(w, ix.items[j*m:(j+1)*m]) }
	}
	return func(j int) float64 {
		return Dot(w[:m], ix.items[j*m:(j+1)*m]) + float64(w[m]*ix.extra[j])
	}
}

// sorted returns the heap's hits best first, appended to dst[:0].
func (s *Searcher) sorted(dst []Hit) []Hit {
	dst = append(dst[:0], s.heap...)
	slices.SortFunc(dst, func(a, b Hit) int {
		if worse(a, b) {
			return 1
		}
		if worse(b, a) {
			return -1
		}
		return 0
	})
	return dst
}
