package owners

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// TestPassBackups: the pass's decisions, event by event, at chosen
// times: each worker takes its own shards in plan order; an idle worker
// waits while the running task is not late (backupFactor × the median
// seconds per nonzero × its nonzeros, at least backupMinWait), then takes
// the straggler's queued shards from the tail, then backs up its running
// task; never a second backup, never its own task; none with NoBackups;
// nothing left once every shard is done.
func TestPassBackups(t *testing.T) {
	for _, noBackups := range []bool{false, true} {
		s := &seq{log: hclog.NewNullLogger(), opt: Options{NoBackups: noBackups},
			plan: &Plan{Shards: []shard.Info{{NNZ: 100}, {NNZ: 100}, {NNZ: 100}, {NNZ: 100}}, Reduce: &factor.ReducePlan{Order: []int{0, 1, 2, 3}}}}
		ps := &passSched{s: s, queue: map[string][]int{"a": {0}, "b": {1, 2, 3}}, copies: map[int][]*taskCopy{}, done: make([]bool, 4)}
		ctx := context.Background()
		t0 := time.Unix(1000, 0)
		next := func(id string, at time.Duration) (int, *taskCopy, time.Duration, bool) {
			return ps.next(ctx, id, t0.Add(at))
		}
		finish := func(k int, took time.Duration) {
			c := ps.copies[k][0]
			ps.copies[k] = nil
			ps.done[k] = true
			ps.finished++
			ps.perNNZ = append(ps.perNNZ, took.Seconds()/float64(s.plan.Shards[k].NNZ))
			c.cancel()
		}
		if k, c, _, ok := next("a", 0); !ok || c == nil || k != 0 {
			t.Fatalf("a's first task: %d %v %v", k, c, ok)
		}
		if k, c, _, ok := next("b", 0); !ok || c == nil || k != 1 {
			t.Fatalf("b's first task: %d %v %v", k, c, ok)
		}
		finish(0, 100*time.Millisecond) // 1 ms per nonzero: due after 200 ms
		// a is idle; b's task started at 0 is not late before 200 ms.
		if _, c, wait, ok := next("a", 150*time.Millisecond); !ok || c != nil || wait != backupPoll {
			t.Fatalf("at 150 ms: copy %v wait %v ok %v, want a wait of the poll", c, wait, ok)
		}
		want := 5 * time.Millisecond
		if noBackups {
			want = backupPoll
		}
		if _, c, wait, ok := next("a", 195*time.Millisecond); !ok || c != nil || wait != want {
			t.Fatalf("at 195 ms: copy %v wait %v ok %v, want %v", c, wait, ok, want)
		}
		k, c, _, ok := next("a", 200*time.Millisecond)
		if noBackups {
			if c != nil || !ok {
				t.Fatalf("no backups: a took shard %d", k)
			}
			continue
		}
		if c == nil || k != 3 {
			t.Fatalf("at 200 ms: a took %d (copy %v), want b's last queued shard 3", k, c)
		}
		finish(3, 100*time.Millisecond)
		k, c, _, _ = next("a", 300*time.Millisecond)
		if c == nil || k != 2 {
			t.Fatalf("at 300 ms: a took %d (copy %v), want b's queued shard 2", k, c)
		}
		// Shard 1 runs on b (since 0 ms), shard 2 on a (since 300 ms): a
		// third worker backs up b's, the late one, and no task twice.
		k, c, _, _ = next("c", 300*time.Millisecond)
		if c == nil || k != 1 {
			t.Fatalf("c took %d (copy %v), want a backup of b's running shard 1", k, c)
		}
		if _, c, _, ok := next("c", 400*time.Millisecond); c != nil || !ok {
			t.Fatalf("c took a second copy (%v) of a task that has two", c)
		}
		if _, c, _, _ := next("a", time.Hour); c != nil {
			t.Fatal("a backed up its own task")
		}
		finish(2, time.Millisecond)
		ps.copies[1] = nil
		ps.done[1] = true
		if _, _, _, ok := next("a", time.Hour); ok {
			t.Fatal("work left after every shard is done")
		}
		if ps.backups != 3 {
			t.Fatalf("%d backups counted, want 3", ps.backups)
		}
	}
}
