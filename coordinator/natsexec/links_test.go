package natsexec_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/ingest"
	"github.com/emsf/emsf/coordinator/ingest/ingesttest"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/coordinator/owners"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker"
)

// slowLink starts a TCP proxy to the NATS server at serverURL whose every
// connection carries at most rate bytes per second each way (a node
// behind a slow link), and returns its URL. It stops at the test's end.
func slowLink(t *testing.T, serverURL string, rate int) string {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	// pace copies src to dst in chunks of rate/100 bytes, each taking at
	// least 10 ms.
	pace := func(dst, src net.Conn) {
		defer wg.Done()
		buf := make([]byte, max(rate/100, 512))
		for {
			t0 := time.Now()
			n, err := src.Read(buf)
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
				time.Sleep(time.Until(t0.Add(time.Duration(n) * time.Second / time.Duration(rate))))
			}
			if err != nil {
				break
			}
		}
		_ = dst.Close()
		_ = src.Close()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", u.Host)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Add(2)
			go pace(s, c)
			go pace(c, s)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "nats://" + ln.Addr().String()
}

// slowWorker starts a worker whose connection to lc's server goes through
// a link of 256 KiB/s each way; it stops at the test's end.
func slowWorker(t *testing.T, lc *natsexec.LocalCluster[*worker.Worker]) *worker.Worker {
	t.Helper()
	nc, err := nats.Connect(slowLink(t, lc.URL(), 256<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w, err := worker.Start(context.Background(), nc, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	return w
}

// TestFitOwnersSlowLink: a worker behind a link of 256 KiB/s (its peers
// talk to the server directly) is timed with a link probe before the
// job is placed, computes no shard and owns nothing in any iteration,
// and the model is bitwise the local fit's; with the probe off
// (SlowLink < 0) the same worker is placed.
func TestFitOwnersSlowLink(t *testing.T) {
	const iters = 3
	shards := ownersDataSplit(t, 240, 1, 11, 12)
	init := factor.NewRandom(240, 4, 1, factor.TieNone, 3)
	want, _ := fitLocal(t, shards, init, iters)
	for _, probe := range []bool{true, false} {
		cfg := natsexec.Config{}
		if !probe {
			cfg.SlowLink = -1
		}
		lc := ownersCluster(t, 2, cfg)
		slow := slowWorker(t, lc)
		var reports []natsexec.OwnersReport
		md := init.Clone()
		if _, err := lc.Exec.FitOwners(context.Background(), md, shards, natsexec.OwnersOptions{
			Job: "owners-slow-link", Options: owners.Options{
				Converger:  factor.Converger{MaxIter: iters},
				GroupNNZ:   ownersGroupNNZ,
				ColBlocks:  3,
				MinWorkers: 3,
				NoBackups:  true,
				Report:     func(r natsexec.OwnersReport) { reports = append(reports, r) },
			}}); err != nil {
			t.Fatal(err)
		}
		coordtest.SameModel(t, "with a worker behind a slow link", md, want)
		if len(reports) != iters {
			t.Fatalf("%d reports, want %d", len(reports), iters)
		}
		for _, r := range reports {
			switch {
			case probe && (r.Workers != 2 || r.Shards[slow.ID()] != 0):
				t.Fatalf("probe on, iteration %d: %d workers placed, %d shards on the slow one; want 2 and none", r.Iteration, r.Workers, r.Shards[slow.ID()])
			case !probe && r.Workers != 3:
				t.Fatalf("probe off, iteration %d: %d workers placed, want 3", r.Iteration, r.Workers)
			}
		}
	}
}

// TestIngestSlowLink: the distributed ingest leaves a worker behind a
// slow link out too: it holds none of the shards, which are the local
// fit's.
func TestIngestSlowLink(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	rows := ingesttest.RandomRows(rng, 120, 2, 2000, 200, false)
	dir := t.TempDir()
	files := ingesttest.Dataset(t, rng, dir, rows, 3)
	local := ingesttest.LocalShards(t, files, arrowio.ReadOptions{}, 0, 0, 200, 1)
	lc := ownersCluster(t, 2, natsexec.Config{})
	slow := slowWorker(t, lc)
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		if ids, err := lc.Exec.Census(context.Background()); err != nil || len(ids) != 3 {
			return fmt.Errorf("census %v: %v", ids, err)
		}
		return nil
	})
	res, err := lc.Exec.Ingest(context.Background(), ingest.Options{Job: "ingest-slow-link", Input: dir, Target: 200})
	if err != nil {
		t.Fatal(err)
	}
	lines := res.Sets[0].Lines
	if len(lines) != len(local.Sets[0]) {
		t.Fatalf("%d shards, the local fit cuts %d", len(lines), len(local.Sets[0]))
	}
	for k, l := range lines {
		if l.Holder == slow.ID() {
			t.Fatalf("shard %d is held by the worker behind the slow link", k)
		}
		if l.Checksum != local.Sets[0][k].Checksum {
			t.Fatalf("shard %d: checksum %s, the local fit's %s", k, l.Checksum, local.Sets[0][k].Checksum)
		}
	}
}
