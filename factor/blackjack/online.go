package blackjack

import (
	"fmt"
	"math/rand/v2"
)

// Planner turns all hands played so far into a policy (at least
// NumDecision entries), e.g. PlanCNT or a closure over PlanEMSF.
type Planner func(eps []Episode) ([]int, error)

// OnlineOptions configures Online.
type OnlineOptions struct {
	// Batches is the number of collect-and-plan rounds (> 0).
	Batches int
	// BatchHands is the number of hands per batch (0: 100, as in
	// incremental-emsf §5).
	BatchHands int
	// Epsilon is the exploration rate of the collecting policy after the
	// first batch (0: 0.15, as in incremental-emsf §5).
	Epsilon float64
}

// Online is the online loop of incremental-emsf §5: starting with a random
// policy π, collect a batch of hands, plan on all hands so far to improve π,
// report π, then collect the next batch with an ε-greedy version of π, and
// so on. report receives the batch number (1-based), the number of hands
// played so far and the policy; an error from plan or report stops the loop.
func Online(plan Planner, opts OnlineOptions, rng *rand.Rand, report func(batch, hands int, policy []int) error) error {
	if opts.Batches <= 0 {
		return fmt.Errorf("blackjack: online: %d batches, want > 0", opts.Batches)
	}
	size := opts.BatchHands
	if size == 0 {
		size = 100
	}
	eps := opts.Epsilon
	if eps == 0 {
		eps = 0.15
	}
	if size < 0 || !(eps > 0 && eps <= 1) {
		return fmt.Errorf("blackjack: online: bad batch size %d or epsilon %v", size, eps)
	}
	var hands []Episode
	var policy []int // nil: the random policy
	act := func(s int) int {
		if policy == nil || rng.Float64() < eps {
			return rng.IntN(NumActions)
		}
		return policy[s]
	}
	for b := 1; b <= opts.Batches; b++ {
		for range size {
			hands = append(hands, Play(act, rng))
		}
		p, err := plan(hands)
		if err != nil {
			return fmt.Errorf("blackjack: online batch %d: %w", b, err)
		}
		if len(p) < NumDecision {
			return fmt.Errorf("blackjack: online batch %d: policy has %d entries, want %d", b, len(p), NumDecision)
		}
		policy = p
		if err := report(b, len(hands), policy); err != nil {
			return fmt.Errorf("blackjack: online batch %d: %w", b, err)
		}
	}
	return nil
}
