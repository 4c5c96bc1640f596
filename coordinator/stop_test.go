package coordinator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/worker"
	"github.com/emsf/emsf/worker/wire"
)

// Stop cancels the task a worker is running: the task answers at once
// with an error naming the stop (not at the end of its 10-minute delay),
// and Stop returns once its handler has.
func TestWorkerStopCancelsTask(t *testing.T) {
	fc := newFitCase(t)
	s := startServer(t, 0)
	w, err := worker.Start(context.Background(), connect(t, s, "worker"), worker.Config{Delay: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	exec := newNATSExec(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := exec.Load(ctx, "stop", fc.shards); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.Publish(ctx, "stop", 1, fc.init); err != nil {
		t.Fatal(err)
	}
	results := make(chan wire.Result, 1)
	exec.Submit(ctx, wire.Task{Job: "stop", Iteration: 1, Shard: 0, Attempt: 1}, func(r wire.Result) { results <- r })
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		if w.Stats().Running == 0 {
			return context.DeadlineExceeded
		}
		return nil
	})
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("Stop did not return: the running task was not cancelled")
	}
	if n := w.Stats().Running; n != 0 {
		t.Errorf("%d tasks running after Stop returned", n)
	}
	select {
	case r := <-results:
		if r.Err == nil || !strings.Contains(r.Err.Error(), worker.ErrStopped.Error()) {
			t.Fatalf("result of the cancelled task: %+v, want an error naming %q", r, worker.ErrStopped)
		}
	case <-ctx.Done():
		t.Fatal("the cancelled task was never answered")
	}
}
