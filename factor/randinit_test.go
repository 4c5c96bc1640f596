package factor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRandomPiecesMatchNewRandom: rows of D (any subset, in runs and
// alone) and ranges of K^T rows drawn in pieces are NewRandom's bits, for
// every tie mode and random shapes, seeds and pieces.
func TestRandomPiecesMatchNewRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 40 {
		n, m, u := 1+rng.IntN(60), 1+rng.IntN(7), 1+rng.IntN(3)
		tie := Tie(trial % 3)
		seed := rng.Uint64()
		md := NewRandom(n, m, u, tie, seed)
		same := func(what string, got, want []float64) {
			t.Helper()
			for i := range want {
				if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
					t.Fatalf("n=%d m=%d u=%d tie=%s seed=%d: %s value %d = %v, NewRandom %v", n, m, u, tie, seed, what, i, got[i], want[i])
				}
			}
		}
		for b, d := range md.D {
			var rows []int32
			for i := range n {
				if rng.IntN(3) > 0 {
					rows = append(rows, int32(i))
				}
			}
			out := make([]float64, len(rows)*m)
			RandomDRows(n, m, u, tie, seed, b, rows, out)
			want := make([]float64, 0, len(out))
			for _, i := range rows {
				want = append(want, d[int(i)*m:int(i)*m+m]...)
			}
			same("D", out, want)
		}
		sums := RandomKSums(n, m, u, tie, seed)
		if len(sums) != len(md.KT) {
			t.Fatalf("%d K sums, %d K blocks", len(sums), len(md.KT))
		}
		for b, kt := range md.KT {
			lo := rng.IntN(n)
			hi := lo + rng.IntN(n-lo+1)
			out := make([]float64, (hi-lo)*m)
			RandomKRows(n, m, u, tie, seed, b, lo, hi, sums[b], out)
			same("K", out, kt[lo*m:hi*m])
		}
	}
}
