package factor

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
)

// smoothCase is a hand-computable model: n = 3, m = 1 (D K has every
// row equal to K), one action, with counts row 0: {0: 1, 2: 3}.
func smoothCase(t *testing.T) *Model {
	t.Helper()
	md := NewModel(3, 1, 1, TieNone)
	copy(md.D[0], []float64{1, 1, 1})
	copy(md.KT[0], []float64{0.5, 0.25, 0.25}) // K = [.5 .25 .25]
	cnt, err := NewCNTFromEntries(3, 1, []CountEntry{{0, 0, 0, 1}, {0, 0, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	md.Smoothing = &Smoothing{Lambda: []float64{0.2}, Kappa: []float64{4}, Delta: []float64{QHalf},
		Q: [][]float64{{0.1, 0.3, 0.6}}, Counts: cnt}
	if err := md.Smoothing.Validate(3, 1); err != nil {
		t.Fatal(err)
	}
	return md
}

// TestSmoothingHandComputed: row 0 has x = 4, so w = 4/(4+4) = 1/2;
// backoff B = 0.8·K + 0.2·q = [.42 .26 .32]; P̃ = ½·[1/4 0 3/4] + ½·B =
// [.335 .13 .535]. Row 1 has no counts: P̃ = B.
func TestSmoothingHandComputed(t *testing.T) {
	md := smoothCase(t)
	want := [][]float64{{0.335, 0.13, 0.535}, {0.42, 0.26, 0.32}}
	row := make([]float64, 3)
	for i, w := range want {
		md.NextRow(0, i, row)
		for j := range row {
			if math.Abs(row[j]-w[j]) > 1e-15 {
				t.Errorf("row %d: P̃[%d] = %v, want %v", i, j, row[j], w[j])
			}
			if p := md.Prob(0, i, j); p != row[j] {
				t.Errorf("Prob(0, %d, %d) = %v, NextRow has %v", i, j, p, row[j])
			}
		}
	}
	if wc, wf, wq := md.RowWeights(0, 0); wc != 0.5 || math.Abs(wf-0.4) > 1e-15 || math.Abs(wq-0.1) > 1e-15 {
		t.Errorf("weights of row 0: %v %v %v, want .5 .4 .1", wc, wf, wq)
	}
	if md.FactorProb(0, 0, 0) != 0.5 {
		t.Errorf("FactorProb = %v, want K's 0.5", md.FactorProb(0, 0, 0))
	}
	// κ = +Inf: no counts, B itself everywhere.
	md.Smoothing.Kappa[0] = math.Inf(1)
	md.NextRow(0, 0, row)
	if math.Abs(row[0]-0.42) > 1e-15 {
		t.Errorf("κ = Inf: P̃[0] = %v, want .42", row[0])
	}
}

// TestSmoothingRowsSumToOne: random models, counts and parameters.
func TestSmoothingRowsSumToOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 20 {
		n, m, u := 5+rng.IntN(30), 1+rng.IntN(4), 1+rng.IntN(3)
		md := NewRandom(n, m, u, TieNone, uint64(trial))
		blocks := RandomCounts(n, u, 1+rng.IntN(4), 3, uint64(trial))
		lam, kap, del := make([]float64, u), make([]float64, u), make([]float64, u)
		for a := range u {
			lam[a] = LambdaGrid[rng.IntN(len(LambdaGrid))]
			kap[a] = KappaGrid[rng.IntN(len(KappaGrid))]
			del[a] = DeltaGrid[rng.IntN(len(DeltaGrid))]
		}
		s, err := NewSmoothing(n, u, blocks, lam, kap, del)
		if err != nil {
			t.Fatal(err)
		}
		md.Smoothing = s
		row := make([]float64, n)
		for a := range u {
			for i := range n {
				md.NextRow(a, i, row)
				sum := 0.0
				for j, v := range row {
					if !(v > 0) && lam[a] > 0 {
						t.Fatalf("trial %d: P̃[%d][%d] = %v with λ > 0", trial, i, j, v)
					}
					sum += v
				}
				if math.Abs(sum-1) > 1e-12 {
					t.Fatalf("trial %d: row %d of action %d sums to %v", trial, i, a, sum)
				}
			}
			md.UnseenRow(a, row)
			sum := 0.0
			for _, v := range row {
				sum += v
			}
			if math.Abs(sum-1) > 1e-12 {
				t.Fatalf("trial %d: unseen row sums to %v", trial, sum)
			}
		}
	}
}

// TestSetUnseenRowsSeedIndependent: a state without counts is predicted
// the same whatever the seed of the random start, as the data's
// next-state distribution at a fixed point (π K).
func TestSetUnseenRowsSeedIndependent(t *testing.T) {
	blocks := RandomCounts(40, 1, 4, 3, 1)
	// Drop the counts of rows 0..9: unseen.
	b := blocks[0]
	cut := b.Ptr[10]
	nb := &Block{Action: 0, Rows: b.Rows[10:], Ptr: make([]int64, len(b.Rows)-9), Cols: b.Cols[cut:], Vals: b.Vals[cut:]}
	for k := range nb.Ptr {
		nb.Ptr[k] = b.Ptr[k+10] - cut
	}
	var rows [][]float64
	for seed := uint64(1); seed <= 2; seed++ {
		md := NewRandom(40, 3, 1, TieNone, seed)
		if _, err := Fit(context.Background(), md, []*Block{nb}, FitOptions{Converger: Converger{Tol: 1e-12, MaxIter: 3000}}); err != nil {
			t.Fatal(err)
		}
		if set := md.SetUnseenRows([]*Block{nb}); set != 10 {
			t.Fatalf("set %d rows, want 10", set)
		}
		row := make([]float64, 40)
		md.NextRow(0, 3, row)
		rows = append(rows, row)
		// At the fixed point, π K is the next-state distribution.
		q := NewQDelta(40, 1, []*Block{nb}, []float64{1e-300})[0]
		for j := range row {
			if math.Abs(row[j]-q[j]) > 1e-4 {
				t.Fatalf("seed %d: unseen row [%d] = %v, next-state frequency %v", seed, j, row[j], q[j])
			}
		}
	}
	for j := range rows[0] {
		if math.Abs(rows[0][j]-rows[1][j]) > 1e-4 {
			t.Fatalf("unseen row differs between seeds at %d: %v vs %v", j, rows[0][j], rows[1][j])
		}
	}
}

// TestHeldOutRuleUnseen: states and actions beyond an estimate's range
// are unseen rows, not errors; the rule's mixture scores a next state
// beyond the range.
func TestHeldOutRuleUnseen(t *testing.T) {
	md := smoothCase(t)
	// Data over 5 states and 2 actions: (3 -0-> 1), (0 -1-> 2), (0 -0-> 4).
	data := []*Block{
		{Action: 0, Rows: []int32{0, 3}, Ptr: []int64{0, 1, 2}, Cols: []int32{4, 1}, Vals: []float64{1, 2}},
		{Action: 1, Rows: []int32{0}, Ptr: []int64{0, 1}, Cols: []int32{2}, Vals: []float64{1}},
	}
	r := HeldOutRule{Mix: 0.01}
	ll, tot, err := r.LogLik(md, data, 5)
	if err != nil {
		t.Fatal(err)
	}
	unseen := make([]float64, 3)
	md.UnseenRow(0, unseen)
	want := math.Log(0.01/5) + // j = 4 beyond the model: the mixture only
		2*math.Log(0.99*unseen[1]+0.01/5) + // state 3 beyond: its unseen row
		math.Log(0.99/3+0.01/5) // action 1 beyond: uniform over the model's 3 states
	if tot != 4 || math.Abs(ll-want) > 1e-12 {
		t.Fatalf("LogLik = %v (total %v), want %v (4)", ll, tot, want)
	}
	if _, _, err := (HeldOutRule{Mix: 0}).LogLik(md, data, 5); err == nil {
		t.Fatal("no mixture and a next state beyond the model: want an error naming the transition")
	}
}

// TestValidationTune: the rule chosen on validation is at least as good
// on it as the factors alone (λ = 0, κ = Inf are on the grid), and
// scoring is the same for any workers.
func TestValidationTune(t *testing.T) {
	fit := RandomCounts(60, 2, 3, 4, 1)
	val := RandomCounts(60, 2, 2, 2, 2)
	md := NewRandom(60, 4, 2, TieNone, 1)
	if _, err := Fit(context.Background(), md, fit, FitOptions{Converger: Converger{MaxIter: 30}}); err != nil {
		t.Fatal(err)
	}
	v1, err := NewValidation(60, 2, TieNone, fit, val)
	if err != nil {
		t.Fatal(err)
	}
	v3, _ := NewValidation(60, 2, TieNone, fit, val)
	s1, l1, k1, d1 := v1.Tune(md, 1)
	s3, _, _, _ := v3.Tune(md, 3)
	if s1 != s3 {
		t.Fatalf("tuned score differs with workers: %v vs %v", s1, s3)
	}
	zero := []float64{0, 0}
	inf := []float64{math.Inf(1), math.Inf(1)}
	if plain := v1.Score(md, []float64{0.001, 0.001}, inf, []float64{QHalf, QHalf}, 1); !(s1 >= plain) {
		t.Fatalf("tuned %v below nearly-plain %v", s1, plain)
	}
	_ = zero
	if got := v1.Score(md, l1, k1, d1, 2); got != s1 {
		t.Fatalf("Score with the chosen parameters %v, Tune said %v", got, s1)
	}
}

// TestPriorCommitHandComputed: one MAP commit on a 1-row model.
func TestPriorCommitHandComputed(t *testing.T) {
	md := NewModel(2, 2, 1, TieNone)
	copy(md.D[0], []float64{0.5, 0.5, 0.5, 0.5})
	copy(md.KT[0], []float64{0.5, 0.5, 0.5, 0.5})
	blocks := []*Block{{Action: 0, Rows: []int32{0}, Ptr: []int64{0, 1}, Cols: []int32{1}, Vals: []float64{2}}}
	acc := NewAccumulator(md)
	if err := Pass(context.Background(), md, blocks, acc, 1, true); err != nil {
		t.Fatal(err)
	}
	// Posterior of each hidden state ½: D̂_0 = [1 1], x_0 = 2; K̂ column
	// 1 = [1 1], y = [1 1]; q = (N_j + ½)/(2 + 1) = [1/6 5/6].
	mapCommit(md, acc, &Prior{D: 1, K: 3}, priorQ(md, blocks), 0, 1)
	// D_0l = (1 + 1)/(2 + 2·1) = ½; K_l0 = (0 + 3/6)/(1 + 3) = 1/8,
	// K_l1 = (1 + 15/6)/4 = 7/8.
	if d := md.D[0][0]; d != 0.5 {
		t.Errorf("D_00 = %v, want 1/2", d)
	}
	if k0, k1 := md.KT[0][0], md.KT[0][2]; math.Abs(k0-0.125) > 1e-15 || math.Abs(k1-0.875) > 1e-15 {
		t.Errorf("K_00, K_01 = %v, %v, want 1/8, 7/8", k0, k1)
	}
	if err := md.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestPriorSquaremMonotone: with a prior, SQUAREM's kept objective (the
// penalized log-likelihood) never decreases, bitwise for 1 and 3 workers.
func TestPriorSquaremMonotone(t *testing.T) {
	var ref *Model
	for _, w := range []int{1, 3} {
		md, blocks := squaremData()
		var seen []float64
		if _, err := Fit(context.Background(), md, blocks, FitOptions{Accel: AccelSquarem, Workers: w, Prior: &Prior{D: 0.3, K: 30},
			Converger: Converger{MaxIter: 60}, Progress: func(st IterStats) {
				if !math.IsNaN(st.LogLik) {
					seen = append(seen, st.LogLik)
				}
			}}); err != nil {
			t.Fatal(err)
		}
		for k := 1; k < len(seen); k++ {
			if seen[k] < seen[k-1] {
				t.Fatalf("penalized objective decreased at %d: %v after %v", k, seen[k], seen[k-1])
			}
		}
		if ref == nil {
			ref = md
		} else if !ref.Equal(md) {
			t.Fatal("workers 3 differs from workers 1")
		}
	}
}

// TestEarlyStopKeepsBest: the fit returns the best-scoring iterate.
func TestEarlyStopKeepsBest(t *testing.T) {
	md, blocks := squaremData()
	best, bestIter := math.Inf(-1), -1
	calls := 0
	score := func(m *Model) float64 {
		calls++
		s := -math.Abs(float64(calls - 5)) // peaks at the 5th score
		if s > best {
			best, bestIter = s, m.Iteration
		}
		return s
	}
	res, err := Fit(context.Background(), md, blocks, FitOptions{Converger: Converger{MaxIter: 100},
		EarlyStop: &EarlyStop{Score: score, Patience: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != HeldOutOptimum || md.Iteration != bestIter || res.Iterations != 8 || res.HeldOut != 0 {
		t.Fatalf("status %s, iteration %d (best %d), iterations %d, held-out %v", res.Status, md.Iteration, bestIter, res.Iterations, res.HeldOut)
	}
}

// TestAugmented: the order-(m+1) factorization reproduces the rule
// without counts exactly, and is stochastic.
func TestAugmented(t *testing.T) {
	md := smoothCase(t)
	md.Smoothing.Kappa[0] = math.Inf(1)
	md.Smoothing.Counts = nil
	aug := md.Augmented()
	if err := aug.Validate(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		for j := range 3 {
			if p, q := aug.FactorProb(0, i, j), md.Prob(0, i, j); math.Abs(p-q) > 1e-15 {
				t.Fatalf("D̃K̃[%d,%d] = %v, rule %v", i, j, p, q)
			}
		}
	}
}
