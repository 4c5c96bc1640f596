package coordinator_test

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/emsf/emsf/coordinator"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker"
	"github.com/emsf/emsf/worker/wire"
)

// fakeCluster is an executor of named fake workers for the verification
// logic (a fake for pure decisions: who answers, who lies): tasks run on
// a worker.Local and are answered under the name of the next worker, in
// turn, that the task does not avoid and that is not quarantined. The
// rogue worker answers right in the first iteration and wrong from the
// second on: the partial it computed for the shard the first time it
// had it (a stale partial under the new task: what a man in the middle
// that forwards tasks and replays answers does), or, for a shard new to
// it, the right partial with one value nudged; every check of the
// partial alone (its label, its Σx) passes.
type fakeCluster struct {
	*worker.Local
	names []string
	rogue string

	mu          sync.Mutex
	turn        int
	quarantined []string
	first       map[int]*factor.Partial
	lies        int
	// firstLie is the iteration of the first stale partial delivered.
	firstLie int
}

func newFakeCluster(names []string, rogue string) *fakeCluster {
	return &fakeCluster{Local: worker.NewLocal(len(names)), names: names, rogue: rogue, first: map[int]*factor.Partial{}}
}

func (c *fakeCluster) Quarantine(id string, _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.quarantined, id) {
		c.quarantined = append(c.quarantined, id)
	}
}

func (c *fakeCluster) Workers(context.Context) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.names) - len(c.quarantined), nil
}

func (c *fakeCluster) Submit(ctx context.Context, t wire.Task, deliver func(wire.Result)) {
	c.mu.Lock()
	name := ""
	for range 2 * len(c.names) {
		n := c.names[c.turn%len(c.names)]
		c.turn++
		if !slices.Contains(c.quarantined, n) && (!t.Avoids(n) || len(t.Avoid) >= len(c.names)) {
			name = n
			break
		}
	}
	c.mu.Unlock()
	c.Local.Submit(ctx, t, func(r wire.Result) {
		r.Worker = name
		c.mu.Lock()
		defer c.mu.Unlock()
		switch {
		case name == "" || slices.Contains(c.quarantined, name):
			r.Partial, r.Err = nil, context.Canceled
		case name == c.rogue && r.Err == nil:
			old, ok := c.first[t.Shard]
			if !ok {
				c.first[t.Shard] = clonePartial(r.Partial)
			}
			if t.Iteration >= 2 {
				// From the second iteration on, every answer is wrong:
				// the shard's stale partial when it has one, else the
				// right one with one value nudged (Σx unchanged).
				if !ok || old.Dh[0] == r.Partial.Dh[0] {
					old = clonePartial(r.Partial)
					old.Dh[0] += 1e-9 * (1 + math.Abs(old.Dh[0]))
				}
				r.Partial = old
				c.lies++
				if c.firstLie == 0 || t.Iteration < c.firstLie {
					c.firstLie = t.Iteration
				}
			}
		}
		deliver(r)
	})
}

func clonePartial(p *factor.Partial) *factor.Partial {
	q := *p
	q.Rows, q.Dh, q.X, q.Cols, q.KhT, q.Y = slices.Clone(p.Rows), slices.Clone(p.Dh), slices.Clone(p.X), slices.Clone(p.Cols), slices.Clone(p.KhT), slices.Clone(p.Y)
	return &q
}

// TestVerifyCatchesReplayedPartials: a worker that replays stale
// partials is caught by the check of its last task of the pass
// (VerifyLast) or a sampled one, quarantined, and the pass is run again
// without it: the model is bitwise factor.Fit's, for any sample rate
// with the last-task checks, with 2 and 3 workers. Without verification the same rogue corrupts the model (the
// test can fail).
func TestVerifyCatchesReplayedPartials(t *testing.T) {
	fc := newFitCase(t)
	for _, tc := range []struct {
		names []string
		rate  float64
		last  bool
	}{
		{[]string{"w1", "w2", "w3"}, 0.02, true},
		{[]string{"w1", "w2", "w3"}, 0.5, true},
		{[]string{"w1", "w2"}, 1e-9, true},
		{[]string{"w1", "w2", "w3"}, 1, false}, // every task sampled, no last-task checks
	} {
		c := newFakeCluster(tc.names, "w2")
		reps := fc.runWith(t, c, nil, func(o *coordinator.Options) { o.Verify, o.VerifyLast, o.VerifySalt = tc.rate, tc.last, 7 })
		c.Close()
		var verified, mismatches, redone int
		for _, r := range reps {
			verified, mismatches, redone = verified+r.Verified, mismatches+r.Mismatches, redone+r.Redone
		}
		if !slices.Equal(c.quarantined, []string{"w2"}) || c.lies == 0 || mismatches == 0 || redone == 0 || verified == 0 {
			t.Fatalf("%v at rate %v: quarantined %v after %d lies; %d tasks verified, %d mismatches, %d passes redone",
				tc.names, tc.rate, c.quarantined, c.lies, verified, mismatches, redone)
		}
		// Caught in the first pass where it lied (which pass that is
		// depends on which shards it happened to get).
		for _, r := range reps {
			if (r.Redone > 0) != (r.Iteration == c.firstLie) {
				t.Fatalf("%v at rate %v: first lie in iteration %d, but iteration %d was redone %d times",
					tc.names, tc.rate, c.firstLie, r.Iteration, r.Redone)
			}
		}
	}

	// Without verification the rogue's stale partials are folded.
	c := newFakeCluster([]string{"w1", "w2", "w3"}, "w2")
	defer c.Close()
	md := fc.init.Clone()
	if _, err := coordinator.Fit(context.Background(), c, fc.shards, fc.man, md, coordinator.Options{GroupNNZ: testGroupNNZ,
		Job: "test-job", Converger: fc.conv}); err != nil {
		t.Fatal(err)
	}
	if c.lies == 0 || md.Equal(fc.want) {
		t.Fatalf("without verification: %d lies, model equal to factor.Fit's: %v", c.lies, md.Equal(fc.want))
	}
}

// TestVerifyHonestCluster: with every worker honest, verification at any
// rate changes nothing: the model is factor.Fit's and nobody is
// quarantined.
func TestVerifyHonestCluster(t *testing.T) {
	fc := newFitCase(t)
	c := newFakeCluster([]string{"w1", "w2", "w3"}, "")
	defer c.Close()
	reps := fc.runWith(t, c, nil, func(o *coordinator.Options) { o.Verify, o.VerifyLast, o.VerifySalt = 1, true, 3 })
	for _, r := range reps {
		if r.Mismatches != 0 || r.Redone != 0 || r.Verified == 0 {
			t.Fatalf("iteration %d: %d verified, %d mismatches, %d redone", r.Iteration, r.Verified, r.Mismatches, r.Redone)
		}
	}
	if len(c.quarantined) != 0 {
		t.Fatalf("quarantined %v", c.quarantined)
	}
}
