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
