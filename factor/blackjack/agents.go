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
// states.
func PlanEMSF(ctx context.Context, eps []Episode, m int, seed uint64, fit factor.FitOptions) ([]int, error) {
	blocks, err := factor.EpisodeBlocks(FactorEpisodes(eps), NumStates, NumActions)
	if err != nil {
		return nil, fmt.Errorf("blackjack: EMSF+PISF: %w", err)
	}
	md := factor.NewRandom(NumStates, m, NumActions, factor.TieSharedK, seed)
	if _, err := factor.Fit(ctx, md, blocks, fit); err != nil {
		return nil, fmt.Errorf("blackjack: EMSF+PISF: %w", err)
	}
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
