package experiment

import (
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/floats/scalar"
)

// TestOnlineTruth: the sampling model is P itself (D the identity, K = P),
// the rows of P are distributions, and ρ is stationary: ρP = ρ.
func TestOnlineTruth(t *testing.T) {
	const n = 20
	chain, truth, rho, err := OnlineTruth(n, 0.5, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := chain.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := truth.Validate(); err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for j := range n {
		v := 0.0
		for i := range n {
			if p, q := chain.Prob(0, i, j), truth.Prob(0, i, j); p != q {
				t.Fatalf("P[%d,%d]: sampling model %v, truth %v", i, j, p, q)
			}
			v += rho[i] * truth.Prob(0, i, j)
		}
		// 1e-12: a 20-state solve loses a few digits at most.
		if !scalar.EqualWithinAbs(v, rho[j], 1e-12) {
			t.Errorf("(ρP)_%d = %v, ρ_%d = %v", j, v, j, rho[j])
		}
		sum += rho[j]
	}
	if !scalar.EqualWithinAbs(sum, 1, 1e-12) {
		t.Errorf("Σρ = %v", sum)
	}
}
