package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
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
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker"
	"github.com/emsf/emsf/worker/wire"
)

// proc is an emsf (or nats-server) process of a multi-process test: its
// output is kept, done says when it exits, and the test's end stops it
// (continued first, should it be stopped) and shows its output when the
// test failed.
type proc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
}

func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	// A fit of a test written before issue 28 pins plain EM (plainByDefault).
	p := &proc{cmd: exec.Command(bin, plainByDefault(args)...), out: new(syncBuffer), done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Kill()
		<-p.done
		p.done <- nil
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.out.String())
		}
	})
	return p
}

// alive fails the test when p has exited.
func (p *proc) alive(t *testing.T, what string) {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		t.Fatalf("%s exited (%v):\n%s", what, err, p.out.String())
	default:
	}
}

// wait returns p's exit error, failing the test after two Patiences.
func (p *proc) wait(t *testing.T, what string) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(2 * coordtest.Patience):
		t.Fatalf("%s did not finish:\n%s", what, p.out.String())
		return nil
	}
}

// natsProcess runs a nats-server process with JetStream on 127.0.0.1 and
// a free port, its store in a test directory; restart kills it with
// SIGKILL and starts it again on the same port and store.
type natsProcess struct {
	url, port, store, bin string
	p                     *proc
}

func startNATSProcess(t *testing.T) *natsProcess {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_ = ln.Close()
	n := &natsProcess{url: "nats://127.0.0.1:" + port, port: port, store: t.TempDir(),
		bin: prebuiltOr(t, "EMSF_TEST_NATS_SERVER", "nats-server", "github.com/nats-io/nats-server/v2")}
	n.start(t)
	return n
}

func (n *natsProcess) start(t *testing.T) {
	n.p = startProc(t, "nats-server", n.bin, "-a", "127.0.0.1", "-p", n.port, "-js", "-sd", n.store)
}

func (n *natsProcess) restart(t *testing.T) {
	_ = n.p.cmd.Process.Kill()
	<-n.p.done
	n.p.done <- nil
	n.start(t)
}

// connect connects to n, retrying while it starts, reconnecting forever.
func (n *natsProcess) connect(t *testing.T) *nats.Conn {
	t.Helper()
	var nc *nats.Conn
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		var err error
		nc, err = nats.Connect(n.url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		return err
	})
	t.Cleanup(nc.Close)
	return nc
}

// ownersCase is the data and local model of an owners-exchange process
// test: fitArgs fit the data; want is the local fit's model.
type ownersCase struct {
	bin     string
	dir     string
	fitArgs []string
	want    *factor.Model
}

func newOwnersCase(t *testing.T, seed, iters, shardNNZ int) *ownersCase {
	t.Helper()
	c := &ownersCase{bin: buildBinary(t), dir: t.TempDir()}
	data := filepath.Join(c.dir, "data.csv")
	writeTransitions(t, data, 200, 2, 5000)
	c.fitArgs = []string{"fit", "--input", data, "--order", "4", "--iters", strconv.Itoa(iters), "--tol", "0",
		"--seed", strconv.Itoa(seed), "--shard-nnz", strconv.Itoa(shardNNZ), "--plain", // the owners exchange runs plain EM
		"--log-every", "0"} // the tests read every iteration's "cluster iteration" line
	local := filepath.Join(c.dir, "local.arrow")
	if out, err := exec.Command(c.bin, append(c.fitArgs, "--out", local, "--quiet")...).CombinedOutput(); err != nil {
		t.Fatalf("local fit: %v\n%s", err, out)
	}
	mf, err := arrowio.ReadModel(local)
	if err != nil {
		t.Fatal(err)
	}
	c.want = mf.Model
	return c
}

// workers starts n `emsf worker` processes on url; extra(k) adds flags.
func (c *ownersCase) workers(t *testing.T, url string, n int, extra func(k int) []string) []*proc {
	t.Helper()
	var ps []*proc
	for k := range n {
		args := []string{"worker", "--nats", url, "--log-level", "warn"}
		if extra != nil {
			args = append(args, extra(k)...)
		}
		ps = append(ps, startProc(t, fmt.Sprintf("worker %d", k), c.bin, args...))
	}
	return ps
}

// check fails the test unless the model file at out is the local fit's.
func (c *ownersCase) check(t *testing.T, out, what string, log string) {
	t.Helper()
	got, err := arrowio.ReadModel(out)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Model.Equal(c.want) {
		t.Fatalf("%s: the model differs from the local fit\n%s", what, log)
	}
}

// waitCheckpoint waits until job's state in KV names a checkpoint of at
// least version v, while coord runs.
func waitCheckpoint(t *testing.T, nc *nats.Conn, job string, v int, coord *proc) {
	t.Helper()
	waitJobState(t, nc, job, coord, func(st *coordinator.JobState) error {
		if st.Owners == nil || st.Owners.Version < v {
			return fmt.Errorf("checkpoint %+v, want version %d", st.Owners, v)
		}
		return nil
	})
}

// waitJobState waits until job's state in KV passes ok, while coord
// runs.
func waitJobState(t *testing.T, nc *nats.Conn, job string, coord *proc, ok func(st *coordinator.JobState) error) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		coord.alive(t, "coordinator")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		kv, err := js.KeyValue(ctx, wire.DefaultKVBucket)
		if err != nil {
			return err
		}
		e, err := kv.Get(ctx, job)
		if err != nil {
			return err
		}
		var st coordinator.JobState
		if err := json.Unmarshal(e.Value(), &st); err != nil {
			return err
		}
		return ok(&st)
	})
}

// waitHoldsTask waits until the worker whose output is out (it prints
// "worker ID" first) reports a task running in $SRV.STATS, checking
// alive each time.
func waitHoldsTask(t *testing.T, nc *nats.Conn, out *syncBuffer, alive func()) {
	t.Helper()
	id := ""
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		if f := strings.Fields(out.String()); len(f) > 1 && f[0] == "worker" {
			id = f[1]
			return nil
		}
		return fmt.Errorf("the worker did not print its id")
	})
	statsSubj, err := micro.ControlSubject(micro.StatsVerb, wire.ServiceName, id)
	if err != nil {
		t.Fatal(err)
	}
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		alive()
		m, err := nc.Request(statsSubj, nil, 10*time.Second)
		if err != nil {
			return fmt.Errorf("worker %s stats: %w", id, err)
		}
		var ms micro.Stats
		if err := json.Unmarshal(m.Data, &ms); err != nil || len(ms.Endpoints) == 0 {
			return fmt.Errorf("worker %s stats %s (%v)", id, m.Data, err)
		}
		var ws worker.Stats
		if err := json.Unmarshal(ms.Endpoints[0].Data, &ws); err != nil || ws.Running == 0 {
			return fmt.Errorf("worker %s holds no task: %s (%v)", id, ms.Endpoints[0].Data, err)
		}
		return nil
	})
}
