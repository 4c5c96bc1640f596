package experiment

import (
	"context"
	"testing"

	"github.com/emsf/emsf/factor"
)

// blackjackJob is a small experiment: 2 batches of 100 hands, agents
// dealer, Q-learning, CNT+PI and EMSF+PISF m = 5.
func blackjackJob(evalHands int) *Blackjack {
	return &Blackjack{Orders: []int{5}, Seed: 3, Batches: 2, BatchHands: 100, Epsilon: 0.15, Alpha: 0.1,
		EvalHands: evalHands, Converger: factor.Converger{Tol: 1e-6, MaxIter: 30}, UniformUnseen: true}
}

// TestBlackjack: one run of the four agents is four jobs of two rows each
// (hands 100 and 200, in batch order), returns in [−1, 1], the dealer's
// exactly −0.0758…; the same job gives the same rows again.
func TestBlackjack(t *testing.T) {
	x := blackjackJob(0)
	agents := x.Agents()
	if x.Jobs(1) != 4 || len(agents) != 4 || agents[3] != "EMSF+PISF m=5" {
		t.Fatalf("%d jobs, agents %v", x.Jobs(1), agents)
	}
	for k := range x.Jobs(1) {
		rows, err := x.Run(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 2 {
			t.Fatalf("job %d: %d rows, want 2", k, len(rows))
		}
		for b, r := range rows {
			if r.Run != 0 || r.Seed != 3 || r.Agent != agents[k] || r.Batch != b+1 || r.Hands != 100*(b+1) {
				t.Errorf("job %d row %d: %+v", k, b, r)
			}
			if !(r.Return >= -1 && r.Return <= 1) {
				t.Errorf("job %d row %d: return %v", k, b, r.Return)
			}
			if r.Agent == "dealer" && !(r.Return > -0.0759 && r.Return < -0.0758) {
				t.Errorf("dealer's return %v, want −0.0758…", r.Return)
			}
		}
		again, err := x.Run(context.Background(), k)
		if err != nil || again[1] != rows[1] {
			t.Errorf("job %d again: %+v, %v; want %+v", k, again, err, rows[1])
		}
	}
	sums := BlackjackSummaries([]BlackjackRow{{Agent: "a", Hands: 100, Return: 1}, {Run: 1, Agent: "a", Hands: 100, Return: 0}})
	if len(sums) != 1 || sums[0].Method != "a" || sums[0].X != 100 || sums[0].Mean != 0.5 || sums[0].Runs != 2 {
		t.Errorf("summaries %+v", sums)
	}
}

// TestBlackjackSimulated: with EvalHands the dealer's mean return on 2000
// hands is near its exact −0.0758 (within 4 standard errors, about 0.02
// each).
func TestBlackjackSimulated(t *testing.T) {
	x := blackjackJob(2000)
	rows, err := x.Run(context.Background(), 0) // the dealer
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Agent != "dealer" || r.Return < -0.16 || r.Return > 0.01 {
			t.Errorf("dealer row %+v", r)
		}
		if r.Return > -0.0758 && r.Return < -0.0757 {
			t.Errorf("dealer row %+v: the exact return, not a simulated one", r)
		}
	}
}
