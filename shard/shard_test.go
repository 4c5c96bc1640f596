package shard

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/emsf/emsf/factor"
)

func TestCounterSumsDuplicatesInArrivalOrder(t *testing.T) {
	var ct Counter
	for _, tr := range []struct {
		i, a, j int
		c       float64
	}{
		{2, 1, 0, 1}, {0, 0, 1, 0.5}, {2, 1, 0, 2}, {0, 0, 0, 1}, {1, 0, 2, 3}, {0, 0, 1, 0.25},
	} {
		if err := ct.Add(tr.i, tr.a, tr.j, tr.c); err != nil {
			t.Fatal(err)
		}
	}
	if n, u := ct.Dims(); n != 3 || u != 2 {
		t.Fatalf("Dims = %d, %d; want 3, 2", n, u)
	}
	mats := ct.Matrices(3)
	if len(mats) != 3 {
		t.Fatalf("got %d matrices, want 3 (one per action, the last empty)", len(mats))
	}
	a0 := mats[0]
	// Action 0: row 0 -> {0: 1, 1: 0.5+0.25}, row 1 -> {2: 3}.
	wantRows, wantPtr := []int32{0, 1}, []int64{0, 2, 3}
	wantCols, wantVals := []int32{0, 1, 2}, []float64{1, 0.75, 3}
	if !slices.Equal(a0.Rows, wantRows) || !slices.Equal(a0.Ptr, wantPtr) || !slices.Equal(a0.Cols, wantCols) || !slices.Equal(a0.Vals, wantVals) {
		t.Errorf("action 0 = %+v; want rows %v ptr %v cols %v vals %v", a0, wantRows, wantPtr, wantCols, wantVals)
	}
	if a1 := mats[1]; a1.NNZ() != 1 || a1.Vals[0] != 3 || a1.Rows[0] != 2 {
		t.Errorf("action 1 = %+v; want one nonzero (2, 0) = 3", a1)
	}
	if a2 := mats[2]; a2.NNZ() != 0 || len(a2.Ptr) != 1 {
		t.Errorf("action 2 = %+v; want empty", a2)
	}
}

func TestCounterRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		name    string
		i, a, j int
		c       float64
		want    string
	}{
		{"negative state", -1, 0, 0, 1, "indices"},
		{"negative action", 0, -2, 0, 1, "indices"},
		{"zero count", 0, 0, 0, 0, "count 0"},
		{"negative count", 0, 0, 0, -1, "count -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ct Counter
			err := ct.Add(tc.i, tc.a, tc.j, tc.c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Add = %v; want an error containing %q", err, tc.want)
			}
			if ct.Len() != 0 {
				t.Fatal("a rejected transition was counted")
			}
		})
	}
}

func randomMatrices(t *testing.T, seed uint64, n, u, count int) []*factor.Block {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	var ct Counter
	for range count {
		// Skewed rows so that some rows are much longer than others.
		i := int(float64(n) * rng.Float64() * rng.Float64())
		if err := ct.Add(i, rng.IntN(u), rng.IntN(n), float64(1+rng.IntN(3))); err != nil {
			t.Fatal(err)
		}
	}
	return ct.Matrices(u)
}

func TestSplitKeepsRowsWholeAndCoversEverything(t *testing.T) {
	for _, target := range []int{1, 7, 50, 1 << 20} {
		mats := randomMatrices(t, uint64(target), 60, 3, 3000)
		shards, man := Split(mats, 60, target)
		total, nz := 0.0, 0
		for _, m := range mats {
			total += m.Sum()
			nz += m.NNZ()
		}
		if man.NNZ != nz || man.Total != total {
			t.Errorf("target %d: manifest nnz %d total %v; want %d %v", target, man.NNZ, man.Total, nz, total)
		}
		seen := map[[2]int32]bool{}
		for k, s := range shards {
			if s.ID != k || man.Shards[k] != s.Info {
				t.Fatalf("target %d: shard %d has id %d / manifest mismatch", target, k, s.ID)
			}
			if err := s.Verify(); err != nil {
				t.Fatal(err)
			}
			if s.NNZ > target && len(s.Block.Rows) > 1 {
				t.Errorf("target %d: shard %d has %d nonzeros in %d rows", target, k, s.NNZ, len(s.Block.Rows))
			}
			if k > 0 && shards[k-1].Action == s.Action && shards[k-1].RowHi != s.RowLo {
				t.Errorf("target %d: shard %d row range [%d,%d) does not follow [%d,%d)", target, k, s.RowLo, s.RowHi, shards[k-1].RowLo, shards[k-1].RowHi)
			}
			for _, i := range s.Block.Rows {
				key := [2]int32{int32(s.Action), i}
				if seen[key] {
					t.Fatalf("target %d: row %d of action %d is split across shards", target, i, s.Action)
				}
				seen[key] = true
			}
		}
	}
}

func TestVerifyDetectsCorruption(t *testing.T) {
	shards, _ := Split(randomMatrices(t, 3, 20, 1, 200), 20, 1<<20)
	s := shards[0]
	s.Block.Vals[3] += 1
	if err := s.Verify(); err == nil {
		t.Fatal("Verify accepted a shard whose count changed")
	}
}

// TestManifestReducePlan: the plan of a manifest is the plan factor.Fit
// makes for the shards' blocks (so a coordinator that sees only the
// manifest folds in the local order), and Split's shard order is already
// the reduce order (by action, then row).
func TestManifestReducePlan(t *testing.T) {
	mats := factor.RandomCounts(500, 3, 9, 4, 5)
	shards, man := Split(mats, 500, 400)
	for _, tie := range []factor.Tie{factor.TieNone, factor.TieSharedK, factor.TieSharedD} {
		got, want := man.ReducePlan(tie, 1000), factor.PlanBlocks(Blocks(shards), tie, 1000)
		if !slices.Equal(got.Order, want.Order) || len(got.Trees) != len(want.Trees) || !slices.IsSorted(got.Order) {
			t.Fatalf("%v: manifest plan %+v, block plan %+v", tie, got, want)
		}
		for k := range got.Trees {
			if got.Trees[k].KBlock != want.Trees[k].KBlock || !slices.Equal(got.Trees[k].Start, want.Trees[k].Start) {
				t.Fatalf("%v: tree %d: %+v, want %+v", tie, k, got.Trees[k], want.Trees[k])
			}
			if g := got.Trees[k].Groups(); g < 4 {
				t.Fatalf("%v: tree %d has %d groups; want several at 1000 nonzeros per group", tie, k, g)
			}
		}
	}
}
