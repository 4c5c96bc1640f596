package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator"
	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/wire"
)

// buildBinary builds emsf into a temporary directory, or returns
// $EMSF_TEST_BINARY when set (a prebuilt emsf, for running the compiled
// tests on a machine without Go: scripts/stress-tests.sh's notes).
func buildBinary(t *testing.T) string {
	t.Helper()
	return prebuiltOr(t, "EMSF_TEST_BINARY", "emsf", ".")
}

// prebuiltOr returns the binary named by the environment variable env, or
// builds pkg into a temporary file called name.
func prebuiltOr(t *testing.T, env, name, pkg string) string {
	t.Helper()
	if bin := os.Getenv(env); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), name)
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// embeddedNATS starts an embedded NATS server with JetStream in a
// temporary store (noSync: without fsync, for tests that never crash it)
// and returns its URL and a connection to it, both closed at the test's end.
func embeddedNATS(t *testing.T, noSync bool) (string, *nats.Conn) {
	t.Helper()
	srv, err := natsexec.StartEmbedded(natsexec.EmbeddedConfig{StoreDir: t.TempDir(), NoSync: noSync})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return srv.ClientURL(), nc
}

// writeTransitions writes a small CSV of random transitions with locality.
func writeTransitions(t *testing.T, path string, n, u, count int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, 6))
	var b bytes.Buffer
	b.WriteString("state,action,next_state\n")
	for range count {
		i := rng.IntN(n)
		fmt.Fprintf(&b, "%d,%d,%d\n", i, rng.IntN(u), (i+rng.IntN(15))%n)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a bytes.Buffer safe for a process's output and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestClusterKillWorker runs a NATS server (embedded in the test, on
// 127.0.0.1), three `emsf worker` processes and an `emsf fit --nats`
// coordinator process; one worker gets SIGKILL while iteration 3 runs. The
// model must be bitwise the one of a plain local `emsf fit`, and every
// iteration must have seen Σx = N.
//
// No race decides when to kill: worker 0 holds every task of iteration 3
// and later until it dies (--task-delay-from 3), and the lease is longer
// than the test waits, so the fit cannot pass the iteration of the task
// it holds before the kill, and only the coordinator's probe noticing the
// dead worker lets it end.
func TestClusterKillWorker(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data.csv")
	writeTransitions(t, data, 200, 2, 5000)
	fitArgs := []string{"fit", "--input", data, "--order", "4", "--iters", "8", "--tol", "0", "--seed", "3", "--shard-nnz", "150"}

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

	out := filepath.Join(dir, "cluster.arrow")
	coord := exec.Command(bin, append(fitArgs, "--out", out, "--nats", url, "--min-workers", "3", "--exchange", "coordinator", "--log-every", "0",
		"--worker-timeout", "1h", "--job", "killtest")...)
	var coordOut syncBuffer
	coord.Stdout, coord.Stderr = &coordOut, &coordOut
	if err := coord.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- coord.Wait() }()

	// Kill worker 0 once iteration 2 is committed (by then every task of
	// iterations 1 and 2 has been answered) and it holds a task: one of
	// iteration 3, which it holds until it dies. (Of a later iteration
	// should the coordinator's census, refreshed every 5s, have missed
	// worker 0 under load and handed iteration 3 to the others.)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	coordinatorAlive := func() {
		select {
		case err := <-done:
			t.Fatalf("coordinator exited (%v) before the kill:\n%s", err, coordOut.String())
		default:
		}
	}
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		coordinatorAlive()
		kv, err := js.KeyValue(ctx, wire.DefaultKVBucket)
		if err != nil {
			return err
		}
		e, err := kv.Get(ctx, "killtest")
		if err != nil {
			return err
		}
		var st coordinator.JobState
		if err := json.Unmarshal(e.Value(), &st); err != nil {
			return err
		}
		if st.Iteration < 2 {
			return fmt.Errorf("iteration %d committed, want 2", st.Iteration)
		}
		return nil
	})
	waitHoldsTask(t, nc, workerOut[0], coordinatorAlive)
	if err := workers[0].Process.Signal(syscall.SIGKILL); err != nil {
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

	// Every iteration saw the same Σx (the coordinator fails a pass whose
	// Σx differs from N), and some task was handed out again.
	re := regexp.MustCompile(`cluster iteration: .*iter=(\d+) .*retried=(\d+) .*sum_x=(\S+)`)
	var iters, retried int
	sumX := ""
	sc := bufio.NewScanner(strings.NewReader(coordOut.String()))
	for sc.Scan() {
		m := re.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		iters++
		var r int
		fmt.Sscan(m[2], &r)
		retried += r
		if sumX == "" {
			sumX = m[3]
		} else if m[3] != sumX {
			t.Errorf("iteration %s saw Σx = %s, iteration 1 saw %s", m[1], m[3], sumX)
		}
	}
	if iters != 8 {
		t.Errorf("coordinator logged %d iterations, want 8:\n%s", iters, coordOut.String())
	}
	if retried == 0 {
		t.Errorf("no task was handed out again after the kill:\n%s", coordOut.String())
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
		t.Fatalf("cluster model with a killed worker differs from the local fit's\n%s", coordOut.String())
	}
	t.Logf("%d tasks handed out again after the kill", retried)

	// SIGTERM drains a worker, which then exits 0.
	if err := workers[1].Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	werr := make(chan error, 1)
	go func() { werr <- workers[1].Wait() }()
	select {
	case err := <-werr:
		if err != nil {
			t.Errorf("worker after SIGTERM: %v\n%s", err, workerOut[1].String())
		}
	case <-time.After(coordtest.Patience):
		t.Errorf("worker did not exit within %v of SIGTERM", coordtest.Patience)
	}
}

// fitCluster --embedded (server and workers in this process) gives
// bitwise factor.Fit's model.
func TestFitClusterEmbedded(t *testing.T) {
	var c clusterFlags
	fs := flag.NewFlagSet("fit", flag.ContinueOnError)
	c.register(fs)
	if err := fs.Parse([]string{"--embedded", "--store", t.TempDir(), "--nats", ""}); err != nil {
		t.Fatal(err)
	}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if !c.enabled() {
		t.Fatal("cluster mode not enabled by --embedded")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var ct shard.Counter
	for range 3000 {
		i := rng.IntN(150)
		if err := ct.Add(i, rng.IntN(2), (i+rng.IntN(10))%150, 1); err != nil {
			t.Fatal(err)
		}
	}
	shards, man := shard.Split(ct.Matrices(2), 150, 200)
	want := factor.NewRandom(150, 3, 2, factor.TieSharedK, 9)
	got := want.Clone()
	opts := factor.FitOptions{Converger: factor.Converger{Tol: 1e-9, MaxIter: 4}}
	if _, err := factor.Fit(context.Background(), want, shard.Blocks(shards), opts); err != nil {
		t.Fatal(err)
	}
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.Discard})
	res, err := fitCluster(context.Background(), &c, log, shards, man, got, opts, 2)
	if err != nil {
		t.Fatal(err)
	}
	if res.Iterations != 4 || !got.Equal(want) {
		t.Fatalf("embedded cluster fit (%d iterations) differs from factor.Fit", res.Iterations)
	}
}

func TestClusterFlagsValidate(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--embedded", "--nats", "nats://x:4222"}, "--embedded"},
		{[]string{"--nats", "nats://x:4222", "--store", "/tmp/x"}, "--store"},
		{[]string{"--nats", "nats://x:4222", "--tls-cert", "c.pem"}, "--tls-cert"},
		{[]string{"--nats", "nats://x:4222", "--subject-prefix", "a b"}, "--subject-prefix"},
		{[]string{"--nats", "nats://x:4222", "--bucket-objects", "a.b"}, "--bucket-objects"},
		{[]string{"--nats", "nats://x:4222", "--worker-timeout", "0s"}, "--worker-timeout"},
		{[]string{"--nats", "nats://x:4222", "--worker-probe", "-1s"}, "--worker-probe"},
	} {
		var c clusterFlags
		fs := flag.NewFlagSet("fit", flag.ContinueOnError)
		c.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := c.validate()
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: err = %v, want one naming %s", tc.args, err, tc.flag)
		}
	}
}

// --worker-wait is --wait-workers under the name: both set how
// long a cluster fit waits for workers.
func TestClusterWorkerWaitAlias(t *testing.T) {
	for _, name := range []string{"--wait-workers", "--worker-wait"} {
		var c clusterFlags
		fs := flag.NewFlagSet("fit", flag.ContinueOnError)
		c.register(fs)
		if err := fs.Parse([]string{name, "7s"}); err != nil {
			t.Fatal(err)
		}
		if c.waitWorkers != 7*time.Second {
			t.Errorf("%s 7s: waits %v", name, c.waitWorkers)
		}
	}
}
