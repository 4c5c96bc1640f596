package main

import (
	"context"

	"github.com/emsf/emsf/arrowio"
)

// pipelineDepth is the number of batches scanPipelined has in flight.
const pipelineDepth = 4

// scanPipelined is arrowio.ScanTransitions with fn run on the calling
// goroutine while a second goroutine reads and parses the batches after
// the one fn has: reading and counting use two cores. fn sees the batches
// in order, each valid only during the call, as with ScanTransitions; an
// error of fn stops the reading and is returned as is.
func scanPipelined(ctx context.Context, path string, opts arrowio.ReadOptions, fn func(*arrowio.TransitionBatch) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	free := make(chan *arrowio.TransitionBatch, pipelineDepth)
	for range pipelineDepth {
		free <- &arrowio.TransitionBatch{}
	}
	full := make(chan *arrowio.TransitionBatch, pipelineDepth)
	done := make(chan error, 1)
	go func() {
		defer close(full)
		done <- arrowio.ScanTransitions(ctx, path, opts, func(b *arrowio.TransitionBatch) error {
			var c *arrowio.TransitionBatch
			select {
			case c = <-free:
			case <-ctx.Done():
				return ctx.Err()
			}
			b.Swap(c) // c takes the rows; the scan fills c's old slices next
			full <- c // never blocks: full holds every batch there is
			return nil
		})
	}()
	var ferr error
	for c := range full {
		if ferr == nil {
			if ferr = fn(c); ferr != nil {
				cancel()
			}
		}
		free <- c
	}
	if err := <-done; ferr == nil {
		return err
	}
	return ferr
}
