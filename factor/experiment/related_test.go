package experiment

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/emsf/emsf/factor"
)

// find returns the error of the row with these setting, method, x and
// measure.
func find(t *testing.T, rows []Record, setting, method string, x int, measure string) float64 {
	t.Helper()
	for _, r := range rows {
		if r.Setting == setting && r.Method == method && r.Transitions == x && r.Measure == measure {
			return r.Error
		}
	}
	t.Fatalf("no row %s/%s/%d/%s", setting, method, x, measure)
	return 0
}

func TestCheckpoints(t *testing.T) {
	if got, want := checkpoints(25), []int{1, 2, 5, 10, 20, 25}; !slices.Equal(got, want) {
		t.Errorf("checkpoints(25) = %v, want %v", got, want)
	}
	if got, want := checkpoints(100), []int{1, 2, 5, 10, 20, 50, 100}; !slices.Equal(got, want) {
		t.Errorf("checkpoints(100) = %v, want %v", got, want)
	}
}

// TestPermutedRelError: a column permutation of B is at error 0, a
// scaled B at the scale's error.
func TestPermutedRelError(t *testing.T) {
	b := []float64{1, 2, 3, 4, 5, 6} // 2×3
	perm := []float64{3, 1, 2, 6, 4, 5}
	if e := permutedRelError(perm, b, 2, 3); e != 0 {
		t.Errorf("permuted B: error %v", e)
	}
	scaled := make([]float64, len(b))
	for i, v := range b {
		scaled[i] = 1.5 * v
	}
	if e := permutedRelError(scaled, b, 2, 3); math.Abs(e-0.5) > 1e-12 {
		t.Errorf("1.5 B: error %v, want 0.5", e)
	}
}

// TestMUHMM: on gen data mu-norm's log-likelihood is EMSF's at every
// checkpoint and mu-repa's equals mu-rela's; at the end mu-repa is below
// EMSF (slower) but above its start; the HMM fits reach a small
// objective; a job's rows depend on its index alone (not on what ran
// before).
func TestMUHMM(t *testing.T) {
	x := &MUHMM{Observations: 20000, HMMIters: 300, HMMEps: 1e-6, GenStates: 100, GenTrueOrder: 20,
		GenTransitions: 3000, GenOrder: 10, GenIters: 20, Seed: 3}
	if x.Jobs(2) != 2 {
		t.Fatalf("Jobs(2) = %d", x.Jobs(2))
	}
	var runs [][]Record
	for k := range 2 {
		rows, err := x.Run(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != x.Rows() {
			t.Fatalf("run %d: %d rows, Rows() = %d", k, len(rows), x.Rows())
		}
		runs = append(runs, rows)
	}
	rows := runs[0]
	for _, it := range []int{1, 2, 5, 10, 20} {
		em := find(t, rows, "gen", "EMSF", it, "gen_loglik")
		if d := math.Abs(find(t, rows, "gen", "mu-norm", it, "gen_loglik") - em); d > 1e-9*math.Abs(em) {
			t.Errorf("iteration %d: mu-norm differs from EMSF by %g", it, d)
		}
		repa, rela := find(t, rows, "gen", "mu-repa", it, "gen_loglik"), find(t, rows, "gen", "mu-rela", it, "gen_loglik")
		if math.Abs(repa-rela) > 1e-9*math.Abs(repa) {
			t.Errorf("iteration %d: repa %v, rela %v", it, repa, rela)
		}
	}
	start, end := find(t, runs[1], "gen", "mu-repa", 1, "gen_loglik"), find(t, runs[1], "gen", "mu-repa", 20, "gen_loglik")
	if em := find(t, runs[1], "gen", "EMSF", 20, "gen_loglik"); !(start < end && end < em) {
		t.Errorf("mu-repa log-likelihood %v -> %v, EMSF %v: want start < repa < EMSF", start, end, em)
	}
	for _, rule := range []string{"normHMM", "repaHMM", "relaHMM"} {
		if v := find(t, rows, "hmm", rule, 20000, "hmm_final_objective"); !(v > 0 && v < 1e-3) {
			t.Errorf("%s final objective %v", rule, v)
		}
	}
	again, err := x.Run(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range again {
		if r.Measure != "hmm_seconds" && r != runs[1][i] {
			t.Fatalf("run 1 again: row %d %+v, first time %+v", i, r, runs[1][i])
		}
	}
}

// TestMUHMMCancelled: a cancelled job returns the context's error.
func TestMUHMMCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	x := &MUHMM{Observations: 2000, HMMIters: 300, GenStates: 20, GenTrueOrder: 5, GenTransitions: 500, GenOrder: 3, GenIters: 5}
	if _, err := x.Run(ctx, 0); err == nil {
		t.Fatal("cancelled run: no error")
	}
}

// TestOnlineEM: the jobs of a run are the exponents, the incremental
// settings and the nmf run, in that order; online EM's KL_ρ falls along
// the stream for a = 0.8, and the exact online EM of the paper's setting
// gets closer to the true B.
func TestOnlineEM(t *testing.T) {
	x := &OnlineEM{Order: 10, Sizes: []int{1000, 20000}, Gammas: []float64{0.8}, BurnIn: 100,
		Floor: factor.DefaultOnlineEMFloor, Incs: []OnlineSetting{{CommitEvery: 1000, Alpha: 0.1}}, NMFSteps: 2000, Seed: 2}
	if x.Jobs(2) != 6 {
		t.Fatalf("Jobs(2) = %d, want 6", x.Jobs(2))
	}
	var rows []Record
	for k := range 3 {
		r, err := x.Run(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r...)
	}
	if rows[0].Method != "online EM a = 0.8" || rows[2].Method != "incremental EMSF, commit every 1000, α = 0.1" || rows[4].Setting != "nmf" {
		t.Fatalf("job order: %+v", rows)
	}
	early, late := find(t, rows, "emsf", "online EM a = 0.8", 1000, "kl_rho"), find(t, rows, "emsf", "online EM a = 0.8", 20000, "kl_rho")
	if !(late < early) {
		t.Errorf("online EM KL_ρ %v at 1000, %v at 20000", early, late)
	}
	if v := find(t, rows, "emsf", "incremental EMSF, commit every 1000, α = 0.1", 20000, "kl_rho"); !(v > 0) || math.IsInf(v, 0) {
		t.Errorf("incremental EMSF KL_ρ %v", v)
	}
	first, last := find(t, rows, "nmf", "exact online EM (Fig. 1)", 1, "b_rel_error"), find(t, rows, "nmf", "exact online EM (Fig. 1)", 2000, "b_rel_error")
	if !(last < first/2) {
		t.Errorf("B relative error %v at t = 1, %v at t = 2000", first, last)
	}
}

// TestEPCA: E-PCA with one basis (the all-ones one) is uniform, so its
// held-out log-likelihood is log((1−δ)/n + δ/n) = −log n; more bases fit
// the training rows better; gen data has KL_ρ, blackjack (truth unknown)
// does not.
func TestEPCA(t *testing.T) {
	x := &EPCA{Bases: []int{1, 4}, Transitions: 3000, Hands: 2000, Epsilon: 1e-5, Smooth: 1e-4,
		Converger: factor.Converger{Tol: 1e-6, MaxIter: 50}, EPCAConv: factor.Converger{Tol: 1e-6, MaxIter: 20}, Seed: 5}
	if x.Jobs(1) != 4 {
		t.Fatalf("Jobs(1) = %d, want 4", x.Jobs(1))
	}
	var rows []Record
	for k := range x.Jobs(1) {
		r, err := x.Run(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r...)
	}
	if v := find(t, rows, "gen", "E-PCA", 1, "heldout_loglik"); math.Abs(v+math.Log(100)) > 1e-9 {
		t.Errorf("E-PCA with the constant basis only: held-out %v, want −log 100", v)
	}
	for _, s := range []string{"gen", "blackjack"} {
		one, four := find(t, rows, s, "E-PCA", 1, "row_kl"), find(t, rows, s, "E-PCA", 4, "row_kl")
		if !(four < one) {
			t.Errorf("%s: E-PCA training row KL %v with 1 basis, %v with 4", s, one, four)
		}
		find(t, rows, s, "EMSF", 4, "heldout_loglik")
		find(t, rows, s, "CNT (add-one)", 4, "heldout_loglik")
	}
	find(t, rows, "gen", "EMSF", 4, "kl_rho")
	for _, r := range rows {
		if r.Setting == "blackjack" && r.Measure == "kl_rho" {
			t.Errorf("blackjack row with KL_ρ: %+v", r)
		}
	}
}
