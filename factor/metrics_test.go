package factor

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"gonum.org/v1/gonum/mat"
)

// mtPanics reports whether f panics with a "factor:" message.
func mtPanics(f func()) (ok bool) {
	defer func() {
		r := recover()
		s, isString := r.(string)
		ok = isString && strings.HasPrefix(s, "factor: ")
	}()
	f()
	return false
}

func TestModelRowDense(t *testing.T) {
	md := NewRandom(9, 4, 3, TieSharedK, 11)
	row := make([]float64, 9)
	for a := 0; a < 3; a++ {
		p := md.Dense(a)
		for i := 0; i < 9; i++ {
			md.Row(a, i, row)
			s := 0.0
			for j, v := range row {
				if v != md.Prob(a, i, j) || p[i*9+j] != v {
					t.Fatalf("a=%d (%d,%d): Row %v, Prob %v, Dense %v", a, i, j, v, md.Prob(a, i, j), p[i*9+j])
				}
				s += v
			}
			if math.Abs(s-1) > 1e-12 {
				t.Fatalf("row (%d,%d) of DK sums to %v", a, i, s)
			}
		}
	}
	d := NewDense(md)
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if d.States() != 9 || d.Actions() != 3 || FrobeniusError(d, md) != 0 {
		t.Errorf("NewDense: n=%d u=%d, distance %v", d.States(), d.Actions(), FrobeniusError(d, md))
	}
	if !mtPanics(func() { md.Row(0, 0, make([]float64, 8)) }) {
		t.Error("Model.Row with a short dst did not panic")
	}
}

func TestDenseFromMatAndValidate(t *testing.T) {
	p0 := mat.NewDense(2, 2, []float64{0.5, 0.5, 1, 0})
	p1 := mat.NewDense(2, 2, []float64{0, 1, 0.25, 0.75})
	d, err := DenseFromMat(p0, p1)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if d.Prob(1, 1, 1) != 0.75 || d.Prob(0, 1, 0) != 1 {
		t.Errorf("DenseFromMat: %v", d.P)
	}
	if _, err := DenseFromMat(p0, mat.NewDense(2, 3, nil)); err == nil {
		t.Error("DenseFromMat accepted a 2×3 matrix")
	}
	if _, err := DenseFromMat(); err == nil {
		t.Error("DenseFromMat accepted no matrices")
	}
	bad := []*Dense{
		{N: 2, P: [][]float64{{0.5, 0.5, 0.5, 0.6}}},
		{N: 2, P: [][]float64{{1.5, -0.5, 0.5, 0.5}}},
		{N: 2, P: [][]float64{{1, 0, math.NaN(), 1}}},
		{N: 2, P: [][]float64{{1, 0, 1}}},
		{N: 2},
	}
	for k, b := range bad {
		if err := b.Validate(); err == nil {
			t.Errorf("bad dense %d accepted", k)
		}
	}
	if err := bad[0].Validate(); !errors.Is(err, ErrNotStochastic) {
		t.Errorf("row sum error %v does not wrap ErrNotStochastic", err)
	}
}

// TestLogLikelihoodBitwise: on the training blocks, LogLikelihood of a
// model equals the loglik of a Pass bitwise; on a Dense copy of the model
// it agrees to rounding.
func TestLogLikelihoodBitwise(t *testing.T) {
	for _, tie := range []Tie{TieNone, TieSharedK, TieSharedD} {
		md, blocks := ftData(t, tie)
		acc := NewAccumulator(md)
		if err := Pass(context.Background(), md, blocks, acc, 3, true); err != nil {
			t.Fatal(err)
		}
		ll, total, err := LogLikelihood(md, blocks)
		if err != nil {
			t.Fatal(err)
		}
		if math.Float64bits(ll) != math.Float64bits(acc.LogLik) || total != TotalCount(blocks) {
			t.Errorf("%s: LogLikelihood %.17g / %v, Pass %.17g / %v", tie, ll, total, acc.LogLik, TotalCount(blocks))
		}
		lld, _, err := LogLikelihood(NewDense(md), blocks)
		if err != nil {
			t.Fatal(err)
		}
		// P_ij by a sequential sum instead of four partial sums: each of the
		// ~400 logs moves by ≲ 1e-16 relative.
		if math.Abs(lld-ll) > 1e-12*math.Abs(ll) {
			t.Errorf("%s: Dense loglik %.17g, model %.17g", tie, lld, ll)
		}
	}
}

// TestWKLSplitRows: WKL is exact when a row is split across blocks
// (different column ranges), and agrees with DataTerm when it is not.
func TestWKLSplitRows(t *testing.T) {
	md := NewRandom(4, 2, 1, TieNone, 1)
	whole, err := NewBlock(0, []int32{0, 0, 0, 2}, []int32{0, 1, 3, 2}, []float64{1, 2, 3, 1})
	if err != nil {
		t.Fatal(err)
	}
	left, err := NewBlock(0, []int32{0, 0}, []int32{0, 1}, []float64{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	right, err := NewBlock(0, []int32{0, 2}, []int32{3, 2}, []float64{3, 1})
	if err != nil {
		t.Fatal(err)
	}
	w1, err := WKL(md, []*Block{whole})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := WKL(md, []*Block{left, right})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(w1-w2) > 1e-15 {
		t.Errorf("WKL whole %v, split %v", w1, w2)
	}
	ll, total, _ := LogLikelihood(md, []*Block{whole})
	if want := (DataTerm([]*Block{whole}) - ll) / total; w1 != want {
		t.Errorf("WKL %v, want (DataTerm − ll)/N = %v", w1, want)
	}
	// Row 0's data term: 1·log(1/6) + 2·log(2/6) + 3·log(3/6).
	want := math.Log(1./6) + 2*math.Log(2./6) + 3*math.Log(3./6)
	if got := dataTermSplit([]*Block{left, right}, 4, 1); math.Abs(got-want) > 1e-14 {
		t.Errorf("split data term %v, want %v", got, want)
	}
}

func TestMetricsErrors(t *testing.T) {
	md := NewRandom(4, 2, 1, TieNone, 1)
	if _, err := HeldOut(md, nil); err == nil || !strings.Contains(err.Error(), "no data") {
		t.Errorf("HeldOut without data: %v", err)
	}
	if _, err := WKL(md, nil); err == nil {
		t.Error("WKL without data: no error")
	}
	b, err := NewBlock(1, []int32{0}, []int32{0}, []float64{1})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := LogLikelihood(md, []*Block{b}); err == nil || !strings.Contains(err.Error(), "block 0") {
		t.Errorf("block of action 1 for u = 1: %v", err)
	}
	// A Dense truth that rules a transition out.
	d := &Dense{N: 2, P: [][]float64{{1, 0, 0.5, 0.5}}}
	b, err = NewBlock(0, []int32{0}, []int32{1}, []float64{2})
	if err != nil {
		t.Fatal(err)
	}
	var te *TransitionError
	if _, err := HeldOut(d, []*Block{b}); !errors.As(err, &te) || te.From != 0 || te.To != 1 || te.Count != 2 {
		t.Errorf("zero probability: %v", err)
	}
	if !mtPanics(func() { FrobeniusError(d, md) }) {
		t.Error("FrobeniusError of different shapes did not panic")
	}
	if !mtPanics(func() { KLRho(md, md, []float64{1, 0}) }) {
		t.Error("KLRho with a short rho did not panic")
	}
	if !mtPanics(func() { KLRho(md, md, []float64{1, 0, math.NaN(), 0}) }) {
		t.Error("KLRho with a NaN weight did not panic")
	}
	if !mtPanics(func() { KL([]float64{1}, []float64{0.5, 0.5}) }) {
		t.Error("KL of rows of different length did not panic")
	}
}

// TestFrobenius by hand: I vs the uniform 2×2 matrix differ by ±1/2 in
// every entry, so ‖·‖_F² = 4·(1/4) = 1; a second action with P̃ = P adds 0,
// a third identical to the first adds 1: sqrt(2) in all.
func TestFrobenius(t *testing.T) {
	truth := &Dense{N: 2, P: [][]float64{{1, 0, 0, 1}, {0.5, 0.5, 0.5, 0.5}, {1, 0, 0, 1}}}
	est := &Dense{N: 2, P: [][]float64{{0.5, 0.5, 0.5, 0.5}, {0.5, 0.5, 0.5, 0.5}, {0.5, 0.5, 0.5, 0.5}}}
	for a, want := range []float64{1, 0, 1} {
		if got := FrobeniusErrorAction(truth, est, a); got != want {
			t.Errorf("action %d: %v, want %v", a, got, want)
		}
	}
	if got := FrobeniusError(truth, est); got != math.Sqrt2 {
		t.Errorf("FrobeniusError = %v, want √2", got)
	}
}

// TestKL by hand.
func TestKL(t *testing.T) {
	// KL((1/2, 1/2) ‖ (1/4, 3/4)) = (1/2)·log 2 + (1/2)·log(2/3).
	if got, want := KL([]float64{0.5, 0.5}, []float64{0.25, 0.75}), 0.5*math.Log(2)+0.5*math.Log(2./3); math.Abs(got-want) > 1e-16 {
		t.Errorf("KL = %v, want %v", got, want)
	}
	// p_j = 0 terms vanish, whatever q_j.
	if got := KL([]float64{0, 1}, []float64{0, 1}); got != 0 {
		t.Errorf("KL with p = q = (0, 1): %v", got)
	}
	if got := KL([]float64{0.5, 0.5}, []float64{1, 0}); !math.IsInf(got, 1) {
		t.Errorf("KL with q_j = 0 < p_j: %v, want +Inf", got)
	}
}

// TestKLRho: the two weightings of incremental-emsf eq. 12, by hand.
func TestKLRho(t *testing.T) {
	// n = 2, u = 2. Per-row KLs: action 0 row 0: KL((1/2,1/2)‖(1/4,3/4)) = k;
	// every other row is estimated exactly, except action 1 row 1, which the
	// estimate cannot explain (+Inf).
	truth := &Dense{N: 2, P: [][]float64{{0.5, 0.5, 0, 1}, {1, 0, 0.5, 0.5}}}
	est := &Dense{N: 2, P: [][]float64{{0.25, 0.75, 0, 1}, {1, 0, 1, 0}}}
	k := 0.5*math.Log(2) + 0.5*math.Log(2./3)
	// Joint weights: w_00 = 0.6 (row 0, action 0), w_01 = 0.4, others 0:
	// the unexplained row has weight 0 and is skipped.
	if got := KLRho(truth, est, []float64{0.6, 0, 0.4, 0}); math.Abs(got-0.6*k) > 1e-16 {
		t.Errorf("joint weights: %v, want %v", got, 0.6*k)
	}
	// State weights ρ = (1, 0), actions uniform: w_00 = w_10 = 1/2.
	if got := KLRho(truth, est, []float64{1, 0}); math.Abs(got-0.5*k) > 1e-16 {
		t.Errorf("state weights: %v, want %v", got, 0.5*k)
	}
	// Weight on the unexplained row: +Inf.
	if got := KLRho(truth, est, []float64{0.5, 0.5}); !math.IsInf(got, 1) {
		t.Errorf("weight on a row with q_j = 0 < p_j: %v, want +Inf", got)
	}
	if got := KLRho(truth, truth, []float64{0.5, 0.5}); got != 0 {
		t.Errorf("KL_ρ(P ‖ P) = %v", got)
	}
}

// TestKLRhoStationaryFit: the experiment of incremental-emsf Fig. 3 in
// miniature: ρ the stationary distribution of the true P, data sampled
// from ρ; EMSF lowers KL_ρ(P ‖ DK) well below its random init.
func TestKLRhoStationaryFit(t *testing.T) {
	truth := NewRandom(12, 3, 1, TieNone, 21)
	rho, err := StationaryOf(mat.NewDense(12, 12, truth.Dense(0)))
	if err != nil {
		t.Fatal(err)
	}
	// Sample 3000 transitions with start states drawn from ρ.
	var ts []ivTriple
	rng := rand.New(rand.NewPCG(21, 5))
	for range 3000 {
		i := ivDraw(rng, rho)
		ts = append(ts, ivSample(rng, truth, 1, []int{0}, []int{i}, false)...)
	}
	blocks := ivBlocks(t, 1, ts, 4)
	md := NewRandom(12, 3, 1, TieNone, 22)
	k0 := KLRho(truth, md, rho)
	if _, err := Fit(context.Background(), md, blocks, FitOptions{Converger: Converger{MaxIter: 300, Tol: 1e-10}}); err != nil {
		t.Fatal(err)
	}
	k1 := KLRho(truth, md, rho)
	if !(k1 >= -1e-12 && k1 < k0/3) {
		t.Errorf("KL_ρ %v after fit, %v at init", k1, k0)
	}
	h, err := HeldOut(md, blocks)
	if err != nil || !(h < 0) {
		t.Errorf("training log-likelihood per transition %v, %v", h, err)
	}
}
