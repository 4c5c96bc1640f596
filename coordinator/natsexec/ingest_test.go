package natsexec_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/ingest"
	"github.com/emsf/emsf/coordinator/ingest/ingesttest"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker"
	"github.com/emsf/emsf/worker/ingestwire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// ingestCluster is an embedded NATS server, p in-process workers (each
// on its own connection, with the hooks hooks makes) and an executor.
type ingestCluster struct {
	srv     *server.Server
	exec    *natsexec.Executor
	workers []*worker.Worker
	conns   []*nats.Conn
	coord   *nats.Conn
}

func startIngestCluster(t *testing.T, p int, hooks func(k int, kill func()) worker.IngestHooks, cfg ...natsexec.Config) *ingestCluster {
	t.Helper()
	srv, err := natsexec.StartEmbedded(natsexec.EmbeddedConfig{StoreDir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	c := &ingestCluster{srv: srv}
	t.Cleanup(func() {
		if c.exec != nil {
			c.exec.Close()
		}
		for _, w := range c.workers {
			_ = w.Stop()
		}
		for _, nc := range c.conns {
			nc.Close()
		}
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	for k := range p {
		nc, err := nats.Connect("", nats.InProcessServer(srv), nats.Name(fmt.Sprintf("w%d", k)))
		if err != nil {
			t.Fatal(err)
		}
		c.conns = append(c.conns, nc)
		cfg := worker.Config{}
		if hooks != nil {
			var once sync.Once
			cfg.IngestHooks = hooks(k, func() { once.Do(nc.Close) })
		}
		w, err := worker.Start(context.Background(), nc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		c.workers = append(c.workers, w)
	}
	if c.coord, err = nats.Connect("", nats.InProcessServer(srv)); err != nil {
		t.Fatal(err)
	}
	c.conns = append(c.conns, c.coord)
	ecfg := natsexec.Config{ProbeEvery: 20 * time.Millisecond, PingWait: 100 * time.Millisecond}
	if len(cfg) > 0 {
		ecfg = cfg[0]
	}
	if c.exec, err = natsexec.New(context.Background(), c.coord, ecfg); err != nil {
		t.Fatal(err)
	}
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		ids, err := c.exec.Census(context.Background())
		if err == nil && len(ids) != p {
			err = fmt.Errorf("%d of %d workers answer", len(ids), p)
		}
		return err
	})
	return c
}

// held finds a shard in the cache of the worker holding it.
func (c *ingestCluster) held(id, checksum string) *shard.Shard {
	for _, w := range c.workers {
		if w.ID() == id {
			s, _ := w.CachedShard(checksum)
			return s
		}
	}
	return nil
}

// TestIngestMatchesLocalNATS is the property over NATS: random data, 1 …
// 32 splits, 1 … 8 in-process workers on an embedded server, and every
// shard the workers hold is bitwise the local fit's (manifest, lines,
// n, u, fingerprint).
func TestIngestMatchesLocalNATS(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for p := 1; p <= 8; p++ {
		n, u, target := 2+rng.IntN(400), 1+rng.IntN(4), 1+rng.IntN(200)
		rows := ingesttest.RandomRows(rng, n, u, 500+rng.IntN(5000), target, p%2 == 0)
		dir := t.TempDir()
		files := ingesttest.Dataset(t, rng, dir, rows, 1+rng.IntN(4))
		splits := 1 + rng.IntN(32)
		holdout := 0.0
		if p%3 == 0 {
			holdout = 0.2
		}
		q := 1 + rng.IntN(3)
		what := fmt.Sprintf("P=%d (n=%d u=%d rows=%d splits≈%d holdout=%v q=%d target=%d)", p, n, u, len(rows), splits, holdout, q, target)
		want := ingesttest.LocalShards(t, files, arrowio.ReadOptions{}, holdout, 5, target, q)
		c := startIngestCluster(t, p, nil)
		res, err := c.exec.Ingest(context.Background(), ingest.Options{Job: fmt.Sprintf("prop-%d", p), Input: dir,
			SplitBytes: max(1, ingesttest.TotalSize(files)/int64(splits)), Holdout: holdout, Seed: 5, Target: target, ColCells: q,
			SegmentBytes: 100 + rng.IntN(5000), OutboxBytes: int64(1 + rng.IntN(30000)), AheadBytes: int64(1 + rng.IntN(30000)), Window: 1 + rng.IntN(4)})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		ingesttest.CheckSame(t, what, c.held, res, want)
	}
}

// TestIngestWorkerKilledNATS: a worker that leaves NATS as a mapper (after
// a segment) or as a reducer (after a split), at that exact point (a test
// hook closes its connection): the shards are still the local ones, from
// a second epoch of the workers left, held only by those.
func TestIngestWorkerKilledNATS(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	rows := ingesttest.RandomRows(rng, 300, 3, 8000, 60, true)
	dir := t.TempDir()
	files := ingesttest.Dataset(t, rng, dir, rows, 3)
	want := ingesttest.LocalShards(t, files, arrowio.ReadOptions{}, 0.25, 7, 60, 2)
	for _, role := range []string{"mapper", "reducer"} {
		t.Run(role, func(t *testing.T) {
			c := startIngestCluster(t, 4, func(k int, kill func()) worker.IngestHooks {
				if k != 2 {
					return worker.IngestHooks{}
				}
				if role == "mapper" {
					return worker.IngestHooks{Segment: func(split, reducer, seq int) {
						if seq == 1 {
							kill()
						}
					}}
				}
				return worker.IngestHooks{Fed: func(split int) {
					if split == 3 {
						kill()
					}
				}}
			})
			res, err := c.exec.Ingest(context.Background(), ingest.Options{Job: "killed-" + role, Input: dir,
				SplitBytes: ingesttest.TotalSize(files) / 10, Holdout: 0.25, Seed: 7, Target: 60, ColCells: 2,
				SegmentBytes: 1000, OutboxBytes: 5000, AheadBytes: 5000})
			if err != nil {
				t.Fatal(err)
			}
			if res.Epochs < 2 {
				t.Fatalf("%d epochs: the kill did not happen", res.Epochs)
			}
			ingesttest.CheckSame(t, role, c.held, res, want)
			dead := c.workers[2].ID()
			for _, set := range res.Sets {
				for _, l := range set.Lines {
					if l.Holder == dead {
						t.Fatalf("shard %d is held by the dead worker", l.ID)
					}
				}
			}
		})
	}
}

// TestIngestObjectStore: a dataset uploaded to the Object Store
// (worker.PutDataset, nats-obj://) ingests to the local shards of its
// files, and with Store every shard is in the Object Store once, by
// checksum, decoding to the shard (stored again when its object was
// damaged).
func TestIngestObjectStore(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	rows := ingesttest.RandomRows(rng, 150, 2, 3000, 40, false)
	dir := t.TempDir()
	files := ingesttest.Dataset(t, rng, dir, rows, 3)
	want := ingesttest.LocalShards(t, files, arrowio.ReadOptions{}, 0, 0, 40, 1)
	c := startIngestCluster(t, 3, nil)
	js, err := jetstream.New(c.coord)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Name)
	}
	if _, err := worker.PutDataset(context.Background(), js, c.coord.MaxPayload(), "emsf-blobs", "trips", paths); err != nil {
		t.Fatal(err)
	}
	res, err := c.exec.Ingest(context.Background(), ingest.Options{Job: "obj", Input: "nats-obj://emsf-blobs/trips", Target: 40, Store: true})
	if err != nil {
		t.Fatal(err)
	}
	ingesttest.CheckSame(t, "object store", c.held, res, want)
	if len(res.Splits) != len(files) || !res.Files[0].Stream {
		t.Fatalf("%d splits of %d parts: parts are read whole", len(res.Splits), len(files))
	}
	obs, err := js.ObjectStore(context.Background(), "emsf-blobs")
	if err != nil {
		t.Fatal(err)
	}
	for k, l := range res.Sets[0].Lines {
		data, err := obs.GetBytes(context.Background(), "shards/"+l.Checksum)
		if err != nil {
			t.Fatalf("shard %d: %v", k, err)
		}
		s, err := arrowio.DecodeShard(data)
		if err != nil || s.Verify() != nil || s.Info != want.Mans[0].Shards[k] {
			t.Fatalf("shard %d stored as %+v (%v)", k, s.Info, err)
		}
	}
	// A shard object put again with other bytes (same name and size) is
	// stored again by the next ingest of the data, not skipped.
	name := "shards/" + res.Sets[0].Lines[1].Checksum
	spoilObject(t, obs, name)
	if _, err := c.exec.Ingest(context.Background(), ingest.Options{Job: "obj-again", Input: "nats-obj://emsf-blobs/trips", Target: 40, Store: true}); err != nil {
		t.Fatal(err)
	}
	data, err := obs.GetBytes(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := arrowio.DecodeShard(data); err != nil || s.Verify() != nil || s.Info != want.Mans[0].Shards[1] {
		t.Fatalf("the spoilt shard object, after the ingest again: %v", err)
	}
	// A data error in an object names the part and its row.
	bad := dir + "/bad.csv"
	if err := writeText(bad, "state,action,next_state\n1,0,2\n3,x,1\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := worker.PutDataset(context.Background(), js, c.coord.MaxPayload(), "emsf-blobs", "bad", []string{paths[0], bad}); err != nil {
		t.Fatal(err)
	}
	_, err = c.exec.Ingest(context.Background(), ingest.Options{Job: "objbad", Input: "nats-obj://emsf-blobs/bad"})
	var ie *arrowio.InputError
	if !errors.As(err, &ie) || ie.File != "nats-obj://emsf-blobs/datasets/bad/part-00001.csv" || ie.Row != 2 || ie.Column != "action" {
		t.Fatalf("bad part: %v", err)
	}
}

// TestIngestCoordinatorBytesFlatInN: the bytes on the coordinator's
// connection are about the same at n and 4n (the same transitions,
// splits and shards): no row, column or transition passes through it.
func TestIngestCoordinatorBytesFlatInN(t *testing.T) {
	bytes := func(n int) uint64 {
		rng := rand.New(rand.NewPCG(1, 2))
		var rows [][4]float64
		for range 40000 {
			rows = append(rows, [4]float64{float64(rng.IntN(n)), float64(rng.IntN(2)), float64(rng.IntN(n)), 1})
		}
		dir := t.TempDir()
		files := ingesttest.Dataset(t, rng, dir, rows, 2)
		// No liveness probes and status replies only on news: the bytes
		// do not depend on how long the ingest takes.
		c := startIngestCluster(t, 3, nil, natsexec.Config{ProbeEvery: time.Hour, FrozenAfter: 2 * time.Hour})
		before := c.coord.Stats()
		res, err := c.exec.Ingest(context.Background(), ingest.Options{Job: "flat", Input: dir, SplitBytes: ingesttest.TotalSize(files) / 8, Target: 5200, Poll: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		after := c.coord.Stats()
		b := after.InBytes + after.OutBytes - before.InBytes - before.OutBytes
		t.Logf("n=%d: %d shards, %d bytes on the coordinator's connection (the dataset: %d bytes)", n, len(res.Sets[0].Lines), b, ingesttest.TotalSize(files))
		return b
	}
	small, large := bytes(2000), bytes(8000)
	if float64(large) > 1.2*float64(small) {
		t.Fatalf("coordinator bytes grew from %d at n=2000 to %d at n=8000", small, large)
	}
}

func writeText(path, text string) error { return os.WriteFile(path, []byte(text), 0o644) }

// TestIngestIDsNATS: a dataset of user ids over NATS, three workers, one
// of which leaves after it merged a range of the vocabulary: the shards
// are the local ones (ids numbered in sorted order), and the ranges the
// owners stored in the Object Store are the sorted vocabulary.
func TestIngestIDsNATS(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	rows := ingesttest.RandomRows(rng, 120, 3, 3000, 50, false)
	dir := t.TempDir()
	sv, av := ingesttest.RandomVocab(t, rng, 121), ingesttest.RandomVocab(t, rng, 3)
	files := ingesttest.DatasetIDs(t, rng, dir, rows, 3, sv, av, "csv", "parquet", "arrow")
	read := arrowio.ReadOptions{StateIDs: &shard.Vocab{}, ActionIDs: &shard.Vocab{}}
	want := ingesttest.LocalShards(t, files, read, 0, 0, 50, 1)
	c := startIngestCluster(t, 3, func(k int, kill func()) worker.IngestHooks {
		return worker.IngestHooks{VocabRange: func(g, r int, v *shard.Vocab) {
			if k == 1 {
				kill()
			}
		}}
	})
	res, err := c.exec.Ingest(context.Background(), ingest.Options{Job: "ids", Input: dir, AutoIDs: true, Store: true,
		SplitBytes: ingesttest.TotalSize(files) / 9, Target: 50, PullBytes: 500})
	if err != nil {
		t.Fatal(err)
	}
	ingesttest.CheckSame(t, "ids over NATS", c.held, res, want)
	js, err := jetstream.New(c.coord)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(context.Background(), "emsf-blobs")
	if err != nil {
		t.Fatal(err)
	}
	for g, v := range []*shard.Vocab{read.StateIDs, read.ActionIDs} {
		var got []string
		for r, own := range res.Vocab[g] {
			if own.Worker == c.workers[1].ID() {
				t.Fatalf("range %d of group %d is owned by the worker that left", r, g)
			}
			data, err := obs.GetBytes(context.Background(), proto.VocabObject("ids", res.VocabEpoch, g, r))
			if err != nil {
				t.Fatal(err)
			}
			if err := ingestwire.EachID(data, func(id []byte) error { got = append(got, string(id)); return nil }); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(got, v.Strings()) {
			t.Fatalf("group %d: the stored ranges hold %d ids, not the %d of the sorted vocabulary", g, len(got), v.Len())
		}
	}
}
