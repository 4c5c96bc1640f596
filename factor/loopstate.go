package factor

import (
	"bytes"
	"encoding/gob"
	"fmt"
)

// LoopState is what an EM loop carries from one iteration to the next
// besides the committed model: SQUAREM's cycles (their step lengths, the
// points they extrapolate from or go back to, the pending check of a
// proposal), the held-out rule (its best iterate and score, the patience
// spent, the smoothing rule's last choices) and the converger's last
// value. A checkpoint that keeps it with the committed model lets a
// resumed fit (LoopHooks.Resume) go on bitwise as if it had never
// stopped. Loop hands one to LoopHooks.Committed when LoopHooks.SaveState
// is set and the fit has such state; plain EM without a held-out rule has
// none (its converger goes on from the model's log-likelihood).
type LoopState struct {
	// Iteration is the loop's last committed iteration (the one the
	// state follows).
	Iteration int
	// State holds the scalars, encoded (opaque to the caller: store the
	// bytes as they are).
	State []byte
	// Cycle and Best are the model-sized points of the state, each of
	// the committed model's shape and precision, or nil when the state
	// has none: Cycle holds each SQUAREM cycle's kept point (x0 before
	// the pass on x1, x2 while a proposal is checked), Best the held-out
	// rule's best iterate; with one component per action (squaremLoop),
	// block a of each is action a's (State says which blocks hold one).
	// They may share memory with the loop's buffers: valid until
	// Committed returns (copy or encode them there).
	Cycle, Best *Model
}

// loopStateVersion numbers the encoding of LoopState.State: a state of
// another version does not resume.
const loopStateVersion = 1

// loopSave is LoopState.State decoded.
type loopSave struct {
	Version int
	// Iteration is LoopState.Iteration, repeated (a check).
	Iteration int
	// Prev is the last objective the loop reported (its relative
	// change goes on from it); LogLik the result's so far.
	Prev, LogLik float64
	// ConvPrev and ConvSeen are the converger's (Converger.prev, seen).
	ConvPrev float64
	ConvSeen bool
	// Early is plain EM's held-out rule (nil: none).
	Early *earlySave
	// Comps are SQUAREM's components (squaremLoop), in order.
	Comps []compSave
	// Rules is the held-out rule's smoothing rule (EarlyStop.SaveRules).
	Rules *RuleState
	// Status is the converger's verdict at Iteration (NotTerminated
	// but for a checkpoint of the fit's last iteration).
	Status Status
}

// earlySave is an earlyState's scalars; Kept reports whether it keeps an
// iterate (then LoopState.Best, or its block, holds it).
type earlySave struct {
	Best, Ref, Last     float64
	Bad, Evals, Iter    int
	Seen                int
	Kept                bool
	KeptIteration       int
	KeptLogLik, KeptWKL float64
}

// compSave is an sqComp's scalars. Point says which point of the cycle
// LoopState.Cycle (or its block) holds: pointNone, pointX0 or pointBack.
type compSave struct {
	StepMax           float64
	Phase             int
	Pending           bool
	L1, LL            float64
	Point             int
	Last, Seen        float64
	PrevTol           float64
	Done, Stop        bool
	Status            Status
	Rejected          int
	Iteration         int
	LogLikVM, WKLVM   float64
	Early             *earlySave
	HasEarly, HasLogs bool
}

const (
	pointNone = iota
	pointX0
	pointBack
)

// RuleState is what a Validation's scores carry from one to the next:
// the last choice of each action's rule, where the next search starts.
type RuleState struct {
	Last     []RuleParams
	Tuned    bool
	TunedAct []bool
}

// RuleState returns the validation's state (Validation.SetRuleState).
func (v *Validation) RuleState() RuleState {
	s := RuleState{Tuned: v.tuned}
	s.Last = append(s.Last, v.last...)
	s.TunedAct = append(s.TunedAct, v.tunedAct...)
	return s
}

// SetRuleState makes s the validation's state: its scores go on as those
// of the validation s was taken from (the same split) would.
func (v *Validation) SetRuleState(s RuleState) error {
	if len(s.Last) != len(v.last) || len(s.TunedAct) != 0 && len(s.TunedAct) != v.u {
		return fmt.Errorf("factor: validation state of %d actions' rules, want %d", len(s.Last), len(v.last))
	}
	copy(v.last, s.Last)
	v.tuned = s.Tuned
	v.tunedAct = nil
	if len(s.TunedAct) > 0 {
		v.tunedAct = append([]bool(nil), s.TunedAct...)
	}
	for a := range v.memo {
		clear(v.memo[a])
	}
	return nil
}

// newLoopSave returns the state that every loop saves after iteration
// iter: its verdict, its and the converger's last values, the smoothing
// rule's choices.
func newLoopSave(iter int, status Status, prev, logLik float64, conv Converger, es *EarlyStop) *loopSave {
	return &loopSave{Version: loopStateVersion, Iteration: iter, Status: status, Prev: prev, LogLik: logLik,
		ConvPrev: conv.prev, ConvSeen: conv.seen, Rules: saveRules(es)}
}

// resumeLoop decodes ls (the state after iteration first−1), puts it
// back with restore and into prev, res and conv, and returns the state's
// verdict: NotTerminated but for a checkpoint of the fit's last
// iteration (res then says how it ended).
func resumeLoop(ls *LoopState, first int, restore func(s *loopSave) error, prev *float64, res *FitResult, conv *Converger) (Status, error) {
	s, err := decodeLoopSave(ls, first-1)
	if err == nil {
		err = restore(s)
	}
	if err != nil {
		return NotTerminated, err
	}
	*prev, res.LogLik = s.Prev, s.LogLik
	conv.prev, conv.seen = s.ConvPrev, s.ConvSeen
	if s.Status != NotTerminated {
		res.Status, res.Iterations = s.Status, first-1
	}
	return s.Status, nil
}

func encodeLoopSave(s *loopSave) ([]byte, error) {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(s); err != nil {
		return nil, fmt.Errorf("factor: encode loop state: %w", err)
	}
	return buf.Bytes(), nil
}

// Check reports whether ls can resume a fit of md's shape after
// iteration after: its scalars decode, are of this build's version and
// of that iteration, and its points have md's shape. (What the fit
// itself checks besides, that the state is of its kind of fit, needs
// its options.)
func (ls *LoopState) Check(md *Model, after int) error {
	if _, err := decodeLoopSave(ls, after); err != nil {
		return err
	}
	if err := checkPoint(ls.Cycle, md, "cycle"); err != nil {
		return err
	}
	return checkPoint(ls.Best, md, "best")
}

// decodeLoopSave decodes ls's scalars and checks them against the
// iteration the fit resumes after.
func decodeLoopSave(ls *LoopState, after int) (*loopSave, error) {
	var s loopSave
	if err := gob.NewDecoder(bytes.NewReader(ls.State)).Decode(&s); err != nil {
		return nil, fmt.Errorf("factor: loop state: %w", err)
	}
	switch {
	case s.Version != loopStateVersion:
		return nil, fmt.Errorf("factor: loop state of version %d, this build reads %d", s.Version, loopStateVersion)
	case s.Iteration != ls.Iteration || ls.Iteration != after:
		return nil, fmt.Errorf("factor: loop state of iteration %d (%d), the fit resumes after %d", ls.Iteration, s.Iteration, after)
	}
	return &s, nil
}

// save returns e's scalars (nil for nil).
func (e *earlyState) save() *earlySave {
	if e == nil {
		return nil
	}
	s := &earlySave{Best: e.best, Ref: e.ref, Last: e.last, Bad: e.bad, Evals: e.evals, Iter: e.iter, Seen: e.seen, Kept: e.kept != nil}
	if e.kept != nil {
		s.KeptIteration, s.KeptLogLik, s.KeptWKL = e.kept.Iteration, e.kept.LogLik, e.kept.WKL
	}
	return s
}

// load sets e's scalars from s and its kept iterate to a copy of kept
// (of the model like), when s keeps one.
func (e *earlyState) load(s *earlySave, kept *Model, into func() *Model) error {
	if s == nil {
		return fmt.Errorf("factor: loop state: the held-out rule's state is missing")
	}
	e.best, e.ref, e.last, e.bad, e.evals, e.iter, e.seen = s.Best, s.Ref, s.Last, s.Bad, s.Evals, s.Iter, s.Seen
	e.kept = nil
	if s.Kept {
		if kept == nil {
			return fmt.Errorf("factor: loop state: the held-out rule's best iterate is missing")
		}
		e.kept = into()
		copyFactors(e.kept, kept)
		e.kept.Iteration, e.kept.LogLik, e.kept.WKL = s.KeptIteration, s.KeptLogLik, s.KeptWKL
	}
	return nil
}

// saveRules returns the held-out rule's smoothing-rule state (nil
// without one that keeps state).
func saveRules(es *EarlyStop) *RuleState {
	if es == nil || es.SaveRules == nil {
		return nil
	}
	s := es.SaveRules()
	return &s
}

// loadRules restores what saveRules saved.
func loadRules(es *EarlyStop, s *RuleState) error {
	if es == nil || es.LoadRules == nil {
		return nil
	}
	if s == nil {
		return fmt.Errorf("factor: loop state: the smoothing rule's state is missing")
	}
	return es.LoadRules(*s)
}

// checkPoint checks that a point of a loop state has md's shape.
func checkPoint(p, md *Model, what string) error {
	if p == nil {
		return nil
	}
	if p.N != md.N || p.M != md.M || len(p.D) != len(md.D) || len(p.KT) != len(md.KT) || p.Precision != md.Precision {
		return fmt.Errorf("factor: loop state: %s point of shape n=%d m=%d (%d, %d blocks, %s), the model's n=%d m=%d (%d, %d, %s)",
			what, p.N, p.M, len(p.D), len(p.KT), p.Precision, md.N, md.M, len(md.D), len(md.KT), md.Precision)
	}
	for b := range md.D {
		if len(p.D[b]) != len(md.D[b]) {
			return fmt.Errorf("factor: loop state: %s point's D block %d has %d entries, want %d", what, b, len(p.D[b]), len(md.D[b]))
		}
	}
	for b := range md.KT {
		if len(p.KT[b]) != len(md.KT[b]) {
			return fmt.Errorf("factor: loop state: %s point's K block %d has %d entries, want %d", what, b, len(p.KT[b]), len(md.KT[b]))
		}
	}
	return nil
}

// pointModel returns a model of md's shape whose block a (every block
// for a < 0) is that of pick(a), not copied, and whose other blocks are
// md's (placeholders: State says they hold nothing); nil when no
// component has a point.
func pointModel(md *Model, comps []*sqComp, pick func(c *sqComp) *Model) *Model {
	var p *Model
	for _, c := range comps {
		x := pick(c)
		if x == nil {
			continue
		}
		if c.act < 0 {
			v := *x
			v.kt32, v.Smoothing = nil, nil
			return &v
		}
		if p == nil {
			v := *md
			v.D, v.KT = append([][]float64(nil), md.D...), append([][]float64(nil), md.KT...)
			v.kt32, v.Smoothing = nil, nil
			p = &v
		}
		p.D[c.act], p.KT[c.act] = x.D[0], x.KT[0]
	}
	return p
}

// view returns block a of p as a one-action model (all of p for a < 0).
func pointView(p *Model, a int) *Model {
	if a < 0 {
		return p
	}
	return p.blockView(a)
}

// saveComps returns the state of a SQUAREM fit after iteration iter
// (squaremLoop): its components' cycles and held-out rules, the loop's
// and the converger's last values, the smoothing rule's choices.
func saveComps(comps []*sqComp, md *Model, iter int, status Status, prev, logLik float64, conv Converger, es *EarlyStop) (*LoopState, error) {
	s := newLoopSave(iter, status, prev, logLik, conv, es)
	cycle := func(c *sqComp) *Model {
		switch {
		case c.done:
			return nil
		case c.x0 != nil:
			return c.x0
		}
		return c.back
	}
	best := func(c *sqComp) *Model {
		if c.done || c.early == nil {
			return nil
		}
		return c.early.kept
	}
	for _, c := range comps {
		cs := compSave{StepMax: c.stepMax, Phase: c.phase, Pending: c.pending, L1: c.l1, LL: c.ll,
			Last: c.last, Seen: c.seen, PrevTol: c.prevTol, Done: c.done, Stop: c.stop, Status: c.status,
			Rejected: c.rejected, Iteration: c.vm.Iteration, LogLikVM: c.vm.LogLik, WKLVM: c.vm.WKL,
			HasEarly: c.early != nil, Early: c.early.save()}
		switch {
		case c.done:
		case c.x0 != nil:
			cs.Point = pointX0
		case c.back != nil:
			cs.Point = pointBack
		}
		if c.done && cs.Early != nil {
			// An action that stopped has its best iterate in md.
			cs.Early.Kept = false
		}
		s.Comps = append(s.Comps, cs)
	}
	b, err := encodeLoopSave(s)
	if err != nil {
		return nil, err
	}
	return &LoopState{Iteration: iter, State: b, Cycle: pointModel(md, comps, cycle), Best: pointModel(md, comps, best)}, nil
}

// restoreComps puts the state s (of ls) back into the components of a
// resumed SQUAREM fit of md.
func restoreComps(comps []*sqComp, s *loopSave, ls *LoopState, md *Model, es *EarlyStop) error {
	if len(s.Comps) != len(comps) {
		return fmt.Errorf("factor: loop state of %d components, this fit has %d", len(s.Comps), len(comps))
	}
	if err := checkPoint(ls.Cycle, md, "cycle"); err != nil {
		return err
	}
	if err := checkPoint(ls.Best, md, "best"); err != nil {
		return err
	}
	if err := loadRules(es, s.Rules); err != nil {
		return err
	}
	for k, c := range comps {
		cs := s.Comps[k]
		if cs.HasEarly != (c.early != nil) {
			return fmt.Errorf("factor: loop state: component %d's held-out rule does not match this fit's", k)
		}
		if cs.Phase < atX0 || cs.Phase > atProposal || cs.Point < pointNone || cs.Point > pointBack {
			return fmt.Errorf("factor: loop state: component %d in phase %d with point %d", k, cs.Phase, cs.Point)
		}
		c.stepMax, c.phase, c.pending, c.l1, c.ll = cs.StepMax, cs.Phase, cs.Pending, cs.L1, cs.LL
		c.last, c.seen, c.prevTol, c.done, c.stop, c.status = cs.Last, cs.Seen, cs.PrevTol, cs.Done, cs.Stop, cs.Status
		c.rejected = cs.Rejected
		if c.act >= 0 {
			c.vm.Iteration, c.vm.LogLik, c.vm.WKL = cs.Iteration, cs.LogLikVM, cs.WKLVM
		}
		var kept *Model
		if c.early != nil {
			var from *Model
			if ls.Best != nil {
				from = pointView(ls.Best, c.act)
			}
			if err := c.early.load(cs.Early, from, func() *Model { return c.bufs.take() }); err != nil {
				return fmt.Errorf("%w (component %d)", err, k)
			}
			kept = c.early.kept
		}
		c.x0, c.x1, c.back = nil, nil, nil
		if cs.Point == pointNone {
			continue
		}
		if ls.Cycle == nil {
			return fmt.Errorf("factor: loop state: component %d's cycle point is missing", k)
		}
		p := c.bufs.take(kept)
		copyFactors(p, pointView(ls.Cycle, c.act))
		if cs.Point == pointBack {
			c.back = p
			continue
		}
		c.x0 = p
		if c.q != nil && c.phase == atX1 {
			// The logarithms of x0 that the penalty took for the
			// extrapolation: taken again, the same values.
			c.prior.penaltyLogs(p, c.q, c.lg0, c.workers)
		}
	}
	return nil
}

// saveEarly returns the state of plain EM's loop with a held-out rule
// after iteration iter.
func saveEarly(e *earlyState, iter int, status Status, prev, logLik float64, conv Converger) (*LoopState, error) {
	s := newLoopSave(iter, status, prev, logLik, conv, e.es)
	s.Early = e.save()
	b, err := encodeLoopSave(s)
	if err != nil {
		return nil, err
	}
	ls := &LoopState{Iteration: iter, State: b}
	if e.kept != nil {
		v := *e.kept
		v.kt32, v.Smoothing = nil, nil
		ls.Best = &v
	}
	return ls, nil
}

// restoreEarly puts the state s (of ls) back into plain EM's held-out
// rule e (nil: the fit has none, nor may the state).
func restoreEarly(e *earlyState, s *loopSave, ls *LoopState, md *Model, es *EarlyStop) error {
	if len(s.Comps) > 0 || (e == nil) != (s.Early == nil) {
		return fmt.Errorf("factor: the loop state is of another kind of fit (acceleration or held-out rule)")
	}
	if e == nil {
		return nil
	}
	if err := checkPoint(ls.Best, md, "best"); err != nil {
		return err
	}
	if err := loadRules(es, s.Rules); err != nil {
		return err
	}
	return e.load(s.Early, ls.Best, md.Clone)
}
