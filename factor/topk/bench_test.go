package topk

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkTopK times top-10 queries on synthetic models: "local" (rows
// of K on windows of 2n/m states, exponential weights; D rows on 1 to 3
// hidden states: the structured case) and "dense" (rows of K over all
// states; D rows spread: the bad case, answered by the scan of the
// 8-bit shadow, and as "dense-exact" by the exact float64 scan without
// one), against the exact float64 scan and a float32 scan of the same
// items. Items
// scored per query are reported as scored/op. Each size's models are
// made inside its sub-benchmark: -bench 'TopK/n=100000' sets up only the
// small ones (n = 10^6 takes 1.5 GB and a minute).
func BenchmarkTopK(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			const m = 32
			rng := rand.New(rand.NewPCG(7, 8))
			for _, kind := range []string{"local", "dense"} {
				items := regime(rng, kind, n, m)
				ix, err := NewIndex(items, n, m, nil, 0, 2, QuantizedShadow(true))
				if err != nil {
					b.Fatal(err)
				}
				exact, err := NewIndex(items, n, m, nil, 0, 2)
				if err != nil {
					b.Fatal(err)
				}
				qs := make([][]float64, 1024)
				for k := range qs {
					if kind == "local" {
						qs[k] = query(rng, "few", m)
					} else {
						qs[k] = query(rng, "spread", m)
					}
				}
				for name, ix := range map[string]*Index{kind: ix, kind + "-exact": exact} {
					b.Run(name, func(b *testing.B) {
						var s Searcher
						var hits []Hit
						scored := 0
						for k := range b.N {
							var st Stats
							hits, st = ix.TopK(Query{W: qs[k%len(qs)], K: 10}, &s, hits)
							scored += st.Scored
						}
						b.ReportMetric(float64(scored)/float64(b.N), "scored/op")
					})
				}
				if kind == "dense" {
					continue
				}
				b.Run("scan64", func(b *testing.B) {
					var s Searcher
					var hits []Hit
					for k := range b.N {
						hits = ix.Scan(Query{W: qs[k%len(qs)], K: 10}, &s, hits)
					}
					b.SetBytes(int64(8 * n * m))
				})
				items32 := make([]float32, len(items))
				for x, v := range items {
					items32[x] = float32(v)
				}
				b.Run("scan32", func(b *testing.B) {
					var hits []Hit
					w := make([]float32, m)
					for k := range b.N {
						for l, v := range qs[k%len(qs)] {
							w[l] = float32(v)
						}
						hits = ScanFloat32(items32, n, m, w, 10, hits)
					}
					b.SetBytes(int64(4 * n * m))
				})
			}
		})
	}
}

// BenchmarkKernels times one pass of each scan kernel over n = 10^6 rows
// of m = 32 coordinates: the 8-bit shadow's (32 bytes a row, plus its
// scale) and the float32 one of ScanFloat32 (128 bytes a row), the
// largest output of each block of 512 rows kept as the shadow scan does.
func BenchmarkKernels(b *testing.B) {
	const n, m = 1_000_000, 32
	rng := rand.New(rand.NewPCG(9, 10))
	codes, scales := make([]uint8, n*m), make([]float32, n)
	rows := make([]float32, n*m)
	for x := range codes {
		codes[x] = uint8(rng.IntN(256))
		rows[x] = rng.Float32()
	}
	for j := range scales {
		scales[j] = rng.Float32()
	}
	w, w16 := make([]float32, m), make([]int16, m)
	for l := range w {
		w[l] = rng.Float32()
		w16[l] = int16(w[l] * 0x1p14)
	}
	out := make([]float32, shadowBlock)
	b.Run("int8", func(b *testing.B) {
		b.SetBytes(n * (m + 4))
		for range b.N {
			for j := 0; j < n; j += shadowBlock {
				dots8(out, w16, codes[j*m:], scales[j:], 0x1p-14, 0.5, min(shadowBlock, n-j), m)
			}
		}
	})
	b.Run("float32", func(b *testing.B) {
		b.SetBytes(n * m * 4)
		for range b.N {
			for j := 0; j < n; j += shadowBlock {
				dots32(out, w, rows[j*m:], min(shadowBlock, n-j), m)
			}
		}
	})
}

// BenchmarkShadowStages times top-10 queries that the 8-bit shadow gives
// up (the lonely model of TestFloat32StageMatchesOracle at n = 4 000,
// m = 32, weights on its two lonely coordinates, lists skipped): answered
// by the float32 stage ("float32"), by the exact scan after the 8-bit
// stage ("8bit-exact", no float32 copy) and by the exact scan alone
// ("exact", no shadow).
func BenchmarkShadowStages(b *testing.B) {
	const n, m = 4000, 32
	rng := rand.New(rand.NewPCG(65, 66))
	items, _ := lonely(rng, n, m, false)
	qs := make([][]float64, 64)
	for k := range qs {
		qs[k] = make([]float64, m)
		qs[k][0], qs[k][1] = 0.5+rng.Float64(), rng.Float64()
	}
	for _, c := range []struct {
		name string
		opts []Option
	}{
		{"float32", []Option{QuantizedShadow(true)}},
		{"8bit-exact", []Option{QuantizedShadow(true), Float32ShadowBudget(0)}},
		{"exact", nil},
	} {
		ix, err := NewIndex(items, n, m, nil, 0, 1, c.opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			var s Searcher
			var hits []Hit
			for k := range b.N {
				hits, _ = ix.TopK(Query{W: qs[k%len(qs)], K: 10, Budget: 1}, &s, hits)
			}
		})
	}
}
