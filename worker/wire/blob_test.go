package wire

import (
	"strconv"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

func blobTestConn(t *testing.T) *nats.Conn {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10e9) {
		t.Fatal("nats-server did not start")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestBlobServerForgetsDropped: a server that keeps every blob until it
// is dropped (the owners' slices) does not keep a name for every blob it
// ever held, and one that keeps at most Max still drops the oldest held
// blob first.
func TestBlobServerForgetsDropped(t *testing.T) {
	nc := blobTestConn(t)
	b, err := ServeBlobs(nc, DefaultPrefix, "all", 1<<31-1)
	if err != nil {
		t.Fatal(err)
	}
	for k := range 10000 {
		b.Put("b"+strconv.Itoa(k), []byte{byte(k)})
		if k >= 3 {
			b.Drop("b" + strconv.Itoa(k-3)) // three held at a time
		}
	}
	if blobs, names := b.held(); blobs != 3 || names > 2*blobs+65 {
		t.Fatalf("after 10000 blobs, 3 held: %d blobs and %d names kept", blobs, names)
	}
	for _, k := range []int{9997, 9998, 9999} {
		if data, ok := b.Get("b" + strconv.Itoa(k)); !ok || data[0] != byte(k) {
			t.Fatalf("blob b%d lost", k)
		}
	}

	few, err := ServeBlobs(nc, DefaultPrefix, "few", 2)
	if err != nil {
		t.Fatal(err)
	}
	few.Put("x", []byte{1})
	few.Put("y", []byte{2})
	few.Drop("x")
	few.Put("z", []byte{3})
	few.Put("w", []byte{4}) // three held would be over Max: y, the oldest, goes
	if _, ok := few.Get("y"); ok {
		t.Fatal("the oldest blob was kept over Max")
	}
	for _, n := range []string{"z", "w"} {
		if _, ok := few.Get(n); !ok {
			t.Fatalf("blob %s dropped, want the oldest (y) only", n)
		}
	}
}
