package factor

import (
	"math/rand/v2"
	"slices"
)

// RandomCounts returns, for each of u actions, an n×n count matrix with
// perRow distinct random columns in every row and integer counts drawn
// uniformly from 1..maxCount: the synthetic workload of the benchmarks
// (`emsf bench`, BenchmarkIteration). It is deterministic in seed.
func RandomCounts(n, u, perRow, maxCount int, seed uint64) []*Block {
	if perRow > n {
		perRow = n
	}
	rng := rand.New(rand.NewPCG(seed, 0x62656e6368)) // "bench"
	out := make([]*Block, u)
	seen := make([]bool, n)
	cols := make([]int32, 0, perRow)
	for a := range u {
		b := &Block{Action: a, Rows: make([]int32, 0, n), Ptr: make([]int64, 1, n+1),
			Cols: make([]int32, 0, n*perRow), Vals: make([]float64, 0, n*perRow)}
		for i := range n {
			cols = cols[:0]
			for len(cols) < perRow {
				j := rng.IntN(n)
				if !seen[j] {
					seen[j] = true
					cols = append(cols, int32(j))
				}
			}
			slices.Sort(cols)
			for _, j := range cols {
				seen[j] = false
				b.Cols = append(b.Cols, j)
				b.Vals = append(b.Vals, float64(1+rng.IntN(maxCount)))
			}
			b.Rows = append(b.Rows, int32(i))
			b.Ptr = append(b.Ptr, int64(len(b.Cols)))
		}
		out[a] = b
	}
	return out
}
