package topk

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// lonely draws the items of a model whose queries give the 8-bit shadow
// up, as the fitted dependency-graph model's do: coordinates 0 and 1
// (hidden states) have each one large value (items 0 and 1, 0.998) and
// small values for the other items, each of which has its largest value
// on another coordinate, so that these values are below one code of
// their items; a third of the items in clusters of 10 whose values
// differ by 0 to 15 units of 2^-28 relative, about a float32 ulp (exact
// ties, and float32 scores ordered otherwise than the exact ones), so
// that the float32 bound and the rescoring decide. With extra, the extra
// coordinate is drawn alike.
func lonely(rng *rand.Rand, n, m int, withExtra bool) ([]float64, []float64) {
	bases := make([]float64, n/30+1)
	for c := range bases {
		bases[c] = 1e-4 * (0.5 + 0.5*rng.Float64())
	}
	small := func(j int) float64 {
		if j%3 == 0 {
			return bases[j/30] * (1 + float64(rng.IntN(16))*0x1p-28)
		}
		return 1e-4 * rng.Float64()
	}
	items := make([]float64, n*m)
	for j := 2; j < n; j++ {
		items[j*m] = small(j)
		items[j*m+1] = small(j)
		for l := 2; l < m; l++ {
			items[j*m+l] = 0.5 + 0.5*rng.Float64()
		}
	}
	items[0], items[m+1] = 0.998, 0.998
	var extra []float64
	if withExtra {
		extra = make([]float64, n)
		for j := range extra {
			extra[j] = small(j)
		}
	}
	return items, extra
}

// TestFloat32StageMatchesOracle: queries on the lonely coordinates (and
// the extra coordinate), which the 8-bit shadow gives up, are
// answered by the float32 stage, bit for bit as the oracle does; with a
// float32 budget too small for the copy the index keeps none and the
// exact scan answers them, the same bits.
func TestFloat32StageMatchesOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 62))
	var s Searcher
	float32s, total := 0, 0
	for trial := range 40 {
		n, m := 1000+rng.IntN(3000), 3+rng.IntN(40)
		items, extra := lonely(rng, n, m, trial%3 == 0)
		dims := m
		if extra != nil {
			dims++
		}
		ix, err := NewIndex(items, n, m, extra, 0, 1, QuantizedShadow(true))
		if err != nil {
			t.Fatal(err)
		}
		if ix.shadow32 == nil {
			t.Fatalf("trial %d: n=%d dims=%d (%d bytes): no float32 copy", trial, n, dims, shadow32Bytes(n, dims))
		}
		none, err := NewIndex(items, n, m, extra, 0, 1, QuantizedShadow(true), Float32ShadowBudget(shadow32Bytes(n, dims)-1))
		if err != nil {
			t.Fatal(err)
		}
		if none.shadow32 != nil || none.Bytes() >= ix.Bytes() {
			t.Fatalf("trial %d: a budget below the copy's bytes keeps one (%d bytes, %d with it)", trial, none.Bytes(), ix.Bytes())
		}
		for range 4 {
			w := make([]float64, dims)
			w[0] = 0.5 + rng.Float64()
			if rng.IntN(3) > 0 {
				w[1] = 0.5 + rng.Float64()
			}
			if extra != nil && rng.IntN(2) == 0 {
				w[m] = rng.Float64()
			}
			k := []int{5, 7, 13, n / 16}[rng.IntN(4)]
			want := oracle(items, extra, n, m, w, k)
			// A budget of 1 skips the lists; one of 2k reads them and
			// hands their k best exact scores to the shadow scans.
			q := Query{W: w, K: k, Budget: []int{1, 2 * k}[rng.IntN(2)]}
			got, st := ix.TopK(q, &s, nil)
			if !slices.Equal(got, want) {
				t.Fatalf("trial %d (n=%d m=%d k=%d, stats %+v):\ngot  %v\nwant %v", trial, n, m, k, st, got, want)
			}
			total++
			if st.Float32 {
				float32s++
				if st.Shadow || !st.Scanned || st.Rescored == 0 && q.Budget == 1 {
					t.Fatalf("trial %d: stats %+v", trial, st)
				}
			}
			got, st = none.TopK(q, &s, nil)
			if !slices.Equal(got, want) {
				t.Fatalf("trial %d without the float32 copy (stats %+v):\ngot  %v\nwant %v", trial, st, got, want)
			}
			if st.Float32 {
				t.Fatalf("trial %d: stats %+v without a float32 copy", trial, st)
			}
		}
	}
	if float32s < total*3/4 {
		t.Errorf("only %d of %d queries answered by the float32 stage", float32s, total)
	}
}

// TestFloat32Budget: the default budget holds the float32 copy of
// n = 131 072 items of 32 coordinates and no more; an index keeps the
// copy exactly when its bytes are within the budget, counts it in Bytes,
// and keeps none without the 8-bit shadow or with items above maxShadow.
func TestFloat32Budget(t *testing.T) {
	if b := shadow32Bytes(131072, 32); b != Float32Budget {
		t.Errorf("n = 131072, m = 32: %d bytes, want the budget %d", b, Float32Budget)
	}
	if b := shadow32Bytes(131073, 32); b <= Float32Budget {
		t.Errorf("n = 131073, m = 32: %d bytes, within the budget %d", b, Float32Budget)
	}
	rng := rand.New(rand.NewPCG(63, 64))
	const n, m = 1000, 5 // 1000 rows of 8 floats: 32 000 bytes
	items := regime(rng, "dense", n, m)
	if b := shadow32Bytes(n, m); b != 32000 {
		t.Fatalf("%d bytes, want 32000", b)
	}
	build := func(opts ...Option) *Index {
		ix, err := NewIndex(items, n, m, nil, 0, 1, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return ix
	}
	lists, eight := build().Bytes(), build(QuantizedShadow(true), Float32ShadowBudget(0))
	for _, c := range []struct {
		budget int
		keep   bool
	}{{32000, true}, {31999, false}, {Float32Budget, true}, {0, false}} {
		ix := build(QuantizedShadow(true), Float32ShadowBudget(c.budget))
		want := eight.Bytes()
		if c.keep {
			want += 32000
		}
		if (ix.shadow32 != nil) != c.keep || ix.Bytes() != want {
			t.Errorf("budget %d: float32 copy %v, %d bytes; want %v, %d", c.budget, ix.shadow32 != nil, ix.Bytes(), c.keep, want)
		}
	}
	if ix := build(Float32ShadowBudget(Float32Budget)); ix.shadow32 != nil || ix.Bytes() != lists {
		t.Errorf("without the 8-bit shadow: float32 copy %v, %d bytes (lists %d)", ix.shadow32 != nil, ix.Bytes(), lists)
	}
	big := slices.Clone(items)
	big[7] = 0x1p51
	if ix, err := NewIndex(big, n, m, nil, 0, 1, QuantizedShadow(true)); err != nil || ix.shadow32 != nil {
		t.Errorf("an item of 2^51: float32 copy %v (%v)", ix != nil && ix.shadow32 != nil, err)
	}
}
