package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/worker"
	"github.com/emsf/emsf/worker/wire"
)

// TestOwnersWorkerFaults: `fit --exchange owners` on three real `emsf
// worker` processes, one of which is held in iteration 3 (it owns column
// blocks and holds shards' rows of D) and then killed with SIGKILL, or
// frozen with SIGSTOP: the coordinator notices within seconds (no
// responders / no answer to its pings for --worker-frozen), rolls back to
// the checkpoint of iteration 2, replays on the two workers left, and
// writes bitwise the model of the local fit; every pass's Σx is N (the
// loop fails a pass whose Σx differs).
func TestOwnersWorkerFaults(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data.csv")
	writeTransitions(t, data, 200, 2, 5000)
	fitArgs := []string{"fit", "--input", data, "--order", "4", "--iters", "6", "--tol", "0", "--seed", "3", "--shard-nnz", "150"}
	local := filepath.Join(dir, "local.arrow")
	if out, err := exec.Command(bin, append(fitArgs, "--out", local, "--quiet")...).CombinedOutput(); err != nil {
		t.Fatalf("local fit: %v\n%s", err, out)
	}
	want, err := arrowio.ReadModel(local)
	if err != nil {
		t.Fatal(err)
	}
	for _, fault := range []struct {
		name string
		sig  syscall.Signal
	}{{"kill", syscall.SIGKILL}, {"stop", syscall.SIGSTOP}} {
		t.Run(fault.name, func(t *testing.T) {
			srv, err := natsexec.StartEmbedded(natsexec.EmbeddedConfig{StoreDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				srv.Shutdown()
				srv.WaitForShutdown()
			})
			url := srv.ClientURL()
			var workers []*exec.Cmd
			workerOut := make([]*syncBuffer, 3)
			for k := range 3 {
				args := []string{"worker", "--nats", url, "--log-level", "warn"}
				if k == 0 {
					args = append(args, "--task-delay", "1h", "--task-delay-from", "3")
				}
				cmd := exec.Command(bin, args...)
				out := new(syncBuffer)
				workerOut[k] = out
				cmd.Stdout, cmd.Stderr = out, out
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				workers = append(workers, cmd)
				t.Cleanup(func() {
					if cmd.ProcessState == nil {
						_ = cmd.Process.Signal(syscall.SIGCONT)
						_ = cmd.Process.Kill()
						_ = cmd.Wait()
					}
					if t.Failed() {
						t.Logf("worker %d output:\n%s", k, out.String())
					}
				})
			}
			nc, err := nats.Connect(url)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*coordtest.Patience)
			defer cancel()

			out := filepath.Join(dir, fault.name+".arrow")
			coord := exec.Command(bin, append(fitArgs, "--out", out, "--nats", url, "--min-workers", "3", "--exchange", "owners",
				"--col-blocks", "5", "--checkpoint-every", "2", "--worker-timeout", "1h", "--worker-frozen", "3s", "--job", "owners-"+fault.name)...)
			var coordOut syncBuffer
			coord.Stdout, coord.Stderr = &coordOut, &coordOut
			if err := coord.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- coord.Wait() }()
			alive := func() {
				select {
				case err := <-done:
					t.Fatalf("coordinator exited (%v) before the fault:\n%s", err, coordOut.String())
				default:
				}
			}
			// Worker 0 holds a task of iteration 3.
			id := ""
			coordtest.CheckFor(t, coordtest.Patience, func() error {
				if f := strings.Fields(workerOut[0].String()); len(f) > 1 && f[0] == "worker" {
					id = f[1]
					return nil
				}
				return fmt.Errorf("worker 0 did not print its id")
			})
			statsSubj, err := micro.ControlSubject(micro.StatsVerb, wire.ServiceName, id)
			if err != nil {
				t.Fatal(err)
			}
			coordtest.CheckFor(t, coordtest.Patience, func() error {
				alive()
				if !strings.Contains(coordOut.String(), "exchange=owners iter=2 ") {
					return fmt.Errorf("iteration 2 not committed yet")
				}
				m, err := nc.Request(statsSubj, nil, 10*time.Second)
				if err != nil {
					return fmt.Errorf("worker 0 stats: %w", err)
				}
				var ms micro.Stats
				if err := json.Unmarshal(m.Data, &ms); err != nil || len(ms.Endpoints) == 0 {
					return fmt.Errorf("worker 0 stats %s (%v)", m.Data, err)
				}
				var ws worker.Stats
				if err := json.Unmarshal(ms.Endpoints[0].Data, &ws); err != nil || ws.Running == 0 {
					return fmt.Errorf("worker 0 holds no task: %s (%v)", ms.Endpoints[0].Data, err)
				}
				return nil
			})
			if err := workers[0].Process.Signal(fault.sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("coordinator: %v\n%s", err, coordOut.String())
				}
			case <-ctx.Done():
				t.Fatalf("coordinator did not finish:\n%s", coordOut.String())
			}
			log := coordOut.String()
			if !strings.Contains(log, "rolling back to the last checkpoint") {
				t.Errorf("no rollback logged:\n%s", log)
			}
			re := regexp.MustCompile(`exchange=owners iter=6 .*workers=2 epoch=1 rollbacks=1`)
			if !re.MatchString(log) {
				t.Errorf("the last iteration did not run on 2 workers after one rollback:\n%s", log)
			}
			got, err := arrowio.ReadModel(out)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Model.Equal(want.Model) {
				t.Fatalf("the model after a %s of an owner differs from the local fit", fault.name)
			}
		})
	}
}
