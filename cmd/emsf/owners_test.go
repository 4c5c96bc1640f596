package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator"
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
			re := regexp.MustCompile(`exchange=owners iter=6 .*workers=2 epoch=\d+ rollbacks=1`)
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

// TestOwnersCoordinatorKillResume: the coordinator of an owners job is
// killed with SIGKILL after its checkpoint of iteration 4 is in the KV
// bucket; `fit --resume` goes on from that checkpoint (a new epoch: the
// workers drop what the dead coordinator had them do) and writes bitwise
// the local fit's model. A --resume with other parameters is refused,
// naming the parameter.
func TestOwnersCoordinatorKillResume(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data.csv")
	writeTransitions(t, data, 200, 2, 5000)
	fitArgs := []string{"fit", "--input", data, "--order", "4", "--iters", "10", "--tol", "0", "--seed", "5", "--shard-nnz", "1000"}
	local := filepath.Join(dir, "local.arrow")
	if out, err := exec.Command(bin, append(fitArgs, "--out", local, "--quiet")...).CombinedOutput(); err != nil {
		t.Fatalf("local fit: %v\n%s", err, out)
	}
	srv, err := natsexec.StartEmbedded(natsexec.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	url := srv.ClientURL()
	for k := range 2 {
		// Slow tasks, so that the kill falls mid-fit.
		cmd := exec.Command(bin, "worker", "--nats", url, "--log-level", "warn", "--task-delay", "150ms")
		out := new(syncBuffer)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("worker %d output:\n%s", k, out.String())
			}
		})
	}
	out := filepath.Join(dir, "cluster.arrow")
	args := append(fitArgs, "--out", out, "--nats", url, "--min-workers", "2", "--exchange", "owners", "--col-blocks", "3",
		"--checkpoint-every", "2", "--job", "owners-resume")
	coord := exec.Command(bin, args...)
	var coordOut syncBuffer
	coord.Stdout, coord.Stderr = &coordOut, &coordOut
	if err := coord.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- coord.Wait() }()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*coordtest.Patience)
	defer cancel()
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		select {
		case err := <-done:
			t.Fatalf("coordinator exited (%v) before the kill:\n%s", err, coordOut.String())
		default:
		}
		kv, err := js.KeyValue(ctx, wire.DefaultKVBucket)
		if err != nil {
			return err
		}
		e, err := kv.Get(ctx, "owners-resume")
		if err != nil {
			return err
		}
		var st coordinator.JobState
		if err := json.Unmarshal(e.Value(), &st); err != nil {
			return err
		}
		if st.Owners == nil || st.Owners.Version < 4 {
			return fmt.Errorf("checkpoint %+v, want version 4", st.Owners)
		}
		return nil
	})
	if err := coord.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-done
	if _, err := os.Stat(out); err == nil {
		t.Fatalf("the killed coordinator wrote %s", out)
	}

	// Other parameters: refused, naming them.
	bad := exec.Command(bin, append(slices.Clone(args), "--resume", "--alpha", "0.5")...)
	if msg, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(msg), "alpha") {
		t.Fatalf("--resume with another --alpha: %v\n%s", err, msg)
	}
	res := exec.Command(bin, append(args, "--resume")...)
	msg, err := res.CombinedOutput()
	if err != nil {
		t.Fatalf("resume: %v\n%s", err, msg)
	}
	if !strings.Contains(string(msg), "resuming from the last checkpoint") {
		t.Errorf("the resumed run did not resume:\n%s", msg)
	}
	want, err := arrowio.ReadModel(local)
	if err != nil {
		t.Fatal(err)
	}
	got, err := arrowio.ReadModel(out)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Model.Equal(want.Model) {
		t.Fatalf("the resumed owners job's model differs from the local fit\n%s", msg)
	}
}

// TestOwnersNATSServerRestart: the nats-server under an owners job gets
// SIGKILL after checkpoint 2 and restarts on its store; coordinator and
// workers reconnect, requests in flight are resent (a lost one rolls the
// job back to its checkpoint), and the job ends bitwise equal to the local
// fit.
func TestOwnersNATSServerRestart(t *testing.T) {
	bin := buildBinary(t)
	natsBin := prebuiltOr(t, "EMSF_TEST_NATS_SERVER", "nats-server", "github.com/nats-io/nats-server/v2")
	dir := t.TempDir()
	data := filepath.Join(dir, "data.csv")
	writeTransitions(t, data, 200, 2, 5000)
	fitArgs := []string{"fit", "--input", data, "--order", "4", "--iters", "10", "--tol", "0", "--seed", "6", "--shard-nnz", "1000"}
	local := filepath.Join(dir, "local.arrow")
	if out, err := exec.Command(bin, append(fitArgs, "--out", local, "--quiet")...).CombinedOutput(); err != nil {
		t.Fatalf("local fit: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_ = ln.Close()
	store := t.TempDir()
	startNATS := func() *exec.Cmd {
		cmd := exec.Command(natsBin, "-a", "127.0.0.1", "-p", port, "-js", "-sd", store)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	url := "nats://127.0.0.1:" + port
	ns := startNATS()
	var nc *nats.Conn
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		var err error
		nc, err = nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		return err
	})
	defer nc.Close()
	for k := range 2 {
		cmd := exec.Command(bin, "worker", "--nats", url, "--log-level", "warn", "--task-delay", "150ms")
		out := new(syncBuffer)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("worker %d output:\n%s", k, out.String())
			}
		})
	}
	out := filepath.Join(dir, "cluster.arrow")
	coord := exec.Command(bin, append(fitArgs, "--out", out, "--nats", url, "--min-workers", "2", "--exchange", "owners", "--col-blocks", "3",
		"--checkpoint-every", "2", "--job", "owners-restart", "--wait-workers", "2m")...)
	var coordOut syncBuffer
	coord.Stdout, coord.Stderr = &coordOut, &coordOut
	if err := coord.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- coord.Wait() }()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*coordtest.Patience)
	defer cancel()
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		select {
		case err := <-done:
			t.Fatalf("coordinator exited (%v) before the kill:\n%s", err, coordOut.String())
		default:
		}
		kv, err := js.KeyValue(ctx, wire.DefaultKVBucket)
		if err != nil {
			return err
		}
		e, err := kv.Get(ctx, "owners-restart")
		if err != nil {
			return err
		}
		var st coordinator.JobState
		if err := json.Unmarshal(e.Value(), &st); err != nil {
			return err
		}
		if st.Owners == nil || st.Owners.Version < 2 {
			return fmt.Errorf("checkpoint %+v, want version 2", st.Owners)
		}
		return nil
	})
	_ = ns.Process.Kill()
	_ = ns.Wait()
	startNATS()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("coordinator: %v\n%s", err, coordOut.String())
		}
	case <-ctx.Done():
		t.Fatalf("coordinator did not finish:\n%s", coordOut.String())
	}
	want, err := arrowio.ReadModel(local)
	if err != nil {
		t.Fatal(err)
	}
	got, err := arrowio.ReadModel(out)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Model.Equal(want.Model) {
		t.Fatalf("the model after a nats-server restart differs from the local fit\n%s", coordOut.String())
	}
	// The restart fell mid-fit: the coordinator saw its connection drop.
	// Requests in flight are resent on reconnect (or, when one is lost,
	// the job rolls back to its checkpoint): either way, the same bits.
	if !strings.Contains(coordOut.String(), "disconnected") {
		t.Errorf("the coordinator never saw the server go:\n%s", coordOut.String())
	}
}
