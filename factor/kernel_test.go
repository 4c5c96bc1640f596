package factor

import (
	"math"
	"testing"
)

// TestKernelAVX2MatchesPureGo: the AVX2 kernel computes bitwise what the
// pure-Go kernel computes, for orders that are and are not multiples of 4,
// with and without the log-likelihood.
func TestKernelAVX2MatchesPureGo(t *testing.T) {
	if !useAVX2() {
		t.Log("no AVX2 on this machine (or -tags purego): both paths are the pure-Go kernel")
	}
	for _, tc := range []struct{ n, m, perRow int }{
		{50, 4, 7}, {300, 8, 20}, {3000, 32, 30}, {700, 12, 9}, {200, 5, 11}, {9000, 64, 5},
	} {
		blocks := RandomCounts(tc.n, 2, tc.perRow, 4, uint64(tc.n))
		md := NewRandom(tc.n, tc.m, 2, TieSharedK, 7)
		for _, withLL := range []bool{false, true} {
			for _, b := range blocks {
				var fast, slow Partial
				slowS := Scratch{pureGo: true}
				if err := Compute(md, b, new(Scratch), &fast, withLL); err != nil {
					t.Fatal(err)
				}
				if err := Compute(md, b, &slowS, &slow, withLL); err != nil {
					t.Fatal(err)
				}
				for name, pair := range map[string][2][]float64{
					"Dh": {fast.Dh, slow.Dh}, "X": {fast.X, slow.X}, "KhT": {fast.KhT, slow.KhT}, "Y": {fast.Y, slow.Y},
				} {
					if !bitsEqual(pair[0], pair[1]) {
						t.Fatalf("n=%d m=%d loglik=%v: %s differs between AVX2 and pure Go", tc.n, tc.m, withLL, name)
					}
				}
				if math.Float64bits(fast.LogLik) != math.Float64bits(slow.LogLik) || fast.SumX != slow.SumX {
					t.Fatalf("n=%d m=%d: loglik %v vs %v, SumX %v vs %v", tc.n, tc.m, fast.LogLik, slow.LogLik, fast.SumX, slow.SumX)
				}
			}
		}
	}
}

func bitsEqual(a, b []float64) bool {
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

// TestMergeComputedRejectsNonFiniteY: the cheap check of locally computed
// partials catches a non-finite weight through Y (see mergeComputed).
func TestMergeComputedRejectsNonFiniteY(t *testing.T) {
	md := NewRandom(20, 4, 1, TieNone, 3)
	b := RandomCounts(20, 1, 5, 3, 3)[0]
	var p Partial
	if err := Compute(md, b, new(Scratch), &p, false); err != nil {
		t.Fatal(err)
	}
	acc := NewAccumulator(md)
	if err := acc.mergeComputed(&p); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []float64{math.Inf(1), math.NaN(), -1} {
		p.Y[2] = bad
		if err := acc.mergeComputed(&p); err == nil {
			t.Errorf("mergeComputed accepted Y[2] = %v", bad)
		}
	}
}
