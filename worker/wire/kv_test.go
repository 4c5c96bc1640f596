package wire_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/worker/wire"
)

// CompareAndSet: a create, an update on the revision it returned, and the
// two ways a race is lost (the key created meanwhile, a stale revision)
// come back as one *RaceError matching ErrLostRace; a deleted key can be
// created again.
func TestCompareAndSet(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, JetStream: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "cas"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	r1, err := wire.CompareAndSet(ctx, kv, "job", []byte("a"), 0)
	if err != nil || r1 == 0 {
		t.Fatalf("create: %d, %v", r1, err)
	}
	lost := func(what string, err error, rev uint64) {
		t.Helper()
		var re *wire.RaceError
		if !errors.Is(err, wire.ErrLostRace) || !errors.As(err, &re) || re.Key != "job" || re.Revision != rev {
			t.Fatalf("%s: %v; want a lost race on revision %d", what, err, rev)
		}
	}
	_, err = wire.CompareAndSet(ctx, kv, "job", []byte("b"), 0)
	lost("a second create", err, 0)
	r2, err := wire.CompareAndSet(ctx, kv, "job", []byte("c"), r1)
	if err != nil || r2 <= r1 {
		t.Fatalf("update on revision %d: %d, %v", r1, r2, err)
	}
	_, err = wire.CompareAndSet(ctx, kv, "job", []byte("d"), r1)
	lost("an update on a stale revision", err, r1)
	if e, err := kv.Get(ctx, "job"); err != nil || string(e.Value()) != "c" {
		t.Fatalf("after the lost races the record is %v, %v; want c", e, err)
	}
	if err := kv.Delete(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	if _, err := wire.CompareAndSet(ctx, kv, "job", []byte("e"), 0); err != nil {
		t.Fatalf("create after a delete: %v", err)
	}
	nc.Close()
	if _, err := wire.CompareAndSet(ctx, kv, "job", []byte("f"), 0); err == nil || errors.Is(err, wire.ErrLostRace) {
		t.Fatalf("a closed connection: %v; want an error that is not a lost race", err)
	}
}
