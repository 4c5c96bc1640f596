package factor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"gonum.org/v1/gonum/mat"
)

// TestTrickHand: the SF trick on the hand-computed model (see
// handcomputed_test.go), K = ((1/2, 1/4, 1/4), (1/4, 1/4, 1/2)):
//
//	KD row 0 = 1/2·(1/2, 1/2) + 1/4·(1, 0) + 1/4·(1/4, 3/4) = (9/16, 7/16)
//	KD row 1 = 1/4·(1/2, 1/2) + 1/4·(1, 0) + 1/2·(1/4, 3/4) = (1/2, 1/2)
//
// Its stationary ν solves ν_0·7/16 = ν_1·1/2: ν = (8/15, 7/15), and
// μ = νK = 8/15·(1/2, 1/4, 1/4) + 7/15·(1/4, 1/4, 1/2) = (23, 15, 22)/60,
// which is stationary for P = DK (e.g. column 0: 23/60·3/8 + 1/4·1/2 +
// 22/60·5/16 = (69 + 60 + 55)/480 = 23/60).
func TestTrickHand(t *testing.T) {
	md := handModel()
	r := Reduced(md)
	if len(r) != 1 {
		t.Fatalf("%d reduced matrices", len(r))
	}
	hcClose(t, "KD", r[0].RawMatrix().Data, []float64{9. / 16, 7. / 16, 1. / 2, 1. / 2}, 0)
	mu, nu, err := Stationary(md, [][]float64{{1}, {1}, {1}})
	if err != nil {
		t.Fatal(err)
	}
	hcClose(t, "ν", nu, []float64{8. / 15, 7. / 15}, 1e-15)
	hcClose(t, "μ", mu, []float64{23. / 60, 15. / 60, 22. / 60}, 1e-15)
}

// ttPolicy returns a random stochastic policy (some rows deterministic,
// some with a zero entry) and a random deterministic one.
func ttPolicy(rng *rand.Rand, n, u int) (stoch, det [][]float64) {
	acts := make([]int, n)
	stoch = make([][]float64, n)
	for i := range stoch {
		acts[i] = rng.IntN(u)
		row := make([]float64, u)
		switch i % 3 {
		case 0:
			row[rng.IntN(u)] = 1
		default:
			s := 0.0
			for a := range row {
				if u > 1 && a == i%u {
					continue // a zero entry
				}
				row[a] = 0.1 + rng.Float64()
				s += row[a]
			}
			for a := range row {
				row[a] /= s
			}
		}
		stoch[i] = row
	}
	det, err := DeterministicPolicy(acts, u)
	if err != nil {
		panic(err)
	}
	return stoch, det
}

// TestStationaryRandom: for random models of every tie mode and random
// stochastic and deterministic policies, μ P_π = μ within 1e-10 (P_π
// formed explicitly by PolicyMatrix), μ is a distribution, ν is stationary
// for the reduced chain, and μ agrees with the direct n-state solve.
func TestStationaryRandom(t *testing.T) {
	shapes := []struct{ n, m, u int }{{5, 1, 1}, {9, 3, 2}, {14, 5, 3}, {30, 4, 1}, {25, 6, 4}}
	for k, s := range shapes {
		for _, tie := range []Tie{TieNone, TieSharedK, TieSharedD} {
			for seed := uint64(0); seed < 3; seed++ {
				name := fmt.Sprintf("n%d_m%d_u%d_%s_%d", s.n, s.m, s.u, tie, seed)
				md := NewRandom(s.n, s.m, s.u, tie, 1000*uint64(k)+seed)
				rng := rand.New(rand.NewPCG(uint64(k), seed))
				stoch, det := ttPolicy(rng, s.n, s.u)
				for pk, pol := range [][][]float64{stoch, det} {
					mu, nu, err := Stationary(md, pol)
					if err != nil {
						t.Fatalf("%s policy %d: %v", name, pk, err)
					}
					if want := NumK(s.u, tie) * s.m; len(nu) != want || len(mu) != s.n {
						t.Fatalf("%s: len(nu) = %d (want %d), len(mu) = %d", name, len(nu), want, len(mu))
					}
					ttCheckStationary(t, name+" μ", mu, mat.NewDense(s.n, s.n, ttPolicyMatrix(t, md, pol)))
					r, err := ReducedChain(md, pol)
					if err != nil {
						t.Fatal(err)
					}
					ttCheckStationary(t, name+" ν", nu, r)
					direct, err := StationaryOf(mat.NewDense(s.n, s.n, ttPolicyMatrix(t, md, pol)))
					if err != nil {
						t.Fatalf("%s: direct: %v", name, err)
					}
					for i := range mu {
						if math.Abs(mu[i]-direct[i]) > 1e-10 {
							t.Fatalf("%s: μ[%d] = %v by the trick, %v directly", name, i, mu[i], direct[i])
						}
					}
				}
			}
		}
	}
}

func ttPolicyMatrix(t *testing.T, e Estimate, pol [][]float64) []float64 {
	t.Helper()
	p, err := PolicyMatrix(e, pol)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ttCheckStationary fails unless pi is a distribution with πP = π within
// 1e-10 in every entry.
func ttCheckStationary(t *testing.T, name string, pi []float64, p mat.Matrix) {
	t.Helper()
	s := 0.0
	for i, v := range pi {
		if !(v >= 0) {
			t.Fatalf("%s[%d] = %v", name, i, v)
		}
		s += v
	}
	if math.Abs(s-1) > 1e-12 {
		t.Fatalf("%s sums to %v", name, s)
	}
	_, c := p.Dims()
	for j := 0; j < c; j++ {
		v := 0.0
		for i, w := range pi {
			v += w * p.At(i, j)
		}
		if math.Abs(v-pi[j]) > 1e-10 {
			t.Fatalf("%s: (πP)[%d] = %.17g, π[%d] = %.17g", name, j, v, j, pi[j])
		}
	}
}

// TestReducedStochastic: every K^a D^a is m×m and row-stochastic
// (emsf-ijcai2015 §2), for every tie mode.
func TestReducedStochastic(t *testing.T) {
	for _, tie := range []Tie{TieNone, TieSharedK, TieSharedD} {
		md := NewRandom(13, 5, 3, tie, 4)
		rs := Reduced(md)
		if len(rs) != 3 {
			t.Fatalf("%d reduced matrices for u = 3", len(rs))
		}
		for a, r := range rs {
			if rr, c := r.Dims(); rr != 5 || c != 5 {
				t.Fatalf("action %d: %d×%d", a, rr, c)
			}
			for l := 0; l < 5; l++ {
				if err := checkStochastic(mat.Row(nil, l, r)); err != nil || math.Abs(mat.Sum(r.RowView(l))-1) > 1e-12 {
					t.Errorf("%s action %d row %d: %v", tie, a, l, err)
				}
			}
		}
	}
}

// TestStationaryPeriodic: a periodic chain (states swap every step) has a
// unique stationary distribution, which the direct solve finds (a power
// iteration would not converge).
func TestStationaryPeriodic(t *testing.T) {
	md := NewModel(2, 2, 1, TieNone)
	copy(md.D[0], []float64{1, 0, 0, 1})  // D = I
	copy(md.KT[0], []float64{0, 1, 1, 0}) // K = swap
	mu, nu, err := Stationary(md, [][]float64{{1}, {1}})
	if err != nil {
		t.Fatal(err)
	}
	hcClose(t, "μ", mu, []float64{0.5, 0.5}, 1e-15)
	hcClose(t, "ν", nu, []float64{0.5, 0.5}, 1e-15)
}

// TestStationaryTransient: hidden states of an action the policy never
// takes are transient in the reduced chain (ν = 0 there).
func TestStationaryTransient(t *testing.T) {
	md := NewRandom(6, 2, 2, TieNone, 9)
	pol, err := DeterministicPolicy([]int{0, 0, 0, 0, 0, 0}, 2)
	if err != nil {
		t.Fatal(err)
	}
	mu, nu, err := Stationary(md, pol)
	if err != nil {
		t.Fatal(err)
	}
	if nu[2] != 0 || nu[3] != 0 {
		t.Errorf("ν of action 1's hidden states = %v, %v; want 0", nu[2], nu[3])
	}
	// The same as the single-action chain of action 0.
	one := NewModel(6, 2, 1, TieNone)
	copy(one.D[0], md.D[0])
	copy(one.KT[0], md.KT[0])
	mu1, _, err := Stationary(one, [][]float64{{1}, {1}, {1}, {1}, {1}, {1}})
	if err != nil {
		t.Fatal(err)
	}
	hcClose(t, "μ", mu, mu1, 1e-13)
}

// TestStationaryErrors: two recurrent classes (no unique stationary
// distribution) and bad policies are errors.
func TestStationaryErrors(t *testing.T) {
	// States {0, 1} and {2, 3} never communicate.
	md := NewModel(4, 2, 1, TieNone)
	copy(md.D[0], []float64{1, 0, 1, 0, 0, 1, 0, 1})
	copy(md.KT[0], []float64{0.5, 0, 0.5, 0, 0, 0.5, 0, 0.5})
	if err := md.Validate(); err != nil {
		t.Fatal(err)
	}
	one := [][]float64{{1}, {1}, {1}, {1}}
	if _, _, err := Stationary(md, one); err == nil || !strings.Contains(err.Error(), "not unique") {
		t.Errorf("two recurrent classes: %v", err)
	}
	md2 := NewRandom(3, 2, 2, TieNone, 1)
	for name, pol := range map[string][][]float64{
		"short":          {{1, 0}, {1, 0}},
		"narrow row":     {{1, 0}, {1}, {0, 1}},
		"not stochastic": {{1, 0}, {0.5, 0.4}, {0, 1}},
		"negative":       {{1, 0}, {1.5, -0.5}, {0, 1}},
		"NaN":            {{1, 0}, {math.NaN(), 1}, {0, 1}},
	} {
		if _, _, err := Stationary(md2, pol); err == nil || !strings.HasPrefix(err.Error(), "factor: policy") {
			t.Errorf("policy %s: %v", name, err)
		}
		if _, err := PolicyMatrix(md2, pol); err == nil {
			t.Errorf("PolicyMatrix accepted policy %s", name)
		}
	}
	if _, err := DeterministicPolicy([]int{0, 2}, 2); err == nil {
		t.Error("DeterministicPolicy accepted action 2 for u = 2")
	}
	if !mtPanics(func() { StationaryOf(mat.NewDense(2, 3, nil)) }) {
		t.Error("StationaryOf of a 2×3 matrix did not panic")
	}
}
