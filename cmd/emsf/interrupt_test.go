package main

import (
	"bufio"
	"bytes"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/emsf/emsf/arrowio"
)

// startUntil starts cmd and returns once a line of its stderr contains
// marker; the rest of stderr is collected into the returned buffer, which
// is complete once wait returns. It fails the test if the process ends
// (or a generous deadline passes) before the marker appears.
func startUntil(t *testing.T, cmd *exec.Cmd, marker string) (wait func() (*bytes.Buffer, error)) {
	t.Helper()
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	seen := make(chan bool, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(pr)
		found := false
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			if !found && strings.Contains(sc.Text(), marker) {
				found = true
				seen <- true
			}
		}
		if !found {
			seen <- false
		}
		io.Copy(io.Discard, pr)
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); pw.Close() }()
	select {
	case ok := <-seen:
		if !ok {
			err := <-exited
			<-copied
			t.Fatalf("%v ended (%v) before printing %q:\n%s", cmd.Args, err, marker, all.String())
		}
	case <-time.After(5 * time.Minute):
		cmd.Process.Kill()
		<-exited
		<-copied
		t.Fatalf("%v printed no %q in 5 minutes:\n%s", cmd.Args, marker, all.String())
	}
	return func() (*bytes.Buffer, error) {
		err := <-exited
		<-copied
		return &all, err
	}
}

// TestFitSignalKeepsModel: a fit that receives SIGINT or SIGTERM after its
// first iterations writes the model of its last completed iteration (status
// interrupted, a finite log-likelihood) and exits non-zero.
func TestFitSignalKeepsModel(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "t.csv")
	writeTransitions(t, data, 200, 2, 20000)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			out := filepath.Join(dir, sig.String()+".arrow")
			// No stopping rule but the (far) time limit (--stop tol with
			// --tol 0: no held-out stop either): only the signal ends this
			// fit. --log-every 0 logs every iteration.
			cmd := exec.Command(bin, "fit", "--input", data, "--order", "8", "--stop", "tol", "--tol", "0", "--iters", "0",
				"--time-limit", "1h", "--log-every", "0", "--workers", "1", "--out", out)
			wait := startUntil(t, cmd, "iter=2")
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			stderr, err := wait()
			if err == nil {
				t.Fatalf("exit 0 after %v; want non-zero\n%s", sig, stderr)
			}
			if !strings.Contains(stderr.String(), "interrupted") || !strings.Contains(stderr.String(), out) {
				t.Errorf("stderr does not say it was interrupted and where the model is:\n%s", stderr)
			}
			mf, err := arrowio.ReadModel(out)
			if err != nil {
				t.Fatalf("no model after %v: %v\n%s", sig, err, stderr)
			}
			if mf.Status != "interrupted" || mf.Model.Iteration < 2 || math.IsNaN(mf.Model.LogLik) || math.IsInf(mf.Model.LogLik, 0) {
				t.Errorf("model status %q iteration %d loglik %v; want interrupted, >= 2, finite", mf.Status, mf.Model.Iteration, mf.Model.LogLik)
			}
			if err := mf.Model.Validate(); err != nil {
				t.Error(err)
			}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if strings.Contains(e.Name(), ".tmp") {
					t.Errorf("temporary file %s left behind", e.Name())
				}
			}
		})
	}
}

// TestExperimentSignalKeepsRuns: an experiment interrupted after its first
// runs writes the CSV of the runs it finished (whole runs only) and exits
// non-zero.
func TestExperimentSignalKeepsRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	// Far more runs than can finish before the signal: only it ends them.
	cmd := exec.Command(bin, "experiment", "sample-size", "--runs", "100000", "--sizes", "2000", "--orders", "5",
		"--workers", "1", "--log-every", "0", "--out", dir)
	wait := startUntil(t, cmd, "done=2 ")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	stderr, err := wait()
	if err == nil {
		t.Fatalf("exit 0 after SIGINT; want non-zero\n%s", stderr)
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("stderr does not say it was interrupted:\n%s", stderr)
	}
	data, err := os.ReadFile(filepath.Join(dir, "sample-size.csv"))
	if err != nil {
		t.Fatalf("no CSV after SIGINT: %v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	// A run is one EMSF and one CNT row.
	rows := len(lines) - 1
	if rows < 4 || rows%2 != 0 || rows >= 2*100000 {
		t.Fatalf("CSV has %d rows; want whole runs (2 rows each), at least the 2 reported done:\n%s", rows, data)
	}
	for _, l := range lines[1:] {
		if strings.Contains(l, ",,") && !strings.Contains(l, "CNT") || strings.HasPrefix(l, ",") {
			t.Errorf("row %q of an unfinished run", l)
		}
	}
}

// TestFitIncrementalSignalKeepsModel: `fit --incremental` (and with
// --online-em) that receives SIGTERM or SIGINT in its third pass writes
// the model of its last completed commit (status interrupted, the commits
// in emsf.iteration, the passes completed in the parameters) and exits
// non-zero; its progress lines give the pass, the transitions read of the
// known total, the commits, the rate and the time left.
func TestFitIncrementalSignalKeepsModel(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "t.csv")
	writeTransitions(t, data, 200, 2, 20000)
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
		args []string
	}{
		{"commits", syscall.SIGTERM, []string{"--commit-every", "5000"}},
		{"online-em", syscall.SIGINT, []string{"--online-em"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, tc.name+".arrow")
			// Far more passes than can run before the signal: only it
			// ends this fit. --log-every 0 logs every batch read.
			args := append([]string{"fit", "--incremental", "--input", data, "--order", "6", "--passes", "1000000",
				"--log-every", "0", "--out", out}, tc.args...)
			cmd := exec.Command(bin, args...)
			wait := startUntil(t, cmd, "pass=3 passes=1000000")
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			stderr, err := wait()
			if err == nil {
				t.Fatalf("exit 0 after %v; want non-zero\n%s", tc.sig, stderr)
			}
			if !strings.Contains(stderr.String(), "interrupted") || !strings.Contains(stderr.String(), out) {
				t.Errorf("stderr does not say it was interrupted and where the model is:\n%s", stderr)
			}
			for _, l := range strings.Split(stderr.String(), "\n") {
				if strings.Contains(l, "pass=3 passes=1000000") {
					for _, w := range []string{"transitions=", "commits=", "transitions_per_s=", "eta="} {
						if !strings.Contains(l, w) {
							t.Errorf("progress line lacks %s: %s", w, l)
						}
					}
					break
				}
			}
			mf, err := arrowio.ReadModel(out)
			if err != nil {
				t.Fatalf("no model after %v: %v\n%s", tc.sig, err, stderr)
			}
			if mf.Status != "interrupted" || mf.Model.Iteration < 2 || mf.Params["incremental"] != "true" {
				t.Errorf("model status %q iteration %d incremental %q; want interrupted, >= 2 commits, true", mf.Status, mf.Model.Iteration, mf.Params["incremental"])
			}
			if p := mf.Params["passes_done"]; p == "" || p == "0" || p == "1" {
				t.Errorf("passes_done %q; want at least 2 (the signal came in pass 3 or later)", p)
			}
			if err := mf.Model.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}
