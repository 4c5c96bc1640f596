package wire_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker/wire"
)

// jetStream starts a JetStream server with a small max payload (so that
// parts are put in many chunks) and returns a connection to it.
func jetStream(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, JetStream: true,
		StoreDir: t.TempDir(), MaxPayload: 4 << 10}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func TestParseObjectURL(t *testing.T) {
	for _, tc := range []struct{ url, bucket, prefix, err string }{
		{"nats-obj://models", "models", "", ""},
		{"nats-obj://models/", "models", "", ""},
		{"nats-obj://models/job/v3", "models", "job/v3", ""},
		{"nats-obj://models/job/v3/", "models", "job/v3", ""},
		{"nats-obj://mo.dels/x", "", "", "bucket name"},
		{"nats-obj://models/a//b", "", "", "empty, . or .. segment"},
		{"nats-obj://models/../b", "", "", "empty, . or .. segment"},
		{"nats://models/x", "", "", "is not a nats-obj://BUCKET/PREFIX location"},
	} {
		b, p, err := wire.ParseObjectURL(tc.url)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: got %v, want %q", tc.url, err, tc.err)
			}
			continue
		}
		if err != nil || b != tc.bucket || p != tc.prefix {
			t.Errorf("%s: got %q %q %v, want %q %q", tc.url, b, p, err, tc.bucket, tc.prefix)
		}
	}
}

// TestObjectPartsRoundTrip: a model split into the Object Store (parts
// put through a pipe in chunks of a 4 KiB max payload) reads back bitwise
// and assembles into WriteModel's bytes; a missing or replaced part object
// is an error that names the location and the part, and an aborted part
// leaves no object.
func TestObjectPartsRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, js := jetStream(t)
	dir := t.TempDir()
	md := factor.NewRandom(300, 4, 2, factor.TieNone, 3)
	md.Iteration = 5
	mf := &arrowio.ModelFile{Model: md, Fingerprint: "f", Params: map[string]string{"k": "v"}}
	file := filepath.Join(dir, "model.arrow")
	if err := arrowio.WriteModel(file, mf, arrowio.ModelArrow); err != nil {
		t.Fatal(err)
	}
	const url = "nats-obj://emsf-test-models/job/v5"
	parts, err := wire.OpenObjectParts(ctx, js, url, true, nc.MaxPayload())
	if err != nil {
		t.Fatal(err)
	}
	if parts.String() != url {
		t.Errorf("String() = %q", parts.String())
	}
	man, err := arrowio.SplitModel(ctx, file, parts, arrowio.ModelArrow, 128)
	if err != nil {
		t.Fatal(err)
	}
	if len(man.Parts) != 12 {
		t.Fatalf("%d parts, want 12", len(man.Parts))
	}
	// Reopened by another client, read-only.
	src, err := wire.OpenObjectParts(ctx, js, url, false, nc.MaxPayload())
	if err != nil {
		t.Fatal(err)
	}
	back, err := arrowio.ReadModelDataset(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Model.Equal(md) || back.Model.Iteration != 5 || back.Params["k"] != "v" {
		t.Error("the model read from the Object Store differs")
	}
	out := filepath.Join(dir, "assembled.arrow")
	if err := arrowio.AssembleModel(ctx, src, out, arrowio.ModelArrow); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(file)
	b, _ := os.ReadFile(out)
	if !bytes.Equal(a, b) {
		t.Error("assembled from the Object Store: not WriteModel's bytes")
	}

	// An aborted part leaves no object.
	f, err := parts.Create(ctx, "D-0-0-1.x.arrow")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(bytes.Repeat([]byte{1}, 20<<10)); err != nil {
		t.Fatal(err)
	}
	f.Abort()
	obs, err := js.ObjectStore(ctx, "emsf-test-models")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.GetInfo(ctx, "job/v5/D-0-0-1.x.arrow"); err == nil {
		t.Error("an aborted part left an object")
	}

	// A part replaced by other bytes of the same size: the digest.
	p := man.Parts[3]
	data, err := obs.GetBytes(ctx, "job/v5/"+p.File)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 1
	if _, err := wire.PutObject(ctx, obs, nc.MaxPayload(), "job/v5/"+p.File, data); err != nil {
		t.Fatal(err)
	}
	if _, err := arrowio.ReadModelDataset(ctx, src); err == nil ||
		!strings.Contains(err.Error(), "arrowio: read model "+url+": part "+p.File+": SHA-256 ") {
		t.Errorf("replaced part: got %v", err)
	}
	// A missing part.
	if err := parts.Remove(ctx, p.File); err != nil {
		t.Fatal(err)
	}
	if err := parts.Remove(ctx, p.File); err != nil {
		t.Errorf("removing a missing part: %v", err)
	}
	if err := arrowio.AssembleModel(ctx, src, out, arrowio.ModelArrow); err == nil ||
		!strings.Contains(err.Error(), "part "+p.File+": "+url+"/"+p.File+": ") {
		t.Errorf("missing part: got %v", err)
	}
	// No bucket.
	if _, err := wire.OpenObjectParts(ctx, js, "nats-obj://no-such-bucket/x", false, nc.MaxPayload()); err == nil ||
		!strings.Contains(err.Error(), "nats-obj://no-such-bucket/x: bucket no-such-bucket") {
		t.Errorf("no bucket: got %v", err)
	}
}
