package factor

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// TestCNTHand: counts of one action over n = 3 states, by hand.
//
//	C = | 2 0 1 |   split over two blocks: (0,0) = 2 in the first, (0,0) = 1
//	    | 0 0 0 |   more and (0,2) = 1 in the second, so C_00 = 3 after the
//	    | 1 1 2 |   duplicate is summed.
//
// β = 0: row 0 = (3, 0, 1)/4, row 1 (never seen) = (1/3, 1/3, 1/3),
// row 2 = (1, 1, 2)/4.
// β = 1: row 0 = (3+1, 0+1, 1+1)/(4+3) = (4, 1, 2)/7, row 1 uniform,
// row 2 = (2, 2, 3)/7.
// Action 1 has no data at all: uniform.
func TestCNTHand(t *testing.T) {
	b0, err := NewBlock(0, []int32{0, 2, 2, 2}, []int32{0, 0, 1, 2}, []float64{2, 1, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	b1, err := NewBlock(0, []int32{0, 0}, []int32{0, 2}, []float64{1, 1})
	if err != nil {
		t.Fatal(err)
	}
	blocks := []*Block{b0, b1}
	for _, tc := range []struct {
		beta float64
		want []float64
	}{
		{0, []float64{3. / 4, 0, 1. / 4, 1. / 3, 1. / 3, 1. / 3, 1. / 4, 1. / 4, 2. / 4}},
		{1, []float64{4. / 7, 1. / 7, 2. / 7, 1. / 3, 1. / 3, 1. / 3, 2. / 7, 2. / 7, 3. / 7}},
	} {
		c, err := NewCNT(3, 2, blocks, tc.beta)
		if err != nil {
			t.Fatal(err)
		}
		if c.States() != 3 || c.Actions() != 2 || c.Smoothing() != tc.beta {
			t.Fatalf("shape %d %d %v", c.States(), c.Actions(), c.Smoothing())
		}
		if c.RowTotal(0, 0) != 4 || c.RowTotal(0, 1) != 0 || c.RowTotal(1, 2) != 0 {
			t.Errorf("row totals %v %v %v", c.RowTotal(0, 0), c.RowTotal(0, 1), c.RowTotal(1, 2))
		}
		row := make([]float64, 3)
		for i := 0; i < 3; i++ {
			c.Row(0, i, row)
			for j := 0; j < 3; j++ {
				want := tc.want[i*3+j]
				if p := c.Prob(0, i, j); p != want || row[j] != want {
					t.Errorf("β=%v (%d,%d): Prob %v, Row %v, want %v", tc.beta, i, j, p, row[j], want)
				}
				if p := c.Prob(1, i, j); p != 1./3 {
					t.Errorf("β=%v action 1 (%d,%d): %v, want 1/3", tc.beta, i, j, p)
				}
			}
		}
		if err := NewDense(c).Validate(); err != nil {
			t.Error(err)
		}
	}
}

// TestCNTIsMaximumLikelihood: on its own training data plain CNT attains
// the maximum of the log-likelihood, Σ c·log(c/x_i) = DataTerm, so its WKL
// (incremental-emsf eq. 11) is 0; any factorization has WKL ≥ 0.
func TestCNTIsMaximumLikelihood(t *testing.T) {
	for _, tie := range []Tie{TieNone, TieSharedK} {
		md, blocks := ftData(t, tie)
		c, err := NewCNT(md.N, md.U, blocks, 0)
		if err != nil {
			t.Fatal(err)
		}
		ll, _, err := LogLikelihood(c, blocks)
		if err != nil {
			t.Fatal(err)
		}
		dt := DataTerm(blocks)
		// Same terms, log(c/x) vs log(c/x) with c/x formed by one division:
		// equal up to the order of the sum.
		if math.Abs(ll-dt) > 1e-12*math.Abs(dt) {
			t.Errorf("%s: CNT loglik %.17g, data term %.17g", tie, ll, dt)
		}
		w, err := WKL(c, blocks)
		if err != nil || math.Abs(w) > 1e-12 {
			t.Errorf("%s: CNT WKL %v, %v; want 0", tie, w, err)
		}
		wm, err := WKL(md, blocks)
		if err != nil || !(wm > 0) {
			t.Errorf("%s: model WKL %v, %v; want > 0", tie, wm, err)
		}
	}
}

// TestCNTHeldOut: plain CNT gives probability 0 to transitions never seen
// from a seen row, so its held-out log-likelihood is a *TransitionError;
// smoothing makes it finite.
func TestCNTHeldOut(t *testing.T) {
	train, err := NewBlock(0, []int32{0, 1}, []int32{1, 1}, []float64{3, 1})
	if err != nil {
		t.Fatal(err)
	}
	test, err := NewBlock(0, []int32{0, 2}, []int32{2, 0}, []float64{1, 1})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCNT(3, 1, []*Block{train}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var te *TransitionError
	if _, err := HeldOut(c, []*Block{test}); !errors.As(err, &te) || te.From != 0 || te.To != 2 {
		t.Errorf("plain CNT held out: %v", err)
	}
	c, err = NewCNT(3, 1, []*Block{train}, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	// P(0→2) = 0.5/(3 + 1.5) = 1/9; state 2 unseen: P(2→0) = 1/3.
	h, err := HeldOut(c, []*Block{test})
	if want := (math.Log(1./9) + math.Log(1./3)) / 2; err != nil || math.Abs(h-want) > 1e-15 {
		t.Errorf("smoothed held out %v, %v; want %v", h, err, want)
	}
}

func TestCNTErrors(t *testing.T) {
	b, err := NewBlock(1, []int32{0}, []int32{4}, []float64{1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewCNT(4, 2, []*Block{b}, 0); err == nil {
		t.Error("state 4 for n = 4 accepted")
	}
	if _, err := NewCNT(5, 1, []*Block{b}, 0); err == nil {
		t.Error("action 1 for u = 1 accepted")
	}
	for _, beta := range []float64{-1, math.NaN(), math.Inf(1)} {
		if _, err := NewCNT(5, 2, []*Block{b}, beta); err == nil {
			t.Errorf("smoothing %v accepted", beta)
		}
	}
	bad := &Block{Action: 0, Rows: []int32{0}, Ptr: []int64{0, 1}, Cols: []int32{0}, Vals: []float64{-2}}
	if _, err := NewCNT(2, 1, []*Block{bad}, 0); err == nil {
		t.Error("negative count accepted")
	}
	c, err := NewCNT(5, 2, []*Block{b}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !mtPanics(func() { c.Prob(1, 0, 5) }) || !mtPanics(func() { c.Row(1, 0, make([]float64, 4)) }) {
		t.Error("out-of-range Prob or short Row did not panic")
	}
	if !mtPanics(func() { NewCNT(0, 1, nil, 0) }) {
		t.Error("n = 0 did not panic")
	}
}

// TestCNTConsistent: CNT is statistically consistent (emsf-ijcai2015 §5):
// with 100 times more samples its Frobenius error to the truth shrinks
// (by about 10 in expectation; the test asks for 3).
func TestCNTConsistent(t *testing.T) {
	truth := NewRandom(10, 2, 2, TieNone, 8)
	rng := rand.New(rand.NewPCG(8, 8))
	states := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	var errs []float64
	for _, count := range []int{400, 40000} {
		blocks := ivBlocks(t, 2, ivSample(rng, truth, count, []int{0, 1}, states, false), 10)
		c, err := NewCNT(10, 2, blocks, 0)
		if err != nil {
			t.Fatal(err)
		}
		errs = append(errs, FrobeniusError(truth, c))
	}
	if !(errs[1] < errs[0]/3) {
		t.Errorf("Frobenius error %v with 400 samples, %v with 40000", errs[0], errs[1])
	}
}
