package owners_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/owners"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker/wire/proto"
)

const groupNNZ = 150

// seqOf is 1, 2, …, n.
func seqOf(n int) []int {
	out := make([]int, n)
	for k := range out {
		out[k] = k + 1
	}
	return out
}

// TestRunBitwise: the sequencer on fake workers gives bitwise factor.Fit
// for 1, 2, 3, 4 and 8 workers, every tie mode, whole actions per worker
// (u ≥ P), groups of workers per action (u < P) and grids of column
// cells; it commits (announces) every iteration once, in order, and ends
// the job on every worker it placed.
func TestRunBitwise(t *testing.T) {
	const iters = 4
	for _, c := range []struct {
		name                  string
		n, u                  int
		tie                   factor.Tie
		workers, cells, ckpts int
	}{
		{"none-u3-p1", 120, 3, factor.TieNone, 1, 1, 3},
		{"none-u3-p2", 120, 3, factor.TieNone, 2, 1, 3},
		{"none-u1-p3", 150, 1, factor.TieNone, 3, 1, 2},
		{"none-u2-p4", 120, 2, factor.TieNone, 4, 1, 3},
		{"sharedk-u2-p8", 160, 2, factor.TieSharedK, 8, 1, 3},
		{"grid-u1-p4-q2", 160, 1, factor.TieNone, 4, 2, 3},
		{"grid-u1-p8-q4", 160, 1, factor.TieNone, 8, 4, 10},
		{"grid-u3-p2-q3", 120, 3, factor.TieNone, 2, 3, 3},
		{"grid-sharedk-u2-p4-q2", 160, 2, factor.TieSharedK, 4, 2, 1},
		{"sharedd-u3-p2", 120, 3, factor.TieSharedD, 2, 1, 3},
		{"sharedd-u2-p4-q2", 160, 2, factor.TieSharedD, 4, 2, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.n, 4, c.u, c.tie, 4, c.cells, c.workers, 3)
			want := h.local(iters, groupNNZ)
			ss := h.store.session("c1")
			got, last, err := h.run(context.Background(), ss, owners.Options{Converger: factor.Converger{MaxIter: iters},
				GroupNNZ: groupNNZ, ColBlocks: 5, CheckpointEvery: c.ckpts})
			if err != nil {
				t.Fatal(err)
			}
			coordtest.SameModel(t, c.name, got, want)
			if !slices.Equal(ss.announced, seqOf(iters)) || last.Rollbacks != 0 || last.Epoch != 1 || last.Workers != c.workers {
				t.Fatalf("announced %v, last report %+v", ss.announced, last)
			}
			rec := ss.records[len(ss.records)-1]
			if rec.Status != "iteration limit" || rec.Version != iters || rec.Checkpoint.Version != iters || len(rec.Y) != factor.NumK(c.u, c.tie) {
				t.Fatalf("last record %+v", rec)
			}
			if ends := h.cluster.opsOf("c1", proto.OpEnd); len(ends) != c.workers {
				t.Fatalf("ends %v: want one per worker", ends)
			}
			for id, w := range h.cluster.workers {
				if len(w.jobs) != 0 {
					t.Fatalf("worker %s still holds the job after its end", id)
				}
			}
		})
	}
}

// TestRunWorkerKilledAtCommit: worker k dies at the commit of iteration i
// (for several k and i, checkpoints every 3): the job rolls back once to
// the checkpoint before i, the workers left load it under epoch 2, the
// iterations since are replayed, every iteration is committed (announced)
// once in order, and the model is bitwise the local fit's.
func TestRunWorkerKilledAtCommit(t *testing.T) {
	const iters, every = 7, 3
	for _, c := range []struct {
		workers, cells int
		kill           string
		at             int
	}{
		{3, 1, "w1", 4}, {3, 1, "w0", 3}, {3, 1, "w2", 1}, {3, 1, "w1", 7}, {4, 2, "w3", 5}, {2, 1, "w0", 6},
	} {
		t.Run(fmt.Sprintf("p%d-q%d-%s-at-%d", c.workers, c.cells, c.kill, c.at), func(t *testing.T) {
			h := newHarness(t, 150, 4, 1, factor.TieNone, 4, c.cells, c.workers, 9)
			want := h.local(iters, groupNNZ)
			h.cluster.killAt[c.at] = c.kill
			ss := h.store.session("c1")
			got, last, err := h.run(context.Background(), ss, owners.Options{Converger: factor.Converger{MaxIter: iters},
				GroupNNZ: groupNNZ, ColBlocks: 6, CheckpointEvery: every})
			if err != nil {
				t.Fatal(err)
			}
			coordtest.SameModel(t, "after the kill", got, want)
			if !slices.Equal(ss.announced, seqOf(iters)) {
				t.Fatalf("announced %v, want each iteration once", ss.announced)
			}
			if last.Rollbacks != 1 || last.Epoch != 2 || last.Workers != c.workers-1 {
				t.Fatalf("last report %+v: want one rollback onto %d workers", last, c.workers-1)
			}
			// Epoch 2 loads the checkpoint before the failed commit.
			ck := (c.at - 1) / every * every
			for _, op := range h.cluster.opsOf("c1", proto.OpLoad) {
				if strings.HasPrefix(op, "load 2 ") && !strings.HasPrefix(op, fmt.Sprintf("load 2 %d ", ck)) {
					t.Fatalf("epoch 2 loads %q, want version %d", op, ck)
				}
				if strings.HasSuffix(op, " "+c.kill) && strings.HasPrefix(op, "load 2 ") {
					t.Fatalf("the dead worker was placed again: %q", op)
				}
			}
		})
	}
}

// TestRunLostWrite: the record write of version 5 (a commit record) and
// of version 6 (a checkpoint) are each lost once: each costs one rollback
// and replay, and the model and the commits are those of a fault-free
// run.
func TestRunLostWrite(t *testing.T) {
	const iters = 7
	h := newHarness(t, 120, 4, 2, factor.TieNone, 4, 1, 3, 4)
	want := h.local(iters, groupNNZ)
	h.store.loseSave[5], h.store.loseSave[6] = true, true
	ss := h.store.session("c1")
	got, last, err := h.run(context.Background(), ss, owners.Options{Converger: factor.Converger{MaxIter: iters},
		GroupNNZ: groupNNZ, ColBlocks: 3, CheckpointEvery: 3})
	if err != nil {
		t.Fatal(err)
	}
	coordtest.SameModel(t, "after lost writes", got, want)
	if !slices.Equal(h.store.lost, []int{5, 6}) || last.Rollbacks != 2 || !slices.Equal(ss.announced, seqOf(iters)) {
		t.Fatalf("lost %v, announced %v, last report %+v", h.store.lost, ss.announced, last)
	}
}

// TestRunTakenOver: coordinator A is paused after iteration 3 while
// coordinator B resumes the job (a lost compare-and-set race: B writes
// the record last) and places it under the next epoch. When A wakes up
// its requests are of a stale epoch: the workers refuse them, A's next
// record write fails for good (ErrLeaseLost), and A leaves without
// ending the job on the workers, which B still runs. B ends bitwise the
// local fit with no rollback.
func TestRunTakenOver(t *testing.T) {
	const iters = 7
	h := newHarness(t, 150, 4, 1, factor.TieNone, 4, 1, 3, 5)
	want := h.local(iters, groupNNZ)
	opts := owners.Options{Converger: factor.Converger{MaxIter: iters}, GroupNNZ: groupNNZ, ColBlocks: 4, CheckpointEvery: 3}
	sa, sb := h.store.session("A"), h.store.session("B")
	type result struct {
		md   *factor.Model
		last owners.Report
		err  error
	}
	bDone := make(chan result, 1)
	bPlaced := make(chan struct{})
	aOpts := opts
	aOpts.Committed = func(ctx context.Context, iter int) error {
		if iter != 3 {
			return nil
		}
		bOpts := opts
		bOpts.Resume = true
		bOpts.Committed = func(_ context.Context, iter int) error {
			if iter == 4 {
				close(bPlaced)
			}
			return nil
		}
		go func() {
			md, last, err := h.run(context.Background(), sb, bOpts)
			bDone <- result{md, last, err}
		}()
		<-bPlaced // A wakes up while B runs
		return nil
	}
	_, _, errA := h.run(context.Background(), sa, aOpts)
	if !errors.Is(errA, owners.ErrLeaseLost) {
		t.Fatalf("coordinator A: %v, want it to lose the lease", errA)
	}
	if ends := h.cluster.opsOf("A", proto.OpEnd); len(ends) != 0 {
		t.Fatalf("coordinator A, taken over, sent %v", ends)
	}
	b := <-bDone
	if b.err != nil {
		t.Fatal(b.err)
	}
	coordtest.SameModel(t, "coordinator B", b.md, want)
	if b.last.Rollbacks != 0 || b.last.Epoch != 2 || !slices.Equal(sb.announced, []int{4, 5, 6, 7}) {
		t.Fatalf("coordinator B: announced %v, last report %+v", sb.announced, b.last)
	}
}

// TestRunStraggler: one of three workers never answers a task until it
// is cancelled; the others take its queued shards and back up its running
// task in every pass (first answer wins), nothing rolls back, and the
// model is bitwise the local fit's. The fake clock moves only when the
// scheduler sleeps, so the backups do not depend on the machine's speed.
func TestRunStraggler(t *testing.T) {
	const iters = 4
	h := newHarness(t, 240, 4, 1, factor.TieNone, 12, 1, 3, 11)
	want := h.local(iters, groupNNZ)
	h.cluster.workers["w1"].slow = true
	h.clock.advance = true
	ss := h.store.session("c1")
	var reports []owners.Report
	got, last, err := h.run(context.Background(), ss, owners.Options{Converger: factor.Converger{MaxIter: iters},
		GroupNNZ: groupNNZ, ColBlocks: 3, CheckpointEvery: 100, Report: func(r owners.Report) { reports = append(reports, r) }})
	if err != nil {
		t.Fatal(err)
	}
	coordtest.SameModel(t, "with a straggler", got, want)
	if last.Rollbacks != 0 || last.Backups < iters {
		t.Fatalf("last report %+v: want backups in every pass and no rollback", last)
	}
	for _, r := range reports {
		if r.Shards["w1"] != 0 || r.Shards["w0"]+r.Shards["w2"] != len(h.shards) {
			t.Fatalf("iteration %d: shards won %v, want none by the straggler", r.Iteration, r.Shards)
		}
	}
}

// TestRunQuarantine: a worker that answers the census but serves no
// owners subject (ErrUnreachable) is quarantined at its first request; a
// worker whose task answers carry another shard's label, or the label of
// another hand-out of the task (its nonce), is struck at each and
// quarantined at the third. Each bad answer costs one rollback,
// the job then runs on the others, and the model is bitwise the local
// fit's.
func TestRunQuarantine(t *testing.T) {
	const iters = 4
	for _, c := range []struct {
		name      string
		bad       func(w *fakeWorker)
		rollbacks int
	}{
		{"stray", func(w *fakeWorker) { w.stray = true }, 1},
		{"liar", func(w *fakeWorker) { w.lie = true }, 3},
		{"replay", func(w *fakeWorker) { w.replay = true }, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, 120, 4, 2, factor.TieNone, 4, 1, 3, 6)
			want := h.local(iters, groupNNZ)
			c.bad(h.cluster.workers["w1"])
			ss := h.store.session("c1")
			got, last, err := h.run(context.Background(), ss, owners.Options{Converger: factor.Converger{MaxIter: iters},
				GroupNNZ: groupNNZ, ColBlocks: 3, CheckpointEvery: 2, NoBackups: true})
			if err != nil {
				t.Fatal(err)
			}
			coordtest.SameModel(t, c.name, got, want)
			if q := h.cluster.Quarantined(); !slices.Equal(q, []string{"w1"}) || last.Rollbacks != c.rollbacks || last.Workers != 2 || last.Quarantined != 1 {
				t.Fatalf("quarantined %v, last report %+v", q, last)
			}
		})
	}
}

// TestRunResume: a fit stopped after iteration 5 (its last checkpoint is
// 4) is resumed by another coordinator under the next epoch and ends
// bitwise the local fit of 8 iterations; the first iterations are not
// recomputed beyond the checkpoint.
func TestRunResume(t *testing.T) {
	const iters = 8
	h := newHarness(t, 120, 4, 2, factor.TieSharedK, 4, 1, 2, 12)
	want := h.local(iters, groupNNZ)
	opts := owners.Options{Converger: factor.Converger{MaxIter: iters}, GroupNNZ: groupNNZ, ColBlocks: 3, CheckpointEvery: 4}
	stop := errors.New("stopped")
	first := opts
	first.Committed = func(_ context.Context, iter int) error {
		if iter == 5 {
			return stop
		}
		return nil
	}
	if _, _, err := h.run(context.Background(), h.store.session("c1"), first); !errors.Is(err, stop) {
		t.Fatalf("first run: %v", err)
	}
	opts.Resume = true
	ss := h.store.session("c2")
	got, last, err := h.run(context.Background(), ss, opts)
	if err != nil {
		t.Fatal(err)
	}
	coordtest.SameModel(t, "resumed", got, want)
	if last.Epoch != 2 || !slices.Equal(ss.announced, []int{5, 6, 7, 8}) {
		t.Fatalf("resumed: announced %v, last report %+v", ss.announced, last)
	}
	for _, op := range h.cluster.opsOf("c2", proto.OpLoad) {
		if !strings.HasPrefix(op, "load 2 4 ") {
			t.Fatalf("the resumed run loads %q, want version 4 under epoch 2", op)
		}
	}
}

// TestRunNotAHeader: Run refuses a model with factors: the sequencer
// holds metadata only.
func TestRunNotAHeader(t *testing.T) {
	h := newHarness(t, 60, 2, 1, factor.TieNone, 2, 1, 1, 1)
	_, err := owners.Run(context.Background(), h.cluster.as(h.store.session("c")), h.store.session("c"), &fakeModel{h: h, md: h.init.Clone()},
		h.job(), h.init.Clone(), owners.Options{Converger: factor.Converger{MaxIter: 1}})
	if err == nil || !strings.Contains(err.Error(), "header") {
		t.Fatalf("a model with factors: %v", err)
	}
}

// TestNewPlanChecksMetadata: metadata that other processes report is
// checked: each bad line or group gets one error naming it.
func TestNewPlanChecksMetadata(t *testing.T) {
	h := newHarness(t, 60, 2, 2, factor.TieNone, 2, 1, 1, 1)
	hdr := &factor.Model{N: 60, M: 2, U: 2}
	if _, err := owners.NewPlan(h.job(), hdr, 0, 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		edit func(j *owners.Job)
		want string
	}{
		{"id", func(j *owners.Job) { j.Shards[1].ID = 7 }, "shard line 1 has ID 7"},
		{"action", func(j *owners.Job) { j.Shards[0].Action = 2 }, "action 2 outside"},
		{"rows", func(j *owners.Job) { j.Shards[0].RowHi = 61 }, "rows ["},
		{"cols", func(j *owners.Job) { j.Shards[0].ColLo = -1 }, "columns [-1"},
		{"nnz", func(j *owners.Job) { j.Shards[0].NNZ = -1 }, "-1 nonzeros"},
		{"sum", func(j *owners.Job) { j.Shards[0].Sum = -2 }, "Σcount -2"},
		{"data term", func(j *owners.Job) { j.Shards[0].DataTerm = mathNaN() }, "data term NaN"},
		{"checksum", func(j *owners.Job) { j.Shards[0].Checksum = "" }, "no checksum"},
		{"holders", func(j *owners.Job) { j.Holders = []string{"w0"} }, "1 holders"},
		{"group block", func(j *owners.Job) { j.Groups[0].DBlock = 5 }, "D block 5"},
		{"group rows", func(j *owners.Job) { j.Groups[0].Hi = 99 }, "row group 0:"},
		{"group cells", func(j *owners.Job) { j.Groups[0].Cells = []int{1, 0} }, "not distinct shards in order"},
		{"group action", func(j *owners.Job) { j.Groups[0].Cells = []int{len(j.Shards) - 1} }, "of D block"},
		{"group crc", func(j *owners.Job) { j.Groups[0].RowsCRC = "" }, "no CRC"},
		{"ungrouped", func(j *owners.Job) { j.Groups = j.Groups[1:] }, "in no row group"},
		{"none", func(j *owners.Job) { j.Shards = nil }, "no shards"},
	} {
		j := h.job()
		j.Shards = slices.Clone(j.Shards)
		j.Groups = slices.Clone(j.Groups)
		c.edit(j)
		if _, err := owners.NewPlan(j, hdr, 0, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
}

// TestAssignHolders: a shard stays on the worker that holds it when that
// costs the balance at most one shard, and moves otherwise (one holder
// of every shard does not get them all).
func TestAssignHolders(t *testing.T) {
	h := newHarness(t, 240, 2, 1, factor.TieNone, 8, 1, 1, 2)
	hdr := &factor.Model{N: 240, M: 2, U: 1}
	ids := []string{"a", "b", "c"}
	j := h.job()
	plan, err := owners.NewPlan(j, hdr, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	free := owners.Assign(plan, ids, nil, nil)
	// Holders: the free placement rotated by one worker.
	next := map[string]string{"a": "b", "b": "c", "c": "a"}
	holders := make([]string, len(j.Shards))
	for k, id := range free.ShardW {
		holders[k] = next[id]
	}
	kept := owners.Assign(plan, ids, nil, holders)
	same := 0
	for k := range holders {
		if kept.ShardW[k] == holders[k] {
			same++
		}
	}
	if same < len(holders)-1 {
		t.Fatalf("%d of %d shards stayed with their holders %v: %v", same, len(holders), holders, kept.ShardW)
	}
	all := slices.Repeat([]string{"a"}, len(j.Shards))
	one := owners.Assign(plan, ids, nil, all)
	count := map[string]int{}
	for _, id := range one.ShardW {
		count[id]++
	}
	if count["a"] > len(j.Shards)/3+2 || count["b"] == 0 || count["c"] == 0 {
		t.Fatalf("one holder of everything got %v", count)
	}
}

// TestNoNATS: the package imports nothing of NATS, even indirectly: its
// decisions run and are tested with nothing running.
func TestNoNATS(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the package's dependencies (a compiled test run elsewhere)")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.Contains(p, "nats") {
			t.Errorf("coordinator/owners depends on %s", p)
		}
	}
}

func mathNaN() float64 { return math.NaN() }

// TestRunVerify: a worker that computes wrong answers (finite, with the
// right Σx: every check of check.go passes) is caught by verification,
// quarantined, and its work since its last verified answer redone: the
// model is bitwise the local fit's. Every task verified (rate 1) with
// the fault from iteration 3 (its answers of iterations 1–2 were
// verified: the job goes back to checkpoint 2) and from iteration 1
// (never trusted: back to the start), and half the tasks, seeded; no
// fault, every task verified: each task is computed twice and nothing
// else changes; two workers that disagree cannot be told apart: each is
// struck, and the fit ends with one clear error once both are
// quarantined.
func TestRunVerify(t *testing.T) {
	const iters = 6
	for _, c := range []struct {
		name      string
		workers   int
		wrongFrom int
		rate      float64
	}{
		{"every task, wrong from 3", 3, 3, 1},
		{"every task, wrong from 1", 3, 1, 1},
		{"half the tasks, wrong from 2", 4, 2, 0.5},
		{"every task, no fault", 3, 0, 1},
		{"two workers", 2, 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, 120, 4, 2, factor.TieNone, 4, 1, c.workers, 6)
			want := h.local(iters, groupNNZ)
			rogue := h.cluster.workers["w1"]
			rogue.wrongFrom = c.wrongFrom
			ss := h.store.session("c1")
			got, last, err := h.run(context.Background(), ss, owners.Options{Converger: factor.Converger{MaxIter: iters},
				GroupNNZ: groupNNZ, ColBlocks: 3, CheckpointEvery: 2, NoBackups: true, Verify: c.rate, VerifySeed: 7})
			if c.workers == 2 {
				if err == nil || !strings.Contains(err.Error(), "quarantined") {
					t.Fatalf("two workers that disagree: err %v, want the fit to end once both are quarantined", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			coordtest.SameModel(t, c.name, got, want)
			q := h.cluster.Quarantined()
			if c.wrongFrom == 0 {
				tasks, verifications := 0, 0
				for _, w := range h.cluster.workers {
					tasks += w.tasks
					verifications += w.verifications
				}
				if len(q) != 0 || last.Rollbacks != 0 || last.Verifications != tasks || verifications != tasks {
					t.Fatalf("no fault: quarantined %v, %d tasks, %d verifications computed, last report %+v", q, tasks, verifications, last)
				}
				return
			}
			if !slices.Equal(q, []string{"w1"}) || last.Rogues != 1 || last.Workers != c.workers-1 || last.Rollbacks != 1 {
				t.Fatalf("quarantined %v, last report %+v; want w1 caught with one rollback", q, last)
			}
		})
	}
}
