package experiment

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/emsf/emsf/factor"
)

// The paper's §4.1 setting (online-em-nmf_003): B 8×5, p, q known.
const (
	nmfM, nmfK   = 8, 5
	nmfP, nmfQ   = 0.8571, 0.6926
	nmfGammaExp  = 0.8
	nmfBurnIn    = 100
	nmfTruthSeed = 0x6e6d66 // "nmf": the true B is the same in every run
)

// OnlineEM is online-em-nmf_003 against incremental EMSF. Per run r (seed
// Seed + r):
//   - "emsf": incremental-emsf Fig. 3's stream (OnlineTruth: OnlineStates
//     states, Dirichlet(OnlineConc) rows, one trajectory) fed to online EM
//     (factor.OnlineEM with BurnIn and Floor) for each exponent a of
//     Gammas and to incremental EMSF (as Online) for each setting of Incs,
//     all from the run's random model of order Order; KL_ρ(P ‖ DK) at each
//     of Sizes (increasing);
//   - "nmf": the paper's Fig. 1 setting, exact online EM
//     (factor.BinaryNMFOnlineEM) from a random B_1 for NMFSteps
//     observations; relative error ‖B_t − B‖_F/‖B‖_F after the best column
//     permutation at the checkpoints 1, 2, 5, 10, ...
//
// Job k is run k / per, per = len(Gammas) + len(Incs) + 1: first the
// exponents, then the incremental settings, then the nmf run.
type OnlineEM struct {
	Order    int
	Sizes    []int
	Gammas   []float64
	BurnIn   int64
	Floor    float64
	Incs     []OnlineSetting
	NMFSteps int
	Seed     uint64
}

// Jobs returns the number of jobs of runs runs.
func (c *OnlineEM) Jobs(runs int) int { return runs * (len(c.Gammas) + len(c.Incs) + 1) }

// Run runs job k.
func (c *OnlineEM) Run(ctx context.Context, k int) ([]Record, error) {
	per := len(c.Gammas) + len(c.Incs) + 1
	run, job := k/per, k%per
	seed := c.Seed + uint64(run)
	switch {
	case job < len(c.Gammas):
		out := make([]Record, len(c.Sizes))
		if err := c.stream(ctx, c.Gammas[job], seed, out); err != nil {
			return nil, fmt.Errorf("run %d (seed %d), online EM a = %g: %w", run, seed, c.Gammas[job], err)
		}
		return out, nil
	case job < len(c.Gammas)+len(c.Incs):
		st := c.Incs[job-len(c.Gammas)]
		ors := make([]OnlineRecord, len(c.Sizes))
		if err := (&Online{}).run(ctx, c.Order, st, seed, c.Sizes, ors); err != nil {
			return nil, fmt.Errorf("run %d (seed %d), %s: %w", run, seed, st.Label(), err)
		}
		out := make([]Record, len(ors))
		for q, r := range ors {
			out[q] = Record{"emsf", "incremental EMSF, " + st.Label(), c.Order, r.Transitions, seed, "kl_rho", r.KLRho}
		}
		return out, nil
	default:
		out := make([]Record, len(checkpoints(c.NMFSteps)))
		if err := onlineEMNMF(ctx, c.NMFSteps, seed, out); err != nil {
			return nil, fmt.Errorf("run %d (seed %d), nmf: %w", run, seed, err)
		}
		return out, nil
	}
}

// stream is online EM with exponent a on one run's stream.
func (c *OnlineEM) stream(ctx context.Context, a float64, seed uint64, out []Record) error {
	n := OnlineStates
	chain, truth, rho, err := OnlineTruth(n, OnlineConc, rand.New(rand.NewPCG(seed, 1)))
	if err != nil {
		return err
	}
	md := factor.NewRandom(n, c.Order, 1, factor.TieNone, seed)
	o, err := factor.NewOnlineEM(md, factor.OnlineEMOptions{GammaExp: a, BurnIn: c.BurnIn, Floor: c.Floor})
	if err != nil {
		return err
	}
	name := fmt.Sprintf("online EM a = %g", a)
	// Only with Floor 0 can a transition get probability 0: KL_ρ is +Inf
	// from there on.
	return streamTrajectory(ctx, chain, seed, c.Sizes, o.Add,
		func(q int) {
			out[q] = Record{"emsf", name, c.Order, c.Sizes[q], seed, "kl_rho", factor.KLRho(truth, o.Model(), rho)}
		},
		func(q int) { out[q] = Record{"emsf", name, c.Order, c.Sizes[q], seed, "kl_rho", math.Inf(1)} })
}

// nmfTruth returns the true B (M×K, entries Uniform(1, 10), the same for
// every run: spec §2.9).
func nmfTruth() []float64 {
	rng := rand.New(rand.NewPCG(nmfTruthSeed, 1))
	b := make([]float64, nmfM*nmfK)
	for k := range b {
		b[k] = 1 + 9*rng.Float64()
	}
	return b
}

// onlineEMNMF is one run of the paper's Fig. 1 setting: a stream of steps
// observations of the §4.1 model under the true B, exact online EM from
// B_1(m,k) ~ Uniform(0.5, 1.5)·ȳ(m)/(K·π₁) (spec §2.9), relative error
// after the best column permutation at the checkpoints.
func onlineEMNMF(ctx context.Context, steps int, seed uint64, out []Record) error {
	truth := nmfTruth()
	rng := rand.New(rand.NewPCG(seed, 7))
	pi1 := (1 - nmfP) / (2 - nmfP - nmfQ)
	// ȳ(m) = π₁ Σ_k B(m,k).
	b1 := make([]float64, nmfM*nmfK)
	for m := range nmfM {
		ybar := 0.0
		for k := range nmfK {
			ybar += pi1 * truth[m*nmfK+k]
		}
		for k := range nmfK {
			b1[m*nmfK+k] = (0.5 + rng.Float64()) * ybar / (nmfK * pi1)
		}
	}
	est, err := factor.NewBinaryNMFOnlineEM(b1, nmfM, nmfK, nmfP, nmfQ, nmfGammaExp, nmfBurnIn)
	if err != nil {
		return err
	}
	x := make([]int, nmfK)
	for k := range x {
		if rng.Float64() < pi1 {
			x[k] = 1
		}
	}
	y := make([]float64, nmfM)
	cps := checkpoints(steps)
	q := 0
	for t := 1; t <= steps; t++ {
		if t%1000 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if t > 1 {
			for k := range x {
				stay := nmfP
				if x[k] == 1 {
					stay = nmfQ
				}
				if rng.Float64() >= stay {
					x[k] = 1 - x[k]
				}
			}
		}
		for m := range nmfM {
			lam := 0.0
			for k := range nmfK {
				lam += truth[m*nmfK+k] * float64(x[k])
			}
			y[m] = float64(poisson(lam, rng))
		}
		if err := est.Step(y); err != nil {
			return fmt.Errorf("step %d: %w", t, err)
		}
		if t == cps[q] {
			out[q] = Record{"nmf", "exact online EM (Fig. 1)", 0, t, seed, "b_rel_error", permutedRelError(est.B(), truth, nmfM, nmfK)}
			q++
		}
	}
	return nil
}

// poisson draws a Poisson(λ) count (Knuth's method; λ here is below 60).
func poisson(lam float64, rng *rand.Rand) int {
	if lam <= 0 {
		return 0
	}
	l, k, p := math.Exp(-lam), 0, 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

// permutedRelError returns min over column permutations π of
// ‖B̂_π − B‖_F/‖B‖_F (the components are exchangeable: spec §2.8 test 4).
func permutedRelError(est, truth []float64, m, k int) float64 {
	perm := make([]int, k)
	for i := range perm {
		perm[i] = i
	}
	norm := 0.0
	for _, v := range truth {
		norm += v * v
	}
	best := math.Inf(1)
	var rec func(i int)
	rec = func(i int) {
		if i == k {
			s := 0.0
			for r := range m {
				for c := range k {
					d := est[r*k+perm[c]] - truth[r*k+c]
					s += d * d
				}
			}
			best = min(best, s)
			return
		}
		for j := i; j < k; j++ {
			perm[i], perm[j] = perm[j], perm[i]
			rec(i + 1)
			perm[i], perm[j] = perm[j], perm[i]
		}
	}
	rec(0)
	return math.Sqrt(best / norm)
}
