package main

import (
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/emsf/emsf/coordinator/coordtest"
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
	c := newOwnersCase(t, 3, 6, 150)
	for _, fault := range []struct {
		name string
		sig  syscall.Signal
	}{{"kill", syscall.SIGKILL}, {"stop", syscall.SIGSTOP}} {
		t.Run(fault.name, func(t *testing.T) {
			url, nc := embeddedNATS(t, true)
			workers := c.workers(t, url, 3, func(k int) []string {
				if k == 0 {
					return []string{"--task-delay", "1h", "--task-delay-from", "3"}
				}
				return nil
			})
			out := filepath.Join(c.dir, fault.name+".arrow")
			coord := startProc(t, "coordinator", c.bin, append(c.fitArgs, "--out", out, "--nats", url, "--min-workers", "3", "--exchange", "owners",
				"--col-blocks", "5", "--checkpoint-every", "2", "--worker-timeout", "1h", "--worker-frozen", "3s", "--job", "owners-"+fault.name)...)
			// Worker 0 holds a task of iteration 3.
			coordtest.CheckFor(t, coordtest.Patience, func() error {
				coord.alive(t, "coordinator")
				if !strings.Contains(coord.out.String(), "exchange=owners iter=2 ") {
					return fmt.Errorf("iteration 2 not committed yet")
				}
				return nil
			})
			waitHoldsTask(t, nc, workers[0].out, func() { coord.alive(t, "coordinator") })
			if err := workers[0].cmd.Process.Signal(fault.sig); err != nil {
				t.Fatal(err)
			}
			if err := coord.wait(t, "coordinator"); err != nil {
				t.Fatalf("coordinator: %v\n%s", err, coord.out.String())
			}
			log := coord.out.String()
			if !strings.Contains(log, "rolling back to the last checkpoint") {
				t.Errorf("no rollback logged:\n%s", log)
			}
			re := regexp.MustCompile(`exchange=owners iter=6 .*workers=2 epoch=\d+ rollbacks=1`)
			if !re.MatchString(log) {
				t.Errorf("the last iteration did not run on 2 workers after one rollback:\n%s", log)
			}
			c.check(t, out, "after a "+fault.name+" of an owner", log)
			// The fit ran from metadata (the workers held the shards, the
			// model and the init), and its file is the local fit's, byte
			// for byte.
			if !strings.Contains(log, "cluster fit from metadata") {
				t.Errorf("the fit did not run from metadata:\n%s", log)
			}
			sameFile(t, out, filepath.Join(c.dir, "local.arrow"))
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
	c := newOwnersCase(t, 5, 10, 1000)
	url, nc := embeddedNATS(t, true)
	// Slow tasks, so that the kill falls mid-fit.
	c.workers(t, url, 2, func(int) []string { return []string{"--task-delay", "150ms"} })
	out := filepath.Join(c.dir, "cluster.arrow")
	args := append(c.fitArgs, "--out", out, "--nats", url, "--min-workers", "2", "--exchange", "owners", "--col-blocks", "3",
		"--checkpoint-every", "2", "--job", "owners-resume")
	coord := startProc(t, "coordinator", c.bin, args...)
	waitCheckpoint(t, nc, "owners-resume", 4, coord)
	if err := coord.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = coord.wait(t, "coordinator")
	if _, err := os.Stat(out); err == nil {
		t.Fatalf("the killed coordinator wrote %s", out)
	}

	// Other parameters: refused, naming them.
	bad := osexec.Command(c.bin, append(slices.Clone(args), "--resume", "--alpha", "0.5")...)
	if msg, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(msg), "alpha") {
		t.Fatalf("--resume with another --alpha: %v\n%s", err, msg)
	}
	msg, err := osexec.Command(c.bin, append(args, "--resume")...).CombinedOutput()
	if err != nil {
		t.Fatalf("resume: %v\n%s", err, msg)
	}
	if !strings.Contains(string(msg), "resuming from the last checkpoint") {
		t.Errorf("the resumed run did not resume:\n%s", msg)
	}
	c.check(t, out, "the resumed owners job", string(msg))
}

// TestOwnersNATSServerRestart: the nats-server under an owners job gets
// SIGKILL after checkpoint 2 and restarts on its store; coordinator and
// workers reconnect, requests in flight are resent (a lost one rolls the
// job back to its checkpoint), and the job ends bitwise equal to the local
// fit.
func TestOwnersNATSServerRestart(t *testing.T) {
	c := newOwnersCase(t, 6, 10, 1000)
	ns := startNATSProcess(t)
	nc := ns.connect(t)
	c.workers(t, ns.url, 2, func(int) []string { return []string{"--task-delay", "150ms"} })
	out := filepath.Join(c.dir, "cluster.arrow")
	coord := startProc(t, "coordinator", c.bin, append(c.fitArgs, "--out", out, "--nats", ns.url, "--min-workers", "2", "--exchange", "owners",
		"--col-blocks", "3", "--checkpoint-every", "2", "--job", "owners-restart", "--wait-workers", "2m")...)
	waitCheckpoint(t, nc, "owners-restart", 2, coord)
	ns.restart(t)
	if err := coord.wait(t, "coordinator"); err != nil {
		t.Fatalf("coordinator: %v\n%s", err, coord.out.String())
	}
	c.check(t, out, "after a nats-server restart", coord.out.String())
	// The restart fell mid-fit: the coordinator saw its connection drop.
	// Requests in flight are resent on reconnect (or, when one is lost,
	// the job rolls back to its checkpoint): either way, the same bits.
	if !strings.Contains(coord.out.String(), "disconnected") {
		t.Errorf("the coordinator never saw the server go:\n%s", coord.out.String())
	}
}

// TestOwnersStraggler: one of three real `emsf worker` processes takes
// 300 ms more per task than the others: the others take its queued shards
// and back up its running ones (first answer wins), the fit never rolls
// back, and the model is bitwise the local fit's.
func TestOwnersStraggler(t *testing.T) {
	c := newOwnersCase(t, 4, 4, 150)
	url, _ := embeddedNATS(t, true)
	c.workers(t, url, 3, func(k int) []string {
		if k == 0 {
			return []string{"--task-delay", "300ms"}
		}
		return nil
	})
	out := filepath.Join(c.dir, "straggler.arrow")
	coord := startProc(t, "coordinator", c.bin, append(c.fitArgs, "--out", out, "--nats", url, "--min-workers", "3", "--exchange", "owners",
		"--col-blocks", "5", "--checkpoint-every", "2", "--job", "owners-straggler")...)
	if err := coord.wait(t, "coordinator"); err != nil {
		t.Fatalf("coordinator: %v\n%s", err, coord.out.String())
	}
	log := coord.out.String()
	if !strings.Contains(log, "straggling task") && !strings.Contains(log, "straggler's queued shard taken") {
		t.Errorf("no backup of the straggler's tasks logged:\n%s", log)
	}
	if strings.Contains(log, "rolling back") {
		t.Errorf("a straggler made the fit roll back:\n%s", log)
	}
	c.check(t, out, "with a straggler", log)
}

// TestOwnersVerifyRogue: `fit --exchange owners --verify 1` on four real
// `emsf worker` processes, one of which computes its tasks wrong from
// iteration 2 on (--task-wrong-from: finite numbers with the right Σx,
// which no other check catches): verification catches it, it is
// quarantined, the job goes back to the checkpoint before its last
// verified answer and replays on the three others, and the model file is
// the local fit's byte for byte.
func TestOwnersVerifyRogue(t *testing.T) {
	c := newOwnersCase(t, 5, 6, 150)
	url, _ := embeddedNATS(t, true)
	c.workers(t, url, 4, func(k int) []string {
		if k == 0 {
			return []string{"--task-wrong-from", "2"}
		}
		return nil
	})
	out := filepath.Join(c.dir, "verify.arrow")
	coord := startProc(t, "coordinator", c.bin, append(c.fitArgs, "--out", out, "--nats", url, "--min-workers", "4", "--exchange", "owners",
		"--col-blocks", "5", "--checkpoint-every", "2", "--verify", "1", "--job", "owners-verify")...)
	if err := coord.wait(t, "coordinator"); err != nil {
		t.Fatalf("coordinator: %v\n%s", err, coord.out.String())
	}
	log := coord.out.String()
	if !regexp.MustCompile(`exchange=owners iter=6 .*workers=3 .*quarantined=1 verifications=\d+ rogues=1`).MatchString(log) {
		t.Errorf("the last iteration did not run on 3 workers with the rogue caught:\n%s", log)
	}
	c.check(t, out, "with a worker that computes wrong", log)
	sameFile(t, out, filepath.Join(c.dir, "local.arrow"))
}
