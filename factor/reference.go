package factor

import (
	"fmt"
	"math"
)

// Episode is one recorded trajectory z = (s_1, a_1, s_2, …, a_{τ-1}, s_τ)
// of an MDP: States has τ entries and Actions τ-1 (Actions[t] is taken in
// States[t] and leads to States[t+1]). The last state has no action: it
// only enters the likelihood as the target of the last transition. An
// episode with fewer than two states holds no transition.
type Episode struct {
	States  []int
	Actions []int
}

// ReferenceOptions configures ReferenceIteration. The zero value is plain
// EM without the initial-state and policy terms.
type ReferenceOptions struct {
	// Alpha is the learning rate of the commit, as in Accumulator.Commit;
	// 0 means 1 (the paper's algorithm, which has no learning rate).
	Alpha float64
	// Mu is the initial-state distribution μ (length n). nil leaves the
	// factor μ_{s_1} out of the recursions (as if it were 1).
	Mu []float64
	// Pi is the exploration policy Π, row-major n×u: Pi[i*u+a] = Π(a | i).
	// nil leaves the factors π_{s_t a_t} out (as if they were 1).
	Pi []float64
}

// ReferenceIteration runs one iteration of the original EMSF on episodes:
// emsf-ijcai2015 Algorithm 1, lines 12-53, forward-backward over each
// episode with the scaling of eqs. (5) and (8). It returns the next model
// (md is not changed) and the episodes' log-likelihood under md as in line
// 46: Σ_episodes [Σ_t log w'_t + log(α̂_{τ-1} · K^{a_{τ-1}}_{:,s_τ})].
//
// It is an oracle for tests and the speed comparison, not the production
// path: per step it costs O(m) like the fused kernel, but it keeps every
// episode's α and β (τ×m each) and cannot be split into shards.
//
// # μ and Π cancel
//
// μ_{s_1} only scales α̂(1) and Π(a_t|s_t) only scales α'(t) and β'(t-1);
// both scales disappear when the rows of α̂, β̂ and C = α̂ ⊗ β̂ are
// normalised (Alg. 1 lines 25, 29, 39), so the posteriors c_ti and the
// returned model do not depend on them (up to rounding). They only add the
// constant Σ log μ_{s_1} + Σ_t log π_{s_t a_t} to the log-likelihood (eq. 9
// of incremental-emsf). With Mu and Pi nil that constant is 0 and the
// log-likelihood is Σ_t log (D^{a_t} K^{a_t})_{s_t s_{t+1}}, the value a Pass
// over the transitions' counts computes (Accumulator.LogLik).
//
// # Prop. 1
//
// Because H_t depends only on (S_t, A_t) and S_{t+1} is observed, the
// scaled forward variable α̂(t) is the row D^{a_t}_{s_t} (normalised) and
// β̂(t) is a multiple of the column K^{a_t}_{:,s_{t+1}}, so c_t is
// d_{s_t,l}·k_{l,s_{t+1}} / (D K)_{s_t s_{t+1}}: the per-transition posterior of
// the simplified update (incremental-emsf Prop. 1, eq. 5). One
// ReferenceIteration therefore equals one Pass + Commit over the count
// matrices of the same transitions, to rounding.
//
// # Where it departs from the pseudo-code
//
//   - Line 23 reads μ_1; eq. (5) and Table 1 say μ_{s_1}, which is used.
//   - Lines 51-52 divide by the row sum of D̂ and K̂ also where it is zero
//     (a state never seen with that action, a hidden state with no weight),
//     which gives 0/0. Here such rows keep their values, as in
//     Accumulator.Commit (DESIGN §2); the paper's rows would be NaN.
//   - With Tie modes the accumulators of the shared factor are summed over
//     actions (emsf-ijcai2015 end of §4.1: eq. (17) without the restriction
//     a_t = u for a single K; likewise eq. (16) for a single D).
//   - A transition the model gives probability 0 returns a
//     *TransitionError (Count 1) instead of dividing by zero; an observed
//     start or action to which Mu or Pi give probability 0 is an error too.
func ReferenceIteration(md *Model, episodes []Episode, opts ReferenceOptions) (*Model, float64, error) {
	n, m, u := md.N, md.M, md.U
	alpha := opts.Alpha
	if alpha == 0 {
		alpha = 1
	}
	if !(alpha > 0 && alpha <= 1) {
		return nil, math.NaN(), fmt.Errorf("factor: learning rate %v must be in (0, 1]", alpha)
	}
	if opts.Mu != nil && len(opts.Mu) != n {
		return nil, math.NaN(), fmt.Errorf("factor: μ has %d entries, want n = %d", len(opts.Mu), n)
	}
	if opts.Pi != nil && len(opts.Pi) != n*u {
		return nil, math.NaN(), fmt.Errorf("factor: Π has %d entries, want n·u = %d", len(opts.Pi), n*u)
	}
	mu := func(i int) float64 {
		if opts.Mu == nil {
			return 1
		}
		return opts.Mu[i]
	}
	pi := func(i, a int) float64 {
		if opts.Pi == nil {
			return 1
		}
		return opts.Pi[i*u+a]
	}

	// D̂ per D block (n×m), K̂ per K block stored transposed (n×m), line 12.
	dh := make([][]float64, len(md.D))
	for b := range dh {
		dh[b] = make([]float64, n*m)
	}
	khT := make([][]float64, len(md.KT))
	for b := range khT {
		khT[b] = make([]float64, n*m)
	}

	var al, be, c, w []float64 // α̂, β̂, C (τ-1 × m) and w' (τ-1), reused
	ll := 0.0
	for e, ep := range episodes {
		if err := checkEpisode(ep, n, u); err != nil {
			return nil, math.NaN(), fmt.Errorf("factor: episode %d: %w", e, err)
		}
		s, a := ep.States, ep.Actions
		T := len(a) // τ-1 transitions
		if T == 0 {
			if len(s) == 1 && opts.Mu != nil {
				if !(mu(s[0]) > 0) {
					return nil, math.NaN(), fmt.Errorf("factor: episode %d starts in state %d, to which μ gives probability %v", e, s[0], mu(s[0]))
				}
				ll += math.Log(mu(s[0]))
			}
			continue
		}
		al = refGrow(al, T*m)
		be = refGrow(be, T*m)
		c = refGrow(c, T*m)
		w = refGrow(w, T)

		// Forward pass, lines 23-29.
		{
			scale := mu(s[0]) * pi(s[0], a[0])
			row := al[0:m]
			for l, v := range md.DRow(a[0], s[0]) {
				row[l] = scale * v
			}
			w[0] = refSum(row)
			if !(w[0] > 0) {
				return nil, math.NaN(), fmt.Errorf("factor: episode %d: start in state %d with action %d has probability 0 under μ and Π", e, s[0], a[0])
			}
			refScale(row, 1/w[0])
		}
		for t := 1; t < T; t++ {
			g := dot(al[(t-1)*m:t*m], md.KCol(a[t-1], s[t]))
			if !(g > 0) {
				return nil, math.NaN(), &TransitionError{Action: a[t-1], From: s[t-1], To: s[t], Count: 1}
			}
			scale := g * pi(s[t], a[t])
			row := al[t*m : (t+1)*m]
			for l, v := range md.DRow(a[t], s[t]) {
				row[l] = scale * v
			}
			w[t] = refSum(row)
			if !(w[t] > 0) {
				return nil, math.NaN(), fmt.Errorf("factor: episode %d step %d: action %d in state %d has probability 0 under Π", e, t, a[t], s[t])
			}
			refScale(row, 1/w[t])
		}
		last := dot(al[(T-1)*m:T*m], md.KCol(a[T-1], s[T]))
		if !(last > 0) {
			return nil, math.NaN(), &TransitionError{Action: a[T-1], From: s[T-1], To: s[T], Count: 1}
		}

		// Backward pass, lines 32-35.
		copy(be[(T-1)*m:T*m], md.KCol(a[T-1], s[T]))
		for t := T - 2; t >= 0; t-- {
			sc := dot(be[(t+1)*m:(t+2)*m], md.DRow(a[t+1], s[t+1])) * pi(s[t+1], a[t+1]) / w[t+1]
			row := be[t*m : (t+1)*m]
			for l, v := range md.KCol(a[t], s[t+1]) {
				row[l] = sc * v
			}
		}

		// Posteriors and accumulation, lines 38-42.
		for t := 0; t < T; t++ {
			row := c[t*m : (t+1)*m]
			for l := range row {
				row[l] = al[t*m+l] * be[t*m+l]
			}
			z := refSum(row)
			if !(z > 0) {
				return nil, math.NaN(), &TransitionError{Action: a[t], From: s[t], To: s[t+1], Count: 1}
			}
			refScale(row, 1/z)
			d := dh[md.DBlock(a[t])][s[t]*m : (s[t]+1)*m]
			k := khT[md.KBlock(a[t])][s[t+1]*m : (s[t+1]+1)*m]
			for l, v := range row {
				d[l] += v
				k[l] += v
			}
		}

		// Log-likelihood, line 46.
		for _, v := range w[:T] {
			ll += math.Log(v)
		}
		ll += math.Log(last)
	}

	// Normalisation and commit, lines 50-53, with learning rate α.
	next := md.Clone()
	keep := 1 - alpha
	for b, d := range next.D {
		src := dh[b]
		for i := 0; i < n; i++ {
			r := src[i*m : (i+1)*m]
			x := refSum(r)
			if !(x > 0) {
				continue // never seen: keep the row
			}
			f := alpha / x
			row := d[i*m : (i+1)*m]
			for l := range row {
				row[l] = float64(keep*row[l]) + float64(f*r[l])
			}
		}
	}
	y := make([]float64, m)
	for b, kt := range next.KT {
		src := khT[b]
		clear(y)
		for j := 0; j < n; j++ {
			for l, v := range src[j*m : (j+1)*m] {
				y[l] += v
			}
		}
		for j := 0; j < n; j++ {
			row := kt[j*m : (j+1)*m]
			for l := range row {
				if y[l] > 0 { // a hidden state with no weight keeps its row
					row[l] = float64(keep*row[l]) + float64(alpha/y[l]*src[j*m+l])
				}
			}
		}
	}
	next.Iteration++
	next.LogLik = ll
	next.WKL = math.NaN()
	return next, ll, nil
}

func checkEpisode(ep Episode, n, u int) error {
	if len(ep.States) == 0 {
		if len(ep.Actions) != 0 {
			return fmt.Errorf("%d actions but no states", len(ep.Actions))
		}
		return nil
	}
	if len(ep.Actions) != len(ep.States)-1 {
		return fmt.Errorf("%d states need %d actions, have %d", len(ep.States), len(ep.States)-1, len(ep.Actions))
	}
	for t, s := range ep.States {
		if s < 0 || s >= n {
			return fmt.Errorf("state %d at step %d out of range [0, %d)", s, t, n)
		}
	}
	for t, a := range ep.Actions {
		if a < 0 || a >= u {
			return fmt.Errorf("action %d at step %d out of range [0, %d)", a, t, u)
		}
	}
	return nil
}

// refGrow returns x resliced (or reallocated) to length k; contents undefined.
func refGrow(x []float64, k int) []float64 {
	if cap(x) < k {
		return make([]float64, k)
	}
	return x[:k]
}

func refSum(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s
}

func refScale(x []float64, f float64) {
	for i := range x {
		x[i] *= f
	}
}
