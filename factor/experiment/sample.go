package experiment

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/emsf/emsf/factor"
)

// SampleBlocks draws count transitions from truth and returns their count
// matrices, one block per action, and the empirical distribution of the
// start states (ρ̂_i = x_i / N).
func SampleBlocks(truth *factor.Model, count int, mode string, rng *rand.Rand) ([]*factor.Block, []float64, error) {
	var ct factor.Tally
	rho := make([]float64, truth.N)
	var addErr error
	err := factor.Sample(truth, count, factor.SampleOptions{Mode: mode}, rng, func(t factor.Transition) {
		if addErr == nil {
			addErr = ct.Add(t.State, t.Action, t.Next, 1)
		}
		rho[t.State]++
	})
	if err != nil {
		return nil, nil, err
	}
	if addErr != nil {
		return nil, nil, addErr
	}
	for i := range rho {
		rho[i] /= float64(count)
	}
	blocks, err := ct.Blocks(truth.U)
	return blocks, rho, err
}

// FitEMSF fits EMSF of order m from the random start of seed, on one
// goroutine (the jobs run in parallel).
func FitEMSF(ctx context.Context, n, m, u int, blocks []*factor.Block, seed uint64, conv factor.Converger) (*factor.Model, error) {
	md := factor.NewRandom(n, m, u, factor.TieNone, seed)
	if _, err := factor.Fit(ctx, md, blocks, factor.FitOptions{Workers: 1, Converger: conv}); err != nil {
		return nil, fmt.Errorf("EMSF m=%d seed %d: %w", m, seed, err)
	}
	return md, nil
}

// FrobeniusRho returns the Frobenius error with row (state i, action a)
// weighted by n·u·w_ai: sqrt(Σ_a Σ_i n·u·w_ai ‖P^a_i − P̃^a_i‖²), with
// w_ai = rho[a·n+i] when len(rho) = u·n, or rho[i]/u when len(rho) = n.
// For uniform weights it is ‖P − P̃‖_F.
func FrobeniusRho(truth, est factor.Estimate, rho []float64) float64 {
	n, u := truth.States(), truth.Actions()
	p, q := make([]float64, n), make([]float64, n)
	s := 0.0
	for a := range u {
		for i := range n {
			w := rho[i] / float64(u)
			if len(rho) == u*n {
				w = rho[a*n+i]
			}
			if w == 0 {
				continue
			}
			truth.Row(a, i, p)
			est.Row(a, i, q)
			r := 0.0
			for j := range p {
				d := p[j] - q[j]
				r += d * d
			}
			s += float64(n*u) * w * r
		}
	}
	return math.Sqrt(s)
}
