package owners_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/owners"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker/wire/proto"
)

// Storage faults: a checkpoint that fails its check, a corrupt shard
// object, a full store, and the back-off between rollbacks.

// TestBackoff: no wait for the first rollback since a commit, then 250 ms
// doubling up to 4 s.
func TestBackoff(t *testing.T) {
	for streak, want := range map[int]time.Duration{-1: 0, 0: 0, 1: 0, 2: 250 * time.Millisecond, 3: 500 * time.Millisecond,
		4: time.Second, 5: 2 * time.Second, 6: 4 * time.Second, 7: 4 * time.Second, 100: 4 * time.Second} {
		if got := owners.Backoff(streak); got != want {
			t.Errorf("Backoff(%d) = %v, want %v", streak, got, want)
		}
	}
}

// checkpointVersions are the versions of the checkpoints whose objects
// the store holds.
func (fs *fakeStore) checkpointVersions() []int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var vs []int
	for name := range fs.objects {
		parts := strings.Split(name, "/")
		if len(parts) < 4 || parts[0] != "owners" {
			continue
		}
		if v, err := strconv.Atoi(parts[2]); err == nil && !slices.Contains(vs, v) {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs
}

// spoil overwrites object name with other bytes of the same size.
func (fs *fakeStore) spoil(t *testing.T, name string) {
	t.Helper()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	data, ok := fs.objects[name]
	if !ok || len(data) == 0 {
		t.Fatalf("no object %s to spoil", name)
	}
	data = slices.Clone(data)
	data[len(data)/2] ^= 0x40
	fs.objects[name] = data
}

// TestRunCorruptCheckpoint: objects of the last checkpoint (9) are
// overwritten after it is recorded, so the model cannot be taken out
// there. The run falls back to the checkpoint before (6), replays 7 to 9
// and ends bitwise the local fit; with that one spoilt too, it goes back
// to the start (the initial model stored again) and replays everything.
// The store never holds more than two checkpoints (and the rows).
func TestRunCorruptCheckpoint(t *testing.T) {
	const iters = 9
	for _, c := range []struct {
		name   string
		spoil  func(job string) []string
		loadAt []string // the epochs' loads of w0 ("load epoch version w0"): one more per corrupt checkpoint
	}{
		{"last", func(job string) []string { return []string{proto.KObject(job, 9, 0, 1)} }, []string{"load 1 0 w0", "load 2 6 w0"}},
		{"row group", func(job string) []string { return []string{proto.DObject(job, 9, 2)} }, []string{"load 1 0 w0", "load 2 6 w0"}},
		{"both", func(job string) []string { return []string{proto.KObject(job, 9, 1, 0), proto.DObject(job, 6, 0)} },
			[]string{"load 1 0 w0", "load 2 6 w0", "load 3 0 w0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, 120, 4, 2, factor.TieNone, 4, 1, 3, 4)
			want := h.local(iters, groupNNZ)
			ss := h.store.session("c1")
			maxKept := 0
			got, _, err := h.run(context.Background(), ss, owners.Options{Converger: factor.Converger{MaxIter: iters},
				GroupNNZ: groupNNZ, ColBlocks: 3, CheckpointEvery: 3,
				Committed: func(_ context.Context, iter int) error {
					maxKept = max(maxKept, len(h.store.checkpointVersions()))
					if iter == iters {
						for _, name := range c.spoil("job") {
							h.store.spoil(t, name)
						}
					}
					return nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			coordtest.SameModel(t, "after a corrupt checkpoint", got, want)
			if loads := h.cluster.opsOf("c1", "load"); !slices.Equal(filterSuffix(loads, " w0"), c.loadAt) {
				t.Errorf("loads of w0 %v, want %v", filterSuffix(loads, " w0"), c.loadAt)
			}
			if vs := h.store.checkpointVersions(); maxKept > 2 || len(vs) > 2 || !slices.Contains(vs, iters) {
				t.Errorf("checkpoints kept %v at the end, at most %d during the fit: want at most 2, the last (%d) among them", vs, maxKept, iters)
			}
			if rec := h.store.rec; rec.Checkpoint.Version != iters || rec.Previous == nil || rec.Previous.Version != 6 {
				t.Errorf("record's checkpoint %d, previous %+v: want %d and 6", rec.Checkpoint.Version, rec.Previous, iters)
			}
		})
	}
}

func filterSuffix(ops []string, suffix string) []string {
	var out []string
	for _, o := range ops {
		if strings.HasSuffix(o, suffix) {
			out = append(out, o)
		}
	}
	return out
}

// TestRunCorruptCheckpointOnLoad: the last checkpoint (6) is spoilt and
// then a worker dies, so the rollback's load meets it: the run falls back
// to checkpoint 3 at once (one more rollback, not eight), and ends
// bitwise the local fit.
func TestRunCorruptCheckpointOnLoad(t *testing.T) {
	const iters = 8
	h := newHarness(t, 120, 4, 2, factor.TieNone, 4, 1, 3, 4)
	want := h.local(iters, groupNNZ)
	h.cluster.killAt[8] = "w2"
	ss := h.store.session("c1")
	got, last, err := h.run(context.Background(), ss, owners.Options{Converger: factor.Converger{MaxIter: iters},
		GroupNNZ: groupNNZ, ColBlocks: 3, CheckpointEvery: 3,
		Committed: func(_ context.Context, iter int) error {
			if iter == 7 {
				h.store.spoil(t, proto.KObject("job", 6, 0, 0))
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	coordtest.SameModel(t, "after a corrupt checkpoint met by a load", got, want)
	if last.Rollbacks != 2 || last.Workers != 2 {
		t.Fatalf("last report %+v: want 2 rollbacks (the lost worker, the corrupt checkpoint) onto 2 workers", last)
	}
	if loads := filterSuffix(h.cluster.opsOf("c1", "load"), " w0"); !slices.Equal(loads, []string{"load 1 0 w0", "load 2 6 w0", "load 3 3 w0"}) {
		t.Fatalf("loads of w0 %v", loads)
	}
}

// TestRunCorruptShard: a shard object fails its check on the workers:
// the store stores it again from the data and the run ends bitwise the
// local fit after one rollback; a store that cannot (the coordinator does
// not hold the data) ends the fit at once with the object named and the
// way out.
func TestRunCorruptShard(t *testing.T) {
	const iters = 4
	h := newHarness(t, 120, 4, 2, factor.TieNone, 4, 1, 3, 4)
	want := h.local(iters, groupNNZ)
	bad := proto.ShardObject(h.shards[3].Checksum)
	h.store.corrupt[bad] = true
	got, last, err := h.run(context.Background(), h.store.session("c1"), owners.Options{Converger: factor.Converger{MaxIter: iters},
		GroupNNZ: groupNNZ, ColBlocks: 3, CheckpointEvery: 3})
	if err != nil {
		t.Fatal(err)
	}
	coordtest.SameModel(t, "after a corrupt shard", got, want)
	if !slices.Equal(h.store.repaired, []string{bad}) || last.Rollbacks != 1 {
		t.Fatalf("repaired %v, last report %+v: want %s repaired once, one rollback", h.store.repaired, last, bad)
	}

	h = newHarness(t, 120, 4, 2, factor.TieNone, 4, 1, 3, 4)
	h.store.corrupt[bad], h.store.noRepair = true, true
	_, _, err = h.run(context.Background(), h.store.session("c1"), owners.Options{Converger: factor.Converger{MaxIter: iters},
		GroupNNZ: groupNNZ, ColBlocks: 3, CheckpointEvery: 3})
	if err == nil || !owners.IsFatal(err) || !errors.Is(err, owners.ErrNoRepair) && !strings.Contains(err.Error(), "is corrupt") ||
		!strings.Contains(err.Error(), "shard object "+bad+" is corrupt") || !strings.Contains(err.Error(), "nats obj rm") {
		t.Fatalf("err = %v: want the fit ended with the corrupt shard named and the way out", err)
	}
	if loads := h.cluster.opsOf("c1", "load"); len(filterSuffix(loads, " w0")) != 1 {
		t.Fatalf("loads %v: want one placement, no retry", loads)
	}
}

// TestRunStoreFull: a worker's checkpoint write finds the store full: the
// fit ends at once with the worker's error (which names the store and
// what to do), with no rollback and no other placement.
func TestRunStoreFull(t *testing.T) {
	h := newHarness(t, 120, 4, 2, factor.TieNone, 4, 1, 3, 4)
	h.store.full = 6
	_, _, err := h.run(context.Background(), h.store.session("c1"), owners.Options{Converger: factor.Converger{MaxIter: 9},
		GroupNNZ: groupNNZ, ColBlocks: 3, CheckpointEvery: 3})
	if err == nil || !owners.IsFatal(err) || !strings.Contains(err.Error(), "the JetStream store is full") || !strings.Contains(err.Error(), "commit of iteration 6") {
		t.Fatalf("err = %v: want the worker's store-full error at the commit of iteration 6", err)
	}
	if loads := filterSuffix(h.cluster.opsOf("c1", "load"), " w0"); !slices.Equal(loads, []string{"load 1 0 w0"}) {
		t.Fatalf("loads of w0 %v: want the first placement only", loads)
	}
}

// TestRunStoreStalled: a checkpoint write that stalls once (a server too
// loaded for a moment) costs one rollback and the model keeps its bits;
// one that stalls again (a full disk stays full) ends the fit at the
// second stall in a row, with the store's error.
func TestRunStoreStalled(t *testing.T) {
	const iters = 7
	h := newHarness(t, 120, 4, 2, factor.TieNone, 4, 1, 3, 4)
	want := h.local(iters, groupNNZ)
	h.store.stall[6] = 1
	got, last, err := h.run(context.Background(), h.store.session("c1"), owners.Options{Converger: factor.Converger{MaxIter: iters},
		GroupNNZ: groupNNZ, ColBlocks: 3, CheckpointEvery: 3})
	if err != nil {
		t.Fatal(err)
	}
	coordtest.SameModel(t, "after a stalled write", got, want)
	if last.Rollbacks != 1 {
		t.Fatalf("last report %+v: want one rollback", last)
	}

	h = newHarness(t, 120, 4, 2, factor.TieNone, 4, 1, 3, 4)
	h.store.stall[6] = 2
	_, _, err = h.run(context.Background(), h.store.session("c1"), owners.Options{Converger: factor.Converger{MaxIter: iters},
		GroupNNZ: groupNNZ, ColBlocks: 3, CheckpointEvery: 3})
	if err == nil || !owners.IsFatal(err) || !strings.Contains(err.Error(), "the store stalled twice in a row") || !strings.Contains(err.Error(), "did not acknowledge") {
		t.Fatalf("err = %v: want the fit ended at the second stall", err)
	}
	if loads := filterSuffix(h.cluster.opsOf("c1", "load"), " w0"); len(loads) != 2 {
		t.Fatalf("loads of w0 %v: want two placements", loads)
	}
}

// TestRunResumeCorruptCheckpoint: coordinator A stops after iteration 7
// (checkpoint 6, the one before 3); the last checkpoint is then damaged,
// or both are. Coordinator B resumes the job: its first load meets the
// damage and falls back to checkpoint 3 (the record names it) or to the
// start, replays the iterations since (no record of their passes: this
// run did not compute them) and ends bitwise the local fit.
func TestRunResumeCorruptCheckpoint(t *testing.T) {
	const iters = 9
	for _, c := range []struct {
		name   string
		spoil  []string
		loadAt []string // B's loads of w0
	}{
		{"last", []string{proto.KObject("job", 6, 1, 2)}, []string{"load 2 6 w0", "load 3 3 w0"}},
		{"both", []string{proto.DObject("job", 6, 1), proto.KObject("job", 3, 0, 0)}, []string{"load 2 6 w0", "load 3 3 w0", "load 4 0 w0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, 120, 4, 2, factor.TieNone, 4, 1, 3, 4)
			want := h.local(iters, groupNNZ)
			stop := errors.New("coordinator A stops")
			opt := owners.Options{Converger: factor.Converger{MaxIter: iters}, GroupNNZ: groupNNZ, ColBlocks: 3, CheckpointEvery: 3,
				Committed: func(_ context.Context, iter int) error {
					if iter == 7 {
						return stop
					}
					return nil
				}}
			if _, _, err := h.run(context.Background(), h.store.session("A"), opt); !errors.Is(err, stop) {
				t.Fatalf("coordinator A: %v", err)
			}
			if rec := h.store.rec; rec.Checkpoint.Version != 6 || rec.Previous == nil || rec.Previous.Version != 3 {
				t.Fatalf("A's record: checkpoint %d, previous %+v: want 6 and 3", rec.Checkpoint.Version, rec.Previous)
			}
			for _, name := range c.spoil {
				h.store.spoil(t, name)
			}
			opt.Committed, opt.Resume = nil, true
			got, _, err := h.run(context.Background(), h.store.session("B"), opt)
			if err != nil {
				t.Fatal(err)
			}
			coordtest.SameModel(t, "resumed past a corrupt checkpoint", got, want)
			if loads := filterSuffix(h.cluster.opsOf("B", "load"), " w0"); !slices.Equal(loads, c.loadAt) {
				t.Errorf("B's loads of w0 %v, want %v", loads, c.loadAt)
			}
		})
	}
}

// failingModel is a Model whose Final fails with err.
type failingModel struct {
	owners.Model
	err   error
	calls int
}

func (f *failingModel) Final(context.Context, *owners.Plan, owners.Checkpoint) error {
	f.calls++
	return f.err
}

// TestRunFinalFails: a Final that fails for another reason than a
// corrupt object (no room for the model's parts, say) ends the fit with
// its error at once: it is not rolled back and tried again.
func TestRunFinalFails(t *testing.T) {
	h := newHarness(t, 120, 4, 2, factor.TieNone, 4, 1, 3, 4)
	md := h.init.Clone()
	hdr := &factor.Model{N: md.N, M: md.M, U: md.U, Tie: md.Tie, Iteration: md.Iteration, LogLik: md.LogLik, WKL: md.WKL}
	full := errors.New("parts: the JetStream store is full")
	fm := &failingModel{Model: &fakeModel{h: h, md: md}, err: full}
	_, err := owners.Run(context.Background(), h.cluster.as(h.store.session("c1")), h.store.session("c1"), fm, h.job(), hdr,
		owners.Options{Converger: factor.Converger{MaxIter: 4}, GroupNNZ: groupNNZ, ColBlocks: 3, CheckpointEvery: 3, Clock: h.clock, TaskTimeout: time.Hour})
	if !errors.Is(err, full) || fm.calls != 1 {
		t.Fatalf("err = %v after %d calls of Final: want its error after one", err, fm.calls)
	}
}
