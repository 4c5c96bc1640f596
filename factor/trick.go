package factor

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
)

// Reduced returns, for each action a, the m×m matrix K^a D^a: the
// "stochastic-factorization trick" of emsf-ijcai2015 §2 (Barreto and
// Fragoso 2011), which swaps the factors of P^a = D^a K^a. K^a D^a is
// row-stochastic, and its entry (l, k) is Pr(H_{t+1} = k | H_t = l, A_t = a)
// (emsf-ijcai2015 §3). The sums over states run in index order without
// fused multiply-add, so the result is reproducible across machines.
func Reduced(md *Model) []*mat.Dense {
	rs := make([]*mat.Dense, md.U)
	for a := range rs {
		r := make([]float64, md.M*md.M)
		addKD(r, md.KT[md.KBlock(a)], md.D[md.DBlock(a)], md.N, md.M)
		rs[a] = mat.NewDense(md.M, md.M, r)
	}
	return rs
}

// addKD adds K·D to the row-major m×m matrix r: r[l][k] += Σ_j KT[j][l]·D[j][k]
// over j in order, where kt and d are row-major n×m.
func addKD(r, kt, d []float64, n, m int) {
	for j := 0; j < n; j++ {
		krow := kt[j*m : j*m+m]
		drow := d[j*m : j*m+m]
		for l, kv := range krow {
			if kv == 0 {
				continue
			}
			dst := r[l*m : l*m+m]
			for k, dv := range drow {
				dst[k] += float64(kv * dv)
			}
		}
	}
}

// DeterministicPolicy returns the n×u stochastic-matrix form of a
// deterministic policy that takes action actions[i] in state i.
func DeterministicPolicy(actions []int, u int) ([][]float64, error) {
	pi := make([][]float64, len(actions))
	for i, a := range actions {
		if a < 0 || a >= u {
			return nil, fmt.Errorf("factor: policy: action %d of state %d out of range [0, %d)", a, i, u)
		}
		pi[i] = make([]float64, u)
		pi[i][a] = 1
	}
	return pi, nil
}

// CheckPolicy returns an error unless policy is an n×u matrix whose rows
// are probability distributions over actions (within StochasticTol).
func CheckPolicy(policy [][]float64, n, u int) error {
	if len(policy) != n {
		return fmt.Errorf("factor: policy has %d rows, want one per state (%d)", len(policy), n)
	}
	for i, row := range policy {
		if len(row) != u {
			return fmt.Errorf("factor: policy row %d has %d entries, want one per action (%d)", i, len(row), u)
		}
		if err := checkStochastic(row); err != nil {
			return fmt.Errorf("factor: policy row %d: %w", i, err)
		}
	}
	return nil
}

// PolicyMatrix returns the n×n transition matrix (row-major) of the chain
// that follows policy: with π_ia = Pr(A_t = a | S_t = i) as in the SFM of
// emsf-ijcai2015 Def. 4, Pr(S_{t+1} = j | S_t = i) = Σ_a π_ia·P^a_ij, i.e.
// P_π = Σ_a diag(π_·a) P^a. It uses n² memory and O(u·n) Row calls: for
// small n.
func PolicyMatrix(e Estimate, policy [][]float64) ([]float64, error) {
	n, u := e.States(), e.Actions()
	if err := CheckPolicy(policy, n, u); err != nil {
		return nil, err
	}
	p := make([]float64, n*n)
	row := make([]float64, n)
	for i := 0; i < n; i++ {
		dst := p[i*n : i*n+n]
		for a, w := range policy[i] {
			if w == 0 {
				continue
			}
			e.Row(a, i, row)
			for j, v := range row {
				dst[j] += float64(w * v)
			}
		}
	}
	return p, nil
}

// ReducedChain returns the reduced chain of the policy π: with k =
// NumK(u, tie) K blocks it is the (k·m)×(k·m) row-stochastic matrix
// R = K̃ D̃, where
//
//	D̃ = [ D̃_0 … D̃_{k−1} ]  (n × k·m),  D̃_b = Σ_{a: KBlock(a) = b} diag(π_·a) D^a,
//	K̃ = [ K_0; …; K_{k−1} ] (k·m × n),  the K blocks stacked,
//
// so that D̃ K̃ = Σ_a diag(π_·a) D^a K^a = P_π exactly: a stochastic
// factorization of the policy's chain, to which the SF trick of
// emsf-ijcai2015 §2 applies. With a shared K (or u = 1) R = K·D_π is m×m;
// with independent K blocks (TieNone, TieSharedD) the hidden state is the
// pair (K block, l), and index b·m + l of R is hidden state l of block b.
// Cost: O(n·u·m) for D̃ and O(n·(k·m)²) for R.
func ReducedChain(md *Model, policy [][]float64) (*mat.Dense, error) {
	n, m, u := md.N, md.M, md.U
	if err := CheckPolicy(policy, n, u); err != nil {
		return nil, err
	}
	nk := NumK(u, md.Tie)
	w := nk * m
	dt := make([]float64, n*w) // D̃, n × k·m
	for i := 0; i < n; i++ {
		for a, p := range policy[i] {
			if p == 0 {
				continue
			}
			dst := dt[i*w+md.KBlock(a)*m : i*w+md.KBlock(a)*m+m]
			for l, v := range md.DRow(a, i) {
				dst[l] += float64(p * v)
			}
		}
	}
	r := make([]float64, w*w)
	for b := 0; b < nk; b++ {
		kt := md.KT[b]
		for j := 0; j < n; j++ {
			krow := kt[j*m : j*m+m]
			drow := dt[j*w : j*w+w]
			for l, kv := range krow {
				if kv == 0 {
					continue
				}
				dst := r[(b*m+l)*w : (b*m+l)*w+w]
				for c, dv := range drow {
					dst[c] += float64(kv * dv)
				}
			}
		}
	}
	return mat.NewDense(w, w, r), nil
}

// StationaryCond is the largest condition number of the linear system of
// StationaryOf accepted as a unique stationary distribution. Chains with
// more than one recurrent class make the system singular.
const StationaryCond = 1e12

// StationaryOf returns the stationary distribution π of the row-stochastic
// square matrix p, π p = π with Σπ = 1, by a direct solve (LU with partial
// pivoting): the equations π(I − p) = 0 with the last one replaced by
// Σπ = 1. Periodic chains are fine; states that no state can enter (zero
// columns) get exactly 0. It returns an error when the
// distribution is not unique (more than one recurrent class) or the system
// is too ill-conditioned (condition number above StationaryCond), or when
// the residual ‖πp − π‖_1 exceeds 1e-9.
func StationaryOf(p mat.Matrix) ([]float64, error) {
	s, c := p.Dims()
	if s != c || s < 1 {
		panic(fmt.Sprintf("factor: StationaryOf: matrix is %d×%d, want square", s, c))
	}
	a := mat.NewDense(s, s, nil)
	for i := 0; i < s; i++ {
		for j := 0; j < s; j++ {
			v := -p.At(i, j)
			if i == j {
				v++
			}
			a.Set(i, j, v)
		}
		a.Set(i, s-1, 1)
	}
	var lu mat.LU
	lu.Factorize(a)
	if cond := lu.Cond(); !(cond <= StationaryCond) {
		return nil, fmt.Errorf("factor: stationary distribution is not unique or ill-conditioned (condition number %.3g > %g): the chain may have more than one recurrent class", cond, StationaryCond)
	}
	b := mat.NewVecDense(s, nil)
	b.SetVec(s-1, 1)
	var x mat.VecDense
	if err := lu.SolveVecTo(&x, true, b); err != nil {
		return nil, fmt.Errorf("factor: stationary distribution: %w", err)
	}
	pi := make([]float64, s)
	sum := 0.0
	for i := range pi {
		v := x.AtVec(i)
		if v < -1e-9 || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("factor: stationary distribution has entry %d = %v: solve failed", i, v)
		}
		pi[i] = max(v, 0)
	}
	// A state no state can enter (a zero column, e.g. the hidden states of
	// an action the policy never takes) is transient: exactly 0.
	for j := range pi {
		entered := false
		for i := 0; i < s && !entered; i++ {
			entered = p.At(i, j) != 0
		}
		if !entered {
			pi[j] = 0
		}
		sum += pi[j]
	}
	for i := range pi {
		pi[i] /= sum
	}
	res := 0.0
	for j := 0; j < s; j++ {
		v := 0.0
		for i, w := range pi {
			v += w * p.At(i, j)
		}
		res += math.Abs(v - pi[j])
	}
	if !(res <= 1e-9) {
		return nil, fmt.Errorf("factor: stationary distribution: residual ‖πP − π‖₁ = %.3g after the solve", res)
	}
	return pi, nil
}

// Stationary returns the stationary distribution mu (over the n states) of
// the chain P_π = Σ_a diag(π_·a) D^a K^a that follows policy (n×u, rows
// stochastic; see DeterministicPolicy), computed through the SF trick
// (emsf-ijcai2015 §2; Barreto and Fragoso 2011): nu is the stationary
// distribution of the reduced chain R = K̃D̃ of ReducedChain (length
// NumK(u, tie)·m: m for a shared K or u = 1), found by StationaryOf, and
//
//	mu = nu·K̃,   mu_j = Σ_{b,l} nu_{b·m+l}·K_b[l, j],
//
// the distribution of the state that follows a hidden state drawn from nu.
// mu is stationary for P_π because mu·P_π = nu·K̃·D̃·K̃ = nu·R·K̃ = nu·K̃.
// The cost is that of ReducedChain plus O((k·m)³) for the solve, never
// O(n²). It returns an error for a bad policy or when the stationary
// distribution is not unique (the chain has more than one recurrent class).
func Stationary(md *Model, policy [][]float64) (mu, nu []float64, err error) {
	r, err := ReducedChain(md, policy)
	if err != nil {
		return nil, nil, err
	}
	nu, err = StationaryOf(r)
	if err != nil {
		return nil, nil, err
	}
	n, m := md.N, md.M
	mu = make([]float64, n)
	for b, kt := range md.KT {
		for j := 0; j < n; j++ {
			mu[j] += dot(nu[b*m:b*m+m], kt[j*m:j*m+m])
		}
	}
	return mu, nu, nil
}
