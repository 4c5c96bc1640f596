package shard

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/emsf/emsf/factor"
)

// entryMap lists the nonzeros of blocks by (action, row, column).
func entryMap(blocks []*factor.Block) map[[3]int32]float64 {
	m := map[[3]int32]float64{}
	for _, b := range blocks {
		for r, i := range b.Rows {
			for q := b.Ptr[r]; q < b.Ptr[r+1]; q++ {
				m[[3]int32{int32(b.Action), i, b.Cols[q]}] += b.Vals[q]
			}
		}
	}
	return m
}

// TestSplitCounts: the two parts add up to every count exactly (whole,
// fractional, beyond SplitUnitsMax and near 2^53), hold about frac of
// the units, are a function of the seed and the entry alone (the same
// from a table laid out otherwise), and, as counts grow, the units a
// count had keep their sides.
func TestSplitCounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	const u, n, frac = 3, 50, 0.2
	var ct Counter
	counts := map[[3]int32]float64{}
	for range 4000 {
		i, a, j := rng.IntN(n), rng.IntN(u), rng.IntN(n)
		c := float64(1 + rng.IntN(20))
		switch rng.IntN(50) {
		case 0:
			c = 0.25 + float64(rng.IntN(3))
		case 1:
			c = float64(SplitUnitsMax + 1 + rng.IntN(1e6))
		case 2:
			c = 1 << 52
		}
		if _, ok := counts[[3]int32{int32(a), int32(i), int32(j)}]; ok {
			continue
		}
		counts[[3]int32{int32(a), int32(i), int32(j)}] = c
		if err := ct.Add(i, a, j, c); err != nil {
			t.Fatal(err)
		}
	}
	blocks := ct.Matrices(u)
	train, val := SplitCounts(blocks, frac, 7)
	tr, va := entryMap(train), entryMap(val)
	var units, held float64
	for e, c := range counts {
		if got := tr[e] + va[e]; got != c {
			t.Fatalf("entry %v: train %v + validation %v = %v, want %v", e, tr[e], va[e], got, c)
		}
		if c <= 20 && c == math.Floor(c) {
			units += c
			held += va[e]
		}
		if c == 1<<52 && math.Abs(va[e]-frac*c) > 6*math.Sqrt(c*frac*(1-frac)) {
			t.Errorf("entry %v of count 2^52: validation %v, want about %v", e, va[e], frac*c)
		}
	}
	if sd := math.Sqrt(units * frac * (1 - frac)); math.Abs(held-frac*units) > 5*sd {
		t.Errorf("%v of %v small units held out, want about %v", held, units, frac*units)
	}
	for _, bs := range [][]*factor.Block{train, val} {
		for k, b := range bs {
			if b.Action != blocks[k].Action {
				t.Errorf("part block %d has action %d, want %d", k, b.Action, blocks[k].Action)
			}
		}
	}

	// Another seed, another split; the same seed, the same split, from
	// the entries counted in another order and in two tables.
	_, val2 := SplitCounts(blocks, frac, 8)
	if same(entryMap(val2), va) {
		t.Error("seeds 7 and 8 held out the same units")
	}
	var odd, even Counter
	for e, c := range counts {
		dst := &odd
		if e[1]%2 == 0 {
			dst = &even
		}
		if err := dst.Add(int(e[1]), int(e[0]), int(e[2]), c); err != nil {
			t.Fatal(err)
		}
	}
	t1, v1 := SplitCounts(odd.Matrices(u), frac, 7)
	t2, v2 := SplitCounts(even.Matrices(u), frac, 7)
	if !same(entryMap(append(t1, t2...)), tr) || !same(entryMap(append(v1, v2...)), va) {
		t.Error("the split of the counts in two tables differs from the split of the whole")
	}

	// Growth: each whole count up to SplitUnitsMax gains 5 units; no part
	// loses any.
	var grown Counter
	for e, c := range counts {
		if c == math.Floor(c) && c+5 <= SplitUnitsMax {
			c += 5
		}
		if err := grown.Add(int(e[1]), int(e[0]), int(e[2]), c); err != nil {
			t.Fatal(err)
		}
	}
	gt, gv := SplitCounts(grown.Matrices(u), frac, 7)
	gtr, gva := entryMap(gt), entryMap(gv)
	for e, c := range counts {
		if c == math.Floor(c) && c+5 <= SplitUnitsMax && (gtr[e] < tr[e] || gva[e] < va[e]) {
			t.Fatalf("entry %v grew from %v: train %v -> %v, validation %v -> %v", e, c, tr[e], gtr[e], va[e], gva[e])
		}
	}
}

func same(a, b map[[3]int32]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// BenchmarkSplitCounts splits a table of 10^6 entries (the service does
// at every quality refit): counts 1–9, unit by unit; and counts of 2^40,
// each share drawn at once (what a client's huge counts cost).
func BenchmarkSplitCounts(b *testing.B) {
	for _, c := range []struct {
		name  string
		count func(*rand.Rand) float64
	}{
		{"counts1-9", func(rng *rand.Rand) float64 { return float64(1 + rng.IntN(9)) }},
		{"counts2^40", func(*rand.Rand) float64 { return 1 << 40 }},
	} {
		b.Run(c.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			var ct Counter
			for range 1_000_000 {
				_ = ct.Add(rng.IntN(100_000), 0, rng.IntN(100_000), c.count(rng))
			}
			blocks := ct.Matrices(1)
			b.ResetTimer()
			for range b.N {
				SplitCounts(blocks, 0.1, 7)
			}
		})
	}
}

// TestSplitRow: a row of at most one unit goes whole by its draw, as
// rand.Float64 of the draw against the fraction (so files of unit counts
// split as they always did); a larger count is cut unit by unit, its
// parts whole units (plus the fraction) that add up to it, about frac of
// it over many rows; a count that is not one goes to no split.
func TestSplitRow(t *testing.T) {
	src := rand.NewPCG(4, 4)
	rng := rand.New(rand.NewPCG(4, 4))
	for range 1000 {
		x := src.Uint64()
		want := 0.0
		if rng.Float64() < 0.3 {
			want = 1
		}
		if got := SplitRow(1, 0.3, x); got != want {
			t.Fatalf("a unit row with draw %#x: part %v, want %v (rand.Float64's comparison)", x, got, want)
		}
		if got := SplitRow(0.5, 0.3, x); got != want/2 {
			t.Fatalf("a row of count 0.5 with draw %#x: part %v, want %v", x, got, want/2)
		}
	}
	var total, part float64
	for k := range 20000 {
		c := float64(2+k%9) + []float64{0, 0.25}[k%2]
		p := SplitRow(c, 0.3, src.Uint64())
		if p < 0 || p > c || p-math.Floor(p) != 0 && p-math.Floor(p) != 0.25 || c-p+p != c {
			t.Fatalf("count %v: part %v", c, p)
		}
		total += c
		part += p
	}
	if math.Abs(part/total-0.3) > 0.01 {
		t.Errorf("rows of counts 2–10 gave %.4f of their units, want about 0.3", part/total)
	}
	for _, c := range []float64{0, -2, math.NaN(), math.Inf(1)} {
		if p := SplitRow(c, 0.3, 1); p != 0 {
			t.Errorf("count %v: part %v, want 0", c, p)
		}
	}
}

// TestSplitHugeCounts: counts far beyond 2^53 (valid counts of a file:
// finite and positive) split at once into about frac of them, the parts
// adding up to the count (distuv.Binomial's sampler never ended on 1e300).
func TestSplitHugeCounts(t *testing.T) {
	for _, c := range []float64{1 << 50, 1<<50 + 2, 1e17, 1e300, math.MaxFloat64} {
		p := SplitRow(c, 0.1, 12345)
		if !(math.Abs(p-0.1*c) <= 1e-6*c) || p > c || p < 0 {
			t.Errorf("count %g: part %g, want about %g", c, p, 0.1*c)
		}
		tr, v := splitCount(c, 0.1, 3, 0, 1, 2)
		if !(math.Abs(v-0.1*c) <= 1e-6*c) || tr < 0 {
			t.Errorf("entry of count %g: training %g, validation %g", c, tr, v)
		}
	}
}
