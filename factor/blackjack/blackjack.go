// Package blackjack is the game of blackjack exactly as Sutton & Barto
// (1998) §5.1 describe it, the test problem of emsf-ijcai2015 §5 (Fig. 3)
// and incremental-emsf §5: a simulator, the exact (infinite-deck) model
// solved by dynamic programming, and a Q-learning agent. It is pure: every
// random draw comes from an injected *rand.Rand.
//
// Rules (S&B §5.1):
//   - infinite deck (cards drawn with replacement): 1 (ace) to 9 with
//     probability 1/13 each, 10 (ten, jack, queen, king) with 4/13;
//   - an ace counts 11 when that does not bust the hand ("usable"), else 1;
//   - player and dealer get two cards; one of the dealer's is showing;
//   - a player natural (ace + ten-card) wins +1 unless the dealer also has
//     one (draw, 0); the hand then has no decision. A dealer natural is an
//     ordinary 21 otherwise: the player plays on and a player 21 draws;
//   - the player automatically hits below 12 (no decision there), then
//     chooses hit or stick; going over 21 loses (−1) at once;
//   - the dealer hits below 17 and sticks on any sum of 17 or more, soft 17
//     included; a dealer bust wins for the player (+1), otherwise the closer
//     sum to 21 wins (±1) and equal sums draw (0). No doubling, no splits.
//
// State encoding (NumStates = 203):
//
//	index = 100·usable + 10·(dealer − 1) + (sum − 12)   for the 200 decision
//	        states: player sum 12–21, dealer's showing card 1–10 (1 = ace),
//	        usable ∈ {0, 1};
//	Lose = 200, Draw = 201, Win = 202: the terminal states an episode ends
//	        in; the reward of a transition is the reward of its end state
//	        (EndRewards: −1, 0, +1), as emsf-ijcai2015 §5 assumes (r̄ = K r̂).
//
// Actions: Stick = 0, Hit = 1.
package blackjack

import (
	"fmt"
	"math/rand/v2"

	"github.com/emsf/emsf/factor"
)

// Actions.
const (
	Stick      = 0
	Hit        = 1
	NumActions = 2
)

// States (see the package comment for the encoding).
const (
	NumDecision = 200
	Lose        = 200
	Draw        = 201
	Win         = 202
	NumStates   = 203
)

// State is a decision state: the player's sum (12–21), the dealer's
// showing card (1–10, 1 = ace) and whether the player holds a usable ace.
type State struct {
	Sum, Dealer int
	Usable      bool
}

// Index returns the state's index in [0, NumDecision). It panics for a
// state out of range (a programmer error).
func (s State) Index() int {
	if s.Sum < 12 || s.Sum > 21 || s.Dealer < 1 || s.Dealer > 10 {
		panic(fmt.Sprintf("blackjack: state %+v out of range", s))
	}
	u := 0
	if s.Usable {
		u = 1
	}
	return 100*u + 10*(s.Dealer-1) + s.Sum - 12
}

// Decode is the inverse of Index; ok is false for a terminal index.
func Decode(i int) (s State, ok bool) {
	if i < 0 || i >= NumDecision {
		return State{}, false
	}
	return State{Sum: 12 + i%10, Dealer: 1 + (i/10)%10, Usable: i >= 100}, true
}

// Terminal returns the terminal flags of the NumStates states (for
// factor.PlanOptions.Terminal).
func Terminal() []bool {
	t := make([]bool, NumStates)
	t[Lose], t[Draw], t[Win] = true, true, true
	return t
}

// EndRewards returns r̂: the reward of entering each state (−1 for Lose,
// +1 for Win, 0 otherwise).
func EndRewards() []float64 {
	r := make([]float64, NumStates)
	r[Lose], r[Win] = -1, 1
	return r
}

// cardProb is the probability of drawing card c (1–10).
func cardProb(c int) float64 {
	if c == 10 {
		return 4.0 / 13
	}
	return 1.0 / 13
}

// Card draws a card: 1–9 with probability 1/13, 10 with 4/13.
func Card(rng *rand.Rand) int { return min(rng.IntN(13)+1, 10) }

// hand is a hand's hard total (aces as 1) and whether it holds an ace.
type hand struct {
	hard int
	ace  bool
}

func (h hand) add(c int) hand { return hand{h.hard + c, h.ace || c == 1} }

// total counts one ace as 11 when that does not bust.
func (h hand) total() (sum int, usable bool) {
	if h.ace && h.hard+10 <= 21 {
		return h.hard + 10, true
	}
	return h.hard, false
}

// Policy returns the action (Stick or Hit) in decision state s.
type Policy func(s int) int

// Table turns a table of actions indexed by state (at least NumDecision
// entries) into a Policy.
func Table(actions []int) Policy { return func(s int) int { return actions[s] } }

// ThresholdPolicy sticks on sums ≥ stickAt and hits below (S&B §5.1's
// example policy is ThresholdPolicy(20)).
func ThresholdPolicy(stickAt int) []int {
	p := make([]int, NumDecision)
	for i := range p {
		s, _ := Decode(i)
		if s.Sum < stickAt {
			p[i] = Hit
		}
	}
	return p
}

// DealerPolicy is the dealer's strategy played by the player: hit below 17,
// stick on 17 or more (the baseline of emsf-ijcai2015 Fig. 3).
func DealerPolicy() []int { return ThresholdPolicy(17) }

// Step is one transition: action Action taken in decision state State led
// to Next (a decision state or a terminal one) with reward Reward.
type Step struct {
	State, Action, Next int
	Reward              float64
}

// Episode is one hand. A natural hand has no step.
type Episode struct {
	Steps   []Step
	Return  float64
	Natural bool
}

// Play deals and plays one hand with the player's policy.
func Play(policy Policy, rng *rand.Rand) Episode {
	var player, dealer hand
	player = player.add(Card(rng)).add(Card(rng))
	show := Card(rng)
	dealer = dealer.add(show).add(Card(rng))
	psum, _ := player.total()
	dsum, _ := dealer.total()
	if psum == 21 {
		ret := 1.0
		if dsum == 21 {
			ret = 0
		}
		return Episode{Return: ret, Natural: true}
	}
	for psum < 12 {
		player = player.add(Card(rng))
		psum, _ = player.total()
	}
	var ep Episode
	for {
		sum, usable := player.total()
		s := State{Sum: sum, Dealer: show, Usable: usable}.Index()
		if policy(s) == Hit {
			player = player.add(Card(rng))
			if nsum, nu := player.total(); nsum > 21 {
				ep.Steps = append(ep.Steps, Step{s, Hit, Lose, -1})
				ep.Return = -1
				return ep
			} else {
				ep.Steps = append(ep.Steps, Step{s, Hit, State{Sum: nsum, Dealer: show, Usable: nu}.Index(), 0})
			}
			continue
		}
		for dsum < 17 {
			dealer = dealer.add(Card(rng))
			dsum, _ = dealer.total()
		}
		end, r := Draw, 0.0
		switch {
		case dsum > 21 || sum > dsum:
			end, r = Win, 1
		case sum < dsum:
			end, r = Lose, -1
		}
		ep.Steps = append(ep.Steps, Step{s, Stick, end, r})
		ep.Return = r
		return ep
	}
}

// FactorEpisodes converts hands to factor.Episode (states and actions; the
// last state of each is terminal) for factor.EpisodeBlocks. Naturals, which
// have no transition, are left out.
func FactorEpisodes(eps []Episode) []factor.Episode {
	out := make([]factor.Episode, 0, len(eps))
	for _, ep := range eps {
		if len(ep.Steps) == 0 {
			continue
		}
		fe := factor.Episode{States: make([]int, 0, len(ep.Steps)+1), Actions: make([]int, 0, len(ep.Steps))}
		for _, st := range ep.Steps {
			fe.States = append(fe.States, st.State)
			fe.Actions = append(fe.Actions, st.Action)
		}
		fe.States = append(fe.States, ep.Steps[len(ep.Steps)-1].Next)
		out = append(out, fe)
	}
	return out
}
