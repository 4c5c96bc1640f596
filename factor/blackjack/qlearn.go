package blackjack

import (
	"fmt"
	"math/rand/v2"
)

// QLearner is tabular Q-learning (Watkins) with ε-greedy exploration and
// no discount (an episodic task): on each step (s, a, s', r),
//
//	Q(s, a) += α (r + max_a' Q(s', a') − Q(s, a)),
//
// with max_a' Q(s', a') = 0 for a terminal s'. The papers' baseline uses
// α = 0.1.
type QLearner struct {
	Q       []float64 // Q[2·s + a], s a decision state
	Alpha   float64
	Epsilon float64
}

// NewQLearner returns a learner with Q = 0.
func NewQLearner(alpha, epsilon float64) (*QLearner, error) {
	if !(alpha > 0 && alpha <= 1) || !(epsilon >= 0 && epsilon <= 1) {
		return nil, fmt.Errorf("blackjack: Q-learning: bad alpha %v or epsilon %v", alpha, epsilon)
	}
	return &QLearner{Q: make([]float64, NumDecision*NumActions), Alpha: alpha, Epsilon: epsilon}, nil
}

func (q *QLearner) greedy(s int) int {
	if q.Q[2*s+Hit] > q.Q[2*s+Stick] {
		return Hit
	}
	return Stick
}

// Act is the ε-greedy action in s.
func (q *QLearner) Act(s int, rng *rand.Rand) int {
	if rng.Float64() < q.Epsilon {
		return rng.IntN(NumActions)
	}
	return q.greedy(s)
}

// Update applies one Q-learning step.
func (q *QLearner) Update(st Step) {
	target := st.Reward
	if st.Next < NumDecision {
		target += max(q.Q[2*st.Next], q.Q[2*st.Next+1])
	}
	k := 2*st.State + st.Action
	q.Q[k] += q.Alpha * (target - q.Q[k])
}

// Episode plays one ε-greedy hand and learns from its steps.
func (q *QLearner) Episode(rng *rand.Rand) Episode {
	ep := Play(func(s int) int { return q.Act(s, rng) }, rng)
	for _, st := range ep.Steps {
		q.Update(st)
	}
	return ep
}

// Greedy returns the greedy policy (ties go to Stick).
func (q *QLearner) Greedy() []int {
	p := make([]int, NumDecision)
	for s := range p {
		p[s] = q.greedy(s)
	}
	return p
}
