package topk

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestDots32WithinBound: the float32 kernel (the AVX2 one where the CPU
// has it, and the pure-Go one) gives every row's score within bound32's
// error of the float64 dot product, including values below float32's
// normal range, and the two kernels agree within it; each returns the
// block's largest score (the shadow scan skips a block below its
// threshold by it).
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

// TestShadowNearTies: items whose scores differ by less than float32 can
// tell (clusters of near-equal rows, random weights over every
// coordinate) are answered by the shadow scan bitwise as the oracle
// does: the float32 order is wrong inside a cluster, the rescoring puts it
// right. (Setting bound32's g to 0 makes this test fail.)
func TestShadowNearTies(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	const n, m = 3000, 8
	var s Searcher
	shadowed := 0
	for trial := range 30 {
		items := make([]float64, n*m)
		base := make([]float64, m)
		for l := range base {
			base[l] = rng.Float64()
		}
		for j := range n {
			for l := range m {
				if j%97 == 0 { // a cluster of about 31 items near base
					items[j*m+l] = base[l] * (1 + 1e-7*rng.NormFloat64())
				} else {
					items[j*m+l] = 0.5 * rng.Float64() * base[l]
				}
			}
		}
		ix, err := NewIndex(items, n, m, nil, 1, 1, Float32Shadow(true))
		if err != nil {
			t.Fatal(err)
		}
		w := query(rng, "spread", m)
		for _, k := range []int{1, 5, 20} {
			got, st := ix.TopK(Query{W: w, K: k, Budget: 1}, &s, nil)
			if want := oracle(items, nil, n, m, w, k); !slices.Equal(got, want) {
				t.Fatalf("trial %d k=%d (stats %+v):\ngot  %v\nwant %v", trial, k, st, got, want)
			}
			if st.Shadow {
				shadowed++
			}
		}
	}
	if shadowed < 80 {
		t.Errorf("only %d of 90 queries answered by the shadow scan", shadowed)
	}
}

// TestShadowGivesUpOnTies: a model where every item ties (more near-ties
// than the shadow scan keeps) is answered by the exact scan, correctly.
func TestShadowGivesUpOnTies(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	const n, m = 5000, 4
	items := regime(rng, "uniform", n, m)
	ix, err := NewIndex(items, n, m, nil, 0, 1, Float32Shadow(true))
	if err != nil {
		t.Fatal(err)
	}
	w := query(rng, "spread", m)
	got, st := ix.TopK(Query{W: w, K: 10, Budget: 1}, nil, nil)
	if !st.Scanned || st.Shadow {
		t.Fatalf("stats %+v: want the exact scan", st)
	}
	if want := oracle(items, nil, n, m, w, 10); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestShadowRefusesHugeValues: an item above maxShadow leaves the index
// without a shadow; a weight above it makes the query scan exactly; both
// answer as the oracle does.
func TestShadowRefusesHugeValues(t *testing.T) {
	items := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	ix, err := NewIndex(items, 16, 1, nil, 1, 1, Float32Shadow(true))
	if err != nil || !ix.Shadow() {
		t.Fatalf("no shadow (%v)", err)
	}
	got, st := ix.TopK(Query{W: []float64{0x1p60}, K: 1, Budget: 1}, nil, nil)
	if st.Shadow || got[0].Item != 15 {
		t.Fatalf("a weight of 2^60: %v %+v, want item 15 by the exact scan", got, st)
	}
	items[3] = 0x1p60
	if ix, err = NewIndex(items, 16, 1, nil, 1, 1, Float32Shadow(true)); err != nil || ix.Shadow() {
		t.Fatalf("an item of 2^60: shadow %v (%v), want none", ix.Shadow(), err)
	}
}

// TestScanFloat32: the float32 scan's hits are the k best float32 scores,
// each within bound32's error of its item's exact score, for any n (the
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
