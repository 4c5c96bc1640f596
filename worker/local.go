package worker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/wire"
)

// Local computes tasks in this process with a fixed number of goroutines.
// Shards and models are held in memory: Load keeps the shards, Publish a
// private copy of each model version (so the caller may commit into its
// model while late tasks still run on the old one). Close waits for every
// task it started.
type Local struct {
	slots chan *factor.Scratch
	n     int
	id    string

	mu     sync.Mutex
	shards map[string][]*shard.Shard
	models map[string]localModel
	wg     sync.WaitGroup
	closed bool
}

type localModel struct {
	iteration int
	md        *factor.Model
}

// NewLocal returns an in-process executor with workers goroutines (at
// least 1).
func NewLocal(workers int) *Local {
	workers = max(workers, 1)
	l := &Local{slots: make(chan *factor.Scratch, workers), n: workers, id: "local",
		shards: map[string][]*shard.Shard{}, models: map[string]localModel{}}
	for range workers {
		l.slots <- new(factor.Scratch)
	}
	return l
}

// Load keeps the shards of a job.
func (l *Local) Load(_ context.Context, job string, shards []*shard.Shard) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shards[job] = shards
	return 0, nil
}

// Publish keeps a copy of md as the model of the job's given iteration.
func (l *Local) Publish(_ context.Context, job string, iteration int, md *factor.Model) (int64, error) {
	c := md.Clone()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.models[job] = localModel{iteration, c}
	return 0, nil
}

// Workers returns the number of goroutines.
func (l *Local) Workers(context.Context) (int, error) { return l.n, nil }

// Submit runs t on a free goroutine and calls deliver once with its result.
func (l *Local) Submit(ctx context.Context, t wire.Task, deliver func(wire.Result)) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		deliver(wire.Result{Task: t, Worker: l.id, Err: fmt.Errorf("worker: local executor closed")})
		return
	}
	l.wg.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.wg.Done()
		start := time.Now()
		r := l.run(ctx, t)
		r.Elapsed = time.Since(start)
		deliver(r)
	}()
}

func (l *Local) run(ctx context.Context, t wire.Task) wire.Result {
	r := wire.Result{Task: t, Worker: l.id}
	var s *factor.Scratch
	select {
	case s = <-l.slots:
	case <-ctx.Done():
		r.Err = fmt.Errorf("worker: task %s/%d/%d: %w", t.Job, t.Iteration, t.Shard, ctx.Err())
		return r
	}
	defer func() { l.slots <- s }()
	l.mu.Lock()
	shards, lm := l.shards[t.Job], l.models[t.Job]
	l.mu.Unlock()
	switch {
	case t.Shard < 0 || t.Shard >= len(shards):
		r.Err = fmt.Errorf("worker: job %s has no shard %d", t.Job, t.Shard)
		return r
	case lm.md == nil || lm.iteration != t.Iteration:
		r.Err = fmt.Errorf("worker: job %s: no model published for iteration %d", t.Job, t.Iteration)
		return r
	}
	t0 := time.Now()
	p := new(factor.Partial)
	if err := factor.Compute(lm.md, shards[t.Shard].Block, s, p, t.WithLogLik); err != nil {
		r.Err = fmt.Errorf("worker: shard %d: %w", t.Shard, err)
		return r
	}
	r.Compute = time.Since(t0)
	r.Partial = p
	return r
}

// Close waits for the running tasks; later Submits fail.
func (l *Local) Close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.wg.Wait()
}
