package shard

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/emsf/emsf/factor"
)

// refMatrices is the counter as it was before the counting sort: a stable
// comparison sort of every transition by (action, state, next state) and a
// left-to-right sum of each run. Matrices must equal it bitwise.
func refMatrices(es []refEntry, u int) []*factor.Block {
	es = slices.Clone(es)
	slices.SortStableFunc(es, func(x, y refEntry) int {
		return cmp.Or(cmp.Compare(x.a, y.a), cmp.Compare(x.i, y.i), cmp.Compare(x.j, y.j))
	})
	out := make([]*factor.Block, u)
	k := 0
	for a := range u {
		for k < len(es) && es[k].a < int32(a) {
			k++
		}
		b := &factor.Block{Action: a, Ptr: []int64{0}}
		for k < len(es) && int(es[k].a) == a {
			e := es[k]
			k++
			if n := len(b.Cols); n > 0 && b.Rows[len(b.Rows)-1] == e.i && b.Cols[n-1] == e.j {
				b.Vals[n-1] += e.c
				continue
			}
			if len(b.Rows) == 0 || b.Rows[len(b.Rows)-1] != e.i {
				if len(b.Rows) > 0 {
					b.Ptr = append(b.Ptr, int64(len(b.Cols)))
				}
				b.Rows = append(b.Rows, e.i)
			}
			b.Cols = append(b.Cols, e.j)
			b.Vals = append(b.Vals, e.c)
		}
		if len(b.Rows) > 0 {
			b.Ptr = append(b.Ptr, int64(len(b.Cols)))
		}
		out[a] = b
	}
	return out
}

type refEntry struct {
	a, i, j int32
	c       float64
}

// sameBlocks fails unless got and want hold bitwise the same matrices.
func sameBlocks(t *testing.T, got, want []*factor.Block) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d blocks, want %d", len(got), len(want))
	}
	for a := range want {
		g, w := got[a], want[a]
		bitsOf := func(v []float64) []uint64 {
			out := make([]uint64, len(v))
			for k, x := range v {
				out[k] = math.Float64bits(x)
			}
			return out
		}
		if g.Action != w.Action || !slices.Equal(g.Rows, w.Rows) || !slices.Equal(g.Ptr, w.Ptr) ||
			!slices.Equal(g.Cols, w.Cols) || !slices.Equal(bitsOf(g.Vals), bitsOf(w.Vals)) {
			t.Fatalf("action %d: got rows %d nnz %d, want rows %d nnz %d (or different values)",
				a, len(g.Rows), g.NNZ(), len(w.Rows), w.NNZ())
		}
	}
}

// TestCounterMatchesStableSort feeds random transitions (duplicates,
// fractional weights whose sums depend on their order, rows short and
// long, several chunks, a state far past the rest) through Add and
// AddBatch and checks both against the reference bitwise.
func TestCounterMatchesStableSort(t *testing.T) {
	for _, tc := range []struct {
		name        string
		n, u, count int
		weighted    float64 // fraction of rows with a count other than 1
		farState    bool
	}{
		{"unweighted dense rows", 50, 3, 20000, 0, false},
		{"weighted dense rows", 50, 3, 20000, 1, false},
		{"some weights", 300, 2, 3 * chunkLen, 0.01, false},
		{"sparse rows", 100000, 2, 30000, 0.5, false},
		{"far state", 1000, 2, 5000, 0.3, true},
		{"one row", 1, 1, 1000, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.count), 7))
			var es []refEntry
			for range tc.count {
				// Skewed rows; next states from a small pool per row so
				// that duplicates are common.
				i := int32(float64(tc.n) * rng.Float64() * rng.Float64())
				j := int32(rng.IntN(tc.n))
				if rng.IntN(2) == 0 {
					j = int32((int(i)*7 + rng.IntN(5)) % tc.n)
				}
				c := 1.0
				if rng.Float64() < tc.weighted {
					c = []float64{0.1, 0.2, 0.3, 1e-17, 3, 1e16}[rng.IntN(6)]
				}
				es = append(es, refEntry{int32(rng.IntN(tc.u)), i, j, c})
			}
			if tc.farState {
				es = append(es, refEntry{1, math.MaxInt32 - 5, 3, 0.5}, refEntry{1, math.MaxInt32 - 5, 3, 0.25})
			}
			u := tc.u + 1 // one empty action at the end
			want := refMatrices(es, u)

			var one, batch Counter
			for _, e := range es {
				if err := one.Add(int(e.i), int(e.a), int(e.j), e.c); err != nil {
					t.Fatal(err)
				}
			}
			for lo := 0; lo < len(es); lo += 777 {
				var s, a, n []int32
				var c []float64
				allOne := true
				for _, e := range es[lo:min(lo+777, len(es))] {
					s, a, n, c = append(s, e.i), append(a, e.a), append(n, e.j), append(c, e.c)
					allOne = allOne && e.c == 1
				}
				if allOne && lo%2 == 0 {
					c = nil
				}
				if k, err := batch.AddBatch(s, a, n, c); err != nil || k != len(s) {
					t.Fatalf("AddBatch = %d, %v", k, err)
				}
			}
			checkTwoPass(t, es, u, want, !tc.farState && tc.n*tc.u <= tc.count/histPerTransition+histSlack)
			for _, ct := range []*Counter{&one, &batch} {
				if ct.Len() != len(es) {
					t.Fatalf("Len = %d, want %d", ct.Len(), len(es))
				}
				nn, uu := ct.Dims()
				if tc.farState && nn != math.MaxInt32-4 || !tc.farState && nn > tc.n || uu != tc.u {
					t.Fatalf("Dims = %d, %d", nn, uu)
				}
				sameBlocks(t, ct.Matrices(u), want)
				if ct.Len() != 0 {
					t.Fatal("Matrices did not consume the counter")
				}
			}
		})
	}
}

// TestCounterGivesSlabsBack checks that Matrices gives back every slab of
// a log spread over several (memory outside the Go heap, which the
// collector frees only once the counter is dropped) as it places them,
// on the dense path and on the sparse one (a state far past the rest),
// and that the counts stay the reference's.
func TestCounterGivesSlabsBack(t *testing.T) {
	for _, far := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(3, 5))
		var ct Counter
		es := make([]refEntry, 0, slabChunks*chunkLen+2*chunkLen) // 2 slabs
		s, a, n := make([]int32, cap(es)), make([]int32, cap(es)), make([]int32, cap(es))
		for k := range s {
			e := refEntry{0, int32(rng.IntN(5000)), int32(rng.IntN(5000)), 1}
			if far && k == len(s)/2 {
				e.i = math.MaxInt32 - 1
			}
			es = append(es, e)
			s[k], a[k], n[k] = e.i, e.a, e.j
		}
		if k, err := ct.AddBatch(s, a, n, nil); err != nil || k != len(s) {
			t.Fatalf("AddBatch = %d, %v", k, err)
		}
		var slabs []*slab
		for _, ch := range ct.acts[0].chunks {
			if ch.s != nil && !slices.Contains(slabs, ch.s) {
				slabs = append(slabs, ch.s)
			}
		}
		if len(slabs) < 2 {
			t.Fatalf("far %v: %d transitions in %d slabs, want >= 2", far, len(es), len(slabs))
		}
		// Every count is 1, so any summing order gives the same bits: the
		// reference is a plain sort of (state, next state) keys, much
		// faster than refMatrices under -race.
		keys := make([]uint64, len(es))
		for k, e := range es {
			keys[k] = uint64(e.i)<<32 | uint64(e.j)
		}
		slices.Sort(keys)
		want := &factor.Block{Ptr: []int64{0}}
		for k, key := range keys {
			i, j := int32(key>>32), int32(key)
			if k > 0 && keys[k-1] == key {
				want.Vals[len(want.Vals)-1]++
				continue
			}
			if k == 0 || int32(keys[k-1]>>32) != i {
				if k > 0 {
					want.Ptr = append(want.Ptr, int64(len(want.Cols)))
				}
				want.Rows = append(want.Rows, i)
			}
			want.Cols, want.Vals = append(want.Cols, j), append(want.Vals, 1)
		}
		want.Ptr = append(want.Ptr, int64(len(want.Cols)))
		sameBlocks(t, ct.Matrices(1), []*factor.Block{want})
		for k, sl := range slabs {
			if sl.mem != nil || sl.i != nil {
				t.Fatalf("far %v: slab %d of %d not given back", far, k, len(slabs))
			}
		}
	}
}

// TestCounterDroppedUnmapsSlabs checks that a Counter dropped without
// Matrices (a read that failed) gives its slabs back once collected: the
// slab's mapping leaves /proc/self/maps.
func TestCounterDroppedUnmapsSlabs(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("slabs are mapped outside the Go heap on linux only")
	}
	addr := func() uintptr {
		var ct Counter
		zeros := make([]int32, chunkLen*(chunkLenGrowth+1)) // past the Go-heap chunks: one slab
		if k, err := ct.AddBatch(zeros, zeros, zeros, nil); err != nil || k != len(zeros) {
			t.Fatalf("AddBatch = %d, %v", k, err)
		}
		s := ct.acts[0].slab
		if s == nil {
			t.Fatal("no slab")
		}
		return uintptr(unsafe.Pointer(unsafe.SliceData(s.mem)))
	}()
	mapped := func() bool {
		maps, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(maps), "\n") {
			var lo, hi uintptr
			if _, err := fmt.Sscanf(line, "%x-%x", &lo, &hi); err == nil && lo <= addr && addr < hi {
				return true
			}
		}
		return false
	}
	if !mapped() {
		t.Fatalf("slab at %#x not in /proc/self/maps", addr)
	}
	// Cleanups run on their own goroutine after a collection: wait for
	// it, collecting, with a generous deadline.
	for deadline := time.Now().Add(time.Minute); mapped(); {
		if time.Now().After(deadline) {
			t.Fatalf("slab at %#x still mapped a minute after its counter was dropped", addr)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCounterLargeAction(t *testing.T) {
	var ct Counter
	es := []refEntry{{denseActions + 2, 1, 2, 1}, {0, 0, 0, 1}, {denseActions + 2, 1, 2, 0.5}}
	for _, e := range es {
		if err := ct.Add(int(e.i), int(e.a), int(e.j), e.c); err != nil {
			t.Fatal(err)
		}
	}
	u := denseActions + 3
	sameBlocks(t, ct.Matrices(u), refMatrices(es, u))
}

func TestCounterAddBatchStopsAtBadRow(t *testing.T) {
	var ct Counter
	k, err := ct.AddBatch([]int32{0, 1, 2}, []int32{0, 0, 0}, []int32{1, 1, 1}, []float64{1, math.Inf(1), 1})
	if k != 1 || err == nil || !strings.Contains(err.Error(), "count +Inf") {
		t.Fatalf("AddBatch = %d, %v", k, err)
	}
	if ct.Len() != 1 {
		t.Fatalf("Len = %d, want the one row before the bad one", ct.Len())
	}
	k, err = ct.AddBatch([]int32{0, -1}, []int32{0, 0}, []int32{1, 1}, nil)
	if k != 1 || err == nil || !strings.Contains(err.Error(), "indices") {
		t.Fatalf("AddBatch = %d, %v", k, err)
	}
	got := ct.Matrices(1)
	want := refMatrices([]refEntry{{0, 0, 1, 1}, {0, 0, 1, 1}}, 1)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got[0], want[0])
	}
}
