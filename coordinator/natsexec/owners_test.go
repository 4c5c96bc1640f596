package natsexec_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/coordinator/owners"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// ownersData is count data with n states, u actions and a few shards per
// action.
func ownersData(t *testing.T, n, u int, seed uint64) []*shard.Shard {
	return ownersDataSplit(t, n, u, seed, 4)
}

// ownersDataSplit is ownersData with about per shards per action.
func ownersDataSplit(t *testing.T, n, u int, seed uint64, per int) []*shard.Shard {
	t.Helper()
	return ownersDataGrid(t, n, u, seed, per, 1)
}

// ownersDataGrid is ownersDataSplit with each row range cut into q column
// cells (shard.SplitGrid).
func ownersDataGrid(t *testing.T, n, u int, seed uint64, per, q int) []*shard.Shard {
	return coordtest.OwnersData(t, n, u, seed, per, q)
}

const ownersGroupNNZ = 150

// ownersCluster starts an in-process cluster of workers workers (exec
// configures its executor), closed at the test's end.
func ownersCluster(t *testing.T, workers int, exec natsexec.Config) *natsexec.LocalCluster[*worker.Worker] {
	t.Helper()
	lc, err := natsexec.StartLocalCluster(context.Background(), natsexec.LocalClusterConfig{StoreDir: t.TempDir(), Workers: workers, InProcess: true, Exec: exec},
		worker.Starter(worker.Config{Prefix: exec.Prefix}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	return lc
}

// dial connects to lc's server, closed at the test's end.
func dial(t *testing.T, lc *natsexec.LocalCluster[*worker.Worker]) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(lc.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// fitLocal is the reference: factor.Fit on the same shards.
func fitLocal(t *testing.T, shards []*shard.Shard, init *factor.Model, iters int) (*factor.Model, factor.FitResult) {
	t.Helper()
	md := init.Clone()
	res, err := factor.Fit(context.Background(), md, shard.Blocks(shards), factor.FitOptions{
		Converger: factor.Converger{MaxIter: iters}, GroupNNZ: ownersGroupNNZ, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	return md, res
}

// TestFitOwnersBitwise: the owners exchange gives bitwise the local fit
// for 1, 2, 3, 4 and 8 workers, both tie modes it runs, whole actions per
// worker (u ≥ P) and groups of workers per action (u < P), and its
// coordinator's bytes per iteration do not grow with n.
func TestFitOwnersBitwise(t *testing.T) {
	const iters = 4
	for _, c := range []struct {
		name    string
		n, u    int
		tie     factor.Tie
		workers int
		cells   int
	}{
		{"none-u3-p1", 120, 3, factor.TieNone, 1, 1},
		{"none-u3-p2", 120, 3, factor.TieNone, 2, 1},
		{"none-u1-p3", 150, 1, factor.TieNone, 3, 1},
		{"sharedk-u2-p3", 120, 2, factor.TieSharedK, 3, 1},
		{"none-u2-p4", 120, 2, factor.TieNone, 4, 1},
		{"sharedk-u2-p8", 160, 2, factor.TieSharedK, 8, 1},
		// Column cells: a 2 × 2 grid, 2 × 4, 1 × 3 (3 has no divisor
		// ≤ 2 but 1), whole actions, shared K over a 2 × 2 grid.
		{"grid-u1-p4-q2", 160, 1, factor.TieNone, 4, 2},
		{"grid-u1-p8-q4", 160, 1, factor.TieNone, 8, 4},
		{"grid-u1-p3-q2", 150, 1, factor.TieNone, 3, 2},
		{"grid-u3-p2-q3", 120, 3, factor.TieNone, 2, 3},
		{"grid-sharedk-u2-p4-q2", 160, 2, factor.TieSharedK, 4, 2},
		// Shared D: every action's shards add to one D, folded by the
		// owners of its row groups across actions.
		{"sharedd-u3-p1", 120, 3, factor.TieSharedD, 1, 1},
		{"sharedd-u3-p2", 120, 3, factor.TieSharedD, 2, 1},
		{"sharedd-u2-p4", 160, 2, factor.TieSharedD, 4, 1},
		{"sharedd-u2-p4-q2", 160, 2, factor.TieSharedD, 4, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			shards := ownersDataGrid(t, c.n, c.u, 3, 4, c.cells)
			init := factor.NewRandom(c.n, 4, c.u, c.tie, 5)
			want, wantRes := fitLocal(t, shards, init, iters)
			lc := ownersCluster(t, c.workers, natsexec.Config{})
			md := init.Clone()
			res, err := lc.Exec.FitOwners(context.Background(), md, shards, natsexec.OwnersOptions{
				Job: "owners-" + c.name, Options: owners.Options{
					Converger:       factor.Converger{MaxIter: iters},
					GroupNNZ:        ownersGroupNNZ,
					ColBlocks:       5,
					CheckpointEvery: 3,
				}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Iterations != wantRes.Iterations || math.Float64bits(res.LogLik) != math.Float64bits(wantRes.LogLik) {
				t.Fatalf("result %+v, local %+v", res, wantRes)
			}
			coordtest.SameModel(t, c.name, md, want)
			// The commit record of the last iteration, and its checkpoint.
			st, _, err := lc.Exec.State(context.Background(), "owners-"+c.name)
			if err != nil {
				t.Fatal(err)
			}
			if o := st.Owners; st.Iteration != iters || o == nil || o.Version != iters || len(o.Y) != len(md.KT) ||
				len(o.Digests) == 0 || len(o.Digests) > c.workers || len(o.DCRC) == 0 || (c.tie != factor.TieSharedD && len(o.DCRC) < len(shard.RowGroups(infos(shards)))) || st.Status != "iteration limit" {
				t.Fatalf("job state %+v, owners %+v", st, st.Owners)
			}
		})
	}
}

// TestFitOwnersWorkerLost: a worker that owns column blocks and row groups
// is stopped after iteration 4 (its connection closed): the job rolls
// back to the checkpoint of iteration 3, replays on the workers left (row
// ranges on 3 workers; a 2 × 2 grid of column cells on 4, re-placed as
// 3 × 1), and ends bitwise equal to the local fit.
func TestFitOwnersWorkerLost(t *testing.T) {
	const iters = 7
	for _, c := range []struct {
		name           string
		workers, cells int
	}{{"rows", 3, 1}, {"grid", 4, 2}} {
		t.Run(c.name, func(t *testing.T) {
			// With column cells the 4 workers are a 2 × 2 grid; after the
			// loss the 3 left form 3 × 1 (the layout of the grid changes,
			// the sums' order does not).
			shards := ownersDataGrid(t, 150, 1, 9, 4, c.cells)
			init := factor.NewRandom(150, 4, 1, factor.TieNone, 2)
			want, _ := fitLocal(t, shards, init, iters)
			lc := ownersCluster(t, c.workers, natsexec.Config{})
			var reports []natsexec.OwnersReport
			md := init.Clone()
			_, err := lc.Exec.FitOwners(context.Background(), md, shards, natsexec.OwnersOptions{
				Job: "owners-lost-" + c.name, Options: owners.Options{
					Converger:       factor.Converger{MaxIter: iters},
					GroupNNZ:        ownersGroupNNZ,
					ColBlocks:       6,
					CheckpointEvery: 3,
					Report:          func(r natsexec.OwnersReport) { reports = append(reports, r) },
					Committed: func(_ context.Context, iter int) error {
						if iter == 4 {
							return lc.Workers[1].Stop()
						}
						return nil
					},
				}})
			if err != nil {
				t.Fatal(err)
			}
			coordtest.SameModel(t, "after a lost worker", md, want)
			last := reports[len(reports)-1]
			if last.Rollbacks < 1 || last.Workers != c.workers-1 || last.Epoch < 1 {
				t.Fatalf("last report %+v: want a rollback onto %d workers", last, c.workers-1)
			}
		})
	}
}

// TestFitOwnersBytesFlatInN: the coordinator's bytes per iteration are
// the same at n and at 4n with 4 times the column blocks (as the default
// --col-blocks grows with n), for the same number of shards: per
// iteration it moves m-vectors, scalars and one CRC per column block,
// never rows and nothing per (shard, column block).
func TestFitOwnersBytesFlatInN(t *testing.T) {
	perIter := func(n, c int) float64 {
		rng := rand.New(rand.NewPCG(1, 2))
		var ct shard.Counter
		for range 20 * n {
			i := rng.IntN(n)
			if err := ct.Add(i, 0, rng.IntN(n), 1); err != nil {
				t.Fatal(err)
			}
		}
		shards, _ := shard.Split(ct.Matrices(1), n, 20*n/4)
		if len(shards) != 4 {
			t.Fatalf("n=%d: %d shards, want 4", n, len(shards))
		}
		// No liveness probes: their bytes grow with the wall time (a
		// loaded machine), not with n.
		lc := ownersCluster(t, 2, natsexec.Config{ProbeEvery: time.Hour})
		var rs []natsexec.OwnersReport
		md := factor.NewRandom(n, 8, 1, factor.TieNone, 1)
		if _, err := lc.Exec.FitOwners(context.Background(), md, shards, natsexec.OwnersOptions{
			Job: fmt.Sprintf("owners-bytes-%d", n), Options: owners.Options{
				Converger:       factor.Converger{MaxIter: 4},
				ColBlocks:       c,
				CheckpointEvery: 100,
				NoBackups:       true,
				Report:          func(r natsexec.OwnersReport) { rs = append(rs, r) },
			}}); err != nil {
			t.Fatal(err)
		}
		// Iterations 2..4 (the first includes the census).
		var b int64
		for _, r := range rs[1:] {
			b += r.Bytes
		}
		return float64(b) / float64(len(rs)-1)
	}
	small, large := perIter(2000, 4), perIter(8000, 16)
	t.Logf("coordinator bytes per iteration: n=2000 %.0f, n=8000 %.0f", small, large)
	// Rows of K or D through the coordinator would be ≥ n·m·8 = 512 KB
	// more at 4n; its messages differ in digits only (the CRC lists of a
	// checkpoint are an object the commit record names).
	if large > 1.1*small || large-small > 1000 {
		t.Fatalf("coordinator bytes per iteration grew from %.0f at n=2000 to %.0f at n=8000", small, large)
	}
}

// waitLog is a log writer that closes seen once a line contains want.
type waitLog struct {
	want string
	once sync.Once
	seen chan struct{}
}

func (w *waitLog) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// TestFitOwnersAllWorkersGone: every worker stops after iteration 2; the
// coordinator logs that it waits for workers, a new worker joins, and the
// fit goes on from the checkpoint and ends bitwise equal to the local fit.
func TestFitOwnersAllWorkersGone(t *testing.T) {
	const iters = 5
	shards := ownersData(t, 120, 2, 4)
	init := factor.NewRandom(120, 4, 2, factor.TieNone, 8)
	want, _ := fitLocal(t, shards, init, iters)
	wl := &waitLog{want: "waiting for workers", seen: make(chan struct{})}
	lc := ownersCluster(t, 2, natsexec.Config{Logger: hclog.New(&hclog.LoggerOptions{Output: wl, Level: hclog.Warn})})
	joined := make(chan error, 1)
	md := init.Clone()
	_, err := lc.Exec.FitOwners(context.Background(), md, shards, natsexec.OwnersOptions{
		Job: "owners-gone", WaitWorkers: coordtest.Patience, Options: owners.Options{
			Converger:       factor.Converger{MaxIter: iters},
			GroupNNZ:        ownersGroupNNZ,
			ColBlocks:       3,
			CheckpointEvery: 2,
			Committed: func(_ context.Context, iter int) error {
				if iter != 2 {
					return nil
				}
				for _, w := range lc.Workers {
					if err := w.Stop(); err != nil {
						return err
					}
				}
				go func() {
					<-wl.seen
					nc, err := nats.Connect(lc.URL())
					if err == nil {
						var w *worker.Worker
						if w, err = worker.Start(context.Background(), nc, worker.Config{}); err == nil {
							t.Cleanup(func() { _ = w.Stop(); nc.Close() })
						}
					}
					joined <- err
				}()
				return nil
			},
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-joined; err != nil {
		t.Fatal(err)
	}
	coordtest.SameModel(t, "after every worker left and one joined", md, want)
}

// TestFitOwnersStraggler: one of three workers takes 600 ms more per
// task than the others (many times slower, even under -race on a loaded
// machine); the others take its queued shards and back up its running
// task (MapReduce's backup tasks, first answer wins), nothing rolls
// back, and the model is bitwise the local fit's. (The decisions are
// tested event by event, without timing, in coordinator/owners:
// TestPassBackups, TestRunStraggler; this is the whole on real NATS.)
func TestFitOwnersStraggler(t *testing.T) {
	const iters = 6
	shards := ownersDataSplit(t, 240, 1, 11, 12)
	if len(shards) < 6 {
		t.Fatalf("%d shards, want at least 6", len(shards))
	}
	init := factor.NewRandom(240, 4, 1, factor.TieNone, 3)
	want, _ := fitLocal(t, shards, init, iters)
	lc := ownersCluster(t, 2, natsexec.Config{})
	nc := dial(t, lc)
	slow, err := worker.Start(context.Background(), nc, worker.Config{Delay: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Stop()
	var reports []natsexec.OwnersReport
	md := init.Clone()
	if _, err := lc.Exec.FitOwners(context.Background(), md, shards, natsexec.OwnersOptions{
		Job: "owners-straggler", Options: owners.Options{
			Converger:       factor.Converger{MaxIter: iters},
			GroupNNZ:        ownersGroupNNZ,
			ColBlocks:       3,
			CheckpointEvery: 2,
			MinWorkers:      3,
			Report:          func(r natsexec.OwnersReport) { reports = append(reports, r) },
		}}); err != nil {
		t.Fatal(err)
	}
	coordtest.SameModel(t, "with a straggler", md, want)
	// The fast workers take the straggler's queued shards and back up its
	// running ones; the first answer wins, so it wins few of its shards.
	last := reports[len(reports)-1]
	if last.Backups < 1 || last.Rollbacks != 0 {
		t.Fatalf("last report %+v: want backups and no rollback", last)
	}
	few := false
	for _, r := range reports {
		total := 0
		for _, c := range r.Shards {
			total += c
		}
		if total != len(shards) {
			t.Fatalf("iteration %d: %v shards won per worker of %d; want every shard once", r.Iteration, r.Shards, len(shards))
		}
		few = few || 3*r.Shards[slow.ID()] < total
	}
	if !few {
		t.Fatalf("the straggler won a third of the shards or more in every pass: %+v", reports)
	}
}

// writeLease writes a job record whose owners lease is epoch and the
// fence of token, as a coordinator that holds the job does.
func writeLease(t *testing.T, nc *nats.Conn, job string, epoch int, token string) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), wire.DefaultKVBucket)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"job": job, "owners": proto.Lease{Epoch: epoch, Fence: proto.FenceOf(token)}})
	if _, err := kv.Put(context.Background(), job, body); err != nil {
		t.Fatal(err)
	}
}

// TestOwnersHostileRequests: malformed or forged owners requests to a
// worker (bad JSON, unknown operations and jobs, an older epoch, huge
// shapes, oversized and out-of-range gathers, a blob whose header claims a
// huge size) each get one clear error and change nothing: the worker then
// takes part in a fit bitwise equal to the local one.
func TestOwnersHostileRequests(t *testing.T) {
	lc := ownersCluster(t, 1, natsexec.Config{})
	nc := dial(t, lc)
	id := lc.Workers[0].ID()
	ask := func(body []byte) proto.Reply {
		t.Helper()
		m, err := nc.Request(wire.OwnSubject(wire.DefaultPrefix, id), body, coordtest.Patience)
		if err != nil {
			t.Fatal(err)
		}
		var rep proto.Reply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatalf("reply %q: %v", m.Data, err)
		}
		return rep
	}
	req := func(r proto.Request) []byte {
		b, _ := json.Marshal(r)
		return b
	}
	// A coordinator's record of each job (the lease of epoch 1, token
	// "tok"), so that the loads below pass the fence and reach the
	// checks of their contents.
	for _, job := range []string{"h", "p", "g1", "g2", "g3", "g4"} {
		writeLease(t, nc, job, 1, "tok")
	}
	fenced := func(r proto.Request) []byte {
		r.Epoch, r.Fence = 1, "tok"
		return req(r)
	}
	for _, c := range []struct {
		name   string
		before func()
		body   []byte
		want   string
	}{
		{"bad json", nil, []byte("{not json"), "bad owners request"},
		{"unknown op", nil, req(proto.Request{Op: "explode", Job: "h", N: 4, M: 2, U: 1, Tie: "none"}), "unknown owners operation"},
		{"task of no job", nil, fenced(proto.Request{Op: proto.OpTask, Job: "nojob"}), "no blocks loaded"},
		{"no epoch", nil, req(proto.Request{Op: proto.OpLoad, Job: "h", N: 4, M: 2, U: 1, Tie: "none"}), "without an epoch"},
		{"no record", nil, fenced(proto.Request{Op: proto.OpLoad, Job: "norecord", N: 4, M: 2, U: 1, Tie: "none"}), "its record"},
		{"an epoch no coordinator wrote", nil, req(proto.Request{Op: proto.OpLoad, Job: "h", Epoch: 7, Fence: "tok", N: 4, M: 2, U: 1, Tie: "none"}), "record names epoch 1"},
		{"bad shape", nil, fenced(proto.Request{Op: proto.OpLoad, Job: "h", N: 0, M: 2, U: 1, Tie: "none"}), "bad shape"},
		{"bad tie", nil, fenced(proto.Request{Op: proto.OpLoad, Job: "h", N: 4, M: 2, U: 1, Tie: "sideways"}), "tie"},
		{"huge block", nil, fenced(proto.Request{Op: proto.OpLoad, Job: "h", N: 1 << 40, M: 64, U: 1, Tie: "none",
			Layout: [][]proto.ColBlock{{{Lo: 0, Hi: 1 << 40}}}, Shapes: []proto.KShape{{KBlock: 0}},
			Blocks: []proto.ColBlock{{Lo: 0, Hi: 1 << 40, CRC: "0"}}}), "load owners/h/0/k/0/0"},
		{"the next epoch", func() { writeLease(t, nc, "h", 2, "tok2") },
			req(proto.Request{Op: proto.OpLoad, Job: "h", Epoch: 2, Fence: "tok2", N: 4, M: 2, U: 1, Tie: "none", Layout: [][]proto.ColBlock{{}}}), ""},
		{"older epoch", nil, fenced(proto.Request{Op: proto.OpTask, Job: "h"}), "epoch 1, the job is at epoch 2"},
		{"bad precision", nil, fenced(proto.Request{Op: proto.OpLoad, Job: "p", N: 4, M: 2, U: 1, Tie: "none", Precision: "float16"}), "float16"},
		{"row group of a bad action", nil, fenced(proto.Request{Op: proto.OpLoad, Job: "g1", N: 4, M: 2, U: 1, Tie: "none",
			Layout: [][]proto.ColBlock{{}}, Groups: []proto.RowGroup{{G: 0, Action: 3, Cells: []int{0}, Lo: 0, Hi: 4}}}), "bad row group 0"},
		{"row group past n", nil, fenced(proto.Request{Op: proto.OpLoad, Job: "g2", N: 4, M: 2, U: 1, Tie: "none",
			Layout: [][]proto.ColBlock{{}}, Groups: []proto.RowGroup{{G: 0, Cells: []int{0}, Lo: 0, Hi: 1 << 30}}}), "bad row group 0"},
		{"overlapping row groups", nil, fenced(proto.Request{Op: proto.OpLoad, Job: "g3", N: 4, M: 2, U: 1, Tie: "none",
			Layout: [][]proto.ColBlock{{}}, Groups: []proto.RowGroup{{G: 0, Cells: []int{0}, Lo: 0, Hi: 3}, {G: 1, Cells: []int{0}, Lo: 2, Hi: 4}}}), "overlap"},
		{"row group numbered wrong", nil, fenced(proto.Request{Op: proto.OpLoad, Job: "g4", N: 4, M: 2, U: 1, Tie: "none",
			Layout: [][]proto.ColBlock{{}}, Groups: []proto.RowGroup{{G: 5, Cells: []int{0}, Lo: 0, Hi: 4}}}), "bad row group 0"},
	} {
		if c.before != nil {
			c.before()
		}
		rep := ask(c.body)
		if (c.want == "") != (rep.Error == "") || !strings.Contains(rep.Error, c.want) {
			t.Errorf("%s: error %q, want it to name %q", c.name, rep.Error, c.want)
		}
	}
	// Gathers of a block this worker does not own, too many columns, a
	// column outside the block: an error header each.
	gather := func(hdr map[string]string, cols []int32) string {
		t.Helper()
		msg := nats.NewMsg(wire.GatherSubject(wire.DefaultPrefix, id))
		for k, v := range hdr {
			msg.Header.Set(k, v)
		}
		msg.Data = wire.EncodeCols(cols, nil)
		rep, err := nc.RequestMsg(msg, coordtest.Patience)
		if err != nil {
			t.Fatal(err)
		}
		return rep.Header.Get(wire.HeaderBlobError)
	}
	if e := gather(map[string]string{wire.HeaderOwnJob: "h", wire.HeaderOwnBlock: "0/0", wire.HeaderOwnVersion: "0", wire.HeaderOwnEpoch: "1"}, []int32{1}); !strings.Contains(e, "not owned here") {
		t.Errorf("gather of an unowned block: %q", e)
	}
	if e := gather(map[string]string{wire.HeaderOwnJob: "h"}, nil); !strings.Contains(e, "bad gather request") {
		t.Errorf("gather without headers: %q", e)
	}
	// Rows of D: a group this worker does not own, a group that is not a
	// number.
	if e := gather(map[string]string{wire.HeaderOwnJob: "h", wire.HeaderOwnBlock: "d/7", wire.HeaderOwnVersion: "0", wire.HeaderOwnEpoch: "1"}, []int32{1}); !strings.Contains(e, "row group 7") {
		t.Errorf("gather of an unowned row group: %q", e)
	}
	if e := gather(map[string]string{wire.HeaderOwnJob: "h", wire.HeaderOwnBlock: "d/x", wire.HeaderOwnVersion: "0", wire.HeaderOwnEpoch: "1"}, []int32{1}); !strings.Contains(e, "bad gather request") {
		t.Errorf("gather of row group x: %q", e)
	}
	// A blob whose header claims 1 TB: refused before allocating.
	sub, err := nc.Subscribe("emsf.blob.forger.x", func(m *nats.Msg) {
		// A whole first chunk (the length asked for), so that only the
		// limit can refuse it.
		_, n, _ := strings.Cut(string(m.Data), ",")
		size, _ := strconv.Atoi(n)
		r := nats.NewMsg(m.Reply)
		r.Data = make([]byte, size)
		r.Header.Set(wire.HeaderBlobTotal, "1000000000000")
		_ = m.RespondMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if _, err := wire.FetchBlobAll(context.Background(), nc, "emsf.blob.forger.x", 1<<20); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("a forged blob size: %v", err)
	}
	// The worker still works.
	shards := ownersData(t, 100, 1, 5)
	init := factor.NewRandom(100, 3, 1, factor.TieNone, 4)
	want, _ := fitLocal(t, shards, init, 3)
	md := init.Clone()
	if _, err := lc.Exec.FitOwners(context.Background(), md, shards, natsexec.OwnersOptions{
		Job: "after-hostile", Options: owners.Options{
			Converger: factor.Converger{MaxIter: 3},
			GroupNNZ:  ownersGroupNNZ,
			ColBlocks: 2,
		}}); err != nil {
		t.Fatal(err)
	}
	coordtest.SameModel(t, "after hostile requests", md, want)
}

func infos(shards []*shard.Shard) []shard.Info {
	out := make([]shard.Info, len(shards))
	for k, sh := range shards {
		out[k] = sh.Info
	}
	return out
}

// TestFitOwnersGridTraffic: on data whose shards touch every column
// (uniform random next states), eight workers of one action read and
// fold fewer bytes each as a 4 × 2 grid of column cells than as eight row
// ranges (the model: 2·(1 − 1/P)·n·m·8 per worker for row ranges,
// 2·n·m·8·((1 − 1/p_c)/p_r + (1 − 1/p_r)/p_c) for a grid: 1.75 against
// 1.0), and the grid's model is bitwise the local fit of its cells.
func TestFitOwnersGridTraffic(t *testing.T) {
	const n, m, iters, workers = 400, 4, 3, 8
	rng := rand.New(rand.NewPCG(9, 9))
	var ct shard.Counter
	for range 20 * n {
		if err := ct.Add(rng.IntN(n), 0, rng.IntN(n), 1); err != nil {
			t.Fatal(err)
		}
	}
	mats := ct.Matrices(1)
	perWorker := map[int]int64{}
	for _, cells := range []int{1, 2} {
		rows := workers
		if cells > 1 {
			rows = workers / natsexec.GridCols(workers, cells)
		}
		shards, _ := shard.SplitGrid(mats, n, (20*n+rows-1)/rows, cells)
		init := factor.NewRandom(n, m, 1, factor.TieNone, 3)
		want, _ := fitLocal(t, shards, init, iters)
		lc := ownersCluster(t, workers, natsexec.Config{})
		before := make([]int64, workers)
		md := init.Clone()
		_, err := lc.Exec.FitOwners(context.Background(), md, shards, natsexec.OwnersOptions{
			Job: "grid-traffic", Options: owners.Options{
				Converger:       factor.Converger{MaxIter: iters},
				GroupNNZ:        ownersGroupNNZ,
				ColBlocks:       8,
				CheckpointEvery: 100,
				NoBackups:       true,
				Committed: func(_ context.Context, iter int) error {
					if iter == 1 {
						for k, w := range lc.Workers {
							before[k] = w.Stats().BytesFetched
						}
					}
					return nil
				},
			}})
		if err != nil {
			t.Fatal(err)
		}
		coordtest.SameModel(t, fmt.Sprintf("%d cells", cells), md, want)
		// Iterations 2 and 3 (the last commit stores a checkpoint: the
		// owners write, they do not fetch).
		var most int64
		for k, w := range lc.Workers {
			most = max(most, w.Stats().BytesFetched-before[k])
		}
		perWorker[cells] = most / (iters - 1)
		t.Logf("%d column cells: at most %d bytes fetched per worker per iteration (n·m·8 = %d)", cells, perWorker[cells], n*m*8)
	}
	if perWorker[2] >= perWorker[1]*3/4 {
		t.Fatalf("a 4 × 2 grid fetched %d bytes per worker per iteration, 8 row ranges %d: want under 3/4 of it", perWorker[2], perWorker[1])
	}
}

// TestGridCols: the grid a group of workers forms over column cells.
func TestGridCols(t *testing.T) {
	for _, c := range []struct{ p, q, want int }{
		{1, 4, 1}, {2, 4, 1}, {3, 2, 1}, {4, 2, 2}, {4, 4, 2}, {8, 2, 2}, {8, 4, 2}, {9, 3, 3}, {16, 4, 4}, {16, 2, 2}, {12, 8, 3},
	} {
		if got := natsexec.GridCols(c.p, c.q); got != c.want {
			t.Errorf("GridCols(%d, %d) = %d, want %d", c.p, c.q, got, c.want)
		}
	}
}

// TestFitOwnersFloat32: a float32 fit with the owners exchange (the
// owners round what they commit) is bitwise factor.Fit's float32 fit, on
// 1 and 3 workers and on a 2 × 2 grid of column cells.
func TestFitOwnersFloat32(t *testing.T) {
	const iters = 4
	for _, c := range []struct {
		name           string
		workers, cells int
	}{{"p1", 1, 1}, {"p3", 3, 1}, {"grid-p4", 4, 2}} {
		t.Run(c.name, func(t *testing.T) {
			shards := ownersDataGrid(t, 160, 1, 7, 4, c.cells)
			init := factor.NewRandom(160, 4, 1, factor.TieNone, 5)
			init.SetPrecision(factor.Float32)
			want, wantRes := fitLocal(t, shards, init, iters)
			lc := ownersCluster(t, c.workers, natsexec.Config{})
			md := init.Clone()
			res, err := lc.Exec.FitOwners(context.Background(), md, shards, natsexec.OwnersOptions{
				Job: "owners-f32-" + c.name, Options: owners.Options{
					Converger:       factor.Converger{MaxIter: iters},
					GroupNNZ:        ownersGroupNNZ,
					ColBlocks:       4,
					CheckpointEvery: 3,
				}})
			if err != nil {
				t.Fatal(err)
			}
			if math.Float64bits(res.LogLik) != math.Float64bits(wantRes.LogLik) {
				t.Fatalf("loglik %v, local %v", res.LogLik, wantRes.LogLik)
			}
			coordtest.SameModel(t, "float32 "+c.name, md, want)
			for _, x := range append(md.D, md.KT...) {
				for _, v := range x {
					if float64(float32(v)) != v {
						t.Fatalf("entry %v is not a float32 value", v)
					}
				}
			}
		})
	}
}

// TestOwnersForgedOperations: a client that may publish on the owners
// subjects forges operations of every kind (end, load, task, commit,
// save, and gathers of rows) with a missing epoch, an old one, the
// current one with a forged or no token, and future ones no coordinator
// wrote, to every worker, at every commit of a fit and all through it
// (ends, as in the fault campaign that ended every fit this way). Every
// one is refused, nothing rolls back, and the model is bitwise the local
// fit's.
func TestOwnersForgedOperations(t *testing.T) {
	const iters, job = 6, "owners-forged"
	shards := ownersDataGrid(t, 150, 2, 13, 4, 1)
	init := factor.NewRandom(150, 4, 2, factor.TieNone, 3)
	want, _ := fitLocal(t, shards, init, iters)
	lc := ownersCluster(t, 3, natsexec.Config{})
	nc := dial(t, lc)
	var mu sync.Mutex
	forged, accepted := 0, []string{}
	// forge sends every forgery to every worker and records what a worker
	// did not refuse.
	epochNow := func() int {
		st, _, err := lc.Exec.State(context.Background(), job)
		if err != nil || st.Owners == nil {
			return 1
		}
		return st.Owners.Epoch
	}
	forge := func(ops []string) {
		e := epochNow()
		// In parallel: a load of an epoch the record does not name yet
		// waits a moment for a replica to catch up (leaseCatchUp).
		var fwg sync.WaitGroup
		defer fwg.Wait()
		for _, w := range lc.Workers {
			for _, op := range ops {
				for _, v := range []struct {
					epoch int
					fence string
				}{{0, ""}, {0, "forged"}, {e - 1, "forged"}, {e, ""}, {e, "forged"}, {e + 1, "forged"}, {e + 5, "forged"}} {
					fwg.Go(func() {
						body, _ := json.Marshal(proto.Request{Op: op, Job: job, Epoch: v.epoch, Fence: v.fence, Iteration: 2, N: 150, M: 4, U: 2, Tie: "none",
							Layout: [][]proto.ColBlock{{}, {}}, Y: []proto.KBlockY{{KBlock: 0, Y: []float64{1, 1, 1, 1}}}, Save: true})
						m, err := nc.Request(wire.OwnSubject(wire.DefaultPrefix, w.ID()), body, coordtest.Patience)
						var rep proto.Reply
						if err == nil {
							err = json.Unmarshal(m.Data, &rep)
						}
						mu.Lock()
						forged++
						if err != nil || rep.Error == "" {
							accepted = append(accepted, fmt.Sprintf("%s epoch %d fence %q to %s: %v %+v", op, v.epoch, v.fence, w.ID(), err, rep))
						}
						mu.Unlock()
					})
				}
			}
			for _, fence := range []string{"", "forged"} {
				msg := nats.NewMsg(wire.GatherSubject(wire.DefaultPrefix, w.ID()))
				for k, v := range map[string]string{wire.HeaderOwnJob: job, wire.HeaderOwnBlock: "0/0", wire.HeaderOwnVersion: "0", wire.HeaderOwnEpoch: strconv.Itoa(e), wire.HeaderOwnFence: fence} {
					msg.Header.Set(k, v)
				}
				msg.Data = wire.EncodeCols([]int32{0, 1}, nil)
				m, err := nc.RequestMsg(msg, coordtest.Patience)
				mu.Lock()
				forged++
				if err != nil || m.Header.Get(wire.HeaderBlobError) == "" {
					accepted = append(accepted, fmt.Sprintf("gather with fence %q from %s: %v", fence, w.ID(), err))
				}
				mu.Unlock()
			}
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		// The campaign's attacker sent its ends every 1.5 s; this one
		// every 200 ms.
		for {
			forge([]string{proto.OpEnd})
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	md := init.Clone()
	var last natsexec.OwnersReport
	_, err := lc.Exec.FitOwners(context.Background(), md, shards, natsexec.OwnersOptions{Job: job, Options: owners.Options{
		Converger: factor.Converger{MaxIter: iters}, GroupNNZ: ownersGroupNNZ, ColBlocks: 4, CheckpointEvery: 2,
		Report: func(r natsexec.OwnersReport) { last = r },
		Committed: func(context.Context, int) error {
			forge([]string{proto.OpEnd, proto.OpLoad, proto.OpTask, proto.OpCommit, proto.OpSave})
			return nil
		},
	}})
	close(done)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(accepted) > 0 {
		t.Fatalf("%d of %d forged operations were not refused: %v", len(accepted), forged, accepted)
	}
	coordtest.SameModel(t, "under forged operations", md, want)
	if last.Rollbacks != 0 {
		t.Fatalf("last report %+v: want no rollback", last)
	}
	t.Logf("%d forged operations refused", forged)
}

// TestOwnersTakenOver: coordinator A is paused after iteration 3 while
// coordinator B resumes the job from its checkpoint (B writes the job's
// record last: A lost the compare-and-set race). B is paused in turn
// after iteration 4 while A wakes up: A's requests are of an epoch the
// workers left (refused), its next record write fails for good, and it
// exits without ending the job on the workers. B then goes on with no
// rollback and ends bitwise the local fit.
func TestOwnersTakenOver(t *testing.T) {
	const iters, job = 7, "owners-taken-over"
	shards := ownersDataGrid(t, 150, 1, 21, 4, 1)
	init := factor.NewRandom(150, 4, 1, factor.TieNone, 6)
	want, _ := fitLocal(t, shards, init, iters)
	lc := ownersCluster(t, 3, natsexec.Config{})
	execB, err := natsexec.New(context.Background(), dial(t, lc), natsexec.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer execB.Close()
	opts := owners.Options{Converger: factor.Converger{MaxIter: iters}, GroupNNZ: ownersGroupNNZ, ColBlocks: 4, CheckpointEvery: 2}
	wakeA := make(chan struct{})
	doneA := make(chan error, 1)
	type result struct {
		md   *factor.Model
		last natsexec.OwnersReport
		err  error
	}
	doneB := make(chan result, 1)
	aOpts := opts
	aOpts.Committed = func(_ context.Context, iter int) error {
		if iter != 3 {
			return nil
		}
		bOpts := opts
		bOpts.Resume = true
		bOpts.Committed = func(_ context.Context, iter int) error {
			if iter == 4 {
				close(wakeA)
				if err := <-doneA; !errors.Is(err, owners.ErrLeaseLost) {
					return fmt.Errorf("coordinator A: %v, want it to lose the lease", err)
				}
			}
			return nil
		}
		go func() {
			var r result
			r.md = init.Clone()
			bOpts.Report = func(rep natsexec.OwnersReport) { r.last = rep }
			_, r.err = execB.FitOwners(context.Background(), r.md, shards, natsexec.OwnersOptions{Job: job, Options: bOpts})
			doneB <- r
		}()
		<-wakeA
		return nil
	}
	_, errA := lc.Exec.FitOwners(context.Background(), init.Clone(), shards, natsexec.OwnersOptions{Job: job, Options: aOpts})
	doneA <- errA
	b := <-doneB
	if b.err != nil {
		t.Fatal(b.err)
	}
	coordtest.SameModel(t, "coordinator B", b.md, want)
	// (A rebalance for a worker the loaded machine slowed may add an
	// epoch: timing, not a fault.)
	if b.last.Rollbacks != 0 || b.last.Epoch < 2 {
		t.Fatalf("coordinator B's last report %+v: want no rollback, from epoch 2 on", b.last)
	}
}

// strayService registers a micro service that answers the census as an
// emsf worker (its name and prefix), with own, if set, serving its owners
// subject. It is stopped at the test's end.
func strayService(t *testing.T, lc *natsexec.LocalCluster[*worker.Worker], own func(nc *nats.Conn, sub **nats.Subscription, m *nats.Msg, id string)) string {
	t.Helper()
	nc := dial(t, lc)
	svc, err := micro.AddService(nc, micro.Config{Name: wire.ServiceName, Version: wire.ServiceVersion, Metadata: map[string]string{"prefix": wire.DefaultPrefix}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	id := svc.Info().ID
	if own != nil {
		var sub *nats.Subscription
		if sub, err = nc.Subscribe(wire.OwnSubject(wire.DefaultPrefix, id), func(m *nats.Msg) { own(nc, &sub, m, id) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestOwnersStrayServices: services that answer the census as emsf
// workers but are not (one serves no owners subject, one answers
// nonsense, one speaks an older protocol) are never placed: the census
// admits a worker only after a hello on its own owners subject. One that
// answers the hello and then stops serving its owners subject ("no
// responders" while it answers pings) is quarantined at its first load
// and its work placed on the others after one rollback, not retried.
// The model is bitwise the local fit's.
func TestOwnersStrayServices(t *testing.T) {
	const iters = 4
	shards := ownersData(t, 120, 2, 17)
	init := factor.NewRandom(120, 4, 2, factor.TieNone, 2)
	want, _ := fitLocal(t, shards, init, iters)
	lc := ownersCluster(t, 2, natsexec.Config{})
	strayService(t, lc, nil)
	strayService(t, lc, func(_ *nats.Conn, _ **nats.Subscription, m *nats.Msg, _ string) { _ = m.Respond([]byte("nonsense")) })
	strayService(t, lc, func(_ *nats.Conn, _ **nats.Subscription, m *nats.Msg, id string) {
		body, _ := json.Marshal(proto.Reply{Worker: id, Error: `worker: unknown owners operation "hello"`})
		_ = m.Respond(body)
	})
	turncoat := strayService(t, lc, func(nc *nats.Conn, sub **nats.Subscription, m *nats.Msg, id string) {
		// It answers the hello, after leaving its owners subject.
		_ = (*sub).Unsubscribe()
		_ = nc.Flush()
		body, _ := json.Marshal(proto.Reply{Worker: id, Protocol: proto.Protocol, JobsBucket: wire.DefaultKVBucket})
		_ = m.Respond(body)
	})
	md := init.Clone()
	var last natsexec.OwnersReport
	if _, err := lc.Exec.FitOwners(context.Background(), md, shards, natsexec.OwnersOptions{Job: "owners-strays", Options: owners.Options{
		Converger: factor.Converger{MaxIter: iters}, GroupNNZ: ownersGroupNNZ, ColBlocks: 3, CheckpointEvery: 2, MinWorkers: 2,
		Report: func(r natsexec.OwnersReport) { last = r }}}); err != nil {
		t.Fatal(err)
	}
	coordtest.SameModel(t, "with stray services", md, want)
	if q := lc.Exec.Quarantined(); !slices.Equal(q, []string{turncoat}) || last.Rollbacks != 1 || last.Workers != 2 {
		t.Fatalf("quarantined %v (the turncoat is %s), last report %+v: want it alone quarantined after one rollback", q, turncoat, last)
	}
}

// TestFitOwnersVerify: on real NATS with real workers, one whose owners
// tasks compute D̂ wrong from iteration 2 on (worker.Config.WrongFrom:
// finite numbers, the right Σx) is caught by verification (every task
// verified), quarantined, and its work redone from the checkpoint before
// it was last verified: the model is bitwise the local fit's.
func TestFitOwnersVerify(t *testing.T) {
	const iters = 6
	shards := ownersDataSplit(t, 240, 1, 11, 12)
	init := factor.NewRandom(240, 4, 1, factor.TieNone, 3)
	want, _ := fitLocal(t, shards, init, iters)
	lc := ownersCluster(t, 3, natsexec.Config{})
	nc := dial(t, lc)
	rogue, err := worker.Start(context.Background(), nc, worker.Config{WrongFrom: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Stop()
	var last natsexec.OwnersReport
	md := init.Clone()
	if _, err := lc.Exec.FitOwners(context.Background(), md, shards, natsexec.OwnersOptions{
		Job: "owners-verify", Options: owners.Options{
			Converger:       factor.Converger{MaxIter: iters},
			GroupNNZ:        ownersGroupNNZ,
			ColBlocks:       3,
			CheckpointEvery: 2,
			MinWorkers:      4,
			Verify:          1,
			Report:          func(r natsexec.OwnersReport) { last = r },
		}}); err != nil {
		t.Fatal(err)
	}
	coordtest.SameModel(t, "with a worker that computes wrong", md, want)
	if q := lc.Exec.Quarantined(); !slices.Equal(q, []string{rogue.ID()}) || last.Rogues != 1 || last.Workers != 3 || last.Verifications == 0 {
		t.Fatalf("quarantined %v (the rogue is %s), last report %+v", q, rogue.ID(), last)
	}
}

// TestFitOwnersVerifyHoldsShare: a verification holds its shard only
// while it runs. Every task of a fit verified on another worker (one
// epoch: no backups, no checkpoint to rebalance at), the workers hold in
// all exactly the shards placed on them, once each, not also the ones
// they verified; and the model is the local fit's.
func TestFitOwnersVerifyHoldsShare(t *testing.T) {
	const iters = 3
	shards := ownersDataSplit(t, 240, 1, 11, 12)
	init := factor.NewRandom(240, 4, 1, factor.TieNone, 3)
	want, _ := fitLocal(t, shards, init, iters)
	lc := ownersCluster(t, 3, natsexec.Config{})
	var last natsexec.OwnersReport
	md := init.Clone()
	if _, err := lc.Exec.FitOwners(context.Background(), md, shards, natsexec.OwnersOptions{
		Job: "owners-verify-share", Options: owners.Options{
			Converger:       factor.Converger{MaxIter: iters},
			GroupNNZ:        ownersGroupNNZ,
			ColBlocks:       3,
			CheckpointEvery: 100,
			MinWorkers:      3,
			NoBackups:       true,
			Verify:          1,
			Report:          func(r natsexec.OwnersReport) { last = r },
		}}); err != nil {
		t.Fatal(err)
	}
	coordtest.SameModel(t, "every task verified", md, want)
	held := 0
	for _, w := range lc.Workers {
		held += w.Stats().CompactShards
	}
	if last.Verifications != iters*len(shards) || last.Epoch != 1 || held != len(shards) {
		t.Fatalf("%d compact shards held for %d shards, last report %+v: want each shard held once, by its worker", held, len(shards), last)
	}
}
