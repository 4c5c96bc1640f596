package factor

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
)

// TestEPCAScalarNewton: n = 2, l = 1, U = [1; 1], y = (0.2, 0.6), v = 0:
// the Newton steps of eq. 26 give the values of the related-methods spec
// §3.6 test 2, with ε = 0 and ε = 1e-5.
func TestEPCAScalarNewton(t *testing.T) {
	u, y := []float64{1, 1}, []float64{0.2, 0.6}
	for _, c := range []struct {
		eps  float64
		want []float64
		lim  float64
	}{
		{0, []float64{-0.6, -0.8711524798437965, -0.9152871574677105, -0.9162902284617787, -0.9162907318740284}, -0.916290731874155},
		{1e-5, []float64{-0.599997000015, -0.8711437297741149, -0.9152758353399115}, -0.9162792784487653},
	} {
		v := []float64{0}
		w := newNewtonWork(1)
		var got []float64
		for range len(c.want) {
			w.step(v, u, y, 2, 1, c.eps)
			got = append(got, v[0])
		}
		near(t, "Newton iterates", got, c.want, 1e-12)
		for range 20 {
			w.step(v, u, y, 2, 1, c.eps)
		}
		near(t, "Newton limit", v, []float64{c.lim}, 1e-12)
	}
}

// TestEPCAConstantBasis: with the all-ones basis and ε = 0, once the
// V-steps converge every row's reconstruction sums to its count x_i
// (spec §3.6 test 3), so the softmax rows are the model's P̃.
func TestEPCAConstantBasis(t *testing.T) {
	_, blocks := klmSampled(t, 20, 3, 1, 2000, 4)
	e, _, err := FitEPCA(context.Background(), 20, 1, blocks, EPCAOptions{Bases: 3, Epsilon: 1e-5, Converger: Converger{MaxIter: 5}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	cnt, _ := NewCNT(20, 1, blocks, 0)
	prob := newEPCAProblem(cnt, 0, 3, 0, rand.New(rand.NewPCG(1, 2)))
	copy(prob.u, e.basis[0])
	copy(prob.v, e.coord[0])
	for range 60 {
		prob.stepV(2)
	}
	for r, i := range prob.rows {
		v := prob.v[r*3 : (r+1)*3]
		s := 0.0
		for j := range 20 {
			s += math.Exp(dot(prob.u[j*3:(j+1)*3], v))
		}
		if x := cnt.RowTotal(0, int(i)); math.Abs(s-x) > 1e-10*x {
			t.Errorf("row %d: Σ_j exp(Uv)_j = %.15g, want x = %v", i, s, x)
		}
	}
	checkEstimateStochastic(t, e)
}

func checkEstimateStochastic(t *testing.T, e Estimate) {
	t.Helper()
	row := make([]float64, e.States())
	for a := range e.Actions() {
		for i := range e.States() {
			e.Row(a, i, row)
			s := 0.0
			for _, v := range row {
				if !(v >= 0) {
					t.Fatalf("row %d: entry %v", i, v)
				}
				s += v
			}
			if math.Abs(s-1) > 1e-12 {
				t.Fatalf("row %d sums to %v", i, s)
			}
		}
	}
}

// TestEPCAMonotone: with backtracking the regularized objective never
// increases over half-steps (spec §3.6 test 6), from a start far from the
// optimum too, and the fit is the same for 1 and 3 workers.
func TestEPCAMonotone(t *testing.T) {
	_, blocks := klmSampled(t, 25, 3, 2, 3000, 6)
	cnt, _ := NewCNT(25, 2, blocks, 0)
	for _, scale := range []float64{1, 30} {
		prob := newEPCAProblem(cnt, 1, 4, 1e-5, rand.New(rand.NewPCG(3, 4)))
		for k := range prob.u {
			if k%4 != 3 {
				prob.u[k] *= scale
			}
		}
		prev := prob.objective()
		for it := range 30 {
			prob.stepV(2)
			o := prob.objective()
			if o > prev+1e-12*math.Abs(prev) {
				t.Fatalf("scale %v sweep %d: V-step raised the objective %.15g -> %.15g", scale, it, prev, o)
			}
			prob.stepU(3)
			prev = o
			if o = prob.objective(); o > prev+1e-12*math.Abs(prev) {
				t.Fatalf("scale %v sweep %d: U-step raised the objective %.15g -> %.15g", scale, it, prev, o)
			}
			prev = o
		}
	}
	var fits []*EPCA
	for _, w := range []int{1, 3} {
		e, _, err := FitEPCA(context.Background(), 25, 2, blocks, EPCAOptions{Bases: 4, Epsilon: 1e-5, Converger: Converger{MaxIter: 10}, Seed: 2, Workers: w})
		if err != nil {
			t.Fatal(err)
		}
		fits = append(fits, e)
	}
	for a := range 2 {
		for k, v := range fits[0].coord[a] {
			if v != fits[1].coord[a][k] {
				t.Fatalf("1 and 3 workers differ")
			}
		}
	}
}

// TestEPCAFullRank: with l = n bases on rows with every entry positive,
// P̃ reproduces P̂ (KL < 1e-3; spec §3.6 test 8); the held-out
// log-likelihood is finite (E-PCA gives every transition a positive
// probability).
func TestEPCAFullRank(t *testing.T) {
	truth, blocks := klmExact(t, 6, 2, 1, 5)
	e, res, err := FitEPCA(context.Background(), 6, 1, blocks, EPCAOptions{Bases: 6, Epsilon: 1e-5, Converger: Converger{Tol: 1e-12, MaxIter: 500}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	rho := make([]float64, 6)
	for i := range rho {
		rho[i] = 1.0 / 6
	}
	if kl := KLRho(truth, e, rho); !(kl < 1e-3) {
		t.Errorf("KL_ρ(P ‖ E-PCA) = %v after %d sweeps, want < 1e-3", kl, res.Iterations)
	}
	if _, err := HeldOut(e, blocks); err != nil {
		t.Error(err)
	}
	if _, _, err := FitEPCA(context.Background(), 6, 1, blocks, EPCAOptions{Bases: 7, Converger: Converger{MaxIter: 1}}); err == nil {
		t.Error("l > n accepted")
	}
	if _, _, err := FitEPCA(context.Background(), 6, 1, blocks, EPCAOptions{Bases: 2, Epsilon: -1, Converger: Converger{MaxIter: 1}}); err == nil {
		t.Error("ε < 0 accepted")
	}
}
