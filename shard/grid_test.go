package shard

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/emsf/emsf/factor"
)

// randomMats returns u random count matrices of n states, about perRow
// nonzeros per row.
func randomMats(t *testing.T, rng *rand.Rand, n, u, perRow int) []*factor.Block {
	t.Helper()
	var mats []*factor.Block
	for a := range u {
		var rows, cols []int32
		var vals []float64
		for i := range n {
			if rng.IntN(5) == 0 {
				continue // some rows without data
			}
			cs := map[int32]bool{}
			for range 1 + rng.IntN(perRow) {
				cs[int32(rng.IntN(n))] = true
			}
			for _, j := range slices.Sorted(func(yield func(int32) bool) {
				for j := range cs {
					if !yield(j) {
						return
					}
				}
			}) {
				rows, cols, vals = append(rows, int32(i)), append(cols, j), append(vals, float64(1+rng.IntN(3)))
			}
		}
		b, err := factor.NewBlock(a, rows, cols, vals)
		if err != nil {
			t.Fatal(err)
		}
		mats = append(mats, b)
	}
	return mats
}

// TestSplitGridCells checks SplitGrid against the rule: every nonzero of
// every action in exactly one cell, the cell of its row range and column
// range, cells numbered (action, row range, column cell), q = 1 is Split.
func TestSplitGridCells(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	n, u := 57, 3
	mats := randomMats(t, rng, n, u, 9)
	ranges, _ := Split(mats, n, 40)
	one, man1 := SplitGrid(mats, n, 40, 1)
	if len(one) != len(ranges) || man1.NNZ != nnzOf(mats) {
		t.Fatalf("q = 1: %d shards, Split %d", len(one), len(ranges))
	}
	for _, q := range []int{2, 3, 7, 100} {
		cells, man := SplitGrid(mats, n, 40, q)
		if man.NNZ != nnzOf(mats) || len(man.Shards) != len(cells) {
			t.Fatalf("q = %d: manifest has %d nonzeros in %d shards, the data %d in %d", q, man.NNZ, len(man.Shards), nnzOf(mats), len(cells))
		}
		type key struct{ a, i, j int32 }
		seen := map[key]float64{}
		for k, c := range cells {
			if c.ID != k {
				t.Fatalf("q = %d: shard %d has ID %d", q, k, c.ID)
			}
			if err := c.Verify(); err != nil {
				t.Fatal(err)
			}
			if c.NNZ == 0 {
				t.Fatalf("q = %d: empty cell %d", q, k)
			}
			if k > 0 {
				p := cells[k-1]
				if p.Action > c.Action || (p.Action == c.Action && (p.RowLo > c.RowLo || (p.RowLo == c.RowLo && p.ColLo >= c.ColLo))) {
					t.Fatalf("q = %d: cell %d (%d, %d, %d) is not after cell %d (%d, %d, %d)", q, k, c.Action, c.RowLo, c.ColLo, k-1, p.Action, p.RowLo, p.ColLo)
				}
			}
			b := c.Block
			for r, i := range b.Rows {
				for x := b.Ptr[r]; x < b.Ptr[r+1]; x++ {
					seen[key{int32(c.Action), i, b.Cols[x]}] += b.Vals[x]
				}
			}
		}
		for a, mat := range mats {
			for r, i := range mat.Rows {
				for x := mat.Ptr[r]; x < mat.Ptr[r+1]; x++ {
					k := key{int32(a), i, mat.Cols[x]}
					if seen[k] != mat.Vals[x] {
						t.Fatalf("q = %d: entry %v is %v in the cells, %v in the data", q, k, seen[k], mat.Vals[x])
					}
					delete(seen, k)
				}
			}
		}
		if len(seen) != 0 {
			t.Fatalf("q = %d: %d entries in the cells that the data lacks", q, len(seen))
		}
		// Row groups: the cells of each of Split's row ranges.
		groups := RowGroups(man.Shards)
		if len(groups) != len(ranges) {
			t.Fatalf("q = %d: %d row groups, Split has %d row ranges", q, len(groups), len(ranges))
		}
		for g, cs := range groups {
			var rows []int32
			for _, k := range cs {
				if cells[k].RowLo != ranges[g].RowLo || cells[k].Action != ranges[g].Action {
					t.Fatalf("q = %d: group %d holds cell %d of rows from %d, the range starts at %d", q, g, k, cells[k].RowLo, ranges[g].RowLo)
				}
				rows = append(rows, cells[k].Block.Rows...)
			}
			slices.Sort(rows)
			if !slices.Equal(slices.Compact(rows), ranges[g].Block.Rows) {
				t.Fatalf("q = %d: group %d's rows differ from its range's", q, g)
			}
		}
	}
}

func nnzOf(mats []*factor.Block) int {
	n := 0
	for _, b := range mats {
		n += b.NNZ()
	}
	return n
}
