package factor

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// f32Pair returns md rounded to float32 twice: as a Float32 model (the
// pass reads its float32 copy of K) and as a Float64 model holding the
// same values (the pass reads the float64 arrays).
func f32Pair(md *Model) (m32, m64 *Model) {
	m32 = md.Clone()
	m32.SetPrecision(Float32)
	m64 = m32.Clone()
	m64.SetPrecision(Float64)
	return m32, m64
}

// TestPrecisionParse: names round-trip; a bad name is refused naming it.
func TestPrecisionParse(t *testing.T) {
	for _, p := range []Precision{Float64, Float32} {
		if q, err := ParsePrecision(p.String()); err != nil || q != p {
			t.Fatalf("%v: parsed back as %v, %v", p, q, err)
		}
	}
	if p, err := ParsePrecision(""); err != nil || p != Float64 {
		t.Fatalf(`"": %v, %v; want float64`, p, err)
	}
	if _, err := ParsePrecision("float16"); err == nil || !strings.Contains(err.Error(), `"float16"`) {
		t.Fatalf("float16: %v", err)
	}
}

// TestRound32: entries become float32 values; a positive entry below
// float32's normal range becomes 2^-126, never 0; zeros stay zero.
func TestRound32(t *testing.T) {
	for _, v := range []float64{0, 1, 0.1, 1.0 / 3, 1e-30, 0.999999999} {
		r := Round32(v)
		if float64(float32(r)) != r || math.Abs(r-v) > v*0x1p-24 {
			t.Errorf("Round32(%v) = %v", v, r)
		}
	}
	for _, v := range []float64{EntryFloor, 1e-40, 1e-300} {
		if r := Round32(v); r != 0x1p-126 {
			t.Errorf("Round32(%v) = %v, want 2^-126", v, r)
		}
	}
}

// TestRound32AVX2: the AVX2 rounding of a row (the commit's) is bitwise
// Round32 entry by entry, on random magnitudes, ties of float32 rounding
// (exact midpoints), zeros, values below float32's normal range and the
// entry floor, with and without the float32 copy.
func TestRound32AVX2(t *testing.T) {
	if !useAVX2() {
		t.Log("no AVX2 on this machine (or -tags purego): both paths are Go")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float64, 4096)
	for k := range x {
		switch k % 8 {
		case 0:
			x[k] = 0
		case 1:
			x[k] = EntryFloor * (1 + rng.Float64())
		case 2:
			x[k] = math.Ldexp(rng.Float64(), -120-rng.IntN(40)) // around 2^-126
		case 3:
			// A midpoint between two float32 values: a tie.
			f := float32(rng.Float64())
			x[k] = (float64(f) + float64(math.Nextafter32(f, 2))) / 2
		default:
			x[k] = math.Ldexp(rng.Float64(), -rng.IntN(60))
		}
	}
	for _, withCopy := range []bool{false, true} {
		fast, slow := slices.Clone(x), slices.Clone(x)
		var f32, s32 []float32
		if withCopy {
			f32, s32 = make([]float32, len(x)), make([]float32, len(x))
		}
		for lo := 0; lo < len(x); lo += 32 {
			var fr, sr []float32
			if withCopy {
				fr, sr = f32[lo:lo+32], s32[lo:lo+32]
			}
			round32Row(fast[lo:lo+32], fr, false)
			round32Row(slow[lo:lo+32], sr, true)
		}
		for k := range x {
			if math.Float64bits(fast[k]) != math.Float64bits(slow[k]) || math.Float64bits(slow[k]) != math.Float64bits(Round32(x[k])) {
				t.Fatalf("x=%v: AVX2 %v, Go %v, Round32 %v", x[k], fast[k], slow[k], Round32(x[k]))
			}
			if withCopy && (math.Float32bits(f32[k]) != math.Float32bits(s32[k]) || float64(s32[k]) != slow[k]) {
				t.Fatalf("x=%v: float32 copy AVX2 %v, Go %v", x[k], f32[k], s32[k])
			}
		}
	}
}

// TestFloat32KernelBitwise: a pass of a Float32 model (AVX2 and pure Go,
// orders that are and are not multiples of 4) computes bitwise the
// statistics of a Float64 pass on the same float32 values.
func TestFloat32KernelBitwise(t *testing.T) {
	for _, tc := range []struct{ n, m, perRow int }{
		{50, 4, 7}, {300, 8, 20}, {3000, 32, 30}, {700, 12, 9}, {200, 5, 11}, {9000, 64, 5},
	} {
		blocks := RandomCounts(tc.n, 2, tc.perRow, 4, uint64(tc.n))
		m32, m64 := f32Pair(NewRandom(tc.n, tc.m, 2, TieNone, 7))
		for _, b := range blocks {
			var want, fast, slow Partial
			if err := Compute(m64, b, new(Scratch), &want, true); err != nil {
				t.Fatal(err)
			}
			if err := Compute(m32, b, new(Scratch), &fast, true); err != nil {
				t.Fatal(err)
			}
			if err := Compute(m32, b, &Scratch{pureGo: true}, &slow, true); err != nil {
				t.Fatal(err)
			}
			for name, p := range map[string]*Partial{"AVX2": &fast, "pure Go": &slow} {
				if !bitsEqual(p.Dh, want.Dh) || !bitsEqual(p.KhT, want.KhT) || !bitsEqual(p.Y, want.Y) ||
					!bitsEqual(p.X, want.X) || math.Float64bits(p.LogLik) != math.Float64bits(want.LogLik) {
					t.Fatalf("n=%d m=%d: the float32 pass (%s) differs from the float64 pass on the rounded model", tc.n, tc.m, name)
				}
			}
		}
	}
}

// TestFloat32PassTreeWorkers: passes of a Float32 model with 1, 2, 3 and
// 8 goroutines, under a plan of several groups and pipelined (one group),
// give bitwise the accumulator of one goroutine's Float64 pass on the
// rounded model, in every tie mode.
func TestFloat32PassTreeWorkers(t *testing.T) {
	for _, tie := range []Tie{TieNone, TieSharedK, TieSharedD} {
		blocks, md := treeCase(t, 5, tie)
		m32, m64 := f32Pair(md)
		for _, groupNNZ := range []int{20, 0} {
			want := NewAccumulator(m64)
			ref := Passer{GroupNNZ: groupNNZ}
			if err := ref.Pass(context.Background(), m64, blocks, want, 1, true); err != nil {
				t.Fatal(err)
			}
			for _, w := range []int{1, 2, 3, 8} {
				// The column pass reads K from the float32 copy, the row
				// pass from K^T (rowpass.go).
				for _, rows := range []int8{rowsNever, rowsForce} {
					acc := NewAccumulator(m32)
					ps := Passer{GroupNNZ: groupNNZ, rows: rows}
					if err := ps.Pass(context.Background(), m32, blocks, acc, w, true); err != nil {
						t.Fatal(err)
					}
					if !ivAccEqual(acc, want) {
						t.Fatalf("%v, group nnz %d, %d workers, rows %d: the float32 pass differs from the float64 pass on the rounded model", tie, groupNNZ, w, rows)
					}
				}
			}
		}
	}
}

// roundingCommit is EMSF's commit (α = 1) followed by rounding every
// entry to float32, on a Float64 model: what a Float32 fit must equal.
func roundingCommit(blocks []*Block) func(md *Model, acc *Accumulator) {
	dataTerm := DataTerm(blocks)
	return func(md *Model, acc *Accumulator) {
		acc.Commit(md, 1, dataTerm)
		for _, x := range append(md.D, md.KT...) {
			RoundRows32(x)
		}
	}
}

// TestFloat32FitWorkersBitwise: a Float32 fit is bitwise the same for 1,
// 2, 3 and 8 workers and equals a Float64 fit whose commit rounds to
// float32; its factors are float32 values, valid (rows within
// StochasticTol32), and Σx = N held (Loop checks it every pass).
func TestFloat32FitWorkersBitwise(t *testing.T) {
	for _, c := range ivCases() {
		t.Run(c.name, func(t *testing.T) {
			md0, blocks, _, _ := c.data(t, 30*c.n, 1)
			m32, m64 := f32Pair(md0)
			if _, err := Fit(context.Background(), m64, blocks, FitOptions{Workers: 1, Converger: Converger{MaxIter: 5},
				Commit: roundingCommit(blocks)}); err != nil {
				t.Fatal(err)
			}
			ref := m32.Clone()
			if _, err := Fit(context.Background(), ref, blocks, FitOptions{Workers: 2, Converger: Converger{MaxIter: 5}}); err != nil {
				t.Fatal(err)
			}
			if !ref.Equal(m64) || math.Float64bits(ref.LogLik) != math.Float64bits(m64.LogLik) {
				t.Fatalf("float32 fit differs from the float64 fit with a rounding commit (loglik %.17g vs %.17g)", ref.LogLik, m64.LogLik)
			}
			// Several reduction groups (GroupNNZ 7): any worker count.
			var want *Model
			for _, w := range []int{1, 2, 3, 8} {
				md := m32.Clone()
				if _, err := Fit(context.Background(), md, blocks, FitOptions{Workers: w, GroupNNZ: 7, Converger: Converger{MaxIter: 5}}); err != nil {
					t.Fatal(err)
				}
				if want == nil {
					want = md
				} else if !md.Equal(want) || math.Float64bits(md.LogLik) != math.Float64bits(want.LogLik) {
					t.Fatalf("%d workers: float32 model differs from 1 worker's", w)
				}
				for _, x := range append(md.D, md.KT...) {
					if !all32(x) {
						t.Fatalf("%d workers: an entry is not a float32 value", w)
					}
				}
				if err := md.Validate(); err != nil {
					t.Fatalf("%d workers: %v", w, err)
				}
			}
		})
	}
}

// pHat returns P̂ = D^a K^a of action a as a dense n×n row-major slice.
func pHat(md *Model, a int) []float64 {
	n := md.N
	p := make([]float64, n*n)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			p[i*n+j] = md.Prob(a, i, j)
		}
	}
	return p
}

// TestFloat32AgreesWithFloat64: fitted from the same initial model for 40
// iterations on data sampled from a random model (n = 200, m = 8, u = 2,
// 12 000 transitions), the float32 and float64 fits agree: the
// log-likelihood per transition to 1e-7 (measured: 1.7e-9), and
// max |P̂32 − P̂64| / max P̂64 to 1e-5 (measured: 2.6e-7, about four
// float32 roundings: EM carries the rounding along its path). The
// float32 fit's loglik never decreases by more than 1e-7 relative
// (measured: it did not decrease in these 40 iterations).
func TestFloat32AgreesWithFloat64(t *testing.T) {
	c := ivCase{name: "agree", n: 200, m: 8, u: 2, tie: TieNone, seed: 31, visited: 0.9, noDataAction: -1}
	md0, blocks, _, _ := c.data(t, 60*c.n, 8)
	m64 := md0.Clone()
	m32 := md0.Clone()
	m32.SetPrecision(Float32)
	var lls []float64
	opts := func(p func(IterStats)) FitOptions {
		return FitOptions{Workers: 2, Converger: Converger{MaxIter: 40}, Progress: p}
	}
	if _, err := Fit(context.Background(), m64, blocks, opts(nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := Fit(context.Background(), m32, blocks, opts(func(st IterStats) { lls = append(lls, st.LogLik) })); err != nil {
		t.Fatal(err)
	}
	for k := 1; k < len(lls); k++ {
		if lls[k] < lls[k-1]-1e-7*math.Abs(lls[k-1]) {
			t.Errorf("float32 fit: loglik fell from %.17g to %.17g at iteration %d", lls[k-1], lls[k], k+1)
		}
	}
	total := TotalCount(blocks)
	dll := math.Abs(m32.LogLik-m64.LogLik) / total
	worst, top := 0.0, 0.0
	for a := 0; a < c.u; a++ {
		p32, p64 := pHat(m32, a), pHat(m64, a)
		for i := range p64 {
			worst = max(worst, math.Abs(p32[i]-p64[i]))
			top = max(top, p64[i])
		}
	}
	t.Logf("40 iterations: |Δ loglik| per transition %.3g (loglik %.10g); max|P̂32−P̂64| %.3g, relative to max P̂ %.3g",
		dll, m64.LogLik/total, worst, worst/top)
	if dll > 1e-7 {
		t.Errorf("loglik per transition differs by %.3g > 1e-7", dll)
	}
	if worst/top > 1e-5 {
		t.Errorf("max |P̂32 − P̂64| / max P̂ = %.3g > 1e-5", worst/top)
	}
}

// TestValidateFloat32: a model of float32 values (as read from a float32
// fit's file, precision unknown) passes Validate with rows off by up to
// StochasticTol32; a row of float64 values off by 1e-8 does not, nor a
// float32 row off by more than StochasticTol32.
func TestValidateFloat32(t *testing.T) {
	md := NewModel(3, 2, 1, TieNone)
	set := func(d0, d1 float64) {
		for i := 0; i < 3; i++ {
			md.D[0][2*i], md.D[0][2*i+1] = d0, d1
		}
		for j := 0; j < 3; j++ {
			md.KT[0][2*j], md.KT[0][2*j+1] = float64(float32(1.0/3)), 1.0/3
		}
		md.KT[0][1] = 1 - 2.0/3
		md.KT[0][0] = 1 - 2*float64(float32(1.0/3))
	}
	set(0.5, float64(float32(0.5+1e-7)))
	if err := md.Validate(); err != nil {
		t.Fatalf("float32 rows: %v", err)
	}
	set(0.5, 0.5+1e-8)
	if err := md.Validate(); err == nil {
		t.Fatal("a float64 row off by 1e-8 passed")
	}
	set(0.5, float64(float32(0.5+3e-6)))
	if err := md.Validate(); err == nil {
		t.Fatal("a float32 row off by 3e-6 passed")
	}
}

// TestFloat32RefusedElsewhere: the fits that commit outside Loop refuse
// a Float32 model (they would read a stale float32 copy of K).
func TestFloat32RefusedElsewhere(t *testing.T) {
	md := NewRandom(10, 2, 1, TieNone, 1)
	md.SetPrecision(Float32)
	if _, err := NewIncremental(md, IncrementalOptions{}); err == nil || !strings.Contains(err.Error(), "float32") {
		t.Errorf("incremental: %v", err)
	}
	if _, err := NewOnlineEM(md, OnlineEMOptions{GammaExp: 0.6}); err == nil || !strings.Contains(err.Error(), "float32") {
		t.Errorf("online EM: %v", err)
	}
}

// BenchmarkPrecision times float64 and float32 iterations (Pass + Commit)
// interleaved on the same blocks, one of each per b.N round (which goes
// first alternates), so that a loaded machine's noise falls on both
// alike. It reports each precision's median wall ns/nnz and mean CPU
// ns/nnz (process CPU, all threads; 10 ms ticks) and the ratio of the
// medians (float32 / float64). Run it with
//
//	go test -run NONE -bench BenchmarkPrecision -benchtime 5x ./factor/
//
// (large: n = 10^6, 20M nonzeros, m = 32; medium: n = 20 000, 2M).
func BenchmarkPrecision(b *testing.B) {
	for _, sz := range []benchSize{benchLarge, benchSizes[1]} {
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/m=32/workers=%d", sz.name, workers), func(b *testing.B) { benchPrecision(b, sz, 32, workers) })
		}
	}
}

func benchPrecision(b *testing.B, sz benchSize, m, workers int) {
	var arms [2]*benchArm
	for k, p := range []Precision{Float64, Float32} {
		md := NewRandom(sz.n, m, 1, TieNone, 1)
		md.SetPrecision(p)
		arms[k] = &benchArm{md: md}
	}
	w64, w32 := benchAB(b, benchBlocks(sz), arms, workers, func(a *benchArm, acc *Accumulator, dataTerm float64) {
		acc.Commit(a.md, 1, dataTerm)
	})
	b.ReportMetric(w64[0], "f64-ns/nnz")
	b.ReportMetric(w32[0], "f32-ns/nnz")
	b.ReportMetric(w64[1], "f64-cpu-ns/nnz")
	b.ReportMetric(w32[1], "f32-cpu-ns/nnz")
	b.ReportMetric(w32[0]/w64[0], "f32/f64")
}

// TestFloat32Smooth: Smooth keeps a Float32 model float32 and its copy
// of K^T current: a pass after it equals the Float64 pass on the same
// values.
func TestFloat32Smooth(t *testing.T) {
	blocks, md := treeCase(t, 2, TieNone)
	md.SetPrecision(Float32)
	if err := md.Smooth(0.01); err != nil {
		t.Fatal(err)
	}
	m64 := md.Clone()
	m64.SetPrecision(Float64)
	for _, x := range append(md.D, md.KT...) {
		if !all32(x) {
			t.Fatal("smoothed float32 model holds a value that is not a float32")
		}
	}
	a32, a64 := NewAccumulator(md), NewAccumulator(m64)
	if err := Pass(context.Background(), md, blocks, a32, 2, true); err != nil {
		t.Fatal(err)
	}
	if err := Pass(context.Background(), m64, blocks, a64, 1, true); err != nil {
		t.Fatal(err)
	}
	if !ivAccEqual(a32, a64) {
		t.Fatal("pass after Smooth differs from the float64 pass on the same values (stale float32 copy)")
	}
}

// TestFloat32LoopRefusesCommitHook: a loop whose commit happens elsewhere
// (the owners exchange's nodes) refuses a Float32 model: those nodes
// would not round.
func TestFloat32LoopRefusesCommitHook(t *testing.T) {
	blocks, md := treeCase(t, 3, TieNone)
	md.SetPrecision(Float32)
	hooks := LoopHooks{Commit: func(context.Context, int, *Model, *Accumulator, float64, float64) error { return nil }}
	_, err := Loop(context.Background(), md, blocks, &localStepper{blocks: blocks, workers: 1}, FitOptions{Converger: Converger{MaxIter: 1}}, hooks)
	if err == nil || !strings.Contains(err.Error(), "float32") {
		t.Fatalf("err = %v; want a refusal naming float32", err)
	}
}
