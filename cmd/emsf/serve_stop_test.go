package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/service"
)

// SIGTERM and SIGINT stop a real `emsf serve` cleanly while a retrain
// runs, a second request waits behind it and a third waits for a stream
// sequence not reached: every request is refused with 503 and says why,
// the process exits 0 within a bounded time, the counts are checkpointed
// up to the last message counted (and the stream purged up to it), and
// the log has no ERROR line.
func TestServeStopsCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	bin := buildBinary(t)
	for _, sig := range []os.Signal{syscall.SIGTERM, os.Interrupt} {
		t.Run(sig.String(), func(t *testing.T) { testServeStop(t, bin, sig) })
	}
}

func testServeStop(t *testing.T, bin string, sig os.Signal) {
	url, nc := embeddedNATS(t, true)
	name := "stop"
	data := filepath.Join(t.TempDir(), "t.csv")
	sum := writeCountedCSV(t, data, 2000, 11)
	// A fit that would run for hours (no held-out stop, no relative
	// change): the stop must cut it short.
	p := startServe(t, bin, url, name, "--iters", "1000000000", "--stop", "tol", "--checkpoint-every", "1h", "--log-level", "info")
	coordtest.CheckFor(t, coordtest.Patience, func() error { _, err := serveStatus(nc, name); return err })
	if out, err := exec.Command(bin, "publish", "--nats", url, "--name", name, "--input", data, "--max-rows", "100").CombinedOutput(); err != nil {
		t.Fatalf("publish: %v\n%s", err, out)
	}
	waitCounted(t, nc, name, 20, p)

	type reply struct {
		code, msg string
		err       error
	}
	ask := func(body string) chan reply {
		ch := make(chan reply, 1)
		go func() {
			m, err := nc.Request(service.RetrainSubject("emsf", name), []byte(body), 2*coordtest.Patience)
			if err != nil {
				ch <- reply{err: err}
				return
			}
			ch <- reply{code: m.Header.Get("Nats-Service-Error-Code"), msg: m.Header.Get("Nats-Service-Error")}
		}()
		return ch
	}
	running := ask("")
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		if st, err := serveStatus(nc, name); err != nil || !st.Retraining {
			return fmt.Errorf("no retrain running yet (%v)", err)
		}
		return nil
	})
	queued := ask("")
	parked := ask(`{"after_seq": 1000, "wait": "1h"}`)
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		if st, err := serveStatus(nc, name); err != nil || st.Waiting != 1 || st.CatchingUp != 1 {
			return fmt.Errorf("waiting %d, catching up %d (%v)", st.Waiting, st.CatchingUp, err)
		}
		return nil
	})

	start := time.Now()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("emsf serve after %v: %v\n%s", sig, err, p.err.String())
		}
	case <-time.After(coordtest.Patience):
		t.Fatalf("emsf serve still running %v after %v\n%s", coordtest.Patience, sig, p.err.String())
	}
	t.Logf("%v to exit: %v", sig, time.Since(start).Round(time.Millisecond))
	for what, ch := range map[string]chan reply{"running": running, "queued": queued, "parked": parked} {
		r := <-ch
		if r.err != nil || r.code != "503" || !strings.Contains(r.msg, "emsf serve is stopping") {
			t.Errorf("the %s retrain request: %+v; want a 503 saying the service stops", what, r)
		}
	}
	log := p.err.String()
	if strings.Contains(log, "[ERROR]") || !strings.Contains(log, "stopped") {
		t.Fatalf("the log of a clean stop:\n%s", log)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(t.Context(), service.DefaultModelBucket)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := obs.GetBytes(t.Context(), service.StateObject(name))
	if err != nil {
		t.Fatal(err)
	}
	tab, meta, err := arrowio.DecodeCounts(raw)
	if err != nil || meta.Seq != 20 || meta.Added != 2000 || meta.Pending != 2000 || tab.Sum() != sum || meta.Version != 0 {
		t.Fatalf("checkpoint after the stop: %+v, sum %v (want 20, 2000 rows all pending, %v): %v", meta, tab.Sum(), sum, err)
	}
	stream, err := js.Stream(t.Context(), service.StreamName("emsf", name))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := stream.Info(t.Context()); err != nil || info.State.Msgs != 0 {
		t.Fatalf("the stream after the stop: %+v, %v; want every counted message purged", info.State, err)
	}
	// The stop answered everyone: nothing is served any more.
	if _, err := nc.Request(service.StatusSubject("emsf", name), nil, time.Second); err != nats.ErrNoResponders {
		t.Fatalf("status after the stop: %v", err)
	}
}
