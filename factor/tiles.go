package factor

// Column tiling of the kernel.
//
// Each nonzero (i, j) reads row j of K and updates row j of K̂: random
// accesses that leave the L2 cache once n·m·16 bytes outgrow it (DESIGN
// §8). Compute therefore visits a block's nonzeros tile by tile: for each
// range of tileWidth(m) columns, every row's nonzeros in that range (a
// contiguous run of the row's CSR segment, since columns are sorted). The
// rows of K and K̂ a tile touches stay in L2 while the block's rows of D
// and D̂ are revisited once per tile.
//
// The visiting order depends only on the block and m, never on the machine
// or the number of workers, so results stay bitwise reproducible; it does
// change the rounding of the per-row sums compared with plain row order.

// tileBytes is the L2 budget for the rows of K and K̂ that one tile
// touches (both together).
const tileBytes = 256 << 10

// tileWidth returns the number of columns per tile for order m.
func tileWidth(m int) int {
	return max(64, tileBytes/(16*m))
}

// run is a contiguous range [lo, hi) of a block's nonzeros, all in block
// row row and in one column tile.
type run struct {
	row    int32
	lo, hi int64
}

// tilePlan is a block's visiting order for one tile width.
type tilePlan struct {
	width int
	runs  []run
}

// tiles returns the runs of b in tile-major, then row, order, building and
// caching them on first use for this width.
func (b *Block) tiles(width int) []run {
	if p := b.plan.Load(); p != nil && p.width == width {
		return p.runs
	}
	nr := len(b.Rows)
	runs := make([]run, 0, nr)
	maxCol := -1
	for _, c := range b.Cols {
		maxCol = max(maxCol, int(c))
	}
	cur := make([]int64, nr)
	copy(cur, b.Ptr[:nr])
	for lo := 0; lo <= maxCol; lo += width {
		hi := int32(min(lo+width, maxCol+1))
		for r := range nr {
			q, end := cur[r], b.Ptr[r+1]
			start := q
			for q < end && b.Cols[q] < hi {
				q++
			}
			if q > start {
				runs = append(runs, run{row: int32(r), lo: start, hi: q})
				cur[r] = q
			}
		}
	}
	b.plan.Store(&tilePlan{width: width, runs: runs})
	return runs
}
