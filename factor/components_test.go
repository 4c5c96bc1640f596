package factor

import (
	"context"
	"fmt"
	"testing"
)

// actionBlocks returns the blocks of action a among blocks, relabeled as
// action 0 (the data of a one-action model).
func actionBlocks(t *testing.T, blocks []*Block, a int) []*Block {
	t.Helper()
	var out []*Block
	for _, b := range blocks {
		if b.Action != a {
			continue
		}
		var rows, cols []int32
		var vals []float64
		for r, i := range b.Rows {
			for k := b.Ptr[r]; k < b.Ptr[r+1]; k++ {
				rows, cols, vals = append(rows, i), append(cols, b.Cols[k]), append(vals, b.Vals[k])
			}
		}
		nb, err := NewBlock(0, rows, cols, vals)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, nb)
	}
	return out
}

// everyBlock is a stepper that computes every block in every pass, as a
// cluster's does: it has no setActive. It checks that each pass runs on
// the model the last iteration's Committed hook saw (a cluster's
// checkpoint stores that model, and the pass after it runs on what was
// stored): committed is that model's copy.
type everyBlock struct {
	l         *localStepper
	committed **Model
}

func (e everyBlock) Step(ctx context.Context, iter int, md *Model, acc *Accumulator, withLogLik bool) error {
	if c := *e.committed; c != nil && (!c.Equal(md) || !same32(c, md)) {
		return fmt.Errorf("pass %d runs on another model than iteration %d committed", iter, iter-1)
	}
	return e.l.Step(ctx, iter, md, acc, withLogLik)
}

// fitWith is Fit, or with every the same loop on a stepper of every
// block (everyBlock) that checks each pass runs on the model the
// iteration before it committed.
func fitWith(md *Model, blocks []*Block, opts FitOptions, every bool) (FitResult, error) {
	if !every {
		return Fit(context.Background(), md, blocks, opts)
	}
	var committed *Model
	return Loop(context.Background(), md, blocks, everyBlock{&localStepper{blocks: blocks, workers: opts.Workers}, &committed}, opts,
		LoopHooks{Committed: func(_ context.Context, _ IterStats, _ Status, _ *LoopState) error {
			committed = md.Clone()
			return nil
		}})
}

// TestSquaremComponents: a SQUAREM fit of a model without ties, with the
// prior and the held-out rule, is a fit per action. Each action's
// factors are bitwise those of the fit of a one-action model of that
// action's blocks alone (its data, its validation counts, its start, the
// least gain over its share of the validation counts),
// whatever the other actions do; the fit runs as many passes as the
// slowest action's fit, rejects the cycles they reject together, and
// its best iteration and scores are theirs; its log-likelihood is the
// sum of theirs, its iteration the latest of their kept iterates. A stepper that computes
// every block in every pass (a cluster's) gives the same fit bitwise:
// leaving out the blocks of actions that stopped changes no sum; and each
// pass runs on the model the iteration before it committed (what a
// cluster's checkpoint stores). For 1
// and 3 workers, float64 and float32, with and without the prior.
func TestSquaremComponents(t *testing.T) {
	const n, u, m = 150, 3, 6
	for _, p := range []*Prior{nil, {D: DefaultPriorD, K: DefaultPriorK}} {
		for _, prec := range []Precision{Float64, Float32} {
			for _, w := range []int{1, 3} {
				name := fmt.Sprintf("prior=%+v %s workers=%d", p, prec, w)
				start, blocks := holeyData(n, u, m, 11)
				start.SetPrecision(prec)
				// The validation counts: action 2 has rows the fit part
				// never saw (every third row of RandomCounts' is new).
				val := RandomCounts(n, u, 2, 3, 12)
				opts := func(v *Validation, minGain float64) FitOptions {
					return FitOptions{Accel: AccelSquarem, Workers: w, Prior: p, Converger: Converger{MaxIter: 400},
						EarlyStop: v.EarlyStop(3, minGain, w)}
				}
				// fit fits md; a one-action fit's least gain is the fit's
				// over its action's share of the validation counts (a
				// component's gain counts where it raises the fit's score
				// by the least gain).
				var share func(a int) float64
				fit := func(md *Model, blocks, val []*Block, u int, every bool, minGain float64) FitResult {
					t.Helper()
					v, err := NewValidation(n, u, TieNone, blocks, val)
					if err != nil {
						t.Fatal(err)
					}
					if u > 1 {
						share = v.EarlyStop(1, 0, 1).Share
					}
					res, err := fitWith(md, blocks, opts(v, minGain), every)
					if err != nil {
						t.Fatal(err)
					}
					return res
				}
				got := start.Clone()
				const minGain = 1e-4
				res := fit(got, blocks, val, u, false, minGain)
				every := start.Clone()
				eres := fit(every, blocks, val, u, true, minGain)
				res.Elapsed, eres.Elapsed = 0, 0
				if !every.Equal(got) || !same32(every, got) || eres != res || every.Iteration != got.Iteration || !sameFloat(every.LogLik, got.LogLik) {
					t.Fatalf("%s: the fit of a stepper of every block differs: %+v, %+v", name, eres, res)
				}
				var want FitResult
				ends := map[int]bool{}
				ll, iter := 0.0, 0
				for a := range u {
					one := start.blockView(a).Clone()
					r := fit(one, actionBlocks(t, blocks, a), actionBlocks(t, val, a), 1, false, minGain/share(a))
					if !sameBits(got.D[a], one.D[0]) || !sameBits(got.KT[a], one.KT[0]) {
						t.Fatalf("%s: action %d's factors differ from its own fit's (%+v)", name, a, r)
					}
					if !same32(got.blockView(a), one) {
						t.Fatalf("%s: action %d's float32 K differs from its own fit's", name, a)
					}
					if r.Status != HeldOutOptimum {
						t.Fatalf("%s: action %d's own fit ended by %v: the test wants held-out optima", name, a, r.Status)
					}
					ll += one.LogLik
					iter = max(iter, one.Iteration)
					want.Iterations = max(want.Iterations, r.Iterations)
					want.BestIteration = max(want.BestIteration, r.BestIteration)
					want.Rejected += r.Rejected
					want.Evaluations += r.Evaluations
					ends[r.Iterations] = true
				}
				if len(ends) < 2 {
					t.Fatalf("%s: every action stopped after %v passes: the test wants them apart", name, ends)
				}
				if res.Status != HeldOutOptimum || res.Iterations != want.Iterations || res.BestIteration != want.BestIteration ||
					res.Rejected != want.Rejected || res.Evaluations != want.Evaluations {
					t.Fatalf("%s: result %+v, the actions' fits together %+v", name, res, want)
				}
				if !sameFloat(got.LogLik, ll) || got.Iteration != iter {
					t.Fatalf("%s: log-likelihood %v, iteration %d; the actions' fits' %v, %d", name, got.LogLik, got.Iteration, ll, iter)
				}
				if err := got.Validate(); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
		}
	}
}

// TestSquaremComponentsEdges: a fit of a model without ties whose actions
// lack data. An action without training data but with validation counts
// is scored and stops like the others; an action without validation
// counts has no held-out rule and ends with the last action that has
// one; an action with neither keeps its start's factors. The fit is the
// same with a stepper of every block, and its model is valid.
func TestSquaremComponentsEdges(t *testing.T) {
	const n, u, m = 120, 4, 6
	all := RandomCounts(n, u, 5, 7, 21)
	val := RandomCounts(n, u, 2, 3, 22)
	// Training data for actions 0, 1 and 3; validation counts for 0, 1
	// and 2.
	var blocks, vblocks []*Block
	for _, b := range all {
		if b.Action != 2 {
			blocks = append(blocks, b)
		}
	}
	for _, b := range val {
		if b.Action != 3 {
			vblocks = append(vblocks, b)
		}
	}
	for _, p := range []*Prior{nil, {D: DefaultPriorD, K: DefaultPriorK}} {
		start := NewRandom(n, m, u, TieNone, 23)
		run := func(every bool) (*Model, FitResult) {
			md := start.Clone()
			v, err := NewValidation(n, u, TieNone, blocks, vblocks)
			if err != nil {
				t.Fatal(err)
			}
			opts := FitOptions{Accel: AccelSquarem, Prior: p, Converger: Converger{MaxIter: 300}, EarlyStop: v.EarlyStop(2, 1e-4, 1)}
			res, err := fitWith(md, blocks, opts, every)
			if err != nil {
				t.Fatalf("prior %+v: %v", p, err)
			}
			res.Elapsed = 0
			return md, res
		}
		got, res := run(false)
		every, eres := run(true)
		if !got.Equal(every) || res != eres {
			t.Fatalf("prior %+v: the fit of a stepper of every block differs: %+v, %+v", p, eres, res)
		}
		if res.Status != HeldOutOptimum || res.Iterations >= 300 {
			t.Fatalf("prior %+v: the fit ended by %v after %d passes: the actions with validation counts stop it", p, res.Status, res.Iterations)
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("prior %+v: %v", p, err)
		}
		// Action 3 (training data, no validation counts) was fitted: its
		// factors left the start.
		if sameBits(got.KT[3], start.KT[3]) {
			t.Fatalf("prior %+v: action 3 was not fitted", p)
		}
		if p == nil && (!sameBits(got.D[2], start.D[2])) {
			// Without a prior nothing moves a row without data.
			t.Fatalf("prior %+v: action 2's D (no training data) moved", p)
		}
	}
}

// TestSquaremComponentsTol: without a held-out rule, each action of a
// model without ties stops at its own relative change (between the
// points its cycle accepts) and the fit ends converged when the last one
// does, before the iteration limit; actions stop apart, and a stepper of
// every block gives the same fit.
func TestSquaremComponentsTol(t *testing.T) {
	start, blocks := holeyData(150, 3, 6, 31)
	run := func(every bool) (*Model, FitResult, []IterStats) {
		md := start.Clone()
		var stats []IterStats
		opts := FitOptions{Accel: AccelSquarem, Prior: &Prior{D: DefaultPriorD, K: DefaultPriorK}, Converger: Converger{Tol: 1e-6, MaxIter: 2000},
			Progress: func(s IterStats) { stats = append(stats, s) }}
		res, err := fitWith(md, blocks, opts, every)
		if err != nil {
			t.Fatal(err)
		}
		res.Elapsed = 0
		return md, res, stats
	}
	got, res, stats := run(false)
	every, eres, _ := run(true)
	if !got.Equal(every) || res != eres {
		t.Fatalf("the fit of a stepper of every block differs: %+v, %+v", eres, res)
	}
	if res.Status != Converged || res.Iterations >= 2000 {
		t.Fatalf("the fit ended by %v after %d passes, want converged", res.Status, res.Iterations)
	}
	// The passes' nonzeros fall as actions stop, and the progress counts
	// the actions still running down to none.
	nnz := map[int]bool{}
	for k, s := range stats {
		nnz[s.NNZ] = true
		if s.Actions != 3 || s.Running > 3 || k > 0 && s.Running > stats[k-1].Running {
			t.Fatalf("iteration %d: %d of %d actions running after %d", s.Iteration, s.Running, s.Actions, stats[max(k-1, 0)].Running)
		}
	}
	if last := stats[len(stats)-1]; last.Running != 0 || stats[0].Running != 3 {
		t.Fatalf("%d actions running after the first iteration, %d after the last", stats[0].Running, last.Running)
	}
	if len(nnz) < 3 {
		t.Fatalf("the passes saw %d distinct nonzero counts, want the actions to stop apart", len(nnz))
	}
}
