package factor

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Pass computes the statistics of all blocks under md into acc (which it
// resets first), using up to workers goroutines. Partials are merged in
// block order, so acc is bitwise the same for every number of workers. At
// most 2·workers partials are held at once. Use a Passer to keep the
// working memory across passes.
func Pass(ctx context.Context, md *Model, blocks []*Block, acc *Accumulator, workers int, withLogLik bool) error {
	var ps Passer
	return ps.Pass(ctx, md, blocks, acc, workers, withLogLik)
}

// Passer runs passes like Pass, keeping its scratch memory and partials
// between calls (a pass at n = 20 000, m = 32 would otherwise allocate tens
// of MB). The zero value is ready; a Passer runs one pass at a time.
type Passer struct {
	scratch []Scratch
	pool    []*Partial
}

// Pass is the function Pass with p's memory.
func (ps *Passer) Pass(ctx context.Context, md *Model, blocks []*Block, acc *Accumulator, workers int, withLogLik bool) error {
	acc.Reset()
	workers = max(1, min(workers, len(blocks)))
	for len(ps.scratch) < workers {
		ps.scratch = append(ps.scratch, Scratch{})
	}
	window := 2 * workers
	for len(ps.pool) < window {
		ps.pool = append(ps.pool, new(Partial))
	}
	if workers <= 1 {
		p := ps.pool[0]
		for k, b := range blocks {
			if k%16 == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
			if err := Compute(md, b, &ps.scratch[0], p, withLogLik); err != nil {
				return err
			}
			if err := acc.mergeComputed(p); err != nil {
				return fmt.Errorf("factor: block %d: %w", k, err)
			}
		}
		return nil
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
	ready := make([]chan result, len(blocks))
	for k := range ready {
		ready[k] = make(chan result, 1)
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
				k := int(next.Add(1) - 1)
				if k >= len(blocks) {
					return
				}
				err := Compute(md, blocks[k], s, p, withLogLik)
				ready[k] <- result{p, err}
			}
		}(&ps.scratch[w])
	}
	// Deferred calls run last-in-first-out: cancel before waiting, or
	// workers blocked on a free partial would never return.
	defer func() { cancel(); wg.Wait() }()

	for k := range blocks {
		var r result
		select {
		case r = <-ready[k]:
		case <-ctx.Done():
			return ctx.Err()
		}
		if r.err != nil {
			return r.err
		}
		if err := acc.mergeComputed(r.p); err != nil {
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
}

// FitOptions configures Fit. The zero value is not usable: set at least a
// limit in Converger.
type FitOptions struct {
	// Alpha is the learning rate of each commit; 0 means 1 (plain EM).
	Alpha float64
	// Workers is the number of goroutines computing partials; 0 means 1.
	Workers   int
	Converger Converger
	// Progress, if set, is called after every committed iteration.
	Progress func(IterStats)
}

// FitResult says how a fit ended.
type FitResult struct {
	Status     Status
	Iterations int
	LogLik     float64
	Elapsed    time.Duration
}

// TotalCount returns Σc over the blocks, summed block by block in order.
func TotalCount(blocks []*Block) float64 {
	n := 0.0
	for _, b := range blocks {
		n += b.Sum()
	}
	return n
}

// DataTerm returns Σ c·log(c/x_i) over all blocks (see Block.DataTerm).
func DataTerm(blocks []*Block) float64 {
	t := 0.0
	for _, b := range blocks {
		t += b.DataTerm()
	}
	return t
}

// Fit runs batch EMSF on md in place until the converger stops it. Every
// pass checks that it saw every count exactly once (Σx = N).
func Fit(ctx context.Context, md *Model, blocks []*Block, opts FitOptions) (FitResult, error) {
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
	for k, b := range blocks {
		if err := b.CheckShape(md.N, md.U); err != nil {
			return FitResult{}, fmt.Errorf("factor: block %d: %w", k, err)
		}
	}
	total := TotalCount(blocks)
	if !(total > 0) {
		return FitResult{}, fmt.Errorf("factor: no data: the total count is %v", total)
	}
	dataTerm := DataTerm(blocks)
	acc := NewAccumulator(md)
	var ps Passer
	start := time.Now()
	prev := math.NaN()
	res := FitResult{LogLik: math.NaN()}
	for iter := 1; ; iter++ {
		t0 := time.Now()
		withLL := conv.NeedsLogLik(iter)
		if err := ps.Pass(ctx, md, blocks, acc, opts.Workers, withLL); err != nil {
			return res, err
		}
		if err := CheckSumX(acc.SumX, total); err != nil {
			return res, err
		}
		acc.Commit(md, alpha, dataTerm)
		now := time.Now()
		st := IterStats{Iteration: iter, LogLik: acc.LogLik, RelChange: math.NaN(),
			IterTime: now.Sub(t0), Elapsed: now.Sub(start), NNZ: acc.NNZ, SumX: acc.SumX}
		if withLL {
			if !math.IsNaN(prev) {
				st.RelChange = (acc.LogLik - prev) / math.Abs(acc.LogLik)
			}
			prev = acc.LogLik
			res.LogLik = acc.LogLik
		}
		if opts.Progress != nil {
			opts.Progress(st)
		}
		res.Iterations = iter
		res.Elapsed = st.Elapsed
		if s := conv.Check(iter, acc.LogLik, st.Elapsed); s != NotTerminated {
			res.Status = s
			return res, nil
		}
	}
}

// CheckSumX returns an error unless a pass's Σx equals the data's N (to
// rounding: 1e-12 relative), i.e. no count was lost or counted twice.
func CheckSumX(sumX, total float64) error {
	if math.Abs(sumX-total) > 1e-12*math.Abs(total) {
		return fmt.Errorf("factor: pass saw Σx = %v, want N = %v: counts lost or counted twice", sumX, total)
	}
	return nil
}
