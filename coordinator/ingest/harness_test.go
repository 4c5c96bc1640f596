package ingest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/ingest"
	"github.com/emsf/emsf/coordinator/ingest/ingesttest"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker"
	"github.com/emsf/emsf/worker/ingestwire"
)

// fakeCluster is an in-process cluster of worker.IngestNodes that call
// each other directly (nomad's scheduler Harness style): no NATS, no
// timing. A test kills a worker from a node's hook, at an exact point of
// the pipeline; from then on every call to it fails with *ingest.LostError and
// it is left out of the census.
type fakeCluster struct {
	mu     sync.Mutex
	nodes  map[string]*worker.IngestNode
	dead   map[string]bool
	shards map[string]map[string]*shard.Shard // by worker, by checksum: what commits kept
	closes sync.WaitGroup
	// calls counts the calls of each op (the test's event log); onCall,
	// when set, is called (without the lock) before each call of an op
	// to a worker, with the op's count so far.
	calls  map[string]int
	onCall func(op, worker string, count int)
}

// newFakeCluster starts p workers "w0" … with hooks made by hooks(id)
// (nil: none).
func newFakeCluster(t *testing.T, p int, hooks func(c *fakeCluster, id string) worker.IngestHooks) *fakeCluster {
	t.Helper()
	c := &fakeCluster{nodes: map[string]*worker.IngestNode{}, dead: map[string]bool{}, shards: map[string]map[string]*shard.Shard{}, calls: map[string]int{}}
	for k := range p {
		id := fmt.Sprintf("w%d", k)
		var h worker.IngestHooks
		if hooks != nil {
			h = hooks(c, id)
		}
		c.shards[id] = map[string]*shard.Shard{}
		c.nodes[id] = worker.NewIngestNode(id, fakePeers{c}, nil, func(s *shard.Shard) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.shards[id][s.Checksum] = s
		}, h)
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.Close()
		}
		c.closes.Wait()
	})
	return c
}

// held returns the shard of that checksum a commit gave worker id.
func (c *fakeCluster) held(id, checksum string) *shard.Shard {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shards[id][checksum]
}

// kill makes worker id gone: its calls fail and its work is cancelled.
func (c *fakeCluster) kill(id string) { c.killIf(id, false) }

// killFirst kills worker id unless a worker is dead already: the first
// of several workers that reach a point is the one killed.
func (c *fakeCluster) killFirst(id string) { c.killIf(id, true) }

func (c *fakeCluster) killIf(id string, first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead[id] || first && len(c.dead) > 0 {
		return
	}
	c.dead[id] = true
	n := c.nodes[id]
	c.closes.Add(1)
	go func() { // a hook may kill its own node: Close waits for the hook's goroutine
		defer c.closes.Done()
		n.Close()
	}()
}

func (c *fakeCluster) node(id, op string) (*worker.IngestNode, error) {
	c.mu.Lock()
	c.calls[op]++
	count, on := c.calls[op], c.onCall
	c.mu.Unlock()
	if on != nil {
		on(op, id, count)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead[id] || c.nodes[id] == nil {
		return nil, &ingest.LostError{Worker: id, Err: errors.New("killed")}
	}
	return c.nodes[id], nil
}

func (c *fakeCluster) Workers(context.Context) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for id := range c.nodes {
		if !c.dead[id] {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// on calls f on worker w's node as op (the event log's entry), or fails
// with a *ingest.LostError when w is gone.
func on[T any](c *fakeCluster, w, op string, f func(n *worker.IngestNode) (T, error)) (T, error) {
	n, err := c.node(w, op)
	if err != nil {
		var zero T
		return zero, err
	}
	return f(n)
}

func (c *fakeCluster) List(ctx context.Context, w string, r *ingestwire.ListRequest) (*ingestwire.ListReply, error) {
	return on(c, w, ingestwire.OpList, func(n *worker.IngestNode) (*ingestwire.ListReply, error) { return n.List(ctx, r) })
}

func (c *fakeCluster) Scan(ctx context.Context, w string, r *ingestwire.ScanRequest) (*ingestwire.ScanReply, error) {
	return on(c, w, ingestwire.OpScan, func(n *worker.IngestNode) (*ingestwire.ScanReply, error) { return n.Scan(ctx, r) })
}

func (c *fakeCluster) Plan(ctx context.Context, w string, p *ingestwire.Plan) error {
	_, err := on(c, w, ingestwire.OpPlan, func(n *worker.IngestNode) (struct{}, error) { return struct{}{}, n.Plan(p) })
	return err
}

func (c *fakeCluster) Status(ctx context.Context, w string, r *ingestwire.StatusRequest) (*ingestwire.StatusReply, error) {
	n, err := c.node(w, ingestwire.OpStatus)
	if err != nil {
		return nil, err
	}
	rep, err := n.Status(ctx, r)
	if _, again := c.node(w, "status-check"); again != nil {
		return nil, again // killed while it waited
	}
	return rep, err
}

func (c *fakeCluster) Cut(ctx context.Context, w string, r *ingestwire.CutRequest) (*ingestwire.CutReply, error) {
	return on(c, w, ingestwire.OpCut, func(n *worker.IngestNode) (*ingestwire.CutReply, error) { return n.Cut(ctx, r) })
}

func (c *fakeCluster) Build(ctx context.Context, w string, r *ingestwire.BuildRequest) (*ingestwire.BuildReply, error) {
	n, err := c.node(w, ingestwire.OpBuild)
	if err != nil {
		return nil, err
	}
	rep, err := n.Build(ctx, r)
	if _, again := c.node(w, "build-check"); again != nil {
		return nil, again
	}
	return rep, err
}

func (c *fakeCluster) Commit(ctx context.Context, w string, r *ingestwire.CommitRequest) (*ingestwire.CommitReply, error) {
	return on(c, w, ingestwire.OpCommit, func(n *worker.IngestNode) (*ingestwire.CommitReply, error) { return n.Commit(ctx, r) })
}

func (c *fakeCluster) End(ctx context.Context, w string, job string) {
	if n, err := c.node(w, ingestwire.OpEnd); err == nil {
		n.End(job)
	}
}

func (c *fakeCluster) IDCut(ctx context.Context, w string, r *ingestwire.IDCutRequest) (*ingestwire.IDCutReply, error) {
	return on(c, w, ingestwire.OpIDCut, func(n *worker.IngestNode) (*ingestwire.IDCutReply, error) { return n.IDCut(ctx, r) })
}

func (c *fakeCluster) IDScan(ctx context.Context, w string, r *ingestwire.IDScanRequest) (*ingestwire.IDScanReply, error) {
	return on(c, w, ingestwire.OpIDScan, func(n *worker.IngestNode) (*ingestwire.IDScanReply, error) { return n.IDScan(ctx, r) })
}

func (c *fakeCluster) IDRange(ctx context.Context, w string, r *ingestwire.IDRangeRequest) (*ingestwire.IDRangeReply, error) {
	return on(c, w, ingestwire.OpIDRange, func(n *worker.IngestNode) (*ingestwire.IDRangeReply, error) { return n.IDRange(ctx, r) })
}

func (c *fakeCluster) IDTrans(ctx context.Context, w string, r *ingestwire.IDTransRequest) error {
	_, err := on(c, w, ingestwire.OpIDTrans, func(n *worker.IngestNode) (struct{}, error) { return struct{}{}, n.IDTrans(ctx, r) })
	return err
}

func (p fakePeers) IDPull(ctx context.Context, w string, r *ingestwire.IDPullRequest) (*ingestwire.PullReply, []byte, error) {
	n, err := p.c.node(w, ingestwire.OpIDPull)
	if err != nil {
		return nil, nil, err
	}
	return n.IDPull(ctx, r)
}

// fakePeers is how fakeCluster's nodes reach each other.
type fakePeers struct{ c *fakeCluster }

func (p fakePeers) Pull(ctx context.Context, w string, r *ingestwire.PullRequest) (*ingestwire.PullReply, []byte, error) {
	n, err := p.c.node(w, ingestwire.OpPull)
	if err != nil {
		return nil, nil, err
	}
	return n.Pull(ctx, r)
}

func (p fakePeers) Tail(ctx context.Context, w string, r *ingestwire.TailRequest) ([]byte, error) {
	n, err := p.c.node(w, ingestwire.OpTail)
	if err != nil {
		return nil, err
	}
	return n.Tail(ctx, r)
}

// TestRunMatchesLocal is the property: for random data, any number of
// splits (1 … 32) and workers (1 … 8), any budgets, a holdout or none,
// column cells or none, the workers end up holding exactly the shards a
// local fit builds (every Info, checksum included; the manifest; n, u,
// the fingerprint; the data terms).
func TestRunMatchesLocal(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	per := 4
	if testing.Short() {
		per = 1
	}
	for p := 1; p <= 8; p++ {
		for trial := range per {
			n := 2 + rng.IntN(300)
			u := 1 + rng.IntN(5)
			target := 1 + rng.IntN(150)
			rows := ingesttest.RandomRows(rng, n, u, 1+rng.IntN(4000), target, trial%2 == 1)
			dir := t.TempDir()
			files := ingesttest.Dataset(t, rng, dir, rows, 1+rng.IntN(4))
			splits := 1 + rng.IntN(32)
			holdout := 0.0
			if rng.IntN(3) == 0 {
				holdout = 0.25
			}
			q := 1
			if rng.IntN(2) == 0 {
				q = 1 + rng.IntN(5)
			}
			seed := rng.Uint64()
			what := fmt.Sprintf("P=%d trial %d (n=%d u=%d rows=%d files=%d splits≈%d holdout=%v q=%d target=%d)", p, trial, n, u, len(rows), len(files), splits, holdout, q, target)
			want := ingesttest.LocalShards(t, files, arrowio.ReadOptions{}, holdout, seed, target, q)
			c := newFakeCluster(t, p, nil)
			res, err := ingest.Run(context.Background(), c, ingest.Options{Job: fmt.Sprintf("prop-%d-%d", p, trial), Input: dir,
				SplitBytes: max(1, ingesttest.TotalSize(files)/int64(splits)), Holdout: holdout, Seed: seed, Target: target, ColCells: q,
				SegmentBytes: 20 + rng.IntN(3000), PullBytes: 100 + rng.IntN(20000), OutboxBytes: int64(1 + rng.IntN(20000)),
				AheadBytes: int64(1 + rng.IntN(20000)), Window: 1 + rng.IntN(4), BucketsPerWorker: 1 + rng.IntN(6)})
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			ingesttest.CheckSame(t, what, c.held, res, want)
			if res.Epochs != 1 {
				t.Fatalf("%s: %d epochs without failures", what, res.Epochs)
			}
		}
	}
}

// localError is the error a local read of the files meets first.
func localError(files []arrowio.DataFile) error {
	for _, f := range files {
		err := arrowio.ScanTransitions(context.Background(), f.Name, arrowio.ReadOptions{Format: f.Format}, func(*arrowio.TransitionBatch) error { return nil })
		if err != nil {
			return err
		}
	}
	return nil
}

// TestRunDataErrorsAreLocal: a bad row anywhere fails the job before any
// plan of pass 2, with field for field the error a local read gives:
// the last row of the last split of the last file; of two bad rows in
// splits 3 and 5 of a file, split 3's; a ragged row after a quoted field
// (the file read whole); a bad value in a Parquet file; a file with a
// header and no row; a bad row in a file after one with a quote.
func TestRunDataErrorsAreLocal(t *testing.T) {
	csvRows := func(n int) []string {
		rows := []string{"state,action,next_state,count"}
		for k := range n {
			rows = append(rows, fmt.Sprintf("%d,%d,%d,1", k%97, k%3, (k*7)%97))
		}
		return rows
	}
	write := func(dir, name string, lines []string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		setup func(dir string)
	}{
		{"last row of the last file", func(dir string) {
			write(dir, "a.csv", csvRows(500))
			rows := csvRows(800)
			rows[800] = "5,1,x,1"
			write(dir, "b.csv", rows)
		}},
		{"splits 3 and 5", func(dir string) {
			rows := csvRows(3000)
			rows[1300] = "5,-1,2,1" // in about the 4th of ten splits
			rows[2100] = "5,1,2,0"
			write(dir, "a.csv", rows)
		}},
		{"ragged row after a quote", func(dir string) {
			rows := csvRows(2000)
			rows[300] = `"5",1,2,1`
			rows[1700] = "5,1,2"
			write(dir, "a.csv", rows)
		}},
		{"parquet bad value", func(dir string) {
			w, err := arrowio.NewTransitionWriter(filepath.Join(dir, "a.parquet"), "parquet")
			if err != nil {
				t.Fatal(err)
			}
			for k := range 5000 {
				c := 1.0
				if k == 3777 {
					c = -2
				}
				if err := w.Write(k%50, 0, k%41, c, 0, 0); err != nil {
					t.Fatal(err)
				}
			}
			// The writer refuses nothing: the reader does.
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		}},
		{"a file without rows", func(dir string) {
			write(dir, "a.csv", csvRows(900))
			write(dir, "b.csv", csvRows(0))
			write(dir, "c.csv", csvRows(900))
		}},
		{"after a quoted file", func(dir string) {
			rows := csvRows(900)
			rows[5] = `1,"1",1,1`
			write(dir, "a.csv", rows)
			rows = csvRows(900)
			rows[600] = "1,1,1,NaN"
			write(dir, "b.csv", rows)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(dir)
			files, err := arrowio.ListDataset(dir, "")
			if err != nil {
				t.Fatal(err)
			}
			want := localError(files)
			var wantIE *arrowio.InputError
			if !errors.As(want, &wantIE) {
				t.Fatalf("the local read: %v, want an InputError", want)
			}
			for _, p := range []int{1, 3} {
				c := newFakeCluster(t, p, nil)
				_, err := ingest.Run(context.Background(), c, ingest.Options{Job: "bad", Input: dir, SplitBytes: max(1, ingesttest.TotalSize(files)/10)})
				var ie *arrowio.InputError
				if !errors.As(err, &ie) {
					t.Fatalf("P=%d: %v, want an InputError", p, err)
				}
				if ie.File != wantIE.File || ie.Row != wantIE.Row || ie.Column != wantIE.Column || ie.Value != wantIE.Value || ie.Reason != wantIE.Reason || err.Error() != want.Error() {
					t.Fatalf("P=%d: %v\nlocal: %v", p, err, want)
				}
				if c.calls[ingestwire.OpPlan] != 0 {
					t.Fatalf("P=%d: pass 2 was planned despite the error", p)
				}
			}
		})
	}
}

// failureData is a dataset for the failure tests, and its local shards.
func failureData(t *testing.T, holdout float64) (string, []arrowio.DataFile, *ingesttest.Local, ingest.Options) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 8))
	rows := ingesttest.RandomRows(rng, 200, 3, 6000, 40, true)
	dir := t.TempDir()
	files := ingesttest.Dataset(t, rng, dir, rows, 3)
	want := ingesttest.LocalShards(t, files, arrowio.ReadOptions{}, holdout, 9, 40, 2)
	o := ingest.Options{Job: "fail", Input: dir, SplitBytes: max(1, ingesttest.TotalSize(files)/12), Holdout: holdout, Seed: 9, Target: 40, ColCells: 2,
		SegmentBytes: 500, PullBytes: 3000, OutboxBytes: 4000, AheadBytes: 5000, Window: 2}
	return dir, files, want, o
}

// TestRunWorkerKilled: a worker killed at an exact point — reading a
// split in pass 1, as a mapper after a segment, as a reducer after a
// split, building, at the cut chain, at the commit — and the shards are
// still bitwise the local ones, in a second epoch of the workers left
// (pass 1: in the same epoch, its split read by another).
func TestRunWorkerKilled(t *testing.T) {
	type kill struct {
		name   string
		epochs int
		hooks  func(c *fakeCluster, id string) worker.IngestHooks
		onCall func(c *fakeCluster) func(op, w string, n int)
	}
	cases := []kill{
		{name: "pass 1 scan", epochs: 1, onCall: func(c *fakeCluster) func(string, string, int) {
			return func(op, w string, n int) {
				if op == ingestwire.OpScan && n == 4 {
					c.kill(w)
				}
			}
		}},
		{name: "mapper after a segment", epochs: 2, hooks: func(c *fakeCluster, id string) worker.IngestHooks {
			return worker.IngestHooks{Segment: func(split, reducer, seq int) {
				if id == "w1" && seq == 2 {
					c.kill(id)
				}
			}}
		}},
		{name: "reducer after a split", epochs: 2, hooks: func(c *fakeCluster, id string) worker.IngestHooks {
			return worker.IngestHooks{Fed: func(split int) {
				if id == "w2" && split == 5 {
					c.kill(id)
				}
			}}
		}},
		{name: "builder", epochs: 2, hooks: func(c *fakeCluster, id string) worker.IngestHooks {
			return worker.IngestHooks{Built: func() {
				if id == "w0" {
					c.kill(id)
				}
			}}
		}},
		{name: "cut chain", epochs: 2, onCall: func(c *fakeCluster) func(string, string, int) {
			return func(op, w string, n int) {
				if op == ingestwire.OpCut && n == 3 {
					c.kill(w)
				}
			}
		}},
		{name: "commit", epochs: 2, onCall: func(c *fakeCluster) func(string, string, int) {
			return func(op, w string, n int) {
				if op == ingestwire.OpCommit && n == 1 {
					c.kill(w)
				}
			}
		}},
	}
	for _, tc := range cases {
		for _, holdout := range []float64{0, 0.3} {
			t.Run(fmt.Sprintf("%s holdout %v", tc.name, holdout), func(t *testing.T) {
				_, _, want, o := failureData(t, holdout)
				c := newFakeCluster(t, 4, tc.hooks)
				if tc.onCall != nil {
					c.onCall = tc.onCall(c)
				}
				res, err := ingest.Run(context.Background(), c, o)
				if err != nil {
					t.Fatal(err)
				}
				ids, _ := c.Workers(context.Background())
				if len(ids) != 3 {
					t.Fatalf("%d workers alive: the kill did not happen", len(ids))
				}
				if res.Epochs != tc.epochs {
					t.Fatalf("%d epochs, want %d", res.Epochs, tc.epochs)
				}
				ingesttest.CheckSame(t, tc.name, c.held, res, want)
				for _, set := range res.Sets {
					for _, l := range set.Lines {
						if l.Holder == c.deadOne() {
							t.Fatalf("shard %d is held by the dead worker", l.ID)
						}
					}
				}
			})
		}
	}
}

// deadOne returns a dead worker's id ("" when none).
func (c *fakeCluster) deadOne() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, d := range c.dead {
		if d {
			return id
		}
	}
	return ""
}

// TestRunInputChanged: a file rewritten between the two reads fails the
// job, naming the file.
func TestRunInputChanged(t *testing.T) {
	for _, change := range []string{"size", "same size"} {
		t.Run(change, func(t *testing.T) {
			_, files, _, o := failureData(t, 0)
			victim := files[1].Name
			data, err := os.ReadFile(victim)
			if err != nil {
				t.Fatal(err)
			}
			var once sync.Once
			c := newFakeCluster(t, 3, func(c *fakeCluster, id string) worker.IngestHooks {
				return worker.IngestHooks{BeforeMap: func(int) {
					once.Do(func() {
						changed := append([]byte(nil), data...)
						if change == "size" {
							changed = append(changed, changed[len(changed)-40:]...)
						} else {
							// Same size, same modification time: the
							// content check catches it.
							st, _ := os.Stat(victim)
							changed[len(changed)/2] ^= 1
							if err := os.WriteFile(victim, changed, 0o644); err != nil {
								t.Error(err)
							}
							if err := os.Chtimes(victim, st.ModTime(), st.ModTime()); err != nil {
								t.Error(err)
							}
							return
						}
						if err := os.WriteFile(victim, changed, 0o644); err != nil {
							t.Error(err)
						}
					})
				}}
			})
			_, err = ingest.Run(context.Background(), c, o)
			var ie *arrowio.InputError
			if !errors.As(err, &ie) || ie.File != victim || !errors.Is(err, shard.ErrInputChanged) {
				t.Fatalf("got %v, want an error naming %s", err, victim)
			}
		})
	}
}

// countingCluster counts the bytes of every message the coordinator
// sends and receives (as JSON): what it holds and moves.
type countingCluster struct {
	ingest.Cluster
	mu    sync.Mutex
	bytes int64
}

func (c *countingCluster) count(vs ...any) {
	for _, v := range vs {
		b, _ := json.Marshal(v)
		c.mu.Lock()
		c.bytes += int64(len(b))
		c.mu.Unlock()
	}
}

func (c *countingCluster) List(ctx context.Context, w string, r *ingestwire.ListRequest) (*ingestwire.ListReply, error) {
	rep, err := c.Cluster.List(ctx, w, r)
	c.count(r, rep)
	return rep, err
}

func (c *countingCluster) Scan(ctx context.Context, w string, r *ingestwire.ScanRequest) (*ingestwire.ScanReply, error) {
	rep, err := c.Cluster.Scan(ctx, w, r)
	c.count(r, rep)
	return rep, err
}

func (c *countingCluster) Plan(ctx context.Context, w string, p *ingestwire.Plan) error {
	c.count(p)
	return c.Cluster.Plan(ctx, w, p)
}

func (c *countingCluster) Status(ctx context.Context, w string, r *ingestwire.StatusRequest) (*ingestwire.StatusReply, error) {
	rep, err := c.Cluster.Status(ctx, w, r)
	c.count(r, rep)
	return rep, err
}

func (c *countingCluster) Cut(ctx context.Context, w string, r *ingestwire.CutRequest) (*ingestwire.CutReply, error) {
	rep, err := c.Cluster.Cut(ctx, w, r)
	c.count(r, rep)
	return rep, err
}

func (c *countingCluster) Build(ctx context.Context, w string, r *ingestwire.BuildRequest) (*ingestwire.BuildReply, error) {
	rep, err := c.Cluster.Build(ctx, w, r)
	c.count(r, rep)
	return rep, err
}

func (c *countingCluster) Commit(ctx context.Context, w string, r *ingestwire.CommitRequest) (*ingestwire.CommitReply, error) {
	rep, err := c.Cluster.Commit(ctx, w, r)
	c.count(r, rep)
	return rep, err
}

// TestRunCoordinatorBytesFlatInN: the coordinator's messages (and so
// what it holds) do not grow with n: the same transitions over 4 times
// the states, the same splits and shards, about the same bytes — no row,
// column or transition passes through it.
func TestRunCoordinatorBytesFlatInN(t *testing.T) {
	bytes := func(n int) int64 {
		rng := rand.New(rand.NewPCG(1, 2))
		var rows [][4]float64
		for range 20000 {
			rows = append(rows, [4]float64{float64(rng.IntN(n)), float64(rng.IntN(2)), float64(rng.IntN(n)), 1})
		}
		dir := t.TempDir()
		files := ingesttest.Dataset(t, rng, dir, rows, 2)
		c := &countingCluster{Cluster: newFakeCluster(t, 3, nil)}
		res, err := ingest.Run(context.Background(), c, ingest.Options{Job: "flat", Input: dir, SplitBytes: ingesttest.TotalSize(files) / 8, Target: 2600, Poll: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("n=%d: %d shards, %d bytes through the coordinator", n, len(res.Sets[0].Lines), c.bytes)
		return c.bytes
	}
	small, large := bytes(2000), bytes(8000)
	// Rows through the coordinator would be ≥ 8 bytes a transition
	// (160 KB): its messages differ in digits only.
	if float64(large) > 1.15*float64(small) {
		t.Fatalf("coordinator bytes grew from %d at n=2000 to %d at n=8000", small, large)
	}
}

// TestRunIDsMatchLocal: a dataset whose states, actions or both are named
// by user ids gives, for 1 to 8 workers and any splits, the shards, n, u
// and fingerprint of the local read (ids numbered in sorted order), and
// the owners' ranges are the sorted vocabulary, in order. The groups of
// ids are found by reading (AutoIDs) or given.
func TestRunIDsMatchLocal(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	per := 3
	if testing.Short() {
		per = 1
	}
	for p := 1; p <= 8; p++ {
		for trial := range per {
			n := 2 + rng.IntN(300)
			u := 1 + rng.IntN(5)
			target := 1 + rng.IntN(150)
			rows := ingesttest.RandomRows(rng, n, u, 1+rng.IntN(4000), target, trial%2 == 1)
			groups := [][2]bool{{true, false}, {false, true}, {true, true}}[rng.IntN(3)]
			var sv, av *shard.Vocab
			if groups[0] {
				// Rows may name states up to n (the largest as a next state).
				sv = ingesttest.RandomVocab(t, rng, n+1)
			}
			if groups[1] {
				av = ingesttest.RandomVocab(t, rng, u)
			}
			dir := t.TempDir()
			files := ingesttest.DatasetIDs(t, rng, dir, rows, 1+rng.IntN(4), sv, av, "csv", "parquet", "arrow")
			splits := 1 + rng.IntN(32)
			holdout := 0.0
			if rng.IntN(3) == 0 {
				holdout = 0.25
			}
			q := 1 + rng.IntN(3)
			seed := rng.Uint64()
			auto := rng.IntN(2) == 0
			what := fmt.Sprintf("P=%d trial %d (n=%d u=%d ids=%v auto=%v rows=%d files=%d splits≈%d holdout=%v)", p, trial, n, u, groups, auto, len(rows), len(files), splits, holdout)
			read := arrowio.ReadOptions{}
			if groups[0] {
				read.StateIDs = &shard.Vocab{}
			}
			if groups[1] {
				read.ActionIDs = &shard.Vocab{}
			}
			want := ingesttest.LocalShards(t, files, read, holdout, seed, target, q)
			var mu sync.Mutex
			ranges := map[[2]int]*shard.Vocab{}
			c := newFakeCluster(t, p, func(c *fakeCluster, id string) worker.IngestHooks {
				return worker.IngestHooks{VocabRange: func(g, r int, v *shard.Vocab) {
					mu.Lock()
					defer mu.Unlock()
					ranges[[2]int{g, r}] = v.Clone()
				}}
			})
			o := ingest.Options{Job: fmt.Sprintf("ids-%d-%d", p, trial), Input: dir, AutoIDs: auto,
				SplitBytes: max(1, ingesttest.TotalSize(files)/int64(splits)), Holdout: holdout, Seed: seed, Target: target, ColCells: q,
				SegmentBytes: 20 + rng.IntN(3000), PullBytes: 10 + rng.IntN(2000), OutboxBytes: int64(1 + rng.IntN(20000)),
				AheadBytes: int64(1 + rng.IntN(20000)), Window: 1 + rng.IntN(4)}
			if !auto {
				o.IDs = groups
			}
			res, err := ingest.Run(context.Background(), c, o)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			ingesttest.CheckSame(t, what, c.held, res, want)
			if res.IDs != groups {
				t.Fatalf("%s: groups of ids %v", what, res.IDs)
			}
			for g, v := range [2]*shard.Vocab{read.StateIDs, read.ActionIDs} {
				var got []string
				for r, own := range res.Vocab[g] {
					rv := ranges[[2]int{g, r}]
					if rv == nil || int64(rv.Len()) != own.Count {
						t.Fatalf("%s: range %d of group %d: %d ids, owner says %d", what, r, g, rv.Len(), own.Count)
					}
					got = append(got, rv.Strings()...)
				}
				if v == nil && len(got) > 0 || v != nil && !slices.Equal(got, v.Strings()) {
					t.Fatalf("%s: group %d: the ranges hold %d ids, not the %d of the sorted vocabulary", what, g, len(got), v.Len())
				}
			}
		}
	}
}

// TestRunIDsWorkerKilled: a worker killed at any step of the vocabulary
// phase, or a holder of ids killed in pass 1 or 2, and the shards, sizes,
// fingerprint and vocabulary are still the local ones: the phase runs
// again over the workers left.
func TestRunIDsWorkerKilled(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	rows := ingesttest.RandomRows(rng, 200, 3, 6000, 40, true)
	dir := t.TempDir()
	sv, av := ingesttest.RandomVocab(t, rng, 201), ingesttest.RandomVocab(t, rng, 3)
	files := ingesttest.DatasetIDs(t, rng, dir, rows, 3, sv, av, "csv", "parquet", "arrow")
	want := ingesttest.LocalShards(t, files, arrowio.ReadOptions{StateIDs: &shard.Vocab{}, ActionIDs: &shard.Vocab{}}, 0.2, 9, 40, 2)
	at := func(op string, n int) func(c *fakeCluster) func(string, string, int) {
		return func(c *fakeCluster) func(string, string, int) {
			return func(o, w string, k int) {
				if o == op && k == n {
					c.kill(w)
				}
			}
		}
	}
	cases := []struct {
		name   string
		onCall func(c *fakeCluster) func(string, string, int)
		hooks  func(c *fakeCluster, id string) worker.IngestHooks
	}{
		{name: "cut", onCall: at(ingestwire.OpIDCut, 2)},
		{name: "id scan", onCall: at(ingestwire.OpIDScan, 5)},
		{name: "range owner", onCall: at(ingestwire.OpIDRange, 2)},
		{name: "holder pulled", onCall: at(ingestwire.OpIDPull, 4)},
		{name: "numbering", onCall: at(ingestwire.OpIDTrans, 2)},
		{name: "holder in pass 1", onCall: at(ingestwire.OpScan, 4)},
		{name: "holder as a mapper", hooks: func(c *fakeCluster, id string) worker.IngestHooks {
			// (Which worker holds which split is the leases' doing: the
			// first mapper to put its third segment of a split is killed.)
			return worker.IngestHooks{Segment: func(split, reducer, seq int) {
				if seq == 2 {
					c.killFirst(id)
				}
			}}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeCluster(t, 4, tc.hooks)
			if tc.onCall != nil {
				c.onCall = tc.onCall(c)
			}
			res, err := ingest.Run(context.Background(), c, ingest.Options{Job: "ids-fail", Input: dir, AutoIDs: true,
				SplitBytes: max(1, ingesttest.TotalSize(files)/12), Holdout: 0.2, Seed: 9, Target: 40, ColCells: 2,
				SegmentBytes: 500, PullBytes: 300, OutboxBytes: 4000, AheadBytes: 5000, Window: 2})
			if err != nil {
				t.Fatal(err)
			}
			if ids, _ := c.Workers(context.Background()); len(ids) != 3 {
				t.Fatalf("%d workers alive: the kill did not happen", len(ids))
			}
			ingesttest.CheckSame(t, tc.name, c.held, res, want)
			for g := range res.Vocab {
				for _, own := range res.Vocab[g] {
					if own.Worker == c.deadOne() {
						t.Fatalf("a range of group %d is owned by the dead worker", g)
					}
				}
			}
		})
	}
}

// TestRunIDsDataErrors: with ids, a bad row anywhere is the local read's
// error (an empty id, a count that is not a number), and a column of
// integers that turns to ids in a later split is read as ids from its
// first row (AutoIDs), as a local read does; without AutoIDs that is the
// error.
func TestRunIDsDataErrors(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("state,action,next_state,count\n")
	for k := range 400 {
		fmt.Fprintf(&b, "%d,%d,%d,1\n", k%37, k%2, (k*7)%37)
	}
	head := b.String()
	write := func(name, text string) []arrowio.DataFile {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "a.csv"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		files, err := arrowio.ListDataset(d, "")
		if err != nil {
			t.Fatal(err)
		}
		return files
	}
	run := func(name string, files []arrowio.DataFile, auto bool) (*ingest.Result, error) {
		c := newFakeCluster(t, 3, nil)
		return ingest.Run(context.Background(), c, ingest.Options{Job: "ids-err-" + name, Input: filepath.Dir(files[0].Name), AutoIDs: auto,
			SplitBytes: max(1, ingesttest.TotalSize(files)/8), Target: 50})
	}
	// Ids from row 300 on: read as ids from the start, the local way.
	later := write("later", head+"home,0,cart,1\ncart,1,3,2\n")
	res, err := run("later", later, true)
	if err != nil {
		t.Fatal(err)
	}
	want := ingesttest.LocalShards(t, later, arrowio.ReadOptions{StateIDs: &shard.Vocab{}}, 0, 0, 50, 1)
	ingesttest.CheckSame(t, "ids in a later split", nil, res, want)
	if !res.IDs[ingestwire.GroupStates] || res.IDs[ingestwire.GroupActions] {
		t.Fatalf("groups of ids %v: want the states", res.IDs)
	}
	if _, err := run("later-int", later, false); !arrowio.IsStringIDs(err) || !strings.Contains(err.Error(), "row 401") {
		t.Fatalf("without AutoIDs: %v", err)
	}
	// Bad rows once the states are ids: an empty id, then a bad count.
	for _, tc := range []struct{ name, row string }{{"empty id", "cart,1,,1\n"}, {"bad count", "cart,1,home,x\n"}} {
		files := write(strings.ReplaceAll(tc.name, " ", "-"), head+"home,0,cart,1\n"+head[len("state,action,next_state,count\n"):]+tc.row)
		_, err := run(tc.name, files, true)
		opts := arrowio.ReadOptions{StateIDs: &shard.Vocab{}, Format: files[0].Format}
		local := arrowio.ScanTransitions(context.Background(), files[0].Name, opts, func(*arrowio.TransitionBatch) error { return nil })
		var ie, le *arrowio.InputError
		if !errors.As(err, &ie) || !errors.As(local, &le) || *ie != *le {
			t.Fatalf("%s: %v, the local read: %v", tc.name, err, local)
		}
	}
}
