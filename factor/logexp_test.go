package factor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// logexpInputs are values of every kind: random (0, 1), any bits
// (negative, NaN and infinite included), scaled around 1, subnormals,
// powers of two, both sides of √2/2, zeros and the specials.
func logexpInputs(r *rand.Rand, n int) []float64 {
	x := []float64{math.SmallestNonzeroFloat64, 1e-310, math.MaxFloat64, 1, 2, 0.5, 0.25, 3,
		math.Sqrt2 / 2, math.Nextafter(math.Sqrt2/2, 1), math.Nextafter(math.Sqrt2/2, 0), 0x1p-1022,
		math.Nextafter(1, 2), math.Nextafter(1, 0), math.Inf(1), math.Inf(-1), math.NaN(), 0,
		math.Copysign(0, -1), -1, 1e300, 1e-300, EntryFloor, -745.2, -708.5, 709.7, 710, -1e-20, 1e-20}
	for range n {
		switch r.IntN(4) {
		case 0:
			x = append(x, r.Float64())
		case 1:
			x = append(x, math.Float64frombits(r.Uint64()))
		case 2:
			x = append(x, -50*r.Float64())
		default:
			x = append(x, math.Ldexp(r.Float64()+0.5, r.IntN(200)-100))
		}
	}
	return x
}

// sameFloat reports whether a and b are the same float64, NaNs of any
// payload counting as the same.
func sameFloat(a, b float64) bool {
	return math.Float64bits(a) == math.Float64bits(b) || math.IsNaN(a) && math.IsNaN(b)
}

// checkAll checks all (logAll or expAll) against f, bitwise, on x at
// several offsets and lengths and in place.
func checkAll(t *testing.T, name string, x []float64, all func(dst, src []float64), f func(float64) float64) {
	t.Helper()
	for _, off := range []int{0, 1, 2, 3, 5} {
		for _, n := range []int{0, 1, 3, 4, 9, len(x) - off} {
			src := x[off : off+n]
			dst := make([]float64, n)
			all(dst, src)
			for q, v := range src {
				if want := f(v); !sameFloat(dst[q], want) {
					t.Fatalf("offset %d, length %d: %s(%v) = %v (%#x), math gives %v (%#x)",
						off, n, name, v, dst[q], math.Float64bits(dst[q]), want, math.Float64bits(want))
				}
			}
		}
	}
	src := append([]float64(nil), x...)
	all(src, src)
	for q, v := range x {
		if !sameFloat(src[q], f(v)) {
			t.Fatalf("in place: %s(%v) = %v", name, v, src[q])
		}
	}
}

// TestLogsMatchMathLog: logAll is bitwise math.Log on every kind of value,
// at every offset and length (groups of four, the tail, groups holding a
// special value that math.Log takes one by one).
func TestLogsMatchMathLog(t *testing.T) {
	if !useAVX2() {
		t.Log("no AVX2 on this machine (or -tags purego): logAll is the scalar loop")
	}
	if useAVX2() {
		// The kernel itself takes ordinary values (else every group
		// would pass to math.Log and the test would prove nothing).
		x := []float64{0.3, 1e-200, 7, 0x1p-1022, 1, 2, 3, 4, 0, 0.5, 0.5, 0.5}
		if got := logsAVX2(&make([]float64, 12)[0], &x[0], 3); got != 2 {
			t.Fatalf("logsAVX2 did %d groups of 3 (the third holds a 0), want 2", got)
		}
	}
	r := rand.New(rand.NewPCG(7, 8))
	x := logexpInputs(r, 20000)
	r.Shuffle(len(x), func(i, j int) { x[i], x[j] = x[j], x[i] })
	checkAll(t, "log", x, logAll, math.Log)
}

// TestExpsMatchMathExp: expAll is bitwise math.Exp on every kind of
// value (overflow, underflow and subnormal results, infinities and NaN
// among them), at every offset and length.
func TestExpsMatchMathExp(t *testing.T) {
	if !useExpAVX2() {
		t.Log("no AVX2 and FMA on this machine (or -tags purego): expAll is the scalar loop")
	}
	if useExpAVX2() {
		x := []float64{-0.3, -700, 7, 700, 0, 1e-30, -1e-30, 1, -1, -2, -3, -746}
		if got := expsAVX2(&make([]float64, 12)[0], &x[0], 3); got != 2 {
			t.Fatalf("expsAVX2 did %d groups of 3 (the third underflows), want 2", got)
		}
	}
	r := rand.New(rand.NewPCG(9, 10))
	x := logexpInputs(r, 20000)
	for range 5000 {
		x = append(x, 1500*r.Float64()-750, -40*r.Float64(), math.Ldexp(r.Float64(), -r.IntN(60)))
	}
	r.Shuffle(len(x), func(i, j int) { x[i], x[j] = x[j], x[i] })
	checkAll(t, "exp", x, expAll, math.Exp)
}

// kernelAll is apply4 with one kernel of the given width: kern on groups
// until it stops before one, that group with f alone; the tail with f.
func kernelAll(width int, kern func(dst, src *float64, groups int) int, f func(float64) float64) func(dst, src []float64) {
	return func(dst, src []float64) {
		q := 0
		for len(src)-q >= width {
			q += width * kern(&dst[q], &src[q], (len(src)-q)/width)
			if len(src)-q < width {
				break
			}
			for end := q + width; q < end; q++ {
				dst[q] = f(src[q])
			}
		}
		for ; q < len(src); q++ {
			dst[q] = f(src[q])
		}
	}
}

// TestLogExpKernelsMatchMath checks each kernel the machine has (AVX2
// and AVX-512, whichever apply4 would pick) on its own, bitwise against
// math.Log and math.Exp on every kind of value, and that each stops
// before a group holding a value its function treats apart (else every
// group would pass to math and the test would prove nothing).
func TestLogExpKernelsMatchMath(t *testing.T) {
	type kernel struct {
		name  string
		have  bool
		width int
		kern  func(dst, src *float64, groups int) int
		f     func(float64) float64
		// ordinary values, then a group holding a special one
		ok, special []float64
	}
	logOK := []float64{0.3, 1e-200, 7, 0x1p-1022, 1, 2, 3, 4, 0.5, EntryFloor, 1e300, 0x1p-1074, 0.7071067811865476, 1 + 0x1p-52, 1 - 0x1p-53, 1e-310}
	expOK := []float64{-0.3, -700, 7, 700, 0, 1e-30, -1e-30, 1, -1, -2, -3, -708, 709, 0.5, -50, 1e-300}
	ks := []kernel{
		{"logsAVX2", useAVX2(), 4, logsAVX2, math.Log, logOK, []float64{0.5, 0.5, 0, 0.5}},
		{"logsAVX512", useLogAVX512(), 8, logsAVX512, math.Log, logOK, []float64{0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, math.Inf(1)}},
		{"logsAVX512-neg", useLogAVX512(), 8, logsAVX512, math.Log, logOK, []float64{-0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5}},
		{"expsAVX2", useExpAVX2(), 4, expsAVX2, math.Exp, expOK, []float64{0, 0, -746, 0}},
		{"expsAVX512", useExpAVX512(), 8, expsAVX512, math.Exp, expOK, []float64{0, 0, 0, 0, 0, 0, 0, 710}},
		{"expsAVX512-sub", useExpAVX512(), 8, expsAVX512, math.Exp, expOK, []float64{0, 0, 0, -740, 0, 0, 0, 0}},
	}
	r := rand.New(rand.NewPCG(11, 12))
	x := logexpInputs(r, 20000)
	for range 5000 {
		x = append(x, 1500*r.Float64()-750, -40*r.Float64(), math.Ldexp(r.Float64(), -r.IntN(60)),
			math.Float64frombits(r.Uint64N(1<<52)), 1+math.Ldexp(r.Float64()-0.5, -r.IntN(50)))
	}
	r.Shuffle(len(x), func(i, j int) { x[i], x[j] = x[j], x[i] })
	for _, k := range ks {
		if !k.have {
			t.Logf("%s: not on this machine (or -tags purego)", k.name)
			continue
		}
		src := append(append([]float64(nil), k.ok...), k.special...)
		dst := make([]float64, len(src))
		if got, want := k.kern(&dst[0], &src[0], len(src)/k.width), len(k.ok)/k.width; got != want {
			t.Fatalf("%s did %d groups, want %d (then a group with a special value)", k.name, got, want)
		}
		for q, v := range k.ok {
			if want := k.f(v); !sameFloat(dst[q], want) {
				t.Fatalf("%s(%v) = %v, math gives %v", k.name, v, dst[q], want)
			}
		}
		checkAll(t, k.name, x, kernelAll(k.width, k.kern, k.f), k.f)
	}
}

// BenchmarkLogExpKernels times each log and exp kernel on one goroutine
// over 128k entries of a model (a block at the real-data benchmark's
// size, n = 4000, m = 32): values in (EntryFloor, 1] for the logarithms,
// their logarithms shifted below 0 for the exponentials.
func BenchmarkLogExpKernels(b *testing.B) {
	const size = 4000 * 32
	r := rand.New(rand.NewPCG(1, 2))
	x, lx := make([]float64, size), make([]float64, size)
	for q := range x {
		x[q] = max(EntryFloor, r.Float64()*r.Float64())
		lx[q] = math.Log(x[q]) - 3
	}
	dst := make([]float64, size)
	for _, k := range []struct {
		name  string
		have  bool
		width int
		kern  func(dst, src *float64, groups int) int
		f     func(float64) float64
		src   []float64
	}{
		{"log/AVX2", useAVX2(), 4, logsAVX2, math.Log, x},
		{"log/AVX512", useLogAVX512(), 8, logsAVX512, math.Log, x},
		{"exp/AVX2", useExpAVX2(), 4, expsAVX2, math.Exp, lx},
		{"exp/AVX512", useExpAVX512(), 8, expsAVX512, math.Exp, lx},
	} {
		if !k.have {
			continue
		}
		all := kernelAll(k.width, k.kern, k.f)
		b.Run(k.name, func(b *testing.B) {
			for b.Loop() {
				all(dst, k.src)
			}
		})
	}
}
