package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestExperimentBlackjack: 1 run × 2 batches × (dealer, Q-learning,
// CNT+PI, EMSF+PISF m = 5) = 8 rows with the documented columns, hands
// 100 and 200, returns in [−1, 1] (the dealer's exactly −0.0758…), and a
// PNG; bad flags are usage errors naming the flag.
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
	count := map[string]int{}
	for _, r := range rows[1:] {
		count[r[2]]++
		if r[0] != "0" || r[1] != "3" || !(r[3] == "1" && r[4] == "100" || r[3] == "2" && r[4] == "200") {
			t.Errorf("row %v", r)
		}
		v, err := strconv.ParseFloat(r[5], 64)
		if err != nil || !(v >= -1 && v <= 1) {
			t.Errorf("row %v: return %q", r, r[5])
		}
		if r[2] == "dealer" && !(v > -0.0759 && v < -0.0758) {
			t.Errorf("dealer's return %v, want −0.0758…", v)
		}
	}
	for _, k := range []string{"dealer", "Q-learning", "CNT+PI", "EMSF+PISF m=5"} {
		if count[k] != 2 {
			t.Errorf("%q: %d rows, want 2 (%v)", k, count[k], count)
		}
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

// TestExperimentBlackjackSimulated: --eval-hands simulates; the dealer's
// mean return on 2000 hands is near its exact −0.0758 (within 4 standard
// errors, about 0.02 each).
func TestExperimentBlackjackSimulated(t *testing.T) {
	dir := t.TempDir()
	mustEmsf(t, "experiment", "blackjack", "--batches", "1", "--runs", "1", "--orders", "5",
		"--iters", "10", "--eval-hands", "2000", "--quiet", "--out", dir)
	rows := readCSV(t, filepath.Join(dir, "blackjack.csv"))
	for _, r := range rows[1:] {
		if r[2] != "dealer" {
			continue
		}
		if v, err := strconv.ParseFloat(r[5], 64); err != nil || v < -0.16 || v > 0.01 {
			t.Errorf("dealer row %v", r)
		}
	}
}
