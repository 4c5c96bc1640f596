package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator"
	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// replayer is a worker (a real micro service under the workers' name and
// prefix, so the census counts it and hands it shards) that computes each
// shard once, on the first model version it sees, and answers every later
// task of that shard with the same partial relabelled as the task's
// iteration: a worker whose model cache is stuck, or a replay of an
// earlier iteration's partial. It honours Avoid like a worker does.
//
// With nanLogLik it computes every task on the task's model version
// instead, and answers a NaN log-likelihood where one is asked for.
type replayer struct {
	nanLogLik bool
	// forge labels a replayed partial with the task's model digest (a
	// label built from the task's fields alone), so that every check of
	// the reply alone passes.
	forge bool

	nc  *nats.Conn
	svc micro.Service
	obs jetstream.ObjectStore

	mu       sync.Mutex
	md       *factor.Model
	mdDig    string
	partials map[int]*factor.Partial
	answered map[int]int // tasks answered, by iteration
}

func startReplayer(t *testing.T, nc *nats.Conn, nanLogLik bool) *replayer {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r := &replayer{nanLogLik: nanLogLik, nc: nc, partials: map[int]*factor.Partial{}, answered: map[int]int{}}
	ctx := context.Background()
	if r.obs, err = js.ObjectStore(ctx, wire.DefaultObjectBucket); err != nil {
		t.Fatal(err)
	}
	r.svc, err = micro.AddService(nc, micro.Config{Name: wire.ServiceName, Version: wire.ServiceVersion,
		Metadata: map[string]string{"prefix": wire.DefaultPrefix}, QueueGroup: wire.QueueGroup(wire.DefaultPrefix)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.svc.Stop() })
	id := r.svc.Info().ID
	for name, subj := range map[string]string{"task": wire.TaskSubject(wire.DefaultPrefix),
		"task-direct": wire.DirectTaskSubject(wire.DefaultPrefix, id)} {
		if err := r.svc.AddEndpoint(name, micro.HandlerFunc(r.handle), micro.WithEndpointSubject(subj)); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func (r *replayer) id() string { return r.svc.Info().ID }

func (r *replayer) handle(req micro.Request) {
	hdr := micro.Headers{wire.HeaderWorker: []string{r.id()}}
	var tr wire.TaskRequest
	if err := json.Unmarshal(req.Data(), &tr); err != nil {
		_ = req.Error(wire.CodeFailed, err.Error(), nil, micro.WithHeaders(hdr))
		return
	}
	if tr.Task().Avoids(r.id()) {
		_ = req.Error(wire.CodeDeclined, "declined", nil, micro.WithHeaders(hdr))
		return
	}
	body, label, err := r.answer(&tr)
	if err != nil {
		_ = req.Error(wire.CodeFailed, err.Error(), nil, micro.WithHeaders(hdr))
		return
	}
	hdr[wire.HeaderPartialOf] = []string{label}
	_ = req.Respond(body, micro.WithHeaders(hdr))
}

func (r *replayer) answer(tr *wire.TaskRequest) ([]byte, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answered[tr.Iteration]++
	p := r.partials[tr.Shard]
	if p == nil || r.nanLogLik {
		if r.md == nil || r.nanLogLik && r.mdDig != tr.ModelDigest {
			data, err := wire.FetchBlob(ctx, r.nc, tr.ModelBlob, tr.ModelSize, nil)
			if err != nil {
				return nil, "", err
			}
			if r.md, err = wire.DecodeRawModel(data, nil); err != nil {
				return nil, "", err
			}
			r.mdDig = tr.ModelDigest
		}
		data, err := r.obs.GetBytes(ctx, tr.ShardObject)
		if err != nil {
			return nil, "", err
		}
		s, err := arrowio.DecodeShard(data)
		if err != nil {
			return nil, "", err
		}
		p = &factor.Partial{}
		if err := factor.Compute(r.md, s.Block, &factor.Scratch{}, p, tr.WithLogLik); err != nil {
			return nil, "", err
		}
		r.partials[tr.Shard] = p
		if r.nanLogLik && tr.WithLogLik {
			p.LogLik = math.NaN()
		}
	}
	// The partial names the task's job, iteration and shard, and
	// (honestly) the model version it was computed from.
	body, err := arrowio.EncodePartial(p, arrowio.PartialMeta{Job: tr.Job, Iteration: tr.Iteration, Shard: tr.Shard, Worker: r.id()})
	if err != nil {
		return nil, "", err
	}
	dig := r.mdDig
	if r.forge {
		dig = tr.ModelDigest
	}
	// It sees the task, so it copies its nonce too.
	label := proto.Label{Job: tr.Job, Iteration: tr.Iteration, Shard: tr.Shard, ShardChecksum: tr.ShardChecksum, ModelDigest: dig, Nonce: tr.Nonce}
	return body, label.String(), nil
}

func (r *replayer) answeredIn(iter int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.answered[iter]
}

// A worker that answers tasks with partials of an earlier model version
// relabelled as the current iteration is caught: its partials are
// rejected (the model is factor.Fit's, bitwise), and after a few failed
// checks it is quarantined and gets no more tasks.
func TestFitNATSRelabelledPartial(t *testing.T) {
	fc := newFitCase(t)
	exec, rogue, logger, logged := rogueCluster(t, 1, false)
	md := fc.init.Clone()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := coordinator.Fit(ctx, exec, fc.shards, fc.man, md, coordinator.Options{GroupNNZ: testGroupNNZ,
		Job: "relabel", Converger: fc.conv, TaskTimeout: 10 * time.Second, Checkpoint: exec,
		Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rogue.answeredIn(2) == 0 {
		t.Fatal("the replaying worker got no task in iteration 2: the test proves nothing")
	}
	if !md.Equal(fc.want) {
		t.Fatal("model differs from factor.Fit's: a relabelled partial was accepted")
	}
	if q := exec.Quarantined(); len(q) != 1 || q[0] != rogue.id() {
		t.Errorf("quarantined %v, want the replaying worker %s", q, rogue.id())
	}
	if logged := logged(); !strings.Contains(logged, "worker quarantined") || !strings.Contains(logged, rogue.id()) ||
		!strings.Contains(logged, "model digest") {
		t.Errorf("log does not name the quarantined worker and the failed check:\n%s", logged)
	}
	// Quarantined in iteration 2 (after 3 rejected partials), it answers
	// no task of the last iteration.
	if n := rogue.answeredIn(fc.conv.MaxIter); n != 0 {
		t.Errorf("the quarantined worker answered %d tasks of iteration %d", n, fc.conv.MaxIter)
	}
}

// A worker that replays earlier partials under labels forged from the
// task's own fields passes every check of a reply alone (issue 26: 58
// such partials were accepted and the fit exited 0 with a wrong model).
// Verification catches it (a sampled task, or its last task of the pass
// with VerifyLast): the task computed again on an honest worker differs,
// the coordinator arbitrates, quarantines it and runs the pass again; the
// model is factor.Fit's, bitwise.
func TestFitNATSForgedReplayVerified(t *testing.T) {
	fc := newFitCase(t)
	exec, rogue, logger, _ := rogueCluster(t, 2, true)
	md := fc.init.Clone()
	ctx, cancel := context.WithTimeout(context.Background(), coordtest.Patience)
	defer cancel()
	var reps []coordinator.IterReport
	_, err := coordinator.Fit(ctx, exec, fc.shards, fc.man, md, coordinator.Options{GroupNNZ: testGroupNNZ,
		Job: "forged", Converger: fc.conv, TaskTimeout: time.Minute, Checkpoint: exec, Logger: logger,
		Verify: 0.02, VerifyLast: true, VerifySalt: 5, Report: func(r coordinator.IterReport) { reps = append(reps, r) }})
	if err != nil {
		t.Fatal(err)
	}
	if rogue.answeredIn(2) == 0 {
		t.Fatal("the forging worker got no task in iteration 2: the test proves nothing")
	}
	if !md.Equal(fc.want) {
		t.Fatal("model differs from factor.Fit's: a forged replay was folded")
	}
	if q := exec.Quarantined(); len(q) != 1 || q[0] != rogue.id() {
		t.Errorf("quarantined %v, want the forging worker %s", q, rogue.id())
	}
	mismatches := 0
	for _, r := range reps {
		mismatches += r.Mismatches
	}
	if mismatches == 0 {
		t.Errorf("no mismatch reported in %+v", reps)
	}
}

// rogueCluster starts a server, honest workers and a replayer (forging
// its labels with forge) and the coordinator's executor, whose warnings
// go to logger and logged(); it returns once the census counts them all.
func rogueCluster(t *testing.T, honest int, forge bool) (*natsexec.Executor, *replayer, hclog.Logger, func() string) {
	t.Helper()
	s := startServer(t, 0)
	startWorkers(t, s, honest)
	var log strings.Builder
	var lmu sync.Mutex
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: lockedWriter{&lmu, &log}})
	exec, err := natsexec.New(context.Background(), connect(t, s, "coordinator"),
		natsexec.Config{PingWait: 100 * time.Millisecond, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(exec.Close)
	rogue := startReplayer(t, connect(t, s, "replayer"), false)
	rogue.mu.Lock()
	rogue.forge = forge
	rogue.mu.Unlock()
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		if ids, _ := exec.Census(context.Background()); len(ids) != honest+1 {
			return fmt.Errorf("census found %d workers, want %d", len(ids), honest+1)
		}
		return nil
	})
	return exec, rogue, logger, func() string {
		lmu.Lock()
		defer lmu.Unlock()
		return log.String()
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// A partial with a NaN log-likelihood where the iteration asked for one is
// rejected; with no other worker the fit fails and writes no model.
func TestFitNATSNaNLogLik(t *testing.T) {
	fc := newFitCase(t)
	s := startServer(t, 0)
	var log strings.Builder
	var lmu sync.Mutex
	exec, err := natsexec.New(context.Background(), connect(t, s, "coordinator"), natsexec.Config{PingWait: 100 * time.Millisecond,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: lockedWriter{&lmu, &log}})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(exec.Close)
	startReplayer(t, connect(t, s, "nan-worker"), true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err = coordinator.Fit(ctx, exec, fc.shards, fc.man, fc.init.Clone(), coordinator.Options{GroupNNZ: testGroupNNZ,
		Job: "nan", Converger: fc.conv, TaskTimeout: 10 * time.Second, Checkpoint: exec, MaxAttempts: 4})
	if err == nil {
		t.Fatal("fit on NaN log-likelihoods succeeded")
	}
	st, _, err := exec.State(ctx, "nan")
	if err != nil {
		t.Fatal(err)
	}
	if st.Iteration != 0 || st.ModelObject != "" {
		t.Errorf("job state %+v names a committed model", st)
	}
	lmu.Lock()
	defer lmu.Unlock()
	if !strings.Contains(log.String(), "iteration 1 asked for the log-likelihood and the partial's is NaN") {
		t.Errorf("log does not name the NaN log-likelihood:\n%s", log.String())
	}
}
