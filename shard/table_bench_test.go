package shard

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// The candidates for the service's counts (issue 29), measured on the
// same stream: rows per second and bytes per distinct transition (heap in
// use after a collection, plus the off-heap arrays of Table).
//
//	go test ./shard/ -run '^$' -bench BenchmarkCountsIngest -benchtime 1x
//
// compact: Table (CSR per action, buffer merged in place); map: the
// table this replaced (a map from the transition to an entry of 24
// bytes); rowruns: a sorted run per row with an unsorted tail merged
// into it every 32 new columns.
func BenchmarkCountsIngest(b *testing.B) {
	for _, shape := range []struct{ n, u, rows int }{{2000, 4, 5_000_000}, {100_000, 4, 5_000_000}} {
		rng := rand.New(rand.NewPCG(1, 2))
		is, as, js := make([]int32, shape.rows), make([]int32, shape.rows), make([]int32, shape.rows)
		for k := range is {
			is[k], as[k], js[k] = int32(rng.IntN(shape.n)), int32(rng.IntN(shape.u)), int32(rng.IntN(shape.n))
		}
		for _, c := range []struct {
			name string
			new  func() counts
		}{
			{"compact", func() counts { return &Table{} }},
			{"map", func() counts { return &mapCounts{idx: map[[3]int32]int{}} }},
			{"rowruns", func() counts { return &rowRuns{rows: map[uint64]*run{}} }},
		} {
			b.Run(fmt.Sprintf("%s/n=%d", c.name, shape.n), func(b *testing.B) {
				for b.Loop() {
					runtime.GC()
					var before runtime.MemStats
					runtime.ReadMemStats(&before)
					t := c.new()
					for k := range is {
						_ = t.Add(int(is[k]), int(as[k]), int(js[k]), 1)
					}
					nnz := t.distinct()
					runtime.GC()
					var after runtime.MemStats
					runtime.ReadMemStats(&after)
					bytes := float64(after.HeapInuse) - float64(before.HeapInuse) + float64(t.offHeap())
					b.ReportMetric(bytes/float64(nnz), "B/distinct")
					b.ReportMetric(float64(nnz), "distinct")
					runtime.KeepAlive(t)
					if tab, ok := t.(*Table); ok {
						tab.Free()
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(is)), "ns/row")
			})
		}
	}
}

type counts interface {
	Add(i, a, j int, c float64) error
	distinct() int
	offHeap() int64
}

func (t *Table) distinct() int  { t.Merge(); return t.NNZ() }
func (t *Table) offHeap() int64 { return t.Bytes() - t.log.bytes() }

// mapCounts is the table Table replaced.
type mapCounts struct {
	idx     map[[3]int32]int
	entries []TableEntry
}

func (m *mapCounts) Add(i, a, j int, c float64) error {
	k := [3]int32{int32(a), int32(i), int32(j)}
	p, ok := m.idx[k]
	if !ok {
		p = len(m.entries)
		m.idx[k] = p
		m.entries = append(m.entries, TableEntry{Action: k[0], State: k[1], Next: k[2]})
	}
	m.entries[p].Count += c
	m.entries[p].Pending += c
	return nil
}
func (m *mapCounts) distinct() int  { return len(m.entries) }
func (m *mapCounts) offHeap() int64 { return 0 }

// rowRuns keeps a sorted run per row and an unsorted tail of new columns.
type rowRuns struct {
	rows map[uint64]*run
	nnz  int
}

type run struct {
	cols        []int32
	count, pend []float64
	tail        []int32
	tc, tp      []float64
}

func (r *rowRuns) Add(i, a, j int, c float64) error {
	key := uint64(a)<<32 | uint64(i)
	w := r.rows[key]
	if w == nil {
		w = &run{}
		r.rows[key] = w
	}
	if p, ok := slices.BinarySearch(w.cols, int32(j)); ok {
		w.count[p] += c
		w.pend[p] += c
		return nil
	}
	for q, x := range w.tail {
		if x == int32(j) {
			w.tc[q] += c
			w.tp[q] += c
			return nil
		}
	}
	w.tail, w.tc, w.tp = append(w.tail, int32(j)), append(w.tc, c), append(w.tp, c)
	r.nnz++
	if len(w.tail) == 32 {
		for q, x := range w.tail {
			p, _ := slices.BinarySearch(w.cols, x)
			w.cols = slices.Insert(w.cols, p, x)
			w.count = slices.Insert(w.count, p, w.tc[q])
			w.pend = slices.Insert(w.pend, p, w.tp[q])
		}
		w.tail, w.tc, w.tp = w.tail[:0], w.tc[:0], w.tp[:0]
	}
	return nil
}
func (r *rowRuns) distinct() int  { return r.nnz }
func (r *rowRuns) offHeap() int64 { return 0 }
