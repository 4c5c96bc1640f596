package main

import (
	"context"
	"fmt"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/factor/experiment"
)

// runEPCA is emsf experiment epca (see experiment.EPCA).
func runEPCA(ctx context.Context, e *env, args []string) error {
	reduced := expSetting{runs: 3, sizes: "20000"}
	paper := expSetting{runs: 20, sizes: "100000"}
	var x expFlags
	var bases string
	var hands int
	var eps, smooth float64
	var epcaIters int
	fs := newFlagSet(e, "experiment epca", "experiment epca [flags]")
	x.register(fs, reduced, paper)
	fs.StringVar(&bases, "bases", "1,2,4,8,16", "numbers of bases l of E-PCA (the all-ones one included) = orders m of EMSF (--paper: 1,2,3,4,6,8,12,16,20)")
	fs.IntVar(&hands, "hands", 20000, "blackjack hands played for training (a fifth as many are held out; --paper: 100000)")
	fs.Float64Var(&eps, "epsilon", 1e-5, "E-PCA's ε (epca_004: 1e-5)")
	fs.Float64Var(&smooth, "smooth", 1e-4, "E-PCA and EMSF estimates are mixed with uniform, (1-δ)P̃ + δ/n, by this δ before scoring (both give some held-out transitions probability 0 otherwise)")
	fs.IntVar(&epcaIters, "epca-iters", 50, "E-PCA sweeps at most (each a V and a U half-step; --tol applies too; --paper: 300)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := x.validate(fs, paper); err != nil {
		return err
	}
	set := flagsSet(fs)
	if x.paper && !set["bases"] {
		bases = "1,2,3,4,6,8,12,16,20"
	}
	if x.paper && !set["hands"] {
		hands = 100000
	}
	if x.paper && !set["epca-iters"] {
		epcaIters = 300
	}
	ls, err := intList("bases", bases)
	if err != nil {
		return err
	}
	for _, l := range ls {
		if l < 1 || l > 100 {
			return usagef("--bases %q: %d: must be in [1, 100]", bases, l)
		}
	}
	if hands < 1 || epcaIters < 1 || !(eps >= 0) || !(smooth > 0 && smooth < 1) {
		return usagef("--hands %d, --epca-iters %d (>= 1), --epsilon %v (>= 0), --smooth %v (in (0, 1)): out of range", hands, epcaIters, eps, smooth)
	}
	job := &experiment.EPCA{Bases: ls, Transitions: x.sizesV[0], Hands: hands, Epsilon: eps, Smooth: smooth,
		Converger: x.converger(), EPCAConv: factor.Converger{Tol: x.tol, MaxIter: epcaIters}, Seed: x.seed}
	return runRelated(ctx, e, &x, "epca", job.Jobs(x.runs), job.Run, xIs("bases"), []relatedPlot{
		{"epca", "heldout_loglik", "gen", fmt.Sprintf("gen data (n = 100, true order 20, %d transitions): E-PCA vs EMSF", job.Transitions),
			"bases l = order m", "held-out log-likelihood per transition", false},
		{"epca-blackjack", "heldout_loglik", "blackjack", fmt.Sprintf("blackjack, random policy, %d hands: E-PCA vs EMSF", hands),
			"bases l = order m", "held-out log-likelihood per transition", false},
		{"epca-kl", "kl_rho", "gen", "gen data: ρ-weighted KL divergence of each estimate from the true P", "bases l = order m", "ρ-weighted KL(P ‖ estimate)", true},
	})
}
