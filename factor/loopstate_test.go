package factor

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
)

// loopCase is a fit whose loop has state beyond the model (LoopState).
type loopCase struct {
	name     string
	u        int
	tie      Tie
	prec     Precision
	prior    *Prior
	accel    Accel
	early    bool // the held-out rule (a fresh Validation per run)
	gain     float64
	patience int
	tol      float64
	iters    int
	worker   int
}

// checkpoint is what a checkpointer keeps after an iteration: copies of
// the committed model and of the loop state.
type checkpoint struct {
	md *Model
	ls *LoopState
}

func cloneLoopState(ls *LoopState) *LoopState {
	if ls == nil {
		return nil
	}
	c := &LoopState{Iteration: ls.Iteration, State: append([]byte(nil), ls.State...)}
	if ls.Cycle != nil {
		c.Cycle = ls.Cycle.CloneFactors()
	}
	if ls.Best != nil {
		c.Best = ls.Best.CloneFactors()
	}
	return c
}

// run fits start (a copy) from iteration after+1 on, resuming from cp
// when after > 0, and returns the model, the result, the progress and
// the checkpoint of every iteration.
func (lc loopCase) run(t *testing.T, start *Model, blocks, val []*Block, after int, cp *checkpoint) (*Model, FitResult, []IterStats, []checkpoint, string) {
	t.Helper()
	md := start.Clone()
	hooks := LoopHooks{SaveState: true}
	if after > 0 {
		md = cp.md.Clone()
		hooks.Start, hooks.Resume = after+1, cloneLoopState(cp.ls)
	}
	opts := FitOptions{Accel: lc.accel, Workers: lc.worker, Prior: lc.prior, Converger: Converger{MaxIter: lc.iters, Tol: lc.tol}}
	var v *Validation
	if lc.early {
		var err error
		if v, err = NewValidation(md.N, md.U, md.Tie, blocks, val); err != nil {
			t.Fatal(err)
		}
		opts.EarlyStop = v.EarlyStop(max(lc.patience, 3), lc.gain, lc.worker)
	}
	var cps []checkpoint
	var stats []IterStats
	opts.Progress = func(st IterStats) { stats = append(stats, st) }
	hooks.Committed = func(_ context.Context, st IterStats, _ Status, ls *LoopState) error {
		if (ls == nil) != (lc.accel == AccelNone && !lc.early) {
			t.Fatalf("%s: iteration %d: loop state %v", lc.name, st.Iteration, ls)
		}
		cps = append(cps, checkpoint{md.Clone(), cloneLoopState(ls)})
		return nil
	}
	res, err := Loop(context.Background(), md, blocks, &localStepper{blocks: blocks, workers: lc.worker}, opts, hooks)
	if err != nil {
		t.Fatalf("%s (after %d): %v", lc.name, after, err)
	}
	rules := ""
	if v != nil {
		// The rule's choices the fit leaves (where emsf fit's final
		// Tune starts).
		rules = fmt.Sprintf("%+v", v.RuleState())
	}
	return md, res, stats, cps, rules
}

// TestLoopStateResume: a fit resumed after any iteration from the
// committed model and the loop state of that iteration (what a
// checkpoint keeps) ends bitwise where the uninterrupted fit does: the
// model, its iteration and log-likelihood, the result (passes, status,
// rejections, held-out score, best iteration, evaluations) and the
// progress of every iteration after the resume. SQUAREM with one
// component per action, with one for the whole model (tied, and one
// action), plain EM with the held-out rule; with and without the prior,
// float64 and float32, the relative-change rule of each action's cycle.
// The resumed run builds its own Validation: the smoothing rule's
// choices come from the state.
func TestLoopStateResume(t *testing.T) {
	const n, m = 120, 5
	prior := &Prior{D: DefaultPriorD, K: DefaultPriorK}
	cases := []loopCase{
		{name: "components", gain: 1e-4, u: 3, prior: prior, accel: AccelSquarem, early: true, iters: 300, worker: 2},
		{name: "components float32", gain: 1e-4, u: 3, prec: Float32, prior: prior, accel: AccelSquarem, early: true, iters: 300, worker: 1},
		{name: "components no prior", gain: 1e-4, u: 3, accel: AccelSquarem, early: true, iters: 300, worker: 3},
		{name: "components tol", u: 3, accel: AccelSquarem, tol: 1e-6, iters: 300, worker: 2},
		{name: "components limit", gain: 1e-4, u: 3, prior: prior, accel: AccelSquarem, early: true, iters: 20, worker: 2},
		{name: "whole tied", gain: 1e-4, u: 2, tie: TieSharedK, prior: prior, accel: AccelSquarem, early: true, iters: 300, worker: 2},
		{name: "whole one action", gain: 1e-4, u: 1, prior: prior, accel: AccelSquarem, early: true, iters: 300, worker: 2},
		{name: "whole tol", u: 1, accel: AccelSquarem, tol: 1e-7, iters: 300, worker: 1},
		{name: "plain held-out", u: 2, accel: AccelNone, early: true, gain: 0, patience: 10, iters: 300, worker: 2},
	}
	for _, lc := range cases {
		t.Run(lc.name, func(t *testing.T) {
			start, blocks := holeyDataTie(n, lc.u, m, 21, lc.tie)
			start.SetPrecision(lc.prec)
			val := RandomCounts(n, lc.u, 2, 3, 22)
			want, wantR, wantS, cps, wantRules := lc.run(t, start, blocks, val, 0, nil)
			if len(cps) < 6 {
				t.Fatalf("only %d iterations", len(cps))
			}
			if lc.accel == AccelSquarem && lc.u > 1 && lc.tie == TieNone && lc.iters > 20 && wantR.Status == IterationLimit {
				t.Fatalf("the fit ran to its limit (%+v): no action stopped on its own", wantR)
			}
			for after := 1; after <= len(cps); after++ {
				got, gotR, gotS, _, rules := lc.run(t, start, blocks, val, after, &cps[after-1])
				if rules != wantRules {
					t.Fatalf("resumed after %d: the rule's choices %s, want %s", after, rules, wantRules)
				}
				if !got.Equal(want) || got.Iteration != want.Iteration || math.Float64bits(got.LogLik) != math.Float64bits(want.LogLik) {
					t.Fatalf("resumed after %d: model (iteration %d, loglik %v) differs from the uninterrupted fit's (%d, %v)",
						after, got.Iteration, got.LogLik, want.Iteration, want.LogLik)
				}
				if !same32(got, want) {
					t.Fatalf("resumed after %d: float32 copy of K differs", after)
				}
				gotR.Elapsed, wantR.Elapsed = 0, 0
				if fmt.Sprint(gotR) != fmt.Sprint(wantR) {
					t.Fatalf("resumed after %d: result %+v, want %+v", after, gotR, wantR)
				}
				if len(gotS) != len(wantS)-after {
					t.Fatalf("resumed after %d: %d iterations, want %d", after, len(gotS), len(wantS)-after)
				}
				for k, s := range gotS {
					w := wantS[after+k]
					if s.Iteration != w.Iteration || !sameFloat(s.LogLik, w.LogLik) || !sameFloat(s.RelChange, w.RelChange) ||
						!sameFloat(s.HeldOut, w.HeldOut) || s.HeldOutBad != w.HeldOutBad || s.HeldOutBest != w.HeldOutBest || s.Running != w.Running {
						t.Fatalf("resumed after %d: progress %+v, want %+v", after, s, w)
					}
				}
			}
		})
	}
}

// TestLoopStateRefused: a fit with acceleration or a held-out rule does
// not resume without its loop state, nor from the state of another
// iteration or another kind of fit; each error says what is wrong.
func TestLoopStateRefused(t *testing.T) {
	const n, m = 60, 4
	start, blocks := holeyData(n, 2, m, 31)
	val := RandomCounts(n, 2, 2, 3, 32)
	sq := loopCase{name: "squarem", u: 2, accel: AccelSquarem, early: true, iters: 30, worker: 1}
	_, _, _, cps, _ := sq.run(t, start, blocks, val, 0, nil)
	plain := loopCase{name: "plain", u: 2, accel: AccelNone, early: true, iters: 30, worker: 1}
	_, _, _, pcps, _ := plain.run(t, start, blocks, val, 0, nil)
	v, err := NewValidation(n, 2, TieNone, blocks, val)
	if err != nil {
		t.Fatal(err)
	}
	// Check: what a checkpointer can check before a fit runs.
	ls := cps[3].ls
	if err := ls.Check(cps[3].md, 4); err != nil {
		t.Errorf("Check of a good state: %v", err)
	}
	other := NewRandom(n+1, m, 2, TieNone, 1)
	for _, c := range []struct {
		name string
		ls   *LoopState
		md   *Model
		want string
	}{
		{"garbage", &LoopState{Iteration: 4, State: []byte("x")}, cps[3].md, "loop state"},
		{"another iteration", ls, cps[3].md, "resumes after 5"},
		{"another shape", ls, other, "point of shape"},
	} {
		after := 4
		if c.name == "another iteration" {
			after = 5
		}
		if err := c.ls.Check(c.md, after); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check, %s: %v, want an error with %q", c.name, err, c.want)
		}
	}
	for _, c := range []struct {
		name  string
		accel Accel
		hooks LoopHooks
		want  string
	}{
		{"no state", AccelSquarem, LoopHooks{Start: 5}, "which is missing"},
		{"another iteration", AccelSquarem, LoopHooks{Start: 5, Resume: cps[5].ls}, "of iteration 6"},
		{"plain's state", AccelSquarem, LoopHooks{Start: 5, Resume: pcps[3].ls}, "components"},
		{"squarem's state", AccelNone, LoopHooks{Start: 5, Resume: cps[3].ls}, "another kind of fit"},
		{"garbage", AccelSquarem, LoopHooks{Start: 5, Resume: &LoopState{Iteration: 4, State: []byte("x")}}, "loop state"},
	} {
		md := cps[3].md.Clone()
		opts := FitOptions{Accel: c.accel, Workers: 1, Converger: Converger{MaxIter: 30}, EarlyStop: v.EarlyStop(3, 1e-4, 1)}
		_, err := Loop(context.Background(), md, blocks, &localStepper{blocks: blocks, workers: 1}, opts, c.hooks)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}
