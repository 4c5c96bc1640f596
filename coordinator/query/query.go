// Package query answers questions about one model version in the user's
// own ids: the next-state distribution of (s, a) and its top k, P(s'|s,a)
// for given pairs, the hidden-state memberships of s, the reduced chains
// K^a D^a and stationary distributions, and the PISF policy and values of
// a reward. `emsf query --model FILE` and the query endpoints of `emsf
// serve` (coordinator/service/query.go) are two doors to the same Engine:
// JSON in, JSON out (spec ask-the-model §3; README "Asking a model").
//
// An Engine is built once per model version (New: the top-k index of
// every K block, package factor/topk) and is immutable: any number of
// goroutines may call Do at once. Every answer carries the version and
// the model's n, m, u; states and actions are the model's ids (strings)
// when it has vocabularies, else integer indices (a request may write an
// index as a number or a string of digits).
//
// Every probability an answer holds is computed by row (P^a(s'|s) =
// Σ_l D^a[s,l]·K^a[l,s'] in index order without fused multiply-add,
// bitwise factor.Model.Prob) or, for top k, by the index's default score,
// which is the same arithmetic over the non-zero weights only (the same
// bits; it reads one or two cache lines of a row instead of all m): a
// top-k answer and a prob answer for the same pair agree to the last
// bit. A model that smooths its rows (issue 28) changes row and must pass
// it to the index as the query's Score (Engine.TopK), with the index's
// extra coordinate (topk.NewIndex) for the interpolation's background
// term.
//
// Bad requests get an *Error with a code (the nats micro convention of
// the service): 400 malformed or out of bounds, 404 an unknown id, 409 a
// question the model cannot answer (PISF needs a shared K; a version not
// served), 413 an answer above the byte limit, 422 a reward of the wrong
// length or with values that are not finite, 503 (the service's) no
// version yet or busy.
package query

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/factor/topk"
	"github.com/emsf/emsf/shard"
)

// Error is a refused question: Code is "400", "404", "409", "413", "422"
// or "503" (see the package doc), Msg says why in one line.
type Error struct {
	Code string
	Msg  string
}

func (e *Error) Error() string { return "query: " + e.Msg + " (code " + e.Code + ")" }

func errorf(code, format string, a ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, a...)}
}

// Limits of a request.
const (
	// MaxRequestBytes bounds a request's JSON.
	MaxRequestBytes = 64 << 10
	// DefaultMaxK bounds k, max_states and top (Options.MaxK).
	DefaultMaxK = 1000
	// MaxPairs bounds the pairs of one prob request.
	MaxPairs = 10000
)

// Options configures an Engine.
type Options struct {
	// MaxK bounds k, max_states and top (0: DefaultMaxK).
	MaxK int
	// MaxAnswerBytes bounds an answer's JSON (0: no bound); the service
	// sets its connection's max payload. A larger answer is a 413.
	MaxAnswerBytes int
	// Workers builds the index on this many goroutines (0: 1).
	Workers int
	// Depth and Budget tune the top-k index (0: topk's defaults).
	Depth, Budget int
	// NoShadow builds the top-k index without its 8-bit shadow of K
	// (topk.QuantizedShadow; default: with it) and the float32 copy kept
	// beside it where that is at most topk.Float32Budget bytes: a query
	// that falls back to the scan then scans K in float64, about seven
	// times the bytes, and the index saves n·(m + 4) bytes (m rounded up
	// to a multiple of 16) per K block, a seventh of K, plus the float32
	// copy's 4·n·m (at most 16 MB) on small blocks.
	NoShadow bool
	// Reward reads a reward vector named in a plan request ("file"): a
	// local file for emsf query, an Object Store object for the service.
	// Nil: plan takes rewards in the request only.
	Reward func(name string) ([]float64, error)
}

// Engine answers the questions of one model version.
type Engine struct {
	version int
	md      *factor.Model
	states  *shard.Vocab
	actions *shard.Vocab
	opts    Options
	index   []*topk.Index // by K block
	search  sync.Pool     // *topk.Searcher

	stationary sync.Map // policy key → *stationaryAnswer
	chains     sync.Map // action → *onceDense (K^a D^a)
	plans      plans
}

// New builds the Engine of a model file as version version (0 for a file
// outside a service).
func New(mf *arrowio.ModelFile, version int, opts Options) (*Engine, error) {
	if opts.MaxK <= 0 {
		opts.MaxK = DefaultMaxK
	}
	md := mf.Model
	e := &Engine{version: version, md: md, states: mf.States, actions: mf.Actions, opts: opts}
	e.search.New = func() any { return &topk.Searcher{} }
	for b, kt := range md.KT {
		ix, err := topk.NewIndex(kt, md.N, md.M, nil, opts.Depth, opts.Workers, topk.QuantizedShadow(!opts.NoShadow))
		if err != nil {
			return nil, fmt.Errorf("query: index of K block %d: %w", b, err)
		}
		e.index = append(e.index, ix)
	}
	return e, nil
}

// Version returns the model version the Engine answers for.
func (e *Engine) Version() int { return e.version }

// Model returns the Engine's model (not to be modified).
func (e *Engine) Model() *factor.Model { return e.md }

// IndexBytes returns the memory of the top-k index (its lists and
// shadows).
func (e *Engine) IndexBytes() int {
	b := 0
	for _, ix := range e.index {
		b += ix.Bytes()
	}
	return b
}

// row returns j ↦ P^a(j | i), the next-state probabilities of (i, a):
// every probability an answer holds comes from here (top-k scores, prob
// answers, thresholded rows).
func (e *Engine) row(a, i int) func(j int) float64 {
	d, kt, m := e.md.DRow(a, i), e.md.KT[e.md.KBlock(a)], e.md.M
	return func(j int) float64 { return topk.Dot(d, kt[j*m:(j+1)*m]) }
}

// Endpoints lists the questions Do answers, by name.
var Endpoints = []string{"topk", "next", "prob", "member", "reduced", "stationary", "plan", "vocab"}

// Do answers the request body of an endpoint (one of Endpoints) with the
// answer's JSON, or an *Error.
func (e *Engine) Do(endpoint string, body []byte) ([]byte, error) {
	if len(body) > MaxRequestBytes {
		return nil, errorf("400", "request of %d bytes: the limit is %d", len(body), MaxRequestBytes)
	}
	var ans any
	var err error
	switch endpoint {
	case "topk":
		ans, err = e.topK(body)
	case "next":
		ans, err = e.next(body)
	case "prob":
		ans, err = e.probs(body)
	case "member":
		ans, err = e.member(body)
	case "reduced":
		ans, err = e.reduced(body)
	case "stationary":
		ans, err = e.stationaryQ(body)
	case "plan":
		ans, err = e.plan(body)
	case "vocab":
		ans, err = e.vocab(body)
	default:
		return nil, errorf("404", "no endpoint %q (want one of %v)", endpoint, Endpoints)
	}
	if err != nil {
		return nil, err
	}
	out, err := json.Marshal(ans)
	if err != nil {
		return nil, fmt.Errorf("query: encode answer: %w", err)
	}
	if max := e.opts.MaxAnswerBytes; max > 0 && len(out) > max {
		return nil, errorf("413", "the answer has %d bytes, above the limit of %d: ask for less (k, max_states, top, fewer pairs), or use emsf query --model on the model file", len(out), max)
	}
	return out, nil
}

// Header is in every answer.
type Header struct {
	Version int `json:"version"`
	N       int `json:"n"`
	M       int `json:"m"`
	U       int `json:"u"`
}

func (e *Engine) header() Header { return Header{e.version, e.md.N, e.md.M, e.md.U} }

// common are the fields every request may have.
type common struct {
	// Version pins the model version (0: any; the service checks it).
	Version int `json:"version"`
}

// decode reads a request strictly: unknown fields, trailing data and
// wrong types are 400s.
func decode(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errorf("400", "malformed request: %v", err)
	}
	if dec.More() {
		return errorf("400", "malformed request: data after the JSON object")
	}
	return nil
}

// id resolves a state (or action) named in a request: a JSON string (an
// id; with a model of integers, a string of digits) or number (an index,
// models of integers only). field names it in errors.
func id(raw json.RawMessage, v *shard.Vocab, n int, field string) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, errorf("400", "%s is missing", field)
	}
	var s string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, errorf("400", "%s: %v", field, err)
		}
		if v != nil {
			if i, ok := v.IndexString(s); ok {
				return i, nil
			}
			return 0, errorf("404", "%s %q: no such id in the model", field, s)
		}
	} else {
		if v != nil {
			return 0, errorf("400", "%s %s: the model names them by ids: give a JSON string", field, raw)
		}
		s = string(raw)
	}
	i, err := strconv.Atoi(s)
	if err != nil {
		return 0, errorf("400", "%s %s: want an integer index (the model has no ids)", field, raw)
	}
	if i < 0 || i >= n {
		return 0, errorf("404", "%s %d: no such index in the model (%d of them)", field, i, n)
	}
	return i, nil
}

// name is how an answer names state (or action) i: its id, or the index.
func name(v *shard.Vocab, i int) any {
	if v == nil {
		return i
	}
	return v.String(i)
}

func (e *Engine) state(raw json.RawMessage, field string) (int, error) {
	return id(raw, e.states, e.md.N, field)
}

func (e *Engine) action(raw json.RawMessage) (int, error) {
	if len(raw) == 0 && e.md.U == 1 {
		return 0, nil // one action: it may go unsaid
	}
	return id(raw, e.actions, e.md.U, "action")
}

// checkK checks a count of answers wanted.
func (e *Engine) checkK(field string, k int) error {
	if k < 1 || k > e.opts.MaxK {
		return errorf("400", "%s %d: want 1 to %d", field, k, e.opts.MaxK)
	}
	return nil
}

// Next is one next state of an answer.
type Next struct {
	State any     `json:"state"`
	P     float64 `json:"p"`
}

// TopKRequest asks for the k most probable next states of (state,
// action).
type TopKRequest struct {
	common
	State  json.RawMessage `json:"state"`
	Action json.RawMessage `json:"action"`
	K      int             `json:"k"`
}

// TopKAnswer lists them by probability, then index.
type TopKAnswer struct {
	Header
	Next []Next `json:"next"`
}

func (e *Engine) topK(body []byte) (any, error) {
	r := TopKRequest{K: 10}
	if err := decode(body, &r); err != nil {
		return nil, err
	}
	i, a, err := e.pair(r.State, r.Action)
	if err != nil {
		return nil, err
	}
	if err := e.checkK("k", r.K); err != nil {
		return nil, err
	}
	hits, _ := e.TopK(a, i, r.K, nil)
	return TopKAnswer{e.header(), e.named(hits)}, nil
}

func (e *Engine) pair(state, action json.RawMessage) (i, a int, err error) {
	if i, err = e.state(state, "state"); err != nil {
		return 0, 0, err
	}
	a, err = e.action(action)
	return i, a, err
}

func (e *Engine) named(hits []topk.Hit) []Next {
	out := make([]Next, len(hits))
	for k, h := range hits {
		out[k] = Next{name(e.states, h.Item), h.Score}
	}
	return out
}

// TopK returns the k most probable next states of (i, a) (the Go API of
// the topk endpoint, for benchmarks and callers in process), appended to
// dst[:0], and how the index found them.
func (e *Engine) TopK(a, i, k int, dst []topk.Hit) ([]topk.Hit, topk.Stats) {
	s := e.search.Get().(*topk.Searcher)
	defer e.search.Put(s)
	// The index's default score is row's arithmetic (topk.Dot, bitwise
	// factor.Model.Prob) and lets it read only the query's non-zero
	// weights; a model whose row differs (smoothing, issue 28) must pass
	// its own Score here.
	q := topk.Query{W: e.md.DRow(a, i), K: k, Budget: e.opts.Budget}
	return e.index[e.md.KBlock(a)].TopK(q, s, dst)
}

// NextRequest asks for the next-state distribution of (state, action),
// thresholded: the states of probability at least min_p, at most
// max_states of them, most probable first, stopping once they hold mass
// (when set) of the probability.
type NextRequest struct {
	common
	State     json.RawMessage `json:"state"`
	Action    json.RawMessage `json:"action"`
	MinP      float64         `json:"min_p"`
	MaxStates int             `json:"max_states"`
	Mass      float64         `json:"mass"`
}

// NextAnswer is the distribution's head; Rest is 1 − Σ p, Truncated says
// whether states of probability > 0 were left out.
type NextAnswer struct {
	Header
	Next      []Next  `json:"next"`
	Truncated bool    `json:"truncated"`
	Rest      float64 `json:"rest"`
}

func (e *Engine) next(body []byte) (any, error) {
	r := NextRequest{MaxStates: min(100, e.opts.MaxK)}
	if err := decode(body, &r); err != nil {
		return nil, err
	}
	i, a, err := e.pair(r.State, r.Action)
	if err != nil {
		return nil, err
	}
	if err := e.checkK("max_states", r.MaxStates); err != nil {
		return nil, err
	}
	if !(r.MinP >= 0 && r.MinP <= 1) {
		return nil, errorf("400", "min_p %v: want a number in [0, 1]", r.MinP)
	}
	if !(r.Mass >= 0 && r.Mass <= 1) {
		return nil, errorf("400", "mass %v: want a number in [0, 1] (0: no mass bound)", r.Mass)
	}
	// One more than asked tells whether anything was left out.
	hits, _ := e.TopK(a, i, min(r.MaxStates+1, e.md.N), nil)
	ans := NextAnswer{Header: e.header(), Rest: 1}
	sum := 0.0
	for k, h := range hits {
		if k == r.MaxStates || h.Score < r.MinP || h.Score == 0 || r.Mass > 0 && sum >= r.Mass {
			ans.Truncated = h.Score > 0
			break
		}
		ans.Next = append(ans.Next, Next{name(e.states, h.Item), h.Score})
		sum += h.Score
	}
	ans.Rest = max(0, 1-sum)
	return ans, nil
}

// ProbRequest asks P(next | state, action) for each pair.
type ProbRequest struct {
	common
	Pairs []struct {
		State  json.RawMessage `json:"state"`
		Action json.RawMessage `json:"action"`
		Next   json.RawMessage `json:"next"`
	} `json:"pairs"`
}

// ProbAnswer holds one probability a pair, in order.
type ProbAnswer struct {
	Header
	P []float64 `json:"p"`
}

func (e *Engine) probs(body []byte) (any, error) {
	var r ProbRequest
	if err := decode(body, &r); err != nil {
		return nil, err
	}
	if len(r.Pairs) == 0 || len(r.Pairs) > MaxPairs {
		return nil, errorf("400", "%d pairs: want 1 to %d", len(r.Pairs), MaxPairs)
	}
	ans := ProbAnswer{Header: e.header(), P: make([]float64, len(r.Pairs))}
	for k, p := range r.Pairs {
		i, a, err := e.pair(p.State, p.Action)
		if err == nil {
			var j int
			if j, err = e.state(p.Next, "next"); err == nil {
				ans.P[k] = e.row(a, i)(j)
				continue
			}
		}
		var qe *Error
		if errors.As(err, &qe) {
			qe.Msg = fmt.Sprintf("pair %d: %s", k, qe.Msg)
		}
		return nil, err
	}
	return ans, nil
}

// MemberRequest asks for the row of D^a of state (its hidden-state
// memberships under action).
type MemberRequest struct {
	common
	State  json.RawMessage `json:"state"`
	Action json.RawMessage `json:"action"`
}

// MemberAnswer holds the m memberships.
type MemberAnswer struct {
	Header
	D []float64 `json:"d"`
}

func (e *Engine) member(body []byte) (any, error) {
	var r MemberRequest
	if err := decode(body, &r); err != nil {
		return nil, err
	}
	i, a, err := e.pair(r.State, r.Action)
	if err != nil {
		return nil, err
	}
	return MemberAnswer{e.header(), e.md.DRow(a, i)}, nil
}

// VocabRequest asks for the state ids [from, from+limit) (actions:
// "actions": true).
type VocabRequest struct {
	common
	From    int  `json:"from"`
	Limit   int  `json:"limit"`
	Actions bool `json:"actions"`
}

// VocabAnswer lists them; Total is the vocabulary's length.
type VocabAnswer struct {
	Header
	Total int      `json:"total"`
	IDs   []string `json:"ids"`
}

func (e *Engine) vocab(body []byte) (any, error) {
	r := VocabRequest{Limit: 100}
	if err := decode(body, &r); err != nil {
		return nil, err
	}
	v := e.states
	if r.Actions {
		v = e.actions
	}
	if v == nil {
		return nil, errorf("409", "the model has no ids: it names them by indices 0 to n-1")
	}
	if r.From < 0 || r.Limit < 1 || r.Limit > 100*e.opts.MaxK {
		return nil, errorf("400", "from %d, limit %d: want from >= 0 and limit in 1 to %d", r.From, r.Limit, 100*e.opts.MaxK)
	}
	ans := VocabAnswer{Header: e.header(), Total: v.Len(), IDs: []string{}}
	for i := r.From; i < min(v.Len(), r.From+r.Limit); i++ {
		ans.IDs = append(ans.IDs, v.String(i))
	}
	return ans, nil
}

// finite reports whether every value is finite.
func finite(xs []float64) bool {
	for _, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}
