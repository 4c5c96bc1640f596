package factor

import (
	"fmt"
	"math"
	"sync/atomic"
)

// Block is a set of nonzero counts of one action in compressed sparse row
// form: row Rows[r] has columns Cols[Ptr[r]:Ptr[r+1]] (ascending) with
// counts Vals[Ptr[r]:Ptr[r+1]]. Rows are ascending and distinct. A Block is
// the in-memory form of a shard; statistics are computed per Block.
type Block struct {
	Action int
	Rows   []int32
	Ptr    []int64
	Cols   []int32
	Vals   []float64

	// colIdx caches the kernel's column-major index (see colindex.go).
	colIdx atomic.Pointer[colIndex]
	// rowIdx caches what a row-major pass needs beside (rowpass.go).
	rowIdx atomic.Pointer[rowIndex]
	// nnz is the number of nonzeros of a block whose row-major arrays
	// were dropped (DropRowMajor).
	nnz int
}

// NewBlock builds a Block from nonzeros sorted by (row, col) with distinct
// (row, col) pairs and positive finite counts. It returns an error naming
// the first entry that breaks these rules.
func NewBlock(action int, rows, cols []int32, vals []float64) (*Block, error) {
	if len(rows) != len(cols) || len(rows) != len(vals) {
		panic("factor: NewBlock: rows, cols and vals differ in length")
	}
	b := &Block{Action: action, Cols: cols, Vals: vals}
	for k := range rows {
		if rows[k] < 0 || cols[k] < 0 {
			return nil, fmt.Errorf("factor: block entry %d: negative index (%d, %d)", k, rows[k], cols[k])
		}
		if v := vals[k]; !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("factor: block entry %d (%d, %d): count %v must be finite and > 0", k, rows[k], cols[k], v)
		}
		if k > 0 {
			pr, pc := rows[k-1], cols[k-1]
			if rows[k] < pr || (rows[k] == pr && cols[k] <= pc) {
				return nil, fmt.Errorf("factor: block entry %d (%d, %d) is not after (%d, %d): entries must be sorted by (row, col) without duplicates", k, rows[k], cols[k], pr, pc)
			}
		}
		if k == 0 || rows[k] != rows[k-1] {
			b.Rows = append(b.Rows, rows[k])
			b.Ptr = append(b.Ptr, int64(k))
		}
	}
	b.Ptr = append(b.Ptr, int64(len(rows)))
	return b, nil
}

// NNZ returns the number of nonzeros of blocks.
func NNZ(blocks []*Block) int {
	n := 0
	for _, b := range blocks {
		n += b.NNZ()
	}
	return n
}

// NNZ returns the number of nonzeros.
func (b *Block) NNZ() int {
	if b.Vals == nil && b.nnz > 0 {
		return b.nnz
	}
	return len(b.Vals)
}

// Sum returns the total count Σc, summed in storage order.
func (b *Block) Sum() float64 {
	s := 0.0
	for _, v := range b.Vals {
		s += v
	}
	return s
}

// MaxIndex returns the largest row and column index in the block, or -1, -1
// when it is empty.
func (b *Block) MaxIndex() (row, col int) {
	row, col = -1, -1
	if len(b.Rows) > 0 {
		row = int(b.Rows[len(b.Rows)-1])
	}
	for _, c := range b.Cols {
		col = max(col, int(c))
	}
	return row, col
}

// CheckShape returns an error if the block does not fit a model with n
// states and u actions.
func (b *Block) CheckShape(n, u int) error {
	if b.Action < 0 || b.Action >= u {
		return fmt.Errorf("factor: block action %d out of range [0, %d)", b.Action, u)
	}
	var r, c int
	if ci := b.colIdx.Load(); ci != nil {
		// The column index knows the largest column (its last): no scan
		// of every nonzero at every pass.
		r, c = ci.maxRow, ci.maxCol
	} else {
		r, c = b.MaxIndex()
	}
	if r >= n || c >= n {
		return fmt.Errorf("factor: block of action %d has index (%d, %d) out of range for n=%d states", b.Action, r, c, n)
	}
	return nil
}

// DataTerm returns Σ c·log(c/x_i) over the block, where x_i is the total
// count of row i: the constant part of the weighted KL divergence
// (incremental-emsf eq. 11). It is exact when none of the block's rows has
// nonzeros in other blocks (shard.Split); with column cells
// (shard.SplitGrid) DataTerm over all blocks sums each row's total first.
func (b *Block) DataTerm() float64 {
	t := 0.0
	for r := range b.Rows {
		lo, hi := b.Ptr[r], b.Ptr[r+1]
		x := 0.0
		for _, c := range b.Vals[lo:hi] {
			x += c
		}
		for _, c := range b.Vals[lo:hi] {
			t += c * math.Log(c/x)
		}
	}
	return t
}
