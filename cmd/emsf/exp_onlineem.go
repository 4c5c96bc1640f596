package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/emsf/emsf/factor"
)

// onlineEMConfig is the setting of emsf experiment online-em.
type onlineEMConfig struct {
	runs    int
	seed    uint64
	workers int
	// EMSF part: order, stream checkpoints, online EM exponents, burn-in,
	// floor and the incremental EMSF settings compared.
	order    int
	sizes    []int
	gammas   []float64
	burnIn   int64
	floor    float64
	incs     []onlineSetting
	nmfSteps int
}

// The paper's §4.1 setting (online-em-nmf_003): B 8×5, p, q known.
const (
	nmfM, nmfK   = 8, 5
	nmfP, nmfQ   = 0.8571, 0.6926
	nmfGammaExp  = 0.8
	nmfBurnIn    = 100
	nmfTruthSeed = 0x6e6d66 // "nmf": the true B is the same in every run
)

// onlineEMRuns runs the experiment. Per run (seed + r):
//   - "emsf": incremental-emsf Fig. 3's stream (onlineTruth: n = 100,
//     Dirichlet(0.5) rows, one trajectory) fed to online EM for each a
//     and to incremental EMSF for each (t_c, α), all from the run's random
//     model of order m; KL_ρ(P ‖ DK) at each size;
//   - "nmf": the paper's Fig. 1 setting, exact online EM
//     (factor.BinaryNMFOnlineEM) from a random B_1; relative error
//     ‖B_t − B‖_F/‖B‖_F after the best column permutation at checkpoints.
func onlineEMRuns(ctx context.Context, c onlineEMConfig) ([]record, error) {
	perRun := (len(c.gammas)+len(c.incs))*len(c.sizes) + len(checkpoints(c.nmfSteps))
	recs := make([]record, c.runs*perRun)
	jobs := c.runs * (len(c.gammas) + len(c.incs) + 1)
	err := forEach(ctx, jobs, c.workers, func(k int) error {
		per := len(c.gammas) + len(c.incs) + 1
		run, job := k/per, k%per
		seed := c.seed + uint64(run)
		base := run * perRun
		switch {
		case job < len(c.gammas):
			out := recs[base+job*len(c.sizes) : base+(job+1)*len(c.sizes)]
			return onlineEMStream(ctx, c, c.gammas[job], seed, out)
		case job < len(c.gammas)+len(c.incs):
			st := c.incs[job-len(c.gammas)]
			ors := make([]onlineRecord, len(c.sizes))
			if err := onlineRun(ctx, c.order, st, seed, c.sizes, ors); err != nil {
				return fmt.Errorf("run %d, %s: %w", run, st.label(), err)
			}
			out := recs[base+job*len(c.sizes) : base+(job+1)*len(c.sizes)]
			for q, r := range ors {
				out[q] = record{"emsf", "incremental EMSF " + st.label(), c.order, r.Transitions, seed, "kl_rho", r.KLRho}
			}
			return nil
		default:
			out := recs[base+(len(c.gammas)+len(c.incs))*len(c.sizes) : base+perRun]
			return onlineEMNMF(c.nmfSteps, seed, out)
		}
	})
	return recs, err
}

// onlineEMStream is online EM with exponent a on one run's stream.
func onlineEMStream(ctx context.Context, c onlineEMConfig, a float64, seed uint64, out []record) error {
	n := onlineStates
	chain, truth, rho, err := onlineTruth(n, onlineConc, rand.New(rand.NewPCG(seed, 1)))
	if err != nil {
		return err
	}
	md := factor.NewRandom(n, c.order, 1, factor.TieNone, seed)
	o, err := factor.NewOnlineEM(md, factor.OnlineEMOptions{GammaExp: a, BurnIn: c.burnIn, Floor: c.floor})
	if err != nil {
		return err
	}
	name := fmt.Sprintf("online EM a=%g", a)
	total := c.sizes[len(c.sizes)-1]
	seen, q := 0, 0
	var addErr error
	err = factor.Sample(chain, total, factor.SampleOptions{Mode: factor.SampleTrajectory, EpisodeLen: total},
		rand.New(rand.NewPCG(seed, 2)), func(t factor.Transition) {
			if addErr != nil {
				return
			}
			if addErr = o.Add(t.State, t.Action, t.Next, 1); addErr != nil {
				return
			}
			seen++
			if seen == c.sizes[q] {
				if addErr = ctx.Err(); addErr != nil {
					return
				}
				out[q] = record{"emsf", name, c.order, seen, seed, "kl_rho", factor.KLRho(truth, o.Model(), rho)}
				q++
			}
		})
	if err != nil {
		return err
	}
	var te *factor.TransitionError
	if errors.As(addErr, &te) { // only with --floor 0: KL_ρ is +Inf from here on
		for ; q < len(c.sizes); q++ {
			out[q] = record{"emsf", name, c.order, c.sizes[q], seed, "kl_rho", math.Inf(1)}
		}
		return nil
	}
	return addErr
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
func onlineEMNMF(steps int, seed uint64, out []record) error {
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
			out[q] = record{"nmf", "exact online EM (Fig. 1)", 0, t, seed, "b_rel_error", permutedRelError(est.B(), truth, nmfM, nmfK)}
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

// runOnlineEMExperiment is emsf experiment online-em.
func runOnlineEMExperiment(ctx context.Context, e *env, args []string) error {
	reduced := expSetting{runs: 5, sizes: "1000,3000,10000,30000,100000,300000"}
	paper := expSetting{runs: 50, sizes: "1000,3000,10000,30000,100000,300000,1000000"}
	var x expFlags
	var gammas, commitEvery, alphas string
	var burnIn int64
	var floor float64
	var m, nmfSteps int
	fs := newFlagSet(e, "experiment online-em", "experiment online-em [flags]")
	registerOnlineFlags(fs, &x, reduced, paper)
	fs.StringVar(&gammas, "gamma-exp", "0.6,0.8,1", "online EM step exponents a, comma-separated")
	fs.Int64Var(&burnIn, "burn-in", 100, "online EM burn-in t_b")
	fs.Float64Var(&floor, "online-em-floor", factor.DefaultOnlineEMFloor, "online EM floor ε")
	fs.StringVar(&commitEvery, "commit-every", "1000,10000", "incremental EMSF t_c values compared (each with every --alpha)")
	fs.StringVar(&alphas, "alpha", "0.1,1", "incremental EMSF learning rates α compared")
	fs.IntVar(&m, "order", 30, "order m of the fits on the stream")
	fs.IntVar(&nmfSteps, "nmf-steps", 20000, "observations of the paper's Fig. 1 setting (--paper: 100000)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := x.validate(fs, paper); err != nil {
		return err
	}
	if x.paper && !flagsSet(fs)["nmf-steps"] {
		nmfSteps = 100000
	}
	for k := 1; k < len(x.sizesV); k++ {
		if x.sizesV[k] <= x.sizesV[k-1] {
			return usagef("--sizes %q: must be increasing", x.sizes)
		}
	}
	as, err := floatList("gamma-exp", gammas)
	if err != nil {
		return err
	}
	for _, a := range as {
		if !(a > 0.5 && a <= 1) {
			return usagef("--gamma-exp %q: a = %v: must be in (0.5, 1]", gammas, a)
		}
	}
	tcs, err := intList("commit-every", commitEvery)
	if err != nil {
		return err
	}
	als, err := floatList("alpha", alphas)
	if err != nil {
		return err
	}
	var incs []onlineSetting
	for _, tc := range tcs {
		for _, al := range als {
			if tc < 1 || !(al > 0 && al <= 1) {
				return usagef("--commit-every %d / --alpha %v: want t_c >= 1 and α in (0, 1]", tc, al)
			}
			incs = append(incs, onlineSetting{tc, al})
		}
	}
	switch {
	case burnIn < 1:
		return usagef("--burn-in %d: must be >= 1", burnIn)
	case !(floor >= 0 && floor < 1):
		return usagef("--online-em-floor %v: must be in [0, 1)", floor)
	case m < 1 || m > onlineStates:
		return usagef("--order %d: must be in [1, %d]", m, onlineStates)
	case nmfSteps < 1:
		return usagef("--nmf-steps %d: must be >= 1", nmfSteps)
	}
	c := onlineEMConfig{runs: x.runs, seed: x.seed, workers: x.workers, order: m, sizes: x.sizesV, gammas: as,
		burnIn: burnIn, floor: floor, incs: incs, nmfSteps: nmfSteps}
	recs, err := onlineEMRuns(ctx, c)
	if err != nil {
		return err
	}
	return relatedFinish(e, x.out, "online-em", recs, []relatedPlot{
		{"online-em", "kl_rho", "emsf", fmt.Sprintf("online EM vs incremental EMSF, n = %d, m = %d (incremental-emsf Fig. 3 stream)", onlineStates, m),
			"transitions seen", "KL_ρ(P ‖ DK)", true},
		{"online-em-nmf", "b_rel_error", "nmf", "exact online EM, B 8×5, a = 0.8, t_b = 100 (online-em-nmf_003 Fig. 1)",
			"observations", "‖B_t − B‖_F / ‖B‖_F (best permutation)", true},
	})
}
