package wire

import (
	"math"
	"testing"

	"github.com/emsf/emsf/factor"
)

// Raw models and partials read back bitwise, in place and copied; a
// truncated or altered one is refused.
func TestRawRoundTrip(t *testing.T) {
	md := factor.NewRandom(50, 3, 2, factor.TieSharedK, 7)
	md.Iteration, md.LogLik = 4, -12.5
	data, snap := EncodeRawModel(md)
	if !snap.Equal(md) {
		t.Fatal("snapshot differs from the model")
	}
	got, err := DecodeRawModel(data, nil)
	if err != nil || !got.Equal(md) {
		t.Fatalf("raw model: %v", err)
	}
	into := factor.NewModel(50, 3, 2, factor.TieSharedK)
	if got, err := DecodeRawModel(data, into); err != nil || got != into || !sameValues(got, md) {
		t.Fatalf("raw model into a kept model: %v", err)
	}
	if _, err := DecodeRawModel(data[:len(data)-8], nil); err == nil {
		t.Error("truncated raw model accepted")
	}
	dig := RawDigest(data, "n1")
	if err := CheckRawDigest(data, dig); err != nil {
		t.Error(err)
	}
	bad := append([]byte(nil), data...)
	bad[len(bad)-1] ^= 1
	if CheckRawDigest(bad, dig) == nil {
		t.Error("altered raw model passed its digest")
	}

	blocks := factor.RandomCounts(50, 1, 5, 3, 1)
	var s factor.Scratch
	var p factor.Partial
	if err := factor.Compute(factor.NewRandom(50, 3, 1, factor.TieNone, 1), blocks[0], &s, &p, true); err != nil {
		t.Fatal(err)
	}
	raw := EncodeRawPartial(&p, nil)
	if len(raw) != RawPartialSize(&p) {
		t.Fatalf("size %d, RawPartialSize %d", len(raw), RawPartialSize(&p))
	}
	for _, buf := range [][]byte{append(AlignedBuffer(len(raw))[:0], raw...), append(make([]byte, 1, len(raw)+1), raw...)[1:]} {
		q, err := DecodeRawPartial(buf)
		if err != nil {
			t.Fatal(err)
		}
		if q.Action != p.Action || q.NNZ != p.NNZ || math.Float64bits(q.SumX) != math.Float64bits(p.SumX) ||
			math.Float64bits(q.LogLik) != math.Float64bits(p.LogLik) || !eqI(q.Rows, p.Rows) || !eqI(q.Cols, p.Cols) ||
			!eqF(q.X, p.X) || !eqF(q.Dh, p.Dh) || !eqF(q.KhT, p.KhT) || !eqF(q.Y, p.Y) {
			t.Fatal("raw partial differs")
		}
	}
	if _, err := DecodeRawPartial(raw[:len(raw)-8]); err == nil {
		t.Error("truncated raw partial accepted")
	}
}

func sameValues(a, b *factor.Model) bool {
	for k := range a.D {
		if !eqF(a.D[k], b.D[k]) {
			return false
		}
	}
	for k := range a.KT {
		if !eqF(a.KT[k], b.KT[k]) {
			return false
		}
	}
	return true
}

func eqF(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if math.Float64bits(a[k]) != math.Float64bits(b[k]) {
			return false
		}
	}
	return true
}

func eqI(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}
