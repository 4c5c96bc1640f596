package main

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/factor/blackjack"
	"github.com/emsf/emsf/shard"
)

// epcaConfig is the setting of emsf experiment epca.
type epcaConfig struct {
	runs, workers      int
	seed               uint64
	bases              []int
	transitions, hands int
	conv, epcaConv     factor.Converger
	epsilon, smooth    float64
}

// epcaData is one run's training and held-out counts of one setting, and
// the truth where it is known.
type epcaData struct {
	n, u        int
	train, held []*factor.Block
	truth       factor.Estimate // nil for blackjack
	rho         []float64
}

// epcaGen draws gen data: P = D'K' (n = 100, true order 20, Dirichlet(0.5)
// rows), transitions sampled uniformly, a fifth as many held out.
func epcaGen(c epcaConfig, seed uint64) (*epcaData, error) {
	truth, err := factor.TrueModel(100, 20, 1, factor.RowsDirichlet, 0.5, rand.New(rand.NewPCG(seed, 1)))
	if err != nil {
		return nil, err
	}
	train, rho, err := sampleBlocks(truth, c.transitions, factor.SampleUniform, rand.New(rand.NewPCG(seed, 2)))
	if err != nil {
		return nil, err
	}
	held, _, err := sampleBlocks(truth, max(1, c.transitions/5), factor.SampleUniform, rand.New(rand.NewPCG(seed, 3)))
	if err != nil {
		return nil, err
	}
	return &epcaData{n: 100, u: 1, train: train, held: held, truth: truth, rho: rho}, nil
}

// epcaBlackjack plays hands of blackjack with a uniformly random policy
// (hit or stick with probability ½ in every decision) and counts their
// transitions (n = 203 states, u = 2 actions); a fifth as many hands are
// held out.
func epcaBlackjack(c epcaConfig, seed uint64) (*epcaData, error) {
	count := func(hands int, rng *rand.Rand) ([]*factor.Block, error) {
		policy := func(int) int { return rng.IntN(2) }
		var ct shard.Counter
		for range hands {
			for _, st := range blackjack.Play(policy, rng).Steps {
				if err := ct.Add(st.State, st.Action, st.Next, 1); err != nil {
					return nil, err
				}
			}
		}
		return ct.Matrices(2), nil
	}
	train, err := count(c.hands, rand.New(rand.NewPCG(seed, 4)))
	if err != nil {
		return nil, err
	}
	held, err := count(max(1, c.hands/5), rand.New(rand.NewPCG(seed, 5)))
	if err != nil {
		return nil, err
	}
	return &epcaData{n: blackjack.NumStates, u: 2, train: train, held: held}, nil
}

// epcaMeasures returns the records of one estimate: held-out
// log-likelihood per transition, the mean KL(P̂_i ‖ P̃_i) over the seen
// training rows (epca_004's "average KL between beliefs and
// reconstructions"), and KL_ρ(P ‖ P̃) where the truth is known.
func epcaMeasures(d *epcaData, est factor.Estimate, setting, method string, x int, seed uint64) ([]record, error) {
	ho, err := factor.HeldOut(est, d.held)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", setting, method, err)
	}
	cnt, err := factor.NewCNT(d.n, d.u, d.train, 0)
	if err != nil {
		return nil, err
	}
	p, q := make([]float64, d.n), make([]float64, d.n)
	kl, rows := 0.0, 0
	for a := range d.u {
		for i := range d.n {
			if cnt.RowTotal(a, i) == 0 {
				continue
			}
			cnt.Row(a, i, p)
			est.Row(a, i, q)
			kl += factor.KL(p, q)
			rows++
		}
	}
	out := []record{
		{setting, method, 0, x, seed, "heldout_loglik", ho},
		{setting, method, 0, x, seed, "row_kl", kl / float64(rows)},
	}
	if d.truth != nil {
		out = append(out, record{setting, method, 0, x, seed, "kl_rho", factor.KLRho(d.truth, est, d.rho)})
	}
	return out, nil
}

// epcaRuns runs the experiment: per run, setting (gen, blackjack) and
// number of bases l, E-PCA with l bases (the all-ones one included) and
// EMSF of order m = l, on the same training counts; CNT (add-one
// smoothing) at every l for reference.
func epcaRuns(ctx context.Context, c epcaConfig) ([]record, error) {
	settings := []string{"gen", "blackjack"}
	jobs := c.runs * len(settings) * len(c.bases)
	out := make([][]record, jobs)
	err := forEach(ctx, jobs, c.workers, func(k int) error {
		run, rest := k/(len(settings)*len(c.bases)), k%(len(settings)*len(c.bases))
		setting, l := settings[rest/len(c.bases)], c.bases[rest%len(c.bases)]
		seed := c.seed + uint64(run)
		var d *epcaData
		var err error
		if setting == "gen" {
			d, err = epcaGen(c, seed)
		} else {
			d, err = epcaBlackjack(c, seed)
		}
		if err != nil {
			return err
		}
		if l > d.n {
			return fmt.Errorf("%d bases: more than the %d states", l, d.n)
		}
		e, _, err := factor.FitEPCA(ctx, d.n, d.u, d.train, factor.EPCAOptions{Bases: l, Epsilon: c.epsilon, Converger: c.epcaConv, Seed: seed})
		if err != nil {
			return fmt.Errorf("%s E-PCA l=%d: %w", setting, l, err)
		}
		md := factor.NewRandom(d.n, l, d.u, factor.TieNone, seed)
		if _, err := factor.Fit(ctx, md, d.train, factor.FitOptions{Converger: c.conv}); err != nil {
			return fmt.Errorf("%s EMSF m=%d: %w", setting, l, err)
		}
		cnt, err := factor.NewCNT(d.n, d.u, d.train, 1)
		if err != nil {
			return err
		}
		for _, m := range []struct {
			name string
			est  factor.Estimate
		}{{"E-PCA", mixUniform{e, c.smooth}}, {"EMSF", mixUniform{md, c.smooth}}, {"CNT (add-one)", cnt}} {
			recs, err := epcaMeasures(d, m.est, setting, m.name, l, seed)
			if err != nil {
				return err
			}
			out[k] = append(out[k], recs...)
		}
		return nil
	})
	var recs []record
	for _, r := range out {
		recs = append(recs, r...)
	}
	return recs, err
}

// runEPCA is emsf experiment epca.
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
	c := epcaConfig{runs: x.runs, workers: x.workers, seed: x.seed, bases: ls, transitions: x.sizesV[0], hands: hands,
		conv: x.converger(), epcaConv: factor.Converger{Tol: x.tol, MaxIter: epcaIters}, epsilon: eps, smooth: smooth}
	recs, err := epcaRuns(ctx, c)
	if err != nil {
		return err
	}
	return relatedFinish(e, x.out, "epca", recs, []relatedPlot{
		{"epca", "heldout_loglik", "gen", fmt.Sprintf("gen data (n = 100, true order 20, %d transitions): E-PCA vs EMSF", c.transitions),
			"bases l = order m", "held-out log-likelihood per transition", false},
		{"epca-blackjack", "heldout_loglik", "blackjack", fmt.Sprintf("blackjack, random policy, %d hands: E-PCA vs EMSF", hands),
			"bases l = order m", "held-out log-likelihood per transition", false},
		{"epca-kl", "kl_rho", "gen", "gen data: KL_ρ(P ‖ estimate)", "bases l = order m", "KL_ρ", true},
	})
}

// mixUniform is an estimate mixed with the uniform distribution:
// (1−δ)·P̃ + δ/n.
type mixUniform struct {
	factor.Estimate
	delta float64
}

func (m mixUniform) Prob(a, i, j int) float64 {
	return (1-m.delta)*m.Estimate.Prob(a, i, j) + m.delta/float64(m.States())
}

func (m mixUniform) Row(a, i int, dst []float64) {
	m.Estimate.Row(a, i, dst)
	for j := range dst {
		dst[j] = (1-m.delta)*dst[j] + m.delta/float64(len(dst))
	}
}
