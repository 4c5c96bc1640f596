package factor

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
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
	if f, d, wf, wq := md.RowWeights(0, 0); f != 0.125 || d != 0 || math.Abs(wf-0.4) > 1e-15 || math.Abs(wq-0.1) > 1e-15 {
		t.Errorf("weights of row 0: %v %v %v %v, want 1/8 0 .4 .1", f, d, wf, wq)
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
		if trial%2 == 1 {
			// Counts that are not whole (below and above the discount).
			for _, b := range blocks {
				for k := range b.Vals {
					b.Vals[k] *= 0.3 + rng.Float64()
				}
			}
		}
		rules := make([]RuleParams, u)
		for a := range rules {
			rules[a] = RuleParams{Lambda: LambdaGrid[rng.IntN(len(LambdaGrid))], Kappa: KappaGrid[rng.IntN(len(KappaGrid))],
				Delta: DeltaGrid[rng.IntN(len(DeltaGrid))], Mu: MuGrid[rng.IntN(len(MuGrid))],
				Discount: DiscountGrid[rng.IntN(len(DiscountGrid))], Rho: RhoGrid[rng.IntN(len(RhoGrid))]}
		}
		s, err := NewSmoothing(n, u, blocks, rules)
		if err != nil {
			t.Fatal(err)
		}
		lam := make([]float64, u)
		for a, r := range rules {
			// Counting alone (κ = d = μ = 0) gives 0 to a next state
			// its row never saw.
			lam[a] = r.Lambda
			if r.Kappa == 0 && r.Discount == 0 && r.Mu == 0 {
				lam[a] = 0
			}
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
					if p := md.Prob(a, i, j); p != v {
						t.Fatalf("trial %d: Prob(%d, %d, %d) = %v, NextRow has %v", trial, a, i, j, p, v)
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
// on it as the factors alone and as Jelinek–Mercer and add-β counting
// with every parameter of their grids (each scored by its own estimate,
// NewJM and NewCNT, not by the rule), and scoring is the same for any
// workers.
func TestValidationTune(t *testing.T) {
	testValidationTune(t)
	// With every grid cut to one point, only Tune's starts (the
	// baselines as special cases of the rule) can carry the guarantee.
	grids := []*[]float64{&LambdaGrid, &KappaGrid, &DiscountGrid, &MuGrid, &DeltaGrid, &RhoGrid}
	saved := make([][]float64, len(grids))
	for k, g := range grids {
		saved[k] = *g
	}
	defer func() {
		for k, g := range grids {
			*g = saved[k]
		}
	}()
	LambdaGrid, KappaGrid, DiscountGrid, MuGrid, DeltaGrid, RhoGrid = []float64{0.1}, []float64{math.Inf(1)}, []float64{0}, []float64{0}, []float64{QHalf}, []float64{0}
	testValidationTune(t)
}

// chainCounts draws k transitions per action from a chain that goes from
// i to i+1 (mod n) with probability stay, else to a next state drawn
// mostly state 0: data where a row's few counts are reliable
// (Jelinek–Mercer's case) unlike RandomCounts'.
func chainCounts(n, u, k int, stay float64, seed uint64) []*Block {
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([]*Block, u)
	for a := range u {
		c := make(map[[2]int32]float64)
		for range k {
			i := int32(rng.IntN(n))
			j := (i + 1) % int32(n)
			if rng.Float64() >= stay {
				j = 0 // mostly to state 0, the rest uniform
				if rng.Float64() < 0.2 {
					j = int32(rng.IntN(n))
				}
			}
			c[[2]int32{i, j}]++
		}
		b := &Block{Action: a, Ptr: []int64{0}}
		for i := range int32(n) {
			var js []int32
			for j := range int32(n) {
				if c[[2]int32{i, j}] > 0 {
					js = append(js, j)
				}
			}
			if len(js) == 0 {
				continue
			}
			for _, j := range js {
				b.Cols = append(b.Cols, j)
				b.Vals = append(b.Vals, c[[2]int32{i, j}])
			}
			b.Rows = append(b.Rows, i)
			b.Ptr = append(b.Ptr, int64(len(b.Cols)))
		}
		out[a] = b
	}
	return out
}

func testValidationTune(t *testing.T) {
	t.Helper()
	for trial := range 6 {
		n := 40 + 20*trial
		fit := RandomCounts(n, 2, 1+trial%3, 4, uint64(trial))
		val := RandomCounts(n, 2, 1+trial%2, 2, uint64(trial)+100)
		if trial%2 == 1 {
			fit, val = chainCounts(n, 2, 4*n, 0.7, uint64(trial)), chainCounts(n, 2, n, 0.7, uint64(trial)+100)
		}
		md := NewRandom(n, 4, 2, TieNone, 1)
		if _, err := Fit(context.Background(), md, fit, FitOptions{Converger: Converger{MaxIter: 30}}); err != nil {
			t.Fatal(err)
		}
		v1, err := NewValidation(n, 2, TieNone, fit, val)
		if err != nil {
			t.Fatal(err)
		}
		v3, _ := NewValidation(n, 2, TieNone, fit, val)
		s1, rules := v1.Tune(md, 1)
		s3, _ := v3.Tune(md, 3)
		if s1 != s3 {
			t.Fatalf("trial %d: tuned score differs with workers: %v vs %v", trial, s1, s3)
		}
		inf := RuleParams{Lambda: 0.001, Kappa: math.Inf(1), Delta: QHalf}
		if plain := v1.Score(md, []RuleParams{inf, inf}, 1); !(s1 >= plain) {
			t.Fatalf("trial %d: tuned %v below nearly-plain %v", trial, s1, plain)
		}
		if got := v1.Score(md, rules, 2); got != s1 {
			t.Fatalf("trial %d: Score with the chosen parameters %v, Tune said %v", trial, got, s1)
		}
		rule := HeldOutRule{}
		for _, l := range JMGrid {
			jm, err := NewJM(n, 2, fit, l)
			if err != nil {
				t.Fatal(err)
			}
			if s, err := rule.PerTransition(jm, val, n); err == nil && s > s1+1e-12 {
				t.Fatalf("trial %d: Jelinek–Mercer λ = %v scores %v on validation, the tuned rule %v", trial, l, s, s1)
			}
		}
		for _, b := range AddBetaGrid {
			ab, err := NewCNT(n, 2, fit, b)
			if err != nil {
				t.Fatal(err)
			}
			if s, err := rule.PerTransition(ab, val, n); err == nil && s > s1+1e-12 {
				t.Fatalf("trial %d: add-β β = %v scores %v on validation, the tuned rule %v", trial, b, s, s1)
			}
		}
		// λ alone follows the factors: a function of the model and the
		// last choice, for any workers.
		if _, err := Fit(context.Background(), md, fit, FitOptions{Converger: Converger{MaxIter: 5}}); err != nil {
			t.Fatal(err)
		}
		before := v1.Score(md, rules, 1)
		if a, b := v1.TuneLambda(md, 1), v3.TuneLambda(md, 3); a != b || !(a >= before) {
			t.Fatalf("trial %d: TuneLambda %v (1 worker), %v (3); the earlier rule scores %v", trial, a, b, before)
		}
		// Every parameter follows them by a local search (λ first, as
		// TuneLambda): at least TuneLambda's score, the same for any
		// workers, and the score of the choice it leaves.
		lam := v1.Score(md, v1.last, 1)
		if a, b := v1.TuneLocal(md, 1), v3.TuneLocal(md, 3); a != b || !(a >= lam) || v1.Score(md, v1.last, 2) != a {
			t.Fatalf("trial %d: TuneLocal %v (1 worker), %v (3), rescored %v; TuneLambda's choice scores %v", trial, a, b, v1.Score(md, v1.last, 2), lam)
		}
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
	mapCommit(md, md, acc, &Prior{D: 1, K: 3}, priorQ(md, blocks), 0, 1)
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

// TestEarlyStopMinGain pins the rule by hand (plain EM: one score per
// pass). Scores 2 − 1/k for the k-th score, MinGain 0.2, patience 2:
// k=1 (1) starts; k=2 (1.5 > 1.2) gains; k=3 (1.667 ≤ 1.7) is better but
// no gain: kept, confirmed, patience 1; k=4 (1.75 > 1.7: two small steps
// add up to a gain over k=2's) gains; k=5 (1.8 ≤ 1.95) and k=6 (1.833)
// are kept without gain: stop after 6 passes on iterate 6. With MinGain
// 0 every score gains and the fit runs to its iteration limit.
func TestEarlyStopMinGain(t *testing.T) {
	for _, c := range []struct {
		gain             float64
		iters, kept      int
		status           Status
		confirmedIterate []int
	}{
		{0.2, 6, 6, HeldOutOptimum, []int{3, 5, 6}},
		{0, 12, 12, IterationLimit, nil},
	} {
		md, blocks := squaremData()
		var confirmed []int
		es := &EarlyStop{Patience: 2, MinGain: c.gain,
			Score: func(m *Model) float64 { return 2 - 1/float64(m.Iteration) },
			Confirm: func(m *Model) float64 {
				confirmed = append(confirmed, m.Iteration)
				return 2 - 1/float64(m.Iteration) // re-tuning changes nothing here
			}}
		res, err := Fit(context.Background(), md, blocks, FitOptions{Converger: Converger{MaxIter: 12}, EarlyStop: es})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != c.status || res.Iterations != c.iters || md.Iteration != c.kept || !slices.Equal(confirmed, c.confirmedIterate) {
			t.Errorf("min gain %v: status %s, iterations %d, kept %d, confirmed %v; want %s, %d, %d, %v",
				c.gain, res.Status, res.Iterations, md.Iteration, confirmed, c.status, c.iters, c.kept, c.confirmedIterate)
		}
	}
}

// TestEarlyStopConfirm: an iterate whose Score does not gain is
// rescored by Confirm, and counts against the patience only when that
// does not gain either; a Confirm that gains resets the patience and
// keeps its iterate.
func TestEarlyStopConfirm(t *testing.T) {
	for _, withConfirm := range []bool{false, true} {
		md, blocks := squaremData()
		calls, confirms := 0, 0
		es := &EarlyStop{Patience: 6, Score: func(m *Model) float64 {
			calls++
			return -float64(calls) // never gains after the first
		}}
		if withConfirm {
			es.Confirm = func(m *Model) float64 {
				confirms++
				if m.Iteration == 6 {
					return 0 // the re-tuned score of iterate 6 gains
				}
				return -100
			}
		}
		res, err := Fit(context.Background(), md, blocks, FitOptions{Converger: Converger{MaxIter: 100}, EarlyStop: es})
		if err != nil {
			t.Fatal(err)
		}
		want, wantIters, wantConfirms := 1, 7, 0
		if withConfirm {
			want, wantIters, wantConfirms = 6, 12, 11
		}
		if res.Status != HeldOutOptimum || md.Iteration != want || res.Iterations != wantIters || confirms != wantConfirms {
			t.Fatalf("confirm %v: status %s, kept iteration %d (want %d), iterations %d (want %d), confirms %d (want %d)",
				withConfirm, res.Status, md.Iteration, want, res.Iterations, wantIters, confirms, wantConfirms)
		}
	}
}

// TestEarlyStopNeverKeepsTheStart: SQUAREM's loop, which passes over its
// start, does not score it (plain EM's scores the iterates after each
// pass): a start that would score best is not the model returned.
func TestEarlyStopNeverKeepsTheStart(t *testing.T) {
	for _, accel := range []Accel{AccelNone, AccelSquarem} {
		md, blocks := squaremData()
		start := md.Clone()
		scored := []int{}
		es := &EarlyStop{Patience: 2, Score: func(m *Model) float64 {
			scored = append(scored, m.Iteration)
			if m.Iteration == 0 {
				return 1 // the start would win
			}
			return -float64(m.Iteration)
		}}
		if _, err := Fit(context.Background(), md, blocks, FitOptions{Converger: Converger{MaxIter: 100}, EarlyStop: es, Accel: accel}); err != nil {
			t.Fatal(err)
		}
		if scored[0] == 0 || md.Iteration == 0 || md.D[0][0] == start.D[0][0] {
			t.Fatalf("accel %s: scored iterations %v, kept iteration %d", accel, scored, md.Iteration)
		}
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

// TestSmoothingDiscountHandComputed: smoothCase's row 0 (counts {0: 1,
// 2: 3}, x = 4) with d = ½, μ = 0.2, κ = 4: m = min(1, ½) + min(3, ½) =
// 1, f = 0.8/8 = 0.1, b = 0.8·(4 + 1)/8 + 0.2 = 0.7, so with B = [.42
// .26 .32] P̃ = 0.1·[½ 0 5/2] + 0.7·B = [.344 .182 .474]. Row 1 has no
// counts: P̃ = B (μ and d do not touch it).
func TestSmoothingDiscountHandComputed(t *testing.T) {
	md := smoothCase(t)
	s := md.Smoothing
	s.Mu, s.Discount, s.Rho = []float64{0.2}, []float64{0.5}, []float64{0}
	for _, prepared := range []bool{false, true} {
		if prepared {
			if err := s.Prepare(3, 1); err != nil {
				t.Fatal(err)
			}
		}
		want := [][]float64{{0.344, 0.182, 0.474}, {0.42, 0.26, 0.32}}
		row := make([]float64, 3)
		for i, w := range want {
			md.NextRow(0, i, row)
			for j := range row {
				if math.Abs(row[j]-w[j]) > 1e-15 {
					t.Errorf("prepared %v: row %d: P̃[%d] = %v, want %v", prepared, i, j, row[j], w[j])
				}
				if p := md.Prob(0, i, j); p != row[j] {
					t.Errorf("prepared %v: Prob(0, %d, %d) = %v, NextRow has %v", prepared, i, j, p, row[j])
				}
			}
		}
		if f, d, wf, wq := md.RowWeights(0, 0); math.Abs(f-0.1) > 1e-15 || d != 0.5 || math.Abs(wf-0.56) > 1e-15 || math.Abs(wq-0.14) > 1e-15 {
			t.Errorf("prepared %v: weights of row 0: %v %v %v %v, want .1 .5 .56 .14", prepared, f, d, wf, wq)
		}
	}
	// A discount above every count: the row is all backoff (m = x).
	s.Discount[0] = 3
	if err := s.Prepare(3, 1); err != nil {
		t.Fatal(err)
	}
	row := make([]float64, 3)
	md.NextRow(0, 0, row)
	for j, w := range []float64{0.42, 0.26, 0.32} {
		if math.Abs(row[j]-w) > 1e-15 {
			t.Errorf("d = 3: P̃[%d] = %v, want B's %v", j, row[j], w)
		}
	}
}

// TestNewQRuleHandComputed: counts row 0 {0: 1, 2: 3}, row 1 {2: 2}:
// N = [1 0 5], T = [1 0 2] (distinct predecessors); with δ = ½ the
// frequencies are [1/5 1/15 11/15] and the continuation frequencies [1/3
// 1/9 5/9], so ρ = ½ gives q = [4/15 4/45 29/45]; ρ = 0 is NewQDelta.
func TestNewQRuleHandComputed(t *testing.T) {
	b := &Block{Action: 0, Rows: []int32{0, 1}, Ptr: []int64{0, 2, 3}, Cols: []int32{0, 2, 2}, Vals: []float64{1, 3, 2}}
	cnt, err := NewCNT(3, 1, []*Block{b}, 0)
	if err != nil {
		t.Fatal(err)
	}
	q := NewQRule(3, 1, []*Block{b}, cnt, []float64{QHalf}, []float64{0.5})[0]
	for j, w := range []float64{4.0 / 15, 4.0 / 45, 29.0 / 45} {
		if math.Abs(q[j]-w) > 1e-15 {
			t.Errorf("ρ = ½: q[%d] = %v, want %v", j, q[j], w)
		}
	}
	q0 := NewQRule(3, 1, []*Block{b}, nil, []float64{QHalf}, nil)[0]
	for j, w := range NewQDelta(3, 1, []*Block{b}, []float64{QHalf})[0] {
		if q0[j] != w {
			t.Errorf("ρ = 0: q[%d] = %v, NewQDelta %v", j, q0[j], w)
		}
	}
}

// TestSmoothingSpecialCases: the rule with d = μ = 0 (nil or zeros, as
// an interpolation-v2 file stores them) predicts bitwise as the Dirichlet
// rule of interpolation-v1, computed here in its own arithmetic;
// JMRule(μ) predicts as Jelinek–Mercer counting (NewJM) and
// AddBetaRule(β) as add-β counting (NewCNT), to rounding, on every row
// (rows without counts included).
func TestSmoothingSpecialCases(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 10 {
		n, m, u := 5+rng.IntN(30), 1+rng.IntN(4), 1+rng.IntN(3)
		md := NewRandom(n, m, u, TieNone, uint64(trial))
		blocks := RandomCounts(n, u, 1+rng.IntN(4), 3, uint64(trial))
		rules := make([]RuleParams, u)
		for a := range rules {
			rules[a] = RuleParams{Lambda: LambdaGrid[rng.IntN(len(LambdaGrid))], Kappa: KappaGrid[1+rng.IntN(len(KappaGrid)-1)],
				Delta: DeltaGrid[rng.IntN(len(DeltaGrid))]}
		}
		s, err := NewSmoothing(n, u, blocks, rules)
		if err != nil {
			t.Fatal(err)
		}
		if s.Mu != nil || s.Discount != nil || s.Rho != nil {
			t.Fatalf("trial %d: a Dirichlet rule stores μ %v, d %v, ρ %v", trial, s.Mu, s.Discount, s.Rho)
		}
		cnt, err := NewCNT(n, u, blocks, 0)
		if err != nil {
			t.Fatal(err)
		}
		dirichlet := func(a, i, j int) float64 {
			// interpolation-v1, as Prob computed it before μ, d and ρ.
			lambda, kappa := s.Lambda[a], s.Kappa[a]
			wc, x := 0.0, 0.0
			if !math.IsInf(kappa, 1) {
				if x = cnt.RowTotal(a, i); x > 0 {
					wc = x / (x + kappa)
				}
			}
			rest := 1 - wc
			p := float64(rest*(1-lambda)*md.FactorProb(a, i, j)) + float64(rest*lambda*s.Q[a][j])
			if wc > 0 {
				p += float64(wc / x * cnt.count(a, i, j))
			}
			return p
		}
		zeros := s.Clone()
		zeros.Mu, zeros.Discount, zeros.Rho = make([]float64, u), make([]float64, u), make([]float64, u)
		if err := zeros.Prepare(n, u); err != nil {
			t.Fatal(err)
		}
		row := make([]float64, n)
		for _, rule := range []*Smoothing{s, zeros} {
			md.Smoothing = rule
			for a := range u {
				for i := range n {
					md.NextRow(a, i, row)
					for j := range n {
						want := dirichlet(a, i, j)
						if p := md.Prob(a, i, j); math.Float64bits(p) != math.Float64bits(want) || math.Float64bits(row[j]) != math.Float64bits(want) {
							t.Fatalf("trial %d (μ %v): P̃^%d[%d,%d] = %v (NextRow %v), the Dirichlet rule %v", trial, rule.Mu, a, i, j, p, row[j], want)
						}
					}
				}
			}
		}
		// The counting baselines as special cases.
		for _, mu := range []float64{0.01, 0.3, 0.9} {
			jmRules := make([]RuleParams, u)
			for a := range jmRules {
				jmRules[a] = JMRule(mu)
			}
			jm, err := NewJM(n, u, blocks, mu)
			if err != nil {
				t.Fatal(err)
			}
			sameEstimate(t, md, blocks, jmRules, jm, fmt.Sprintf("trial %d, JM μ = %v", trial, mu))
		}
		for _, beta := range []float64{0.001, 0.1, 1} {
			abRules := make([]RuleParams, u)
			for a := range abRules {
				abRules[a] = AddBetaRule(n, beta)
			}
			ab, err := NewCNT(n, u, blocks, beta)
			if err != nil {
				t.Fatal(err)
			}
			sameEstimate(t, md, blocks, abRules, ab, fmt.Sprintf("trial %d, add-β β = %v", trial, beta))
		}
	}
}

// sameEstimate checks that md under the rule of the blocks with rules
// predicts as e on every entry, to rounding.
func sameEstimate(t *testing.T, md *Model, blocks []*Block, rules []RuleParams, e Estimate, what string) {
	t.Helper()
	s, err := NewSmoothing(md.N, md.U, blocks, rules)
	if err != nil {
		t.Fatal(err)
	}
	md.Smoothing = s
	for a := range md.U {
		for i := range md.N {
			for j := range md.N {
				p, want := md.Prob(a, i, j), e.Prob(a, i, j)
				if math.Abs(p-want) > 1e-12*want { // 1 − x/(x+κ) cancels for small κ
					t.Fatalf("%s: P̃^%d[%d,%d] = %v, the counting estimate %v", what, a, i, j, p, want)
				}
			}
		}
	}
}

// TestValidationScoresTheStoredRule: the validation score of a rule is
// the held-out log-likelihood of the model that stores that rule built
// on the fit part (NewSmoothing, rows without counts set to the
// marginal, HeldOutRule without mixture): the search chooses on exactly
// the predictions the model file will make.
func TestValidationScoresTheStoredRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 8 {
		n, u := 30+10*trial, 1+trial%3
		fit := RandomCounts(n, u, 1+trial%3, 4, uint64(trial))
		val := RandomCounts(n, u, 1, 2, uint64(trial)+50)
		md := NewRandom(n, 3, u, TieNone, uint64(trial))
		if _, err := Fit(context.Background(), md, fit, FitOptions{Converger: Converger{MaxIter: 10}}); err != nil {
			t.Fatal(err)
		}
		md.SetUnseenRows(fit)
		v, err := NewValidation(n, u, TieNone, fit, val)
		if err != nil {
			t.Fatal(err)
		}
		rules := make([]RuleParams, u)
		for a := range rules {
			rules[a] = RuleParams{Lambda: LambdaGrid[1+rng.IntN(len(LambdaGrid)-1)], Kappa: KappaGrid[rng.IntN(len(KappaGrid))],
				Delta: DeltaGrid[rng.IntN(len(DeltaGrid))], Mu: MuGrid[rng.IntN(len(MuGrid))],
				Discount: DiscountGrid[rng.IntN(len(DiscountGrid))], Rho: RhoGrid[rng.IntN(len(RhoGrid))]}
			if trial%4 == 3 {
				rules[a].Discount = 0.33 // off the grid: summed per row
			}
		}
		got := v.Score(md, rules, 2)
		stored := md.Clone()
		if stored.Smoothing, err = NewSmoothing(n, u, fit, rules); err != nil {
			t.Fatal(err)
		}
		want, err := HeldOutRule{}.PerTransition(stored, val, n)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got-want) > 1e-12*math.Abs(want) {
			t.Fatalf("trial %d: validation scores %+v at %v, the model storing it %v", trial, rules, got, want)
		}
	}
}

// TestSmoothingValidateBad: every parameter out of its range is one
// error naming it and the action.
func TestSmoothingValidateBad(t *testing.T) {
	for _, tc := range []struct {
		edit func(s *Smoothing)
		msg  string
	}{
		{func(s *Smoothing) { s.Mu = []float64{1.5} }, "μ of action 0 is 1.5"},
		{func(s *Smoothing) { s.Mu = []float64{math.NaN()} }, "μ of action 0 is NaN"},
		{func(s *Smoothing) { s.Discount = []float64{-0.1} }, "discount d of action 0 is -0.1"},
		{func(s *Smoothing) { s.Discount = []float64{math.Inf(1)} }, "discount d of action 0 is +Inf"},
		{func(s *Smoothing) { s.Rho = []float64{-1} }, "ρ of action 0 is -1"},
		{func(s *Smoothing) { s.Rho = []float64{0, 0} }, "2 ρ, want one per action (1) or none"},
		{func(s *Smoothing) { s.Kappa = []float64{-1} }, "κ of action 0 is -1"},
	} {
		md := smoothCase(t)
		tc.edit(md.Smoothing)
		if err := md.Smoothing.Prepare(3, 1); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("got %v, want an error with %q", err, tc.msg)
		}
	}
}

// TestRuleCountingKNHandComputed: interpolated Kneser–Ney counting as
// the rule (KNRule(½, ½)) on row 0 {0: 1, 2: 3}, row 1 {2: 2} of 3
// states: T = [1 0 2] distinct predecessors, so the continuation
// frequencies with δ = ½ are q = [1/3 1/9 5/9]; row 0 (x = 4, two next
// states) keeps (c − ½)/4 = [1/8 0 5/8] and gives 2·½/4 = ¼ to q:
// [5/24 1/36 55/72]; row 1 (x = 2) keeps [0 0 ¾] and gives ¼:
// [1/12 1/36 8/9]; row 2 (never seen) and a state beyond n get q.
func TestRuleCountingKNHandComputed(t *testing.T) {
	b := &Block{Action: 0, Rows: []int32{0, 1}, Ptr: []int64{0, 2, 3}, Cols: []int32{0, 2, 2}, Vals: []float64{1, 3, 2}}
	kn, err := NewRuleCounting(3, 1, []*Block{b}, nil, []RuleParams{KNRule(0.5, QHalf)})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]float64{{5.0 / 24, 1.0 / 36, 55.0 / 72}, {1.0 / 12, 1.0 / 36, 8.0 / 9}, {1.0 / 3, 1.0 / 9, 5.0 / 9}}
	row := make([]float64, 3)
	for i, w := range want {
		kn.Row(0, i, row)
		for j := range row {
			if math.Abs(row[j]-w[j]) > 1e-15 {
				t.Errorf("row %d: P̂[%d] = %v, want %v", i, j, row[j], w[j])
			}
			if p := kn.Prob(0, i, j); p != row[j] {
				t.Errorf("Prob(0, %d, %d) = %v, Row has %v", i, j, p, row[j])
			}
		}
	}
	// A held-out transition from state 3 (beyond n) to 2 scores q_2.
	test := &Block{Action: 0, Rows: []int32{3}, Ptr: []int64{0, 1}, Cols: []int32{2}, Vals: []float64{1}}
	if ll, _, err := (HeldOutRule{}).LogLik(kn, []*Block{test}, 4); err != nil || math.Abs(ll-math.Log(5.0/9)) > 1e-15 {
		t.Errorf("unseen state: log-likelihood %v (%v), want log 5/9", ll, err)
	}
	if _, err := NewRuleCounting(3, 1, []*Block{b}, nil, []RuleParams{{Lambda: 0.5, Kappa: 0, Delta: QHalf}}); err == nil || !strings.Contains(err.Error(), "λ = 0.5") {
		t.Errorf("λ = 0.5: %v, want an error naming it", err)
	}
}

// TestRuleCountingIsTheModelsRule: counting under a rule with λ = 1
// predicts bitwise as a model storing that rule, whatever its factors,
// on every row (with counts, without, and of every action), with counts
// given or counted: one piece of code (Smoothing.prob, Smoothing.row).
func TestRuleCountingIsTheModelsRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 10 {
		n, m, u := 5+rng.IntN(30), 1+rng.IntN(4), 1+rng.IntN(3)
		blocks := RandomCounts(n, u, 1+rng.IntN(4), 3, uint64(trial))
		rules := make([]RuleParams, u)
		for a := range rules {
			rules[a] = RuleParams{Lambda: 1, Kappa: KappaGrid[rng.IntN(len(KappaGrid))], Delta: DeltaGrid[rng.IntN(len(DeltaGrid))],
				Mu: MuGrid[rng.IntN(len(MuGrid))], Discount: DiscountGrid[rng.IntN(len(DiscountGrid))], Rho: RhoGrid[rng.IntN(len(RhoGrid))]}
		}
		md := NewRandom(n, m, u, TieNone, uint64(trial))
		s, err := NewSmoothing(n, u, blocks, rules)
		if err != nil {
			t.Fatal(err)
		}
		md.Smoothing = s
		cnt, err := NewCNT(n, u, blocks, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, given := range []*CNT{nil, cnt} {
			rc, err := NewRuleCounting(n, u, blocks, given, rules)
			if err != nil {
				t.Fatal(err)
			}
			a := rng.IntN(u)
			if rc.Params(a) != s.Params(a) {
				t.Fatalf("trial %d: params %+v, the model's %+v", trial, rc.Params(a), s.Params(a))
			}
			want, row := make([]float64, n), make([]float64, n)
			for a := range u {
				for i := range n {
					md.NextRow(a, i, want)
					rc.Row(a, i, row)
					for j := range n {
						if p := rc.Prob(a, i, j); math.Float64bits(p) != math.Float64bits(want[j]) || math.Float64bits(row[j]) != math.Float64bits(want[j]) {
							t.Fatalf("trial %d: P̂^%d[%d,%d] = %v (Row %v), the model's %v", trial, a, i, j, p, row[j], want[j])
						}
					}
				}
			}
		}
	}
}
