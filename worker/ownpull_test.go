package worker

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// TestEarlyPullRowGroup: ready notices for the D̂ slices of a row group
// this worker owns, arriving out of the cells' order (cell 2, then 0,
// then 1), make the owner pull and fold each slice once its turn comes,
// in the cells' order, while the pass runs (no commit), and drop each
// at its server once folded. Notices that name a group not owned here,
// a shard that is not one of the group's cells, another epoch, a bad
// group or a server outside the epoch (a rogue that would serve another
// slice under the name) are dropped without effect.
func TestEarlyPullRowGroup(t *testing.T) {
	srv := testServer(t)
	w := testWorker(t, srv)
	const (
		job, epoch, iter, m, g = "early", 3, 1, 2, 5
		key                    = "k"
	)
	cells := []int{10, 11, 12}
	rows := []int32{0, 4, 7}
	// The slice of cell q holds rows 0 and 7 (row 4 only in cell 1) with
	// D̂ values q+1 and 10(q+1): folding them out of order would still
	// give these sums, so the test also checks the order of the pulls.
	slice := func(q int) *factor.Partial {
		v := float64(q + 1)
		p := &factor.Partial{Action: 0, Rows: []int32{0, 7}, Dh: []float64{v, v, 10 * v, 10 * v}, X: []float64{v, 10 * v}, Y: make([]float64, m)}
		if q == 1 {
			p = &factor.Partial{Action: 0, Rows: []int32{0, 4, 7}, Dh: []float64{v, v, 100, 100, 10 * v, 10 * v}, X: []float64{v, 100, 10 * v}, Y: make([]float64, m)}
		}
		for _, x := range p.X {
			p.SumX += x
		}
		return p
	}
	var mu sync.Mutex
	var asked, dropped []int
	peer := connect(t, srv)
	sub, err := peer.Subscribe(wire.SliceSubject(wire.DefaultPrefix, "peer")+".>", func(msg *nats.Msg) {
		name := msg.Subject[len(wire.SliceSubject(wire.DefaultPrefix, "peer"))+1:]
		q := -1
		for k, s := range cells {
			if name == wire.DSliceName(job, epoch, iter, s, g, key) {
				q = k
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if string(msg.Data) == "drop" {
			dropped = append(dropped, q)
			return
		}
		asked = append(asked, q)
		reply := nats.NewMsg(msg.Reply)
		if q < 0 {
			reply.Header.Set(wire.HeaderBlobError, "no blob "+name)
		} else {
			reply.Data = wire.EncodeRawPartial(slice(q), nil)
			reply.Header.Set(wire.HeaderBlobTotal, strconv.Itoa(len(reply.Data)))
		}
		_ = msg.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := peer.Flush(); err != nil {
		t.Fatal(err)
	}

	og := &ownGroup{g: g, action: 0, rows: rows, foldIter: 0}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	layout := make([]proto.RowGroup, g+1)
	for k := range layout {
		layout[k] = proto.RowGroup{G: k, Owner: "other"}
	}
	layout[g] = proto.RowGroup{G: g, Action: 0, Cells: cells, Owner: w.id}
	w.omu.Lock()
	w.own[job] = &ownJob{job: job, epoch: epoch, sliceKey: key, n: 8, m: m, u: 1, groups: map[int]*ownGroup{g: og}, rowLayout: layout, ctx: ctx, cancel: cancel,
		members: map[string]bool{"peer": true, "other": true, w.id: true}}
	// The rogue serves any slice asked of it: cell 0 with other values.
	rogueSub, err := peer.Subscribe(wire.SliceSubject(wire.DefaultPrefix, "rogue")+".>", func(msg *nats.Msg) {
		if string(msg.Data) == "drop" {
			return
		}
		p := slice(0)
		p.Dh[0] = 1e6
		reply := nats.NewMsg(msg.Reply)
		reply.Data = wire.EncodeRawPartial(p, nil)
		reply.Header.Set(wire.HeaderBlobTotal, strconv.Itoa(len(reply.Data)))
		_ = msg.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rogueSub.Unsubscribe() })
	w.omu.Unlock()

	notice := func(rd wire.Ready) {
		if err := peer.PublishMsg(rd.Msg(wire.DefaultPrefix, w.id)); err != nil {
			t.Fatal(err)
		}
	}
	rd := func(shard, group int) wire.Ready {
		return wire.Ready{Job: job, Epoch: epoch, Iteration: iter, Shard: shard, Worker: "peer", Group: group}
	}
	folded := func() int {
		og.fmu.Lock()
		defer og.fmu.Unlock()
		return og.folded
	}
	// Dropped: a group not owned here, a shard not of the group, another
	// epoch, a negative group (ParseReady refuses it), a group beyond the
	// layout.
	notice(rd(10, 4))
	notice(rd(13, g))
	stale := rd(10, g)
	stale.Epoch = epoch - 1
	notice(stale)
	bad := nats.NewMsg(wire.ReadySubject(wire.DefaultPrefix, w.id))
	for k, v := range map[string]string{wire.HeaderOwnJob: job, wire.HeaderOwnEpoch: "3", wire.HeaderOwnVersion: "1", wire.HeaderReadyShard: "10", wire.HeaderReadyWorker: "peer", wire.HeaderReadyGroup: "-2"} {
		bad.Header.Set(k, v)
	}
	if err := peer.PublishMsg(bad); err != nil {
		t.Fatal(err)
	}
	notice(rd(10, 99))
	rogue := rd(10, g)
	rogue.Worker = "rogue"
	notice(rogue)
	// Cell 2 first: not due, not pulled before cells 0 and 1 (the order
	// of the pulls below).
	notice(rd(12, g))
	notice(rd(10, g))
	notice(rd(11, g))
	deadline := time.Now().Add(patience)
	for folded() < len(cells) || func() bool { mu.Lock(); defer mu.Unlock(); return len(dropped) < len(cells) }() {
		if time.Now().After(deadline) {
			t.Fatalf("folded %d of %d cells early (asked %v, dropped %v)", folded(), len(cells), asked, dropped)
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(asked, []int{0, 1, 2}) || !slices.Equal(dropped, []int{0, 1, 2}) {
		t.Fatalf("pulled %v and dropped %v, want each cell once in order [0 1 2]", asked, dropped)
	}
	og.fmu.Lock()
	defer og.fmu.Unlock()
	wantDh := []float64{1 + 2 + 3, 1 + 2 + 3, 100, 100, 10 + 20 + 30, 10 + 20 + 30}
	wantX := []float64{6, 100, 60}
	if !slices.Equal(og.dh, wantDh) || !slices.Equal(og.x, wantX) {
		t.Fatalf("folded D̂ %v and x %v, want %v and %v", og.dh, og.x, wantDh, wantX)
	}
	if st := w.Stats(); st.SlicesPulledEarly != int64(len(cells)) {
		t.Fatalf("stats: %d slices pulled early, want %d", st.SlicesPulledEarly, len(cells))
	}
}
