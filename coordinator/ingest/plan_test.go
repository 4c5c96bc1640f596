package ingest

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/ingestwire"
)

// TestPlanBuckets: buckets cover [0, n) of every action that has
// transitions, in (action, row) order, none of an action without; the
// reducers are contiguous runs 0 … P−1; on a uniform histogram each
// worker gets about its share.
func TestPlanBuckets(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n, u, p := 1+rng.IntN(100000), 1+rng.IntN(6), 1+rng.IntN(9)
		var h shard.Hist
		var st, ac []int32
		for range 1 + rng.IntN(5000) {
			a := int32(rng.IntN(u))
			if a == 1 {
				continue // an action without transitions
			}
			st, ac = append(st, rng.Int32N(int32(n))), append(ac, a)
		}
		h.Add(st, ac)
		bs := planBuckets(&h, n, u, p, 1+rng.IntN(5))
		for k, b := range bs {
			first := k == 0 || bs[k-1].Action != b.Action
			last := k+1 == len(bs) || bs[k+1].Action != b.Action
			if (first && b.RowLo != 0) || (!first && b.RowLo != bs[k-1].RowHi) || (last && b.RowHi != n) || b.RowLo >= b.RowHi {
				t.Fatalf("bucket %d %+v does not continue the rows (n=%d)", k, b, n)
			}
			if h.Total(b.Action) == 0 {
				t.Fatalf("bucket of action %d without transitions", b.Action)
			}
			if k > 0 && (b.Reducer < bs[k-1].Reducer || b.Action < bs[k-1].Action) {
				t.Fatalf("buckets out of order: %+v after %+v", b, bs[k-1])
			}
			if b.Reducer < 0 || b.Reducer >= p {
				t.Fatalf("reducer %d of %d", b.Reducer, p)
			}
		}
		for a := range u {
			if h.Total(a) > 0 && !slices.ContainsFunc(bs, func(b shard.Bucket) bool { return b.Action == a }) {
				t.Fatalf("action %d has transitions and no bucket", a)
			}
		}
	}
	// Uniform: 8 workers, each within 2× of its share.
	var h shard.Hist
	var st, ac []int32
	for i := range 80000 {
		st, ac = append(st, int32(i)), append(ac, int32(i%2))
	}
	h.Add(st, ac)
	bs := planBuckets(&h, 80000, 2, 8, 4)
	load := make([]int64, 8)
	for _, b := range bs {
		load[b.Reducer] += int64(b.RowHi - b.RowLo)
	}
	for w, l := range load {
		if l < 80000*2/8/2 || l > 80000*2/8*2 {
			t.Fatalf("worker %d reduces %d rows of 160000: %v", w, l, load)
		}
	}
}

// TestChainShards: the row ranges of a chain's shards are Split's: from
// 0 for the first, to n for the last, else from each shard's first row
// to the next's; tails are the later buckets a shard runs into.
func TestChainShards(t *testing.T) {
	all := []shard.Bucket{{Action: 1, RowLo: 0, RowHi: 10, Reducer: 0}, {Action: 1, RowLo: 10, RowHi: 20, Reducer: 1}, {Action: 1, RowLo: 20, RowHi: 50, Reducer: 2}}
	got := chainShards(ingestwire.SetTrain, 1, []int32{3, 8, 25}, []int{0, 0, 2}, []int{0, 1, 2}, all, []string{"a", "b", "c"}, 50)
	want := []struct {
		first, end  int32
		lo, hi      int
		builder     string
		tailBuckets []int
	}{
		{3, 8, 0, 8, "a", nil},
		{8, 25, 8, 25, "a", []int{1, 2}},
		{25, -1, 25, 50, "c", nil},
	}
	for k, w := range want {
		g := got[k]
		var tails []int
		for _, tl := range g.Tails {
			tails = append(tails, tl.Bucket)
		}
		if g.First != w.first || g.End != w.end || g.RowLo != w.lo || g.RowHi != w.hi || g.builder != w.builder || !slices.Equal(tails, w.tailBuckets) {
			t.Fatalf("shard %d: %+v (builder %s), want %+v", k, g.BuildShard, g.builder, w)
		}
	}
}

// TestScansLeases: a lost worker's leased splits go back to the queue,
// in order, a split's first reply is kept, and with holders a worker
// leases only the splits it holds.
func TestScansLeases(t *testing.T) {
	splits := arrowio.PlanSplits([]arrowio.DataFile{{Name: "a", Size: 1000, Format: arrowio.FormatCSV}}, 100)
	s := newScans[*ingestwire.ScanReply](splits, nil)
	a1, _ := s.next("a")
	b1, _ := s.next("b")
	a2, _ := s.next("a")
	s.finish("a", a1.Ordinal, &ingestwire.ScanReply{})
	s.lost("a")
	if sp, _ := s.next("b"); sp != a2 {
		t.Fatalf("next after a's loss: %d, want its split %d back", sp.Ordinal, a2.Ordinal)
	}
	s.finish("b", b1.Ordinal, &ingestwire.ScanReply{ScanIssue: ingestwire.ScanIssue{ReadWhole: "first"}})
	s.finish("c", b1.Ordinal, &ingestwire.ScanReply{})
	if s.done[b1.Ordinal].ReadWhole != "first" || s.by[b1.Ordinal] != "b" {
		t.Fatal("a second reply replaced the first")
	}
	held := newScans[int](splits, func(k int) string { return []string{"a", "b"}[k%2] })
	for range 3 {
		if sp, ok := held.next("b"); !ok || sp.Ordinal%2 != 1 {
			t.Fatalf("b leased split %d (ok %v), which a holds", sp.Ordinal, ok)
		}
	}
}
