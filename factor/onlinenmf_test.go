package factor

import (
	"math"
	"testing"
)

// TestBinaryNMFOnlineEMExact: with γ_t = 1/t and a fixed B, the exact
// recursion gives S_1 = E[Σ X_i | y]/t and S_2 = E[Σ Z_i | y]/t, checked
// against brute force over all latent paths and against the reference
// values of the related-methods spec §2.8 test 1; the mass invariant
// Σ_k S_2(m,k) = mean of y(m) holds (test 2).
func TestBinaryNMFOnlineEMExact(t *testing.T) {
	const m, k, p, q = 2, 2, 0.8, 0.6
	b := []float64{1, 2, 3, 0.5}
	ys := [][]float64{{1, 2}, {0, 3}, {4, 1}, {2, 2}, {0, 0}}
	e, err := NewBinaryNMFOnlineEM(b, m, k, p, q, 1, NoMStep)
	if err != nil {
		t.Fatal(err)
	}
	for _, y := range ys {
		if err := e.Step(y); err != nil {
			t.Fatal(err)
		}
	}
	near(t, "S_1 (reference)", e.S1(), []float64{0.6538425836137252, 0.3424124448342877}, 1e-13)
	near(t, "S_2 (reference)", e.S2(), []float64{0.6678044871032958, 0.7321955128967057, 1.3229187919173677, 0.27708120808263437}, 1e-13)
	for mm, want := range []float64{1.4, 1.6} {
		if s := e.S2()[mm*k] + e.S2()[mm*k+1]; math.Abs(s-want) > 1e-13 {
			t.Errorf("Σ_k S_2(%d,k) = %v, want %v", mm, s, want)
		}
	}
	// Brute force: every path of the 4 latent states over 5 steps.
	nx, tt := 1<<k, len(ys)
	s1, s2 := make([]float64, k), make([]float64, m*k)
	zeta := make([]float64, m*k)
	total := 0.0
	path := make([]int, tt)
	for code := range int(math.Pow(float64(nx), float64(tt))) {
		c := code
		for i := range path {
			path[i], c = c%nx, c/nx
		}
		lw := e.logMu[path[0]]
		for i := 1; i < tt; i++ {
			lw += e.logF[path[i-1]*nx+path[i]]
		}
		ps1, ps2 := make([]float64, k), make([]float64, m*k)
		for i, x := range path {
			lw += e.logG(ys[i], x, zeta)
			for kk := range k {
				ps1[kk] += float64(x >> kk & 1)
			}
			for q := range zeta {
				ps2[q] += zeta[q]
			}
		}
		w := math.Exp(lw)
		total += w
		for kk := range k {
			s1[kk] += w * ps1[kk]
		}
		for q := range s2 {
			s2[q] += w * ps2[q]
		}
	}
	for kk := range s1 {
		s1[kk] /= total * float64(tt)
	}
	for q := range s2 {
		s2[q] /= total * float64(tt)
	}
	near(t, "S_1 (brute force)", e.S1(), s1, 1e-12)
	near(t, "S_2 (brute force)", e.S2(), s2, 1e-12)
}

// TestBinaryNMFOnlineEMBurnIn: B stays B_1 before the burn-in and stays
// non-negative after.
func TestBinaryNMFOnlineEMBurnIn(t *testing.T) {
	b := []float64{1, 2, 3, 0.5}
	e, err := NewBinaryNMFOnlineEM(b, 2, 2, 0.8, 0.6, 0.8, 4)
	if err != nil {
		t.Fatal(err)
	}
	ys := [][]float64{{1, 2}, {0, 3}, {4, 1}, {2, 2}, {0, 0}, {5, 1}}
	for i, y := range ys {
		if err := e.Step(y); err != nil {
			t.Fatal(err)
		}
		changed := false
		for q, v := range e.B() {
			if v < 0 {
				t.Fatalf("step %d: B = %v", i+1, e.B())
			}
			changed = changed || v != b[q]
		}
		if changed != (i+1 >= 4) {
			t.Errorf("step %d: B changed = %v, want %v", i+1, changed, i+1 >= 4)
		}
	}
	if _, err := NewBinaryNMFOnlineEM(b, 2, 2, 0.8, 0.6, 0.5, 1); err == nil {
		t.Error("a = 0.5 accepted")
	}
	if err := e.Step([]float64{1}); err == nil {
		t.Error("short observation accepted")
	}
}
