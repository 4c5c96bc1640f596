package factor

import (
	"context"
	"math"
	"runtime"
	"testing"
)

// TestColumnFoldMatchesPass: owners of column ranges fold the slices of
// the blocks' partials into bitwise the K̂ of a pass, and a scalar
// accumulator folds the partials' Y, loglik, Σx and nonzeros into bitwise
// the pass's: what the owners exchange of the cluster relies on.
func TestColumnFoldMatchesPass(t *testing.T) {
	for _, tie := range []Tie{TieNone, TieSharedK} {
		blocks, md := treeCase(t, 7, tie)
		const groupNNZ = 20
		acc := NewAccumulator(md)
		ps := Passer{GroupNNZ: groupNNZ}
		if err := ps.Pass(context.Background(), md, blocks, acc, 2, true); err != nil {
			t.Fatal(err)
		}
		n, m := md.N, md.M
		parts := make([]Partial, len(blocks))
		for k, b := range blocks {
			if err := Compute(md, b, new(Scratch), &parts[k], true); err != nil {
				t.Fatal(err)
			}
		}
		// The scalars, folded as a coordinator that only sequences does.
		plan := PlanBlocks(blocks, tie, groupNNZ)
		sacc := NewScalarAccumulator(m, md.U, tie)
		var red Reducer
		red.Reset(sacc, plan)
		for !red.Done() {
			p := &parts[red.Next()]
			if err := red.MergeChecked(&Partial{Action: p.Action, Y: p.Y, SumX: p.SumX, LogLik: p.LogLik, NNZ: p.NNZ}); err != nil {
				t.Fatal(err)
			}
		}
		for b := range acc.Y {
			if !sameBits(sacc.Y[b], acc.Y[b]) {
				t.Fatalf("%v: Y of K block %d differs from the pass's", tie, b)
			}
		}
		if !sameBits([]float64{sacc.LogLik, sacc.SumX}, []float64{acc.LogLik, acc.SumX}) || sacc.NNZ != acc.NNZ {
			t.Fatalf("%v: scalars differ: %v %v %d, pass %v %v %d", tie, sacc.LogLik, sacc.SumX, sacc.NNZ, acc.LogLik, acc.SumX, acc.NNZ)
		}
		// K̂ by column ranges (uneven, one empty), each K block's blocks
		// in block order.
		for _, tr := range plan.Trees {
			var mine []int
			for _, k := range plan.Order[tr.Start[0]:tr.Start[tr.Groups()]] {
				mine = append(mine, k)
			}
			nnz := make([]int, len(mine))
			for q, k := range mine {
				nnz[q] = blocks[k].NNZ()
			}
			got := make([]float64, n*m)
			cuts := []int{0, n / 5, n / 5, n/2 + 1, n}
			for c := 0; c+1 < len(cuts); c++ {
				lo, hi := cuts[c], cuts[c+1]
				f := NewColumnFold(lo, hi, m, nnz, groupNNZ)
				for range 2 { // twice: Reset reuses the memory
					f.Reset()
					for !f.Done() {
						p := &parts[mine[f.Next()]]
						a, b := SliceColumns(p.Cols, lo, hi)
						if err := f.Add(p.Cols[a:b], p.KhT[a*m:b*m]); err != nil {
							t.Fatal(err)
						}
					}
				}
				copy(got[lo*m:hi*m], f.KhT())
			}
			if !sameBits(got, acc.KhT[tr.KBlock]) {
				t.Fatalf("%v: K̂ of K block %d folded by column ranges differs from the pass's", tie, tr.KBlock)
			}
		}
	}
}

// TestColumnFoldRejects: a slice outside the range, out of order, or
// with a bad value is an error.
func TestColumnFoldRejects(t *testing.T) {
	f := NewColumnFold(10, 20, 2, []int{5, 5}, 0)
	for _, c := range []struct {
		cols []int32
		kht  []float64
	}{
		{[]int32{9}, []float64{1, 1}},
		{[]int32{20}, []float64{1, 1}},
		{[]int32{12, 11}, []float64{1, 1, 1, 1}},
		{[]int32{12}, []float64{1}},
		{[]int32{12}, []float64{1, math.NaN()}},
		{[]int32{12}, []float64{-1, 1}},
	} {
		if err := f.Add(c.cols, c.kht); err == nil {
			t.Errorf("slice %v %v accepted", c.cols, c.kht)
		}
	}
	if f.Next() != 0 {
		t.Fatalf("a rejected slice moved the fold to %d", f.Next())
	}
}

// TestColumnFoldHoldsKOnly: a fold holds K̂ of its range and nothing of
// D̂ (a slice has no rows): NewColumnFold allocates (Hi−Lo)·m values, not
// twice that.
func TestColumnFoldHoldsKOnly(t *testing.T) {
	const cols, m = 50_000, 16
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f := NewColumnFold(0, cols, m, []int{10, 10, 10}, 0)
	runtime.ReadMemStats(&after)
	kh := int64(cols * m * 8)
	if got := int64(after.TotalAlloc - before.TotalAlloc); got > kh+kh/4 {
		t.Errorf("NewColumnFold of %d columns, m = %d allocated %d bytes; K̂ is %d", cols, m, got, kh)
	}
	runtime.KeepAlive(f)
}
