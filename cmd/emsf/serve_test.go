package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/service"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// serveProc is an emsf serve process of a test.
type serveProc struct {
	cmd      *exec.Cmd
	out, err syncBuffer
}

func startServe(t *testing.T, bin, url, name string, extra ...string) *serveProc {
	t.Helper()
	p := &serveProc{}
	args := append([]string{"serve", "--nats", url, "--name", name, "--order", "3", "--iters", "8", "--tol", "0",
		"--use-workers", "no", "--workers", "1", "--log-level", "debug"}, extra...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *serveProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("emsf serve exited with %v\n%s", err, p.err.String())
	}
}

func serveStatus(nc *nats.Conn, name string) (service.Status, error) {
	var st service.Status
	m, err := nc.Request(service.StatusSubject("emsf", name), nil, 2*time.Second)
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(m.Data, &st)
}

// TestServeKillExactlyOnce: `emsf serve` gets SIGKILL while it counts a
// stream of 60 messages (published by `emsf publish`) after a checkpoint;
// after a restart its counts equal the stream's contents exactly, and a
// retrain gives bitwise the model of a service that never crashed.
func TestServeKillExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	bin := buildBinary(t)
	url, nc := embeddedNATS(t, false)

	// 3000 transitions with counts 0.5, 1 and 2 (their sums are exact in
	// any order, so equality below is exact whatever the replay did).
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(3, 4))
	// The crash stream gets the same 60 messages of 50 rows as the clean
	// one, in two parts: the first 20 messages (1000 rows), then the
	// other 40.
	var b, first, rest bytes.Buffer
	var want shard.Table
	for _, w := range []*bytes.Buffer{&b, &first, &rest} {
		w.WriteString("state,action,next_state,count\n")
	}
	for k := range 3000 {
		i, a, j, c := rng.IntN(40), rng.IntN(2), rng.IntN(40), []float64{0.5, 1, 2}[rng.IntN(3)]
		part := &rest
		if k < 1000 {
			part = &first
		}
		for _, w := range []*bytes.Buffer{&b, part} {
			fmt.Fprintf(w, "%d,%d,%d,%v\n", i, a, j, c)
		}
		_ = want.Add(i, a, j, c)
	}
	publishFile := func(name string, w *bytes.Buffer, messages int) {
		t.Helper()
		path := filepath.Join(dir, fmt.Sprintf("%s-%d.csv", name, messages))
		if err := os.WriteFile(path, w.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "publish", "--nats", url, "--name", name, "--input", path, "--max-rows", "50", "--create").CombinedOutput()
		if err != nil || !strings.Contains(string(out), fmt.Sprintf("in %d messages", messages)) {
			t.Fatalf("emsf publish: %v\n%s", err, out)
		}
	}
	publishFile("clean", &b, 60)
	publishFile("crash", &first, 20)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// checkpoint reads the crash service's checkpoint from the Object Store.
	checkpoint := func() (*shard.Table, arrowio.CountsMeta) {
		t.Helper()
		obs, err := js.ObjectStore(t.Context(), service.DefaultModelBucket)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := obs.GetBytes(t.Context(), service.StateObject("crash"))
		if err != nil {
			t.Fatal(err)
		}
		got, meta, err := arrowio.DecodeCounts(raw)
		if err != nil {
			t.Fatal(err)
		}
		return got, meta
	}

	// A checkpoint of the first 20 messages (written by a clean stop).
	p := startServe(t, bin, url, "crash", "--checkpoint-every", "1h")
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		if st, err := serveStatus(nc, "crash"); err != nil || st.StreamSeq != 20 {
			return fmt.Errorf("serve counted up to %d (%v)\n%s", st.StreamSeq, err, p.err.String())
		}
		return nil
	})
	p.stop(t)
	if _, meta := checkpoint(); meta.Seq != 20 {
		t.Fatalf("checkpoint at sequence %d after a clean stop at 20", meta.Seq)
	}

	// The crash: the rest of the stream arrives, and SIGKILL comes once
	// the service counted some of it. It writes no checkpoint before its
	// stop (--checkpoint-every 1h, no version), so what it counted after
	// sequence 20 is lost and must be counted again after the restart.
	publishFile("crash", &rest, 40)
	p = startServe(t, bin, url, "crash", "--ingest-delay", "15ms", "--checkpoint-every", "1h")
	var before service.Status
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		st, err := serveStatus(nc, "crash")
		if err != nil || st.StreamSeq <= 20 {
			return fmt.Errorf("serve counted up to %d (%v)\n%s", st.StreamSeq, err, p.err.String())
		}
		before = st
		return nil
	})
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	if _, meta := checkpoint(); meta.Seq != 20 {
		t.Fatalf("checkpoint at sequence %d after the kill, want 20: nothing to replay", meta.Seq)
	}
	t.Logf("killed having counted at least up to sequence %d; checkpoint at 20", before.StreamSeq)

	p = startServe(t, bin, url, "crash", "--checkpoint-every", "120ms")
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		st, err := serveStatus(nc, "crash")
		if err != nil || st.StreamSeq != 60 {
			return fmt.Errorf("restarted serve counted up to %d (%v)\n%s", st.StreamSeq, err, p.err.String())
		}
		if st.Transitions != 3000 || st.Count != want.Sum() {
			return fmt.Errorf("after the restart: %d rows, count %v; want 3000 rows, count %v", st.Transitions, st.Count, want.Sum())
		}
		return nil
	})
	p.stop(t) // checkpoints: the state object must hold the stream exactly
	got, meta := checkpoint()
	if meta.Seq != 60 || meta.Added != 3000 || !reflect.DeepEqual(got.Entries(), want.Entries()) {
		t.Fatalf("checkpoint after the crash: seq %d, %d rows, entries equal %v", meta.Seq, meta.Added, reflect.DeepEqual(got.Entries(), want.Entries()))
	}

	// A retrain after the restart = a retrain of a service that never
	// crashed.
	models := map[string]string{}
	for _, name := range []string{"crash", "clean"} {
		p := startServe(t, bin, url, name, "--metrics-addr", "127.0.0.1:0")
		coordtest.CheckFor(t, coordtest.Patience, func() error {
			st, err := serveStatus(nc, name)
			if err != nil || st.StreamSeq != 60 {
				return fmt.Errorf("%s counted up to %d (%v)", name, st.StreamSeq, err)
			}
			return nil
		})
		if out, err := exec.Command(bin, "retrain", "--nats", url, "--name", name).CombinedOutput(); err != nil {
			t.Fatalf("emsf retrain %s: %v\n%s", name, err, out)
		}
		models[name] = filepath.Join(dir, name+".arrow")
		if out, err := exec.Command(bin, "model", "get", name, "--nats", url, "--out", models[name]).CombinedOutput(); err != nil {
			t.Fatalf("emsf model get %s: %v\n%s", name, err, out)
		}
		// The Prometheus endpoint of this process: what it counted (the
		// crashed service's restart replays nothing now: 0) and one version.
		ingested := map[string]string{"crash": "0", "clean": "3000"}[name]
		metrics := scrape(t, p.err.String())
		for _, want := range []string{
			fmt.Sprintf(`emsf_serve_transitions_ingested_total{model="%s"} %s`, name, ingested),
			fmt.Sprintf(`emsf_serve_versions_total{model="%s"} 1`, name),
			fmt.Sprintf(`emsf_serve_stream_sequence{model="%s"} 60`, name),
			fmt.Sprintf(`emsf_serve_retrain_duration_seconds_count{model="%s"} 1`, name),
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("metrics of %s lack %q", name, want)
			}
		}
		p.stop(t)
	}
	a, err := arrowio.ReadModel(models["crash"])
	if err != nil {
		t.Fatal(err)
	}
	c, err := arrowio.ReadModel(models["clean"])
	if err != nil {
		t.Fatal(err)
	}
	if !a.Model.Equal(c.Model) {
		t.Fatal("the model retrained after the crash differs from the one without a crash")
	}
}

// scrape finds the metrics URL in a serve process's log and returns the
// metrics page.
func scrape(t *testing.T, log string) string {
	t.Helper()
	m := regexp.MustCompile(`url=(http://127\.0\.0\.1:\d+/metrics)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no metrics URL in the log:\n%s", log)
	}
	resp, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", m[1], resp.StatusCode, err)
	}
	return string(body)
}

// An embedded server on a busy port: one clear error at once.
func TestServeEmbeddedPortBusy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	var stdout, stderr bytes.Buffer
	rc := run([]string{"serve", "--embedded", "--store", t.TempDir(), "--port", port, "--name", "x"}, &stdout, &stderr)
	if rc != 1 || !strings.Contains(stderr.String(), "127.0.0.1:"+port) || !strings.Contains(stderr.String(), "address already in use") {
		t.Fatalf("exit %d, stderr %q", rc, stderr.String())
	}
}

// Bad flags of the service commands: one line naming the flag, exit 2.
func TestServeCommandsBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--embedded"}, "--name is required"},
		{[]string{"serve", "--name", "a.b", "--embedded"}, "--name"},
		{[]string{"serve", "--name", "x"}, "give --nats URL"},
		{[]string{"serve", "--name", "x", "--embedded", "--nats", "nats://h:1"}, "cannot be combined"},
		{[]string{"serve", "--name", "x", "--embedded", "--mode", "batch"}, `--mode "batch": want refit, incremental or online-em`},
		{[]string{"serve", "--name", "x", "--embedded", "--alpha", "1.5"}, "--alpha 1.5"},
		{[]string{"serve", "--name", "x", "--embedded", "--mode", "online-em", "--gamma-exp", "0.5"}, "--gamma-exp 0.5: must be in (0.5, 1]"},
		{[]string{"serve", "--name", "x", "--embedded", "--mode", "online-em", "--burn-in", "0"}, "--burn-in 0: must be >= 1"},
		{[]string{"serve", "--name", "x", "--embedded", "--mode", "online-em", "--online-em-floor", "1"}, "--online-em-floor 1: must be in [0, 1)"},
		{[]string{"serve", "--name", "x", "--embedded", "--mode", "online-em", "--online-em-floor", "-0.1"}, "--online-em-floor -0.1"},
		{[]string{"serve", "--name", "x", "--embedded", "--mode", "online-em", "--online-em-floor", "0"}, "--online-em-floor 0: emsf serve needs a floor > 0"},
		{[]string{"serve", "--name", "x", "--embedded", "--every", "-3"}, "--every -3"},
		{[]string{"serve", "--name", "x", "--embedded", "--states", "-1"}, "--states -1"},
		{[]string{"serve", "--name", "x", "--embedded", "--use-workers", "maybe"}, `--use-workers "maybe"`},
		{[]string{"serve", "--name", "x", "--embedded", "--port", "70000"}, "--port 70000"},
		{[]string{"serve", "--name", "x", "--embedded", "--metrics-addr", "9464"}, `--metrics-addr "9464"`},
		{[]string{"serve", "--name", "x", "--embedded", "--tie", "both"}, `--tie "both"`},
		{[]string{"serve", "--name", "x", "--nats", "nats://h:1", "--store", "/tmp/s"}, "--store"},
		{[]string{"serve", "--name", "x", "--embedded", "--plain", "--smooth", "none"}, "--plain sets --smooth itself: give it alone"},
		{[]string{"serve", "--name", "x", "--embedded", "--plain", "--accel", "squarem"}, "--plain sets --accel itself"},
		{[]string{"serve", "--name", "x", "--embedded", "--mode", "incremental", "--validation", "0.2"}, "--validation tunes a refit: it needs --mode refit (not incremental)"},
		{[]string{"serve", "--name", "x", "--embedded", "--validation", "0"}, "--validation 0: must be in (0, 1)"},
		{[]string{"serve", "--name", "x", "--embedded", "--smooth", "kn"}, `--smooth "kn": want auto, background or none`},
		{[]string{"serve", "--name", "x", "--embedded", "--stop", "maybe"}, `--stop "maybe": want auto, validation or tol`},
		{[]string{"serve", "--name", "x", "--embedded", "--stop", "tol", "--patience", "3"}, "--patience and --min-gain tune --stop validation"},
		{[]string{"serve", "--name", "x", "--embedded", "--patience", "0"}, "--patience 0: must be >= 1"},
		{[]string{"serve", "--name", "x", "--embedded", "--min-gain", "-1"}, "--min-gain -1: must be a number >= 0"},
		{[]string{"publish", "--name", "x"}, "--input is required"},
		{[]string{"publish", "--input", "f.csv"}, "--name is required"},
		{[]string{"publish", "--name", "x", "--input", "f.csv", "--max-rows", "-1"}, "--max-rows -1"},
		{[]string{"retrain", "--name", "x", "--timeout", "0s"}, "--timeout 0s"},
		{[]string{"model", "get", "x"}, "--out is required"},
		{[]string{"model", "get", "x", "--out", "m.arrow", "--version", "-2"}, "--version -2"},
		{[]string{"model", "drop", "x"}, `unknown subcommand "drop"`},
		{[]string{"model"}, "name a subcommand"},
	} {
		var stdout, stderr bytes.Buffer
		rc := run(c.args, &stdout, &stderr)
		if rc != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("emsf %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(c.args, " "), rc, stderr.String(), c.want)
		}
	}
}

// The client commands against a server where nothing is served: clear
// errors, exit 1, no file written.
func TestServeClientErrors(t *testing.T) {
	url, _ := embeddedNATS(t, true)
	out := filepath.Join(t.TempDir(), "m.arrow")
	bad := filepath.Join(t.TempDir(), "bad.csv")
	if err := os.WriteFile(bad, []byte("state,action,next_state\n1,0,2\n3,0,-4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"retrain", "--nats", url, "--name", "none"}, "no emsf serve answers for model none"},
		{[]string{"model", "status", "none", "--nats", url}, "no emsf serve answers"},
		{[]string{"model", "get", "none", "--nats", url, "--out", out}, "bucket"},
		{[]string{"publish", "--nats", url, "--name", "none", "--input", bad}, `row 2, column "next_state"`},
	} {
		var stdout, stderr bytes.Buffer
		rc := run(c.args, &stdout, &stderr)
		if rc != 1 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("emsf %s: exit %d, stderr %q; want exit 1 and %q", strings.Join(c.args, " "), rc, stderr.String(), c.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("model get wrote a file after an error")
	}
	// The bad file published nothing: the stream (created by nobody) is
	// absent or empty.
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if s, err := js.Stream(t.Context(), service.StreamName("emsf", "none")); err == nil {
		if info, err := s.Info(t.Context()); err == nil && info.State.Msgs > 0 {
			t.Errorf("a bad file published %d messages", info.State.Msgs)
		}
	}
}

// emsf serve's flags start from service.DefaultConfig (the one place the
// defaults are written): with no flag but the name, the Config is the
// defaults; every Config field a flag sets has that flag named in errors.
func TestServeFlagsDefaults(t *testing.T) {
	var stdout, stderr bytes.Buffer
	e := &env{stdout: &stdout, stderr: &stderr}
	fs := newFlagSet(e, "serve", "serve")
	var f serveFlags
	f.register(fs)
	if err := parse(fs, []string{"--name", "x", "--embedded"}); err != nil {
		t.Fatal(err)
	}
	f.url = ""
	got, err := f.config(fs)
	if err != nil {
		t.Fatal(err)
	}
	want := service.DefaultConfig()
	// serve's own defaults beside the Config's: SQUAREM refits with emsf
	// fit's quality (the Config's zero values are plain EM, no rule) and
	// the binary's version.
	want.Name, want.Accel, want.Version, want.Quality = "x", factor.AccelSquarem, semver(), service.DefaultQuality()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("serve's Config with default flags:\n%+v\nwant service.DefaultConfig():\n%+v", got, want)
	}
	for field, name := range serveFieldFlags {
		if fs.Lookup(name) == nil {
			t.Errorf("field %s: no flag --%s", field, name)
		}
	}
	for _, c := range []struct{ args, want string }{
		{"--iters 0", "--iters 0: must be >= 1"},
		{"--workers 0", "--workers 0: must be >= 1"},
		{"--checkpoint-every 0s", "--checkpoint-every 0s: must be > 0"},
		{"--stream-purge always", `--stream-purge "always": want checkpointed or never`},
		{"--buffer-rows 0", "--buffer-rows 0: must be >= 1"},
		{"--replicas 7", "--replicas 7: must be in [1, 5]"},
		{"--max-model-bytes 10", "--max-model-bytes 10: does not hold a model"},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"serve", "--name", "x", "--embedded"}, strings.Fields(c.args)...)
		if rc := run(args, &stdout, &stderr); rc != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("emsf %s: exit %d, %q; want exit 2 and %q", strings.Join(args, " "), rc, stderr.String(), c.want)
		}
	}
}
