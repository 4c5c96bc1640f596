package main

import (
	"context"
	"fmt"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/factor/experiment"
)

// runOnlineEMExperiment is emsf experiment online-em (see
// experiment.OnlineEM).
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
	var incs []experiment.OnlineSetting
	for _, tc := range tcs {
		for _, al := range als {
			if tc < 1 || !(al > 0 && al <= 1) {
				return usagef("--commit-every %d / --alpha %v: want t_c >= 1 and α in (0, 1]", tc, al)
			}
			incs = append(incs, experiment.OnlineSetting{CommitEvery: tc, Alpha: al})
		}
	}
	switch {
	case burnIn < 1:
		return usagef("--burn-in %d: must be >= 1", burnIn)
	case !(floor >= 0 && floor < 1):
		return usagef("--online-em-floor %v: must be in [0, 1)", floor)
	case m < 1 || m > experiment.OnlineStates:
		return usagef("--order %d: must be in [1, %d]", m, experiment.OnlineStates)
	case nmfSteps < 1:
		return usagef("--nmf-steps %d: must be >= 1", nmfSteps)
	}
	job := &experiment.OnlineEM{Order: m, Sizes: x.sizesV, Gammas: as, BurnIn: burnIn, Floor: floor, Incs: incs,
		NMFSteps: nmfSteps, Seed: x.seed}
	// The online EM and incremental EMSF curves are by transitions seen,
	// the exact online EM of Fig. 1 by observations (columns of V).
	xName := func(r experiment.Record) string {
		if r.Setting == "nmf" {
			return "observations"
		}
		return "transitions"
	}
	return runRelated(ctx, e, &x, "online-em", job.Jobs(x.runs), job.Run, xName, []relatedPlot{
		{"online-em", "kl_rho", "emsf", fmt.Sprintf("online EM vs incremental EMSF, n = %d, m = %d (incremental-emsf Fig. 3 stream)", experiment.OnlineStates, m),
			"transitions seen", "ρ-weighted KL divergence KL(P ‖ DK)", true},
		{"online-em-nmf", "b_rel_error", "nmf", "exact online EM, B 8×5, a = 0.8, M-steps from observation 100 (online-em-nmf paper, Fig. 1)",
			"observations", "relative Frobenius error of B (best column permutation)", true},
	})
}
