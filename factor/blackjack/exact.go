package blackjack

import "fmt"

// The exact model: with an infinite deck, the dealer's final sum depends
// only on the showing card, and the player's hits move (sum, usable) within
// a DAG (non-usable sums only increase; usable sums increase or turn
// non-usable), so a fixed policy's value and the optimal value are computed
// exactly by one backward pass, no iteration needed.

// dealerFinal[c][k] is the probability that a dealer showing c ends on
// 17 + k (k = 0..4) or busts (k = 5).
type dealerFinal [11][6]float64

func newDealerFinal() *dealerFinal {
	var df dealerFinal
	// memo over hands (hard ≤ 26, ace): distribution of the final outcome.
	type key struct {
		hard int
		ace  bool
	}
	memo := map[key][6]float64{}
	var dist func(h hand) [6]float64
	dist = func(h hand) [6]float64 {
		k := key{h.hard, h.ace}
		if d, ok := memo[k]; ok {
			return d
		}
		var d [6]float64
		if sum, _ := h.total(); sum >= 17 {
			if sum > 21 {
				d[5] = 1
			} else {
				d[sum-17] = 1
			}
		} else {
			for c := 1; c <= 10; c++ {
				sub := dist(h.add(c))
				for i := range d {
					d[i] += cardProb(c) * sub[i]
				}
			}
		}
		memo[k] = d
		return d
	}
	for c := 1; c <= 10; c++ {
		df[c] = dist(hand{}.add(c))
	}
	return &df
}

// stick is the expected reward of sticking on sum against a dealer showing c.
func (df *dealerFinal) stick(sum, c int) float64 {
	d := df[c]
	v := d[5]
	for k := range 5 {
		switch f := 17 + k; {
		case sum > f:
			v += d[k]
		case sum < f:
			v -= d[k]
		}
	}
	return v
}

// hitNext returns the state after drawing card c from (sum, usable), or
// bust.
func hitNext(sum int, usable bool, c int) (nsum int, nusable, bust bool) {
	nsum = sum + c
	if usable {
		if nsum > 21 {
			return nsum - 10, false, false
		}
		return nsum, true, false
	}
	return nsum, false, nsum > 21
}

// order lists the decision states so that every hit successor comes
// before its predecessor: non-usable sums 21 → 12, then usable 21 → 12.
func order(dealer int) []State {
	var o []State
	for _, u := range []bool{false, true} {
		for sum := 21; sum >= 12; sum-- {
			o = append(o, State{Sum: sum, Dealer: dealer, Usable: u})
		}
	}
	return o
}

// backward computes the values of the decision states: with choose nil,
// of policy; otherwise of the greedy choice (optimal), recorded in choose.
func backward(df *dealerFinal, policy []int, choose []int) []float64 {
	v := make([]float64, NumDecision)
	for d := 1; d <= 10; d++ {
		for _, s := range order(d) {
			i := s.Index()
			st := df.stick(s.Sum, d)
			hit := 0.0
			for c := 1; c <= 10; c++ {
				nsum, nu, bust := hitNext(s.Sum, s.Usable, c)
				if bust {
					hit -= cardProb(c)
				} else {
					hit += cardProb(c) * v[State{Sum: nsum, Dealer: d, Usable: nu}.Index()]
				}
			}
			switch {
			case choose != nil && hit > st:
				choose[i], v[i] = Hit, hit
			case choose != nil:
				choose[i], v[i] = Stick, st
			case policy[i] == Hit:
				v[i] = hit
			default:
				v[i] = st
			}
		}
	}
	return v
}

// startDist returns the probability of a player natural and of each
// (sum, usable) the player reaches after the automatic hits below 12,
// indexed as State{Sum, 1, Usable}.Index() (the dealer card is independent).
func startDist() (natural float64, start []float64) {
	start = make([]float64, NumDecision)
	var walk func(h hand, p float64)
	walk = func(h hand, p float64) {
		sum, u := h.total()
		if sum >= 12 {
			start[State{Sum: sum, Dealer: 1, Usable: u}.Index()] += p
			return
		}
		for c := 1; c <= 10; c++ {
			walk(h.add(c), p*cardProb(c))
		}
	}
	for c1 := 1; c1 <= 10; c1++ {
		for c2 := 1; c2 <= 10; c2++ {
			h := hand{}.add(c1).add(c2)
			p := cardProb(c1) * cardProb(c2)
			if sum, _ := h.total(); sum == 21 {
				natural += p
				continue
			}
			walk(h, p)
		}
	}
	return natural, start
}

// expectedReturn averages the decision-state values v over the deal.
func expectedReturn(v []float64) float64 {
	natural, start := startDist()
	total := 0.0
	for d := 1; d <= 10; d++ {
		// P(dealer natural | showing d): a ten-card under an ace, an ace
		// under a ten-card.
		dn := 0.0
		switch d {
		case 1:
			dn = cardProb(10)
		case 10:
			dn = cardProb(1)
		}
		r := natural * (1 - dn)
		for i, p := range start {
			if p == 0 {
				continue
			}
			s, _ := Decode(i)
			s.Dealer = d
			r += p * v[s.Index()]
		}
		total += cardProb(d) * r
	}
	return total
}

// Values returns v_π of each decision state for the policy (a table of at
// least NumDecision actions), exactly.
func Values(policy []int) ([]float64, error) {
	if len(policy) < NumDecision {
		return nil, fmt.Errorf("blackjack: policy has %d entries, want %d", len(policy), NumDecision)
	}
	return backward(newDealerFinal(), policy, nil), nil
}

// Evaluate returns a policy's exact expected return per hand (naturals
// included) on the infinite-deck game.
func Evaluate(policy []int) (float64, error) {
	v, err := Values(policy)
	if err != nil {
		return 0, err
	}
	return expectedReturn(v), nil
}

// Optimal returns an optimal policy (ties go to Stick), its decision-state
// values and its expected return per hand, by dynamic programming on the
// exact model.
func Optimal() (policy []int, values []float64, ret float64) {
	policy = make([]int, NumDecision)
	values = backward(newDealerFinal(), nil, policy)
	return policy, values, expectedReturn(values)
}
