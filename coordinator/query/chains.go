package query

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"sync"

	"gonum.org/v1/gonum/mat"

	"github.com/emsf/emsf/factor"
)

// Policy names a policy in a request: "uniform" (every action equally
// likely) or {"action": a} (a in every state).
type Policy struct {
	Uniform bool
	Action  json.RawMessage
}

// UnmarshalJSON reads "uniform" or {"action": a}.
func (p *Policy) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if s != "uniform" {
			return errorf("400", "policy %q: want \"uniform\" or {\"action\": A}", s)
		}
		p.Uniform = true
		return nil
	}
	var o struct {
		Action json.RawMessage `json:"action"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil || len(o.Action) == 0 {
		return errorf("400", "policy %s: want \"uniform\" or {\"action\": A}", b)
	}
	p.Action = o.Action
	return nil
}

// policy resolves a request's policy: its key (for caches) and the n×u
// matrix factor wants (built only when build is true).
func (e *Engine) policy(p *Policy, build bool) (key string, pi [][]float64, err error) {
	n, u := e.md.N, e.md.U
	a := -1
	if p == nil || p.Uniform {
		key = "uniform"
	} else {
		if a, err = e.action(p.Action); err != nil {
			return "", nil, err
		}
		key = "action:" + strconv.Itoa(a)
	}
	if !build {
		return key, nil, nil
	}
	pi = make([][]float64, n)
	row := make([]float64, n*u)
	for i := range pi {
		pi[i] = row[i*u : (i+1)*u : (i+1)*u]
		if a >= 0 {
			pi[i][a] = 1
			continue
		}
		for b := range pi[i] {
			pi[i][b] = 1 / float64(u)
		}
	}
	return key, pi, nil
}

// ReducedRequest asks for the reduced chain K^a D^a of an action, or of a
// policy's chain (factor.ReducedChain).
type ReducedRequest struct {
	common
	Action json.RawMessage `json:"action"`
	Policy *Policy         `json:"policy"`
}

// ReducedAnswer is the row-stochastic matrix, row by row.
type ReducedAnswer struct {
	Header
	Matrix [][]float64 `json:"matrix"`
}

func (e *Engine) reduced(body []byte) (any, error) {
	var r ReducedRequest
	if err := decode(body, &r); err != nil {
		return nil, err
	}
	var m *mat.Dense
	switch {
	case r.Policy != nil && len(r.Action) > 0:
		return nil, errorf("400", "give action or policy, not both")
	case r.Policy != nil:
		_, pi, err := e.policy(r.Policy, true)
		if err != nil {
			return nil, err
		}
		if m, err = factor.ReducedChain(e.md, pi); err != nil {
			return nil, errorf("409", "%v", err)
		}
	default:
		a, err := e.action(r.Action)
		if err != nil {
			return nil, err
		}
		m = e.reducedOf(a)
	}
	rows, cols := m.Dims()
	out := make([][]float64, rows)
	for l := range out {
		out[l] = make([]float64, cols)
		mat.Row(out[l], l, m)
	}
	return ReducedAnswer{e.header(), out}, nil
}

// reducedOf returns K^a D^a (factor.Reduced), computed once per action.
func (e *Engine) reducedOf(a int) *mat.Dense {
	v, _ := e.chains.LoadOrStore(a, &onceDense{})
	od := v.(*onceDense)
	od.once.Do(func() {
		md := e.md
		sub := &factor.Model{N: md.N, M: md.M, U: 1, Tie: factor.TieNone,
			D: [][]float64{md.D[md.DBlock(a)]}, KT: [][]float64{md.KT[md.KBlock(a)]}}
		od.m = factor.Reduced(sub)[0]
	})
	return od.m
}

type onceDense struct {
	once sync.Once
	m    *mat.Dense
}

// StationaryRequest asks for the stationary distribution of a policy's
// chain: ν over the hidden states of its reduced chain, and the top
// states of μ = ν K.
type StationaryRequest struct {
	common
	Policy *Policy `json:"policy"`
	Top    int     `json:"top"`
}

// StateMass is a state and its stationary probability.
type StateMass struct {
	State any     `json:"state"`
	Mu    float64 `json:"mu"`
}

// StationaryAnswer holds ν and the top of μ (largest first, then index).
type StationaryAnswer struct {
	Header
	Nu  []float64   `json:"nu"`
	Top []StateMass `json:"top"`
}

type stationaryAnswer struct {
	once   sync.Once
	mu, nu []float64
	order  []int32 // states by μ, largest first
	err    error
}

func (e *Engine) stationaryQ(body []byte) (any, error) {
	r := StationaryRequest{Top: 20}
	if err := decode(body, &r); err != nil {
		return nil, err
	}
	if err := e.checkK("top", r.Top); err != nil {
		return nil, err
	}
	key, _, err := e.policy(r.Policy, false)
	if err != nil {
		return nil, err
	}
	v, _ := e.stationary.LoadOrStore(key, &stationaryAnswer{})
	sa := v.(*stationaryAnswer)
	sa.once.Do(func() {
		_, pi, err := e.policy(r.Policy, true)
		if err == nil {
			sa.mu, sa.nu, err = factor.Stationary(e.md, pi)
		}
		if err != nil {
			sa.err = errorf("409", "no unique stationary distribution: %v", err)
			return
		}
		sa.order = make([]int32, len(sa.mu))
		for i := range sa.order {
			sa.order[i] = int32(i)
		}
		slices.SortStableFunc(sa.order, func(x, y int32) int {
			switch {
			case sa.mu[x] > sa.mu[y]:
				return -1
			case sa.mu[x] < sa.mu[y]:
				return 1
			}
			return 0
		})
	})
	if sa.err != nil {
		return nil, sa.err
	}
	ans := StationaryAnswer{Header: e.header(), Nu: sa.nu}
	for _, i := range sa.order[:min(r.Top, len(sa.order))] {
		ans.Top = append(ans.Top, StateMass{name(e.states, int(i)), sa.mu[i]})
	}
	return ans, nil
}

// Reward is a plan request's reward of entering each state: sparse
// (listed states, default for the others), dense values (n of them), or a
// file (Options.Reward reads it).
type Reward struct {
	Sparse  map[string]float64 `json:"sparse"`
	Default float64            `json:"default"`
	Values  []float64          `json:"values"`
	File    string             `json:"file"`
}

// PlanRequest asks for the PISF policy (Barreto, Pineau & Precup 2014;
// factor.PISF) of a reward with discount gamma: the top states by value,
// and with full the whole policy and values.
type PlanRequest struct {
	common
	Reward Reward  `json:"reward"`
	Gamma  float64 `json:"gamma"`
	Top    int     `json:"top"`
	Full   bool    `json:"full"`
}

// StateValue is a state, its value and its action under the policy.
type StateValue struct {
	State  any     `json:"state"`
	Value  float64 `json:"value"`
	Action any     `json:"action"`
}

// PlanAnswer is PISF's result: policy iterations, the top states by
// value, and with full every state's action and value (index order).
type PlanAnswer struct {
	Header
	Iterations int          `json:"iterations"`
	Top        []StateValue `json:"top"`
	Policy     []any        `json:"policy,omitempty"`
	Values     []float64    `json:"values,omitempty"`
}

// plans caches PISF results by (reward, gamma): they take seconds at
// n = 10^6.
type plans struct {
	mu   sync.Mutex
	keys [][32]byte
	vals []factor.PlanResult
}

const plansKept = 8

func (e *Engine) plan(body []byte) (any, error) {
	r := PlanRequest{Gamma: 0.95, Top: 20}
	if err := decode(body, &r); err != nil {
		return nil, err
	}
	if !(r.Gamma > 0 && r.Gamma < 1) {
		return nil, errorf("400", "gamma %v: want a discount in (0, 1)", r.Gamma)
	}
	if err := e.checkK("top", r.Top); err != nil {
		return nil, err
	}
	md := e.md
	if md.Tie != factor.TieSharedK {
		return nil, errorf("409", "PISF plans on a model with one K shared by all actions (fit --tie shared-k); this model's tie is %s", md.Tie)
	}
	rhat, err := e.rewards(&r.Reward)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	for _, v := range append(rhat, r.Gamma) {
		h.Write(binary.LittleEndian.AppendUint64(nil, math.Float64bits(v)))
	}
	var key [32]byte
	h.Sum(key[:0])
	res, ok := e.plans.get(key)
	if !ok {
		rbar, err := factor.ReducedRewards(md, rhat)
		if err != nil {
			return nil, errorf("409", "%v", err)
		}
		if res, err = factor.PISF(md, rbar, r.Gamma, factor.PlanOptions{}); err != nil {
			return nil, errorf("409", "%v", err)
		}
		e.plans.put(key, res)
	}
	ans := PlanAnswer{Header: e.header(), Iterations: res.Iterations}
	order := make([]int, md.N)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int {
		switch {
		case res.Values[x] > res.Values[y]:
			return -1
		case res.Values[x] < res.Values[y]:
			return 1
		}
		return 0
	})
	for _, i := range order[:min(r.Top, md.N)] {
		ans.Top = append(ans.Top, StateValue{name(e.states, i), res.Values[i], name(e.actions, res.Policy[i])})
	}
	if r.Full {
		ans.Policy = make([]any, md.N)
		for i, a := range res.Policy {
			ans.Policy[i] = name(e.actions, a)
		}
		ans.Values = res.Values
	}
	return ans, nil
}

// rewards returns the reward of entering each state (n values).
func (e *Engine) rewards(r *Reward) ([]float64, error) {
	n := e.md.N
	given := 0
	for _, set := range []bool{r.Sparse != nil, r.Values != nil, r.File != ""} {
		if set {
			given++
		}
	}
	if given != 1 {
		return nil, errorf("400", "reward: give exactly one of sparse (with default), values or file")
	}
	var rhat []float64
	switch {
	case r.Values != nil:
		rhat = r.Values
	case r.File != "":
		if e.opts.Reward == nil {
			return nil, errorf("400", "reward file %q: this door takes rewards in the request only", r.File)
		}
		var err error
		if rhat, err = e.opts.Reward(r.File); err != nil {
			return nil, errorf("422", "reward file %q: %v", r.File, err)
		}
	default:
		rhat = make([]float64, n)
		for i := range rhat {
			rhat[i] = r.Default
		}
		for s, v := range r.Sparse {
			raw, _ := json.Marshal(s)
			i, err := e.state(raw, "reward state")
			if err != nil {
				return nil, err
			}
			rhat[i] = v
		}
	}
	if len(rhat) != n {
		return nil, errorf("422", "reward of %d values: the model has n = %d states", len(rhat), n)
	}
	if !finite(rhat) || math.IsNaN(r.Default) || math.IsInf(r.Default, 0) {
		return nil, errorf("422", "reward values must be finite")
	}
	return rhat, nil
}

func (p *plans) get(key [32]byte) (factor.PlanResult, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, kk := range p.keys {
		if kk == key {
			return p.vals[k], true
		}
	}
	return factor.PlanResult{}, false
}

func (p *plans) put(key [32]byte, res factor.PlanResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.keys) == plansKept {
		p.keys, p.vals = p.keys[1:], p.vals[1:]
	}
	p.keys, p.vals = append(p.keys, key), append(p.vals, res)
}
