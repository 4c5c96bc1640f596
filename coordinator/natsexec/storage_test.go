package natsexec_test

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/coordinator/owners"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// Storage faults on a real server: a store with no room (the server's
// max_file_store), objects corrupted through the NATS API (another object
// put under the same name and size; a chunk message of the stream edited
// in place, the object's metadata untouched).

// logLines keeps what a logger writes.
type logLines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// count is how many times s was logged.
func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

func (l *logLines) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: l})
}

// loadCounter counts the owners loads the workers start (one per worker
// per placement).
type loadCounter struct {
	mu    sync.Mutex
	loads int
}

func (c *loadCounter) op(op string, _ int) {
	if op == proto.OpLoad {
		c.mu.Lock()
		c.loads++
		c.mu.Unlock()
	}
}

func (c *loadCounter) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loads
}

// TestOwnersStoreFull: with the server's JetStream file storage
// (max_file_store) too small, the fit ends with one error that says the
// store is full, names the bucket and the object, how full and what to
// do, at the first write that meets it: no rollback, no second placement,
// no "workers answered" timeout. With room for nothing, the coordinator's
// own upload of the shards says it; with room for the shards but not the
// checkpoints, a worker's checkpoint write does.
func TestOwnersStoreFull(t *testing.T) {
	for _, c := range []struct {
		name     string
		maxStore int64
		where    string // what the error names
		loads    int    // owners loads started (2 workers, one placement)
	}{
		{"shards", 4 << 10, "upload shard 0: store shards/", 0},
		{"checkpoint", 200 << 10, "commit of iteration 2: worker: store owners/store-full/2/", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			shards := ownersDataGrid(t, 300, 2, 3, 4, 1)
			init := factor.NewRandom(300, 8, 2, factor.TieNone, 5)
			var lc loadCounter
			var log logLines
			cl, err := natsexec.StartLocalCluster(context.Background(), natsexec.LocalClusterConfig{StoreDir: t.TempDir(), Workers: 2, InProcess: true,
				MaxStore: c.maxStore, Exec: natsexec.Config{Logger: log.logger()}}, worker.Starter(worker.Config{OnOwnersOp: lc.op}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cl.Close() })
			_, err = cl.Exec.FitOwners(context.Background(), init.Clone(), shards, natsexec.OwnersOptions{Job: "store-full", Options: owners.Options{
				Converger: factor.Converger{MaxIter: 30}, GroupNNZ: ownersGroupNNZ, CheckpointEvery: 2}})
			if err == nil {
				t.Fatal("the fit succeeded on a full store")
			}
			for _, want := range []string{c.where, "in Object Store bucket " + wire.DefaultObjectBucket, "the JetStream store is full",
				"insufficient resources", "the account stores", "stream OBJ_" + wire.DefaultObjectBucket + " holds", "raise the server's max_file_store",
				"free disk space", "nats obj rm " + wire.DefaultObjectBucket} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q: want %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "giving up") || wire.ClassifyStore(err) != wire.StoreFull {
				t.Errorf("error %q: want a full store, not retried", err)
			}
			if n, r := lc.n(), log.count("rolling back"); n != c.loads || r != 0 {
				t.Errorf("%d owners loads, %d rollbacks: want %d loads (one placement), no rollback", n, r, c.loads)
			}
		})
	}
}

// spoilObject puts another object of the same size under name (one byte
// changed): the object's metadata digest is the new bytes'.
func spoilObject(t *testing.T, obs jetstream.ObjectStore, name string) {
	t.Helper()
	ctx := context.Background()
	data, err := obs.GetBytes(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x40
	if _, err := obs.PutBytes(ctx, name, data); err != nil {
		t.Fatal(err)
	}
}

// editChunk changes one byte of the last chunk message of object name in
// the bucket's stream (the message deleted and published again, same
// subject and size): its metadata, digest included, are untouched, and a
// read fails the digest check.
func editChunk(t *testing.T, js jetstream.JetStream, obs jetstream.ObjectStore, bucket, name string) {
	t.Helper()
	ctx := context.Background()
	info, err := obs.GetInfo(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	subj := "$O." + bucket + ".C." + info.NUID
	msg, err := st.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		t.Fatal(err)
	}
	data := slices.Clone(msg.Data)
	data[len(data)/2] ^= 0x40
	if err := st.DeleteMsg(ctx, msg.Sequence); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, subj, data); err != nil {
		t.Fatal(err)
	}
	if _, err := obs.GetBytes(ctx, name); !errors.Is(err, jetstream.ErrDigestMismatch) {
		t.Fatalf("the edited object reads with %v, want a digest mismatch", err)
	}
}

// storeOf opens the cluster's Object Store bucket on a connection of the
// test's.
func storeOf(t *testing.T, lc *natsexec.LocalCluster[*worker.Worker]) (jetstream.JetStream, jetstream.ObjectStore) {
	t.Helper()
	js, err := jetstream.New(dial(t, lc))
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(context.Background(), wire.DefaultObjectBucket)
	if err != nil {
		t.Fatal(err)
	}
	return js, obs
}

// TestOwnersCorruptCheckpoint: an object of the last checkpoint (9) is
// corrupted after it is recorded, by a put or by editing its chunk in the
// stream, so that the model cannot be taken out there; or one of
// checkpoint 6 is, and a worker then stops, so that the rollback's load
// meets it. The fit falls back to the checkpoint before (6, or 3),
// replays from there and ends bitwise the local fit, with one rollback
// for the corrupt checkpoint (not eight), and the bucket holds at most
// two checkpoints at the end. (Rollbacks are counted in the log: a
// re-placement for a straggler, which depends on the machine's load,
// places the job again too, but does not roll it back.)
func TestOwnersCorruptCheckpoint(t *testing.T) {
	const iters = 9
	for _, c := range []struct {
		name      string
		at        int // the iteration after whose commit the object is corrupted
		ck        int // the checkpoint corrupted
		edit      bool
		stop      int // the iteration after whose commit worker 1 stops (0: none)
		rollbacks int
	}{
		{"final-put", 9, 9, false, 0, 1},
		{"final-chunk", 9, 9, true, 0, 1},
		{"load", 7, 6, false, 7, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			shards := ownersData(t, 150, 2, 21)
			init := factor.NewRandom(150, 4, 2, factor.TieNone, 3)
			want, _ := fitLocal(t, shards, init, iters)
			var log logLines
			lc, err := natsexec.StartLocalCluster(context.Background(), natsexec.LocalClusterConfig{StoreDir: t.TempDir(), Workers: 3, InProcess: true,
				Exec: natsexec.Config{Logger: log.logger()}}, worker.Starter(worker.Config{}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = lc.Close() })
			js, obs := storeOf(t, lc)
			job := "corrupt-ck-" + c.name
			md := init.Clone()
			_, err = lc.Exec.FitOwners(context.Background(), md, shards, natsexec.OwnersOptions{Job: job, Options: owners.Options{
				Converger: factor.Converger{MaxIter: iters}, GroupNNZ: ownersGroupNNZ, ColBlocks: 3, CheckpointEvery: 3, MinWorkers: 3,
				Committed: func(_ context.Context, iter int) error {
					if iter == c.at {
						if name := proto.KObject(job, c.ck, 1, 1); c.edit {
							editChunk(t, js, obs, wire.DefaultObjectBucket, name)
						} else {
							spoilObject(t, obs, name)
						}
					}
					if iter == c.stop {
						return lc.Workers[1].Stop()
					}
					return nil
				}}})
			if err != nil {
				t.Fatal(err)
			}
			coordtest.SameModel(t, "after a corrupt checkpoint", md, want)
			if n, f := log.count("owners: rolling back to the last checkpoint"), log.count("the last checkpoint is corrupt; falling back to the one before"); n != c.rollbacks || f != 1 {
				t.Errorf("%d rollbacks, %d falls back: want %d and 1", n, f, c.rollbacks)
			}
			vs := checkpointsIn(t, obs, job)
			if len(vs) > 2 || !slices.Contains(vs, "9") {
				t.Errorf("checkpoints %v in the bucket: want at most 2, %d among them", vs, iters)
			}
		})
	}
}

// checkpointsIn are the versions of job's checkpoints whose CRC lists
// the bucket holds.
func checkpointsIn(t *testing.T, obs jetstream.ObjectStore, job string) []string {
	t.Helper()
	infos, err := obs.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var vs []string
	for _, in := range infos {
		if v, ok := strings.CutPrefix(in.Name, "owners/"+job+"/"); ok && strings.HasSuffix(v, "/crcs") {
			vs = append(vs, strings.TrimSuffix(v, "/crcs"))
		}
	}
	return vs
}

// TestOwnersCorruptShard: a shard object is corrupted in the bucket
// before a fit of its data. Put under the same name and size, its digest
// is not the shard's, and the fit's upload stores it again (no rollback);
// with its chunk edited in the stream (digest untouched), the workers'
// read fails its digest check, the coordinator stores it again from the
// shard it holds, and the fit goes on after one rollback. Either way the
// model is bitwise the local fit's, and the object is whole again.
func TestOwnersCorruptShard(t *testing.T) {
	const iters = 4
	for _, c := range []struct {
		name      string
		edit      bool
		rollbacks int
		log       string // what the coordinator logs of it
	}{{"put", false, 0, "a shard object is not the shard's bytes; storing it again"}, {"chunk", true, 1, "a shard object was corrupt; stored it again from the data"}} {
		t.Run(c.name, func(t *testing.T) {
			shards := ownersData(t, 150, 2, 23)
			init := factor.NewRandom(150, 4, 2, factor.TieNone, 4)
			want, _ := fitLocal(t, shards, init, iters)
			var log logLines
			lc, err := natsexec.StartLocalCluster(context.Background(), natsexec.LocalClusterConfig{StoreDir: t.TempDir(), Workers: 2, InProcess: true,
				Exec: natsexec.Config{Logger: log.logger()}}, worker.Starter(worker.Config{}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = lc.Close() })
			js, obs := storeOf(t, lc)
			// An earlier run stored the shards.
			if _, err := lc.Exec.Load(context.Background(), "earlier", shards); err != nil {
				t.Fatal(err)
			}
			name := proto.ShardObject(shards[2].Checksum)
			if c.edit {
				editChunk(t, js, obs, wire.DefaultObjectBucket, name)
			} else {
				spoilObject(t, obs, name)
			}
			md := init.Clone()
			var last natsexec.OwnersReport
			if _, err := lc.Exec.FitOwners(context.Background(), md, shards, natsexec.OwnersOptions{Job: "corrupt-shard", Options: owners.Options{
				Converger: factor.Converger{MaxIter: iters}, GroupNNZ: ownersGroupNNZ, ColBlocks: 3, CheckpointEvery: 2, MinWorkers: 2,
				Report: func(r natsexec.OwnersReport) { last = r }}}); err != nil {
				t.Fatal(err)
			}
			coordtest.SameModel(t, "after a corrupt shard object", md, want)
			if n := log.count(c.log); n != 1 || last.Rollbacks != c.rollbacks {
				t.Errorf("%q logged %d times, last report %+v: want once, %d rollbacks", c.log, n, last, c.rollbacks)
			}
			if _, err := obs.GetBytes(context.Background(), name); err != nil {
				t.Errorf("the shard object reads with %v after the fit", err)
			}
		})
	}
}

// TestOwnersDiskFull: the server's store directory is on a disk that
// fills up during the fit (a 600 KiB tmpfs; the test needs to mount one,
// and skips where it cannot). nats-server then answers no write (it logs
// "critical write error ... no space left on device"): writes stall. The
// fit ends at the second stalled write in a row with an error that says
// the store did not acknowledge the write, names the bucket and object
// and the full disk, not after eight rollbacks or a census timeout, and
// within seconds of the disk filling up: a put that stores nothing for
// wire.StallAfter is cut short (wire.PutObjectReader), not left to wait
// out its task's lease.
func TestOwnersDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the stalled writes take a task timeout and a record write's")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs (root only): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	shards := ownersDataGrid(t, 300, 2, 3, 4, 1)
	init := factor.NewRandom(300, 8, 2, factor.TieNone, 5)
	var log logLines
	lc, err := natsexec.StartLocalCluster(context.Background(), natsexec.LocalClusterConfig{StoreDir: dir, Workers: 2, InProcess: true,
		MaxStore: 64 << 20, Exec: natsexec.Config{Logger: log.logger()}}, worker.Starter(worker.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	// The default task lease (2 minutes): a put that stores nothing for
	// wire.StallAfter is cut short, so the fit ends in seconds, not at
	// two leases.
	t0 := time.Now()
	_, err = lc.Exec.FitOwners(context.Background(), init.Clone(), shards, natsexec.OwnersOptions{Job: "disk-full", Options: owners.Options{
		Converger: factor.Converger{MaxIter: 60}, GroupNNZ: ownersGroupNNZ, CheckpointEvery: 2}})
	t.Logf("the fit on a full disk ended after %v: %v", time.Since(t0).Round(time.Millisecond), err)
	if cerr := lc.Close(); cerr != nil {
		t.Error(cerr)
	}
	if err == nil {
		t.Fatal("the fit succeeded on a full disk")
	}
	for _, want := range []string{"the store stalled twice in a row", "did not acknowledge the write", "no space left on device", "store_dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q: want %q", err, want)
		}
	}
	if n := log.count("rolling back"); n != 1 {
		t.Errorf("%d rollbacks: want 1 (the first stall)\n%s", n, log.b.String())
	}
}

// TestOwnersResumeCorruptCheckpoint: coordinator A stops after iteration
// 7 (checkpoint 6; the record names 3 as the one before); an object of
// checkpoint 6 is then corrupted. Coordinator B, a new executor that
// knows the job only from its KV record, resumes it: its first load meets
// the damage, it falls back to checkpoint 3 (its CRC lists read from the
// bucket) and replays, and the model is bitwise the local fit's.
func TestOwnersResumeCorruptCheckpoint(t *testing.T) {
	const iters, job = 9, "resume-corrupt"
	shards := ownersData(t, 150, 2, 25)
	init := factor.NewRandom(150, 4, 2, factor.TieNone, 7)
	want, _ := fitLocal(t, shards, init, iters)
	lc := ownersCluster(t, 2, natsexec.Config{})
	_, obs := storeOf(t, lc)
	stop := errors.New("coordinator A stops")
	opts := owners.Options{Converger: factor.Converger{MaxIter: iters}, GroupNNZ: ownersGroupNNZ, ColBlocks: 3, CheckpointEvery: 3, MinWorkers: 2}
	aOpts := opts
	aOpts.Committed = func(_ context.Context, iter int) error {
		if iter == 7 {
			return stop
		}
		return nil
	}
	if _, err := lc.Exec.FitOwners(context.Background(), init.Clone(), shards, natsexec.OwnersOptions{Job: job, Options: aOpts}); !errors.Is(err, stop) {
		t.Fatalf("coordinator A: %v", err)
	}
	st, _, err := lc.Exec.State(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if o := st.Owners; o.Version != 6 || o.Previous == nil || o.Previous.Version != 3 || len(o.Previous.KCRC) != len(o.KCRC) || len(o.Previous.DCRC) != len(o.DCRC) {
		t.Fatalf("A's record: checkpoint %d, previous %+v", o.Version, o.Previous)
	}
	spoilObject(t, obs, proto.KObject(job, 6, 0, 1))
	var log logLines
	execB, err := natsexec.New(context.Background(), dial(t, lc), natsexec.Config{Logger: log.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer execB.Close()
	bOpts := opts
	bOpts.Resume = true
	md := init.Clone()
	if _, err := execB.FitOwners(context.Background(), md, shards, natsexec.OwnersOptions{Job: job, Options: bOpts}); err != nil {
		t.Fatal(err)
	}
	coordtest.SameModel(t, "resumed past a corrupt checkpoint", md, want)
	if r, f := log.count("resuming from the last checkpoint"), log.count("falling back to the one before"); r != 1 || f != 1 {
		t.Fatalf("%d resumes, %d falls back logged: want 1 and 1\n%s", r, f, log.b.String())
	}
}
