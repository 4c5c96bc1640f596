package arrowio

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/emsf/emsf/factor"
)

func sameBits(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

func sameInts(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func samePartial(t *testing.T, got, want *factor.Partial) {
	t.Helper()
	if got.Action != want.Action || got.NNZ != want.NNZ ||
		math.Float64bits(got.SumX) != math.Float64bits(want.SumX) ||
		math.Float64bits(got.LogLik) != math.Float64bits(want.LogLik) ||
		!sameInts(got.Rows, want.Rows) || !sameInts(got.Cols, want.Cols) ||
		!sameBits(got.Dh, want.Dh) || !sameBits(got.X, want.X) ||
		!sameBits(got.KhT, want.KhT) || !sameBits(got.Y, want.Y) {
		t.Errorf("partial differs:\n got %+v\nwant %+v", got, want)
	}
}

// testPartial computes the statistics of a real shard.
func testPartial(t *testing.T, withLogLik bool) *factor.Partial {
	t.Helper()
	s := testShards(t, 30, 2, 500, 100)[1]
	md := factor.NewRandom(30, 4, 2, factor.TieNone, 7)
	var p factor.Partial
	if err := factor.Compute(md, s.Block, &factor.Scratch{}, &p, withLogLik); err != nil {
		t.Fatal(err)
	}
	return &p
}

func TestPartialRoundTrip(t *testing.T) {
	mem := checkedMem(t)
	meta := PartialMeta{Job: "job-1", Iteration: 12, Shard: 3, Worker: "w7"}
	nanPayload := math.Float64frombits(0x7ff8dead00000001)
	for _, tc := range []struct {
		name string
		p    *factor.Partial
	}{
		{"loglik", testPartial(t, true)},
		{"nan loglik", testPartial(t, false)},
		{"nan payload", func() *factor.Partial { p := testPartial(t, true); p.LogLik = nanPayload; return p }()},
		{"empty", &factor.Partial{Action: 1, Y: []float64{0, 0, 0}, LogLik: math.Inf(-1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := EncodePartial(tc.p, meta, WithAllocator(mem))
			if err != nil {
				t.Fatal(err)
			}
			got, gotMeta, err := DecodePartial(data, WithAllocator(mem))
			if err != nil {
				t.Fatal(err)
			}
			if gotMeta != meta {
				t.Errorf("meta %+v, want %+v", gotMeta, meta)
			}
			samePartial(t, got, tc.p)
		})
	}
}

func TestPartialMerges(t *testing.T) {
	// A decoded partial is accepted by the accumulator, bitwise as the original.
	p := testPartial(t, true)
	data, err := EncodePartial(p, PartialMeta{})
	if err != nil {
		t.Fatal(err)
	}
	q, _, err := DecodePartial(data)
	if err != nil {
		t.Fatal(err)
	}
	md := factor.NewRandom(30, 4, 2, factor.TieNone, 7)
	a, b := factor.NewAccumulator(md), factor.NewAccumulator(md)
	if err := a.Merge(p); err != nil {
		t.Fatal(err)
	}
	if err := b.Merge(q); err != nil {
		t.Fatal(err)
	}
	if !sameBits(a.Dh[p.Action], b.Dh[p.Action]) || !sameBits(a.KhT[p.Action], b.KhT[p.Action]) || a.LogLik != b.LogLik {
		t.Error("merged sums differ")
	}
}

func TestPartialBad(t *testing.T) {
	if _, err := EncodePartial(&factor.Partial{}, PartialMeta{}); err == nil {
		t.Error("partial without Y: no error")
	}
	p := testPartial(t, true)
	p.X = p.X[1:]
	if _, err := EncodePartial(p, PartialMeta{}); err == nil || !strings.Contains(err.Error(), "inconsistent dimensions") {
		t.Errorf("inconsistent partial: %v", err)
	}
	data, err := EncodePartial(testPartial(t, true), PartialMeta{Job: "j"})
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range truncations(data) {
		if _, _, err := DecodePartial(cut); err == nil {
			t.Errorf("truncated to %d of %d bytes: no error", len(cut), len(data))
		}
	}
	for i := range data {
		c := bytes.Clone(data)
		c[i] ^= 0x5A
		if _, _, err := DecodePartial(c); err != nil && !strings.HasPrefix(err.Error(), "arrowio: decode partial: ") {
			t.Errorf("flip at %d: %v", i, err)
		}
	}
	if _, _, err := DecodePartial([]byte("not arrow")); err == nil {
		t.Error("garbage: no error")
	}
	// A shard is not a partial.
	sd, err := EncodeShard(testShards(t, 10, 1, 20, 100)[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := DecodePartial(sd); err == nil {
		t.Error("shard decoded as a partial")
	}
}
