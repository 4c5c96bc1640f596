package factor

import (
	"fmt"
	"math"
)

var _ Estimate = (*JM)(nil)

// JM is Jelinek–Mercer counting (Jelinek & Mercer 1980; Chen & Goodman
// 1999): the counted estimate interpolated with the next-state
// frequencies of its action,
//
//	P̂^a_ij = (1 − λ)·C^a_ij/x^a_i + λ·q^a_j     (q^a as in Smoothing, NewQ),
//
// and q^a itself for a row never seen. The baseline that a model's
// smoothing must beat.
type JM struct {
	cnt    *CNT
	q      [][]float64
	lambda float64
}

// NewJM counts the blocks into a JM estimate with weight lambda in [0, 1].
func NewJM(n, u int, blocks []*Block, lambda float64) (*JM, error) {
	if !(lambda >= 0 && lambda <= 1) {
		return nil, fmt.Errorf("factor: Jelinek–Mercer weight %v must be in [0, 1]", lambda)
	}
	c, err := NewCNT(n, u, blocks, 0)
	if err != nil {
		return nil, err
	}
	return &JM{cnt: c, q: NewQ(n, u, blocks), lambda: lambda}, nil
}

// States returns n.
func (e *JM) States() int { return e.cnt.n }

// Actions returns u.
func (e *JM) Actions() int { return e.cnt.u }

// Prob returns P̂^a_ij.
func (e *JM) Prob(a, i, j int) float64 {
	x := e.cnt.RowTotal(a, i)
	if x == 0 {
		return e.q[a][j]
	}
	return float64((1-e.lambda)*e.cnt.count(a, i, j)/x) + float64(e.lambda*e.q[a][j])
}

// Row sets dst to row i of P̂^a.
func (e *JM) Row(a, i int, dst []float64) {
	for j := range dst {
		dst[j] = e.Prob(a, i, j)
	}
}

var _ Estimate = (*RuleCounting)(nil)

// RuleCounting is counting smoothed by a model's predictive rule
// (Smoothing) without the factors: λ_a = 1 for every action, so
//
//	P̂^a_ij = f_i·(c_ij − d_a)₊ + b_i·q^a_j,
//
// and q^a for a row never seen; it predicts with the same code as a
// model (Smoothing.prob, Smoothing.row). KNRule makes it interpolated
// Kneser–Ney counting, the baseline of emsf eval --train (kn) that shows
// whether a model's factors add to the counting part of its rule.
type RuleCounting struct {
	n, u int
	s    *Smoothing
}

// NewRuleCounting counts the blocks into the rule with the parameters
// per action, every λ 1. cnt, when not nil, must be NewCNT(n, u, blocks,
// 0) (so that choosing among many rules counts once).
func NewRuleCounting(n, u int, blocks []*Block, cnt *CNT, rules []RuleParams) (*RuleCounting, error) {
	for a, r := range rules {
		if r.Lambda != 1 {
			return nil, fmt.Errorf("factor: counting under the rule needs λ = 1 (no factors), action %d has λ = %v", a, r.Lambda)
		}
	}
	s, err := newSmoothing(n, u, blocks, cnt, rules)
	if err != nil {
		return nil, err
	}
	return &RuleCounting{n: n, u: u, s: s}, nil
}

// States returns n.
func (e *RuleCounting) States() int { return e.n }

// Actions returns u.
func (e *RuleCounting) Actions() int { return e.u }

// Prob returns P̂^a_ij.
func (e *RuleCounting) Prob(a, i, j int) float64 { return e.s.prob(a, i, j, 0) }

// Row sets dst to row i of P̂^a.
func (e *RuleCounting) Row(a, i int, dst []float64) {
	clear(dst)
	e.s.row(a, i, dst)
}

// Params returns the rule of action a.
func (e *RuleCounting) Params(a int) RuleParams { return e.s.Params(a) }

// DefaultHeldOutMix is the weight of the uniform distribution in the
// held-out scoring rule of emsf eval and fit --holdout.
const DefaultHeldOutMix = 1e-3

// HeldOutRule is the one smoothing rule a held-out score applies to
// every estimate alike: the estimate's probability mixed with the
// uniform distribution over the scored states,
//
//	P_scored = (1 − Mix)·P + Mix/N,
//
// where N is the larger of the estimate's n and the data's: a held-out
// file may name states and actions beyond the range of the training
// data. A state (or action) beyond the estimate's range is an unseen row:
// a *Model predicts its UnseenRow (its prediction of a state never seen
// in training), other estimates their row of an unseen state when they
// have one (CNT: uniform; JM and RuleCounting: q), and
// uniform over their n states for an action beyond their range; a next
// state beyond their range has P = 0, so only the mixture scores it.
type HeldOutRule struct {
	Mix float64
}

// String describes the rule for output.
func (r HeldOutRule) String() string {
	return fmt.Sprintf("every estimate mixed with the uniform distribution over the scored states, weight %g", r.Mix)
}

// LogLik returns Σ c·log P_scored over the nonzeros of the blocks and
// their total count, for data over nEval ≥ e.States() states. It is an
// error when a probability is 0 (Mix = 0 and an estimate gives an
// observed transition probability 0).
func (r HeldOutRule) LogLik(e Estimate, blocks []*Block, nEval int) (ll, total float64, err error) {
	if !(r.Mix >= 0 && r.Mix < 1) {
		return 0, 0, fmt.Errorf("factor: held-out mixture weight %v must be in [0, 1)", r.Mix)
	}
	n, u := e.States(), e.Actions()
	nEval = max(nEval, n)
	md, _ := e.(*Model)
	unseen := map[int][]float64{} // per action: a model's row of an unseen state
	for _, b := range blocks {
		a := b.Action
		for r2, i := range b.Rows {
			for q := b.Ptr[r2]; q < b.Ptr[r2+1]; q++ {
				j, c := int(b.Cols[q]), b.Vals[q]
				p := 0.0
				switch {
				case j >= n:
				case a >= u:
					p = 1 / float64(n)
				case int(i) < n:
					p = e.Prob(a, int(i), j)
				case md != nil:
					row, ok := unseen[a]
					if !ok {
						row = make([]float64, n)
						md.UnseenRow(a, row)
						unseen[a] = row
					}
					p = row[j]
				default:
					p = unseenProb(e, a, j)
				}
				ps := float64((1-r.Mix)*p) + r.Mix/float64(nEval)
				if !(ps > 0) {
					return 0, 0, &TransitionError{Action: a, From: int(i), To: j, Count: c}
				}
				ll += float64(c * math.Log(ps))
				total += c
			}
		}
	}
	return ll, total, nil
}

// unseenProb is the probability of j from a state never seen under
// action a, for estimates other than *Model.
func unseenProb(e Estimate, a, j int) float64 {
	switch e := e.(type) {
	case *JM:
		return e.q[a][j]
	case *RuleCounting:
		return e.s.Q[a][j]
	case *CNT:
		return 1 / float64(e.n)
	}
	return 1 / float64(e.States())
}

// PerTransition is LogLik divided by the total count.
func (r HeldOutRule) PerTransition(e Estimate, blocks []*Block, nEval int) (float64, error) {
	ll, total, err := r.LogLik(e, blocks, nEval)
	if err != nil {
		return 0, err
	}
	if !(total > 0) {
		return 0, fmt.Errorf("factor: held-out data has no transitions")
	}
	return ll / total, nil
}
