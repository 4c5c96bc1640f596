package shard

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/emsf/emsf/factor"
)

// TestCutDGroups: on random data, with and without column cells, every
// tie mode: each present row of each D block is in exactly one row
// group, whose cells are exactly the shards that hold the row (in
// order, for shared D every action's) and whose metadata (D block,
// bounds, count) agree with its row list; and Describe's lines say each
// shard's rows and its share of the data term (factor.DataTerms).
func TestCutDGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tie := range []factor.Tie{factor.TieNone, factor.TieSharedK, factor.TieSharedD} {
		for _, q := range []int{1, 3} {
			const n, u = 90, 3
			shards, _ := SplitGrid(randomMats(t, rng, n, u, 6), n, 40, q)
			Describe(shards)
			terms := factor.DataTerms(Blocks(shards))
			for k, sh := range shards {
				if sh.Rows != len(sh.Block.Rows) || math.Float64bits(sh.DataTerm) != math.Float64bits(terms[k]) {
					t.Fatalf("tie %v q %d: shard %d line says %d rows, term %v; block %d, %v", tie, q, k, sh.Rows, sh.DataTerm, len(sh.Block.Rows), terms[k])
				}
			}
			groups, lists := CutDGroups(shards, tie)
			if len(groups) != len(lists) {
				t.Fatalf("%d groups, %d row lists", len(groups), len(lists))
			}
			dblock := func(a int) int {
				if tie == factor.TieSharedD {
					return 0
				}
				return a
			}
			seen := map[[2]int]int{} // (D block, row) → group
			for g, dg := range groups {
				rows := lists[g]
				if dg.Rows != len(rows) || !slices.IsSorted(rows) || (len(rows) > 0 && (dg.Lo != int(rows[0]) || dg.Hi != int(rows[len(rows)-1])+1)) {
					t.Fatalf("tie %v q %d: group %d %+v, rows %v", tie, q, g, dg, rows)
				}
				for _, i := range rows {
					key := [2]int{dg.DBlock, int(i)}
					if was, ok := seen[key]; ok {
						t.Fatalf("row %d of D block %d in groups %d and %d", i, dg.DBlock, was, g)
					}
					seen[key] = g
					var want []int
					for k, sh := range shards {
						if _, ok := slices.BinarySearch(sh.Block.Rows, i); ok && dblock(sh.Action) == dg.DBlock {
							want = append(want, k)
						}
					}
					for _, k := range want {
						if !slices.Contains(dg.Cells, k) {
							t.Fatalf("tie %v q %d: row %d of group %d is in shard %d, not among its cells %v", tie, q, i, g, k, dg.Cells)
						}
					}
				}
			}
			for k, sh := range shards {
				for _, i := range sh.Block.Rows {
					if _, ok := seen[[2]int{dblock(sh.Action), int(i)}]; !ok {
						t.Fatalf("tie %v q %d: row %d of shard %d is in no group", tie, q, i, k)
					}
				}
			}
		}
	}
}
