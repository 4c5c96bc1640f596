package experiment

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/factor/blackjack"
)

// epcaSettings are EPCA's data sets, in job order.
func epcaSettings() []string { return []string{"gen", "blackjack"} }

// EPCA is epca_004: E-PCA (exponential link, the all-ones basis among the
// l) against EMSF of order m = l, on the same training counts, by number
// of bases. Per run (seed Seed + r) and setting: "gen", P = D'K' (n = 100,
// true order 20, Dirichlet(0.5) rows), Transitions uniform transitions and
// a fifth as many held out; "blackjack", Hands hands of a uniformly random
// policy and a fifth as many held out. E-PCA (EPCAConv, Epsilon) and EMSF
// (Converger) estimates are mixed with uniform by Smooth before scoring;
// CNT (add-one smoothing) at every l for reference. The measures (x = l)
// are epcaMeasures'.
//
// Job k is run k / (2·len(Bases)), then setting, then l.
type EPCA struct {
	Bases              []int
	Transitions, Hands int
	Epsilon, Smooth    float64
	Converger          factor.Converger
	EPCAConv           factor.Converger
	Seed               uint64
}

// Jobs returns the number of jobs of runs runs.
func (c *EPCA) Jobs(runs int) int { return runs * len(epcaSettings()) * len(c.Bases) }

// Run runs job k.
func (c *EPCA) Run(ctx context.Context, k int) ([]Record, error) {
	per := len(epcaSettings()) * len(c.Bases)
	run, rest := k/per, k%per
	setting, l := epcaSettings()[rest/len(c.Bases)], c.Bases[rest%len(c.Bases)]
	seed := c.Seed + uint64(run)
	var d *epcaData
	var err error
	if setting == "gen" {
		d, err = epcaGen(c.Transitions, seed)
	} else {
		d, err = epcaBlackjack(c.Hands, seed)
	}
	if err != nil {
		return nil, err
	}
	if l > d.n {
		return nil, fmt.Errorf("%s: %d bases: more than the %d states", setting, l, d.n)
	}
	e, _, err := factor.FitEPCA(ctx, d.n, d.u, d.train, factor.EPCAOptions{Bases: l, Epsilon: c.Epsilon, Converger: c.EPCAConv, Seed: seed})
	if err != nil {
		return nil, fmt.Errorf("run %d (seed %d), %s E-PCA l=%d: %w", run, seed, setting, l, err)
	}
	md := factor.NewRandom(d.n, l, d.u, factor.TieNone, seed)
	// One goroutine per fit: the jobs are the parallelism.
	if _, err := factor.Fit(ctx, md, d.train, factor.FitOptions{Workers: 1, Converger: c.Converger}); err != nil {
		return nil, fmt.Errorf("run %d (seed %d), %s EMSF m=%d: %w", run, seed, setting, l, err)
	}
	cnt, err := factor.NewCNT(d.n, d.u, d.train, 1)
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, m := range []struct {
		name string
		est  factor.Estimate
	}{{"E-PCA", mixUniform{e, c.Smooth}}, {"EMSF", mixUniform{md, c.Smooth}}, {"CNT (add-one)", cnt}} {
		recs, err := epcaMeasures(d, m.est, setting, m.name, l, seed)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	return out, nil
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
func epcaGen(transitions int, seed uint64) (*epcaData, error) {
	truth, err := factor.TrueModel(100, 20, 1, factor.RowsDirichlet, 0.5, rand.New(rand.NewPCG(seed, 1)))
	if err != nil {
		return nil, err
	}
	train, rho, err := SampleBlocks(truth, transitions, factor.SampleUniform, rand.New(rand.NewPCG(seed, 2)))
	if err != nil {
		return nil, err
	}
	held, _, err := SampleBlocks(truth, max(1, transitions/5), factor.SampleUniform, rand.New(rand.NewPCG(seed, 3)))
	if err != nil {
		return nil, err
	}
	return &epcaData{n: 100, u: 1, train: train, held: held, truth: truth, rho: rho}, nil
}

// epcaBlackjack plays hands of blackjack with a uniformly random policy
// (hit or stick with probability ½ in every decision) and counts their
// transitions (n = 203 states, u = 2 actions); a fifth as many hands are
// held out.
func epcaBlackjack(hands int, seed uint64) (*epcaData, error) {
	count := func(hands int, rng *rand.Rand) ([]*factor.Block, error) {
		policy := func(int) int { return rng.IntN(2) }
		var ct factor.Tally
		for range hands {
			for _, st := range blackjack.Play(policy, rng).Steps {
				if err := ct.Add(st.State, st.Action, st.Next, 1); err != nil {
					return nil, err
				}
			}
		}
		return ct.Blocks(2)
	}
	train, err := count(hands, rand.New(rand.NewPCG(seed, 4)))
	if err != nil {
		return nil, err
	}
	held, err := count(max(1, hands/5), rand.New(rand.NewPCG(seed, 5)))
	if err != nil {
		return nil, err
	}
	return &epcaData{n: blackjack.NumStates, u: 2, train: train, held: held}, nil
}

// epcaMeasures returns the records of one estimate: held-out
// log-likelihood per transition, the mean KL(P̂_i ‖ P̃_i) over the seen
// training rows (epca_004's "average KL between beliefs and
// reconstructions"), and KL_ρ(P ‖ P̃) where the truth is known.
func epcaMeasures(d *epcaData, est factor.Estimate, setting, method string, x int, seed uint64) ([]Record, error) {
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
	out := []Record{
		{setting, method, 0, x, seed, "heldout_loglik", ho},
		{setting, method, 0, x, seed, "row_kl", kl / float64(rows)},
	}
	if d.truth != nil {
		out = append(out, Record{setting, method, 0, x, seed, "kl_rho", factor.KLRho(d.truth, est, d.rho)})
	}
	return out, nil
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
