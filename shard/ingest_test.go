package shard

import (
	"math/rand/v2"
	"testing"
)

// TestSummaryMerge: summaries of the pieces of a stream merged in order
// are the summary of the stream (rows, sizes, integrality, sum, CRCs, and
// histograms that keep every transition).
func TestSummaryMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 50 {
		n := 1 + rng.IntN(3000)
		st, ac, nx := make([]int32, n), make([]int32, n), make([]int32, n)
		cs := make([]float64, n)
		u := 1 + rng.IntN([]int{3, 100, 20000}[trial%3])
		for k := range n {
			st[k], ac[k], nx[k] = rng.Int32N(1<<(1+rng.IntN(30))), rng.Int32N(int32(u)), rng.Int32N(500)
			cs[k] = float64(1 + rng.IntN(3))
			if trial%4 == 0 && rng.IntN(100) == 0 {
				cs[k] = 0.5
			}
		}
		var whole, merged Summary
		whole.Add(st, ac, nx, cs)
		for lo := 0; lo < n; {
			hi := min(n, lo+rng.IntN(500))
			var p Summary
			p.Add(st[lo:hi], ac[lo:hi], nx[lo:hi], cs[lo:hi])
			merged.Merge(&p)
			lo = hi
		}
		if whole.Rows != int64(n) || merged.Rows != whole.Rows || merged.States != whole.States || merged.Actions != whole.Actions ||
			merged.Fractional != whole.Fractional || (!whole.Fractional && merged.IntSum != whole.IntSum) || merged.CRC != whole.CRC {
			t.Fatalf("trial %d: merged rows %d n %d u %d frac %v sum %d crc %v, whole rows %d n %d u %d frac %v sum %d crc %v", trial,
				merged.Rows, merged.States, merged.Actions, merged.Fractional, merged.IntSum, merged.CRC,
				whole.Rows, whole.States, whole.Actions, whole.Fractional, whole.IntSum, whole.CRC)
		}
		for _, h := range []*Hist{&whole.Hist, &merged.Hist} {
			cells, total := 0, int64(0)
			for a := range h.Bins {
				cells += len(h.Bins[a])
				total += h.Total(a)
				if len(h.Bins[a]) > HistBins {
					t.Fatalf("trial %d: %d bins for action %d", trial, len(h.Bins[a]), a)
				}
			}
			if total != int64(n) || cells > max(HistCells, len(h.Bins)) {
				t.Fatalf("trial %d: histogram of %d transitions in %d cells", trial, total, cells)
			}
		}
		var want Summary
		want.Add(st, ac, nx, nil)
		if want.IntSum != uint64(n) || want.Fractional {
			t.Fatal("counts of 1")
		}
	}
}

// TestRouter: every (action, state) goes to the bucket holding it.
func TestRouter(t *testing.T) {
	bs := []Bucket{{0, 0, 10, 0}, {0, 10, 25, 1}, {0, 25, 100, 0}, {2, 0, 100, 1}}
	r := NewRouter(bs, 4)
	for a := range 4 {
		for i := range 100 {
			got := r.Bucket(int32(a), int32(i))
			want := -1
			for k, b := range bs {
				if b.Action == a && i >= b.RowLo && i < b.RowHi {
					want = k
				}
			}
			if got != want {
				t.Fatalf("(%d, %d): bucket %d, want %d", a, i, got, want)
			}
		}
	}
}
