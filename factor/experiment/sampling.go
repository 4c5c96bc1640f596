package experiment

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/emsf/emsf/factor"
)

// The true model of Sampling: n states, rows of D' (n×TrueOrder) and K'
// (TrueOrder×n) from Dirichlet(0.5).
const (
	SamplingStates    = 100
	SamplingTrueOrder = 20
)

// samplingModes are Sampling's start-state distributions, in job order.
func samplingModes() []string { return []string{factor.SampleUniform, factor.SampleSkewed} }

// Sampling is incremental-emsf Fig. 2: P = D'K' (SamplingStates states,
// rows Dirichlet(0.5)); τ transitions whose start states are drawn
// uniformly, or with 90% of the mass on a random half of the states
// ("skewed"); EMSF and KLM of order M on the same sample from the same
// random start. The paper says only "approximation error"; its point is
// how each method weighs the rows of P by the sampling distribution ρ, so
// the error is weighted by ρ (estimated by the sample's start-state
// frequencies ρ̂_i = x_i/N, the weights of incremental-emsf eq. 11):
//   - frobenius_rho = FrobeniusRho: for uniform ρ the ‖P − DK‖_F of the
//     sample-size experiment;
//   - kl_rho = KL_ρ(P ‖ DK) (eq. 12, the paper's measure of Fig. 3): +Inf
//     whenever a fit gives probability 0 to a transition P allows, which
//     KLM does on Dirichlet(0.5) data (unseen entries of P̂ are driven to 0).
//
// Job k is run k / (len(Sizes)·2) (seed Seed + run), size and mode the
// rest.
type Sampling struct {
	M         int
	Sizes     []int
	Seed      uint64
	Converger factor.Converger
}

// Jobs returns the number of jobs of runs runs.
func (x *Sampling) Jobs(runs int) int { return runs * len(x.Sizes) * len(samplingModes()) }

// Rows returns the number of rows of a job: EMSF and KLM, two measures.
func (x *Sampling) Rows() int { return 4 }

// Run runs job k.
func (x *Sampling) Run(ctx context.Context, k int) ([]Record, error) {
	per := len(x.Sizes) * len(samplingModes())
	r, rest := k/per, k%per
	si, mi := rest/len(samplingModes()), rest%len(samplingModes())
	seed, size, mode, n, m := x.Seed+uint64(r), x.Sizes[si], samplingModes()[mi], SamplingStates, x.M
	truth, err := factor.TrueModel(n, SamplingTrueOrder, 1, factor.RowsDirichlet, 0.5, rand.New(rand.NewPCG(seed, 1)))
	if err != nil {
		return nil, err
	}
	blocks, rho, err := SampleBlocks(truth, size, mode, rand.New(rand.NewPCG(seed, 2+uint64(si))))
	if err != nil {
		return nil, err
	}
	md, err := FitEMSF(ctx, n, m, 1, blocks, seed, x.Converger)
	if err != nil {
		return nil, err
	}
	klm, _, err := factor.KLM(ctx, n, m, 1, blocks, seed, factor.KLMOptions{Converger: x.Converger})
	if err != nil {
		return nil, fmt.Errorf("KLM m=%d seed %d: %w", m, seed, err)
	}
	return []Record{
		{mode, "EMSF", m, size, seed, "frobenius_rho", FrobeniusRho(truth, md, rho)},
		{mode, "KLM", m, size, seed, "frobenius_rho", FrobeniusRho(truth, klm, rho)},
		{mode, "EMSF", m, size, seed, "kl_rho", factor.KLRho(truth, md, rho)},
		{mode, "KLM", m, size, seed, "kl_rho", factor.KLRho(truth, klm, rho)},
	}, nil
}
