package factor

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
)

// TransitionError reports an observed transition to which the model gives
// probability zero (possible only with sparsity masks); EM cannot explain it.
type TransitionError struct {
	Action   int
	From, To int
	Count    float64
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("factor: observed transition %d --%d--> %d (count %v) has probability 0 under the model "+
		"(D[%d,l]·K[l,%d] = 0 for every hidden state l: a sparsity mask excludes it, or the model was fitted to data "+
		"without transitions to %d, or entries underflowed after many commits with α < 1; factor.Model.Smooth makes every transition possible)",
		e.From, e.Action, e.To, e.Count, e.From, e.To, e.To)
}

// Partial holds the sufficient statistics of one Block under one model: the
// numerators of the D and K updates for the rows and columns the block
// touches. Partials of different blocks are merged by Accumulator.Merge.
type Partial struct {
	Action int
	// Rows are the block's rows; Dh[r*m:(r+1)*m] and X[r] belong to Rows[r].
	Rows []int32
	Dh   []float64
	X    []float64
	// Cols are the columns the block touches, ascending; KhT[c*m:(c+1)*m]
	// belongs to Cols[c].
	Cols []int32
	KhT  []float64
	// Y[l] = Σ of all posterior weights of hidden state l.
	Y []float64
	// SumX is Σ X, which must equal the block's Σc.
	SumX float64
	// LogLik is Σ c·log g, or NaN when it was not computed.
	LogLik float64
	NNZ    int
}

// Scratch is the per-goroutine working memory of Compute, reused across
// blocks. The zero value is ready; it is not safe for concurrent use.
type Scratch struct {
	dl []float64 // the block's rows of D, n_r×m (a column pass)
	gs []float64 // g of every nonzero, in column order
	t  []float64 // d ⊙ k of the current nonzero (pure Go); c/g of a column's nonzeros (AVX2)
	// col is a column's K̂ row summed from zero, in a fused pass.
	col []float64
	// k is the current row of K widened from a Float32 model's copy.
	k []float64
	// count is the working memory of building a block's column index.
	count []int32
	// pureGo forces the pure-Go kernel (tests compare it with AVX2).
	pureGo bool
	// rows forces the row pass (rowsForce) or the column pass
	// (rowsNever) where useRows would choose (tests); gr holds the g of
	// a row pass in CSR order, mk the rows of K̂ it sets aside
	// (rowpass.go).
	rows int8
	gr   []float64
	mk   []float64
	// dhAcc, when not nil, is the accumulator's D̂ of the block's D
	// block: a row pass sums the block's rows of D̂ straight into it,
	// not into p.Dh (Passer.direct says when that is bitwise the same).
	// prepare drops it where the pass runs by column.
	dhAcc []float64
}

// Compute fills p with the statistics of block b under model md: one fused
// pass over the nonzeros, no allocation per nonzero (p's slices are reused
// when large enough). When withLogLik is false the logarithms are skipped
// and p.LogLik is NaN.
//
// The pass runs column by column (see colindex.go): each touched row of K
// is read once and its row of K̂ accumulated in place in p.KhT, while the
// block's rows of D and D̂ (a few hundred KiB) stay in cache. Every row
// of D̂ and K̂ still receives its terms in the order of a row-major pass
// (rows ascending, columns ascending within a row); the loglik sums its
// terms in the column-major order of the pass (since tree-v1: it needs no
// map from CSR to column positions, 4 bytes per nonzero kept all fit).
func Compute(md *Model, b *Block, s *Scratch, p *Partial, withLogLik bool) error {
	return ComputeStreamed(md, b, s, p, withLogLik, nil)
}

// ComputeStreamed is Compute on a model whose rows of K arrive while it
// runs (a cluster worker computes while it fetches them): before the pass
// reads row j of the block's K it calls avail(j), unless an earlier call
// returned a bound above j. avail returns once at least rows 0..j of that
// K block are in place, with the number of rows in place, or an error,
// which ComputeStreamed returns (p is then incomplete). Columns are
// visited in the same order whatever avail does, so the partial is
// bitwise that of Compute. A nil avail means every row is in place.
func ComputeStreamed(md *Model, b *Block, s *Scratch, p *Partial, withLogLik bool, avail func(j int) (int, error)) error {
	return compute(md, b, s, p, withLogLik, avail, nil)
}

// prefetchAhead is how many columns ahead of the pass the rows of K (and,
// in a fused pass, of the accumulator's K̂) are prefetched. At n = 10^6 a
// default shard has ≈ 1.07 nonzeros per touched column, so this is also
// about how many nonzeros ahead. 4, 16 and 32 were tried and were within
// the noise of a loaded machine (docs/benchmarks.md, "DRAM-regime kernel").
const prefetchAhead = 8

// compute is Compute and ComputeStreamed. With dst nil it fills p.Cols and
// p.KhT; otherwise it adds the block's K̂ rows straight into dst (the
// reduction's current group, see Reducer.dest) and leaves p.Cols and
// p.KhT empty. Each row of dst then receives the block's terms of that
// row summed from zero first, then added: bitwise what merging p.KhT
// into it would do, without writing p.KhT and reading it back (31 MB per
// default shard at n = 10^6) or a second random pass over K̂.
func compute(md *Model, b *Block, s *Scratch, p *Partial, withLogLik bool, avail func(j int) (int, error), dst *kSum) error {
	ci, err := prepare(md, b, s, p, dst)
	if err != nil {
		return err
	}
	var t termSum
	if avail == nil && dst != nil {
		err = runFused(md, b, ci, s, p, 0, len(ci.cols), dst, &t, withLogLik)
	} else if err = runColumns(md, ci, s, p, 0, len(ci.cols), avail, dst); err == nil {
		t.add(ci, s, withLogLik, len(ci.vals))
	}
	if err != nil {
		return err
	}
	return t.finish(b, ci, s, p, withLogLik)
}

// prepare starts block b's pass: it sizes and zeroes p, copies the
// block's rows of D into s (unless the pass runs by row, which reads each
// once, in place) and returns the block's column index. With dst non-nil
// (a fused pass) p.Cols and p.KhT stay empty (the K̂ rows go to dst, see
// compute).
func prepare(md *Model, b *Block, s *Scratch, p *Partial, dst *kSum) (*colIndex, error) {
	n, m := md.N, md.M
	if err := b.CheckShape(n, md.U); err != nil {
		return nil, err
	}
	d := md.D[md.DBlock(b.Action)]
	nr := len(b.Rows)
	ci := b.columns(&s.count)

	p.Action = b.Action
	p.Rows = copyIdx(p.Rows, b.Rows)
	if s.dhAcc != nil && !useRows(md, ci, s, dst) {
		s.dhAcc = nil
	}
	if s.dhAcc != nil {
		p.Dh = p.Dh[:0] // the rows go to s.dhAcc
	} else {
		p.Dh = resize(p.Dh, nr*m)
	}
	p.X = resize(p.X, nr)
	p.Y = resize(p.Y, m)
	if dst != nil {
		p.Cols, p.KhT = p.Cols[:0], p.KhT[:0]
	} else {
		p.Cols = copyIdx(p.Cols, ci.cols)
		p.KhT = resize(p.KhT, len(ci.cols)*m)
	}
	p.NNZ = b.NNZ()

	if !useRows(md, ci, s, dst) {
		s.dl = resize(s.dl, nr*m)
		for r, i := range b.Rows {
			copy(s.dl[r*m:r*m+m], d[int(i)*m:int(i)*m+m])
		}
	}
	if cap(s.gs) < len(ci.vals) {
		s.gs = make([]float64, len(ci.vals), len(ci.vals)+len(ci.vals)/4)
	}
	s.gs = s.gs[:len(ci.vals)]
	s.t = resize(s.t, max(m, nr))
	s.col = resize(s.col, m)
	s.k = resize(s.k, m)
	return ci, nil
}

// colArgs are runColsAVX2's arguments; kernel_amd64.s reads the fields
// at fixed offsets (TestColArgsLayout checks them).
type colArgs struct {
	kt, kh   *float64 // K^T's block; K̂'s destination (see runColsAVX2)
	dl, dhl  *float64 // the block's rows of D and of D̂
	sv, col  *float64 // scratch: c/g of a column's terms; one row of K̂
	cols     *int32   // the column index (colIndex)
	ptr      *int32
	rows     *int32
	vals, gs *float64
	c0, c1   int      // column positions [c0, c1)
	mbytes   int      // 8·m
	fused    int      // 1: K̂ rows of the columns go to rows j of kh
	ahead    int      // prefetch distance in columns
	z512     int      // 1: scatter in AVX-512 (m a multiple of 8)
	kt32     *float32 // non-nil: rows of K from this float32 copy
	k        *float64 // scratch row: a widened row of kt32
}

// runColumns runs the pass over the columns at positions [c0, c1) of the
// block's column index (prepared by prepare with s and p), adding into
// p.KhT or, with dst non-nil, into dst (see compute). The block's
// columns must be run in ascending ranges, each after the one before it
// finished: a row of D̂ receives its terms in column order.
func runColumns(md *Model, ci *colIndex, s *Scratch, p *Partial, c0, c1 int, avail func(j int) (int, error), dst *kSum) error {
	n, m := md.N, md.M
	kt := md.KT[md.KBlock(p.Action)]
	gs, t := s.gs, s.t[:m]
	fast := m%4 == 0 && !s.pureGo && useAVX2()
	have := n
	// kt32 is the float32 copy of a Float32 model's K (its rows widen
	// exactly to those of kt); a streamed pass reads the rows kt receives.
	var kt32 []float32
	if avail != nil {
		have = 0
	} else {
		kt32 = md.kt32For(md.KBlock(p.Action))
	}
	// need waits until row j of K is in place (a streamed pass).
	need := func(j int) error {
		if j < have {
			return nil
		}
		var err error
		if have, err = avail(j); err != nil {
			return err
		}
		if j >= have {
			return fmt.Errorf("factor: row %d of K not in place (%d rows are)", j, have)
		}
		return nil
	}
	if fast && c0 < c1 && (dst == nil || dst.bottom) {
		// The whole range in assembly, or with rows of K arriving during
		// the pass, each range of columns whose rows are in place. (A
		// destination that records the rows it receives takes the loop
		// below.)
		a := colArgs{kt: &kt[0], dl: &s.dl[0], dhl: &p.Dh[0], sv: &s.t[0], col: &s.col[0],
			cols: &ci.cols[0], ptr: &ci.ptr[0], rows: &ci.rows[0], vals: &ci.vals[0], gs: &gs[0],
			c0: c0, c1: c1, mbytes: m * 8, ahead: prefetchAhead}
		if m%8 == 0 && useAVX512() {
			a.z512 = 1
		}
		if kt32 != nil {
			a.kt32, a.k = &kt32[0], &s.k[0]
		}
		if dst == nil {
			a.kh = &p.KhT[0]
		} else {
			a.kh, a.fused = &dst.kh[0], 1
		}
		if avail == nil {
			runColsAVX2(&a)
			return nil
		}
		for c := c0; c < c1; {
			if err := need(int(ci.cols[c])); err != nil {
				return err
			}
			// Columns ascend: those before the first row not in place.
			e := c + sort.Search(c1-c, func(i int) bool { return int(ci.cols[c+i]) >= have })
			a.c0, a.c1 = c, e
			runColsAVX2(&a)
			c = e
		}
		return nil
	}
	cols := ci.cols[:c1]
	for c := c0; c < c1; c++ {
		j := cols[c]
		if err := need(int(j)); err != nil {
			return err
		}
		if a := c + prefetchAhead; a < c1 {
			ja := int(cols[a]) * m
			switch {
			case kt32 != nil:
				prefetchR32(&kt32[ja], m*4)
				if dst != nil {
					prefetchW(&dst.kh[ja], m*8)
				}
			case dst == nil:
				prefetchR(&kt[ja], m*8)
			default:
				prefetchRW(&kt[ja], &dst.kh[ja], m*8)
			}
		}
		lo, hi := ci.ptr[c], ci.ptr[c+1]
		var krow []float64
		switch {
		case kt32 == nil:
			krow = kt[int(j)*m : int(j)*m+m]
		case fast:
			krow = s.k
			widenAVX2(&krow[0], &kt32[int(j)*m], m)
		default:
			krow = s.k
			widen(krow, kt32[int(j)*m:int(j)*m+m])
		}
		var kh []float64
		switch {
		case dst == nil:
			kh = p.KhT[c*m : c*m+m]
		case hi-lo == 1:
			// One term: 0 + w is w exactly, so it goes straight in.
			dst.touch(j)
			kh = dst.kh[int(j)*m : int(j)*m+m]
		default:
			clear(s.col)
			kh = s.col
		}
		if fast {
			// The roles of D and K swap: the fixed vector is row j of K,
			// the gathered rows are the block's rows of D.
			runAVX2(&krow[0], &kh[0], &s.dl[0], &p.Dh[0], &s.t[0], &ci.rows[lo], &ci.vals[lo], &gs[lo], int(hi-lo), m*8)
		} else {
			for q := lo; q < hi; q++ {
				r := int(ci.rows[q])
				g := prodSum(t, s.dl[r*m:r*m+m], krow)
				gs[q] = g
				scatter(ci.vals[q]/g, t, p.Dh[r*m:r*m+m], kh)
			}
		}
		if dst != nil && hi-lo > 1 {
			dst.touch(j)
			addTo(dst.kh[int(j)*m:int(j)*m+m], s.col)
		}
	}
	return nil
}

// termSum checks the g of a block's terms and sums their loglik in the
// pass's (column-major) order, a range of terms at a time: the stages of
// a pipelined pass each add the terms of their columns, continuing the
// previous stage's sum, so the sum is the one-goroutine sum bitwise
// while each stage reads the g it has just written.
type termSum struct {
	done int     // terms [0, done) added
	ll   float64 // Σ v·log(g) over them, in order
	bad  bool    // some g among them is not > 0
	// rowOrder: some of the terms ran by row without the loglik, their
	// g left in s.gr in CSR order only (runFused).
	rowOrder bool
	// ySummed: the last range ran by row and summed p.Y as each row of
	// D̂ was done (runFused).
	ySummed bool
}

// add adds terms [t.done, end).
func (t *termSum) add(ci *colIndex, s *Scratch, withLogLik bool, end int) {
	gs := s.gs[t.done:end]
	for _, g := range gs {
		if !(g > 0) {
			t.bad = true
			break
		}
	}
	if withLogLik && !t.bad {
		t.ll = logSum(t.ll, gs, ci.vals[t.done:end], s.pureGo)
	}
	t.done = end
}

// finish ends the block's pass once every term was added: it names the
// first bad term, if any, and fills p.X, p.SumX, p.Y and p.LogLik.
func (t *termSum) finish(b *Block, ci *colIndex, s *Scratch, p *Partial, withLogLik bool) error {
	m := len(p.Y)
	if t.done != len(ci.vals) {
		panic("factor: block finished before every term was summed")
	}
	if t.bad {
		gs := s.gs
		if t.rowOrder {
			// Every stage ran by row: all the g are in s.gr.
			for q, c := range b.rowIdx.Load().pos {
				gs[c] = s.gr[q]
			}
		}
		for c, j := range ci.cols {
			for q := ci.ptr[c]; q < ci.ptr[c+1]; q++ {
				if g := gs[q]; !(g > 0) {
					return &TransitionError{Action: b.Action, From: int(b.Rows[ci.rows[q]]), To: int(j), Count: ci.vals[q]}
				}
			}
		}
	}
	copy(p.X, ci.x)
	p.SumX = ci.sumX
	if !t.ySummed {
		for r := range b.Rows {
			addTo(p.Y, blockDh(b, s, p, r, m))
		}
	}
	if withLogLik {
		p.LogLik = t.ll
	} else {
		p.LogLik = math.NaN()
	}
	return nil
}

// blockDh returns the row of D̂ of the block's row r: in p.Dh, or where
// the pass sums it straight into the accumulator (s.dhAcc).
func blockDh(b *Block, s *Scratch, p *Partial, r, m int) []float64 {
	if s.dhAcc != nil {
		i := int(b.Rows[r]) * m
		return s.dhAcc[i : i+m]
	}
	return p.Dh[r*m : r*m+m]
}

// logSum returns ll + Σ v_q·log(g_q), each term added in order, for
// positive g (each product rounded before it is added: float64(...)
// forbids a fused multiply-add). With AVX-512 the logarithms and products
// run eight at a time, bitwise those of math.Log on amd64
// (logSumAVX512); with AVX2 the logarithms four at a time (logAll, the
// same bits), the terms added one by one; pureGo (tests) keeps the scalar
// loop.
func logSum(ll float64, g, v []float64, pureGo bool) float64 {
	q := 0
	if !pureGo && !useLogAVX512() && useAVX2() {
		var buf [256]float64
		for q < len(g) {
			lg := buf[:min(len(buf), len(g)-q)]
			logAll(lg, g[q:q+len(lg)])
			for k, x := range lg {
				ll += float64(v[q+k] * x)
			}
			q += len(lg)
		}
		return ll
	}
	if !pureGo && useLogAVX512() {
		for len(g)-q >= 8 {
			q += 8 * logSumAVX512(&ll, &g[q], &v[q], (len(g)-q)/8)
			if len(g)-q < 8 {
				break
			}
			// A group with an infinite g: math.Log returns it as it is.
			for end := q + 8; q < end; q++ {
				ll += float64(v[q] * math.Log(g[q]))
			}
		}
	}
	for ; q < len(g); q++ {
		ll += float64(v[q] * math.Log(g[q]))
	}
	return ll
}

// prodSum sets t_l = d_l·k_l and returns Σ t_l. Four partial sums break the
// dependency chain; the order is fixed, so the result is deterministic.
// float64(...) conversions forbid fused multiply-add (bitwise reproducibility
// across machines).
func prodSum(t, d, k []float64) float64 {
	m := len(t)
	d, k = d[:m], k[:m]
	var g0, g1, g2, g3 float64
	l := 0
	for ; l <= m-4; l += 4 {
		tt, dd, kk := (*[4]float64)(t[l:]), (*[4]float64)(d[l:]), (*[4]float64)(k[l:])
		t0 := float64(dd[0] * kk[0])
		t1 := float64(dd[1] * kk[1])
		t2 := float64(dd[2] * kk[2])
		t3 := float64(dd[3] * kk[3])
		tt[0], tt[1], tt[2], tt[3] = t0, t1, t2, t3
		g0 += t0
		g1 += t1
		g2 += t2
		g3 += t3
	}
	for ; l < m; l++ {
		t[l] = float64(d[l] * k[l])
		g0 += t[l]
	}
	return (g0 + g1) + (g2 + g3)
}

// scatter adds w_l = s·t_l to dh_l and kh_l.
func scatter(s float64, t, dh, kh []float64) {
	dh, kh = dh[:len(t)], kh[:len(t)]
	for l, v := range t {
		w := float64(s * v)
		dh[l] += w
		kh[l] += w
	}
}

// addTo adds src to dst elementwise.
func addTo(dst, src []float64) {
	dst = dst[:len(src)]
	for l, v := range src {
		dst[l] += v
	}
}

// copyIdx returns a copy of src in dst's memory when it has room, else in
// a new slice with 1/4 headroom (see resize).
func copyIdx(dst, src []int32) []int32 {
	if cap(dst) < len(src) {
		dst = make([]int32, 0, len(src)+len(src)/4)
	}
	return append(dst[:0], src...)
}

// resize returns x zeroed at length n, reusing its memory when it has
// room. A new slice gets 1/4 headroom: the blocks of a pass need sizes
// that differ by a few percent, and a reused partial that grew to each new
// largest one would leave a trail of garbage its own size (hundreds of MB
// at n = 10^6, and Go's GC lets the heap grow to twice the live data).
func resize(x []float64, n int) []float64 {
	if cap(x) < n {
		return make([]float64, n, n+n/4)
	}
	x = x[:n]
	clear(x)
	return x
}

// Accumulator sums Partials over all blocks of a pass, per D and K block of
// the model: Dh and X per D block (n×m and n), KhT and Y per K block (n×m
// and m). A pass fills it through a Reducer, in the canonical order
// (ReducePlan); Merge adds one partial (a left fold, as Incremental uses
// it); Commit turns the sums into the next model.
type Accumulator struct {
	N, M, U int
	Tie     Tie
	Dh, X   [][]float64
	KhT, Y  [][]float64
	// LogLik is Σ of the partials' LogLik; NaN if any partial skipped it.
	LogLik float64
	// SumX is Σ of the partials' SumX: the total count seen this pass.
	SumX float64
	NNZ  int
	// KLogLik, KSumX and KNNZ are LogLik, SumX and NNZ per K block: the
	// sums of the partials of that block's actions, each in the order
	// of the block's reduction tree (Reducer) or of the merges, so a K
	// block's sums do not depend on the other blocks of the pass, or on
	// whether they were computed at all (squaremLoop's components).
	KLogLik, KSumX []float64
	KNNZ           []int
	// idle, when set, marks the actions of a model without ties whose
	// blocks the passes leave out (localStepper.SetActive): reset leaves
	// their sums as they are, which no one reads.
	idle []bool
}

// addK adds a partial's (or a reduction tree's) scalars to K block kb's.
func (a *Accumulator) addK(kb int, ll, sx float64, nnz int) {
	if k := NumK(a.U, a.Tie); len(a.KLogLik) < k {
		a.KLogLik, a.KSumX, a.KNNZ = make([]float64, k), make([]float64, k), make([]int, k)
	}
	a.KLogLik[kb] += ll
	a.KSumX[kb] += sx
	a.KNNZ[kb] += nnz
}

// blockView returns an accumulator of the statistics of action a alone,
// of a model without ties (TieNone): its D and K blocks' sums and
// scalars, shared with a (not copied), shaped as a one-action model's
// (Model.blockView).
func (a *Accumulator) blockView(act int) *Accumulator {
	v := &Accumulator{N: a.N, M: a.M, U: 1, Tie: TieNone,
		Dh: [][]float64{a.Dh[act]}, X: [][]float64{a.X[act]}, KhT: [][]float64{a.KhT[act]}, Y: [][]float64{a.Y[act]}}
	if act < len(a.KLogLik) {
		v.LogLik, v.SumX, v.NNZ = a.KLogLik[act], a.KSumX[act], a.KNNZ[act]
	}
	v.KLogLik, v.KSumX, v.KNNZ = []float64{v.LogLik}, []float64{v.SumX}, []int{v.NNZ}
	return v
}

// NewScalarAccumulator returns an accumulator of a pass's Y, loglik, Σx
// and nonzero count only (N = 0: no D̂ or K̂), for models with m hidden
// states, u actions and tie mode tie: what a coordinator that only
// sequences folds (the owners of K's columns fold K̂). Partials merged into
// it carry no rows or columns; a Reducer folds their Y in the canonical
// order, bitwise as it folds them into a full accumulator.
func NewScalarAccumulator(m, u int, tie Tie) *Accumulator {
	return NewAccumulator(&Model{N: 0, M: m, U: u, Tie: tie})
}

// NewAccumulator returns an empty accumulator for models of md's shape.
func NewAccumulator(md *Model) *Accumulator {
	a := &Accumulator{N: md.N, M: md.M, U: md.U, Tie: md.Tie}
	n, m := md.N, md.M
	for range NumD(md.U, md.Tie) {
		a.Dh = append(a.Dh, bigFloats(n*m))
		a.X = append(a.X, make([]float64, n))
	}
	for range NumK(md.U, md.Tie) {
		a.KhT = append(a.KhT, bigFloats(n*m))
		a.Y = append(a.Y, make([]float64, m))
	}
	return a
}

// Reset zeroes all sums.
func (a *Accumulator) Reset() { a.reset(1) }

// resetParMin is the size of D̂ and K̂ together (bytes) from which reset
// clears them on several goroutines: at n = 10^6, m = 32 (512 MB) one
// goroutine took ≈ 1.0 ns per nonzero of an iteration, two ≈ 0.6
// (docs/benchmarks.md, "Round 6 of the kernel").
const resetParMin = 64 << 20

// reset is Reset with D̂ and K̂ cleared on workers goroutines, each
// taking its part of every array, where they are big enough to gain.
func (a *Accumulator) reset(workers int) {
	big := slices.Concat(a.Dh, a.KhT)
	small := slices.Concat(a.X, a.Y)
	if a.idle != nil && a.Tie == TieNone {
		big, small = big[:0], small[:0]
		for b, idle := range a.idle {
			if !idle {
				big, small = append(big, a.Dh[b], a.KhT[b]), append(small, a.X[b], a.Y[b])
			}
		}
	}
	if workers > 1 && len(big)*a.N*a.M*8 >= resetParMin {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, x := range big {
					clear(x[len(x)*w/workers : len(x)*(w+1)/workers])
				}
			}()
		}
		wg.Wait()
	} else {
		for _, x := range big {
			clear(x)
		}
	}
	for _, x := range small {
		clear(x)
	}
	a.LogLik, a.SumX, a.NNZ = 0, 0, 0
	clear(a.KLogLik)
	clear(a.KSumX)
	clear(a.KNNZ)
}

// Merge adds a partial. It checks the partial's dimensions, indices and
// values (finite, non-negative) and that Σ X = SumX, returning an error
// before changing anything if one fails.
func (a *Accumulator) Merge(p *Partial) error {
	if err := a.check(p); err != nil {
		return err
	}
	a.add(p)
	return nil
}

// checkComputed checks a partial that Compute produced in this process
// from a validated model, where Merge would check every value. All
// posterior weights are ≥ 0 by construction, and each weight w is added
// both to a row of Dh and to a row of KhT, while Y is the sum of Dh's
// rows, so an infinite or NaN weight anywhere makes Y non-finite.
// Checking Y (m values) is therefore as strong as checking them all.
func checkComputed(p *Partial) error {
	for l, v := range p.Y {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("factor: partial of action %d: Y[%d] = %v is not finite and non-negative", p.Action, l, v)
		}
	}
	return nil
}

// add adds a checked partial: a left fold, the order of Merge (the
// order of a pass is the Reducer's).
func (a *Accumulator) add(p *Partial) {
	m := a.M
	kb := p.Action
	if a.Tie == TieSharedK {
		kb = 0
	}
	a.addRows(p, true)
	kh := a.KhT[kb]
	for c, j := range p.Cols {
		dst := kh[int(j)*m : int(j)*m+m]
		for l, v := range p.KhT[c*m : c*m+m] {
			dst[l] += v
		}
	}
	for l, v := range p.Y {
		a.Y[kb][l] += v
	}
	a.LogLik += p.LogLik
	a.SumX += p.SumX
	a.NNZ += p.NNZ
	a.addK(kb, p.LogLik, p.SumX, p.NNZ)
}

// addRows adds a checked partial's x and, withDh, its rows of D̂ (a
// pass that summed them straight into a.Dh has none: Scratch.dhAcc).
func (a *Accumulator) addRows(p *Partial, withDh bool) {
	m := a.M
	db := p.Action
	if a.Tie == TieSharedD {
		db = 0
	}
	x := a.X[db]
	for r, i := range p.Rows {
		x[i] += p.X[r]
	}
	if !withDh {
		return
	}
	dh := a.Dh[db]
	for r, i := range p.Rows {
		dst := dh[int(i)*m : int(i)*m+m]
		for l, v := range p.Dh[r*m : r*m+m] {
			dst[l] += v
		}
	}
}

// MergeChecked is Merge for a partial whose values CheckPartialValues
// accepted (a coordinator checks them as each partial arrives, in
// parallel, and merges in the canonical order): it checks dimensions and
// indices only, then adds.
func (a *Accumulator) MergeChecked(p *Partial) error {
	if err := a.checkShape(p); err != nil {
		return err
	}
	a.add(p)
	return nil
}

func (a *Accumulator) check(p *Partial) error {
	if err := a.checkShape(p); err != nil {
		return err
	}
	return CheckPartialValues(p)
}

// checkShape checks a partial's action, dimensions and indices.
func (a *Accumulator) checkShape(p *Partial) error {
	m, n := a.M, a.N
	if p.Action < 0 || p.Action >= a.U {
		return fmt.Errorf("factor: partial action %d out of range [0, %d)", p.Action, a.U)
	}
	if len(p.Dh) != len(p.Rows)*m || len(p.X) != len(p.Rows) || len(p.KhT) != len(p.Cols)*m || len(p.Y) != m {
		return fmt.Errorf("factor: partial of action %d has inconsistent dimensions (rows %d, Dh %d, X %d, cols %d, KhT %d, Y %d, m %d)",
			p.Action, len(p.Rows), len(p.Dh), len(p.X), len(p.Cols), len(p.KhT), len(p.Y), m)
	}
	for k, i := range p.Rows {
		if i < 0 || int(i) >= n || (k > 0 && i <= p.Rows[k-1]) {
			return fmt.Errorf("factor: partial of action %d: row %d at position %d is out of range or out of order", p.Action, i, k)
		}
	}
	for k, j := range p.Cols {
		if j < 0 || int(j) >= n || (k > 0 && j <= p.Cols[k-1]) {
			return fmt.Errorf("factor: partial of action %d: column %d at position %d is out of range or out of order", p.Action, j, k)
		}
	}
	return nil
}

// CheckPartialValues returns an error unless every value of p is finite
// and non-negative, Σ X equals SumX and the loglik is not infinite: the
// checks of Merge that do not depend on the model's shape.
func CheckPartialValues(p *Partial) error {
	for _, f := range [...]struct {
		name string
		xs   []float64
	}{{"Dh", p.Dh}, {"X", p.X}, {"KhT", p.KhT}, {"Y", p.Y}} {
		name := f.name
		for k, v := range f.xs {
			if !(v >= 0) || math.IsInf(v, 0) {
				return fmt.Errorf("factor: partial of action %d: %s[%d] = %v is not finite and non-negative", p.Action, name, k, v)
			}
		}
	}
	sx := 0.0
	for _, v := range p.X {
		sx += v
	}
	if sx != p.SumX {
		return fmt.Errorf("factor: partial of action %d: Σx = %v but SumX says %v", p.Action, sx, p.SumX)
	}
	if math.IsInf(p.LogLik, 0) {
		return fmt.Errorf("factor: partial of action %d: loglik is %v", p.Action, p.LogLik)
	}
	return nil
}

// CommitRow commits one row of D (see Commit): where x > 0,
// row = (1-α)·row + α·dh/x; else row keeps its values. It is the
// arithmetic of Commit itself, so a cluster worker that holds a shard's
// rows of D and its statistics of them derives bitwise the rows the
// coordinator commits.
func CommitRow(row, dh []float64, x, alpha float64) {
	if x <= 0 {
		return
	}
	fs := [1]float64{alpha / x}
	commitEntries(row, dh, fs[:], 1-alpha, false, false)
}

// commitEntries commits a row in place: row[l] = commitEntry(row[l],
// keep, f_l·src[l]), where f_l is f[l] with each (an entry whose f[l] is
// 0 keeps its value: a row of K) or f[0] for every l (a row of D). Where
// the row's length is a multiple of 4 it runs in AVX2 (commitAVX2),
// elementwise and so bitwise the scalar loop, which pureGo (tests) keeps.
func commitEntries(row, src, f []float64, keep float64, each, pureGo bool) {
	src = src[:len(row)]
	if each {
		f = f[:len(row)]
	}
	if len(row) > 0 && len(row)%4 == 0 && !pureGo && useAVX2() {
		e, fl := 0, 0
		if each {
			e = 1
		}
		if keep > 0 {
			fl = 1
		}
		commitAVX2(&row[0], &src[0], &f[0], len(row), keep, e, fl)
		return
	}
	for l := range row {
		fl := f[0]
		if each {
			if fl = f[l]; fl == 0 {
				continue
			}
		}
		row[l] = commitEntry(row[l], keep, fl*src[l])
	}
}

// EntryFloor is the smallest value a positive entry of D or K takes in a
// commit with α < 1. Mathematically such an entry stays positive
// ((1−α)·v > 0), but over thousands of commits that see no data for it,
// it shrinks geometrically and underflows to exactly 0, after which a
// transition through it has probability 0 and stops the fit. At 1e-150
// two floored factors still give g ≥ 1e-300 and c/g stays finite; the
// row sums move by at most m·1e-150. With α = 1 (plain EM) entries are
// never floored, and zeros (masks) stay zero.
const EntryFloor = 1e-150

// commitEntry is one entry of a commit: keep·v + add, floored at
// EntryFloor when v > 0 and keep > 0 (α < 1).
func commitEntry(v, keep, add float64) float64 {
	// float64(...) forbids fused multiply-add (bitwise identity across
	// machines): both products are rounded before the sum.
	w := float64(keep*v) + float64(add)
	if w < EntryFloor && v > 0 && keep > 0 {
		w = EntryFloor
	}
	return w
}

// Commit writes the next model into md (incremental-emsf eq. 13 with
// learning rate alpha; alpha = 1 is plain EM):
//
//	D[i,:] = (1-α)·D[i,:] + α·Dh[i,:]/x[i]     where x[i] > 0
//	K[l,:] = (1-α)·K[l,:] + α·KhT[:,l]/y[l]    where y[l] > 0
//
// Rows without data keep their values; with α < 1 a positive entry never
// drops below EntryFloor (underflow guard). It records the accumulated loglik
// and WKL (with dataTerm = Σ c·log(c/x_i), see Block.DataTerm) in md and
// increments md.Iteration. A Float32 model's committed rows are rounded
// (Round32) and copied to its float32 K^T as they are written: bitwise
// Commit then RoundFactors, without a second sweep over the model.
func (a *Accumulator) Commit(md *Model, alpha, dataTerm float64) {
	a.CommitWorkers(md, alpha, dataTerm, 1)
}

// commitParallelMin is the smallest n·m for which CommitWorkers uses
// more than one goroutine: below it a goroutine costs more than the
// rows it would commit.
const commitParallelMin = 1 << 16

// CommitWorkers is Commit with the rows of D and K split among up to
// workers goroutines. Each row's arithmetic is its own, so the model is
// bitwise Commit's for any workers. After a pass on several goroutines
// the statistics lie in several cores' caches; one goroutine reading
// them all cost 1.5–2 ns per nonzero at n = 20 000 (0.5 after a pass on
// one).
func (a *Accumulator) CommitWorkers(md *Model, alpha, dataTerm float64, workers int) {
	a.commitFrom(md, md, alpha, dataTerm, workers)
}

// commitFrom is CommitWorkers for a pass on the model src whose commit
// goes to dst, a model of the same shape and precision (SQUAREM passes
// its points between buffers, squaremLoop): bitwise what copying src into
// dst and committing dst in place writes, without the copy. The entries
// a commit keeps (rows of D without data, entries of K of a hidden state
// without weight) are copied from src; with α = 1 every other entry is
// the statistics' alone (commitEntry adds 0·v = +0 for the finite,
// non-negative v that dst holds), so dst ≠ src needs α = 1. dst == src
// is CommitWorkers.
func (a *Accumulator) commitFrom(dst, src *Model, alpha, dataTerm float64, workers int) {
	if dst.N != a.N || dst.M != a.M || dst.U != a.U || dst.Tie != a.Tie {
		panic("factor: Commit: accumulator and model differ in shape")
	}
	if dst != src && (alpha != 1 || src.N != dst.N || src.M != dst.M || src.Tie != dst.Tie || src.Precision != dst.Precision) {
		panic("factor: Commit: a commit into another model needs α = 1 and models of one shape and precision")
	}
	dst.ensure32()
	n := a.N
	if n*a.M < commitParallelMin {
		workers = 1
	}
	workers = max(1, min(workers, n))
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.commitRows(dst, src, alpha, w*n/workers, (w+1)*n/workers)
		}()
	}
	a.commitRows(dst, src, alpha, 0, n/workers)
	wg.Wait()
	a.RecordPass(dst, dataTerm)
}

// commitRows commits rows [lo, hi) of every block of D and K
// (commitFrom).
func (a *Accumulator) commitRows(dst, src *Model, alpha float64, lo, hi int) {
	m := a.M
	for b, d := range dst.D {
		dh, x := a.Dh[b], a.X[b]
		for i := lo; i < hi; i++ {
			row := d[i*m : i*m+m]
			if x[i] <= 0 {
				if dst != src {
					copy(row, src.D[b][i*m:i*m+m])
				}
				continue
			}
			CommitRow(row, dh[i*m:i*m+m], x[i], alpha)
			if dst.Precision == Float32 {
				round32Row(row, nil, false)
			}
		}
	}
	for b, kt := range dst.KT {
		var k32 []float32
		var old []float64
		if dst.Precision == Float32 {
			k32 = dst.kt32[b][lo*m : hi*m]
		}
		if dst != src {
			old = src.KT[b][lo*m : hi*m]
		}
		commitKRows(kt[lo*m:hi*m], a.KhT[b][lo*m:hi*m], a.Y[b], m, alpha, k32, old)
	}
}

// CommitKRows commits rows of one K block (see Commit): kt and kh are the
// same rows j of K^T and K̂^T (row-major, m per row), y the block's
// global Y. A cluster node that owns a range of K's columns commits them
// with it, bitwise what Commit commits for those columns.
func CommitKRows(kt, kh, y []float64, m int, alpha float64) {
	commitKRows(kt, kh, y, m, alpha, nil, nil)
}

// commitKRows is CommitKRows; with k32 non-nil (a Float32 model's float32
// copy of the same rows) each committed row is rounded (Round32) and
// copied into k32 while it is in cache. With old non-nil (the same rows
// of the model the pass ran on, commitFrom) the entries the commit keeps
// are copied from old first.
func commitKRows(kt, kh, y []float64, m int, alpha float64, k32 []float32, old []float64) {
	keep := 1 - alpha
	var fs [64]float64
	f := fs[:0]
	if m > len(fs) {
		f = make([]float64, m)
	}
	f = f[:m]
	for l := range f {
		f[l] = 0
		if y[l] > 0 {
			f[l] = alpha / y[l]
		}
	}
	if old != nil {
		for l, fl := range f {
			if fl != 0 {
				continue
			}
			for j := l; j < len(kt); j += m {
				kt[j] = old[j]
			}
		}
	}
	for j := 0; j+m <= len(kt); j += m {
		row := kt[j : j+m]
		commitEntries(row, kh[j:j+m], f, keep, true, false)
		if k32 != nil {
			round32Row(row, k32[j:j+m], false)
		}
	}
}

// RecordPass records the pass in md as Commit does after committing the
// factors: md.Iteration is incremented, LogLik and WKL (with dataTerm =
// Σ c·log(c/x_i)) are the pass's.
func (a *Accumulator) RecordPass(md *Model, dataTerm float64) {
	md.Iteration++
	md.LogLik = a.LogLik
	md.WKL = math.NaN()
	if !math.IsNaN(a.LogLik) && a.SumX > 0 {
		md.WKL = (dataTerm - a.LogLik) / a.SumX
	}
}
