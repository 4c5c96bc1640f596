package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/emsf/emsf/coordinator"
)

// TestCoordinatorKillResumeDefault: a cluster fit with fit's defaults
// (SQUAREM, MAP-EM, the held-out rule; --exchange coordinator) whose
// coordinator gets SIGKILL mid-fit, after a resume point is in the KV
// bucket, goes on with `fit --resume` from that point (its loop state:
// the cycles' points, the best iterates, the rule's choices) and writes
// byte for byte the file of the local fit with the same flags.
func TestCoordinatorKillResumeDefault(t *testing.T) {
	bin, dir := buildBinary(t), t.TempDir()
	data := filepath.Join(dir, "data.csv")
	writeTransitions(t, data, 200, 3, 6000)
	// --stop auto: fit's defaults (startProc adds --plain to a fit that
	// names no flag of issue 28).
	fit := []string{"fit", "--input", data, "--order", "4", "--seed", "3", "--shard-nnz", "400", "--log-every", "0", "--stop", "auto"}
	local := filepath.Join(dir, "local.arrow")
	if out, err := exec.Command(bin, append(fit, "--out", local, "--quiet")...).CombinedOutput(); err != nil {
		t.Fatalf("local fit: %v\n%s", err, out)
	}
	url, nc := embeddedNATS(t, true)
	c := &ownersCase{bin: bin, dir: dir}
	// Slow tasks, so that the kill falls mid-fit.
	c.workers(t, url, 2, func(int) []string { return []string{"--task-delay", "20ms"} })
	out := filepath.Join(dir, "cluster.arrow")
	args := append(fit, "--out", out, "--nats", url, "--min-workers", "2", "--exchange", "coordinator", "--job", "default-resume")
	coord := startProc(t, "coordinator", bin, args...)
	var at int
	waitJobState(t, nc, "default-resume", coord, func(st *coordinator.JobState) error {
		if st.Loop == nil || st.Loop.Iteration < 5 || st.Loop.CycleObject == "" {
			return fmt.Errorf("no resume point past iteration 4 with a cycle point yet: %+v", st.Loop)
		}
		at = st.Loop.Iteration
		return nil
	})
	if err := coord.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = coord.wait(t, "coordinator")
	if _, err := os.Stat(out); err == nil {
		t.Fatalf("the killed coordinator wrote %s", out)
	}
	msg, err := exec.Command(bin, append(args, "--resume")...).CombinedOutput()
	if err != nil {
		t.Fatalf("resume: %v\n%s", err, msg)
	}
	if !strings.Contains(string(msg), "resuming") || !strings.Contains(string(msg), "held-out optimum") {
		t.Errorf("the resumed run did not resume (from iteration %d or later) to the held-out optimum:\n%s", at, msg)
	}
	sameFile(t, out, local)
}
