package factor

import (
	"context"
	"fmt"
	"math"
	"testing"
)

// TestTwoPassMatchesKernel: the two-pass layout (twopass.go) gives
// bitwise the partials and accumulators of today's column-major kernel,
// with the AVX2 and the pure-Go kernel, on random blocks (orders that are
// and are not multiples of 4), one goroutine (fused), partials merged
// (several groups) and the pipeline over column ranges (2 and 3 stages).
func TestTwoPassMatchesKernel(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ n, m, perRow, blockNNZ int }{
		{60, 5, 7, 28}, {300, 8, 20, 740}, {2000, 32, 9, 1350}, {500, 12, 40, 20000}, {3000, 32, 30, 1 << 17},
	} {
		mats := RandomCounts(tc.n, 2, tc.perRow, 5, uint64(tc.n)+1)
		var blocks []*Block
		for _, mat := range mats {
			blocks = append(blocks, splitBlock(mat, tc.blockNNZ)...)
		}
		md := NewRandom(tc.n, tc.m, 2, TieSharedK, 5)
		for _, pureGo := range []bool{false, true} {
			for _, b := range blocks {
				var want, got Partial
				if err := Compute(md, b, &Scratch{pureGo: pureGo}, &want, true); err != nil {
					t.Fatal(err)
				}
				if err := Compute(md, b, &Scratch{pureGo: pureGo, twoPass: true}, &got, true); err != nil {
					t.Fatal(err)
				}
				for name, pair := range map[string][2][]float64{
					"Dh": {got.Dh, want.Dh}, "X": {got.X, want.X}, "KhT": {got.KhT, want.KhT}, "Y": {got.Y, want.Y},
					"loglik": {{got.LogLik, got.SumX}, {want.LogLik, want.SumX}},
				} {
					if !bitsEqual(pair[0], pair[1]) {
						t.Fatalf("n=%d m=%d pureGo=%v: partial's %s differs from the kernel's", tc.n, tc.m, pureGo, name)
					}
				}
			}
			for _, groupNNZ := range []int{0, 50} {
				for _, workers := range []int{1, 2, 3} {
					var accs [2]*Accumulator
					for v, two := range []bool{false, true} {
						ps := Passer{GroupNNZ: groupNNZ, forcePipeline: true, twoPass: two,
							scratch: []Scratch{{pureGo: pureGo}, {pureGo: pureGo}, {pureGo: pureGo}}}
						accs[v] = NewAccumulator(md)
						for range 2 { // the second pass reuses the buffers
							if err := ps.Pass(ctx, md, blocks, accs[v], workers, true); err != nil {
								t.Fatal(err)
							}
						}
					}
					name := fmt.Sprintf("n=%d m=%d pureGo=%v groupNNZ=%d workers=%d", tc.n, tc.m, pureGo, groupNNZ, workers)
					want, got := accs[0], accs[1]
					for b := range want.KhT {
						if !bitsEqual(got.KhT[b], want.KhT[b]) || !bitsEqual(got.Y[b], want.Y[b]) {
							t.Fatalf("%s: K block %d differs", name, b)
						}
					}
					for b := range want.Dh {
						if !bitsEqual(got.Dh[b], want.Dh[b]) || !bitsEqual(got.X[b], want.X[b]) {
							t.Fatalf("%s: D block %d differs", name, b)
						}
					}
					if math.Float64bits(got.LogLik) != math.Float64bits(want.LogLik) || got.SumX != want.SumX {
						t.Fatalf("%s: loglik %v vs %v", name, got.LogLik, want.LogLik)
					}
				}
			}
		}
	}
}
