package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestREADME runs the README's shell examples in order, as written, in a
// temporary directory: the quick start, fit, incremental, gen/eval/
// inspect/trick, the cluster with --embedded and the service walkthrough
// (emsf is the binary built here, also for `go run ./cmd/emsf`). A line
// ending in & runs in the background until the end; the lines after it
// are retried until they succeed (they wait for it to be ready).
func TestREADME(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every README example")
	}
	// readmeSkips are the README's shell lines the README test does not run,
	// each with why: they need what a test does not have (a NATS server
	// elsewhere), take minutes, or are the test suite itself. Every other
	// line of every ```sh block runs.
	readmeSkips := []struct{ prefix, why string }{
		{"go test ", "the test suite itself"},
		{"go install ", "installs into the user's GOPATH; the test builds the binary"},
		{"go build ", "the test builds the binary"},
		{"nats-server ", "a NATS server installed separately"},
		{"emsf bench", "timing runs of minutes (bench has its own tests)"},
		{"emsf experiment ", "the reduced settings run for about a minute each (experiment has its own tests)"},
		{"sudo scripts/netns-cluster.sh", "needs root, network namespaces and tc (the harness of docs/scaling.md)"},
		{"emsf scaling --check ", "reads the output of the netns harness above"},
		{"KEEP=/tmp/emsf-bench scripts/bench_goals.sh", "minutes of timing beside pandas and scikit-learn (a benchmark, not a test)"},
	}
	// readmeRemote matches lines that talk to a server on another machine.
	readmeRemote := regexp.MustCompile(`nats://host`)

	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllSubmatch(readme, -1) {
		for _, l := range strings.Split(string(block[1]), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				lines = append(lines, l)
			}
		}
	}
	if len(lines) < 20 {
		t.Fatalf("found %d shell lines in README.md; the pattern no longer matches its blocks", len(lines))
	}

	bin := buildBinary(t)
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "tmp") // emsf demo writes its files to a new folder there
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + tmp}
	var background []*exec.Cmd
	t.Cleanup(func() {
		for _, c := range background {
			syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
			c.Wait()
		}
	})
	waiting := false // a background command may not be ready yet
	ran := 0
next:
	for _, line := range lines {
		cmdline := strings.TrimSpace(regexp.MustCompile(`\s+#.*$`).ReplaceAllString(line, ""))
		cmdline = strings.ReplaceAll(cmdline, "go run ./cmd/emsf", "emsf")
		cmdline = strings.ReplaceAll(cmdline, "./emsf ", "emsf ")
		for _, s := range readmeSkips {
			if strings.HasPrefix(cmdline, s.prefix) {
				t.Logf("skip %q: %s", line, s.why)
				continue next
			}
		}
		if readmeRemote.MatchString(cmdline) {
			t.Logf("skip %q: a NATS server on another machine", line)
			continue
		}
		if bg, ok := strings.CutSuffix(cmdline, "&"); ok {
			if strings.Contains(bg, "--embedded") && !strings.Contains(bg, "--port") {
				// The walkthrough's embedded server listens on NATS's
				// default port, which the test cannot move.
				ln, err := net.Listen("tcp", "127.0.0.1:4222")
				if err != nil {
					t.Skipf("port 4222 is in use; the README's service walkthrough needs it: %v", err)
				}
				ln.Close()
			}
			c := exec.Command("bash", "-c", "exec "+bg)
			c.Dir, c.Env = dir, env
			c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			var out bytes.Buffer
			c.Stdout, c.Stderr = &out, &out
			if err := c.Start(); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			background = append(background, c)
			waiting = true
			ran++
			continue
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			c := exec.Command("bash", "-c", cmdline)
			c.Dir, c.Env = dir, env
			out, err := c.CombinedOutput()
			if err == nil {
				break
			}
			if !waiting || time.Now().After(deadline) {
				t.Fatalf("README line %q failed: %v\n%s", line, err, out)
			}
			time.Sleep(200 * time.Millisecond) // polling a condition: the background service being ready
		}
		ran++
	}
	t.Logf("ran %d README lines", ran)
	for _, f := range []string{"model.arrow", "best.arrow", "model2.arrow", "inc.arrow", "m.arrow"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the README's examples did not write %s: %v", f, err)
		}
	}
	if demo, _ := filepath.Glob(filepath.Join(tmp, "emsf-demo-*", "model.arrow")); len(demo) == 0 {
		t.Errorf("the README's emsf demo wrote no model in a new folder of TMPDIR")
	}
}
