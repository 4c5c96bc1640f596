package ingestwire

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/emsf/emsf/factor"
)

func TestSegmentsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var want []Segment
	var buf []byte
	for k := range 20 {
		n := rng.IntN(50)
		s := Segment{Set: k % 3, Action: make([]int32, n), State: make([]int32, n), Next: make([]int32, n)}
		for q := range n {
			s.Action[q], s.State[q], s.Next[q] = rng.Int32(), rng.Int32(), rng.Int32()
		}
		if k%2 == 0 {
			s.Count = make([]float64, n)
			for q := range s.Count {
				s.Count[q] = rng.Float64()
			}
		}
		want = append(want, s)
		buf = AppendSegment(buf, &s)
		if len(buf) == 0 {
			t.Fatal("nothing encoded")
		}
	}
	var got []Segment
	err := DecodeSegments(buf, func(s *Segment) error {
		c := Segment{Set: s.Set, Action: slices.Clone(s.Action), State: slices.Clone(s.State), Next: slices.Clone(s.Next)}
		if s.Count != nil {
			c.Count = slices.Clone(s.Count)
		}
		got = append(got, c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k := range want {
		w, g := want[k], got[k]
		if w.Set != g.Set || !slices.Equal(w.Action, g.Action) || !slices.Equal(w.State, g.State) || !slices.Equal(w.Next, g.Next) || !slices.Equal(w.Count, g.Count) || (w.Count == nil) != (g.Count == nil) {
			t.Fatalf("segment %d differs", k)
		}
	}
	for _, cut := range []int{1, 5, 13, len(buf) - 1} {
		if err := DecodeSegments(buf[:cut], func(*Segment) error { return nil }); err == nil {
			t.Fatalf("truncated at %d: no error", cut)
		}
	}
}

func TestRowsRoundTrip(t *testing.T) {
	b, err := factor.NewBlock(1, []int32{2, 2, 5, 7, 7, 7}, []int32{0, 3, 1, 0, 4, 9}, []float64{1, 2, 3, 4, 5, 6})
	if err != nil {
		t.Fatal(err)
	}
	got := &factor.Block{Action: 1}
	if err := DecodeRows(got, AppendRows(nil, b, 0, 1)); err != nil {
		t.Fatal(err)
	}
	data := AppendRows(nil, b, 1, 3)
	if len(data) != RowsSize(2, 4) {
		t.Fatalf("%d bytes, RowsSize says %d", len(data), RowsSize(2, 4))
	}
	if err := DecodeRows(got, data); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, b) {
		t.Fatalf("got %+v, want %+v", got, b)
	}
	if err := DecodeRows(got, data[:len(data)-1]); err == nil {
		t.Fatal("truncated rows: no error")
	}
}
