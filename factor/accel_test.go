package factor

import (
	"context"
	"math"
	"testing"
)

// squaremData is a problem where plain EM crawls: random counts, order 6.
func squaremData() (*Model, []*Block) {
	blocks := RandomCounts(120, 2, 6, 5, 7)
	return NewRandom(120, 6, 2, TieNone, 3), blocks
}

// TestSquaremMonotone runs SQUAREM and checks, pass by pass, that the
// log-likelihoods it reports for kept points never decrease, that every
// accepted cycle ends at least as high as the EM step F(x0) it
// replaced (recomputed independently), and that rows stay stochastic.
func TestSquaremMonotone(t *testing.T) {
	md, blocks := squaremData()
	var seen []float64
	res, err := Fit(context.Background(), md, blocks, FitOptions{Accel: AccelSquarem, Workers: 2,
		Converger: Converger{MaxIter: 150},
		Progress: func(st IterStats) {
			if !math.IsNaN(st.LogLik) {
				seen = append(seen, st.LogLik)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	for k := 1; k < len(seen); k++ {
		if seen[k] < seen[k-1] {
			t.Fatalf("kept log-likelihood decreased at %d: %v after %v", k, seen[k], seen[k-1])
		}
	}
	if err := md.Validate(); err != nil {
		t.Fatal(err)
	}
	// Plain EM after as many passes must not be ahead of SQUAREM.
	pl, _ := squaremData()
	if _, err := Fit(context.Background(), pl, blocks, FitOptions{Converger: Converger{MaxIter: res.Iterations}}); err != nil {
		t.Fatal(err)
	}
	lsq, _, _ := LogLikelihood(md, blocks)
	lem, _, _ := LogLikelihood(pl, blocks)
	t.Logf("after %d passes: SQUAREM %.6f (%d rejected), EM %.6f", res.Iterations, lsq, res.Rejected, lem)
	if lsq < lem {
		t.Fatalf("SQUAREM %v below plain EM %v after the same %d passes", lsq, lem, res.Iterations)
	}
}

// TestSquaremSafeguard checks the safeguard against the definition: a
// stepper that records every point a pass sees, then for each accepted
// cycle start x_new (the pass after a proposal, kept) that
// L(x_new) ≥ L(F(x0)) of the cycle before it.
func TestSquaremSafeguard(t *testing.T) {
	md, blocks := squaremData()
	rec := &recordStepper{localStepper: localStepper{blocks: blocks, workers: 1}}
	res, err := Loop(context.Background(), md, blocks, rec, FitOptions{Accel: AccelSquarem,
		Converger: Converger{MaxIter: 90}}, LoopHooks{})
	if err != nil {
		t.Fatal(err)
	}
	// Passes come in cycles: x0, x1, x', then x_new (next x0) or, when
	// rejected, x2 again as a fresh x0.
	checked := 0
	for k := 0; k+3 < len(rec.ll); {
		l1 := rec.ll[k+1]
		lNew := rec.ll[k+3]
		if lNew >= l1 {
			checked++
		} else {
			// Rejected: the next point is x2 = F(x1), at least L(x1).
			if k+4 < len(rec.ll) && rec.ll[k+4] < l1 {
				t.Fatalf("after a rejected cycle the fit went on from a point below F(x0): %v < %v", rec.ll[k+4], l1)
			}
			k++
		}
		k += 3
	}
	if checked == 0 {
		t.Fatal("no cycle was accepted")
	}
	t.Logf("%d cycles accepted, %d rejected", checked, res.Rejected)
}

type recordStepper struct {
	localStepper
	ll []float64
}

func (r *recordStepper) Step(ctx context.Context, iter int, md *Model, acc *Accumulator, withLL bool) error {
	if err := r.localStepper.Step(ctx, iter, md, acc, withLL); err != nil {
		return err
	}
	r.ll = append(r.ll, acc.LogLik)
	return nil
}

// TestSquaremWorkersBitwise: the same model for 1, 2 and 3 goroutines,
// float64 and float32.
func TestSquaremWorkersBitwise(t *testing.T) {
	for _, prec := range []Precision{Float64, Float32} {
		var ref *Model
		for _, w := range []int{1, 2, 3} {
			// n above chunkRows: the sums of the extrapolation run over
			// several pieces.
			blocks := RandomCounts(2*chunkRows+100, 1, 3, 4, 5)
			md := NewRandom(2*chunkRows+100, 4, 1, TieNone, 9)
			md.SetPrecision(prec)
			if _, err := Fit(context.Background(), md, blocks, FitOptions{Accel: AccelSquarem, Workers: w,
				Converger: Converger{MaxIter: 12}}); err != nil {
				t.Fatal(err)
			}
			if err := md.Validate(); err != nil {
				t.Fatal(err)
			}
			if ref == nil {
				ref = md
			} else if !ref.Equal(md) {
				t.Fatalf("precision %s: workers %d differs from workers 1", prec, w)
			}
		}
	}
}

// TestExtrapolateIdentity: t = 1 gives x2 (up to the softmax's rounding)
// and zeros of x2 stay zero.
func TestExtrapolateIdentity(t *testing.T) {
	md, blocks := squaremData()
	md.D[0][0] = 0 // a masked entry
	normalizeRows(md.D[0], md.N, md.M)
	acc := NewAccumulator(md)
	x0 := md.Clone()
	if err := Pass(context.Background(), md, blocks, acc, 1, false); err != nil {
		t.Fatal(err)
	}
	acc.Commit(md, 1, 0)
	x1 := md.Clone()
	if err := Pass(context.Background(), md, blocks, acc, 1, false); err != nil {
		t.Fatal(err)
	}
	acc.Commit(md, 1, 0)
	x2 := md.Clone()
	dst := md.Clone()
	extrapolate(dst, x0, x1, x2, 1, 2, nil, nil)
	for b := range dst.D {
		for k, v := range dst.D[b] {
			if math.Abs(v-x2.D[b][k]) > 1e-12 || (x2.D[b][k] == 0) != (v == 0) {
				t.Fatalf("D[%d][%d] = %v, x2 has %v", b, k, v, x2.D[b][k])
			}
		}
	}
	for b := range dst.KT {
		for k, v := range dst.KT[b] {
			if math.Abs(v-x2.KT[b][k]) > 1e-12 {
				t.Fatalf("KT[%d][%d] = %v, x2 has %v", b, k, v, x2.KT[b][k])
			}
		}
	}
	extrapolate(dst, x0, x1, x2, 3, 1, nil, nil)
	if err := dst.Validate(); err != nil {
		t.Fatal(err)
	}
	// With the logarithms of x0 and x1 the prior's penalty took (of D,
	// of K, or both), the proposal is bitwise the same, and so is the
	// penalty.
	for _, p := range []*Prior{{D: 0.3, K: 30}, {D: 0.3}, {K: 30}} {
		q := priorQ(x0, blocks)
		lg0, lg1 := p.newExtrapLogs(x0), p.newExtrapLogs(x1)
		if a, b := p.penaltyLogs(x0, q, lg0, 3), p.Penalty(x0, q); a != b {
			t.Fatalf("prior %+v: penalty %v with logs, %v without", p, a, b)
		}
		p.penaltyLogs(x1, q, lg1, 1)
		cached := md.Clone()
		extrapolate(cached, x0, x1, x2, 3, 2, lg0, lg1)
		if !cached.Equal(dst) {
			t.Fatalf("prior %+v: the proposal from cached logarithms differs", p)
		}
	}
	if dst.D[0][0] != 0 {
		t.Fatalf("a zero of x2 became %v", dst.D[0][0])
	}
}

// TestAccelNoneBitwise: AccelNone is the loop of before (the oracle
// tests test it); an explicit AccelNone equals the zero options.
func TestAccelNoneBitwise(t *testing.T) {
	a, blocks := squaremData()
	b, _ := squaremData()
	if _, err := Fit(context.Background(), a, blocks, FitOptions{Converger: Converger{MaxIter: 30}}); err != nil {
		t.Fatal(err)
	}
	if _, err := Fit(context.Background(), b, blocks, FitOptions{Accel: AccelNone, Converger: Converger{MaxIter: 30}}); err != nil {
		t.Fatal(err)
	}
	if !a.Equal(b) {
		t.Fatal("AccelNone differs from the default loop")
	}
}
