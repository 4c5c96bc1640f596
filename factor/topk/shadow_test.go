package topk

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestDots8WithinBound: the 8-bit kernel (the AVX2 one where the CPU has
// it, and the pure-Go one) gives every row (float32(A)·unit + h)·σ, A the
// exact integer sum Σ_c ω_c·q_c, within three float32 roundings (γ_3) and
// the last product's underflow (2^-150), for rows up to 256 codes of the
// largest weights and codes (sums just below 2^31: an overflow fails
// here), scales down to float32's subnormal range, zero rows and zero
// scales; and each returns the block's largest output (the shadow scan
// passes over a block below its threshold by it).
func TestDots8WithinBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for trial := range 300 {
		stride := 16 * (1 + rng.IntN(16))
		nrows := 8 * (1 + rng.IntN(80))
		c := weightBits(stride)
		top := int(1)<<(c+1) - 1
		codes := make([]uint8, nrows*stride)
		scales := make([]float32, nrows)
		w := make([]int16, stride)
		full := rng.IntN(4) == 0 // the largest sums: every weight and code at its top
		for r := range nrows {
			if rng.IntN(10) == 0 && !full {
				continue // a zero row
			}
			for c := range stride - rng.IntN(16) {
				codes[r*stride+c] = uint8(rng.IntN(256))
				if full {
					codes[r*stride+c] = 255
				}
			}
			scales[r] = float32(rng.Float64() * []float64{2, 1e-3, 1e-39, 1e-44, 0}[rng.IntN(5)])
		}
		for l := range w {
			w[l] = int16([]int{top, rng.IntN(top + 1), rng.IntN(100), 0}[rng.IntN(4)])
			if full {
				w[l] = int16(top)
			}
		}
		unit := float32(math.Ldexp(1, -c))
		h := float32(rng.Float64() * float64(stride))
		outGo, out := make([]float32, nrows), make([]float32, nrows)
		topGo := dots8Go(outGo, w, codes, scales, unit, h, nrows, stride)
		topAsm := dots8(out, w, codes, scales, unit, h, nrows, stride)
		if want := slices.Max(outGo); topGo != want {
			t.Fatalf("trial %d: dots8Go returns %v as the largest output, want %v", trial, topGo, want)
		}
		if want := slices.Max(out); topAsm != want {
			t.Fatalf("trial %d: dots8 returns %v as the largest output, want %v", trial, topAsm, want)
		}
		gamma := 3 * 0x1p-24 / (1 - 3*0x1p-24)
		for r := range nrows {
			a := 0
			for c, wc := range w {
				a += int(wc) * int(codes[r*stride+c])
			}
			if a >= 1<<31 {
				t.Fatalf("trial %d: stride %d, weight bits %d: a sum of %d", trial, stride, c, a)
			}
			exact := float64(scales[r]) * (math.Ldexp(float64(a), -c) + float64(h))
			for _, v := range []float32{out[r], outGo[r]} {
				if d := math.Abs(float64(v) - exact); d > gamma*exact+0x1p-150 {
					t.Fatalf("trial %d (stride %d, full %v) row %d: kernel %v, exact %v: error %g above the bound %g",
						trial, stride, full, r, v, exact, d, gamma*exact+0x1p-150)
				}
			}
		}
	}
}

// adversary draws n items of m coordinates (and an extra coordinate, or
// nil) that the 8-bit shadow finds hard: values spanning many orders of
// magnitude within one item, values at and below float32's subnormal
// range, float64's extremes, zero rows, clusters of near ties closer than
// a code, and codes exactly half a step from their values (see halfCodes).
func adversary(rng *rand.Rand, kind string, n, m int, withExtra bool) ([]float64, []float64) {
	dims := m
	if withExtra {
		dims++
	}
	rows := make([]float64, n*dims)
	base := make([]float64, dims)
	for l := range base {
		base[l] = rng.Float64()
	}
	for j := range n {
		row := rows[j*dims : (j+1)*dims]
		switch kind {
		case "magnitudes": // one large coordinate, the others anywhere down to 1e-40 of it
			for l := range row {
				row[l] = math.Pow(10, -40*rng.Float64())
			}
			row[rng.IntN(dims)] = 1
		case "subnormal": // around float32's smallest values
			for l := range row {
				row[l] = rng.Float64() * []float64{1e-38, 1e-42, 1e-45, 0}[rng.IntN(4)]
			}
		case "mixed": // most items normal, some 2^-140 times smaller (scales below float32's normal range)
			f := 1.0
			if rng.IntN(3) == 0 {
				f = 0x1p-140
			}
			for l := range row {
				row[l] = rng.Float64() * f
			}
		case "tiny64", "huge64": // float64's far ends
			f := map[string]float64{"tiny64": 1e-300, "huge64": 1e250}[kind]
			for l := range row {
				row[l] = rng.Float64() * f
			}
		case "zero": // zero rows and rows with one non-zero coordinate
			if rng.IntN(2) == 0 {
				row[rng.IntN(dims)] = rng.Float64()
			}
		case "ties": // clusters closer than a code: the same codes, different scores
			for l := range row {
				if j%13 == 0 {
					row[l] = base[l] * (1 + 1e-6*rng.NormFloat64())
				} else {
					row[l] = 0.9 * rng.Float64() * base[l]
				}
			}
		case "halfcodes": // filled by halfCodes
			for l := range row {
				row[l] = rng.Float64()
			}
		}
	}
	items := make([]float64, n*m)
	var extra []float64
	if withExtra {
		extra = make([]float64, n)
	}
	for j := range n {
		copy(items[j*m:(j+1)*m], rows[j*dims:j*dims+m])
		if withExtra {
			extra[j] = rows[j*dims+m]
		}
	}
	if kind == "halfcodes" {
		halfCodes(rng, items, extra, n, m)
	}
	return items, extra
}

// halfCodes moves every coordinate of every item but its largest (after
// the shadow's scaling of each coordinate) and its coordinates' largest
// values to half a code (less 10^-4 or 2^-30 of one) above or below a
// code, the same side for all of an item's coordinates: the quantization
// error of each then is nearly the bound's half code, all of one sign, so
// a score is off from its 8-bit estimate by nearly the whole of the
// bound's H term. The scales and the coordinates' exponents do not change
// (the values that set them stay).
func halfCodes(rng *rand.Rand, items, extra []float64, n, m int) {
	sh := newShadow(items, n, m, extra)
	dims := len(sh.exps)
	coord := func(j, l int) *float64 {
		if l == m {
			return &extra[j]
		}
		return &items[j*m+l]
	}
	colMax := make([]float64, dims)
	for j := range n {
		for l := range dims {
			colMax[l] = max(colMax[l], *coord(j, l))
		}
	}
	for j := range n {
		side := []float64{-0.4999, 0.4999, -0.5 + 0x1p-30, 0.5 - 0x1p-30}[rng.IntN(4)]
		top, x := 0, 0.0
		for l := range dims {
			if v := math.Ldexp(*coord(j, l), -sh.exps[l]); v > x {
				top, x = l, v
			}
		}
		for l := range dims {
			if l != top && sh.scales[j] > 0 && *coord(j, l) < colMax[l] {
				*coord(j, l) = math.Ldexp(float64(sh.scales[j]), sh.exps[l]) * (1 + float64(rng.IntN(250)) + side)
			}
		}
	}
}

// adversaryQuery draws weights that do not sum to 1: spread or on a few
// coordinates, with zeros, scaled by a power of ten from 10^-300 to
// 10^300, spanning many orders of magnitude themselves, or small
// integers times a power of two (the kernel's integer weights are then
// exact unless the coordinates' exponents differ by more than 5).
func adversaryQuery(rng *rand.Rand, dims int) []float64 {
	w := make([]float64, dims)
	kind := rng.IntN(4)
	exact := kind == 3
	switch kind {
	case 0:
		for l := range w {
			w[l] = rng.ExpFloat64()
		}
	case 1:
		for range 1 + rng.IntN(3) {
			w[rng.IntN(dims)] = rng.ExpFloat64()
		}
	case 2:
		for l := range w {
			w[l] = math.Pow(10, -40*rng.Float64())
		}
	case 3: // exact in the kernel's integers: no weight error to hide the others
		for l := range w {
			w[l] = float64(rng.IntN(1000)) * 0x1p-20
		}
	}
	if rng.IntN(4) == 0 {
		w[rng.IntN(dims)] = 0
	}
	if w[0] == 0 && slices.Max(w) == 0 {
		w[0] = 1
	}
	f := math.Pow(10, float64(rng.IntN(601)-300))
	if exact {
		f = math.Ldexp(1, rng.IntN(200)-100)
	}
	for l := range w {
		w[l] *= f
	}
	return w
}

var adversaryKinds = []string{"magnitudes", "subnormal", "mixed", "tiny64", "huge64", "zero", "ties", "halfcodes"}

// TestShadowBoundHolds: on adversarial models and queries, every item's
// exact score (Dot, the answers' bits) lies inside the interval bound8
// puts around its kernel output: the item can reach its own score
// (U_j >= minU) and its lower bound is at most its score. The "halfcodes"
// models put every score within 10^-4 of a code of the interval's upper
// or lower end, so that a bound whose H term is 1% too small fails here.
func TestShadowBoundHolds(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	checked, tight := 0, 0
	for trial := range 300 {
		kind := adversaryKinds[trial%len(adversaryKinds)]
		n, m := 1+rng.IntN(200), 1+rng.IntN(40)
		items, extra := adversary(rng, kind, n, m, rng.IntN(3) == 0)
		sh := newShadow(items, n, m, extra)
		dims := m
		if extra != nil {
			dims++
		}
		for range 5 {
			w := adversaryQuery(rng, dims)
			bd, w16, ok := newBound8(sh, w, nil)
			if !ok {
				continue
			}
			padded := (n + 7) &^ 7
			out := make([]float32, padded)
			dots8(out, w16, sh.codes, sh.scales, bd.unit, bd.h, padded, sh.stride)
			for j := range n {
				exact := Dot(w[:m], items[j*m:(j+1)*m])
				if extra != nil {
					exact += float64(w[m] * extra[j])
				}
				x := bd.units(exact)
				u, lo := float64(out[j]), bd.lower(out[j], sh.scales[j])
				if u < bd.minU(x) || lo > x {
					t.Fatalf("trial %d (%s, n=%d m=%d extra=%v) item %d, weights %v: exact score %v (%v in kernel units) outside [%v, U=%v → minU %v]",
						trial, kind, n, m, extra != nil, j, w, exact, x, lo, u, bd.minU(x))
				}
				checked++
				// How much of the H term the score used: near 1 for halfcodes.
				if hs := float64(sh.scales[j]) * float64(bd.h); hs > 0 && kind == "halfcodes" &&
					(u*(1+0x1p-20)-x > 0 && u-x < 0.01*hs || x-lo-hs < 0.01*hs) {
					tight++
				}
			}
		}
	}
	if checked < 50000 || tight < 500 {
		t.Errorf("%d items checked, %d of them within 1%% of H of the interval's end: the test must check many and be tight", checked, tight)
	}
}

// TestShadowAdversaryMatchesOracle: on the adversarial models and
// queries, k from 1 to n/16, TopK with the 8-bit shadow answers as the
// oracle does, bit for bit, and the shadow scan answers most of them.
func TestShadowAdversaryMatchesOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	var s Searcher
	shadowed, total := 0, 0
	for trial := range 140 {
		kind := adversaryKinds[trial%len(adversaryKinds)]
		n, m := 16+rng.IntN(800), 1+rng.IntN(40)
		items, extra := adversary(rng, kind, n, m, rng.IntN(3) == 0)
		ix, err := NewIndex(items, n, m, extra, 0, 1, QuantizedShadow(true))
		if err != nil {
			t.Fatal(err)
		}
		dims := m
		if extra != nil {
			dims++
		}
		for range 6 {
			w := adversaryQuery(rng, dims)
			k := []int{1, 2, 10, n / 16, n/16 - 1}[rng.IntN(5)]
			got, st := ix.TopK(Query{W: w, K: k, Budget: 1}, &s, nil)
			if want := oracle(items, extra, n, m, w, k); !slices.Equal(got, want) {
				t.Fatalf("trial %d (%s, n=%d m=%d k=%d, stats %+v):\ngot  %v\nwant %v", trial, kind, n, m, k, st, got, want)
			}
			total++
			if st.Shadow {
				shadowed++
			}
		}
	}
	if shadowed < total*3/4 {
		t.Errorf("only %d of %d queries answered by the shadow scan", shadowed, total)
	}
}

// TestShadowHalfCode: a model built so that the exact answer depends on
// the last percent of the bound's quantization term. Item D (index 3)
// holds the largest values of coordinates 0 and 1 (0.9: they are scaled
// by 2^0). Items A (index 0) and C, C' (1, 2) share their largest scaled
// coordinate (coordinate 2), hence their scale s; A's coordinates 0 and 1
// lie 0.4999 of a code above codes (10, 10), C's 0.4999 below codes
// (11, 10). With weights (1 − 2^-9, 2^-9, 0) (exact in the kernel's
// integers: no weight error) the 8-bit estimates put C a code's 0.998
// above A, while exactly A beats C by 0.0018 s. Asked for k = 3 with a
// budget of 1 (the lists are skipped; the k-th best lower bound is C's),
// the answer is (D, A, C) only if A's interval reaches C's lower bound:
// U_A·(1+g) ≈ s·(10 + H), C's lower bound ≈ s·(10.998 − H), so any H
// below 0.499 (half a code less 0.2 %) drops A.
func TestShadowHalfCode(t *testing.T) {
	const n, m = 64, 3
	items := make([]float64, n*m)
	for j := range n {
		items[j*m], items[j*m+1], items[j*m+2] = 0.001, 0.001, 1
	}
	items[3*m], items[3*m+1] = 0.9, 0.9
	sh := newShadow(items, n, m, nil)
	if sh.exps[0] != 0 || sh.exps[1] != 0 {
		t.Fatalf("exponents %v: the construction is off", sh.exps)
	}
	s := float64(sh.scales[0])
	items[0], items[1] = s*10.4999, s*10.4999
	for _, j := range []int{1, 2} {
		items[j*m], items[j*m+1] = s*(11-0.4999), s*(10-0.4999)
	}
	ix, err := NewIndex(items, n, m, nil, 0, 1, QuantizedShadow(true))
	if err != nil {
		t.Fatal(err)
	}
	st := ix.shadow.stride
	if got := ix.shadow.codes[:3*st]; got[0] != 10 || got[1] != 10 || got[st] != 11 || got[st+1] != 10 || ix.shadow.scales[0] != float32(s) {
		t.Fatalf("codes %v: the construction is off", got)
	}
	w := []float64{1 - 0x1p-9, 0x1p-9, 0}
	got, stats := ix.TopK(Query{W: w, K: 3, Budget: 1}, nil, nil)
	if !stats.Shadow || !stats.Skipped {
		t.Fatalf("stats %+v: want the shadow scan, lists skipped", stats)
	}
	if want := oracle(items, nil, n, m, w, 3); !slices.Equal(got, want) || want[1].Item != 0 || want[2].Item != 1 {
		t.Fatalf("got %v, want %v (items 3, 0, 1)", got, want)
	}
}

// TestShadowGivesUpOnTies: a model where every item ties (more near-ties
// than the shadow scans keep, at 8 bits or in float32) is answered by
// the exact scan, correctly.
func TestShadowGivesUpOnTies(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	const n, m = 5000, 4
	items := regime(rng, "uniform", n, m)
	ix, err := NewIndex(items, n, m, nil, 0, 1, QuantizedShadow(true))
	if err != nil {
		t.Fatal(err)
	}
	w := query(rng, "spread", m)
	got, st := ix.TopK(Query{W: w, K: 10, Budget: 1}, nil, nil)
	if !st.Scanned || st.Shadow || st.Float32 || ix.shadow32 == nil {
		t.Fatalf("stats %+v: want the exact scan", st)
	}
	if want := oracle(items, nil, n, m, w, 10); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestShadowExtremes: weights of 2^60 and items of 10^-300 are answered
// by the shadow scan (its exponents keep them in float32's range); scores
// that may overflow float64 (items and weights near 10^200) or that lie
// in float64's subnormal range are left to the exact scan; every answer
// is the oracle's.
func TestShadowExtremes(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 48))
	const n, m = 400, 4
	base := regime(rng, "dense", n, m)
	for _, c := range []struct {
		item, weight float64
		shadow       bool
	}{
		{1, 0x1p60, true}, {1e-300, 1, true}, {1e-300, 1e300, true}, {1e200, 1e-10, true},
		{1e200, 1e200, false}, {1e-200, 1e-150, false},
	} {
		items := slices.Clone(base)
		for x := range items {
			items[x] *= c.item
		}
		ix, err := NewIndex(items, n, m, nil, 0, 1, QuantizedShadow(true))
		if err != nil {
			t.Fatal(err)
		}
		w := query(rng, "spread", m)
		for l := range w {
			w[l] *= c.weight
		}
		got, st := ix.TopK(Query{W: w, K: 5, Budget: 1}, nil, nil)
		if st.Shadow != c.shadow {
			t.Errorf("items ×%g, weights ×%g: shadow scan %v, want %v (%+v)", c.item, c.weight, st.Shadow, c.shadow, st)
		}
		if want := oracle(items, nil, n, m, w, 5); !slices.Equal(got, want) {
			t.Fatalf("items ×%g, weights ×%g: got %v, want %v", c.item, c.weight, got, want)
		}
	}
}

// TestShadowNearTies: clusters of items whose scores differ by far less
// than a code (random weights over every coordinate) are answered by the
// shadow scan bitwise as the oracle does: the cluster's intervals
// overlap, the rescoring orders it.
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
		ix, err := NewIndex(items, n, m, nil, 1, 1, QuantizedShadow(true))
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

// TestShadowCodes: every code is within half a code (and 2^-44) of its
// value scaled by its coordinate's exponent and divided by the item's
// scale, at most 255; an item's largest scaled coordinate has code 255
// or 254 (the scale is rounded up by at most a float32 ulp), each
// coordinate's largest value a code of at least 127; zero rows have
// scale 0.
func TestShadowCodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(49, 50))
	for trial := range 60 {
		kind := adversaryKinds[trial%len(adversaryKinds)]
		n, m := 1+rng.IntN(100), 1+rng.IntN(20)
		items, extra := adversary(rng, kind, n, m, rng.IntN(2) == 0)
		sh := newShadow(items, n, m, extra)
		dims := len(sh.exps)
		value := func(j, l int) float64 {
			if l < m {
				return items[j*m+l]
			}
			return extra[j]
		}
		colMax := make([]float64, dims)
		for j := range n {
			for l := range dims {
				colMax[l] = max(colMax[l], value(j, l))
			}
		}
		for j := range n {
			sigma := float64(sh.scales[j])
			mx, top := 0.0, 0
			for l := range dims {
				x := math.Ldexp(value(j, l), -sh.exps[l])
				if x >= 1 {
					t.Fatalf("trial %d (%s) coordinate %d: exponent %d leaves %v", trial, kind, l, sh.exps[l], x)
				}
				if x > mx {
					mx, top = x, l
				}
				q := float64(sh.codes[j*sh.stride+l])
				if sigma > 0 && math.Abs(x/sigma-q) > 0.5+0x1p-44 || sigma == 0 && x > 0x1p-1074 {
					t.Fatalf("trial %d (%s) item %d coordinate %d: value %v, scale %v·2^%d, code %v", trial, kind, j, l, value(j, l), sigma, sh.exps[l], q)
				}
				if v := value(j, l); v > 0 && v == colMax[l] && sigma > 0x1p-126 && q < 127 {
					t.Fatalf("trial %d (%s) item %d: coordinate %d's largest value has code %v", trial, kind, j, l, q)
				}
			}
			if mx == 0 && sigma != 0 {
				t.Fatalf("trial %d (%s) item %d: a zero row with scale %v", trial, kind, j, sigma)
			}
			if q := sh.codes[j*sh.stride+top]; mx > 0 && sigma > 0x1p-126 && q < 254 {
				t.Fatalf("trial %d (%s) item %d: the largest scaled coordinate's code is %d", trial, kind, j, q)
			}
		}
	}
}
