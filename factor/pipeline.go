package factor

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// A pass on several goroutines runs as a pipeline whenever the plan
// allows it (pipelinable), whatever the model's size: at n = 10^6 (K
// 256 MB) it used 31 % less CPU than merging partials, and since the
// kernel runs whole column ranges in assembly it is also ahead in cache
// (n = 20 000, m = 32: 25–30 % less CPU and wall on 2 goroutines; n =
// 2000: equal or better; docs/benchmarks.md, "DRAM-regime kernel").
// Partials are computed and merged for plans with several reduction
// groups per tree.

// pipelinable reports whether a pass of plan can run as a pipeline
// (Passer.pipeline): every tree has one reduction group, so every block's
// K̂ rows go straight into the accumulator's own arrays (the default
// GroupNNZ gives one group up to 2^25 nonzeros per K block).
func pipelinable(plan *ReducePlan) bool {
	for k := range plan.Trees {
		if plan.Trees[k].Groups() != 1 {
			return false
		}
	}
	return true
}

// stageSlot carries one block through the stages of a pipelined pass.
type stageSlot struct {
	pos int
	ci  *colIndex
	err error
	s   Scratch
	p   Partial
	// sum has the terms of the stages so far checked and summed.
	sum termSum
}

// pipeline runs a pass on workers ≥ 2 goroutines as a pipeline over
// column ranges: stage w runs, for every block in the canonical order,
// the block's columns j with w·n/W ≤ j < (w+1)·n/W, adding its K̂ rows
// straight into the accumulator (compute with a destination); the block
// then moves to stage w+1, which continues its rows of D̂. So each row
// of K̂ receives its terms from one stage in block order, each row of D̂
// in column order, and the sums are bitwise those of one goroutine,
// without a partial's K̂ rows written and merged again: at n = 10^6 the
// stages split the random rows of K and K̂ between the cores. Stage 0
// also prepares each block; the last (the caller's goroutine) finishes it
// and folds its D̂, Y and scalars in order (a block that is the first to
// touch its rows of D̂ has summed them straight into the accumulator's:
// Passer.direct). Requires pipelinable(plan) and ps.red reset to plan.
func (ps *Passer) pipeline(ctx context.Context, md *Model, blocks []*Block, plan *ReducePlan, workers int, withLogLik bool) error {
	order := plan.Order
	dest := make([]*kSum, len(order))
	for k := range plan.Trees {
		t := &plan.Trees[k]
		for pos := t.Start[0]; pos < t.Start[1]; pos++ {
			dest[pos] = ps.red.bottom[t.KBlock]
		}
	}
	// split[w] is the first column of stage w; busy[w] the time stage w
	// spent on blocks, which moves the splits for the next pass.
	split := ps.bal.splits(md.N, workers)
	ps.direct(md, blocks, plan)
	busy := make([]time.Duration, workers)
	// stage runs stage w's columns of a slot's block and checks and sums
	// their terms (the g it has just written are in this core's cache).
	stage := func(sl *stageSlot, w int) error {
		lo, _ := slices.BinarySearch(sl.ci.cols, split[w])
		hi, _ := slices.BinarySearch(sl.ci.cols, split[w+1])
		return runFused(md, blocks[order[sl.pos]], sl.ci, &sl.s, &sl.p, lo, hi, dest[sl.pos], &sl.sum, withLogLik)
	}
	// Two slots per stage keep every stage busy while the next one works.
	nslots := 2 * workers
	for len(ps.slots) < nslots {
		ps.slots = append(ps.slots, new(stageSlot))
	}
	for _, sl := range ps.slots {
		sl.s.rows = ps.rows
	}
	defer func() { // not to hold the accumulator's memory
		for _, sl := range ps.slots {
			sl.s.dhAcc = nil
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	free := make(chan *stageSlot, nslots)
	for _, sl := range ps.slots[:nslots] {
		free <- sl
	}
	// link[w] carries slots from stage w to stage w+1.
	link := make([]chan *stageSlot, workers-1)
	for w := range link {
		link[w] = make(chan *stageSlot, nslots)
	}
	send := func(c chan<- *stageSlot, sl *stageSlot) bool {
		select {
		case c <- sl:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var wg sync.WaitGroup
	complete := false
	// Deferred calls run last-in-first-out: cancel before waiting.
	defer func() {
		cancel()
		wg.Wait()
		if complete {
			ps.bal.update(split, busy)
		}
	}()
	wg.Add(workers - 1)
	go func() { // stage 0
		defer wg.Done()
		defer close(link[0])
		for pos, k := range order {
			var sl *stageSlot
			select {
			case sl = <-free:
			case <-ctx.Done():
				return
			}
			warmIndexes(md, blocks[k], &sl.s, dest[pos])
			t0 := time.Now()
			sl.pos, sl.sum = pos, termSum{}
			sl.s.dhAcc = ps.directDh(md, blocks[k], pos)
			sl.ci, sl.err = prepare(md, blocks[k], &sl.s, &sl.p, dest[pos])
			if sl.err == nil {
				sl.err = stage(sl, 0)
			}
			busy[0] += time.Since(t0)
			// The slot is the next stage's once sent: read err before.
			if err := sl.err; !send(link[0], sl) || err != nil {
				return
			}
		}
	}()
	for w := 1; w < workers-1; w++ {
		go func() { // middle stages
			defer wg.Done()
			defer close(link[w])
			for sl := range link[w-1] {
				if sl.err == nil {
					t0 := time.Now()
					sl.err = stage(sl, w)
					busy[w] += time.Since(t0)
				}
				if err := sl.err; !send(link[w], sl) || err != nil {
					return
				}
			}
		}()
	}
	// The last stage, in order.
	last := workers - 1
	done := 0
	for done < len(order) {
		if err := ctx.Err(); err != nil {
			return err
		}
		var sl *stageSlot
		var ok bool
		select {
		case sl, ok = <-link[last-1]:
		case <-ctx.Done():
			return ctx.Err()
		}
		if !ok {
			return ctx.Err() // an earlier stage stopped on cancellation
		}
		if sl.err != nil {
			return sl.err
		}
		t0 := time.Now()
		k := order[sl.pos]
		// The last stage's columns end the block: every term is summed.
		if err := stage(sl, last); err != nil {
			return err
		}
		if err := sl.sum.finish(blocks[k], sl.ci, &sl.s, &sl.p, withLogLik); err != nil {
			return err
		}
		if err := checkComputed(&sl.p); err != nil {
			return fmt.Errorf("factor: block %d: %w", k, err)
		}
		leaf, err := ps.red.dest(sl.p.Action)
		if err != nil {
			return fmt.Errorf("factor: block %d: %w", k, err)
		}
		if leaf != dest[sl.pos] {
			panic("factor: pipelined pass out of step with its reduction plan")
		}
		ps.red.finish(&sl.p, leaf, sl.s.dhAcc == nil)
		busy[last] += time.Since(t0)
		done++
		free <- sl
	}
	complete = true
	return nil
}

// warmIndexes builds block b's column index, and its row index where its
// pass into dst runs by row, if they are not built yet: stage 0 calls it
// outside the time it measures, since a block's first pass builds them
// once (3.9 s of stage 0's 4.9 s at n = 10^6, against 1 s for stage 1),
// and counted as stage 0's work it sent the next pass's split far from
// balance (a third of the columns to stage 0), which the halfway steps of
// stageBalance took four more passes to undo. A block that does not fit
// the model is left to prepare to report.
func warmIndexes(md *Model, b *Block, s *Scratch, dst *kSum) {
	if b.CheckShape(md.N, md.U) != nil {
		return
	}
	ci := b.columns(&s.count)
	if useRows(md, ci, s, dst) {
		b.rows(ci, &s.count)
	}
}

// stageBalance moves the pipeline's column splits from pass to pass so
// that its stages take equal time. Stage 0 also prepares every block and
// the last one finishes and folds it, and a dataset's nonzeros need not
// spread evenly over the columns, so equal column ranges leave one stage
// waiting (at n = 20 000 on 2 goroutines, stage 0 was busy 15.8 ms and
// stage 1 13.7 ms of a 17.3 ms pass). Where the columns split changes
// no sum: each row of K̂ still receives its terms from one stage in block
// order, each row of D̂ in column order, so results are bitwise the same
// for any splits.
type stageBalance struct {
	n     int
	share []float64 // fraction of the columns per stage, summing to 1
}

// splits returns the first column of each of workers stages and n.
func (b *stageBalance) splits(n, workers int) []int32 {
	if b.n != n || len(b.share) != workers {
		b.n = n
		b.share = make([]float64, workers)
		for w := range b.share {
			b.share[w] = 1 / float64(workers)
		}
	}
	split := make([]int32, workers+1)
	acc := 0.0
	for w := 1; w < workers; w++ {
		acc += b.share[w-1]
		split[w] = int32(min(max(acc*float64(n), float64(split[w-1])), float64(n)))
	}
	split[workers] = int32(n)
	return split
}

// update moves the shares halfway towards those that would have made the
// last pass's stages equally busy (each stage's time taken as its share
// of the columns times its rate), keeping each stage at least a tenth of
// an equal share.
func (b *stageBalance) update(split []int32, busy []time.Duration) {
	w := len(busy)
	if w != len(b.share) || split[w] <= 0 {
		return
	}
	n := float64(split[w])
	target := make([]float64, w)
	sum := 0.0
	for k := range busy {
		s := float64(split[k+1]-split[k]) / n
		if busy[k] <= 0 || s <= 0 {
			return // no measure of a stage's rate
		}
		target[k] = s / busy[k].Seconds() // share per second: 1/rate
		sum += target[k]
	}
	floor := 0.1 / float64(w)
	total := 0.0
	for k := range target {
		b.share[k] = max(floor, (b.share[k]+target[k]/sum)/2)
		total += b.share[k]
	}
	for k := range b.share {
		b.share[k] /= total
	}
}
