package factor

import "slices"

// The row-major fused pass.
//
// A block's pass visits its nonzeros by column (colindex.go): each
// touched row of K is read once and its row of K̂ updated once, while
// the block's rows of D and D̂ are gathered from the cache. That pays
// when a column has several terms in the block, or when the touched rows
// of K are dense enough for the ascending sweep to stream them. At
// n = 10^6 with 20 nonzeros per row a default shard touches 12 % of K's
// rows, ≈ 1.07 terms each: nothing is saved on K, and the block's rows
// of D and D̂ (3.3 MB at m = 32, more than L2) become misses too.
// Visited row by row, a row of D is read once, in place in the model (no
// copy of the block's rows, which the column pass gathers from), and its
// row of D̂ summed in place (in the accumulator's own D̂ where the block
// is the first to touch the row: Passer.direct); the random rows of K
// and K̂ are prefetched (within a row by the kernel, 8 terms ahead; the
// next row's before a row runs). Whole
// iterations, one goroutine, in-process A/B of the two passes
// (docs/benchmarks.md, "Round 4 of the kernel"): n = 10^6 61 ns per
// nonzero by row against 88 by column (two goroutines 40 against 50);
// n = 500 000 (23 % of K's rows per shard) 64–80 against 87; n = 300 000
// (35 %) even; n = 150 000 (58 %) 61–65 against 47, the column pass's
// ascending sweep streaming K.
//
// Bitwise the same sums. Every row of D̂ receives its terms in column
// order either way (a row's columns ascend). A row of K̂ must receive a
// block's terms of that column summed from zero first, then added
// (compute): where the column has one term in the block that is the
// term itself (0 + w is w), so it goes straight in; the few columns with
// several terms (multi columns: ≈ 6 % of the touched columns at n = 10^6)
// have their rows of K̂ set aside and zeroed before the block's rows run,
// so that their terms are summed from zero in place, in row order (the
// order of a column's terms); the sum is then added to the row set aside.
// The g of the terms are computed in row order. With the loglik they are
// moved to their positions in column order (rowIndex.pos) once the
// block's rows ran, where the loglik sums and checks them as before;
// without it they are checked in row order and moved only to name the
// first bad term (termSum.finish). Moving them row by row, between the
// rows, cost up to a fifth of an iteration at n = 10^6: the misses on pos
// and gs held miss buffers that the prefetches of K and K̂ need
// (docs/benchmarks.md, "Round 5 of the kernel").
//
// The row pass runs where a destination takes the block's K̂ rows
// straight in without recording them (the accumulator's own arrays: one
// goroutine, or the pipeline's stages, each over its range of columns);
// useRows chooses it. It reads the rows of K from K^T even for a float32
// model: K^T holds the same float32 values as the model's float32 copy,
// which the column pass reads and widens exactly, so the sums are the
// same; the row pass gains more from its order than from the copy's
// halved lines (docs/benchmarks.md, "Round 4 of the kernel").

// rowsMinBytes is the size of a K block (n·m·8) from which the row pass
// may be chosen: below it K stays in cache, where the column pass's
// reuse of each row of K wins.
const rowsMinBytes = 32 << 20

// rowIndex is what a row-major pass needs beside a block's CSR and its
// column index, cached on the block for the whole fit (4 bytes per
// nonzero and 4 per multi column).
type rowIndex struct {
	// pos[q] is the position in the column index of CSR term q.
	pos []int32
	// mcols are the block's columns with several terms, ascending.
	mcols []int32
	// maxRow is the largest number of terms in a row.
	maxRow int
}

// rows returns b's row index (ci being b's column index), building and
// caching it on first use with scratch (as columns does).
func (b *Block) rows(ci *colIndex, scratch *[]int32) *rowIndex {
	if ri := b.rowIdx.Load(); ri != nil {
		return ri
	}
	if cap(*scratch) < ci.maxCol+1 {
		*scratch = make([]int32, ci.maxCol+1)
	}
	// next[j] is the column index position of column j's next term.
	next := (*scratch)[:ci.maxCol+1]
	nmc := 0
	for c, j := range ci.cols {
		next[j] = ci.ptr[c]
		if ci.ptr[c+1]-ci.ptr[c] > 1 {
			nmc++
		}
	}
	ri := &rowIndex{pos: make([]int32, len(b.Cols)), mcols: make([]int32, 0, nmc)}
	for c, j := range ci.cols {
		if ci.ptr[c+1]-ci.ptr[c] > 1 {
			ri.mcols = append(ri.mcols, j)
		}
	}
	for r := range b.Rows {
		lo, hi := b.Ptr[r], b.Ptr[r+1]
		ri.maxRow = max(ri.maxRow, int(hi-lo))
		for q := lo; q < hi; q++ {
			j := b.Cols[q]
			ri.pos[q] = next[j]
			next[j]++
		}
	}
	b.rowIdx.Store(ri)
	return ri
}

// useRows reports whether block b's fused pass into dst runs row by row
// (see the top of this file); s.rows forces either pass (tests).
func useRows(md *Model, ci *colIndex, s *Scratch, dst *kSum) bool {
	if dst == nil || !dst.bottom || len(ci.cols) == 0 {
		return false
	}
	switch s.rows {
	case rowsForce:
		return true
	case rowsNever:
		return false
	}
	return 4*len(ci.cols) <= md.N && 2*len(ci.vals) <= 3*len(ci.cols) && md.N*md.M*8 >= rowsMinBytes
}

// Values of Scratch.rows.
const (
	rowsAuto  = 0
	rowsForce = 1
	rowsNever = -1
)

// runFused runs the columns at positions [c0, c1) of block b's pass
// (prepared by prepare with s and p) into dst: by row where useRows says
// so, else by column (runColumns). Either way the sums are bitwise the
// same. It then adds the range's terms to sum (checked, and their loglik
// summed with withLogLik), which the caller finishes once every range
// ran.
func runFused(md *Model, b *Block, ci *colIndex, s *Scratch, p *Partial, c0, c1 int, dst *kSum, sum *termSum, withLogLik bool) error {
	end := int(ci.ptr[c1])
	if !useRows(md, ci, s, dst) {
		if err := runColumns(md, ci, s, p, c0, c1, nil, dst); err != nil {
			return err
		}
		sum.add(ci, s, withLogLik, end)
		return nil
	}
	// The last range finishes each row of D̂: it sums Y from the row
	// while it is in cache, in the order finish would.
	var y []float64
	if c0 < c1 && c1 == len(ci.cols) {
		y = p.Y
		sum.ySummed = true
	}
	bad := runRows(md, b, ci, b.rows(ci, &s.count), s, p, c0, c1, dst, withLogLik, y)
	if withLogLik {
		sum.add(ci, s, withLogLik, end)
		return nil
	}
	// Without the loglik only the check reads the g: it ran in row
	// order, and finish moves them to column order only to name the
	// first bad term.
	sum.bad = bad || sum.bad
	sum.rowOrder = true
	sum.done = end
	return nil
}

// rowsAhead caps how many terms of the next row runRows prefetches
// before a row: the rows of K and K̂ of more would leave L1 before use.
const rowsAhead = 32

// runRows is runColumns row by row for the columns at positions [c0, c1)
// of the column index: for each row of the block, its terms whose columns
// lie in that range, in column order (see the top of this file). Every
// term's g is left in s.gr at its CSR position; with toCols they are also
// moved to their column-order positions in s.gs (the loglik sums them
// there), else runRows reports whether one of them is not > 0. With y
// non-nil (the block's last range) it adds each row of D̂ to y once the
// row ran, in row order.
func runRows(md *Model, b *Block, ci *colIndex, ri *rowIndex, s *Scratch, p *Partial, c0, c1 int, dst *kSum, toCols bool, y []float64) (bad bool) {
	if c0 >= c1 {
		return false
	}
	m := md.M
	kt, dm := md.KT[md.KBlock(p.Action)], md.D[md.DBlock(p.Action)]
	kh := dst.kh
	lo, hi := ci.cols[c0], int32(md.N)
	if c1 < len(ci.cols) {
		hi = ci.cols[c1]
	}
	whole := c0 == 0 && c1 == len(ci.cols)
	// The multi columns of the range: their rows of K̂ set aside in
	// s.mk and zeroed, so that the block's terms of each are summed from
	// zero in place.
	m0, _ := slices.BinarySearch(ri.mcols, lo)
	m1, _ := slices.BinarySearch(ri.mcols, hi)
	s.mk = growTo(s.mk, len(ri.mcols)*m)
	saved := s.mk
	for r := m0; r < m1; r++ {
		if a := r + prefetchAhead; a < m1 {
			prefetchW(&kh[int(ri.mcols[a])*m], m*8)
		}
		j := int(ri.mcols[r]) * m
		copy(saved[r*m:r*m+m], kh[j:j+m])
		clear(kh[j : j+m])
	}
	s.gr = growTo(s.gr, len(b.Cols))
	if len(s.t) < max(m, ri.maxRow) {
		s.t = make([]float64, max(m, ri.maxRow))
	}
	gr, gs, t := s.gr, s.gs, s.t
	fast := m%4 == 0 && !s.pureGo && useAVX2()
	// span returns the terms of row r in the range.
	span := func(r int) (int64, int64) {
		a, e := b.Ptr[r], b.Ptr[r+1]
		if whole {
			return a, e
		}
		for a < e && b.Cols[a] < lo {
			a++
		}
		f := a
		for f < e && b.Cols[f] < hi {
			f++
		}
		return a, f
	}
	a, e := span(0)
	for r := range b.Rows {
		na, ne := int64(0), int64(0)
		if r+1 < len(b.Rows) {
			na, ne = span(r + 1)
			// The next row's terms (all of them at 20 per row; a long
			// row's first rowsAhead): the kernel prefetches 8 terms ahead
			// within a row, not across rows.
			if k := min(ne-na, rowsAhead); k > 0 {
				prefetchIdx(&kt[0], &kh[0], &b.Cols[na], int(k), m*8)
			}
		}
		dh := blockDh(b, s, p, r, m)
		if a < e {
			i := int(b.Rows[r]) * m
			d := dm[i : i+m]
			if fast {
				runAVX2(&d[0], &dh[0], &kt[0], &kh[0], &t[0], &b.Cols[a], &b.Vals[a], &gr[a], int(e-a), m*8)
			} else {
				tm := t[:m]
				for q := a; q < e; q++ {
					j := int(b.Cols[q]) * m
					g := prodSum(tm, d, kt[j:j+m])
					gr[q] = g
					scatter(b.Vals[q]/g, tm, dh, kh[j:j+m])
				}
			}
			if !toCols {
				for _, g := range gr[a:e] {
					if !(g > 0) {
						bad = true
					}
				}
			}
		}
		if y != nil {
			addTo(y, dh)
		}
		a, e = na, ne
	}
	// The g to column order for the loglik, after the rows: interleaved
	// with them, the misses on pos and gs held miss buffers that the
	// prefetches of K and K̂ need.
	if toCols {
		if whole {
			for q, c := range ri.pos {
				gs[c] = gr[q]
			}
		} else {
			// The rows' spans again: a test of each term's position
			// instead would mispredict about half the time on two stages.
			for r := range b.Rows {
				a, e := span(r)
				for q := a; q < e; q++ {
					gs[ri.pos[q]] = gr[q]
				}
			}
		}
	}
	// Each multi column's sum added to its row of K̂ as set aside:
	// what compute adds.
	for r := m0; r < m1; r++ {
		if a := r + prefetchAhead; a < m1 {
			prefetchW(&kh[int(ri.mcols[a])*m], m*8)
		}
		j := int(ri.mcols[r]) * m
		row, old := kh[j:j+m], saved[r*m:r*m+m]
		for l, v := range row {
			w := old[l]
			w += v
			row[l] = w
		}
	}
	return bad
}

// growTo returns x at length n, reusing its memory when it has room
// (the values are left as they are: the callers write before they read).
func growTo(x []float64, n int) []float64 {
	if cap(x) < n {
		return make([]float64, n, n+n/4)
	}
	return x[:n]
}
