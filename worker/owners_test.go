package worker

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// patience bounds a wait that ends within milliseconds when the code is
// right (coordtest.Patience; not imported: worker's tests do not reach
// into the coordinator's).
const patience = 2 * time.Minute

// testServer starts a NATS server with JetStream, shut down at the
// test's end.
func testServer(t *testing.T) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, JetStream: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	return srv
}

func connect(t *testing.T, srv *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// testWorker starts a worker on srv, stopped at the test's end.
func testWorker(t *testing.T, srv *server.Server) *Worker {
	t.Helper()
	w, err := Start(context.Background(), connect(t, srv), Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	return w
}

// slicePeer answers blob requests for slices "s<k>" on the slice subject
// of worker id (a raw partial of one row, row k, each). It holds its
// answer to slice hold until wait slices were asked for (so that later
// slices arrive first), never answers slice never, answers slice broken
// with an error, and records the order of the requests.
type slicePeer struct {
	id     string
	mu     sync.Mutex
	asked  []int
	held   *nats.Msg
	hold   int
	wait   int
	never  int
	broken int
	onAsk  func(k int)
}

func sliceOf(m *nats.Msg) int {
	k, _ := strconv.Atoi(strings.TrimPrefix(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:], "s"))
	return k
}

func (p *slicePeer) serve(t *testing.T, nc *nats.Conn) {
	sub, err := nc.Subscribe(wire.SliceSubject(wire.DefaultPrefix, p.id)+".*", func(m *nats.Msg) {
		if string(m.Data) == "drop" {
			return
		}
		k := sliceOf(m)
		var answer []*nats.Msg
		p.mu.Lock()
		p.asked = append(p.asked, k)
		switch k {
		case p.never:
		case p.hold:
			p.held = m
		default:
			answer = append(answer, m)
		}
		if p.held != nil && len(p.asked) >= p.wait {
			answer, p.held = append(answer, p.held), nil
		}
		onAsk := p.onAsk
		p.mu.Unlock()
		if onAsk != nil {
			onAsk(k)
		}
		for _, a := range answer {
			p.answer(a)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil { // subscribed when serve returns
		t.Fatal(err)
	}
}

func (p *slicePeer) answer(m *nats.Msg) {
	k := sliceOf(m)
	reply := nats.NewMsg(m.Reply)
	if k == p.broken {
		reply.Header.Set(wire.HeaderBlobError, "no blob")
		_ = m.RespondMsg(reply)
		return
	}
	data := wire.EncodeRawPartial(&factor.Partial{Action: 0, Rows: []int32{int32(k)}, Dh: []float64{1}, X: []float64{1}, Y: []float64{0}, SumX: 1}, nil)
	reply.Data = data
	reply.Header.Set(wire.HeaderBlobTotal, strconv.Itoa(len(data)))
	_ = m.RespondMsg(reply)
}

func sliceRefs(peer string, n int) []sliceRef {
	refs := make([]sliceRef, n)
	for k := range refs {
		refs[k] = sliceRef{worker: peer, name: "s" + strconv.Itoa(k)}
	}
	return refs
}

// TestPullInOrder: an owner's pull hands the slices to its fold in order
// 0, 1, … whatever order they arrive in (slice 0 answers last of the
// first window), and asks for slice k only once slice k − foldWindow was
// folded: at most foldWindow slices in flight or waiting.
func TestPullInOrder(t *testing.T) {
	srv := testServer(t)
	w := testWorker(t, srv)
	const n = 11
	p := &slicePeer{id: "peer", hold: 0, wait: foldWindow, never: -1, broken: -1}
	var mu sync.Mutex
	var added []int
	p.onAsk = func(k int) {
		mu.Lock()
		defer mu.Unlock()
		if k >= foldWindow && !slices.Contains(added, k-foldWindow) {
			t.Errorf("slice %d asked for before slice %d was folded (folded %v)", k, k-foldWindow, added)
		}
	}
	p.serve(t, connect(t, srv))
	err := w.pullInOrder(context.Background(), sliceRefs("peer", n), 1<<20, func(k int, part *factor.Partial) error {
		mu.Lock()
		defer mu.Unlock()
		if len(part.Rows) != 1 || int(part.Rows[0]) != k {
			t.Errorf("fold %d got the slice of row %v", k, part.Rows)
		}
		added = append(added, k)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}; !slices.Equal(added, want) {
		t.Fatalf("folded in order %v, want %v", added, want)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.asked[len(p.asked)-1] == 0 || len(p.asked) != n {
		t.Fatalf("asked %v: want each slice once, slice 0 not last", p.asked)
	}
}

// TestPullCancelled: a pull whose context ends while a slice is awaited
// (its owner never answers) returns at once with the context's error,
// having folded only what came before, and leaves no fetch running; a
// slice its owner cannot serve fails the pull naming the slice.
func TestPullCancelled(t *testing.T) {
	srv := testServer(t)
	w := testWorker(t, srv)
	p := &slicePeer{id: "peer", hold: -1, never: 2, broken: -1}
	p.serve(t, connect(t, srv))
	ctx, cancel := context.WithCancel(context.Background())
	var added []int
	done := make(chan error, 1)
	go func() {
		done <- w.pullInOrder(ctx, sliceRefs("peer", 6), 1<<20, func(k int, _ *factor.Partial) error {
			added = append(added, k)
			if k == 1 {
				cancel()
			}
			return nil
		})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled pull: %v", err)
		}
	case <-time.After(patience):
		t.Fatal("a cancelled pull did not return")
	}
	if !slices.Equal(added, []int{0, 1}) {
		t.Fatalf("folded %v before the cancel, want [0 1]", added)
	}
	(&slicePeer{id: "broken", hold: -1, never: -1, broken: 3}).serve(t, connect(t, srv))
	err := w.pullInOrder(context.Background(), sliceRefs("broken", 6), 1<<20, func(int, *factor.Partial) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "slice s3 of worker broken") {
		t.Fatalf("a slice its owner cannot serve: %v", err)
	}
}

// TestGatherLimits: a task's gather of rows from an owner goes in
// requests of at most gatherMax rows, at most gatherWindow in flight, and
// puts each row where it belongs; the owner's side refuses a request for
// more rows than one reply holds, and a row outside the block.
func TestGatherLimits(t *testing.T) {
	srv := testServer(t)
	w := testWorker(t, srv)
	const m = 16
	per := gatherMax(w.nc, m)
	rows := make([]int32, 20*per+3)
	for k := range rows {
		rows[k] = int32(3 * k)
	}
	total := (len(rows) + per - 1) / per
	// The owner: answers each row i with m copies of float64(i), holding
	// its answers until gatherWindow requests wait (or all came).
	var mu sync.Mutex
	var pending []*nats.Msg
	received, most := 0, 0
	reply := func(m2 *nats.Msg) {
		idx, err := wire.DecodeCols(m2.Data, 0, 1<<30, nil)
		if err != nil {
			t.Error(err)
		}
		out := make([]float64, 0, len(idx)*m)
		for _, i := range idx {
			for range m {
				out = append(out, float64(i))
			}
		}
		r := nats.NewMsg(m2.Reply)
		r.Data = wire.FloatBytes(out)
		_ = m2.RespondMsg(r)
	}
	onc := connect(t, srv)
	sub, err := onc.Subscribe(wire.GatherSubject(wire.DefaultPrefix, "owner"), func(m2 *nats.Msg) {
		mu.Lock()
		received++
		if n := len(m2.Data) / 4; n > per || n == 0 {
			t.Errorf("a gather request of %d rows, at most %d", n, per)
		}
		if got := m2.Header.Get(wire.HeaderOwnVersion); got != "4" {
			t.Errorf("gather of version %q, want 4", got)
		}
		pending = append(pending, m2)
		most = max(most, len(pending))
		var out []*nats.Msg
		if len(pending) >= gatherWindow || received == total {
			out, pending = pending, nil
		}
		mu.Unlock()
		for _, m2 := range out {
			reply(m2)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := onc.Flush(); err != nil {
		t.Fatal(err)
	}
	dst := make([]float64, len(rows)*m)
	r := &proto.Request{Job: "j", Epoch: 1, Iteration: 5}
	if err := w.gatherParts(context.Background(), r, []gatherPart{{owner: "owner", block: "0/0", idx: rows, dst: dst}}, m); err != nil {
		t.Fatal(err)
	}
	for q, i := range rows {
		if dst[q*m] != float64(i) || dst[q*m+m-1] != float64(i) {
			t.Fatalf("row %d (index %d) gathered as %v", i, q, dst[q*m:q*m+m])
		}
	}
	if received != total || most > gatherWindow {
		t.Fatalf("%d requests (want %d), at most %d in flight (limit %d)", received, total, most, gatherWindow)
	}
	// The owner's side.
	if _, err := w.gatherIndices(wire.EncodeCols(make([]int32, per+1), nil), m, 0, 10, "rows"); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("a gather of %d rows: %v", per+1, err)
	}
	if _, err := w.gatherIndices(wire.EncodeCols([]int32{3, 10}, nil), m, 0, 10, "rows"); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Fatalf("a row outside the block: %v", err)
	}
	if got, err := w.gatherIndices(wire.EncodeCols([]int32{0, 9}, nil), m, 0, 10, "rows"); err != nil || !slices.Equal(got, []int32{0, 9}) {
		t.Fatalf("a good gather: %v %v", got, err)
	}
}
