package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/service"
)

// TestServeFaults runs the multi-process tests of the service mode on one
// build of emsf: the walkthrough's read-your-writes, serve --embedded
// with NATS_URL set, and (not with -short) serve kill -9 during publish
// and replay and a nats-server kill -9 and restart under serve.
func TestServeFaults(t *testing.T) {
	bin := buildBinary(t)
	t.Run("EmbeddedIgnoresNATSURL", func(t *testing.T) { testServeEmbeddedIgnoresNATSURL(t, bin) })
	t.Run("WalkthroughReadYourWrites", func(t *testing.T) { testServeWalkthroughReadYourWrites(t, bin) })
	t.Run("KillDuringPublishAndReplay", func(t *testing.T) { testServeFaultKillDuringPublishAndReplay(t, bin) })
	t.Run("NATSServerRestart", func(t *testing.T) { testServeFaultNATSServerRestart(t, bin) })
}

// startService runs a service in the test process until the test ends.
func startService(t *testing.T, nc *nats.Conn, cfg service.Config) {
	t.Helper()
	svc, err := service.New(t.Context(), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-svc.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
}

// The clear exits of emsf publish: a name nobody serves fails unless
// --create; a file with rows the served model rejects sends nothing and
// exits 1 with the count and the first reasons, unless --allow-rejects.
func TestPublishClearExits(t *testing.T) {
	url, nc := embeddedNATS(t, true)
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.csv")
	if err := os.WriteFile(ok, []byte("state,action,next_state\n0,0,1\n1,1,0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("state,action,next_state\n")
	for k := range 2000 {
		fmt.Fprintf(&b, "%d,%d,%d\n", k%20, k%3, (k*7)%20)
	}
	outside := filepath.Join(dir, "outside.csv")
	if err := os.WriteFile(outside, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.csv")
	if err := os.WriteFile(huge, []byte("state,action,next_state,count\n0,0,1,1e308\n2147483646,0,0,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	startService(t, nc, service.Config{Name: "fixed", Order: 2, States: 10, Actions: 2, UseWorkers: service.WorkersNever})
	startService(t, nc, service.Config{Name: "grow", Order: 2, UseWorkers: service.WorkersNever})

	for _, c := range []struct {
		args     []string
		rc       int
		want     string
		stdout   string
		messages uint64 // in the name's stream after the command
	}{
		{[]string{"--name", "typo", "--input", ok}, 1, "no emsf serve answers for model typo", "", 0},
		{[]string{"--name", "typo", "--input", ok, "--create"}, 0, "no emsf serve answers for model typo now", "stream sequence reached: 1", 1},
		// The stream exists now: it waits there for a serve to start.
		{[]string{"--name", "typo", "--input", ok}, 0, "until one starts", "stream sequence reached: 2", 2},
		{[]string{"--name", "fixed", "--input", outside}, 1, "1531 of 2000 transitions would be rejected by emsf serve, nothing sent", "", 0},
		{[]string{"--name", "fixed", "--input", outside, "--allow-rejects"}, 0, "1531 transitions were sent that emsf serve rejects", "stream sequence reached: 1", 1},
		{[]string{"--name", "grow", "--input", huge}, 1, "2 of 2 transitions would be rejected", "", 0},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"publish", "--nats", url}, c.args...)
		rc := run(args, &stdout, &stderr)
		if rc != c.rc || !strings.Contains(stderr.String(), c.want) || !strings.Contains(stdout.String(), c.stdout) {
			t.Errorf("emsf %s: exit %d, stdout %q, stderr %q; want exit %d, %q", strings.Join(args, " "), rc, stdout.String(), stderr.String(), c.rc, c.want)
		}
	}
	var stdout, stderr bytes.Buffer
	run([]string{"publish", "--nats", url, "--name", "fixed", "--input", outside}, &stdout, &stderr)
	for _, want := range []string{"1531 of 2000", "outside.csv row 3: state 2 --> 14 is outside the served model's 10 states", "row 9: state 8 --> 16"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the reasons %q lack %q", stderr.String(), want)
		}
	}
	stderr.Reset()
	run([]string{"publish", "--nats", url, "--name", "grow", "--input", huge}, &stdout, &stderr)
	for _, want := range []string{"huge.csv row 1: count 1e+308 would take the served model's total count 0 above the limit", "huge.csv row 2: state 2147483646 --> 0 is beyond the served model's limit"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the reasons %q lack %q", stderr.String(), want)
		}
	}
}

// serve --embedded with NATS_URL exported (as the README suggests for the
// client commands) starts its own server and says NATS_URL is ignored;
// --nats with --embedded names the conflict.
func testServeEmbeddedIgnoresNATSURL(t *testing.T, bin string) {
	cmd := exec.Command(bin, "serve", "--embedded", "--store", t.TempDir(), "--port", "-1", "--name", "env", "--use-workers", "no")
	cmd.Env = append(os.Environ(), "NATS_URL=nats://127.0.0.1:1")
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		if !strings.Contains(out.String(), "emsf serve: model env on nats://") {
			return fmt.Errorf("serve did not start: %s %s", out.String(), errb.String())
		}
		return nil
	})
	if !strings.Contains(errb.String(), "NATS_URL ignored") {
		t.Errorf("the log does not say NATS_URL is ignored:\n%s", errb.String())
	}
	var stdout, stderr bytes.Buffer
	rc := run([]string{"serve", "--embedded", "--nats", "nats://h:1", "--name", "x"}, &stdout, &stderr)
	if rc != 2 || !strings.Contains(stderr.String(), "cannot be combined with --nats nats://h:1") {
		t.Errorf("--embedded --nats: exit %d, %q", rc, stderr.String())
	}
}

// The README's walkthrough with real processes: serve --embedded, publish
// a large file, retrain at once, model get: the version holds every
// published transition (emsf retrain waits for ingestion to reach the
// stream's last sequence).
func testServeWalkthroughReadYourWrites(t *testing.T, bin string) {
	// 10^6 in coordinator/service's TestServeRetrainReadsWrites; here a
	// fifth of it keeps the package's race run short.
	n := 200_000
	if testing.Short() {
		n = 50_000
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "t.arrow")
	if out, err := exec.Command(bin, "gen", "--out", data, "--truth", "", "--transitions", strconv.Itoa(n), "--states", "200", "--actions", "3").CombinedOutput(); err != nil {
		t.Fatalf("emsf gen: %v\n%s", err, out)
	}
	// --ingest-delay keeps ingestion behind the publisher: without the
	// wait, the retrain would see only part of the stream.
	cmd := exec.Command(bin, "serve", "--embedded", "--store", filepath.Join(dir, "store"), "--port", "-1", "--name", "demo",
		"--order", "3", "--iters", "2", "--use-workers", "no", "--ingest-delay", "20ms")
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var url string
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		m := regexp.MustCompile(`model demo on (nats://\S+)`).FindStringSubmatch(out.String())
		if m == nil {
			return fmt.Errorf("serve did not start: %s %s", out.String(), errb.String())
		}
		url = m[1]
		return nil
	})
	pub, err := exec.Command(bin, "publish", "--nats", url, "--name", "demo", "--input", data, "--max-rows", "20000").CombinedOutput()
	if err != nil {
		t.Fatalf("emsf publish: %v\n%s", err, pub)
	}
	m := regexp.MustCompile(`stream sequence reached: (\d+)`).FindSubmatch(pub)
	if m == nil {
		t.Fatalf("publish does not print the sequence reached:\n%s", pub)
	}
	ret, err := exec.Command(bin, "retrain", "--nats", url, "--name", "demo").Output()
	if err != nil {
		t.Fatalf("emsf retrain: %v\n%s", err, errb.String())
	}
	var v service.Version
	if err := json.Unmarshal(ret, &v); err != nil {
		t.Fatal(err)
	}
	if v.Transitions != int64(n) || strconv.FormatUint(v.StreamSeq, 10) != string(m[1]) {
		t.Fatalf("retrain right after publish: %d transitions up to sequence %d; want %d up to %s", v.Transitions, v.StreamSeq, n, m[1])
	}
	got, err := exec.Command(bin, "model", "get", "demo", "--nats", url, "--out", filepath.Join(dir, "m.arrow")).CombinedOutput()
	if err != nil || !strings.Contains(string(got), fmt.Sprintf("%d transitions", n)) {
		t.Fatalf("emsf model get: %v\n%s", err, got)
	}
	// --after-seq beyond the stream: a clear error within --wait.
	var stdout, stderr bytes.Buffer
	rc := run([]string{"retrain", "--nats", url, "--name", "demo", "--after-seq", "999999", "--wait", "200ms"}, &stdout, &stderr)
	if rc != 1 || !strings.Contains(stderr.String(), "of the 999999 asked for") {
		t.Fatalf("retrain --after-seq beyond the stream: exit %d, %q", rc, stderr.String())
	}
}

// writeCountedCSV writes n transitions with counts 0.5, 1 and 2 (their
// sums are exact in any order) and returns their total count.
func writeCountedCSV(t *testing.T, path string, n int, seed uint64) float64 {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 4))
	var b bytes.Buffer
	var sum float64
	b.WriteString("state,action,next_state,count\n")
	for range n {
		c := []float64{0.5, 1, 2}[rng.IntN(3)]
		fmt.Fprintf(&b, "%d,%d,%d,%v\n", rng.IntN(30), rng.IntN(2), rng.IntN(30), c)
		sum += c
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return sum
}

// waitCounted waits until serve counted up to seq and returns its status.
func waitCounted(t *testing.T, nc *nats.Conn, name string, seq uint64, p *serveProc) service.Status {
	t.Helper()
	var st service.Status
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		var err error
		st, err = serveStatus(nc, name)
		if err != nil || st.StreamSeq < seq {
			return fmt.Errorf("serve counted up to %d of %d (%v)\n%s", st.StreamSeq, seq, err, p.err.String())
		}
		return nil
	})
	return st
}

// serve gets SIGKILL while emsf publish sends (it goes on: the stream
// holds the messages), again while the restarted serve replays, and
// restarts: it counts exactly what publish had acknowledged, and a
// retrain holds all of it.
func testServeFaultKillDuringPublishAndReplay(t *testing.T, bin string) {
	if testing.Short() {
		t.Skip("multi-process fault test")
	}
	url, nc := embeddedNATS(t, false)
	data := filepath.Join(t.TempDir(), "t.csv")
	const n, per = 6000, 20 // 300 messages
	sum := writeCountedCSV(t, data, n, 7)

	p := startServe(t, bin, url, "kp", "--ingest-delay", "5ms", "--checkpoint-every", "100ms")
	coordtest.CheckFor(t, coordtest.Patience, func() error { _, err := serveStatus(nc, "kp"); return err })
	pub := exec.Command(bin, "publish", "--nats", url, "--name", "kp", "--input", data, "--max-rows", strconv.Itoa(per))
	var pubOut syncBuffer
	pub.Stdout, pub.Stderr = &pubOut, &pubOut
	if err := pub.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pub.Process.Kill(); _ = pub.Wait() }()
	// Kill once serve counted and checkpointed part of the stream, while
	// publish still sends.
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		st, err := serveStatus(nc, "kp")
		if err != nil || st.StreamSeq < 10 || st.Checkpointed == 0 {
			return fmt.Errorf("serve counted up to %d, checkpointed %d (%v)", st.StreamSeq, st.Checkpointed, err)
		}
		return nil
	})
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	// Whether publish was still sending at the kill depends on the
	// machine's speed (the counts are checked either way).
	t.Logf("serve killed; publish had printed %q so far", pubOut.String())
	if err := pub.Wait(); err != nil {
		t.Fatalf("emsf publish while serve was killed: %v\n%s", err, pubOut.String())
	}
	// Publish ran to the end on its own: 300 messages acknowledged.
	if !strings.Contains(pubOut.String(), "stream sequence reached: 300") {
		t.Fatalf("publish: %s", pubOut.String())
	}
	// Restart, kill again during the replay, restart again.
	p = startServe(t, bin, url, "kp", "--ingest-delay", "5ms", "--checkpoint-every", "100ms")
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		st, err := serveStatus(nc, "kp")
		if err != nil || st.Checkpointed < 150 {
			return fmt.Errorf("replay reached %d, checkpointed %d (%v)", st.StreamSeq, st.Checkpointed, err)
		}
		return nil
	})
	if st, _ := serveStatus(nc, "kp"); st.StreamSeq >= 300 {
		t.Logf("the replay ended before the kill (still checked)")
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p = startServe(t, bin, url, "kp")
	st := waitCounted(t, nc, "kp", 300, p)
	if st.Transitions != n || st.Count != sum || st.Rejected != 0 {
		t.Fatalf("after two kills: %d rows, count %v; want %d, %v", st.Transitions, st.Count, n, sum)
	}
	out, err := exec.Command(bin, "retrain", "--nats", url, "--name", "kp").Output()
	var v service.Version
	if err != nil || json.Unmarshal(out, &v) != nil || v.Transitions != n || v.Count != sum {
		t.Fatalf("retrain: %v %s", err, out)
	}
	p.stop(t)
}

// nats-server gets SIGKILL and restarts (same port, same store) under a
// running serve: serve reconnects, counts what is published after, and
// ends with exactly what was acknowledged.
func testServeFaultNATSServerRestart(t *testing.T, bin string) {
	if testing.Short() {
		t.Skip("multi-process fault test")
	}
	ns := startNATSProcess(t)
	url := ns.url
	nc := ns.connect(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.csv"), filepath.Join(dir, "b.csv")
	sum := writeCountedCSV(t, a, 1000, 8) + writeCountedCSV(t, b, 1000, 9)

	p := startServe(t, bin, url, "nr", "--checkpoint-every", "100ms")
	coordtest.CheckFor(t, coordtest.Patience, func() error { _, err := serveStatus(nc, "nr"); return err })
	if out, err := exec.Command(bin, "publish", "--nats", url, "--name", "nr", "--input", a, "--max-rows", "50").CombinedOutput(); err != nil {
		t.Fatalf("publish: %v\n%s", err, out)
	}
	waitCounted(t, nc, "nr", 20, p)
	// The server dies once the stream was purged up to a stored
	// checkpoint: the checkpoint is then the only copy of those counts.
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		if st, err := serveStatus(nc, "nr"); err != nil || st.PurgedTo < 20 {
			return fmt.Errorf("purged up to %d (%v)", st.PurgedTo, err)
		}
		return nil
	})
	ns.restart(t)
	// serve answers again once it has reconnected.
	coordtest.CheckFor(t, coordtest.Patience, func() error { _, err := serveStatus(nc, "nr"); return err })
	if out, err := exec.Command(bin, "publish", "--nats", url, "--name", "nr", "--input", b, "--max-rows", "50").CombinedOutput(); err != nil {
		t.Fatalf("publish after the restart: %v\n%s", err, out)
	}
	st := waitCounted(t, nc, "nr", 40, p)
	if st.Transitions != 2000 || st.Count != sum {
		t.Fatalf("after the nats-server restart: %d rows, count %v; want 2000, %v\n%s", st.Transitions, st.Count, sum, p.err.String())
	}
	// And serve dies too: what it counts again comes from its checkpoint
	// and what the stream still holds, exactly.
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p = startServe(t, bin, url, "nr")
	st = waitCounted(t, nc, "nr", 40, p)
	if st.Transitions != 2000 || st.Count != sum {
		t.Fatalf("after the nats-server restart and a serve kill: %d rows, count %v; want 2000, %v\n%s", st.Transitions, st.Count, sum, p.err.String())
	}
	out, err := exec.Command(bin, "retrain", "--nats", url, "--name", "nr").Output()
	var v service.Version
	if err != nil || json.Unmarshal(out, &v) != nil || v.Transitions != 2000 {
		t.Fatalf("retrain: %v %s\n%s", err, out, p.err.String())
	}
	p.stop(t)
}
