package factor

import (
	"math"
	"slices"
	"testing"
)

// TestDropRowMajor: a block whose row-major arrays were dropped computes
// bitwise the partial of the full block, keeps its nonzero count and its
// shape check, and holds none of the arrays.
func TestDropRowMajor(t *testing.T) {
	for _, tie := range []Tie{TieNone, TieSharedK} {
		blocks, md := treeCase(t, 11, tie)
		for k, b := range blocks {
			var want, got Partial
			if err := Compute(md, b, new(Scratch), &want, true); err != nil {
				t.Fatal(err)
			}
			// A copy of the block (its own index), then dropped.
			c, err := NewBlock(b.Action, rowsOf(b), slices.Clone(b.Cols), slices.Clone(b.Vals))
			if err != nil {
				t.Fatal(err)
			}
			nnz := c.NNZ()
			c.DropRowMajor()
			if c.Ptr != nil || c.Cols != nil || c.Vals != nil || c.NNZ() != nnz {
				t.Fatalf("block %d: after DropRowMajor ptr %d cols %d vals %d, NNZ %d (was %d)", k, len(c.Ptr), len(c.Cols), len(c.Vals), c.NNZ(), nnz)
			}
			if err := c.CheckShape(md.N, md.U); err != nil {
				t.Fatal(err)
			}
			if err := c.CheckShape(1, md.U); err == nil && nnz > 0 {
				t.Fatalf("block %d: CheckShape(n = 1) passed after DropRowMajor", k)
			}
			if err := Compute(md, c, new(Scratch), &got, true); err != nil {
				t.Fatal(err)
			}
			same := got.NNZ == want.NNZ && math.Float64bits(got.LogLik) == math.Float64bits(want.LogLik) &&
				math.Float64bits(got.SumX) == math.Float64bits(want.SumX) && slices.Equal(got.Rows, want.Rows) && slices.Equal(got.Cols, want.Cols)
			for _, xs := range [][2][]float64{{got.Dh, want.Dh}, {got.KhT, want.KhT}, {got.X, want.X}, {got.Y, want.Y}} {
				same = same && len(xs[0]) == len(xs[1])
				for q := range xs[0] {
					same = same && math.Float64bits(xs[0][q]) == math.Float64bits(xs[1][q])
				}
			}
			if !same {
				t.Fatalf("tie %v block %d: the partial after DropRowMajor differs from the full block's", tie, k)
			}
		}
	}
}

// rowsOf expands b's CSR rows into one row index per nonzero.
func rowsOf(b *Block) []int32 {
	rows := make([]int32, 0, len(b.Vals))
	for r, i := range b.Rows {
		for range b.Ptr[r+1] - b.Ptr[r] {
			rows = append(rows, i)
		}
	}
	return rows
}
