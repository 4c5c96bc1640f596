package factor

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
)

// Planning on an estimated model: plain policy iteration (PI) on any
// Estimate, the "CNT+PI" of emsf-ijcai2015 §5, and policy iteration based on
// stochastic factorization (PISF, Barreto, Pineau & Precup 2014), the
// "EMSF+PISF" of emsf-ijcai2015 §5 and incremental-emsf §5.
//
// Rewards. Both papers' blackjack experiments put the reward on the state a
// transition ends in: r̂_j is the reward of entering state j, so the
// expected reward of taking a in i is r^a = P^a r̂ (ExpectedRewards), and
// with P^a ≈ D^a K the reduced reward vector is r̄ = K r̂ (ReducedRewards):
// r^a = P^a r̂ ≈ D^a K r̂ = D^a r̄ (emsf-ijcai2015 §5).
//
// Episodic tasks. A state marked terminal in PlanOptions.Terminal has value
// 0 and no decision: its row of P^a is ignored, and the value of entering
// it is its reward r̂_j alone. This is the usual "absorbing state with zero
// reward" model of an episodic task, written so that γ = 1 is allowed: the
// evaluation solves only for the non-terminal states and fails with an
// error when a policy never reaches a terminal state (a singular system).

// PlanOptions configures PolicyIteration and PISF.
type PlanOptions struct {
	// Terminal marks the terminal states (nil: none). len must be n.
	Terminal []bool
	// Init is the first policy (nil: action 0 in every state). len must
	// be n; entries of terminal states are ignored.
	Init []int
	// MaxIter bounds the policy-improvement steps (0: 1000).
	MaxIter int
	// Tol is the margin by which another action's value must exceed the
	// current action's value to replace it (0: 1e-10), so that ties do not
	// make the policy cycle.
	Tol float64
}

// PlanResult is the output of PolicyIteration and PISF.
type PlanResult struct {
	// Policy[i] is the greedy action in state i (0 for terminal states).
	Policy []int
	// Values[i] is v_π(i) for the returned policy under the model (0 for
	// terminal states).
	Values []float64
	// Iterations counts the policy evaluations.
	Iterations int
}

func (o *PlanOptions) check(n, u int) error {
	if o.Terminal != nil && len(o.Terminal) != n {
		return fmt.Errorf("factor: plan: %d terminal flags, want %d", len(o.Terminal), n)
	}
	if o.Init != nil {
		if len(o.Init) != n {
			return fmt.Errorf("factor: plan: initial policy has %d entries, want %d", len(o.Init), n)
		}
		for i, a := range o.Init {
			if (o.Terminal == nil || !o.Terminal[i]) && (a < 0 || a >= u) {
				return fmt.Errorf("factor: plan: initial action %d of state %d out of range [0, %d)", a, i, u)
			}
		}
	}
	if o.MaxIter < 0 || o.Tol < 0 || math.IsNaN(o.Tol) {
		return fmt.Errorf("factor: plan: bad MaxIter %d or Tol %v", o.MaxIter, o.Tol)
	}
	return nil
}

func (o *PlanOptions) terminal(i int) bool { return o.Terminal != nil && o.Terminal[i] }

func (o *PlanOptions) start(n int) []int {
	pol := make([]int, n)
	if o.Init != nil {
		for i := range pol {
			if !o.terminal(i) {
				pol[i] = o.Init[i]
			}
		}
	}
	return pol
}

func checkGamma(gamma float64) error {
	if !(gamma > 0 && gamma <= 1) {
		return fmt.Errorf("factor: plan: discount %v must be in (0, 1]", gamma)
	}
	return nil
}

// ExpectedRewards returns r^a_i = Σ_j P^a_ij r̂_j for every action and
// state: the expected reward of taking a in i when rhat[j] is the reward of
// entering j (emsf-ijcai2015 §5: r^a = P^a r̂).
func ExpectedRewards(e Estimate, rhat []float64) [][]float64 {
	n, u := e.States(), e.Actions()
	if len(rhat) != n {
		panic(fmt.Sprintf("factor: ExpectedRewards: len(rhat) = %d, want n = %d", len(rhat), n))
	}
	row := make([]float64, n)
	r := make([][]float64, u)
	for a := range u {
		r[a] = make([]float64, n)
		for i := range n {
			e.Row(a, i, row)
			r[a][i] = dot(row, rhat)
		}
	}
	return r
}

// ReducedRewards returns r̄ = K r̂ (m entries) for a model with a shared K:
// emsf-ijcai2015 §5, "r̄ = K r̂, where r̂_i is an estimate of the reward
// associated with transitions ending in state i".
func ReducedRewards(md *Model, rhat []float64) ([]float64, error) {
	if md.Tie != TieSharedK {
		return nil, fmt.Errorf("factor: reduced rewards need a shared K (tie %s)", md.Tie)
	}
	if len(rhat) != md.N {
		panic(fmt.Sprintf("factor: ReducedRewards: len(rhat) = %d, want n = %d", len(rhat), md.N))
	}
	m := md.M
	kt := md.KT[0]
	rbar := make([]float64, m)
	for j, r := range rhat {
		for l := range m {
			rbar[l] += kt[j*m+l] * r
		}
	}
	return rbar, nil
}

// PolicyIteration is Howard's policy iteration on the estimate e with
// expected rewards r[a][i] (e.g. ExpectedRewards) and discount gamma in
// (0, 1]:
//
//	evaluate: v_π = r_π + γ P_π v_π (solved exactly on the non-terminal
//	          states, v = 0 on terminal states),
//	improve:  π'(i) = argmax_a r^a_i + γ Σ_j P^a_ij v_π(j),
//
// until the policy no longer changes. It uses n² memory and an O(n³) solve
// per iteration: for small n (the CNT+PI baseline of emsf-ijcai2015 §5).
func PolicyIteration(e Estimate, r [][]float64, gamma float64, opts PlanOptions) (PlanResult, error) {
	n, u := e.States(), e.Actions()
	if err := checkGamma(gamma); err != nil {
		return PlanResult{}, err
	}
	if err := opts.check(n, u); err != nil {
		return PlanResult{}, err
	}
	if len(r) != u {
		return PlanResult{}, fmt.Errorf("factor: PI: rewards for %d actions, want %d", len(r), u)
	}
	for a := range r {
		if len(r[a]) != n {
			return PlanResult{}, fmt.Errorf("factor: PI: rewards of action %d have %d entries, want %d", a, len(r[a]), n)
		}
	}
	// Dense P^a once: n²u memory, read by every evaluation and improvement.
	p := make([][]float64, u)
	for a := range u {
		p[a] = make([]float64, n*n)
		for i := range n {
			e.Row(a, i, p[a][i*n:i*n+n])
		}
	}
	var idx []int // non-terminal states
	pos := make([]int, n)
	for i := range n {
		pos[i] = -1
		if !opts.terminal(i) {
			pos[i] = len(idx)
			idx = append(idx, i)
		}
	}
	pol := opts.start(n)
	v := make([]float64, n)
	res := PlanResult{}
	maxIter := opts.MaxIter
	if maxIter == 0 {
		maxIter = 1000
	}
	tol := opts.Tol
	if tol == 0 {
		tol = 1e-10
	}
	k := len(idx)
	A := mat.NewDense(max(k, 1), max(k, 1), nil)
	b := mat.NewVecDense(max(k, 1), nil)
	var x mat.VecDense
	for {
		res.Iterations++
		// Evaluate: (I − γ P_π) v = r_π restricted to non-terminal states.
		if k > 0 {
			A.Zero()
			for s, i := range idx {
				a := pol[i]
				row := p[a][i*n : i*n+n]
				for j, pj := range row {
					if t := pos[j]; t >= 0 {
						A.Set(s, t, A.At(s, t)-gamma*pj)
					}
				}
				A.Set(s, s, A.At(s, s)+1)
				b.SetVec(s, r[a][i])
			}
			if err := x.SolveVec(A, b); err != nil {
				return PlanResult{}, fmt.Errorf("factor: PI: evaluate policy %d: %w", res.Iterations, err)
			}
			for s, i := range idx {
				v[i] = x.AtVec(s)
			}
		}
		// Improve.
		changed := false
		for _, i := range idx {
			if improve(pol, i, u, tol, func(a int) float64 { return r[a][i] + gamma*dot(p[a][i*n:i*n+n], v) }) {
				changed = true
			}
		}
		if !changed || res.Iterations >= maxIter {
			if changed {
				return PlanResult{}, fmt.Errorf("factor: PI: policy still changing after %d iterations", res.Iterations)
			}
			res.Policy, res.Values = pol, v
			return res, nil
		}
	}
}

// PISF is policy iteration based on stochastic factorization (Barreto,
// Pineau & Precup 2014) on a model with a shared K (TieSharedK), P^a ≈ D^a K,
// and reduced rewards r̄ (m entries, e.g. ReducedRewards: r^a ≈ D^a r̄).
//
// With D_π the n×m matrix whose row i is D^{π(i)}_i and Z the diagonal mask
// of the non-terminal states, v_π = D_π r̄ + γ D_π K Z v_π gives v_π = D_π w
// with the m-vector
//
//	w = r̄ + γ K Z v_π = r̄ + γ (K Z D_π) w,   i.e.  (I − γ K Z D_π) w = r̄,
//
// an m×m system on the reduced model K Z D_π (the stochastic-factorization
// trick, emsf-ijcai2015 §2: swapping the factors). The action values are
// Q(i, a) = r^a_i + γ P^a_i v = D^a_i (r̄ + γ K Z v) = D^a_i w, so the
// improvement step is π'(i) = argmax_a D^a_i w. Each iteration costs
// O(n·m²) to build K Z D_π, O(m³) to solve and O(n·m·u) to improve. When
// P^a = D^a K and r^a = D^a r̄ exactly, PISF's policy and values are those
// of PolicyIteration on P (the test pisf_test.go checks this).
func PISF(md *Model, rbar []float64, gamma float64, opts PlanOptions) (PlanResult, error) {
	if md.Tie != TieSharedK {
		return PlanResult{}, fmt.Errorf("factor: PISF needs a shared K (tie %s)", md.Tie)
	}
	n, m, u := md.N, md.M, md.U
	if err := checkGamma(gamma); err != nil {
		return PlanResult{}, err
	}
	if err := opts.check(n, u); err != nil {
		return PlanResult{}, err
	}
	if len(rbar) != m {
		return PlanResult{}, fmt.Errorf("factor: PISF: %d reduced rewards, want m = %d", len(rbar), m)
	}
	kt := md.KT[0]
	pol := opts.start(n)
	maxIter := opts.MaxIter
	if maxIter == 0 {
		maxIter = 1000
	}
	tol := opts.Tol
	if tol == 0 {
		tol = 1e-10
	}
	A := mat.NewDense(m, m, nil)
	b := mat.NewVecDense(m, rbar)
	var w mat.VecDense
	res := PlanResult{}
	for {
		res.Iterations++
		// A = I − γ K Z D_π: A[l][h] −= γ Σ_{i non-terminal} K[l][i] D^{π(i)}[i][h].
		A.Zero()
		for i := range n {
			if opts.terminal(i) {
				continue
			}
			d := md.DRow(pol[i], i)
			k := kt[i*m : i*m+m]
			for l, kl := range k {
				if kl == 0 {
					continue
				}
				for h, dh := range d {
					A.Set(l, h, A.At(l, h)-gamma*kl*dh)
				}
			}
		}
		for l := range m {
			A.Set(l, l, A.At(l, l)+1)
		}
		if err := w.SolveVec(A, b); err != nil {
			return PlanResult{}, fmt.Errorf("factor: PISF: evaluate policy %d: %w", res.Iterations, err)
		}
		wr := w.RawVector().Data
		if w.RawVector().Inc != 1 {
			wr = make([]float64, m)
			for l := range m {
				wr[l] = w.AtVec(l)
			}
		}
		changed := false
		for i := range n {
			if opts.terminal(i) {
				continue
			}
			if improve(pol, i, u, tol, func(a int) float64 { return dot(md.DRow(a, i), wr) }) {
				changed = true
			}
		}
		if !changed || res.Iterations >= maxIter {
			if changed {
				return PlanResult{}, fmt.Errorf("factor: PISF: policy still changing after %d iterations", res.Iterations)
			}
			v := make([]float64, n)
			for i := range n {
				if !opts.terminal(i) {
					v[i] = dot(md.DRow(pol[i], i), wr)
				}
			}
			res.Policy, res.Values = pol, v
			return res, nil
		}
	}
}

// improve is the policy-improvement step for state i: it switches pol[i] to
// the action with the largest q(a), but only when that beats the current
// action's value by more than tol (so ties never make policy iteration
// cycle), and reports whether pol[i] changed.
func improve(pol []int, i, u int, tol float64, q func(a int) float64) bool {
	best, bestQ := pol[i], q(pol[i])
	for a := range u {
		if qa := q(a); qa > bestQ+tol {
			best, bestQ = a, qa
		}
	}
	changed := best != pol[i]
	pol[i] = best
	return changed
}
