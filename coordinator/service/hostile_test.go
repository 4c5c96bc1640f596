package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// publishFormat publishes payload with the Emsf-Format header (none when
// format is "") and returns its stream sequence.
func publishFormat(t *testing.T, nc *nats.Conn, name, format string, payload []byte) uint64 {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureStream(t.Context(), js, StoreConfig{Prefix: "emsf", Name: name}); err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(TransitionsSubject("emsf", name))
	msg.Data = payload
	if format != "" {
		msg.Header.Set(HeaderFormat, format)
	}
	ack, err := js.PublishMsg(t.Context(), msg)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// Every hostile payload of issue 9 is rejected (the row, or the message
// that cannot be read), counted by reason, and leaves a service whose
// status, retrain and restart work, with exactly the accepted rows.
func TestServeHostilePayloads(t *testing.T) {
	nc, _ := server(t)
	cfg := Config{Name: "hostile", Order: 2, MaxIter: 3, Tol: 0, UseWorkers: WorkersNever, CheckpointEvery: 50e6,
		MaxModelBytes: 1 << 20} // m = 2: 32768 states or actions at most
	r := start(t, nc, cfg)
	good := randomRows(5, 40, 6, 2)
	publish(t, nc, "hostile", good.csv())
	for _, p := range []struct{ format, payload string }{
		// Two valid rows whose sum is +Inf: both refused (each alone is
		// past 2^53).
		{"csv", "state,action,next_state,count\n0,0,1,1e308\n0,0,1,1e308\n"},
		// A count that fits, then one that would pass 2^53 in total.
		{"csv", "state,action,next_state,count\n1,0,1,9007199254740000\n1,0,2,1000\n"},
		// Huge indices: an OOM of 51.5 GB before issue 9.
		{"csv", "state,action,next_state\n2147483646,0,0\n0,0,2147483646\n0,2147483646,0\n"},
		// Within --max-states and --max-actions, but a model of
		// 30001 states and 6 actions exceeds --max-model-bytes.
		{"csv", "state,action,next_state\n30000,5,0\n"},
		// Unreadable: the whole message.
		{"csv", "state,action,next_state,count\n0,0,1,NaN\n"},
		{"csv", "state,action,next_state,count\n0,0,1,+Inf\n"},
		{"csv", "state,action,next_state,count\n0,0,1,-3\n"},
		{"csv", "state,action,next_state\n0,0\n"},
		{"arrows", "\xff\xff\xff\xffnot arrow"},
		{"", "\x00\x01\x02garbage"},
	} {
		publishFormat(t, nc, "hostile", p.format, []byte(p.payload))
	}
	seq := publish(t, nc, "hostile", good.csv())
	st := waitSeq(t, nc, "hostile", seq)
	want := int64(2*len(good) + 1) // the 9.007e15 row is kept
	if st.Transitions != want || st.Rejected != 7 || st.RejectedMessages != 6 {
		t.Fatalf("status %+v: want %d kept, 7 rows and 6 messages rejected", st, want)
	}
	if math.IsInf(st.Count, 0) || st.Count > shard.MaxCount || st.MaxStates != 32768 || st.MaxActions != 32768 || st.MaxModelBytes != 1<<20 {
		t.Fatalf("status: count %v, limits %d states %d actions %d bytes", st.Count, st.MaxStates, st.MaxActions, st.MaxModelBytes)
	}
	m := r.svc.m
	for reason, n := range map[string]float64{reasonCount: 3, reasonState: 2, reasonAction: 1, reasonSize: 1} {
		if got := testutil.ToFloat64(m.rejected.WithLabelValues(reason)); got != n {
			t.Errorf("rejected %s: %v, want %v", reason, got, n)
		}
	}
	v, err := retrain(t, nc, "hostile")
	if err != nil || v.Transitions != want || v.N != 6 || math.IsNaN(v.LogLik) {
		t.Fatalf("retrain after hostile rows: %+v, %v", v, err)
	}
	r.stop(t)
	start(t, nc, cfg)
	if st := status(t, nc, "hostile"); st.Transitions != want || st.StreamSeq != seq || st.Latest == nil || st.Latest.Version != 1 {
		t.Fatalf("after a restart: %+v", st)
	}
	more := randomRows(6, 10, 6, 2)
	publish(t, nc, "hostile", more.csv())
	if v, err := retrain(t, nc, "hostile"); err != nil || v.Version != 2 || v.Transitions != want+10 {
		t.Fatalf("retrain after the restart: %+v, %v", v, err)
	}
}

// A checkpoint an older emsf serve could write (a count of +Inf, a state
// of 2^31−2) does not stop a restart: the counts are rebuilt from the
// stream under the limits, and status and retrain work.
func TestServeRestoreUnusableCheckpoint(t *testing.T) {
	for _, c := range []struct {
		name  string
		entry shard.TableEntry
	}{
		{"inf", shard.TableEntry{State: 0, Action: 0, Next: 1, Count: math.Inf(1), Pending: math.Inf(1)}},
		{"huge", shard.TableEntry{State: 2147483646, Action: 0, Next: 0, Count: 1, Pending: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			nc, _ := server(t)
			name := "old-" + c.name
			good := randomRows(7, 30, 5, 2)
			publish(t, nc, name, good.csv())
			seq := publish(t, nc, name, []byte("state,action,next_state\n2147483646,0,0\n"))
			data, err := arrowio.EncodeCounts(arrowio.CountsMeta{Name: name, Seq: seq, Added: 31, Pending: 31}, []shard.TableEntry{c.entry})
			if err != nil {
				t.Fatal(err)
			}
			js, _ := jetstream.New(nc)
			stores, err := OpenStores(t.Context(), js, StoreConfig{Prefix: "emsf", Name: name, StateBucket: DefaultStateBucket, ModelBucket: DefaultModelBucket})
			if err != nil {
				t.Fatal(err)
			}
			if err := stores.put(t.Context(), nc.MaxPayload(), StateObject(name), data, nil); err != nil {
				t.Fatal(err)
			}
			cfg := Config{Name: name, Order: 2, MaxIter: 3, UseWorkers: WorkersNever}
			r := start(t, nc, cfg)
			st := waitSeq(t, nc, name, seq)
			if st.Transitions != int64(len(good)) || st.Rejected != 1 {
				t.Fatalf("rebuilt: %+v; want %d rows and 1 rejected", st, len(good))
			}
			if v, err := retrain(t, nc, name); err != nil || v.Transitions != int64(len(good)) {
				t.Fatalf("retrain: %+v, %v", v, err)
			}
			r.stop(t)
			start(t, nc, cfg)
			if st := status(t, nc, name); st.Transitions != int64(len(good)) || st.Latest == nil || st.Latest.Version != 1 {
				t.Fatalf("second restart: %+v", st)
			}
		})
	}
}

// Limits that cannot hold a model, or a fixed size above them: New fails
// with a clear error.
func TestServeLimitsConfig(t *testing.T) {
	nc, _ := server(t)
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Name: "l", Order: 4, MaxModelBytes: 10}, "does not hold a model"},
		{Config{Name: "l", Order: 2, MaxModelBytes: 1 << 20, States: 40000}, "above the limit of 32768 states"},
		{Config{Name: "l", Order: 2, MaxActions: 3, Actions: 4}, "above the limit of 3 actions"},
		{Config{Name: "l", Order: 2, MaxModelBytes: 1 << 20, States: 30000, Actions: 30}, "above max model bytes"},
	} {
		if _, err := New(t.Context(), nc, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	if got := MaxDim(DefaultMaxModelBytes, 10, 0); got != 26843545 {
		t.Errorf("default max states at m = 10: %d", got)
	}
	if got := factor.ModelBytes(math.MaxInt32, 1<<30, 1<<30, 0); got != math.MaxInt64 {
		t.Errorf("ModelBytes does not saturate: %d", got)
	}
}

// Read your writes: a retrain asked right after a publish acknowledged by
// the stream includes all of it, however far ingestion is behind; with a
// sequence ingestion does not reach in time, the reply says so.
func TestServeRetrainReadsWrites(t *testing.T) {
	nc, _ := server(t)
	r := start(t, nc, Config{Name: "ryw", Order: 2, MaxIter: 2, UseWorkers: WorkersNever})
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	b := &arrowio.TransitionBatch{}
	rng := rand.New(rand.NewPCG(11, 12))
	for range n {
		b.State = append(b.State, int32(rng.IntN(50)))
		b.Action = append(b.Action, int32(rng.IntN(3)))
		b.Next = append(b.Next, int32(rng.IntN(50)))
		b.Count = append(b.Count, 1)
	}
	path := filepath.Join(t.TempDir(), "t.arrows")
	// PublishFile reads a file: write all rows as one Arrow stream.
	all, err := arrowio.EncodeTransitionsPayload(b, 0, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, all, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := PublishFile(t.Context(), nc, path, PublishOptions{Prefix: "emsf", Name: "ryw", MaxRows: 20_000}, StoreConfig{})
	if err != nil || res.Rows != int64(n) || !res.Served {
		t.Fatalf("PublishFile: %+v, %v", res, err)
	}
	v, err := retrain(t, nc, "ryw")
	if err != nil || v.Transitions != int64(n) || v.StreamSeq != res.LastSeq {
		t.Fatalf("retrain at once after publishing %d: %+v, %v", n, v, err)
	}
	t.Logf("%d transitions in %d messages, all in version %d", n, res.Messages, v.Version)
	// A sequence the stream does not reach within the wait: 504.
	m, err := nc.Request(RetrainSubject("emsf", "ryw"), []byte(fmt.Sprintf(`{"after_seq": %d, "wait": "300ms"}`, res.LastSeq+5)), 30e9)
	if err != nil || m.Header.Get("Nats-Service-Error-Code") != "504" || !strings.Contains(m.Header.Get("Nats-Service-Error"), fmt.Sprintf("of the %d asked for", res.LastSeq+5)) {
		t.Fatalf("retrain after a sequence not reached: %v %v", m.Header, err)
	}
	for _, body := range []string{`{"after_seq": -1}`, `{"wait": "soon"}`, `[`} {
		m, err := nc.Request(RetrainSubject("emsf", "ryw"), []byte(body), 30e9)
		if err != nil || m.Header.Get("Nats-Service-Error-Code") != "400" {
			t.Errorf("retrain request %s: %v %v", body, m.Header, err)
		}
	}
	if st := status(t, nc, "ryw"); st.CatchingUp != 0 || st.Transitions != int64(n) {
		t.Fatalf("status after: %+v", st)
	}
	_ = r
}

// 50 retrain requests sent while a publisher sends: every reply is a
// version or the latest, versions only grow, and the last retrain counts
// every transition published.
func TestServeConcurrentRetrainsDuringPublish(t *testing.T) {
	nc, url := server(t)
	start(t, nc, Config{Name: "conc", Order: 2, MaxIter: 2, UseWorkers: WorkersNever})
	pub := connect(t, url)
	const msgs, per = 30, 100
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		js, _ := jetstream.New(pub)
		for k := range msgs {
			if _, err := js.Publish(context.Background(), TransitionsSubject("emsf", "conc"), randomRows(uint64(k), per, 9, 2).csv()); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	type reply struct {
		v   *Version
		err error
	}
	replies := make(chan reply, 50)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := askRetrain(nc, "conc")
			replies <- reply{v, err}
		}()
	}
	wg.Wait()
	close(replies)
	seen := map[int]int64{}
	for r := range replies {
		var se *serviceError
		if errors.As(r.err, &se) && strings.Contains(se.msg, "no transitions yet") {
			continue // asked before the first message was stored
		}
		if r.err != nil {
			t.Fatalf("retrain: %v", r.err)
		}
		if old, ok := seen[r.v.Version]; ok && old != r.v.Transitions {
			t.Fatalf("version %d replied with %d and %d transitions", r.v.Version, old, r.v.Transitions)
		}
		seen[r.v.Version] = r.v.Transitions
	}
	prev := int64(-1)
	for v := 1; v <= len(seen)+1; v++ {
		if n, ok := seen[v]; ok {
			if n <= prev {
				t.Fatalf("version %d has %d transitions, not more than the one before (%d)", v, n, prev)
			}
			prev = n
		}
	}
	v, err := retrain(t, nc, "conc")
	if err != nil || v.Transitions != msgs*per {
		t.Fatalf("last retrain: %+v, %v; want %d transitions", v, err, msgs*per)
	}
}

// Random bytes as payloads (with and without a format header) between
// valid messages: each is rejected whole exactly when the reader rejects
// it, and the service counts exactly the valid rows.
func TestServeRandomPayloads(t *testing.T) {
	nc, _ := server(t)
	start(t, nc, Config{Name: "rnd", Order: 2, MaxIter: 2, UseWorkers: WorkersNever})
	rng := rand.New(rand.NewPCG(21, 22))
	var wantRows, wantBad int64
	var seq uint64
	for k := range 60 {
		format := []string{"", "csv", "arrow", "arrows"}[k%4]
		p := make([]byte, rng.IntN(600))
		for x := range p {
			p[x] = byte(rng.IntN(256))
		}
		if k%5 == 0 {
			p = append([]byte("state,action,next_state\n"), p...) // a CSV header, then garbage
		}
		rows, err := countRows(p, format)
		if err != nil {
			wantBad++
		} else {
			wantRows += rows
		}
		publishFormat(t, nc, "rnd", format, p)
		good := randomRows(uint64(k), 5, 4, 2)
		wantRows += int64(len(good))
		seq = publishFormat(t, nc, "rnd", "csv", good.csv())
	}
	st := waitSeq(t, nc, "rnd", seq)
	if st.Transitions+st.Rejected != wantRows || st.RejectedMessages != wantBad {
		t.Fatalf("status %+v: want %d rows (kept + rejected), %d messages rejected", st, wantRows, wantBad)
	}
	if v, err := retrain(t, nc, "rnd"); err != nil || v.Transitions != st.Transitions {
		t.Fatalf("retrain: %+v, %v", v, err)
	}
}

// countRows reads a payload as the service does and returns its rows.
func countRows(p []byte, format string) (int64, error) {
	var n int64
	err := arrowio.ScanTransitionsReader(context.Background(), bytes.NewReader(p), "p", format, arrowio.ReadOptions{}, func(b *arrowio.TransitionBatch) error {
		n += int64(b.Len())
		return nil
	})
	return n, err
}
