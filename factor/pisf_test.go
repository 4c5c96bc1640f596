package factor

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// sharpModel is a random shared-K model whose D rows are far from uniform
// (entries u⁴ before normalization), so that actions' values differ by
// much more than the solvers' rounding and the greedy policy is unique.
func sharpModel(n, m, u int, seed uint64) *Model {
	md := NewModel(n, m, u, TieSharedK)
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, d := range md.D {
		for i := range d {
			x := rng.Float64()
			d[i] = 1e-3 + x*x*x*x
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

// TestPISFEqualsPI: when P^a = D^a K and r^a = P^a r̂ = D^a (K r̂) exactly,
// PISF on the factors and PI on the dense P^a reach the same policy and the
// same values (Barreto et al. 2014: PISF is exact for an exact
// factorization), both discounted and episodic (γ = 1 with terminals).
func TestPISFEqualsPI(t *testing.T) {
	const n, m, u = 40, 6, 3
	for _, tc := range []struct {
		name  string
		gamma float64
		term  int // the last term states are terminal
	}{{"discounted", 0.9, 0}, {"episodic", 1, 5}, {"discounted-terminal", 0.95, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(5) {
				md := sharpModel(n, m, u, seed)
				rng := rand.New(rand.NewPCG(seed, 2))
				rhat := make([]float64, n)
				for j := range rhat {
					rhat[j] = rng.NormFloat64()
				}
				var opts PlanOptions
				if tc.term > 0 {
					opts.Terminal = make([]bool, n)
					for j := n - tc.term; j < n; j++ {
						opts.Terminal[j] = true
					}
				}
				pi, err := PolicyIteration(md, ExpectedRewards(md, rhat), tc.gamma, opts)
				if err != nil {
					t.Fatal(err)
				}
				rbar, err := ReducedRewards(md, rhat)
				if err != nil {
					t.Fatal(err)
				}
				sf, err := PISF(md, rbar, tc.gamma, opts)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(pi.Policy, sf.Policy) {
					t.Fatalf("seed %d: PI policy %v\nPISF policy %v", seed, pi.Policy, sf.Policy)
				}
				// Both solve well-conditioned systems (γ ≤ 0.95 or ≥ 5/40
				// of the mass to terminals each step): 1e-9 is rounding.
				for i := range n {
					if d := math.Abs(pi.Values[i] - sf.Values[i]); d > 1e-9*(1+math.Abs(pi.Values[i])) {
						t.Fatalf("seed %d state %d: PI value %v, PISF %v", seed, i, pi.Values[i], sf.Values[i])
					}
				}
				if pi.Iterations < 2 {
					t.Logf("seed %d: the initial policy was already optimal", seed)
				}
			}
		})
	}
}

// TestPIOptimal: the PI policy satisfies Bellman's optimality equation
// (no action improves any state by more than rounding).
func TestPIOptimal(t *testing.T) {
	md := sharpModel(25, 4, 4, 7)
	rng := rand.New(rand.NewPCG(7, 3))
	rhat := make([]float64, 25)
	for j := range rhat {
		rhat[j] = rng.Float64()
	}
	r := ExpectedRewards(md, rhat)
	res, err := PolicyIteration(md, r, 0.8, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	row := make([]float64, 25)
	for i := range 25 {
		for a := range 4 {
			md.Row(a, i, row)
			if q := r[a][i] + 0.8*dot(row, res.Values); q > res.Values[i]+1e-9 {
				t.Fatalf("state %d action %d: q %v > v %v", i, a, q, res.Values[i])
			}
		}
	}
}

func TestPlanErrors(t *testing.T) {
	md := sharpModel(10, 3, 2, 1)
	rbar := make([]float64, 3)
	if _, err := PISF(md, rbar, 1.5, PlanOptions{}); err == nil {
		t.Error("gamma 1.5 accepted")
	}
	if _, err := PISF(md, rbar[:2], 0.9, PlanOptions{}); err == nil {
		t.Error("short rbar accepted")
	}
	if _, err := PISF(NewRandom(10, 3, 2, TieNone, 1), rbar, 0.9, PlanOptions{}); err == nil {
		t.Error("unshared K accepted")
	}
	if _, err := PolicyIteration(md, make([][]float64, 2), 0.9, PlanOptions{}); err == nil {
		t.Error("empty rewards accepted")
	}
	// γ = 1 without terminal states: v = r + P v has no solution.
	r := [][]float64{make([]float64, 10), make([]float64, 10)}
	if _, err := PolicyIteration(md, r, 1, PlanOptions{}); err == nil {
		t.Error("γ = 1 with no terminal state accepted")
	}
	if _, err := PolicyIteration(md, r, 0.9, PlanOptions{Init: make([]int, 3)}); err == nil {
		t.Error("short initial policy accepted")
	}
}
