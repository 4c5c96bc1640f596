package factor

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Pass computes the statistics of all blocks under md into acc (which it
// resets first), using up to workers goroutines. Partials are folded in
// the canonical order (ReducePlan, with DefaultGroupNNZ) as soon as their
// turn comes, so acc is bitwise the same for every number of workers and
// at most workers+1 partials are held at once. Use a Passer to keep the
// working memory across passes.
func Pass(ctx context.Context, md *Model, blocks []*Block, acc *Accumulator, workers int, withLogLik bool) error {
	var ps Passer
	return ps.Pass(ctx, md, blocks, acc, workers, withLogLik)
}

// Passer runs passes like Pass, keeping its scratch memory, partials and
// reduction buffers between calls (a pass at n = 20 000, m = 32 would
// otherwise allocate tens of MB). The zero value is ready; a Passer runs
// one pass at a time.
type Passer struct {
	// GroupNNZ is the target nonzeros per reduction group of the
	// canonical order (ReducePlan); 0 means DefaultGroupNNZ.
	GroupNNZ int

	scratch []Scratch
	pool    []*Partial
	slots   []*stageSlot
	red     Reducer
	// mergePartials: on several goroutines, compute partials and merge
	// them even where the plan allows the pipeline (tests of both paths).
	mergePartials bool
	// bal balances the pipeline's stages from pass to pass.
	bal stageBalance
	// rows is Scratch.rows for every goroutine of a pass (tests).
	rows int8
	// fresh[pos]: see direct; seen is its working memory.
	fresh []bool
	seen  [][]uint64
	// noDirect: rows of D̂ always go through the partial (tests).
	noDirect bool
}

// direct marks the positions of plan whose block is the first in plan
// order to touch each of its rows of D̂ (within its D block), in
// ps.fresh. Such a block's row pass may sum its rows of D̂ straight
// into the accumulator (Scratch.dhAcc) where a one-goroutine pass or
// the pipeline folds the blocks in plan order: the rows are +0 there
// (Accumulator.Reset) until the block's terms come, and a later block
// that touches one of them adds its own sum, summed from zero, after
// them. So each row is bitwise (+0 + S₁) + S₂ …, what folding partials
// gives, without a block's D̂ (1.7 MB per default shard at m = 32)
// zeroed, written, read back and added. Split never cuts a row, so
// every block is fresh unless D is shared by actions (TieSharedD) or a
// grid cuts rows into cells. O(rows of the blocks), per pass.
func (ps *Passer) direct(md *Model, blocks []*Block, plan *ReducePlan) {
	ps.fresh = slices.Grow(ps.fresh[:0], len(plan.Order))[:len(plan.Order)]
	clear(ps.fresh)
	if ps.noDirect {
		return
	}
	nd := NumD(md.U, md.Tie)
	if len(ps.seen) != nd {
		ps.seen = make([][]uint64, nd)
	}
	for b := range ps.seen {
		if len(ps.seen[b]) != (md.N+63)/64 {
			ps.seen[b] = make([]uint64, (md.N+63)/64)
		} else {
			clear(ps.seen[b])
		}
	}
	for pos, k := range plan.Order {
		bl := blocks[k]
		seen := ps.seen[md.DBlock(bl.Action)]
		fresh := true
		for _, i := range bl.Rows {
			w, bit := i>>6, uint64(1)<<(i&63)
			if seen[w]&bit != 0 {
				fresh = false
			}
			seen[w] |= bit
		}
		ps.fresh[pos] = fresh
	}
}

// directDh returns where the row pass of block b, at position pos of the
// plan that direct marked, sums its rows of D̂ (Scratch.dhAcc): the
// accumulator's D̂ where the block is fresh, else nil (into p.Dh).
func (ps *Passer) directDh(md *Model, b *Block, pos int) []float64 {
	if !ps.fresh[pos] {
		return nil
	}
	return ps.red.acc.Dh[md.DBlock(b.Action)]
}

// Pass is the function Pass with p's memory.
func (ps *Passer) Pass(ctx context.Context, md *Model, blocks []*Block, acc *Accumulator, workers int, withLogLik bool) error {
	// The plan costs O(blocks); made per pass, it can never be stale.
	plan := PlanBlocks(blocks, md.Tie, ps.GroupNNZ)
	md.ensure32() // before any goroutine reads md
	order := plan.Order
	workers = max(1, min(workers, len(blocks)))
	ps.red.reset(acc, plan, workers)
	for len(ps.scratch) < workers {
		ps.scratch = append(ps.scratch, Scratch{})
	}
	for w := range ps.scratch {
		ps.scratch[w].rows = ps.rows
	}
	// One partial per worker and one more, so that a worker computes
	// while the merger folds (each is ≈ (rows + columns touched)·m·8
	// bytes: 33 MB for a default shard at n = 10^6, m = 32).
	window := workers + 1
	for len(ps.pool) < window {
		ps.pool = append(ps.pool, new(Partial))
	}
	if workers <= 1 {
		p := ps.pool[0]
		ps.direct(md, blocks, plan)
		s := &ps.scratch[0]
		defer func() { s.dhAcc = nil }() // not to hold acc's memory
		for pos, k := range order {
			if pos%16 == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
			// One goroutine computes and folds in the canonical order,
			// so the block's K̂ rows go straight into the reduction
			// (compute with a destination): bitwise the same sums.
			dst, err := ps.red.dest(blocks[k].Action)
			if err != nil {
				return fmt.Errorf("factor: block %d: %w", k, err)
			}
			s.dhAcc = ps.directDh(md, blocks[k], pos)
			if err := compute(md, blocks[k], s, p, withLogLik, nil, dst); err != nil {
				return err
			}
			if err := checkComputed(p); err != nil {
				return fmt.Errorf("factor: block %d: %w", k, err)
			}
			ps.red.finish(p, dst, s.dhAcc == nil)
		}
		return nil
	}

	if pipelinable(plan) && !ps.mergePartials {
		return ps.pipeline(ctx, md, blocks, plan, workers, withLogLik)
	}

	type result struct {
		p   *Partial
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A worker takes a free partial before it takes a block, so at most
	// window partials are in flight; the merger returns each after use.
	free := make(chan *Partial, window)
	for _, p := range ps.pool[:window] {
		free <- p
	}
	ready := make([]chan result, len(order))
	for pos := range ready {
		ready[pos] = make(chan result, 1)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func(s *Scratch) {
			defer wg.Done()
			for {
				var p *Partial
				select {
				case p = <-free:
				case <-ctx.Done():
					return
				}
				pos := int(next.Add(1) - 1)
				if pos >= len(order) {
					return
				}
				err := Compute(md, blocks[order[pos]], s, p, withLogLik)
				ready[pos] <- result{p, err}
			}
		}(&ps.scratch[w])
	}
	// Deferred calls run last-in-first-out: cancel before waiting, or
	// workers blocked on a free partial would never return.
	defer func() { cancel(); wg.Wait() }()

	for pos, k := range order {
		var r result
		select {
		case r = <-ready[pos]:
		case <-ctx.Done():
			return ctx.Err()
		}
		if r.err != nil {
			return r.err
		}
		if err := ps.red.mergeComputed(r.p); err != nil {
			return fmt.Errorf("factor: block %d: %w", k, err)
		}
		free <- r.p
	}
	return nil
}

// IterStats describes one committed iteration, for progress reports.
type IterStats struct {
	Iteration int
	// LogLik is the log-likelihood of the model before this commit (NaN
	// when this pass skipped it); RelChange its relative change since the
	// last evaluation (NaN when unknown).
	LogLik, RelChange float64
	// IterTime is this iteration's wall time, Elapsed the fit's so far.
	IterTime, Elapsed time.Duration
	NNZ               int
	SumX              float64
	// HeldOut is the held-out score taken after this iteration (NaN when
	// none was); HeldOutBad of HeldOutPatience scores in a row have not
	// gained on the best (EarlyStop), whose iteration is HeldOutBest.
	HeldOut                     float64
	HeldOutBad, HeldOutPatience int
	HeldOutBest                 int
	// Running of Actions are still fitted after this iteration, in a
	// SQUAREM fit whose actions stop apart (squaremLoop's components;
	// both 0 in any other fit).
	Running, Actions int
}

// FitOptions configures Fit. The zero value is not usable: set at least a
// limit in Converger.
type FitOptions struct {
	// Alpha is the learning rate of each commit; 0 means 1 (plain EM).
	Alpha float64
	// Workers is the number of goroutines computing partials; 0 means 1.
	Workers int
	// GroupNNZ is the target nonzeros per reduction group of the
	// canonical order (ReducePlan); 0 means DefaultGroupNNZ. A cluster
	// fit equals a local fit bitwise only with the same GroupNNZ.
	GroupNNZ  int
	Converger Converger
	// Progress, if set, is called after every committed iteration.
	Progress func(IterStats)
	// Commit, if set, is the commit rule in place of EMSF's
	// (Accumulator.Commit with Alpha): it updates md in place from acc,
	// the statistics of the pass under md, and counts the iteration
	// (md.Iteration++), as Accumulator.Commit does. Alpha must then be 0
	// or 1. MUCommit.Commit is MU's rule under LossWKL.
	Commit func(md *Model, acc *Accumulator)
	// Accel is the extrapolation between passes (AccelNone: plain EM,
	// bitwise as before it existed). AccelSquarem needs α = 1, EMSF's
	// commit and a loop that holds the model (no LoopHooks.Commit).
	Accel Accel
	// EarlyStop, if set, is the held-out stopping rule beside the
	// converger; the fit then returns its best-scoring iterate.
	EarlyStop *EarlyStop
	// Prior, if active, makes the commit MAP-EM's (see Prior); the
	// converger then watches the penalized log-likelihood. It needs α = 1
	// and EMSF's commit in a loop that holds the model.
	Prior *Prior
}

// FitResult says how a fit ended.
type FitResult struct {
	Status Status
	// Iterations counts passes (each an EM step's worth of work, whether
	// or not its point was kept).
	Iterations int
	LogLik     float64
	Elapsed    time.Duration
	// Rejected counts SQUAREM cycles the safeguard rejected.
	Rejected int
	// With an EarlyStop: the best held-out score, the iteration of the
	// iterate that scored it (the one returned) and how many scores
	// were taken.
	HeldOut       float64
	BestIteration int
	Evaluations   int
}

// TotalCount returns Σc over the blocks, summed block by block in order.
func TotalCount(blocks []*Block) float64 {
	n := 0.0
	for _, b := range blocks {
		n += b.Sum()
	}
	return n
}

// DataTerm returns Σ c·log(c/x_i) over all blocks (see Block.DataTerm):
// the blocks' DataTerms summed left to right in block order.
func DataTerm(blocks []*Block) float64 {
	return SumDataTerms(DataTerms(blocks))
}

// DataTerms returns each block's share of DataTerm: Σ c·log(c/x_i) over
// its nonzeros, with x_i the total count of row i over all blocks (a
// row that column cells cut across blocks, shard.SplitGrid, has its
// total summed over them first, in block order; otherwise the block's
// own, Block.DataTerm). A node that holds a block but not the others
// computes its share from the row totals of its range; whoever holds
// only the shares gets DataTerm with SumDataTerms.
func DataTerms(blocks []*Block) []float64 {
	if n, u, split := rowsSplit(blocks); split {
		// Column cells (shard.SplitGrid) cut rows across blocks: the row
		// totals x^a_i are summed over the blocks first.
		return dataTermsSplit(blocks, n, u)
	}
	out := make([]float64, len(blocks))
	for k, b := range blocks {
		out[k] = b.DataTerm()
	}
	return out
}

// SumDataTerms is DataTerm from the blocks' shares (DataTerms), summed
// left to right in block order.
func SumDataTerms(terms []float64) float64 {
	t := 0.0
	for _, bt := range terms {
		t += bt
	}
	return t
}

// rowsSplit reports whether some row of some action has nonzeros in more
// than one block (consecutive blocks of an action whose row spans meet, as
// the column cells of one row range do), with the n and u that cover the
// blocks.
func rowsSplit(blocks []*Block) (n, u int, split bool) {
	last := map[int]int32{} // per action: the last row of its blocks so far
	for _, b := range blocks {
		u = max(u, b.Action+1)
		if len(b.Rows) == 0 {
			continue
		}
		n = max(n, int(b.Rows[len(b.Rows)-1])+1)
		if l, ok := last[b.Action]; ok && b.Rows[0] <= l {
			split = true
		}
		last[b.Action] = max(last[b.Action], b.Rows[len(b.Rows)-1])
	}
	return n, u, split
}

// Stepper computes the passes of an EM loop: the loop's only part that
// differs between a local fit (goroutines) and a cluster fit (the
// coordinator's executor).
type Stepper interface {
	// Step fills acc (resetting it first) with the statistics of every
	// block under md, in the canonical order, for iteration iter.
	Step(ctx context.Context, iter int, md *Model, acc *Accumulator, withLogLik bool) error
}

// LoopHooks is what a caller of Loop adds around the iterations. The zero
// value adds nothing.
type LoopHooks struct {
	// Start is the first iteration to run (0 or 1: from the start). A
	// resumed fit starts after its last committed iteration: md then holds
	// that iteration's model, and md.LogLik its last evaluation, from
	// which the converger and the relative change go on.
	Start int
	// Resume, with Start > 1, is the loop state that a checkpoint of
	// iteration Start−1 kept (Committed's ls): a fit with acceleration
	// or a held-out rule goes on from it bitwise, and resumes only with
	// it. Nil for plain EM without a held-out rule.
	Resume *LoopState
	// Committed, if set, is called after every commit, with the
	// iteration's stats and the converger's verdict, before
	// FitOptions.Progress; an error stops the fit. ls is the loop's
	// state after the iteration when SaveState is set and the fit has
	// state beyond md (LoopState), else nil.
	Committed func(ctx context.Context, st IterStats, status Status, ls *LoopState) error
	// SaveState asks for the loop state in Committed.
	SaveState bool
	// Commit, if set, commits each pass in place of acc.Commit(md, α,
	// dataTerm): a cluster whose nodes hold the factors commits them
	// there. It must record the pass in md (Accumulator.RecordPass).
	Commit func(ctx context.Context, iter int, md *Model, acc *Accumulator, alpha, dataTerm float64) error
	// Rounds says that Commit rounds a Float32 model's factors as
	// Accumulator.Commit does (every committed entry through Round32):
	// without it Loop refuses a Float32 model with a Commit hook.
	Rounds bool
	// Accumulator, if set, is the loop's accumulator instead of
	// NewAccumulator(md): a NewScalarAccumulator for a stepper whose D̂
	// and K̂ are folded elsewhere.
	Accumulator *Accumulator
	// Sums, if set, are the data's Σc and data term for a loop whose
	// blocks are not in this process (Loop's blocks nil): the stepper's
	// nodes hold them, and whoever planned the fit checked their shapes.
	Sums *DataSums
}

// DataSums are what Loop needs of the data besides the passes: its total
// count (TotalCount: the blocks' Σc summed in block order) and its data
// term (DataTerm, or SumDataTerms of the blocks' shares).
type DataSums struct {
	Total, DataTerm float64
}

// Fit runs batch EMSF on md in place until the converger stops it. Every
// pass checks that it saw every count exactly once (Σx = N).
func Fit(ctx context.Context, md *Model, blocks []*Block, opts FitOptions) (FitResult, error) {
	return Loop(ctx, md, blocks, &localStepper{blocks: blocks, workers: opts.Workers, ps: Passer{GroupNNZ: opts.GroupNNZ}}, opts, LoopHooks{})
}

// localStepper runs passes on goroutines of this process.
type localStepper struct {
	blocks  []*Block
	workers int
	ps      Passer
	// active, when set, are the actions whose blocks the passes compute
	// (SetActive); sub holds those blocks.
	active, idle []bool
	sub          []*Block
}

func (l *localStepper) Step(ctx context.Context, _ int, md *Model, acc *Accumulator, withLogLik bool) error {
	blocks := l.blocks
	acc.idle = nil
	if l.active != nil {
		blocks, acc.idle = l.sub, l.idle
	}
	return l.ps.Pass(ctx, md, blocks, acc, l.workers, withLogLik)
}

// SetActive leaves the blocks of the actions not active out of the
// passes from now on (nil: every block). Each K block's sums are those
// of its own blocks in its own reduction tree, so the active actions'
// statistics are bitwise what a pass of every block gives.
func (l *localStepper) SetActive(active []bool) {
	if slices.Equal(active, l.active) {
		return
	}
	if !slices.Contains(active, false) {
		l.active, l.idle, l.sub = nil, nil, nil
		return
	}
	l.active, l.sub = slices.Clone(active), l.sub[:0]
	l.idle = make([]bool, len(active))
	for a, on := range active {
		l.idle[a] = !on
	}
	for _, b := range l.blocks {
		if active[b.Action] {
			l.sub = append(l.sub, b)
		}
	}
}

// Loop is the EM loop of every batch fit, local or cluster: it checks the
// options and the data, then per iteration has step compute the pass,
// checks Σx = N, commits (EMSF's commit with α, or opts.Commit), reports
// and asks the converger whether to go on. opts.Workers and
// opts.GroupNNZ are the stepper's business.
func Loop(ctx context.Context, md *Model, blocks []*Block, step Stepper, opts FitOptions, hooks LoopHooks) (FitResult, error) {
	conv := opts.Converger
	if err := conv.Validate(); err != nil {
		return FitResult{}, err
	}
	alpha := opts.Alpha
	if alpha == 0 {
		alpha = 1
	}
	if !(alpha > 0 && alpha <= 1) {
		return FitResult{}, fmt.Errorf("factor: learning rate %v must be in (0, 1]", alpha)
	}
	if opts.Commit != nil && alpha != 1 {
		return FitResult{}, fmt.Errorf("factor: learning rate %v: a fit with its own commit rule takes none (0 or 1)", alpha)
	}
	if err := checkAccel(opts, hooks, alpha); err != nil {
		return FitResult{}, err
	}
	if md.Precision != Float64 && hooks.Commit != nil && !hooks.Rounds {
		// The nodes that commit would have to round as Commit does.
		return FitResult{}, fmt.Errorf("factor: precision %s: a fit whose nodes commit the factors (LoopHooks.Commit) runs float64 models only", md.Precision)
	}
	for k, b := range blocks {
		if err := b.CheckShape(md.N, md.U); err != nil {
			return FitResult{}, fmt.Errorf("factor: block %d: %w", k, err)
		}
	}
	var total, dataTerm float64
	switch {
	case hooks.Sums != nil && blocks != nil:
		panic("factor: Loop: blocks and LoopHooks.Sums both given")
	case hooks.Sums != nil:
		total, dataTerm = hooks.Sums.Total, hooks.Sums.DataTerm
	default:
		total, dataTerm = TotalCount(blocks), DataTerm(blocks)
	}
	if !(total > 0) || math.IsInf(total, 0) {
		return FitResult{}, fmt.Errorf("factor: no data: the total count is %v", total)
	}
	if md.Precision == Float32 {
		// Idempotent on a model rounded before (a resumed fit's).
		md.RoundFactors()
	}
	acc := hooks.Accumulator
	if acc == nil {
		acc = NewAccumulator(md)
	}
	var priorQs [][]float64
	if opts.Prior.Active() {
		priorQs = priorQ(md, blocks)
	}
	if opts.Accel == AccelSquarem {
		return squaremLoop(ctx, md, blocks, step, opts, hooks, acc, total, dataTerm, priorQs)
	}
	var early *earlyState
	if opts.EarlyStop != nil {
		early = &earlyState{es: opts.EarlyStop}
	}
	start := time.Now()
	prev := math.NaN()
	res := FitResult{LogLik: math.NaN()}
	first := max(hooks.Start, 1)
	if first > 1 && hooks.Resume != nil {
		status, err := resumeLoop(hooks.Resume, first, func(s *loopSave) error {
			return restoreEarly(early, s, hooks.Resume, md, opts.EarlyStop)
		}, &prev, &res, &conv)
		if err != nil {
			return res, err
		}
		if status != NotTerminated {
			early.finish(md, &res)
			return res, nil
		}
	} else if first > 1 {
		// A resumed fit that reached its limit already stops at once.
		prev = md.LogLik
		if status := conv.Check(first-1, md.LogLik, 0); status == IterationLimit {
			return FitResult{Status: status, Iterations: first - 1, LogLik: md.LogLik}, nil
		}
	}
	for iter := first; ; iter++ {
		t0 := time.Now()
		withLL := conv.NeedsLogLik(iter)
		if err := step.Step(ctx, iter, md, acc, withLL); err != nil {
			return res, err
		}
		if err := CheckSumX(acc.SumX, total); err != nil {
			return res, err
		}
		if withLL && math.IsNaN(acc.LogLik) {
			// Never a model committed (or written) from a NaN pass.
			return res, fmt.Errorf("factor: iteration %d: the log-likelihood is NaN", iter)
		}
		objective := acc.LogLik
		if hooks.Commit != nil {
			if err := hooks.Commit(ctx, iter, md, acc, alpha, dataTerm); err != nil {
				return res, err
			}
		} else if priorQs != nil {
			if withLL {
				objective += opts.Prior.Penalty(md, priorQs)
			}
			mapCommit(md, md, acc, opts.Prior, priorQs, dataTerm, opts.Workers)
		} else if opts.Commit != nil {
			opts.Commit(md, acc)
		} else {
			acc.CommitWorkers(md, alpha, dataTerm, opts.Workers) // rounds a Float32 model itself
		}
		if md.Precision == Float32 && opts.Commit != nil {
			md.RoundFactors()
		}
		now := time.Now()
		st := IterStats{Iteration: iter, LogLik: objective, RelChange: math.NaN(),
			IterTime: now.Sub(t0), Elapsed: now.Sub(start), NNZ: acc.NNZ, SumX: acc.SumX}
		if withLL {
			if !math.IsNaN(prev) {
				st.RelChange = (objective - prev) / math.Abs(objective)
			}
			prev = objective
			res.LogLik = objective
		}
		res.Iterations = iter
		res.Elapsed = st.Elapsed
		status := conv.Check(iter, objective, st.Elapsed)
		st.HeldOut = math.NaN()
		if early != nil && early.observe(md, iter) && status == NotTerminated {
			status = HeldOutOptimum
		}
		early.stats(&st)
		if hooks.Committed != nil {
			var ls *LoopState
			if hooks.SaveState && early != nil {
				var err error
				if ls, err = saveEarly(early, iter, status, prev, res.LogLik, conv); err != nil {
					return res, err
				}
			}
			if err := hooks.Committed(ctx, st, status, ls); err != nil {
				return res, err
			}
		}
		if opts.Progress != nil {
			opts.Progress(st)
		}
		if status != NotTerminated {
			res.Status = status
			early.finish(md, &res)
			return res, nil
		}
	}
}

// stats records the held-out rule's state in st (nothing without one).
func (e *earlyState) stats(st *IterStats) {
	if e == nil {
		return
	}
	if e.evals > e.seen {
		st.HeldOut, e.seen = e.last, e.evals
	}
	st.HeldOutBad, st.HeldOutPatience, st.HeldOutBest = e.bad, e.es.Patience, e.iter
}

// finish puts the best iterate back into md and records the held-out
// results (nothing without an EarlyStop).
func (e *earlyState) finish(md *Model, res *FitResult) {
	if e == nil {
		return
	}
	e.restore(md)
	res.HeldOut, res.BestIteration, res.Evaluations = e.best, e.iter, e.evals
}

// checkAccel refuses an acceleration or a held-out rule that the fit
// cannot run.
func checkAccel(opts FitOptions, hooks LoopHooks, alpha float64) error {
	if es := opts.EarlyStop; es != nil && (es.Score == nil || es.Patience < 1 || !(es.MinGain >= 0)) {
		return fmt.Errorf("factor: held-out stopping needs a score, a patience >= 1 and a gain >= 0 (patience %d, gain %v)", es.Patience, es.MinGain)
	}
	resumed := hooks.Start > 1
	if resumed && hooks.Resume == nil && (opts.EarlyStop != nil || opts.Accel != AccelNone) {
		return fmt.Errorf("factor: a fit with acceleration %s or held-out stopping resumes from its loop state (LoopHooks.Resume), which is missing", opts.Accel)
	}
	if opts.EarlyStop != nil && hooks.Commit != nil {
		return fmt.Errorf("factor: held-out stopping needs the loop to hold the model")
	}
	if err := opts.Prior.check(); err != nil {
		return err
	}
	if opts.Prior.Active() && (alpha != 1 || opts.Commit != nil || hooks.Commit != nil) {
		return fmt.Errorf("factor: a Dirichlet prior (MAP-EM) needs α = 1 and EMSF's commit in a loop that holds the model")
	}
	switch opts.Accel {
	case AccelNone:
		return nil
	case AccelSquarem:
	default:
		return fmt.Errorf("factor: unknown acceleration %v", opts.Accel)
	}
	switch {
	case alpha != 1:
		return fmt.Errorf("factor: acceleration %s runs plain EM steps (α = 1), not learning rate %v", opts.Accel, alpha)
	case opts.Commit != nil:
		return fmt.Errorf("factor: acceleration %s runs EMSF's commit, not a fit's own commit rule", opts.Accel)
	case hooks.Commit != nil:
		return fmt.Errorf("factor: acceleration %s needs the loop to hold the model (the nodes commit it here)", opts.Accel)
	}
	return nil
}

// CheckSumX returns an error unless a pass's Σx equals the data's N (to
// rounding: 1e-12 relative), i.e. no count was lost or counted twice.
func CheckSumX(sumX, total float64) error {
	if math.Abs(sumX-total) > 1e-12*math.Abs(total) {
		return fmt.Errorf("factor: pass saw Σx = %v, want N = %v: counts lost or counted twice", sumX, total)
	}
	return nil
}
