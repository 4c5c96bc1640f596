package shard

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/emsf/emsf/factor"
)

// A Table gives the same matrices as a Counter fed the same transitions,
// and a restored checkpoint continues exactly where the table was.
func TestTableMatchesCounter(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tab Table
	var ct Counter
	for k := range 5000 {
		i, a, j := rng.IntN(30), rng.IntN(3), rng.IntN(30)
		c := float64(1 + rng.IntN(3))
		if err := tab.Add(i, a, j, c); err != nil {
			t.Fatal(err)
		}
		if err := ct.Add(i, a, j, c); err != nil {
			t.Fatal(err)
		}
		if k == 2999 {
			tab.ClearPending()
		}
	}
	n, u := tab.Dims()
	if cn, cu := ct.Dims(); n != cn || u != cu {
		t.Fatalf("dims %d,%d vs counter %d,%d", n, u, cn, cu)
	}
	if all, pend := tab.Added(); all != 5000 || pend != 2000 {
		t.Fatalf("Added() = %d, %d", all, pend)
	}
	want := ct.Matrices(u)
	got := tab.Blocks(u, false)
	for a := range u {
		if !reflect.DeepEqual(got[a], want[a]) {
			t.Fatalf("action %d: table block differs from the counter's", a)
		}
	}
	tab.Merge() // NNZ counts merged transitions
	rt, err := Restore(tab.Entries(), 5000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if rt.Sum() != tab.Sum() || rt.PendingSum() != tab.PendingSum() || rt.NNZ() != tab.NNZ() {
		t.Fatalf("restored sums %v/%v/%d, want %v/%v/%d", rt.Sum(), rt.PendingSum(), rt.NNZ(), tab.Sum(), tab.PendingSum(), tab.NNZ())
	}
	for a, b := range rt.Blocks(u, true) {
		if !reflect.DeepEqual(b, tab.Blocks(u, true)[a]) {
			t.Fatalf("action %d: restored pending block differs", a)
		}
	}
	var pend float64
	for _, b := range tab.Blocks(u, true) {
		for _, v := range b.Vals {
			pend += v
		}
	}
	if pend != tab.PendingSum() {
		t.Fatalf("pending blocks sum to %v, PendingSum %v", pend, tab.PendingSum())
	}
}

func TestTableErrors(t *testing.T) {
	var tab Table
	for _, c := range []struct {
		i, a, j int
		c       float64
	}{{-1, 0, 0, 1}, {0, -1, 0, 1}, {0, 0, 0, 0}, {0, 0, 0, -2}} {
		if err := tab.Add(c.i, c.a, c.j, c.c); err == nil {
			t.Errorf("Add(%d, %d, %d, %v): no error", c.i, c.a, c.j, c.c)
		}
	}
	bad := [][]TableEntry{
		{{0, 1, 2, 1, 0}, {0, 1, 2, 2, 0}},
		{{0, 1, 2, 1, 2}},
		{{0, -1, 2, 1, 0}},
		{{0, 1, 2, 0, 0}},
	}
	for k, es := range bad {
		if _, err := Restore(es, 10, 0); err == nil {
			t.Errorf("case %d: Restore accepted %v", k, es)
		}
	}
	if _, err := Restore(nil, 1, 2); err == nil {
		t.Error("Restore with more pending than added rows: no error")
	}
}

// refTable is the reference a Table must match bitwise: one float64 per
// transition for the total and one for the pending count, each updated
// at every arrival, and a third for the counts since Freeze.
type refTable struct {
	count, pend, fresh map[[3]int32]float64
}

func newRef() *refTable {
	return &refTable{count: map[[3]int32]float64{}, pend: map[[3]int32]float64{}, fresh: map[[3]int32]float64{}}
}

func (r *refTable) add(i, a, j int, c float64) {
	k := [3]int32{int32(a), int32(i), int32(j)}
	r.count[k] += c
	r.pend[k] += c
	r.fresh[k] += c
}

// entries returns the reference's entries sorted; with committed the
// pending counts are those since Freeze.
func (r *refTable) entries(committed bool) []TableEntry {
	var out []TableEntry
	for k, c := range r.count {
		p := r.pend[k]
		if committed {
			p = r.fresh[k]
		}
		out = append(out, TableEntry{Action: k[0], State: k[1], Next: k[2], Count: c, Pending: p})
	}
	slices.SortFunc(out, func(x, y TableEntry) int {
		return cmp.Or(cmp.Compare(x.Action, y.Action), cmp.Compare(x.State, y.State), cmp.Compare(x.Next, y.Next))
	})
	return out
}

// A Table fed random transitions with counts that are not dyadic (so that
// any other order of summing would show in the bits) matches the
// reference bitwise whatever its buffer size, across merges, freezes
// committed and abandoned, ClearPending and a sparse action index; a frozen
// view does not change while rows are added.
func TestTableMatchesReference(t *testing.T) {
	for _, buf := range []int{1, 7, 300, DefaultMinBufferRows} {
		t.Run(fmt.Sprint(buf), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(buf), 9))
			tab := &Table{MinBufferRows: buf}
			ref := newRef()
			var frozen *Frozen
			var frozenEntries []TableEntry
			var frozenBlocks []*factor.Block
			const u = 3
			check := func(step int) {
				t.Helper()
				if got, want := tab.Entries(), ref.entries(false); !reflect.DeepEqual(got, want) {
					t.Fatalf("step %d: entries differ from the reference (%d vs %d)", step, len(got), len(want))
				}
				if tab.Frozen() {
					var got []TableEntry
					_ = tab.Scan(true, func(e TableEntry) error { got = append(got, e); return nil })
					if !reflect.DeepEqual(got, ref.entries(true)) {
						t.Fatalf("step %d: committed scan differs from the reference", step)
					}
				}
			}
			steps := 3000
			if buf == 1 {
				steps = 800 // a merge per row
			}
			for step := range steps {
				i, a, j := rng.IntN(40), rng.IntN(u), rng.IntN(60)
				if rng.IntN(50) == 0 {
					a = denseActions + 5 // a sparse action
				}
				c := 0.1 + rng.Float64()
				if err := tab.Add(i, a, j, c); err != nil {
					t.Fatal(err)
				}
				ref.add(i, a, j, c)
				switch rng.IntN(400) {
				case 0:
					check(step)
				case 1:
					if !tab.Frozen() {
						tab.ClearPending()
						clear(ref.pend)
					}
				case 2, 3:
					if !tab.Frozen() {
						frozen = tab.Freeze(u)
						clear(ref.fresh)
						frozenEntries = blockEntries(frozen.Blocks())
						frozenBlocks = cloneBlocks(frozen.Blocks())
						check(step)
					}
				case 4, 5:
					if tab.Frozen() {
						if got := blockEntries(frozen.Blocks()); !reflect.DeepEqual(got, frozenEntries) {
							t.Fatalf("step %d: the frozen view changed", step)
						}
						if !reflect.DeepEqual(frozen.Blocks(), frozenBlocks) {
							t.Fatalf("step %d: the frozen blocks changed", step)
						}
						commit := rng.IntN(2) == 0
						tab.Thaw(commit)
						if commit {
							ref.pend, ref.fresh = ref.fresh, map[[3]int32]float64{}
						}
						check(step)
					}
				}
			}
			if tab.Frozen() {
				tab.Thaw(false)
			}
			tab.Merge()
			check(-1)
			if tab.NNZ() != len(ref.count) || tab.Buffered() != 0 {
				t.Fatalf("nnz %d, buffered %d; want %d, 0", tab.NNZ(), tab.Buffered(), len(ref.count))
			}
			tab.Free()
		})
	}
}

// blockEntries lists the entries of blocks (totals, no pending).
func blockEntries(bs []*factor.Block) []TableEntry {
	var out []TableEntry
	for _, b := range bs {
		for r, i := range b.Rows {
			for p := b.Ptr[r]; p < b.Ptr[r+1]; p++ {
				out = append(out, TableEntry{Action: int32(b.Action), State: i, Next: b.Cols[p], Count: b.Vals[p]})
			}
		}
	}
	return out
}

func cloneBlocks(bs []*factor.Block) []*factor.Block {
	out := make([]*factor.Block, len(bs))
	for k, b := range bs {
		out[k] = &factor.Block{Action: b.Action, Rows: slices.Clone(b.Rows), Ptr: slices.Clone(b.Ptr), Cols: slices.Clone(b.Cols), Vals: slices.Clone(b.Vals)}
	}
	return out
}

// A frozen table's view: the blocks hold every count (the buffer merged
// first), Pending lists the pending ones, Prior the rest; Full turns on
// once the buffer reaches its size and Add still takes rows.
func TestTableFrozenView(t *testing.T) {
	tab := &Table{MinBufferRows: 4}
	rows := [][4]float64{{0, 0, 1, 1}, {0, 0, 1, 2}, {2, 1, 0, 0.5}, {1, 0, 3, 1}}
	for _, r := range rows[:2] {
		_ = tab.Add(int(r[0]), int(r[1]), int(r[2]), r[3])
	}
	tab.ClearPending()
	for _, r := range rows[2:] {
		_ = tab.Add(int(r[0]), int(r[1]), int(r[2]), r[3])
	}
	f := tab.Freeze(2)
	if got := blockEntries(f.Blocks()); !reflect.DeepEqual(got, []TableEntry{{0, 0, 1, 3, 0}, {0, 1, 3, 1, 0}, {1, 2, 0, 0.5, 0}}) {
		t.Fatalf("frozen blocks: %v", got)
	}
	var pend []TableEntry
	_ = f.Pending(func(i, a, j int, c float64) error {
		pend = append(pend, TableEntry{Action: int32(a), State: int32(i), Next: int32(j), Count: c})
		return nil
	})
	if !reflect.DeepEqual(pend, []TableEntry{{0, 1, 3, 1, 0}, {1, 2, 0, 0.5, 0}}) {
		t.Fatalf("pending: %v", pend)
	}
	if got := blockEntries(f.Prior()); !reflect.DeepEqual(got, []TableEntry{{0, 0, 1, 3, 0}}) {
		t.Fatalf("prior: %v", got)
	}
	for k := range 4 {
		if tab.Full() {
			t.Fatalf("full after %d rows of a buffer of 4", k)
		}
		_ = tab.Add(5, 0, k, 1)
	}
	if !tab.Full() || tab.Buffered() != 4 || tab.NNZ() != 3 {
		t.Fatalf("after 4 rows frozen: full %v, buffered %d, nnz %d", tab.Full(), tab.Buffered(), tab.NNZ())
	}
	tab.Thaw(true)
	if tab.Full() || tab.Buffered() != 0 || tab.NNZ() != 7 || tab.PendingSum() != 4 {
		t.Fatalf("thawed: full %v, buffered %d, nnz %d, pending %v", tab.Full(), tab.Buffered(), tab.NNZ(), tab.PendingSum())
	}
	if a, p := tab.Added(); a != 8 || p != 4 {
		t.Fatalf("Added() = %d, %d", a, p)
	}
}

// The table's memory stays within twice the fit's CSR of the same counts
// plus the buffer's floor, at every size while it grows, with unit counts
// and with counts other than 1.
func TestTableBytesBound(t *testing.T) {
	for _, unit := range []bool{true, false} {
		tab := &Table{MinBufferRows: 1 << 12}
		rng := rand.New(rand.NewPCG(3, 3))
		// The buffer's floor: MinBufferRows rows of 16 bytes.
		const fixed = 16 << 12
		for k := 1; k <= 200_000; k++ {
			c := 1.0
			if !unit {
				c = 1 + float64(rng.IntN(4))
			}
			_ = tab.Add(rng.IntN(3000), rng.IntN(2), rng.IntN(3000), c)
			if k%25_000 == 0 {
				if b, csr := tab.Bytes(), tab.CSRBytes(); b > 2*csr+fixed {
					t.Fatalf("unit %v, %d rows: %d bytes for a CSR of %d (nnz %d)", unit, k, b, csr, tab.NNZ())
				}
			}
		}
		t.Logf("unit counts %v: %.1f bytes per distinct transition, CSR %.1f", unit, float64(tab.Bytes())/float64(tab.NNZ()), float64(tab.CSRBytes())/float64(tab.NNZ()))
		tab.Free()
	}
}

// sortKeys sorts as a stable sort does, with its values moving along.
func TestSortKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 2, 100, 20000} {
		for _, spread := range []uint64{1, 1 << 11, 1 << 40, math.MaxUint64} {
			keys := make([]uint64, n)
			vals := make([]float64, n)
			type kv struct {
				k uint64
				v float64
			}
			want := make([]kv, n)
			for q := range keys {
				keys[q] = rng.Uint64() % spread
				if spread == math.MaxUint64 {
					keys[q] = rng.Uint64()
				}
				vals[q] = float64(q)
				want[q] = kv{keys[q], vals[q]}
			}
			slices.SortStableFunc(want, func(x, y kv) int { return cmp.Compare(x.k, y.k) })
			sortKeys(keys, vals)
			for q := range want {
				if keys[q] != want[q].k || vals[q] != want[q].v {
					t.Fatalf("n %d spread %d: position %d is (%d, %v), want (%d, %v)", n, spread, q, keys[q], vals[q], want[q].k, want[q].v)
				}
			}
		}
	}
}

// A column keeps its elements as it grows past the off-heap size and when
// it shrinks, and is empty once freed.
func TestColumnGrow(t *testing.T) {
	var c column[int64]
	for n := 1; n < 3*offHeapMin/8; n = n*3/2 + 1 {
		old := len(c.s)
		c.resize(n)
		for q := old; q < n; q++ {
			if c.s[q] != 0 {
				t.Fatalf("element %d of a grown column is %d", q, c.s[q])
			}
			c.s[q] = int64(q) * 7
		}
		for q := range n {
			if c.s[q] != int64(q)*7 {
				t.Fatalf("after growing to %d, element %d is %d", n, q, c.s[q])
			}
		}
	}
	if c.m == nil && mapOK() {
		t.Error("a column of several MiB is still on the Go heap")
	}
	c.resize(10)
	c.resize(20)
	if c.s[9] != 63 || c.s[15] != 0 {
		t.Fatalf("shrunk and regrown: %v", c.s[:20])
	}
	c.free()
	if c.s != nil || c.bytes() != 0 {
		t.Fatal("a freed column holds elements")
	}
}

// mapOK reports whether this platform maps columns outside the heap.
func mapOK() bool {
	mem, ok := mapColumn(4096)
	if ok {
		unmapColumn(mem)
	}
	return ok
}
