package factor

import "math"

// colIndex is a block's nonzeros in compressed sparse column form, the
// order in which Compute visits them: column cols[c] holds entries
// ptr[c]..ptr[c+1] with local rows rows[·] (ascending; an index into
// Block.Rows) and counts vals[·].
//
// Why columns: each nonzero (i, j) reads row j of K and updates row j of
// K̂. Visited row by row these are random accesses to n·m·16 bytes, which
// leave the cache once n grows (DESIGN §8); visited column by column each
// row of K is read once and its K̂ row accumulated in place, while the
// block's rows of D and D̂ (whole rows, a few hundred KiB for a default
// shard) are what is gathered, from cache.
//
// Positions are int32 (a block holds fewer than 2^31 nonzeros; Split's
// shards hold about 2^17): the index is cached beside the block for the
// whole fit, 12 bytes per nonzero plus 8 per touched column and per row.
type colIndex struct {
	cols []int32
	ptr  []int32
	rows []int32
	vals []float64
	// x holds the block's row sums Σ_j c_ij, each summed in storage order,
	// and sumX their sum in row order: what every pass reports in
	// Partial.X and SumX, computed once.
	x    []float64
	sumX float64
	// maxRow and maxCol are the largest row and column (-1 when empty),
	// as Block.MaxIndex.
	maxRow, maxCol int
}

// columns returns b's column index, building and caching it on first use
// (with scratch, n+1 int32s it reuses, as working memory: one
// per block would be n·4 bytes of garbage each). Concurrent first calls
// may both build it; they build the same thing.
func (b *Block) columns(scratch *[]int32) *colIndex {
	if ci := b.colIdx.Load(); ci != nil {
		return ci
	}
	nnz := len(b.Cols)
	maxCol := -1
	for _, c := range b.Cols {
		maxCol = max(maxCol, int(c))
	}
	if nnz > math.MaxInt32 {
		panic("factor: block has more than 2^31-1 nonzeros")
	}
	if cap(*scratch) < maxCol+2 {
		*scratch = make([]int32, maxCol+2)
	}
	count := (*scratch)[:maxCol+2]
	clear(count)
	for _, c := range b.Cols {
		count[c+1]++
	}
	ci := &colIndex{rows: make([]int32, nnz), vals: make([]float64, nnz)}
	ncols := 0
	for _, c := range count[1:] {
		if c > 0 {
			ncols++
		}
	}
	ci.cols = make([]int32, 0, ncols) // exact: the index is kept for the whole fit
	for j := 0; j <= maxCol; j++ {
		if count[j+1] > 0 {
			ci.cols = append(ci.cols, int32(j))
		}
		count[j+1] += count[j]
	}
	ci.ptr = make([]int32, 0, len(ci.cols)+1)
	for _, j := range ci.cols {
		ci.ptr = append(ci.ptr, count[j])
	}
	ci.ptr = append(ci.ptr, int32(nnz))
	// Counting sort by column, stable in CSR order, so rows ascend within
	// each column.
	next := count[:maxCol+1]
	for r := range b.Rows {
		for q := b.Ptr[r]; q < b.Ptr[r+1]; q++ {
			j := b.Cols[q]
			k := next[j]
			next[j]++
			ci.rows[k] = int32(r)
			ci.vals[k] = b.Vals[q]
		}
	}
	ci.x = make([]float64, len(b.Rows))
	for r := range b.Rows {
		x := 0.0
		for _, c := range b.Vals[b.Ptr[r]:b.Ptr[r+1]] {
			x += c
		}
		ci.x[r] = x
		ci.sumX += x
	}
	ci.maxRow, ci.maxCol = b.MaxIndex()
	b.colIdx.Store(ci)
	return ci
}

// DropRowMajor builds b's column index and releases the row-major arrays
// (Ptr, Cols, Vals), keeping Action, Rows and the index: 12 bytes per
// nonzero and 8 per row less, for a block that only Compute will read (a
// cluster worker's: Compute visits the column index alone). Afterwards
// NNZ and CheckShape still answer, from the index; any other use of the
// row-major arrays (DataTerm, MaxIndex, Passer's row-major passes, a
// Reducer's fused pass) is invalid.
func (b *Block) DropRowMajor() {
	var scratch []int32
	ci := b.columns(&scratch)
	b.nnz = len(ci.vals)
	b.Ptr, b.Cols, b.Vals = nil, nil, nil
}
