package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestExperimentBlackjack: the command writes blackjack.csv (1 run × 2
// batches × 4 agents = 8 rows with the documented columns, the dealer's
// exact return) and a PNG; bad flags are usage errors naming the flag.
// The experiment's rows are tested in factor/experiment.
func TestExperimentBlackjack(t *testing.T) {
	dir := t.TempDir()
	out := mustEmsf(t, "experiment", "blackjack", "--batches", "2", "--runs", "1", "--orders", "5",
		"--iters", "30", "--seed", "3", "--quiet", "--out", dir)
	if !strings.Contains(out, "wrote "+filepath.Join(dir, "blackjack.csv")+" (8 rows)") {
		t.Errorf("output:\n%s", out)
	}
	rows := readCSV(t, filepath.Join(dir, "blackjack.csv"))
	if got := strings.Join(rows[0], ","); got != "run,seed,agent,batch,hands,return" {
		t.Fatalf("header %q", got)
	}
	if len(rows) != 9 {
		t.Fatalf("%d rows, want 8 and a header", len(rows)-1)
	}
	if got := strings.Join(rows[1], ","); !strings.HasPrefix(got, "0,3,dealer,1,100,-0.0758") {
		t.Errorf("first row %q, want the dealer's first batch", got)
	}
	checkPNG(t, filepath.Join(dir, "blackjack.png"))

	for _, bad := range [][]string{{"--runs", "0"}, {"--batches", "-1"}, {"--orders", "0"}, {"--orders", "10,x"},
		{"--eval-hands", "-5"}, {"--epsilon", "0"}} {
		code, _, errs := emsf(t, append([]string{"experiment", "blackjack", "--out", t.TempDir()}, bad...)...)
		if code != 2 || !strings.Contains(errs, bad[0]) {
			t.Errorf("%v: exit %d, stderr %q", bad, code, errs)
		}
	}
}
