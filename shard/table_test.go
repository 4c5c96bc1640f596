package shard

import (
	"math/rand/v2"
	"reflect"
	"testing"
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

// A snapshot committed later leaves pending exactly what ClearPending at
// the snapshot would have left; an aborted one leaves everything pending.
func TestTableSnapshot(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	type row struct {
		i, a, j int
		c       float64
	}
	rows := make([]row, 3000)
	for k := range rows {
		rows[k] = row{rng.IntN(20), rng.IntN(2), rng.IntN(25), 0.1 + rng.Float64()}
	}
	var serial, snap, abort Table
	for k, r := range rows {
		if k == 1000 {
			serial.ClearPending()
			snap.BeginSnapshot()
			abort.BeginSnapshot()
		}
		for _, tab := range []*Table{&serial, &snap, &abort} {
			if err := tab.Add(r.i, r.a, r.j, r.c); err != nil {
				t.Fatal(err)
			}
		}
	}
	committed, freshRows := snap.CommittedEntries()
	snap.CommitSnapshot()
	if !reflect.DeepEqual(committed, snap.Entries()) || freshRows != 2000 {
		t.Fatal("CommittedEntries differs from Entries after CommitSnapshot")
	}
	if !reflect.DeepEqual(snap.Entries(), serial.Entries()) || snap.PendingSum() != serial.PendingSum() {
		t.Fatal("a committed snapshot differs from ClearPending at the snapshot")
	}
	if a, p := snap.Added(); a != 3000 || p != 2000 {
		t.Fatalf("Added() = %d, %d after the snapshot", a, p)
	}
	abort.AbortSnapshot()
	var none Table
	for _, r := range rows {
		_ = none.Add(r.i, r.a, r.j, r.c)
	}
	if !reflect.DeepEqual(abort.Entries(), none.Entries()) {
		t.Fatal("an aborted snapshot changed the pending counts")
	}
}
