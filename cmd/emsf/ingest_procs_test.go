package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/ingest"
	"github.com/emsf/emsf/coordinator/ingest/ingesttest"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// TestIngestProcesses runs the distributed ingest with real processes: a
// nats-server, three `emsf worker` and an `emsf data ingest` coordinator,
// on a directory of CSV, Parquet and Arrow files with a holdout and
// column cells. One worker is held at an exact point (as a mapper after
// its second segment, or as a reducer after its second split: the
// --ingest-hold-* test flags) and killed with SIGKILL there. The shards
// are still bitwise the local fit's: the manifest the coordinator writes
// is the local one for every set, and every shard stored in the Object
// Store decodes to the local shard; none is held by the dead worker.
func TestIngestProcesses(t *testing.T) {
	bin := buildBinary(t)
	rng := rand.New(rand.NewPCG(21, 22))
	rows := ingesttest.RandomRows(rng, 500, 3, 30000, 120, true)
	dir := t.TempDir()
	// CSV: every split has rows (a Parquet or Arrow file written whole
	// has one row group or a few batches, and the other splits of it are
	// empty), so the held worker meets its point.
	files := ingesttest.DatasetOf(t, rng, dir, rows, 3, "csv")
	want := ingesttest.LocalShards(t, files, arrowio.ReadOptions{}, 0.2, 3, 120, 2)
	for _, hold := range []string{"--ingest-hold-segment", "--ingest-hold-fed"} {
		t.Run(strings.TrimPrefix(hold, "--ingest-hold-"), func(t *testing.T) {
			ns := startNATSProcess(t)
			var ws []*proc
			for k := range 3 {
				args := []string{"worker", "--nats", ns.url, "--log-level", "warn"}
				if k == 1 {
					args = append(args, hold, "2")
				}
				ws = append(ws, startProc(t, fmt.Sprintf("worker %d", k), bin, args...))
			}
			ids := make([]string, len(ws))
			for k, w := range ws {
				coordtest.CheckFor(t, coordtest.Patience, func() error {
					w.alive(t, "worker")
					for _, line := range strings.Split(w.out.String(), "\n") {
						if f := strings.Fields(line); len(f) > 1 && f[0] == "worker" {
							ids[k] = f[1]
							return nil
						}
					}
					return fmt.Errorf("worker %d did not print its id", k)
				})
			}
			manifest := filepath.Join(t.TempDir(), "manifest.json")
			coord := startProc(t, "coordinator", bin, "data", "ingest", "--nats", ns.url, "--input", dir, "--min-workers", "3",
				"--store-shards", "--manifest", manifest, "--shard-nnz", "120", "--col-cells", "2", "--holdout", "0.2", "--seed", "3",
				"--split-bytes", strconv.FormatInt(ingesttest.TotalSize(files)/10, 10), "--worker-probe", "100ms", "--log-level", "warn")
			coordtest.CheckFor(t, coordtest.Patience, func() error {
				coord.alive(t, "coordinator")
				if !strings.Contains(ws[1].out.String(), "ingest: holding") {
					return fmt.Errorf("worker 1 is not held yet")
				}
				return nil
			})
			if err := ws[1].cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			if err := coord.wait(t, "coordinator"); err != nil {
				t.Fatalf("coordinator: %v\n%s", err, coord.out.String())
			}
			data, err := os.ReadFile(manifest)
			if err != nil {
				t.Fatal(err)
			}
			var res ingest.Result
			if err := json.Unmarshal(data, &res); err != nil {
				t.Fatal(err)
			}
			if res.Epochs < 2 {
				t.Fatalf("%d epochs: the worker's death went unnoticed", res.Epochs)
			}
			obs := objectStore(t, ns)
			held := func(holder, checksum string) *shard.Shard {
				if holder == ids[1] {
					t.Fatalf("shard %s is held by the killed worker", checksum)
				}
				b, err := obs.GetBytes(context.Background(), proto.ShardObject(checksum))
				if err != nil {
					t.Fatalf("shard %s: %v", checksum, err)
				}
				s, err := arrowio.DecodeShard(b)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			ingesttest.CheckSame(t, hold, held, &res, want)
		})
	}
}

// objectStore opens the default Object Store bucket of n.
func objectStore(t *testing.T, n *natsProcess) jetstream.ObjectStore {
	t.Helper()
	js, err := jetstream.New(n.connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	obs, err := js.ObjectStore(ctx, wire.DefaultObjectBucket)
	if err != nil {
		t.Fatal(err)
	}
	return obs
}
