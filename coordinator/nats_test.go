package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/emsf/emsf/coordinator"
	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker"
	"github.com/emsf/emsf/worker/wire"
)

// startServer starts an embedded NATS server with JetStream on
// 127.0.0.1 and a random port, its store in a temporary directory.
func startServer(t *testing.T, maxPayload int32) *server.Server {
	t.Helper()
	s, err := natsexec.StartEmbedded(natsexec.EmbeddedConfig{StoreDir: t.TempDir(), MaxPayload: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

func connect(t *testing.T, s *server.Server, name string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.Name(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// startWorkers starts n NATS workers, each on its own connection.
func startWorkers(t *testing.T, s *server.Server, n int) []*worker.Worker {
	t.Helper()
	var ws []*worker.Worker
	for k := range n {
		nc := connect(t, s, fmt.Sprintf("worker-%d", k))
		w, err := worker.Start(context.Background(), nc, worker.Config{
			Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop() })
		ws = append(ws, w)
	}
	return ws
}

// newNATSExec returns an executor whose census is never refreshed in the
// background during a test (PingEvery an hour): the census a test waited
// for with waitCensus is the one the fit assigns tasks by, however slowly
// a loaded machine answers a later PING.
func newNATSExec(t *testing.T, s *server.Server) *natsexec.Executor {
	t.Helper()
	return newNATSExecConfig(t, s, natsexec.Config{})
}

func newNATSExecConfig(t *testing.T, s *server.Server, cfg natsexec.Config) *natsexec.Executor {
	t.Helper()
	cfg.PingWait, cfg.PingEvery = 100*time.Millisecond, time.Hour
	exec, err := natsexec.New(context.Background(), connect(t, s, "coordinator"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(exec.Close)
	return exec
}

// waitCensus waits until a census of exec finds n workers; the executor
// keeps that census for Fit.
func waitCensus(t *testing.T, exec *natsexec.Executor, n int) {
	t.Helper()
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		if ids, err := exec.Census(context.Background()); err != nil || len(ids) != n {
			return fmt.Errorf("census found %d workers (%v), want %d", len(ids), err, n)
		}
		return nil
	})
}

func TestFitNATS(t *testing.T) {
	fc := newFitCase(t)
	for _, n := range []int{1, 2, 3, 4, 8} {
		t.Run(fmt.Sprintf("workers=%d", n), func(t *testing.T) {
			s := startServer(t, 0)
			ws := startWorkers(t, s, n)
			exec := newNATSExec(t, s)
			waitCensus(t, exec, n)
			fc.run(t, exec, exec)

			// Shards were fetched once per worker and cached across
			// iterations; a shard's rows of D were derived by the worker
			// that computed it the iteration before (shard affinity).
			var tasks, fetches, derived int64
			for _, w := range ws {
				st := w.Stats()
				tasks += st.Tasks
				fetches += st.ShardFetches
				derived += st.DerivedRows
			}
			if want := int64((fc.conv.MaxIter - 1) * len(fc.shards)); derived < want/2 {
				t.Errorf("workers derived the rows of D of %d tasks, want about %d", derived, want)
			}
			if want := int64(len(fc.shards) * fc.conv.MaxIter); tasks != want {
				t.Errorf("workers computed %d tasks, want %d", tasks, want)
			}
			if fetches > int64(len(fc.shards)*n) {
				t.Errorf("workers fetched shards %d times, want at most %d", fetches, len(fc.shards)*n)
			}

			st, _, err := exec.State(context.Background(), "test-job")
			if err != nil {
				t.Fatal(err)
			}
			if st.Iteration != fc.conv.MaxIter || st.ModelDigest == "" || st.Status != factor.IterationLimit.String() {
				t.Errorf("job state %+v", st)
			}
		})
	}
}

// Every tie gives the model of factor.Fit; with a shared D the workers
// fetch the rows of D every iteration instead of deriving them.
func TestFitNATSTies(t *testing.T) {
	for _, tie := range []factor.Tie{factor.TieSharedK, factor.TieSharedD} {
		t.Run(tie.String(), func(t *testing.T) {
			fc := newFitCaseTie(t, tie)
			s := startServer(t, 0)
			ws := startWorkers(t, s, 2)
			exec := newNATSExec(t, s)
			fc.run(t, exec, exec)
			var derived int64
			for _, w := range ws {
				derived += w.Stats().DerivedRows
			}
			if tie == factor.TieSharedD && derived != 0 {
				t.Errorf("workers derived rows of a shared D %d times", derived)
			}
			if tie != factor.TieSharedD && derived == 0 {
				t.Error("workers never derived rows of D")
			}
		})
	}
}

// A worker that leaves NATS while it holds a task (its connection
// closes, as when its process is killed) is noticed by the executor's
// probe, not at the end of the task's lease: the task is handed out again
// and the fit ends with the model of factor.Fit. The lease is longer than
// the test waits, so only the probe can end the fit.
func TestFitNATSVanishedWorker(t *testing.T) {
	fc := newFitCase(t)
	s := startServer(t, 0)
	startWorkers(t, s, 1)
	ncA := connect(t, s, "worker-slow")
	// The slow worker holds every task it gets until it leaves.
	slow, err := worker.Start(context.Background(), ncA, worker.Config{Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slow.Stop() })
	exec := newNATSExecConfig(t, s, natsexec.Config{ProbeEvery: 100 * time.Millisecond})
	// Both workers are in the census the fit assigns tasks by (shard k to
	// the k-th worker first): the slow one gets tasks of iteration 1.
	waitCensus(t, exec, 2)
	ctx, cancel := context.WithTimeout(context.Background(), coordtest.Patience)
	defer cancel()
	// The slow worker leaves once it holds a task; the test waits for
	// this goroutine before it returns.
	left := make(chan bool, 1)
	go func() {
		for slow.Stats().Running == 0 {
			select {
			case <-ctx.Done():
				left <- false
				return
			case <-time.After(coordtest.Poll):
			}
		}
		ncA.Close()
		left <- true
	}()
	md := fc.init.Clone()
	var retried int
	_, err = coordinator.Fit(ctx, exec, fc.shards, fc.man, md, coordinator.Options{GroupNNZ: testGroupNNZ,
		Job: "vanish", Converger: fc.conv, TaskTimeout: time.Hour, Checkpoint: exec,
		Report: func(r coordinator.IterReport) { retried += r.Retried },
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}}),
	})
	cancel()
	if !<-left {
		t.Fatal("the slow worker never got a task")
	}
	if err != nil {
		t.Fatalf("fit with a vanished worker (lease %v, probe every 100ms): %v", time.Hour, err)
	}
	if !md.Equal(fc.want) {
		t.Fatal("model differs from factor.Fit's")
	}
	if retried == 0 {
		t.Error("no task was handed out again")
	}
}

// A census taken by the caller (as a caller waiting for its workers
// takes one) is the one Workers returns and the fit assigns tasks by: a
// worker that stops answering PING after it does not make the fit's first
// count miss it.
func TestCensusFillsWorkers(t *testing.T) {
	s := startServer(t, 0)
	startWorkers(t, s, 1)
	ncB := connect(t, s, "worker-b")
	b, err := worker.Start(context.Background(), ncB, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop() })
	exec := newNATSExec(t, s)
	waitCensus(t, exec, 2)
	ncB.Close()
	if n, err := exec.Workers(context.Background()); err != nil || n != 2 {
		t.Fatalf("Workers after a census of 2 = %d, %v; want 2 (the census, not one of its own)", n, err)
	}
}

func TestFitNATSFaults(t *testing.T) {
	fc := newFitCase(t)
	s := startServer(t, 0)
	startWorkers(t, s, 2)
	exec := newNATSExec(t, s)
	f := &faulty{Executor: exec, dupIter: 1, dupShard: 2, badIter: 2, badShard: 3}
	checkFaults(t, f, fc.run(t, f, exec))
}

// A small max payload sends every partial (and every object chunk) in
// pieces below it.
func TestFitNATSSmallPayload(t *testing.T) {
	fc := newFitCase(t)
	s := startServer(t, 8<<10)
	ws := startWorkers(t, s, 2)
	exec := newNATSExec(t, s)
	fc.run(t, exec, exec)
	var large int64
	for _, w := range ws {
		large += w.Stats().LargePartials
	}
	if large == 0 {
		t.Error("no partial went through the Object Store")
	}
}

// A second coordinator taking over a job makes the first one's next
// commit fail (compare-and-set on the KV revision).
func TestCheckpointCAS(t *testing.T) {
	s := startServer(t, 0)
	a, b := newNATSExec(t, s), newNATSExec(t, s)
	ctx := context.Background()
	md := factor.NewRandom(10, 2, 1, factor.TieNone, 1)
	st := &coordinator.JobState{Job: "cas", Status: "running"}
	if err := a.Begin(ctx, st); err != nil {
		t.Fatal(err)
	}
	st.Iteration = 1
	if err := a.Commit(ctx, st, md, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Begin(ctx, &coordinator.JobState{Job: "cas", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	st.Iteration = 2
	err := a.Commit(ctx, st, md, nil)
	if !errors.Is(err, wire.ErrLostRace) || !strings.Contains(err.Error(), "another coordinator") {
		t.Fatalf("stale commit: err = %v, want a compare-and-set failure", err)
	}
}

// A job record that does not decode is named as corrupt, with the way
// out, by State and by Resume (issue 26 item 5).
func TestCorruptJobRecord(t *testing.T) {
	s := startServer(t, 0)
	exec := newNATSExec(t, s)
	ctx := context.Background()
	if err := exec.Begin(ctx, &coordinator.JobState{Job: "bad", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(connect(t, s, "vandal"))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, wire.DefaultKVBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "bad", []byte(`{"job":"bad","iteration":`)); err != nil {
		t.Fatal(err)
	}
	_, _, err = exec.State(ctx, "bad")
	var ce *natsexec.CorruptRecordError
	if !errors.As(err, &ce) || ce.Job != "bad" || !strings.Contains(err.Error(), "is corrupt") || !strings.Contains(err.Error(), "nats kv del "+wire.DefaultKVBucket+" bad") {
		t.Fatalf("State of a corrupt record: %v", err)
	}
	if _, _, _, err := exec.Resume(ctx, "bad"); !errors.As(err, &ce) {
		t.Fatalf("Resume of a corrupt record: %v", err)
	}
}

func TestNoWorkers(t *testing.T) {
	fc := newFitCase(t)
	s := startServer(t, 0)
	exec := newNATSExec(t, s)
	_, err := coordinator.Fit(context.Background(), exec, fc.shards, fc.man, fc.init.Clone(), coordinator.Options{GroupNNZ: testGroupNNZ,
		Job: "none", Converger: fc.conv, WaitWorkers: 300 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "not enough workers") {
		t.Fatalf("err = %v, want ErrNoWorkers", err)
	}
}

// Workers answer $SRV.PING/INFO/STATS as the micro service emsf-worker,
// with their counters in the STATS data.
func TestWorkerDiscovery(t *testing.T) {
	s := startServer(t, 0)
	startWorkers(t, s, 2)
	nc := connect(t, s, "probe")
	for _, verb := range []micro.Verb{micro.PingVerb, micro.InfoVerb, micro.StatsVerb} {
		subj, err := micro.ControlSubject(verb, wire.ServiceName, "")
		if err != nil {
			t.Fatal(err)
		}
		inbox := nats.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.PublishRequest(subj, inbox, nil); err != nil {
			t.Fatal(err)
		}
		for k := range 2 {
			m, err := sub.NextMsg(coordtest.Patience)
			if err != nil {
				t.Fatalf("%s reply %d: %v", verb, k, err)
			}
			if verb == micro.StatsVerb {
				var st micro.Stats
				if err := json.Unmarshal(m.Data, &st); err != nil {
					t.Fatal(err)
				}
				// The queue-group endpoint, the worker's own (shard
				// affinity), the link probe's and the owners exchange's.
				if len(st.Endpoints) != 4 || st.Endpoints[0].Subject != wire.TaskSubject(wire.DefaultPrefix) ||
					st.Endpoints[1].Subject != wire.DirectTaskSubject(wire.DefaultPrefix, st.ID) ||
					st.Endpoints[2].Subject != wire.LinkSubject(wire.DefaultPrefix, st.ID) ||
					st.Endpoints[3].Subject != wire.OwnSubject(wire.DefaultPrefix, st.ID) ||
					!strings.Contains(string(st.Endpoints[0].Data), `"nnz_per_second"`) {
					t.Fatalf("stats %s", m.Data)
				}
			}
		}
		_ = sub.Unsubscribe()
	}
}

func TestBench(t *testing.T) {
	fc := newFitCase(t)
	res, err := natsexec.Bench(context.Background(), t.TempDir(), 2, 3, fc.shards, fc.man, fc.init, worker.Starter(worker.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Reports) != 3 || !(res.SecondsPerIter > 0) || !(res.BytesPerIter > 0) {
		t.Fatalf("bench result %+v", res)
	}
}

// A job stopped after 2 iterations and resumed to 5 ends bitwise where an
// uninterrupted 5-iteration fit does.
func TestResume(t *testing.T) {
	fc := newFitCase(t)
	s := startServer(t, 0)
	startWorkers(t, s, 2)
	ctx := context.Background()
	fit := func(conv factor.Converger, stats *[]factor.IterStats) (*factor.Model, factor.FitResult) {
		exec := newNATSExec(t, s)
		md := fc.init.Clone()
		res, err := coordinator.Fit(ctx, exec, fc.shards, fc.man, md, coordinator.Options{GroupNNZ: testGroupNNZ,
			Job: "resume", Converger: conv, Checkpoint: exec, Resume: true,
			Progress: func(s factor.IterStats) { *stats = append(*stats, s) }})
		if err != nil {
			t.Fatal(err)
		}
		return md, res
	}
	var first, second []factor.IterStats
	conv := fc.conv
	conv.MaxIter = 2
	fit(conv, &first)
	md, res := fit(fc.conv, &second)
	if len(first) != 2 || len(second) != 3 || second[0].Iteration != 3 {
		t.Fatalf("ran iterations %v then %v, want 1-2 then 3-5", first, second)
	}
	if !md.Equal(fc.want) || res.Iterations != fc.wantR.Iterations || res.LogLik != fc.wantR.LogLik || md.Iteration != fc.want.Iteration {
		t.Fatalf("resumed fit (%+v, model iteration %d) differs from the uninterrupted one (%+v)", res, md.Iteration, fc.wantR)
	}
	for k, s := range second {
		if w := fc.wantS[k+2]; s.LogLik != w.LogLik || !(s.RelChange == w.RelChange) {
			t.Fatalf("resumed progress %+v, want %+v", s, w)
		}
	}
	// Resuming under another reduction group size would change the bits
	// mid-fit: refused.
	exec := newNATSExec(t, s)
	_, err := coordinator.Fit(ctx, exec, fc.shards, fc.man, fc.init.Clone(), coordinator.Options{GroupNNZ: 2 * testGroupNNZ,
		Job: "resume", Converger: fc.conv, Checkpoint: exec, Resume: true})
	if err == nil || !strings.Contains(err.Error(), "group nnz") {
		t.Fatalf("resume with another group size: %v, want an error naming it", err)
	}
}

// TestFitNATSStoreFull: the coordinator exchange on a server whose
// JetStream file storage (max_file_store) has room for the shards but not
// for the models the commits store: the fit ends with one error that says
// the store is full, names the bucket and the model object, and what to
// do (issue 26 item 5).
func TestFitNATSStoreFull(t *testing.T) {
	fc := newFitCase(t)
	s, err := natsexec.StartEmbedded(natsexec.EmbeddedConfig{StoreDir: t.TempDir(), NoSync: true, MaxStore: 96 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	startWorkers(t, s, 2)
	exec := newNATSExec(t, s)
	waitCensus(t, exec, 2)
	conv := fc.conv
	conv.MaxIter = 40
	_, err = coordinator.Fit(context.Background(), exec, fc.shards, fc.man, fc.init.Clone(), coordinator.Options{GroupNNZ: testGroupNNZ,
		Job: "full", Converger: conv, TaskTimeout: time.Minute, Checkpoint: exec})
	if err == nil {
		t.Fatal("the fit succeeded on a full store")
	}
	for _, want := range []string{"store models/full/", "in Object Store bucket " + wire.DefaultObjectBucket, "the JetStream store is full",
		"insufficient resources", "max_file_store", "nats obj rm " + wire.DefaultObjectBucket} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q: want %q", err, want)
		}
	}
}
