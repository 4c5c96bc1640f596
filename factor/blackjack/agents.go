package blackjack

import (
	"context"
	"fmt"

	"github.com/emsf/emsf/factor"
)

// The model-based agents of emsf-ijcai2015 §5 (Fig. 3): from hands played,
// count a model (CNT) or fit a stochastic factorization with a shared K
// (EMSF), then plan on it (PI, PISF) with γ = 1 and the terminal states of
// the encoding absorbing with value 0.

// EstimateEndRewards returns r̂: r̂_j is the mean reward of the transitions
// of eps that end in j (0 where none does), "an estimate of the reward
// associated with transitions ending in state j" (emsf-ijcai2015 §5).
func EstimateEndRewards(eps []Episode) []float64 {
	sum := make([]float64, NumStates)
	cnt := make([]float64, NumStates)
	for _, ep := range eps {
		for _, st := range ep.Steps {
			sum[st.Next] += st.Reward
			cnt[st.Next]++
		}
	}
	for j := range sum {
		if cnt[j] > 0 {
			sum[j] /= cnt[j]
		}
	}
	return sum
}

// PlanCNT is CNT+PI: the counted model (plain maximum likelihood, unseen
// rows uniform) and policy iteration on it. It returns a policy over all
// NumStates states.
func PlanCNT(eps []Episode) ([]int, error) {
	blocks, err := factor.EpisodeBlocks(FactorEpisodes(eps), NumStates, NumActions)
	if err != nil {
		return nil, fmt.Errorf("blackjack: CNT+PI: %w", err)
	}
	cnt, err := factor.NewCNT(NumStates, NumActions, blocks, 0)
	if err != nil {
		return nil, fmt.Errorf("blackjack: CNT+PI: %w", err)
	}
	res, err := factor.PolicyIteration(cnt, factor.ExpectedRewards(cnt, EstimateEndRewards(eps)), 1,
		factor.PlanOptions{Terminal: Terminal()})
	if err != nil {
		return nil, fmt.Errorf("blackjack: CNT+PI: %w", err)
	}
	return res.Policy, nil
}

// PlanEMSF is EMSF+PISF: an m-state factorization with a shared K fitted
// by EM from the seeded random init (factor.NewRandom(…, seed)), with
// r̄ = K r̂, planned on by PISF. It returns a policy over all NumStates
// states. It is (&EMSFPlanner{M: m, Fit: fit}).Plan(ctx, eps, seed).
func PlanEMSF(ctx context.Context, eps []Episode, m int, seed uint64, fit factor.FitOptions) ([]int, error) {
	return (&EMSFPlanner{M: m, Fit: fit}).Plan(ctx, eps, seed)
}

// EMSFPlanner is EMSF+PISF with a choice of initialisation for each fit.
// The zero options (Warm and UniformUnseen false) are PlanEMSF: a fresh
// seeded random start for every fit.
type EMSFPlanner struct {
	M   int
	Fit factor.FitOptions
	// Warm starts each fit after the first from the model the previous
	// Plan call fitted (the warm start of incremental EMSF,
	// incremental-emsf §4), mixed with weight WarmMix with the seeded random
	// init: EM drives the K entries of states never reached to 0, and a
	// new transition into one would have probability 0 under the plain
	// previous model.
	Warm bool
	// UniformUnseen sets, before a fit, the rows of D^a for the states i
	// with no transition (i, a) in the data to uniform 1/m (CNT's choice for
	// unseen rows). EM leaves rows without data unchanged, so they are
	// exactly uniform in the fitted model.
	UniformUnseen bool

	model *factor.Model // the last fitted model (for Warm)
}

// WarmMix is the weight of the random init in a warm start (see
// EMSFPlanner.Warm).
const WarmMix = 0.01

// Model returns the model the last Plan call fitted (nil before the first).
func (p *EMSFPlanner) Model() *factor.Model { return p.model }

// Plan fits the factorization to all of eps (from the previous model if
// Warm and there is one, else from factor.NewRandom(…, seed)) and returns
// the PISF policy over all NumStates states.
func (p *EMSFPlanner) Plan(ctx context.Context, eps []Episode, seed uint64) ([]int, error) {
	blocks, err := factor.EpisodeBlocks(FactorEpisodes(eps), NumStates, NumActions)
	if err != nil {
		return nil, fmt.Errorf("blackjack: EMSF+PISF: %w", err)
	}
	md := factor.NewRandom(NumStates, p.M, NumActions, factor.TieSharedK, seed)
	if p.Warm && p.model != nil {
		// (1-λ)·previous + λ·random keeps the rows of D and of K stochastic.
		mix := func(dst, prev [][]float64) {
			for b := range dst {
				for k, v := range prev[b] {
					dst[b][k] = (1-WarmMix)*v + WarmMix*dst[b][k]
				}
			}
		}
		mix(md.D, p.model.D)
		mix(md.KT, p.model.KT)
	}
	if p.UniformUnseen {
		uniformUnseenRows(md, blocks)
	}
	if _, err := factor.Fit(ctx, md, blocks, p.Fit); err != nil {
		return nil, fmt.Errorf("blackjack: EMSF+PISF: %w", err)
	}
	p.model = md
	rbar, err := factor.ReducedRewards(md, EstimateEndRewards(eps))
	if err != nil {
		return nil, fmt.Errorf("blackjack: EMSF+PISF: %w", err)
	}
	res, err := factor.PISF(md, rbar, 1, factor.PlanOptions{Terminal: Terminal()})
	if err != nil {
		return nil, fmt.Errorf("blackjack: EMSF+PISF: %w", err)
	}
	return res.Policy, nil
}

// uniformUnseenRows sets the rows of D^a of the states without data under
// action a (no row in the block of action a) to 1/m.
func uniformUnseenRows(md *factor.Model, blocks []*factor.Block) {
	seen := make([][]bool, md.U)
	for a := range seen {
		seen[a] = make([]bool, md.N)
	}
	for _, b := range blocks {
		for _, i := range b.Rows {
			seen[b.Action][i] = true
		}
	}
	for a := range md.U {
		for i := range md.N {
			if !seen[a][i] {
				row := md.DRow(a, i)
				for l := range row {
					row[l] = 1 / float64(md.M)
				}
			}
		}
	}
}
