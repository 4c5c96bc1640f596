package factor

import (
	"fmt"
	"math"
)

// BinaryNMFOnlineEM is the exact online EM of online-em-nmf_003 for its
// §4.1 model (multiple basis selection), the paper's own setting beside
// OnlineEM's transfer to EMSF: observations y_t ∈ N^M are Poisson with
// mean B x_t, B (M×K) ≥ 0, and the latent x_t ∈ {0,1}^K is a Markov
// chain whose K components switch independently, P(0→0) = p, P(1→1) = q
// (known); x_1 is drawn from the stationary law. Over the 2^K latent
// states the forward-smoothing recursion of the paper (eqs. 15, 16) is
// exact (related-methods spec §2.4): per step t ≥ 2, with the backward
// kernel r_t(x'|x) ∝ φ_{t−1}(x') f(x|x'),
//
//	T_1(x) = (1−γ_t) Σ_x' r_t(x'|x) T_1(x') + γ_t x
//	C(x)   = Σ_x' r_t(x'|x) [(1−γ_t) C(x') + (1−γ_t) γ_{t−1} ζ(y_{t−1}, x')]
//	φ_t(x) ∝ g_B(y_t|x) Σ_x' φ_{t−1}(x') f(x|x')
//	S_1 = Σ_x φ_t(x) T_1(x),   S_2 = Σ_x φ_t(x) [C(x) + γ_t ζ(y_t, x)]
//	t ≥ t_b:  B(m,k) = S_2(m,k)/S_1(k)
//
// with ζ(y, x)(m,k) = B(m,k) y(m) x(k)/(Bx)(m), the expected split of
// y(m) over the bases. Cost O(4^K·M·K) per step.
type BinaryNMFOnlineEM struct {
	m, k     int
	b        []float64 // M×K row-major
	a        float64
	burnIn   int64
	t        int64
	nx       int
	logF     []float64 // nx×nx: logF[x'*nx+x] = log f(x|x')
	logMu    []float64
	phi      []float64 // filter φ_t, normalized
	t1, c    []float64 // nx×K, nx×M×K
	prevY    []float64
	s1, s2   []float64
	lg, zeta []float64
}

// NewBinaryNMFOnlineEM starts the recursion from B1 (M×K, row-major,
// copied) with steps γ_t = t^−a and M-steps from t = burnIn (NoMStep:
// never). K is at most 12.
func NewBinaryNMFOnlineEM(b1 []float64, m, k int, p, q, a float64, burnIn int64) (*BinaryNMFOnlineEM, error) {
	switch {
	case m < 1 || k < 1 || k > 12 || len(b1) != m*k:
		return nil, fmt.Errorf("factor: binary NMF: B of %d values for M = %d, K = %d (want M, K >= 1, K <= 12)", len(b1), m, k)
	case !(p > 0 && p < 1 && q > 0 && q < 1):
		return nil, fmt.Errorf("factor: binary NMF: switching probabilities p = %v, q = %v must be in (0, 1)", p, q)
	case !(a > 0.5 && a <= 1):
		return nil, fmt.Errorf("factor: binary NMF: step exponent a = %v must be in (0.5, 1]", a)
	case burnIn < 1:
		return nil, fmt.Errorf("factor: binary NMF: burn-in %d must be >= 1", burnIn)
	}
	for _, v := range b1 {
		if !(v >= 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("factor: binary NMF: B entry %v must be finite and >= 0", v)
		}
	}
	nx := 1 << k
	e := &BinaryNMFOnlineEM{m: m, k: k, b: append([]float64(nil), b1...), a: a, burnIn: burnIn, nx: nx,
		logF: make([]float64, nx*nx), logMu: make([]float64, nx), phi: make([]float64, nx),
		t1: make([]float64, nx*k), c: make([]float64, nx*m*k), s1: make([]float64, k), s2: make([]float64, m*k),
		lg: make([]float64, nx), zeta: make([]float64, nx*m*k)}
	pi1 := (1 - p) / (2 - p - q)
	for x := range nx {
		for kk := range k {
			if x>>kk&1 == 1 {
				e.logMu[x] += math.Log(pi1)
			} else {
				e.logMu[x] += math.Log(1 - pi1)
			}
		}
		for x2 := range nx {
			lf := 0.0
			for kk := range k {
				from, to := x>>kk&1, x2>>kk&1
				switch {
				case from == 0 && to == 0:
					lf += math.Log(p)
				case from == 0:
					lf += math.Log(1 - p)
				case to == 1:
					lf += math.Log(q)
				default:
					lf += math.Log(1 - q)
				}
			}
			e.logF[x*nx+x2] = lf
		}
	}
	return e, nil
}

// S1 and S2 return the current statistics (S_1: K, S_2: M×K row-major).
func (e *BinaryNMFOnlineEM) S1() []float64 { return e.s1 }

// S2 returns S_2 (see S1).
func (e *BinaryNMFOnlineEM) S2() []float64 { return e.s2 }

// B returns the current estimate of B (M×K row-major).
func (e *BinaryNMFOnlineEM) B() []float64 { return e.b }

// logG returns log g_B(y|x) without the log y! terms (−Inf when a
// positive count has mean 0) and fills zeta (M×K) with ζ(y, x).
func (e *BinaryNMFOnlineEM) logG(y []float64, x int, zeta []float64) float64 {
	lg := 0.0
	for mm := range e.m {
		lam := 0.0
		row := e.b[mm*e.k : (mm+1)*e.k]
		for kk, v := range row {
			if x>>kk&1 == 1 {
				lam += v
			}
		}
		z := zeta[mm*e.k : (mm+1)*e.k]
		clear(z)
		if lam == 0 {
			if y[mm] > 0 {
				lg = math.Inf(-1)
			}
			continue
		}
		lg += y[mm]*math.Log(lam) - lam
		for kk, v := range row {
			if x>>kk&1 == 1 {
				z[kk] = v * y[mm] / lam
			}
		}
	}
	return lg
}

// Step takes the observation y_t (M counts ≥ 0) and updates the filter,
// the statistics and, from the burn-in on, B.
func (e *BinaryNMFOnlineEM) Step(y []float64) error {
	if len(y) != e.m {
		return fmt.Errorf("factor: binary NMF: observation of %d values, want M = %d", len(y), e.m)
	}
	for _, v := range y {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("factor: binary NMF: observation value %v must be finite and >= 0", v)
		}
	}
	e.t++
	t, nx, m, k := e.t, e.nx, e.m, e.k
	gamma := math.Pow(float64(t), -e.a)
	mk := m * k
	if t == 1 {
		for x := range nx {
			e.lg[x] = e.logMu[x]
			for kk := range k {
				e.t1[x*k+kk] = float64(x >> kk & 1)
			}
		}
		clear(e.c)
	} else {
		gPrev := math.Pow(float64(t-1), -e.a)
		t1, c := make([]float64, nx*k), make([]float64, nx*mk)
		// ζ(y_{t−1}, x') with the current B, for every x'.
		zPrev := make([]float64, nx*mk)
		for x2 := range nx {
			e.logG(e.prevY, x2, zPrev[x2*mk:(x2+1)*mk])
		}
		r := make([]float64, nx)
		for x := range nx {
			// Backward kernel r(x'|x) and the prediction Σ φ(x') f(x|x').
			pred := 0.0
			for x2 := range nx {
				r[x2] = e.phi[x2] * math.Exp(e.logF[x2*nx+x])
				pred += r[x2]
			}
			e.lg[x] = math.Inf(-1)
			if pred == 0 {
				continue
			}
			e.lg[x] = math.Log(pred)
			for x2, rv := range r {
				if rv == 0 {
					continue
				}
				rv /= pred
				for kk := range k {
					t1[x*k+kk] += rv * (1 - gamma) * e.t1[x2*k+kk]
				}
				cx, cx2, z := c[x*mk:(x+1)*mk], e.c[x2*mk:(x2+1)*mk], zPrev[x2*mk:(x2+1)*mk]
				for q := range cx {
					cx[q] += rv * ((1-gamma)*cx2[q] + (1-gamma)*gPrev*z[q])
				}
			}
			for kk := range k {
				t1[x*k+kk] += gamma * float64(x>>kk&1)
			}
		}
		e.t1, e.c = t1, c
	}
	// Filter update and statistics.
	top := math.Inf(-1)
	for x := range nx {
		e.lg[x] += e.logG(y, x, e.zeta[x*mk:(x+1)*mk])
		top = max(top, e.lg[x])
	}
	if math.IsInf(top, -1) {
		return fmt.Errorf("factor: binary NMF: observation %v at step %d has probability 0 under B", y, t)
	}
	sum := 0.0
	for x := range nx {
		e.phi[x] = math.Exp(e.lg[x] - top)
		sum += e.phi[x]
	}
	clear(e.s1)
	clear(e.s2)
	for x := range nx {
		e.phi[x] /= sum
		ph := e.phi[x]
		if ph == 0 {
			continue
		}
		for kk := range k {
			e.s1[kk] += ph * e.t1[x*k+kk]
		}
		for q := range mk {
			e.s2[q] += ph * (e.c[x*mk+q] + gamma*e.zeta[x*mk+q])
		}
	}
	e.prevY = append(e.prevY[:0], y...)
	if t >= e.burnIn {
		for mm := range m {
			for kk := range k {
				if e.s1[kk] > 0 {
					e.b[mm*k+kk] = e.s2[mm*k+kk] / e.s1[kk]
				}
			}
		}
	}
	return nil
}
