package shard

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/emsf/emsf/factor"
)

// passBatches calls fn with es in batches of 777 transitions (counts nil
// in every other batch whose counts are all 1).
func passBatches(t *testing.T, es []refEntry, fn func(s, a, n []int32, c []float64)) {
	t.Helper()
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
		fn(s, a, n, c)
	}
}

// checkTwoPass counts es with a TwoPass and checks the matrices against
// want (bitwise); fits says whether its histogram must fit.
func checkTwoPass(t *testing.T, es []refEntry, u int, want []*factor.Block, fits bool) {
	t.Helper()
	var tp TwoPass
	passBatches(t, es, func(s, a, n []int32, c []float64) {
		if k, err := tp.Hist(s, a, n, c); err != nil || k != len(s) {
			t.Fatalf("Hist = %d, %v", k, err)
		}
	})
	var ct Counter
	for _, e := range es {
		if err := ct.Add(int(e.i), int(e.a), int(e.j), e.c); err != nil {
			t.Fatal(err)
		}
	}
	if tp.Len() != len(es) {
		t.Fatalf("Len = %d, want %d", tp.Len(), len(es))
	}
	if n, u := tp.Dims(); n != ct.maxS || u != ct.maxA {
		t.Fatalf("Dims = %d, %d; the Counter's are %d, %d", n, u, ct.maxS, ct.maxA)
	}
	if tp.Fits() != fits {
		t.Fatalf("Fits = %v, want %v", tp.Fits(), fits)
	}
	if !fits {
		return
	}
	tp.Plan()
	passBatches(t, es, func(s, a, n []int32, c []float64) {
		if err := tp.Fill(s, a, n, c); err != nil {
			t.Fatal(err)
		}
	})
	got, err := tp.Matrices(u)
	if err != nil {
		t.Fatal(err)
	}
	sameBlocks(t, got, want)
}

func TestTwoPassHistStopsAtBadRow(t *testing.T) {
	var tp TwoPass
	var ct Counter
	for _, batch := range []struct {
		s, a, n []int32
		c       []float64
	}{
		{[]int32{0, 1, 2}, []int32{0, 0, 0}, []int32{1, 1, 1}, []float64{1, math.Inf(1), 1}},
		{[]int32{0, -1}, []int32{0, 0}, []int32{1, 1}, nil},
		{[]int32{0, 1}, []int32{0, 0}, []int32{1, 1}, []float64{1, 0}},
	} {
		k1, err1 := tp.Hist(batch.s, batch.a, batch.n, batch.c)
		k2, err2 := ct.AddBatch(batch.s, batch.a, batch.n, batch.c)
		if k1 != k2 || err1 == nil || err2 == nil || err1.Error() != err2.Error() {
			t.Errorf("Hist = %d, %v; AddBatch = %d, %v", k1, err1, k2, err2)
		}
	}
	if tp.Len() != 3 {
		t.Fatalf("Len = %d, want the 3 rows before the bad ones", tp.Len())
	}
}

// TestTwoPassInputChanged checks that a second pass that differs from the
// first fails with ErrInputChanged and never writes out of place.
func TestTwoPassInputChanged(t *testing.T) {
	first := []refEntry{{0, 0, 1, 1}, {0, 0, 2, 1}, {0, 1, 1, 1}, {1, 2, 0, 0.5}}
	for name, second := range map[string][]refEntry{
		"moved within an action":  {{0, 0, 1, 1}, {0, 0, 2, 1}, {0, 0, 1, 1}, {1, 2, 0, 0.5}},
		"moved to a later state":  {{0, 1, 1, 1}, {0, 0, 2, 1}, {0, 1, 1, 1}, {1, 2, 0, 0.5}},
		"new state":               {{0, 0, 1, 1}, {0, 0, 2, 1}, {0, 9, 1, 1}, {1, 2, 0, 0.5}},
		"new action":              {{0, 0, 1, 1}, {0, 0, 2, 1}, {0, 1, 1, 1}, {2, 2, 0, 0.5}},
		"fewer":                   {{0, 0, 1, 1}, {0, 0, 2, 1}, {0, 1, 1, 1}},
		"more":                    {{0, 0, 1, 1}, {0, 0, 2, 1}, {0, 1, 1, 1}, {1, 2, 0, 0.5}, {1, 2, 0, 0.5}},
		"next state too large":    {{0, 0, 1, 1}, {0, 0, 1 << groupBits, 1}, {0, 1, 1, 1}, {1, 2, 0, 0.5}},
		"negative next state":     {{0, 0, 1, 1}, {0, 0, -2, 1}, {0, 1, 1, 1}, {1, 2, 0, 0.5}},
		"moved to a state past n": {{0, 0, 1, 1}, {0, 0, 2, 1}, {0, 3, 1, 1}, {1, 2, 0, 0.5}},
	} {
		t.Run(name, func(t *testing.T) {
			var tp TwoPass
			passBatches(t, first, func(s, a, n []int32, c []float64) {
				if _, err := tp.Hist(s, a, n, c); err != nil {
					t.Fatal(err)
				}
			})
			tp.Plan()
			var err error
			passBatches(t, second, func(s, a, n []int32, c []float64) {
				err = errors.Join(err, tp.Fill(s, a, n, c))
			})
			if err == nil {
				_, err = tp.Matrices(2)
			}
			if !errors.Is(err, ErrInputChanged) {
				t.Fatalf("got %v, want ErrInputChanged", err)
			}
		})
	}
}

func TestTwoPassFits(t *testing.T) {
	// A far state or action: no histogram (Fits false), no huge allocation.
	for _, e := range []refEntry{{0, maxPassStates, 1, 1}, {maxPassActions, 0, 1, 1}} {
		var tp TwoPass
		if _, err := tp.Hist([]int32{e.i}, []int32{e.a}, []int32{e.j}, nil); err != nil {
			t.Fatal(err)
		}
		if tp.Fits() {
			t.Errorf("%+v: Fits", e)
		}
		if n, u := tp.Dims(); n != int(max(e.i, e.j))+1 || u != int(e.a)+1 {
			t.Errorf("%+v: Dims = %d, %d", e, n, u)
		}
	}
	// Many states for few transitions: too sparse for a histogram.
	var tp TwoPass
	s := make([]int32, 100)
	for k := range s {
		s[k] = int32(k) * 5000
	}
	if _, err := tp.Hist(s, make([]int32, 100), make([]int32, 100), nil); err != nil {
		t.Fatal(err)
	}
	if tp.Fits() {
		t.Error("Fits with 495001 states for 100 transitions")
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "without Fits") {
			t.Errorf("Plan without Fits: recovered %v", r)
		}
	}()
	tp.Plan()
	t.Error(reflect.TypeOf(tp), "Plan did not panic")
}

// TestTwoPassGroups checks the matrices bitwise against the reference on
// each way Plan lays out an action's second pass: states in groups of
// 1 << groupShift (several groups, the last one partial), and one run per
// state where a group would hold more than maxGroupRun transitions or a
// next state does not fit the packed entries.
func TestTwoPassGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 13))
	random := func(count, n int, weighted bool) []refEntry {
		var es []refEntry
		for range count {
			c := 1.0
			if weighted && rng.IntN(3) == 0 {
				c = []float64{0.1, 0.2, 0.3, 1e-17, 3, 1e16}[rng.IntN(6)]
			}
			i := int32(rng.IntN(n))
			es = append(es, refEntry{int32(rng.IntN(2)), i, (i*31 + int32(rng.IntN(7))) % int32(n), c})
		}
		return es
	}
	big := make([]refEntry, maxGroupRun+1) // one group over maxGroupRun in action 1
	for k := range big {
		big[k] = refEntry{1, int32(k % 3), int32(k % 11), 1}
	}
	big = append(big, refEntry{0, 0, 1, 1}, refEntry{0, 70, 1, 0.5})
	far := append(random(2000, 200, true), refEntry{0, 5, 1<<groupBits + 3, 1}, refEntry{0, 5, 1<<groupBits + 3, 0.25})
	for _, tc := range []struct {
		name   string
		es     []refEntry
		shifts []uint // by action
	}{
		{"unweighted groups", random(30000, 1000, false), []uint{groupShift, groupShift}},
		{"weighted groups", random(30000, 1000, true), []uint{groupShift, groupShift}},
		{"a group over maxGroupRun", big, []uint{groupShift, 0}},
		{"next states past the packed bits", far, []uint{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tp TwoPass
			passBatches(t, tc.es, func(s, a, n []int32, c []float64) {
				if _, err := tp.Hist(s, a, n, c); err != nil {
					t.Fatal(err)
				}
			})
			tp.Plan()
			for a, pa := range tp.acts {
				if pa.shift != tc.shifts[a] {
					t.Errorf("action %d: shift %d, want %d", a, pa.shift, tc.shifts[a])
				}
			}
			passBatches(t, tc.es, func(s, a, n []int32, c []float64) {
				if err := tp.Fill(s, a, n, c); err != nil {
					t.Fatal(err)
				}
			})
			got, err := tp.Matrices(2)
			if err != nil {
				t.Fatal(err)
			}
			sameBlocks(t, got, refMatrices(tc.es, 2))
		})
	}
}

// TestPopulateKeepsContents checks that populate (asking the kernel to
// back memory ahead of its first write) leaves what is there as it was,
// in memory written before and not, at any alignment.
func TestPopulateKeepsContents(t *testing.T) {
	x := make([]int32, 3<<20)
	for k := range x[:1<<20] {
		x[k] = int32(k*7 + 1)
	}
	for _, off := range []int{0, 1, 1023} {
		populate(asBytes(x[off:]))
	}
	for k, v := range x {
		want := int32(0)
		if k < 1<<20 {
			want = int32(k*7 + 1)
		}
		if v != want {
			t.Fatalf("x[%d] = %d after populate, want %d", k, v, want)
		}
	}
	populate(nil)
	populate(make([]byte, 5))
}
