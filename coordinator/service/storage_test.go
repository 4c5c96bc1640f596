package service

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/coordtest"
)

// A small soak: rounds of messages with retrains between them. After
// each round, once the checkpoint holds the round: the count table takes
// at most twice the fit's CSR of the same counts plus its buffer's floor,
// the stream holds no message (every one is in the checkpoint), and the
// Object Store holds the last KeepVersions versions. A restart then
// counts everything exactly, from the checkpoint alone, and a service
// restarted with the checkpoint gone refuses to start (the stream cannot
// rebuild what was purged).
func TestServeStorageBounded(t *testing.T) {
	nc, _ := server(t)
	const buffer = 1 << 10
	cfg := Config{Name: "soak", Order: 2, MaxIter: 2, UseWorkers: WorkersNever, CheckpointEvery: 20 * time.Millisecond,
		BufferRows: buffer, KeepVersions: 2}
	r := start(t, nc, cfg)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(t.Context(), StreamName("emsf", "soak"))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(41, 42))
	var rowsIn int64
	var sum float64
	const rounds, msgs, per = 4, 20, 500
	var seq uint64
	for round := 1; round <= rounds; round++ {
		for range msgs {
			b := &arrowio.TransitionBatch{}
			for range per {
				c := float64(1 + rng.IntN(3))
				b.State = append(b.State, int32(rng.IntN(300)))
				b.Action = append(b.Action, int32(rng.IntN(2)))
				b.Next = append(b.Next, int32(rng.IntN(300)))
				b.Count = append(b.Count, c)
				sum += c
			}
			data, err := arrowio.EncodeTransitionsPayload(b, 0, b.Len())
			if err != nil {
				t.Fatal(err)
			}
			seq = publish(t, nc, "soak", data)
			rowsIn += per
		}
		waitSeq(t, nc, "soak", seq)
		if v, err := retrain(t, nc, "soak"); err != nil || v.Version != round || v.Transitions != rowsIn {
			t.Fatalf("round %d: retrain %+v, %v", round, v, err)
		}
		var st Status
		coordtest.CheckFor(t, coordtest.Patience, func() error {
			if st = status(t, nc, "soak"); st.Checkpointed < seq || st.PurgedTo < seq {
				return fmt.Errorf("checkpointed up to %d, purged up to %d, want %d", st.Checkpointed, st.PurgedTo, seq)
			}
			return nil
		})
		if st.Stream == nil || st.Stream.Msgs != 0 || st.Stream.LastSeq != seq {
			t.Fatalf("round %d: status says the stream holds %+v; want nothing, up to %d", round, st.Stream, seq)
		}
		if st.Transitions != rowsIn || st.Count != sum || st.Buffered != 0 {
			t.Fatalf("round %d: %+v; want %d rows, count %v, nothing buffered", round, st, rowsIn, sum)
		}
		if bound := 2*st.CSRBytes + 16*buffer; st.CountsBytes > bound {
			t.Fatalf("round %d: the counts take %d bytes (%.1f a distinct transition), above 2×CSR + the buffer = %d", round,
				st.CountsBytes, float64(st.CountsBytes)/float64(st.NNZ), bound)
		}
		info, err := stream.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != 0 || info.State.FirstSeq != seq+1 || info.State.LastSeq != seq {
			t.Fatalf("round %d: the stream holds %d messages, sequences %d..%d; want none after %d", round,
				info.State.Msgs, info.State.FirstSeq, info.State.LastSeq, seq)
		}
		vs, err := r.svc.st.List(t.Context(), "soak")
		if err != nil {
			t.Fatal(err)
		}
		if want := min(round, 2); len(vs) != want || vs[len(vs)-1].Version != round {
			t.Fatalf("round %d: %d versions stored (last %+v), want the last %d", round, len(vs), vs[len(vs)-1], want)
		}
		t.Logf("round %d: %d rows, %d distinct, %.1f bytes a distinct transition (CSR %.1f)", round, rowsIn, st.NNZ,
			float64(st.CountsBytes)/float64(st.NNZ), float64(st.CSRBytes)/float64(st.NNZ))
	}
	r.stop(t)
	r = start(t, nc, cfg)
	if st := status(t, nc, "soak"); st.Transitions != rowsIn || st.Count != sum || st.StreamSeq != seq || st.Latest.Version != rounds {
		t.Fatalf("after a restart: %+v; want %d rows, count %v up to %d", st, rowsIn, sum, seq)
	}
	r.stop(t)
	if err := r.svc.st.Models.Delete(t.Context(), StateObject("soak")); err != nil {
		t.Fatal(err)
	}
	svc, err := New(t.Context(), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "there is no checkpoint") ||
		!strings.Contains(err.Error(), fmt.Sprintf("starts at sequence %d", seq+1)) {
		t.Fatalf("a service without its checkpoint over a purged stream: %v", err)
	}
}
