package factor

import "fmt"

// Precision is the precision in which a model's factors D and K are
// stored and read by a pass. The statistics (D̂, K̂, x, Y, the loglik)
// are float64 whatever the precision.
//
// With Float32 every entry of D and K is a float32 value held in the
// float64 arrays (RoundFactors rounds them after each commit of Loop and
// when a fit starts), so a model file of a float32 fit holds exactly its
// float32 factors. The pass reads the rows of K from a float32 copy of
// K^T (half the bytes of the random row gather that dominates a pass at
// n = 10^6) and widens each row to float64 exactly; the product of two
// float32 values is exact in float64, and every sum is the float64 sum
// in the order of a float64 pass. So a float32 pass computes bitwise the
// statistics of a float64 pass on the rounded model: it is bitwise
// reproducible for any number of goroutines or cluster workers, and a
// cluster worker that computes in float64 on the rounded model it
// fetches gives bitwise the same partials.
//
// The rounding costs accuracy: a rounded row sums to 1 only within
// StochasticTol32, and each commit moves the model by up to 2^-24
// relative per entry, so the loglik of a float32 fit agrees with the
// float64 fit's to about 1e-6 relative per transition after tens of
// iterations (TestFloat32AgreesWithFloat64 states what is measured), and
// with α = 1 it may step down by as much near convergence.
//
// Memory: the float64 model stays (commits and output use it); the float32
// copy of K^T adds half of K's size. The rows of D are read once per
// block (contiguous, cache-resident) and stay float64.
//
// Where it runs: Fit and Loop (any Stepper, so the coordinator exchange
// of a cluster too), with EMSF's commit or a FitOptions.Commit (rounded
// after it), or a LoopHooks.Commit that rounds as Commit does
// (LoopHooks.Rounds: the owners exchange, whose owners round the rows
// they commit; Loop refuses a Float32 model with any other), and the
// incremental fit, MU and online EM refuse one (they commit outside
// Loop).
type Precision int

const (
	// Float64 stores and reads the factors in float64 (the default).
	Float64 Precision = iota
	// Float32 rounds the factors to float32 and reads K in float32.
	Float32
)

// String returns the name used on the command line and in model files.
func (p Precision) String() string {
	switch p {
	case Float64:
		return "float64"
	case Float32:
		return "float32"
	}
	return fmt.Sprintf("Precision(%d)", int(p))
}

// ParsePrecision is the inverse of Precision.String; "" is Float64.
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "float64", "":
		return Float64, nil
	case "float32":
		return Float32, nil
	}
	return 0, fmt.Errorf("factor: unknown precision %q (want float64 or float32)", s)
}

// StochasticTol32 is how far from 1 a row sum of a model whose entries are
// all float32 values may be (see Validate). Rounding a stochastic row
// moves its sum by at most 2^-24 ≈ 6e-8; a commit with learning rate α
// keeps (1-α) of the deviation it finds, so over many commits the
// deviation stays below 2^-24/α: 1e-6 holds for α ≥ 0.06, and emsf fit
// refuses --precision float32 with a smaller --alpha.
const StochasticTol32 = 1e-6

// MinAlpha32 is the smallest learning rate of a float32 fit (see
// StochasticTol32).
const MinAlpha32 = 0.1

// smallestNormal32 is the smallest positive normal float32, 2^-126.
const smallestNormal32 = 0x1p-126

// Round32 returns v rounded to the nearest float32 value, as a float64. A
// positive v that would round to 0 (or to a subnormal) gives 2^-126
// instead: a positive entry stays positive, as EntryFloor keeps it in
// float64, and the pass never widens a subnormal.
func Round32(v float64) float64 {
	r := float64(float32(v))
	if v > 0 && r < smallestNormal32 {
		r = smallestNormal32
	}
	return r
}

// RoundRows32 rounds every entry of xs with Round32, in place: what a
// float32 fit does to the rows of D a commit wrote (a cluster worker that
// derives its shard's rows of D commits them with CommitRow, then
// rounds them so).
func RoundRows32(xs []float64) {
	for i, v := range xs {
		xs[i] = Round32(v)
	}
}

// RoundFactors makes the model's factors those of its precision: with
// Float32 it rounds every entry of D and K (Round32) and refreshes the
// float32 copy of K^T that a pass reads; with Float64 it drops that copy
// and changes nothing else. Loop calls it when a fit starts and after
// every commit, and Smooth after mixing; whoever else changes D or K of a
// Float32 model in place between passes must call it before the next
// pass, or the pass reads a stale copy (a resume's copy is followed by
// Loop's call at the start).
func (md *Model) RoundFactors() {
	if md.Precision != Float32 {
		md.kt32 = nil
		return
	}
	for _, d := range md.D {
		RoundRows32(d)
	}
	if len(md.kt32) != len(md.KT) {
		md.kt32 = make([][]float32, len(md.KT))
	}
	for b, kt := range md.KT {
		if len(md.kt32[b]) != len(kt) {
			md.kt32[b] = bigFloat32s(len(kt))
		}
		k32 := md.kt32[b][:len(kt)]
		for i, v := range kt {
			r := Round32(v)
			kt[i] = r
			k32[i] = float32(r)
		}
	}
}

// ensure32 gives a Float32 model that was never rounded (no float32 copy
// of K^T yet) its rounding and copy. A pass calls it before it starts
// goroutines.
func (md *Model) ensure32() {
	if md.Precision == Float32 && len(md.kt32) != len(md.KT) {
		md.RoundFactors()
	}
}

// kt32For returns the float32 copy of K block kb that a pass of md reads,
// or nil when the pass reads md.KT (a Float64 model).
func (md *Model) kt32For(kb int) []float32 {
	if md.Precision != Float32 {
		return nil
	}
	md.ensure32()
	return md.kt32[kb]
}

// round32Row rounds the row x with Round32 in place and, with x32
// non-nil (of x's length), stores the float32 values there too: in AVX2
// where available and len(x) is a multiple of 4 (a commit at n = 10^6
// rounds 64M entries; the scalar loop cost more than the rest of the
// commit), else in Go; bitwise the same (TestRound32AVX2).
func round32Row(x []float64, x32 []float32, pureGo bool) {
	if len(x) > 0 && len(x)%4 == 0 && !pureGo && useAVX2() {
		var p *float32
		if x32 != nil {
			p = &x32[:len(x)][0]
		}
		round32AVX2(&x[0], p, len(x))
		return
	}
	if x32 == nil {
		RoundRows32(x)
		return
	}
	x32 = x32[:len(x)]
	for l, v := range x {
		v = Round32(v)
		x[l] = v
		x32[l] = float32(v)
	}
}

// all32 reports whether every value of xs is a float32 value.
func all32(xs []float64) bool {
	for _, v := range xs {
		if float64(float32(v)) != v {
			return false
		}
	}
	return true
}

// widen sets dst_l = float64(src_l) (exact).
func widen(dst []float64, src []float32) {
	dst = dst[:len(src)]
	for l, v := range src {
		dst[l] = float64(v)
	}
}

// SetPrecision sets the model's precision and rounds its factors to it
// (RoundFactors): a Float32 model's entries become float32 values.
func (md *Model) SetPrecision(p Precision) {
	md.Precision = p
	md.RoundFactors()
}
