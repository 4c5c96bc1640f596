package factor

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// Tie says which factor, if any, is shared by all actions.
type Tie int

const (
	// TieNone fits an independent D^a and K^a for every action.
	TieNone Tie = iota
	// TieSharedK fits D^a per action and one K for all actions (as PISF uses).
	TieSharedK
	// TieSharedD fits one D for all actions and K^a per action.
	TieSharedD
)

// String returns the name used on the command line and in model files.
func (t Tie) String() string {
	switch t {
	case TieNone:
		return "none"
	case TieSharedK:
		return "shared-k"
	case TieSharedD:
		return "shared-d"
	}
	return fmt.Sprintf("Tie(%d)", int(t))
}

// ParseTie is the inverse of Tie.String.
func ParseTie(s string) (Tie, error) {
	switch s {
	case "none", "":
		return TieNone, nil
	case "shared-k":
		return TieSharedK, nil
	case "shared-d":
		return TieSharedD, nil
	}
	return 0, fmt.Errorf("factor: unknown tie mode %q (want none, shared-k or shared-d)", s)
}

// Model is a stochastic factorization of the u transition matrices of an
// MDP with n states: P^a ≈ D^a K^a with D^a n×m and K^a m×n, both
// row-stochastic.
//
// D holds the D blocks and KT the K blocks, each as a row-major n×m slice;
// K is stored transposed (KT[j*M+l] = K[l][j]) so that the kernel reads one
// contiguous row of length m per nonzero. With TieSharedK there is one K
// block, with TieSharedD one D block; otherwise one of each per action. Use
// DBlock and KBlock to find the block of an action.
type Model struct {
	N, M, U int
	Tie     Tie
	D       [][]float64
	KT      [][]float64

	// Iteration counts committed EM iterations since the random init.
	Iteration int
	// LogLik is the log-likelihood of the training data under the model
	// before the last commit (the value the last pass computed), NaN when
	// it has not been computed.
	LogLik float64
	// WKL is the weighted KL divergence that goes with LogLik.
	WKL float64
	// Seed is the seed of the random init this model descends from.
	Seed uint64
	// Precision is the precision of the factors (see Precision): Float32
	// keeps D and K rounded to float32 values and a float32 copy of K^T
	// for the pass.
	Precision Precision
	// Smoothing is the predictive rule beyond the factors (NextRow,
	// Prob); nil: the model predicts D K itself.
	Smoothing *Smoothing
	// kt32 is the float32 copy of KT of a Float32 model (RoundFactors).
	kt32 [][]float32
}

// NumD and NumK return how many D and K blocks a model of this shape has.
func NumD(u int, tie Tie) int {
	if tie == TieSharedD {
		return 1
	}
	return u
}

// NumK returns the number of K blocks; see NumD.
func NumK(u int, tie Tie) int {
	if tie == TieSharedK {
		return 1
	}
	return u
}

// DBlock returns the index into Model.D of the D of action a.
func (md *Model) DBlock(a int) int {
	if md.Tie == TieSharedD {
		return 0
	}
	return a
}

// KBlock returns the index into Model.KT of the K of action a.
func (md *Model) KBlock(a int) int {
	if md.Tie == TieSharedK {
		return 0
	}
	return a
}

// NewModel returns a model of the given shape with all entries zero.
func NewModel(n, m, u int, tie Tie) *Model {
	if n < 1 || m < 1 || u < 1 {
		panic(fmt.Sprintf("factor: bad model shape n=%d m=%d u=%d", n, m, u))
	}
	md := &Model{N: n, M: m, U: u, Tie: tie, LogLik: math.NaN(), WKL: math.NaN()}
	md.D = make([][]float64, NumD(u, tie))
	for b := range md.D {
		md.D[b] = bigFloats(n * m)
	}
	md.KT = make([][]float64, NumK(u, tie))
	for b := range md.KT {
		md.KT[b] = bigFloats(n * m)
	}
	return md
}

// NewRandom returns a model whose rows of D and K are drawn uniformly and
// normalized (the initialisation of emsf-ijcai2015 Alg. 1, lines 5-6),
// drawn from a PCG generator seeded by seed, which is recorded in the model.
func NewRandom(n, m, u int, tie Tie, seed uint64) *Model {
	md := NewModel(n, m, u, tie)
	md.Seed = seed
	rng := rand.New(rand.NewPCG(seed, 0x656d7366)) // "emsf"
	for _, d := range md.D {
		for i := range d {
			d[i] = 0.01 + rng.Float64()
		}
		normalizeRows(d, n, m)
	}
	for _, kt := range md.KT {
		for i := range kt {
			kt[i] = 0.01 + rng.Float64()
		}
		normalizeCols(kt, n, m)
	}
	return md
}

// normalizeRows scales each length-m row of the row-major n×m slice x to sum 1.
func normalizeRows(x []float64, n, m int) {
	for i := 0; i < n; i++ {
		r := x[i*m : (i+1)*m]
		s := 0.0
		for _, v := range r {
			s += v
		}
		if s > 0 {
			for l := range r {
				r[l] /= s
			}
		}
	}
}

// normalizeCols scales each column of the row-major n×m slice x (a row of
// K, stored transposed) to sum 1.
func normalizeCols(x []float64, n, m int) {
	s := make([]float64, m)
	for j := 0; j < n; j++ {
		for l, v := range x[j*m : (j+1)*m] {
			s[l] += v
		}
	}
	for j := 0; j < n; j++ {
		r := x[j*m : (j+1)*m]
		for l := range r {
			if s[l] > 0 {
				r[l] /= s[l]
			}
		}
	}
}

// Clone returns a deep copy.
func (md *Model) Clone() *Model {
	c := md.CloneFactors()
	c.Smoothing = md.Smoothing.Clone()
	return c
}

// CloneFactors returns a deep copy without the smoothing rule: the start
// of a fit that chooses its rule anew (a warm start), without copying the
// counts the old rule holds.
func (md *Model) CloneFactors() *Model {
	c := *md
	c.D = make([][]float64, len(md.D))
	for b := range md.D {
		c.D[b] = cloneFloats(md.D[b])
	}
	c.KT = make([][]float64, len(md.KT))
	for b := range md.KT {
		c.KT[b] = cloneFloats(md.KT[b])
	}
	c.Smoothing = nil
	c.kt32 = nil
	if md.kt32 != nil {
		c.kt32 = make([][]float32, len(md.kt32))
		for b, k := range md.kt32 {
			c.kt32[b] = bigFloat32s(len(k))
			copy(c.kt32[b], k)
		}
	}
	return &c
}

// Equal reports whether two models have the same shape and bitwise the
// same factors (metadata is not compared).
func (md *Model) Equal(o *Model) bool {
	if md.N != o.N || md.M != o.M || md.U != o.U || md.Tie != o.Tie ||
		len(md.D) != len(o.D) || len(md.KT) != len(o.KT) {
		return false
	}
	eq := func(a, b []float64) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
				return false
			}
		}
		return true
	}
	for b := range md.D {
		if !eq(md.D[b], o.D[b]) {
			return false
		}
	}
	for b := range md.KT {
		if !eq(md.KT[b], o.KT[b]) {
			return false
		}
	}
	return true
}

// ErrNotStochastic is wrapped by Validate when a row does not sum to one.
var ErrNotStochastic = errors.New("not row-stochastic")

// StochasticTol is how far from 1 a row sum of a valid model may be.
const StochasticTol = 1e-9

// Validate checks shapes, that every entry is finite and non-negative, and
// that every row of D and of K sums to 1 within StochasticTol; within
// StochasticTol32 for a Float32 model, and for a row of D or a K block
// whose entries are all float32 values (a float32 fit's model read from a
// file, which does not know its precision until its parameters are read).
func (md *Model) Validate() error {
	if md.N < 1 || md.M < 1 || md.U < 1 {
		return fmt.Errorf("factor: bad model shape n=%d m=%d u=%d", md.N, md.M, md.U)
	}
	if len(md.D) != NumD(md.U, md.Tie) || len(md.KT) != NumK(md.U, md.Tie) {
		return fmt.Errorf("factor: model has %d D and %d K blocks, want %d and %d for u=%d tie=%s",
			len(md.D), len(md.KT), NumD(md.U, md.Tie), NumK(md.U, md.Tie), md.U, md.Tie)
	}
	n, m := md.N, md.M
	for b, d := range md.D {
		if len(d) != n*m {
			return fmt.Errorf("factor: D block %d has %d entries, want %d", b, len(d), n*m)
		}
		for i := 0; i < n; i++ {
			s := 0.0
			for l, v := range d[i*m : (i+1)*m] {
				if !(v >= 0) || math.IsInf(v, 0) {
					return fmt.Errorf("factor: D block %d [%d,%d] = %v: entries must be finite and >= 0", b, i, l, v)
				}
				s += v
			}
			if e := math.Abs(s - 1); e > StochasticTol && !md.within32(e, d[i*m:(i+1)*m]) {
				return fmt.Errorf("factor: D block %d row %d sums to %v: %w", b, i, s, ErrNotStochastic)
			}
		}
	}
	sums := make([]float64, m)
	for b, kt := range md.KT {
		if len(kt) != n*m {
			return fmt.Errorf("factor: K block %d has %d entries, want %d", b, len(kt), n*m)
		}
		clear(sums)
		for j := 0; j < n; j++ {
			for l, v := range kt[j*m : (j+1)*m] {
				if !(v >= 0) || math.IsInf(v, 0) {
					return fmt.Errorf("factor: K block %d [%d,%d] = %v: entries must be finite and >= 0", b, l, j, v)
				}
				sums[l] += v
			}
		}
		for l, s := range sums {
			if e := math.Abs(s - 1); e > StochasticTol && !md.within32(e, kt) {
				return fmt.Errorf("factor: K block %d row %d sums to %v: %w", b, l, s, ErrNotStochastic)
			}
		}
	}
	return nil
}

// within32 reports whether a row sum e away from 1 is valid because the
// row (or its K block) is float32: the model is Float32 or xs holds
// float32 values only, and e ≤ StochasticTol32.
func (md *Model) within32(e float64, xs []float64) bool {
	return e <= StochasticTol32 && (md.Precision == Float32 || all32(xs))
}

// CheckCompatible returns an error if a warm-start model o cannot continue
// a fit of shape (n, m, u, tie).
func (md *Model) CheckCompatible(n, m, u int, tie Tie) error {
	switch {
	case md.N != n:
		return fmt.Errorf("factor: model has n=%d states, data has %d", md.N, n)
	case md.M != m:
		return fmt.Errorf("factor: model has order m=%d, fit asks for %d", md.M, m)
	case md.U != u:
		return fmt.Errorf("factor: model has u=%d actions, data has %d", md.U, u)
	case md.Tie != tie:
		return fmt.Errorf("factor: model has tie mode %s, fit asks for %s", md.Tie, tie)
	}
	return nil
}

// DRow returns row i of D^a (a view, length m).
func (md *Model) DRow(a, i int) []float64 {
	return md.D[md.DBlock(a)][i*md.M : (i+1)*md.M]
}

// KCol returns column j of K^a, i.e. row j of K^a transposed (a view, length m).
func (md *Model) KCol(a, j int) []float64 {
	return md.KT[md.KBlock(a)][j*md.M : (j+1)*md.M]
}

// dot is Σ x_l·y_l summed left to right without fused multiply-add.
func dot(x, y []float64) float64 {
	y = y[:len(x)]
	s := 0.0
	for l, v := range x {
		s += float64(v * y[l])
	}
	return s
}
