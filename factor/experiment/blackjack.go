package experiment

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/factor/blackjack"
)

// BlackjackRow is one evaluation of one agent's greedy policy after one
// batch of one run: a row of blackjack.csv.
type BlackjackRow struct {
	Run    int
	Seed   uint64
	Agent  string
	Batch  int
	Hands  int
	Return float64
}

// Blackjack is the online blackjack experiment of incremental-emsf §5
// (Fig. 4; the batch version is emsf-ijcai2015 Fig. 3). Each run r (seed
// Seed + r) and each agent: starting with the random policy, collect a
// batch of BatchHands hands, improve the policy on all hands so far,
// evaluate its greedy policy, then collect the next batch with the
// Epsilon-greedy version of it, and so on for Batches batches
// (blackjack.Online). The agents (Agents):
//   - dealer: the dealer's policy (hit below 17), a constant baseline;
//   - Q-learning: tabular Q-learning with learning rate Alpha, learning
//     from its own hands, random in the first batch and Epsilon-greedy
//     after;
//   - CNT+PI: the counted model and policy iteration (blackjack.PlanCNT);
//   - EMSF+PISF m for each of Orders: EMSF with a shared K, refitted on
//     all hands after every batch (stopped by Converger), and PISF
//     (blackjack.EMSFPlanner). Each fit starts from a random start seeded
//     by run and batch; with UniformUnseen the rows of D of unvisited
//     state-action pairs are uniform, as CNT's; with Warm each fit but the
//     first starts from the previous batch's model (mixed 1% with the
//     random start).
//
// The paper tests each policy on 10^6 simulated hands; with EvalHands 0
// a policy's expected return is computed exactly (blackjack.Evaluate, the
// noise-free limit of that estimate); else EvalHands hands are simulated.
// The model-based agents and Q-learning of one run share their random
// stream, so their first batches (random play) are the same hands. Job k
// is run k / len(Agents()) of agent k % len(Agents()).
type Blackjack struct {
	Orders              []int
	Seed                uint64
	Batches, BatchHands int
	Epsilon, Alpha      float64
	EvalHands           int
	Converger           factor.Converger
	Warm, UniformUnseen bool
}

// blackjackAgent is one curve of the experiment.
type blackjackAgent struct {
	name string
	m    int // EMSF order; 0 for the others
}

func (x *Blackjack) agents() []blackjackAgent {
	agents := []blackjackAgent{{name: "dealer"}, {name: "Q-learning"}, {name: "CNT+PI"}}
	for _, m := range x.Orders {
		agents = append(agents, blackjackAgent{name: "EMSF+PISF", m: m})
	}
	return agents
}

// Agents returns the names of the agents, as the rows give them.
func (x *Blackjack) Agents() []string {
	var names []string
	for _, ag := range x.agents() {
		names = append(names, ag.label())
	}
	return names
}

func (ag blackjackAgent) label() string {
	if ag.m > 0 {
		return fmt.Sprintf("%s m=%d", ag.name, ag.m)
	}
	return ag.name
}

// Jobs returns the number of jobs of runs runs.
func (x *Blackjack) Jobs(runs int) int { return runs * len(x.agents()) }

// Run runs job k: its Batches rows, in batch order.
func (x *Blackjack) Run(ctx context.Context, k int) ([]BlackjackRow, error) {
	agents := x.agents()
	r, ai := k/len(agents), k%len(agents)
	ag := agents[ai]
	runSeed := x.Seed + uint64(r)
	name := ag.label()
	evalRNG := rand.New(rand.NewPCG(runSeed, 1000+uint64(ai)))
	rows := make([]BlackjackRow, x.Batches)
	report := func(b, hands int, policy []int) error {
		ret, err := evaluatePolicy(policy, x.EvalHands, evalRNG)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		rows[b-1] = BlackjackRow{r, runSeed, name, b, hands, ret}
		return nil
	}
	play := rand.New(rand.NewPCG(runSeed, 1))
	opts := blackjack.OnlineOptions{Batches: x.Batches, BatchHands: x.BatchHands, Epsilon: x.Epsilon}
	var err error
	switch ag.name {
	case "dealer":
		dealer := blackjack.DealerPolicy()
		for b := 1; b <= x.Batches && err == nil; b++ {
			err = report(b, b*x.BatchHands, dealer)
		}
	case "Q-learning":
		err = qLearning(x.Alpha, x.Epsilon, x.Batches, x.BatchHands, play, report)
	case "CNT+PI":
		err = blackjack.Online(blackjack.PlanCNT, opts, play, report)
	default:
		batch := 0
		fit := factor.FitOptions{Workers: 1, Converger: x.Converger}
		planner := &blackjack.EMSFPlanner{M: ag.m, Fit: fit, Warm: x.Warm, UniformUnseen: x.UniformUnseen}
		plan := func(eps []blackjack.Episode) ([]int, error) {
			batch++
			// A random start seeded by run and batch (with Warm only the
			// first batch's is used).
			return planner.Plan(ctx, eps, runSeed<<20|uint64(batch))
		}
		err = blackjack.Online(plan, opts, play, report)
	}
	if err != nil {
		return nil, fmt.Errorf("run %d (seed %d), %s: %w", r, runSeed, name, err)
	}
	return rows, nil
}

// BlackjackSummaries returns the mean and standard error of each agent's
// return after each batch, the hands played as the x.
func BlackjackSummaries(rows []BlackjackRow) []Summary {
	recs := make([]Record, len(rows))
	for i, r := range rows {
		recs[i] = Record{Method: r.Agent, Transitions: r.Hands, Measure: "return", Error: r.Return}
	}
	return Summarize(recs)
}

// qLearning runs Q-learning online: batches of hands played by the
// learner itself, random in the first batch (like the model-based agents'
// first batch) and ε-greedy after; its greedy policy is reported after each
// batch.
func qLearning(alpha, epsilon float64, batches, batchHands int, rng *rand.Rand, report func(batch, hands int, policy []int) error) error {
	q, err := blackjack.NewQLearner(alpha, 1)
	if err != nil {
		return err
	}
	for b := 1; b <= batches; b++ {
		for range batchHands {
			q.Episode(rng)
		}
		q.Epsilon = epsilon
		if err := report(b, b*batchHands, q.Greedy()); err != nil {
			return err
		}
	}
	return nil
}

// evaluatePolicy returns the policy's expected return per hand: exact if
// hands is 0, else the mean return of that many simulated hands.
func evaluatePolicy(policy []int, hands int, rng *rand.Rand) (float64, error) {
	if hands == 0 {
		return blackjack.Evaluate(policy)
	}
	play := blackjack.Table(policy)
	sum := 0.0
	for range hands {
		sum += blackjack.Play(play, rng).Return
	}
	return sum / float64(hands), nil
}
