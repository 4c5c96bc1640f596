package main

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/worker"
)

// pipelineDepth is the number of batches scanPipelined has in flight.
const pipelineDepth = 4

// pipeBatch is a batch in flight and the number of consumers that have
// not finished with it yet.
type pipeBatch struct {
	arrowio.TransitionBatch
	pending atomic.Int32
}

// scanPipelined is arrowio.ScanTransitions of each file of a dataset in
// turn, with the reading and parsing on one goroutine and each fn on a goroutine of its own (the first on
// the calling one): every fn sees every batch, in order, each valid only
// during the call, and a batch is read into again once every fn has
// returned from it. Reading and counting, or hashing and counting, use
// different cores. An error of a fn stops the reading and is returned as
// is (of several, the first fn's in the order of fns).
func scanPipelined(ctx context.Context, src *dataSource, opts arrowio.ReadOptions, fns ...func(*arrowio.TransitionBatch) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	depth := pipelineDepth + len(fns) - 1
	free := make(chan *pipeBatch, depth)
	for range depth {
		free <- &pipeBatch{}
	}
	full := make([]chan *pipeBatch, len(fns))
	for k := range full {
		full[k] = make(chan *pipeBatch, depth) // never blocks: holds every batch there is
	}
	done := make(chan error, 1)
	go func() {
		defer func() {
			for _, ch := range full {
				close(ch)
			}
		}()
		hand := func(b *arrowio.TransitionBatch) error {
			var c *pipeBatch
			select {
			case c = <-free:
			case <-ctx.Done():
				return ctx.Err()
			}
			b.Swap(&c.TransitionBatch) // c takes the rows; the scan fills c's old slices next
			c.pending.Store(int32(len(fns)))
			for _, ch := range full {
				ch <- c
			}
			return nil
		}
		var err error
		for _, f := range src.files {
			if err = worker.ScanDataFile(ctx, src.js, f, opts, hand); err != nil {
				break
			}
		}
		done <- err
	}()
	errs := make([]error, len(fns))
	consume := func(k int) {
		for c := range full[k] {
			if errs[k] == nil {
				if errs[k] = fns[k](&c.TransitionBatch); errs[k] != nil {
					cancel()
				}
			}
			if c.pending.Add(-1) == 0 {
				free <- c
			}
		}
	}
	var wg sync.WaitGroup
	for k := range fns[1:] {
		wg.Go(func() { consume(k + 1) })
	}
	consume(0)
	wg.Wait()
	err := <-done
	for _, ferr := range errs {
		if ferr != nil {
			return ferr
		}
	}
	return err
}
