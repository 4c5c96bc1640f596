package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker"
)

// server starts an embedded NATS server for one test and returns a
// connection to it.
func server(t *testing.T) (*nats.Conn, string) {
	t.Helper()
	srv, err := natsexec.StartEmbedded(natsexec.EmbeddedConfig{StoreDir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc := connect(t, srv.ClientURL())
	return nc, srv.ClientURL()
}

func connect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// running is a Service running in a goroutine of the test.
type running struct {
	svc    *Service
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, nc *nats.Conn, cfg Config) *running {
	t.Helper()
	return startHooked(t, nc, cfg, nil)
}

// startHooked starts a service whose fits call hook first.
func startHooked(t *testing.T, nc *nats.Conn, cfg Config, hook func()) *running {
	t.Helper()
	return startWith(t, nc, cfg, func(s *Service) { s.fitHook = hook })
}

// startWith starts a service after set has set its test hooks.
func startWith(t *testing.T, nc *nats.Conn, cfg Config, set func(*Service)) *running {
	t.Helper()
	svc, err := New(t.Context(), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	set(svc)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{svc: svc, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- svc.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	select {
	case <-svc.Ready():
	case err := <-r.done:
		t.Fatalf("Run: %v", err)
	}
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	if err := <-r.done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// rows is a list of transitions (state, action, next).
type rows [][3]int

func randomRows(seed uint64, k, n, u int) rows {
	rng := rand.New(rand.NewPCG(seed, 9))
	out := make(rows, k)
	for x := range out {
		out[x] = [3]int{rng.IntN(n), rng.IntN(u), rng.IntN(n)}
	}
	return out
}

func (rs rows) csv() []byte {
	var b strings.Builder
	b.WriteString("state,action,next_state\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "%d,%d,%d\n", r[0], r[1], r[2])
	}
	return []byte(b.String())
}

func (rs rows) arrow(t *testing.T) []byte {
	t.Helper()
	b := &arrowio.TransitionBatch{}
	for _, r := range rs {
		b.State = append(b.State, int32(r[0]))
		b.Action = append(b.Action, int32(r[1]))
		b.Next = append(b.Next, int32(r[2]))
		b.Count = append(b.Count, 1)
	}
	data, err := arrowio.EncodeTransitionsPayload(b, 0, b.Len())
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func publish(t *testing.T, nc *nats.Conn, name string, payload []byte) uint64 {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureStream(t.Context(), js, StoreConfig{Prefix: "emsf", Name: name}); err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(t.Context(), TransitionsSubject("emsf", name), payload)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

func status(t *testing.T, nc *nats.Conn, name string) Status {
	t.Helper()
	m, err := nc.Request(StatusSubject("emsf", name), nil, coordtest.Patience)
	if err != nil {
		t.Fatal(err)
	}
	var st Status
	if err := json.Unmarshal(m.Data, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// waitSeq waits until the service named name has counted sequence seq.
func waitSeq(t *testing.T, nc *nats.Conn, name string, seq uint64) Status {
	t.Helper()
	var st Status
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		if st = status(t, nc, name); st.StreamSeq < seq {
			return fmt.Errorf("service %s counted up to sequence %d, want %d", name, st.StreamSeq, seq)
		}
		return nil
	})
	return st
}

func retrain(t *testing.T, nc *nats.Conn, name string) (*Version, error) {
	t.Helper()
	v, err := askRetrain(nc, name)
	var replyErr *serviceError
	if err != nil && !errors.As(err, &replyErr) {
		t.Fatal(err)
	}
	return v, err
}

// serviceError is a micro error reply.
type serviceError struct{ msg string }

func (e *serviceError) Error() string { return e.msg }

// askRetrain sends a retrain request and decodes the reply (safe off the
// test's goroutine).
func askRetrain(nc *nats.Conn, name string) (*Version, error) {
	m, err := nc.Request(RetrainSubject("emsf", name), nil, time.Minute)
	if err != nil {
		return nil, err
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return nil, &serviceError{m.Header.Get("Nats-Service-Error")}
	}
	var v Version
	if err := json.Unmarshal(m.Data, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

func fetch(t *testing.T, nc *nats.Conn, name string, v int) *factor.Model {
	t.Helper()
	return fetchFile(t, nc, name, v).Model
}

// fetchFile is version v of model name's file.
func fetchFile(t *testing.T, nc *nats.Conn, name string, v int) *arrowio.ModelFile {
	t.Helper()
	js, _ := jetstream.New(nc)
	st, err := OpenStoresReadOnly(t.Context(), js, DefaultStateBucket, DefaultModelBucket)
	if err != nil {
		t.Fatal(err)
	}
	f, err := st.Get(t.Context(), name, v)
	if err != nil {
		t.Fatal(err)
	}
	return f.File
}

// blocksOf counts rs into per-action blocks as a refit sees them.
func blocksOf(rs rows, u int) []*factor.Block {
	var tab shard.Table
	for _, r := range rs {
		_ = tab.Add(r[0], r[1], r[2], 1)
	}
	return tab.Blocks(u, false)
}

// The whole cycle: publish (CSV and Arrow), retrain on request, the
// version stored, recorded as latest and announced, and equal to a local
// fit of the same counts; a retrain without new data makes no version.
func TestServeRetrainPublishes(t *testing.T) {
	nc, _ := server(t)
	announced := make(chan *nats.Msg, 4)
	sub, err := nc.ChanSubscribe(ModelSubject("emsf", "demo"), announced)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	start(t, nc, Config{Name: "demo", Order: 3, Seed: 5, MaxIter: 20, Tol: 0, UseWorkers: WorkersNever})

	// Discoverable as a NATS micro service (what `nats micro info` asks).
	info, err := nc.Request("$SRV.INFO.emsf-serve", nil, coordtest.Patience)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"name":"emsf-serve"`, `"model":"demo"`, `"subject":"emsf.demo.retrain"`, `"subject":"emsf.demo.status"`} {
		if !strings.Contains(string(info.Data), want) {
			t.Errorf("$SRV.INFO reply lacks %s: %s", want, info.Data)
		}
	}
	if _, err := retrain(t, nc, "demo"); err == nil || !strings.Contains(err.Error(), "no transitions yet") {
		t.Fatalf("retrain before any data: %v", err)
	}
	a, b := randomRows(1, 400, 12, 2), randomRows(2, 300, 12, 2)
	publish(t, nc, "demo", a.csv())
	seq := publish(t, nc, "demo", b.arrow(t))
	waitSeq(t, nc, "demo", seq)
	v, err := retrain(t, nc, "demo")
	if err != nil {
		t.Fatal(err)
	}
	if v.Version != 1 || !v.New || v.Transitions != 700 || v.StreamSeq != seq || v.N != 12 || v.U != 2 || v.M != 3 || v.Iterations != 20 {
		t.Fatalf("version %+v", v)
	}
	select {
	case m := <-announced:
		var got Version
		if err := json.Unmarshal(m.Data, &got); err != nil || got.Version != 1 || got.Digest != v.Digest {
			t.Fatalf("announcement %s (%v)", m.Data, err)
		}
	case <-time.After(coordtest.Patience):
		t.Fatal("no announcement on the model subject")
	}
	all := append(append(rows{}, a...), b...)
	want := factor.NewRandom(12, 3, 2, factor.TieNone, 5)
	shards, _ := shard.Split(blocksOf(all, 2), 12, shard.DefaultTargetNNZ)
	if _, err := factor.Fit(t.Context(), want, shard.Blocks(shards), factor.FitOptions{Converger: factor.Converger{MaxIter: 20}}); err != nil {
		t.Fatal(err)
	}
	if got := fetch(t, nc, "demo", 0); !got.Equal(want) {
		t.Fatal("version 1 differs from a local fit of the same counts")
	}
	js, _ := jetstream.New(nc)
	st, err := OpenStoresReadOnly(t.Context(), js, DefaultStateBucket, DefaultModelBucket)
	if err != nil {
		t.Fatal(err)
	}
	if vs, err := st.List(t.Context(), "demo"); err != nil || len(vs) != 1 || vs[0].Digest != v.Digest || vs[0].LogLik != v.LogLik {
		t.Fatalf("List: %+v, %v", vs, err)
	}
	if _, err := st.Get(t.Context(), "demo", 7); err == nil || !strings.Contains(err.Error(), "no version 7") {
		t.Errorf("Get of a missing version: %v", err)
	}
	again, err := retrain(t, nc, "demo")
	if err != nil || again.New || again.Version != 1 {
		t.Fatalf("retrain without new data: %+v, %v", again, err)
	}
}

// A state or action beyond the latest version grows the model (new rows
// as factor.Model.Grow documents, warm start otherwise).
func TestServeGrows(t *testing.T) {
	nc, _ := server(t)
	start(t, nc, Config{Name: "g", Order: 2, MaxIter: 5, Tol: 0, UseWorkers: WorkersNever})
	seq := publish(t, nc, "g", randomRows(3, 200, 6, 1).csv())
	waitSeq(t, nc, "g", seq)
	if _, err := retrain(t, nc, "g"); err != nil {
		t.Fatal(err)
	}
	v1 := fetch(t, nc, "g", 1)
	more := rows{{7, 1, 8}, {8, 0, 2}, {1, 1, 9}}
	seq = publish(t, nc, "g", more.csv())
	waitSeq(t, nc, "g", seq)
	v, err := retrain(t, nc, "g")
	if err != nil {
		t.Fatal(err)
	}
	if v.N != 10 || v.U != 2 {
		t.Fatalf("grown to n=%d u=%d, want 10 and 2", v.N, v.U)
	}
	want, err := v1.Grow(10, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := want.Smooth(WarmSmoothing); err != nil {
		t.Fatal(err)
	}
	all := append(randomRows(3, 200, 6, 1), more...)
	shards, _ := shard.Split(blocksOf(all, 2), 10, shard.DefaultTargetNNZ)
	if _, err := factor.Fit(t.Context(), want, shard.Blocks(shards), factor.FitOptions{Converger: factor.Converger{MaxIter: 5}}); err != nil {
		t.Fatal(err)
	}
	if got := fetch(t, nc, "g", 2); !got.Equal(want) {
		t.Fatal("version 2 is not the warm-started refit of the grown version 1")
	}
}

// A next state that version 1 never saw (a zero column of its K) can be
// learnt by the next refit and the next incremental commit.
func TestServeUnseenNextState(t *testing.T) {
	nc, _ := server(t)
	for _, mode := range []Mode{ModeRefit, ModeIncremental} {
		name := "unseen-" + string(mode)
		// α = 1: an incremental version 1 also has a zero column.
		start(t, nc, Config{Name: name, Order: 2, MaxIter: 10, Tol: 0, Mode: mode, Alpha: 1, UseWorkers: WorkersNever})
		// State 3 is a source only: never a next state.
		seq := publish(t, nc, name, rows{{0, 0, 1}, {1, 0, 2}, {2, 0, 0}, {3, 0, 1}, {1, 0, 1}}.csv())
		waitSeq(t, nc, name, seq)
		if _, err := retrain(t, nc, name); err != nil {
			t.Fatal(err)
		}
		if p := fetch(t, nc, name, 1).Prob(0, 0, 3); p != 0 {
			t.Fatalf("%s: P(0→3) = %v in version 1, want 0 (the case under test)", mode, p)
		}
		seq = publish(t, nc, name, rows{{0, 0, 3}, {2, 0, 3}}.csv())
		waitSeq(t, nc, name, seq)
		v, err := retrain(t, nc, name)
		if err != nil {
			t.Fatalf("%s: retrain with a transition to a state never seen as next state: %v", mode, err)
		}
		// α = 1 forgets the old data: it gets probability 0, loglik −Inf
		// (null in JSON, NaN here).
		if mode == ModeIncremental && !math.IsNaN(v.LogLik) {
			t.Errorf("incremental α = 1: loglik %v of all counts, want NaN (−Inf)", v.LogLik)
		}
		if p := fetch(t, nc, name, 2).Prob(0, 0, 3); !(p > 0.01) {
			t.Errorf("%s: P(0→3) = %v in version 2: the new transitions were not learnt", mode, p)
		}
	}
}

// With a fixed size, rows outside it are rejected, counted and reported,
// and the rest of the message is kept; an unreadable payload is rejected
// whole.
func TestServeFixedSizeRejects(t *testing.T) {
	nc, _ := server(t)
	reg := prometheus.NewRegistry()
	r := start(t, nc, Config{Name: "fx", Order: 2, MaxIter: 3, States: 5, Actions: 2, UseWorkers: WorkersNever, Registry: reg})
	publish(t, nc, "fx", rows{{0, 0, 1}, {5, 0, 1}, {1, 2, 3}, {2, 1, 4}, {1, 0, 7}}.csv())
	seq := publish(t, nc, "fx", []byte("state,action,next_state\n1,0,2\n1,x,2\n"))
	st := waitSeq(t, nc, "fx", seq)
	if st.Transitions != 2 || st.Rejected != 3 || st.RejectedMessages != 1 {
		t.Fatalf("status %+v: want 2 kept, 3 rows and 1 message rejected", st)
	}
	if !strings.Contains(st.LastRejection, `column "action"`) {
		t.Errorf("last rejection %q does not name the bad column", st.LastRejection)
	}
	m := r.svc.m
	if got := testutil.ToFloat64(m.rejected.WithLabelValues(reasonState)); got != 2 {
		t.Errorf("state rejections %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.rejected.WithLabelValues(reasonAction)); got != 1 {
		t.Errorf("action rejections %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.rejectedMsgs); got != 1 {
		t.Errorf("rejected messages %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.ingested); got != 2 {
		t.Errorf("ingested %v, want 2", got)
	}
	// emsf publish warns about such rows before it sends them.
	path := filepath.Join(t.TempDir(), "t.csv")
	if err := os.WriteFile(path, rows{{1, 0, 2}, {1, 0, 9}, {0, 3, 1}, {2, 1, 3}}.csv(), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := PublishFile(t.Context(), nc, path, PublishOptions{Prefix: "emsf", Name: "fx", AllowRejects: true}, StoreConfig{})
	if err != nil || res.Rows != 4 || res.Outside != 2 || !strings.Contains(strings.Join(res.Reasons, "\n"), "t.csv row 2: state 1 --> 9 is outside the served model's 5 states") {
		t.Fatalf("PublishFile: %+v, %v", res, err)
	}
	if st := waitSeq(t, nc, "fx", res.LastSeq); st.Transitions != 4 || st.Rejected != 5 {
		t.Fatalf("after the published file: %+v; want 4 kept and 5 rejected in all", st)
	}
	v, err := retrain(t, nc, "fx")
	if err != nil || v.N != 5 || v.U != 2 {
		t.Fatalf("retrain with a fixed size: %+v, %v", v, err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n == 0 {
		t.Errorf("registry: %d metrics, %v", n, err)
	}
}

// A restarted service continues from its checkpoint: nothing lost or
// counted twice, the latest version kept, and the next version numbered
// after it.
func TestServeRestart(t *testing.T) {
	nc, _ := server(t)
	cfg := Config{Name: "rs", Order: 2, MaxIter: 5, Tol: 0, UseWorkers: WorkersNever, CheckpointEvery: time.Hour}
	r := start(t, nc, cfg)
	var all rows
	var seq uint64
	for k := range 5 {
		rs := randomRows(uint64(10+k), 50, 8, 2)
		all = append(all, rs...)
		seq = publish(t, nc, "rs", rs.csv())
	}
	waitSeq(t, nc, "rs", seq)
	if _, err := retrain(t, nc, "rs"); err != nil {
		t.Fatal(err)
	}
	extra := randomRows(99, 70, 8, 2)
	all = append(all, extra...)
	seq = publish(t, nc, "rs", extra.csv())
	waitSeq(t, nc, "rs", seq)
	r.stop(t) // checkpoints on the way out
	// Published while no service runs: counted after the restart.
	late := randomRows(100, 30, 8, 2)
	all = append(all, late...)
	seq = publish(t, nc, "rs", late.csv())
	start(t, nc, cfg)
	st := waitSeq(t, nc, "rs", seq)
	if st.Transitions != int64(len(all)) || st.Pending != 100 || st.Latest == nil || st.Latest.Version != 1 {
		t.Fatalf("after restart: %+v", st)
	}
	v, err := retrain(t, nc, "rs")
	if err != nil || v.Version != 2 || v.Transitions != int64(len(all)) {
		t.Fatalf("retrain after restart: %+v, %v", v, err)
	}
	if _, err := New(t.Context(), nc, cfg); err == nil || !strings.Contains(err.Error(), "already served") {
		t.Errorf("a second service for the same name: %v", err)
	}
}

// Incremental mode commits the new counts with α: version 2 is version 1
// plus one incremental commit of the data that arrived after it.
func TestServeIncremental(t *testing.T) {
	nc, _ := server(t)
	start(t, nc, Config{Name: "inc", Order: 3, Seed: 2, Mode: ModeIncremental, Alpha: 0.3, UseWorkers: WorkersNever})
	first := randomRows(4, 300, 9, 2)
	seq := publish(t, nc, "inc", first.arrow(t))
	waitSeq(t, nc, "inc", seq)
	if _, err := retrain(t, nc, "inc"); err != nil {
		t.Fatal(err)
	}
	v1 := fetch(t, nc, "inc", 1)
	second := randomRows(5, 200, 9, 2)
	seq = publish(t, nc, "inc", second.arrow(t))
	waitSeq(t, nc, "inc", seq)
	v, err := retrain(t, nc, "inc")
	if err != nil || v.Mode != ModeIncremental || v.Iterations != 1 {
		t.Fatalf("incremental retrain: %+v, %v", v, err)
	}
	if err := v1.Smooth(WarmSmoothing); err != nil {
		t.Fatal(err)
	}
	inc, err := factor.NewIncremental(v1, factor.IncrementalOptions{Alpha: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocksOf(second, 2) {
		for r, i := range b.Rows {
			for p := b.Ptr[r]; p < b.Ptr[r+1]; p++ {
				if err := inc.Add(int(i), b.Action, int(b.Cols[p]), b.Vals[p]); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := inc.EndPass(); err != nil {
		t.Fatal(err)
	}
	if got := fetch(t, nc, "inc", 2); !got.Equal(inc.Model()) {
		t.Fatal("version 2 is not version 1 plus one incremental commit of the new counts")
	}
}

// --every retrains by itself once enough transitions arrived.
func TestServeEveryPolicy(t *testing.T) {
	nc, _ := server(t)
	announced := make(chan *nats.Msg, 4)
	sub, err := nc.ChanSubscribe(ModelSubject("emsf", "ev"), announced)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	start(t, nc, Config{Name: "ev", Order: 2, MaxIter: 3, Policy: Policy{Every: 100}, UseWorkers: WorkersNever})
	seq := publish(t, nc, "ev", randomRows(6, 60, 5, 1).csv())
	// The policy is checked as each message is counted, before the status
	// that shows the message counted.
	if st := waitSeq(t, nc, "ev", seq); st.Retraining || st.Latest != nil {
		t.Fatalf("a retrain after 60 of 100 transitions: %+v", st)
	}
	publish(t, nc, "ev", randomRows(7, 60, 5, 1).csv())
	select {
	case m := <-announced:
		var v Version
		if err := json.Unmarshal(m.Data, &v); err != nil || v.Reason != "every" || v.Transitions != 120 {
			t.Fatalf("announcement %s", m.Data)
		}
	case <-time.After(coordtest.Patience):
		t.Fatal("no version after 120 transitions with --every 100")
	}
}

// A refit on the cluster's workers gives bitwise the model an in-process
// refit gives.
func TestServeRefitOnWorkers(t *testing.T) {
	nc, url := server(t)
	var wg sync.WaitGroup
	for k := range 2 {
		w, err := worker.Start(t.Context(), connect(t, url), worker.Config{})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		t.Cleanup(func() { defer wg.Done(); _ = w.Stop() })
		_ = k
	}
	data := randomRows(8, 3000, 40, 2)
	for _, c := range []struct {
		name string
		use  UseWorkers
	}{{"local", WorkersNever}, {"cluster", WorkersAlways}} {
		start(t, nc, Config{Name: c.name, Order: 4, MaxIter: 6, Tol: 0, UseWorkers: c.use, ShardNNZ: 500})
		seq := publish(t, nc, c.name, data.arrow(t))
		waitSeq(t, nc, c.name, seq)
		if _, err := retrain(t, nc, c.name); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	if !fetch(t, nc, "local", 1).Equal(fetch(t, nc, "cluster", 1)) {
		t.Fatal("refit on workers differs from the in-process refit")
	}
}

// --interval retrains by itself when transitions arrived, and not when
// none did.
func TestServeIntervalPolicy(t *testing.T) {
	nc, _ := server(t)
	announced := make(chan *nats.Msg, 4)
	sub, err := nc.ChanSubscribe(ModelSubject("emsf", "iv"), announced)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	ticks := make(chan struct{}, 1)
	startWith(t, nc, Config{Name: "iv", Order: 2, MaxIter: 3, Policy: Policy{Interval: 150 * time.Millisecond}, UseWorkers: WorkersNever},
		func(s *Service) {
			s.tickHook = func() {
				select {
				case ticks <- struct{}{}:
				default:
				}
			}
		})
	// ticked waits until the service has handled a tick that came after
	// the call, and a status request shows its outcome: the hook of tick
	// k+1 may have been decided before the call and sent after it, and a
	// tick's status is taken after its hook, so three ticks.
	ticked := func() Status {
		t.Helper()
	drain:
		for {
			select {
			case <-ticks:
			default:
				break drain
			}
		}
		for range 3 {
			select {
			case <-ticks:
			case <-time.After(coordtest.Patience):
				t.Fatal("no --interval tick handled")
			}
		}
		return status(t, nc, "iv")
	}
	if st := ticked(); st.Retraining || st.Latest != nil {
		t.Fatalf("a retrain without any data: %+v", st)
	}
	publish(t, nc, "iv", randomRows(6, 30, 5, 1).csv())
	select {
	case m := <-announced:
		var v Version
		if err := json.Unmarshal(m.Data, &v); err != nil || v.Reason != "interval" || v.Version != 1 {
			t.Fatalf("announcement %s", m.Data)
		}
	case <-time.After(coordtest.Patience):
		t.Fatal("no version with --interval 150ms")
	}
	if st := ticked(); st.Retraining || st.Latest == nil || st.Latest.Version != 1 {
		t.Fatalf("a second retrain without new data: %+v", st)
	}
}

// A version whose metrics are not finite survives the JSON round trip
// (null in JSON, NaN back).
func TestVersionJSONNonFinite(t *testing.T) {
	v := Version{Name: "x", Version: 3, LogLik: math.Inf(-1), WKL: math.Inf(1), N: 4}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"loglik":null`) || !strings.Contains(string(b), `"wkl":null`) || !strings.Contains(string(b), `"n":4`) {
		t.Fatalf("JSON %s", b)
	}
	var back Version
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(back.LogLik) || !math.IsNaN(back.WKL) || back.Version != 3 || back.N != 4 {
		t.Fatalf("read back %+v", back)
	}
	v.LogLik, v.WKL = -12.5, 0.25
	b, _ = json.Marshal(&v)
	if err := json.Unmarshal(b, &back); err != nil || back.LogLik != -12.5 || back.WKL != 0.25 {
		t.Fatalf("finite metrics: %s → %+v (%v)", b, back, err)
	}
}

// Ingestion goes on while a retrain runs; a request that comes during it
// is answered when it ends with a version that has the data that arrived
// meanwhile; the pending counts are exactly those after each version.
func TestServeRetrainWhileIngesting(t *testing.T) {
	nc, _ := server(t)
	started, release := make(chan struct{}, 4), make(chan struct{})
	var once sync.Once
	hook := func() {
		started <- struct{}{}
		once.Do(func() { <-release })
	}
	startHooked(t, nc, Config{Name: "busy", Order: 2, MaxIter: 4, Tol: 0, UseWorkers: WorkersNever}, hook)
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // before the service stops (cleanups run last first)
	a, b := randomRows(21, 300, 10, 2), randomRows(22, 200, 10, 2)
	seqA := publish(t, nc, "busy", a.csv())
	waitSeq(t, nc, "busy", seqA)
	type answer struct {
		v   *Version
		err error
	}
	ask := func() chan answer {
		ch := make(chan answer, 1)
		go func() {
			v, err := askRetrain(nc, "busy")
			ch <- answer{v, err}
		}()
		return ch
	}
	first := ask()
	<-started // version 1 is being fitted on the counts of a
	seqB := publish(t, nc, "busy", b.csv())
	if st := waitSeq(t, nc, "busy", seqB); !st.Retraining || st.Transitions != 500 || st.Pending != 500 {
		t.Fatalf("during the fit: %+v; want retraining, 500 transitions, all 500 pending (no version yet)", st)
	}
	second := ask()
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		if w := status(t, nc, "busy").Waiting; w != 1 {
			return fmt.Errorf("the second request is not queued: %d waiting", w)
		}
		return nil
	})
	free()
	r1, r2 := <-first, <-second
	if r1.err != nil || r2.err != nil {
		t.Fatalf("answers: %v, %v", r1.err, r2.err)
	}
	if r1.v.Version != 1 || r1.v.StreamSeq != seqA || r1.v.Transitions != 300 {
		t.Errorf("first answer %+v: want version 1 of the 300 transitions up to sequence %d", r1.v, seqA)
	}
	if r2.v.Version != 2 || r2.v.StreamSeq != seqB || r2.v.Transitions != 500 {
		t.Errorf("second answer %+v: want version 2 of all 500 transitions up to sequence %d", r2.v, seqB)
	}
	if st := status(t, nc, "busy"); st.Pending != 0 || st.Retraining || st.Latest == nil || st.Latest.Version != 2 {
		t.Errorf("after both: %+v", st)
	}
}

// A server without JetStream: one clear error from New, publishing and
// the client side.
func TestNoJetStream(t *testing.T) {
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(coordtest.Patience) {
		t.Fatal("server not ready")
	}
	nc := connect(t, srv.ClientURL())
	js, _ := jetstream.New(nc)
	path := filepath.Join(t.TempDir(), "t.csv")
	if err := os.WriteFile(path, rows{{0, 0, 1}}.csv(), 0o644); err != nil {
		t.Fatal(err)
	}
	_, pubErr := PublishFile(t.Context(), nc, path, PublishOptions{Prefix: "emsf", Name: "x"}, StoreConfig{})
	_, roErr := OpenStoresReadOnly(t.Context(), js, DefaultStateBucket, DefaultModelBucket)
	_, newErr := New(t.Context(), nc, Config{Name: "x"})
	for _, err := range []error{newErr, pubErr, roErr} {
		if err == nil || !strings.Contains(err.Error(), "has no JetStream") {
			t.Errorf("without JetStream: %v", err)
		}
	}
}

// TestTolNever: a refit with Tol TolNever runs its MaxIter passes even
// where SQUAREM reaches an exact fixed point of the log-likelihood (which
// the smallest positive tolerance stops at: about 1000 passes on these
// counts); any other negative Tol is refused.
func TestTolNever(t *testing.T) {
	nc, _ := server(t)
	for _, c := range []struct {
		tol    float64
		status string
	}{{TolNever, "iteration limit"}, {math.SmallestNonzeroFloat64, "converged"}} {
		name := fmt.Sprintf("never%d", len(c.status))
		start(t, nc, Config{Name: name, Order: 3, Seed: 1, MaxIter: 2500, Tol: c.tol, Accel: factor.AccelSquarem, UseWorkers: WorkersNever, Workers: 1})
		waitSeq(t, nc, name, publish(t, nc, name, randomRows(11, 2000, 30, 2).csv()))
		v, err := retrain(t, nc, name)
		if err != nil {
			t.Fatal(err)
		}
		if v.Status != c.status || (c.tol == TolNever) != (v.Iterations == 2500) {
			t.Errorf("Tol %v: %d iterations, status %q; want %q", c.tol, v.Iterations, v.Status, c.status)
		}
	}
	if _, err := New(t.Context(), nc, Config{Name: "neg", Tol: -0.5}); err == nil || !strings.Contains(err.Error(), "Tol") {
		t.Errorf("Tol -0.5: %v", err)
	}
}
