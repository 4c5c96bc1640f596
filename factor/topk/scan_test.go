package topk

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestDots32WithinBound: ScanFloat32's kernel (the AVX2 one where the CPU
// has it, and the pure-Go one) gives every row's score within the error
// of a float32 sum of non-negative terms (Higham's γ, plus an absolute
// term below float32's normal range) of the float64 dot product, and
// each returns the block's largest score.
func TestDots32WithinBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for trial := range 200 {
		stride := 8 * (1 + rng.IntN(6))
		dims := stride - rng.IntN(8)
		nrows := 8 * (1 + rng.IntN(80))
		rows := make([]float64, nrows*stride)
		w := make([]float64, stride)
		scale := []float64{1, 1e-3, 1e-40, 1e-44}[rng.IntN(4)]
		for r := range nrows {
			for c := range dims {
				rows[r*stride+c] = rng.Float64() * scale
			}
		}
		for c := range dims {
			w[c] = rng.ExpFloat64()
		}
		rows32, w32 := make([]float32, len(rows)), make([]float32, len(w))
		kmax, wmax := 0.0, 0.0
		for x, v := range rows {
			rows32[x] = float32(v)
			kmax = max(kmax, v)
		}
		for x, v := range w {
			w32[x] = float32(v)
			wmax = max(wmax, v)
		}
		g := float64(dims+12) * 0x1p-23
		eta := float64(dims+8) * (wmax + kmax + 2) * 0x1p-148
		outGo, out := make([]float32, nrows), make([]float32, nrows)
		topGo := dots32Go(outGo, w32, rows32, nrows, stride)
		top := dots32(out, w32, rows32, nrows, stride)
		if want := slices.Max(outGo); topGo != want {
			t.Fatalf("trial %d: dots32Go returns %v as the largest score, want %v", trial, topGo, want)
		}
		if want := slices.Max(out); top != want {
			t.Fatalf("trial %d: dots32 returns %v as the largest score, want %v", trial, top, want)
		}
		for r := range nrows {
			exact := Dot(w[:dims], rows[r*stride:r*stride+dims])
			for _, v := range []float32{out[r], outGo[r]} {
				if d := math.Abs(float64(v) - exact); d > g*exact+eta {
					t.Fatalf("trial %d (stride %d, dims %d, scale %g) row %d: float32 %v, float64 %v: error %g above the bound %g",
						trial, stride, dims, scale, r, v, exact, d, g*exact+eta)
				}
			}
		}
	}
}

// TestScanFloat32: the float32 scan's hits are the k best float32 scores,
// each within a float32 sum's error of its item's exact score, for any n (the
// blocks and the rows past the last full eight) and m (the AVX2 kernel and
// the Go one).
func TestScanFloat32(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	for range 50 {
		n, m := 1+rng.IntN(1500), []int{3, 8, 16, 32}[rng.IntN(4)]
		items := regime(rng, "dense", n, m)
		w := query(rng, "spread", m)
		items32, w32 := make([]float32, len(items)), make([]float32, m)
		for x, v := range items {
			items32[x] = float32(v)
		}
		for l, v := range w {
			w32[l] = float32(v)
		}
		k := 1 + rng.IntN(20)
		got := ScanFloat32(items32, n, m, w32, k, nil)
		want := oracle(items, nil, n, m, w, k)
		if len(got) != len(want) {
			t.Fatalf("n=%d k=%d: %d hits, want %d", n, k, len(got), len(want))
		}
		g := float64(m+12) * 0x1p-23
		for x, h := range got {
			exact := Dot(w, items[h.Item*m:(h.Item+1)*m])
			if math.Abs(h.Score-exact) > g*exact || math.Abs(h.Score-want[x].Score) > 2*g*want[x].Score {
				t.Fatalf("n=%d m=%d k=%d: hit %d is %v (exact %v), the oracle's %v", n, m, k, x, h, exact, want[x])
			}
		}
	}
}
