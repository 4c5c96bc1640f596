package factor

import "fmt"

// ColumnFold is how the owner of a range of K's columns folds K̂ in a
// cluster that gives each column an owner (coordinator/natsexec, the
// "owners" exchange): every block (shard) of the K block sends the slice
// of its partial's K̂ that falls in the range, and the owner folds the
// slices in the canonical order of a ReducePlan (tree-v1). Column j of the
// result is bitwise column j of the K̂ that a Reducer folds from the whole
// partials: both visit the same tree, and a partial without column j adds
// nothing to it either way (x + 0 = x).
//
// The owner of a range holds (Hi−Lo)·m values for the sum plus at most
// log2 G pending subtrees of the same size: never one slice per block, and
// nothing of D̂.
type ColumnFold struct {
	// Lo and Hi bound the columns [Lo, Hi); M is the number of hidden
	// states.
	Lo, Hi, M int

	acc  *Accumulator
	plan *ReducePlan
	red  Reducer
	cols []int32
	p    Partial
}

// NewColumnFold returns the fold of columns [lo, hi) of one K block whose
// blocks (in block order) have the given nonzero counts, with the
// reduction groups of groupNNZ (0: DefaultGroupNNZ): the tree of that K
// block in PlanReduce of the whole data.
func NewColumnFold(lo, hi, m int, nnz []int, groupNNZ int) *ColumnFold {
	if lo < 0 || hi < lo || m < 1 {
		panic(fmt.Sprintf("factor: NewColumnFold(%d, %d, %d): bad range", lo, hi, m))
	}
	// K̂ and Y only: a slice has no rows, so D̂ and x (n·m + n values of
	// an Accumulator) would never be touched.
	acc := &Accumulator{N: hi - lo, M: m, U: 1, Dh: [][]float64{nil}, X: [][]float64{nil},
		KhT: [][]float64{bigFloats((hi - lo) * m)}, Y: [][]float64{make([]float64, m)}}
	f := &ColumnFold{Lo: lo, Hi: hi, M: m, acc: acc}
	f.plan = PlanReduce(make([]int, len(nnz)), nnz, TieNone, groupNNZ)
	f.p.Y = make([]float64, m)
	f.Reset()
	return f
}

// Reset starts a new pass.
func (f *ColumnFold) Reset() { f.red.Reset(f.acc, f.plan) }

// Next returns the index (among the K block's blocks) of the block whose
// slice is folded next, or -1 when every block's slice was folded.
func (f *ColumnFold) Next() int { return f.red.Next() }

// Done reports whether the fold is complete.
func (f *ColumnFold) Done() bool { return f.red.Done() }

// Add folds the slice of block Next(): cols are global column indices in
// [Lo, Hi), strictly ascending, and kht their rows of K̂^T (m values per
// column); an empty slice is a block that touches no column of the range.
// It checks the indices and that every value is finite and non-negative,
// and changes nothing when a check fails.
func (f *ColumnFold) Add(cols []int32, kht []float64) error {
	if len(kht) != len(cols)*f.M {
		return fmt.Errorf("factor: K̂ slice of %d columns has %d values, want %d", len(cols), len(kht), len(cols)*f.M)
	}
	f.cols = f.cols[:0]
	for k, j := range cols {
		if int(j) < f.Lo || int(j) >= f.Hi || (k > 0 && j <= cols[k-1]) {
			return fmt.Errorf("factor: K̂ slice: column %d at position %d is outside [%d, %d) or out of order", j, k, f.Lo, f.Hi)
		}
		f.cols = append(f.cols, j-int32(f.Lo))
	}
	f.p.Cols, f.p.KhT = f.cols, kht
	return f.red.Merge(&f.p)
}

// KhT returns the folded K̂^T rows of columns [Lo, Hi) ((Hi−Lo)·m values,
// row j−Lo for column j) once Done; they are the fold's memory, valid
// until the next Reset.
func (f *ColumnFold) KhT() []float64 { return f.acc.KhT[0] }

// SliceColumns returns the range [a, b) of positions in p.Cols (ascending)
// whose columns fall in [lo, hi): the slice of p that the owner of those
// columns folds is p.Cols[a:b] and p.KhT[a·m:b·m].
func SliceColumns(cols []int32, lo, hi int) (a, b int) {
	a = lowerBound(cols, lo)
	b = a + lowerBound(cols[a:], hi)
	return a, b
}

func lowerBound(cols []int32, v int) int {
	lo, hi := 0, len(cols)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if int(cols[mid]) < v {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}
