package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/coordinator/query"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// askQuery sends a query and returns the answer, or the micro error as
// "CODE message".
func askQuery(nc *nats.Conn, name, endpoint, body string) (string, error) {
	m, err := nc.Request(QuerySubject("emsf", name, endpoint), []byte(body), coordtest.Patience)
	if err != nil {
		return "", err
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return code + " " + m.Header.Get("Nats-Service-Error"), nil
	}
	return string(m.Data), nil
}

// TestServeQueries: the served model answers the questions of package
// query on P.NAME.q.<endpoint>, from the latest version or the one
// before it, exactly as query.Engine answers them on the version's model
// file; no version yet is a 503; hostile questions each get their error
// and the service keeps answering, counting and retraining.
func TestServeQueries(t *testing.T) {
	nc, _ := server(t)
	start(t, nc, Config{Name: "ask", Order: 3, Seed: 5, MaxIter: 10, Tol: 0, UseWorkers: WorkersNever})
	if got, err := askQuery(nc, "ask", "topk", `{"state":1,"action":0}`); err != nil || !strings.HasPrefix(got, "503 model ask has no version yet") {
		t.Fatalf("before the first version: %q, %v", got, err)
	}
	seq := publish(t, nc, "ask", randomRows(1, 600, 20, 2).csv())
	waitSeq(t, nc, "ask", seq)
	v1, err := retrain(t, nc, "ask")
	if err != nil {
		t.Fatal(err)
	}
	// The engine of a version is built off the request path: wait for it.
	waitVersion := func(v int) {
		coordtest.CheckFor(t, coordtest.Patience, func() error {
			got, err := askQuery(nc, "ask", "member", `{"state":0,"action":0}`)
			if err != nil || !strings.Contains(got, fmt.Sprintf(`"version":%d,`, v)) {
				return fmt.Errorf("member answers %q (%v), want version %d", got, err, v)
			}
			return nil
		})
	}
	waitVersion(v1.Version)
	local, err := query.New(&arrowio.ModelFile{Model: fetch(t, nc, "ask", v1.Version)}, v1.Version, query.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range [][2]string{
		{"topk", `{"state":3,"action":1,"k":5}`},
		{"next", `{"state":"3","action":1,"min_p":0.01}`},
		{"prob", `{"pairs":[{"state":3,"action":1,"next":4},{"state":0,"action":0,"next":19}]}`},
		{"member", `{"state":7,"action":0}`},
		{"reduced", `{"action":1}`},
		{"stationary", `{"policy":"uniform","top":3}`},
	} {
		got, err := askQuery(nc, "ask", q[0], q[1])
		want, werr := local.Do(q[0], []byte(q[1]))
		if err != nil || werr != nil || got != string(want) {
			t.Errorf("%s %s: served %q (%v), want %q (%v)", q[0], q[1], got, err, want, werr)
		}
	}
	for _, c := range [][3]string{
		{"topk", `{"state":3,`, "400 malformed request"},
		{"topk", `{"state":99,"action":0}`, "404 state 99: no such index"},
		{"topk", `{"state":3,"action":0,"k":100000}`, "400 k 100000: want 1 to 1000"},
		{"plan", `{"reward":{"values":[1]}}`, "409 PISF plans on a model with one K shared"},
		{"vocab", `{}`, "409 the model has no ids"},
		{"topk", `{"state":3,"action":0,"version":42}`, "409 version 42 is not served"},
	} {
		if got, err := askQuery(nc, "ask", c[0], c[1]); err != nil || !strings.HasPrefix(got, c[2]) {
			t.Errorf("%s %s: %q (%v), want %q", c[0], c[1], got, err, c[2])
		}
	}

	// A second version: the first is still served on request.
	seq = publish(t, nc, "ask", randomRows(2, 300, 20, 2).csv())
	waitSeq(t, nc, "ask", seq)
	v2, err := retrain(t, nc, "ask")
	if err != nil {
		t.Fatal(err)
	}
	waitVersion(v2.Version)
	if got, err := askQuery(nc, "ask", "topk", fmt.Sprintf(`{"state":3,"action":1,"k":5,"version":%d}`, v1.Version)); err != nil ||
		!strings.Contains(got, fmt.Sprintf(`"version":%d,`, v1.Version)) {
		t.Errorf("pinned to version %d: %q (%v)", v1.Version, got, err)
	}

	// Many clients at once, among them hostile ones: every request gets
	// an answer or an error reply, none is lost.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for c := range 16 {
		wg.Go(func() {
			cn, err := nats.Connect(nc.ConnectedUrl())
			if err != nil {
				errs <- err
				return
			}
			defer cn.Close()
			for k := range 30 {
				body := fmt.Sprintf(`{"state":%d,"action":%d,"k":3}`, (c+k)%20, k%2)
				if k%5 == 0 {
					body = `{"garbage`
				}
				got, err := askQuery(cn, "ask", "topk", body)
				if err != nil || !(strings.HasPrefix(got, "{") || strings.HasPrefix(got, "400 ") || strings.HasPrefix(got, "503 busy")) {
					errs <- fmt.Errorf("client %d request %d: %q (%v)", c, k, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The service still counts and retrains.
	seq = publish(t, nc, "ask", randomRows(3, 50, 20, 2).csv())
	waitSeq(t, nc, "ask", seq)
	if _, err := retrain(t, nc, "ask"); err != nil {
		t.Fatal(err)
	}
}

// TestServeStringIDs: a service with no counts takes up the ids of its
// first message of ids (states and actions), numbers new ids in stream
// order, answers queries and stores versions in those ids; a message of
// integer indices is then rejected whole, saying why. The vocabulary is
// in the checkpoint: after a restart (with messages published while no
// service ran) and after a rebuild from the stream (checkpoint deleted)
// every id keeps its index and new ones follow. A service that counted
// integer indices refuses a message of ids, naming its row, column and
// value.
func TestServeStringIDs(t *testing.T) {
	nc, _ := server(t)
	cfg := Config{Name: "words", Order: 2, Seed: 5, MaxIter: 5, UseWorkers: WorkersNever, CheckpointEvery: time.Hour, StreamPurge: PurgeNever}
	r := start(t, nc, cfg)
	publish(t, nc, "words", []byte("state,action,next_state\nuser1,left,user2\nuser2,right,/cart\n"))
	seq := publish(t, nc, "words", []byte("state,action,next_state\n/cart,left,user1\nuser1,left,/cart\nuser2,left,user1\n"))
	st := waitSeq(t, nc, "words", seq)
	if st.IDs != "states,actions" || st.States != 3 || st.Actions != 2 || st.Transitions != 5 || st.RejectedMessages != 0 {
		t.Fatalf("status %+v: want ids for 3 states and 2 actions", st)
	}
	if _, err := retrain(t, nc, "words"); err != nil {
		t.Fatal(err)
	}
	f := fetchFile(t, nc, "words", 1)
	if f.States == nil || f.Actions == nil || strings.Join(f.States.Strings(), " ") != "user1 user2 /cart" || strings.Join(f.Actions.Strings(), " ") != "left right" {
		t.Fatalf("version 1's ids: %v %v, want user1 user2 /cart (stream order) and left right", f.States, f.Actions)
	}
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		got, err := askQuery(nc, "words", "topk", `{"state":"user1","action":"left","k":2}`)
		if err != nil || !strings.Contains(got, `"state": "`) && !strings.Contains(got, `"state":"`) {
			return fmt.Errorf("topk in ids: %q (%v)", got, err)
		}
		return nil
	})
	if got, err := askQuery(nc, "words", "next", `{"state":"nobody","action":"left"}`); err != nil || !strings.HasPrefix(got, "404") && !strings.HasPrefix(got, "400") {
		t.Fatalf("an unknown id: %q (%v)", got, err)
	}
	// Arrow int32 columns are indices, not ids: rejected whole. (In CSV
	// a number is read as an id, "3", as emsf fit --ids string reads it.)
	seq = publishFormat(t, nc, "words", "arrows", rows{{0, 0, 1}}.arrow(t))
	st = waitSeq(t, nc, "words", seq)
	if st.RejectedMessages != 1 || st.Transitions != 5 || st.LastRejection == "" {
		t.Fatalf("a message of indices to a service of ids: %+v", st)
	}
	t.Logf("a message of indices to a service of ids: %s", st.LastRejection)
	r.stop(t)
	// Published while no service runs: replayed on top of the checkpoint.
	seq = publish(t, nc, "words", []byte("state,action,next_state\nuser3,stay,user1\nuser1,left,user3\n"))
	r = start(t, nc, cfg)
	st = waitSeq(t, nc, "words", seq)
	if st.IDs != "states,actions" || st.States != 4 || st.Actions != 3 || st.Transitions != 7 {
		t.Fatalf("after a restart: %+v", st)
	}
	if v, err := retrain(t, nc, "words"); err != nil || v.Version != 2 {
		t.Fatalf("retrain after restart: %+v, %v", v, err)
	}
	want := "user1 user2 /cart user3"
	if f := fetchFile(t, nc, "words", 2); strings.Join(f.States.Strings(), " ") != want || strings.Join(f.Actions.Strings(), " ") != "left right stay" {
		t.Fatalf("version 2's ids: %v %v", f.States.Strings(), f.Actions.Strings())
	}
	// Rebuilt from the stream: the same numbering.
	r.stop(t)
	js, _ := jetstream.New(nc)
	obs, err := js.ObjectStore(t.Context(), DefaultModelBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := obs.Delete(t.Context(), StateObject("words")); err != nil {
		t.Fatal(err)
	}
	start(t, nc, cfg)
	st = waitSeq(t, nc, "words", seq)
	if st.States != 4 || st.Transitions != 7 {
		t.Fatalf("after a rebuild from the stream: %+v", st)
	}
	v, err := retrain(t, nc, "words")
	if err != nil {
		t.Fatalf("retrain after the rebuild: %v", err)
	}
	if f := fetchFile(t, nc, "words", v.Version); strings.Join(f.States.Strings(), " ") != want {
		t.Fatalf("version 3's ids after the rebuild: %v", f.States.Strings())
	}

	// A service that counted indices refuses ids, naming the value.
	start(t, nc, Config{Name: "ints", Order: 2, Seed: 5, MaxIter: 5, UseWorkers: WorkersNever})
	publish(t, nc, "ints", rows{{0, 0, 1}}.csv())
	seq = publish(t, nc, "ints", []byte("state,action,next_state\nuser1,0,0\n"))
	st = waitSeq(t, nc, "ints", seq)
	if st.IDs != "" || st.RejectedMessages != 1 || !strings.Contains(st.LastRejection, `"user1"`) || !strings.Contains(st.LastRejection, "counts integer state indices") {
		t.Fatalf("ids to a service of indices: %+v", st)
	}
}

// TestServeQueryOverPayload: an answer larger than the connection's max
// payload is refused with a 413 that says how to ask for less, and the
// next question is answered.
func TestServeQueryOverPayload(t *testing.T) {
	srv, err := natsexec.StartEmbedded(natsexec.EmbeddedConfig{StoreDir: t.TempDir(), NoSync: true, MaxPayload: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc := connect(t, srv.ClientURL())
	start(t, nc, Config{Name: "big", Order: 2, Seed: 5, MaxIter: 3, Tol: 0, UseWorkers: WorkersNever})
	var seq uint64
	for part := range 4 {
		seq = publish(t, nc, "big", randomRows(uint64(10+part), 1500, 2000, 1).csv())
	}
	waitSeq(t, nc, "big", seq)
	if _, err := retrain(t, nc, "big"); err != nil {
		t.Fatal(err)
	}
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		got, err := askQuery(nc, "big", "member", `{"state":0}`)
		if err != nil || !strings.HasPrefix(got, "{") {
			return fmt.Errorf("member: %q (%v)", got, err)
		}
		return nil
	})
	if got, err := askQuery(nc, "big", "next", `{"state":0,"max_states":1000}`); err != nil || !strings.HasPrefix(got, "413 the answer has") ||
		!strings.Contains(got, "ask for less") {
		t.Fatalf("an answer over the max payload: %q (%v)", got, err)
	}
	if got, err := askQuery(nc, "big", "next", `{"state":0,"max_states":10}`); err != nil || !strings.HasPrefix(got, "{") {
		t.Fatalf("after the 413: %q (%v)", got, err)
	}
}

// TestPublishIDs: publish reads a file of ids and sends them as they are
// (utf8 columns) to a stream no service reads yet; to a running emsf
// serve, which counts integer indices only, it sends nothing and says
// why.
func TestPublishIDs(t *testing.T) {
	nc, _ := server(t)
	path := filepath.Join(t.TempDir(), "ids.csv")
	if err := os.WriteFile(path, []byte("state,action,next_state\nuser1,left,/cart\n/cart,right,user1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := PublishOptions{Prefix: "emsf", Name: "later", AutoIDs: true, Create: true}
	res, err := PublishFile(t.Context(), nc, path, opts, StoreConfig{})
	if err != nil || res.Rows != 2 || res.Messages != 1 {
		t.Fatalf("publish ids: %+v, %v", res, err)
	}
	js, _ := jetstream.New(nc)
	stream, err := js.Stream(t.Context(), StreamName("emsf", "later"))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetMsg(t.Context(), res.LastSeq)
	if err != nil {
		t.Fatal(err)
	}
	ro := arrowio.ReadOptions{StateIDs: &shard.Vocab{}, ActionIDs: &shard.Vocab{}}
	var got []string
	if err := arrowio.ScanTransitionsReader(t.Context(), bytes.NewReader(msg.Data), "msg", arrowio.FormatArrowStream, ro, func(b *arrowio.TransitionBatch) error {
		for k := range b.State {
			got = append(got, ro.StateIDs.String(int(b.State[k]))+" "+ro.ActionIDs.String(int(b.Action[k]))+" "+ro.StateIDs.String(int(b.Next[k])))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "|") != "user1 left /cart|/cart right user1" {
		t.Fatalf("the stream holds %q", got)
	}

	// A running service with no counts takes them up; one that counted
	// integer indices is sent nothing, and says why.
	start(t, nc, Config{Name: "now", Order: 2, Seed: 5, MaxIter: 5, UseWorkers: WorkersNever})
	opts.Name = "now"
	if res, err = PublishFile(t.Context(), nc, path, opts, StoreConfig{}); err != nil || res.Messages != 1 {
		t.Fatalf("publish ids to a running service with no counts: %+v, %v", res, err)
	}
	start(t, nc, Config{Name: "ints", Order: 2, Seed: 5, MaxIter: 5, UseWorkers: WorkersNever})
	waitSeq(t, nc, "ints", publish(t, nc, "ints", rows{{0, 0, 1}}.csv()))
	opts.Name = "ints"
	res, err = PublishFile(t.Context(), nc, path, opts, StoreConfig{})
	if err == nil || !strings.Contains(err.Error(), "counts integer state indices") || res.Messages != 0 {
		t.Fatalf("publish ids to a running service of indices: %+v, %v", res, err)
	}
}

// TestServeQueriesOfFile: ServeQueries answers a model file's questions
// over NATS as query.Engine answers them in process, as model version 1,
// its micro service says the version it was given, and once ctx is done
// wait returns and the endpoints are gone.
func TestServeQueriesOfFile(t *testing.T) {
	nc, url := server(t)
	md, err := factor.TrueModel(500, 4, 2, factor.RowsLocal, 0, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	mf := &arrowio.ModelFile{Model: md}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	wait, err := ServeQueries(ctx, connect(t, url), "emsf", "file", "1.2.3", mf, nil)
	if err != nil {
		t.Fatal(err)
	}
	local, err := query.New(mf, 1, query.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range [][2]string{
		{"topk", `{"state":3,"action":1,"k":7}`},
		{"topk", `{"state":499,"action":0,"k":600}`},
		{"prob", `{"pairs":[{"state":3,"action":1,"next":4}]}`},
		{"member", `{"state":7,"action":0}`},
		{"topk", `{"state":500,"action":0}`},
	} {
		got, err := askQuery(nc, "file", q[0], q[1])
		want, werr := local.Do(q[0], []byte(q[1]))
		if werr != nil {
			var qe *query.Error
			if !errors.As(werr, &qe) {
				t.Fatal(werr)
			}
			want = []byte(qe.Code + " " + qe.Msg)
		}
		if err != nil || got != string(want) {
			t.Errorf("%s %s: served %q (%v), want %q", q[0], q[1], got, err, want)
		}
	}
	info, err := micro.ControlSubject(micro.InfoVerb, "emsf-query", "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := nc.Request(info, nil, coordtest.Patience)
	if err != nil || !strings.Contains(string(m.Data), `"version":"1.2.3"`) {
		t.Fatalf("service info %s (%v): want version 1.2.3", m.Data, err)
	}
	cancel()
	wait()
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		// A short timeout per try: a question that finds a subscription
		// on its way out times out, and the next try is asked.
		if _, err := nc.Request(QuerySubject("emsf", "file", "topk"), []byte(`{"state":1,"action":0}`), 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("after stop: %v, want no responders", err)
		}
		return nil
	})
}

// TestServeQueriesOneThread: a service started on one thread still
// admits 16 clients that each wait for their answer before they ask
// again (its queue holds more than 16 questions), so none of them is
// told it is busy.
func TestServeQueriesOneThread(t *testing.T) {
	_, url := server(t)
	md, err := factor.TrueModel(300, 4, 1, factor.RowsLocal, 0, rand.New(rand.NewPCG(3, 4)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	procs := runtime.GOMAXPROCS(1) // the pool's size is decided at start
	wait, err := ServeQueries(ctx, connect(t, url), "emsf", "one", "1.0.0", &arrowio.ModelFile{Model: md}, nil)
	runtime.GOMAXPROCS(procs)
	if err != nil {
		t.Fatal(err)
	}
	const clients = 16
	if q := queryQueue * queryWorkers(1); q < clients {
		t.Fatalf("the queue of a one-thread service holds %d questions, fewer than %d clients", q, clients)
	}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			cn, err := nats.Connect(url)
			if err != nil {
				errs <- err
				return
			}
			defer cn.Close()
			for k := range 40 {
				body := fmt.Sprintf(`{"state":%d,"action":0,"k":5}`, (7*c+k)%300)
				if got, err := askQuery(cn, "one", "topk", body); err != nil || !strings.HasPrefix(got, "{") {
					errs <- fmt.Errorf("client %d question %d: %q (%v)", c, k, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	cancel()
	wait()
}
