package wire_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/emsf/emsf/worker/wire"
)

// TestDetachAnswersLater: a micro handler that hands a detached copy of
// its request to another goroutine and returns; the copy answers later
// (a JSON reply, then an error reply with micro's error headers), with
// the race detector on, while micro reads its own request after the
// handler returned.
func TestDetachAnswersLater(t *testing.T) {
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true}
	srv, err := server.NewServer(opts)
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
	var wg sync.WaitGroup
	defer wg.Wait()
	svc, err := micro.AddService(nc, micro.Config{Name: "detach", Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	if err := svc.AddEndpoint("echo", micro.HandlerFunc(func(req micro.Request) {
		later := wire.Detach(nc, req)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if string(later.Data()) == "fail" {
				_ = later.Error("418", "no tea", []byte("body"))
				return
			}
			_ = later.RespondJSON(map[string]string{"got": string(later.Data())})
		}()
	}), micro.WithEndpointSubject("detach.echo")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 50 {
		m, err := nc.RequestWithContext(ctx, "detach.echo", []byte("hi"))
		if err != nil || string(m.Data) != `{"got":"hi"}` {
			t.Fatalf("reply %v, %v", m, err)
		}
		m, err = nc.RequestWithContext(ctx, "detach.echo", []byte("fail"))
		if err != nil || m.Header.Get(micro.ErrorCodeHeader) != "418" || !strings.Contains(m.Header.Get(micro.ErrorHeader), "no tea") || string(m.Data) != "body" {
			t.Fatalf("error reply %v, %v", m, err)
		}
	}
}
