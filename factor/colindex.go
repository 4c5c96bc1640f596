package factor

// colIndex is a block's nonzeros in compressed sparse column form, the
// order in which Compute visits them: column cols[c] holds entries
// ptr[c]..ptr[c+1] with local rows rows[·] (ascending; an index into
// Block.Rows) and counts vals[·]. inv maps a CSR position of the block to
// its position here.
//
// Why columns: each nonzero (i, j) reads row j of K and updates row j of
// K̂. Visited row by row these are random accesses to n·m·16 bytes, which
// leave the cache once n grows (DESIGN §8); visited column by column each
// row of K is read once and its K̂ row accumulated in place, while the
// block's rows of D and D̂ (whole rows, a few hundred KiB for a default
// shard) are what is gathered, from cache.
type colIndex struct {
	cols []int32
	ptr  []int64
	rows []int32
	vals []float64
	inv  []int64
}

// columns returns b's column index, building and caching it on first use.
// Concurrent first calls may both build it; they build the same thing.
func (b *Block) columns() *colIndex {
	if ci := b.colIdx.Load(); ci != nil {
		return ci
	}
	nnz := len(b.Cols)
	maxCol := -1
	for _, c := range b.Cols {
		maxCol = max(maxCol, int(c))
	}
	count := make([]int64, maxCol+2)
	for _, c := range b.Cols {
		count[c+1]++
	}
	ci := &colIndex{rows: make([]int32, nnz), vals: make([]float64, nnz), inv: make([]int64, nnz)}
	for j := 0; j <= maxCol; j++ {
		if count[j+1] > 0 {
			ci.cols = append(ci.cols, int32(j))
		}
		count[j+1] += count[j]
	}
	ci.ptr = make([]int64, 0, len(ci.cols)+1)
	for _, j := range ci.cols {
		ci.ptr = append(ci.ptr, count[j])
	}
	ci.ptr = append(ci.ptr, int64(nnz))
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
			ci.inv[q] = k
		}
	}
	b.colIdx.Store(ci)
	return ci
}
