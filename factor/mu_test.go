package factor

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
)

// muHand is the hand-checkable case of the related-methods spec §1.5
// test 8: n = 3, m = 2, one action.
func muHand(t *testing.T) (*Model, []*Block) {
	t.Helper()
	b, err := NewBlock(0, []int32{0, 0, 1, 1, 2, 2}, []int32{0, 1, 1, 2, 0, 2}, []float64{3, 1, 2, 2, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	md := NewModel(3, 2, 1, TieNone)
	copy(md.D[0], []float64{.6, .4, .3, .7, .5, .5})
	k := [][]float64{{.2, .5, .3}, {.6, .1, .3}}
	for j := range 3 {
		for l := range 2 {
			md.KT[0][j*2+l] = k[l][j]
		}
	}
	return md, []*Block{b}
}

// muSteps runs iters steps of rule under loss on md in place (without
// the final normalization of MUFrom) and returns the objective before
// each step and after the last.
func muSteps(t *testing.T, md *Model, blocks []*Block, rule MURule, loss MULoss, iters, workers int) []float64 {
	t.Helper()
	st, err := newMUState(md, blocks, MUOptions{Rule: rule, Loss: loss, Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	var objs []float64
	for range iters + 1 {
		probe := md.Clone()
		obj, err := st.step(context.Background(), probe, true)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, obj)
		if len(objs) <= iters {
			if _, err := st.step(context.Background(), md, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	return objs
}

func kRow(md *Model, l int) []float64 {
	r := make([]float64, md.N)
	for j := range r {
		r[j] = md.KT[0][j*md.M+l]
	}
	return r
}

func near(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for k := range got {
		if math.Abs(got[k]-want[k]) > tol*max(1, math.Abs(want[k])) {
			t.Errorf("%s[%d] = %.15g, want %.15g", what, k, got[k], want[k])
		}
	}
}

func TestMUHandComputed(t *testing.T) {
	const tol = 1e-11
	cases := []struct {
		rule     MURule
		loss     MULoss
		d, k0    []float64
		k1       []float64
		objAfter float64
	}{
		{MUNorm, LossWKL, []float64{0.470588235294, 0.529411764706, 0.490909090909, 0.509090909091, 0.375, 0.625},
			[]float64{0.27197626389, 0.488684623887, 0.239339112223}, []float64{0.508881302261, 0.139527979813, 0.351590717926}, -10.767811153348326},
		{MURepa, LossWKL, []float64{0.535294117647, 0.464705882353, 0.395454545455, 0.604545454545, 0.4375, 0.5625},
			[]float64{0.235972436252, 0.494344779461, 0.269682784288}, []float64{0.554423738461, 0.11977132675, 0.325804934789}, -11.107580971572734},
		{MURela, LossWKL, []float64{0.535294117647, 0.464705882353, 0.395454545455, 0.604545454545, 0.4375, 0.5625},
			[]float64{0.235972436252, 0.494344779461, 0.269682784288}, []float64{0.554423738461, 0.11977132675, 0.325804934789}, -11.107580971572734},
		{MUNorm, LossFrob, []float64{0.470716563182, 0.529283436818, 0.536672629696, 0.463327370304, 0.384615384615, 0.615384615385},
			[]float64{0.28, 0.4, 0.32}, []float64{0.504166666667, 0.10625, 0.389583333333}, -0.274673104720},
	}
	for _, c := range cases {
		t.Run(c.rule.String()+"-"+c.loss.String(), func(t *testing.T) {
			md, blocks := muHand(t)
			objs := muSteps(t, md, blocks, c.rule, c.loss, 1, 1)
			before := -11.700228014079388
			if c.loss == LossFrob {
				before = -0.3695
			}
			near(t, "objective before", objs[:1], []float64{before}, tol)
			near(t, "objective after", objs[1:], []float64{c.objAfter}, tol)
			near(t, "D1", md.D[0], c.d, tol)
			near(t, "K1 row 0", kRow(md, 0), c.k0, tol)
			near(t, "K1 row 1", kRow(md, 1), c.k1, tol)
		})
	}
	// repa and rela under frob: J after one step, and rela's row sums.
	for _, c := range []struct {
		rule MURule
		j    float64
	}{{MURepa, 0.308917186053}, {MURela, 0.308026036045}} {
		md, blocks := muHand(t)
		objs := muSteps(t, md, blocks, c.rule, LossFrob, 1, 1)
		near(t, c.rule.String()+" frob J", []float64{-objs[1]}, []float64{c.j}, tol)
		if c.rule == MURela {
			var dsum, ksum []float64
			for i := range 3 {
				dsum = append(dsum, md.D[0][2*i]+md.D[0][2*i+1])
			}
			for l := range 2 {
				r := kRow(md, l)
				ksum = append(ksum, r[0]+r[1]+r[2])
			}
			near(t, "rela frob D row sums", dsum, []float64{1.000813869035, 0.985531891898, 1.003463042016}, tol)
			near(t, "rela frob K row sums", ksum, []float64{1.004754151603, 0.991537848968}, tol)
		}
	}
}

// TestMUNormIsEMSF: under wkl, every mu-norm step is one EMSF iteration
// (Fit with MaxIter 1) from the same model, for every tie mode.
func TestMUNormIsEMSF(t *testing.T) {
	for _, tie := range []Tie{TieNone, TieSharedK, TieSharedD} {
		_, blocks := klmSampled(t, 30, 4, 2, 3000, 3)
		md := NewRandom(30, 5, 2, tie, 9)
		em := md.Clone()
		st, err := newMUState(md, blocks, MUOptions{Rule: MUNorm, Loss: LossWKL, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		for iter := range 5 {
			if _, err := st.step(context.Background(), md, false); err != nil {
				t.Fatal(err)
			}
			if _, err := Fit(context.Background(), em, blocks, FitOptions{Converger: Converger{MaxIter: 1}}); err != nil {
				t.Fatal(err)
			}
			if d := modelRelDiff(md, em); d > 1e-12 {
				t.Fatalf("tie %v iteration %d: mu-norm differs from EMSF by %g relative", tie, iter+1, d)
			}
		}
	}
}

// modelRelDiff returns max |a − b|/max(|b|, 1e-300) over all entries.
func modelRelDiff(a, b *Model) float64 {
	d := 0.0
	for k := range a.D {
		for q, v := range a.D[k] {
			d = max(d, math.Abs(v-b.D[k][q])/max(math.Abs(b.D[k][q]), 1e-300))
		}
	}
	for k := range a.KT {
		for q, v := range a.KT[k] {
			d = max(d, math.Abs(v-b.KT[k][q])/max(math.Abs(b.KT[k][q]), 1e-300))
		}
	}
	return d
}

// TestMURepaRelaDampedEM: under wkl, repa and rela give the same model,
// equal to the damped EM of spec §1.3.3, rows stay stochastic to 1e-12,
// and the log-likelihood never decreases (also under kl) for all three.
func TestMURepaRelaDampedEM(t *testing.T) {
	_, blocks := klmSampled(t, 25, 4, 1, 2000, 5)
	start := NewRandom(25, 4, 1, TieNone, 11)
	repa, rela := start.Clone(), start.Clone()
	for iter := range 10 {
		// Damped EM from the same model.
		em := repa.Clone()
		acc := NewAccumulator(em)
		if err := Pass(context.Background(), em, blocks, acc, 1, false); err != nil {
			t.Fatal(err)
		}
		n, m := em.N, em.M
		x := acc.X[0]
		q := make([]float64, m)
		for i := range n {
			for l := range m {
				q[l] += x[i] * em.D[0][i*m+l]
			}
		}
		want := em.Clone()
		for i := range n {
			for l := range m {
				if x[i] > 0 {
					want.D[0][i*m+l] = (em.D[0][i*m+l] + acc.Dh[0][i*m+l]/x[i]) / 2
				}
			}
		}
		for j := range n {
			for l := range m {
				y := acc.Y[0][l]
				want.KT[0][j*m+l] = (q[l]*em.KT[0][j*m+l] + acc.KhT[0][j*m+l]) / (q[l] + y)
			}
		}
		muSteps(t, repa, blocks, MURepa, LossWKL, 1, 2)
		muSteps(t, rela, blocks, MURela, LossWKL, 1, 1)
		if d := modelRelDiff(repa, want); d > 1e-12 {
			t.Fatalf("iteration %d: repa differs from damped EM by %g", iter+1, d)
		}
		if d := modelRelDiff(rela, repa); d > 1e-12 {
			t.Fatalf("iteration %d: rela differs from repa by %g", iter+1, d)
		}
		if dev := maxRowDeviation(rela); dev > 1e-12 {
			t.Fatalf("iteration %d: rela rows deviate from 1 by %g", iter+1, dev)
		}
	}
	for _, loss := range []MULoss{LossWKL, LossKL} {
		for _, rule := range []MURule{MUNorm, MURepa, MURela} {
			md := start.Clone()
			objs := muSteps(t, md, blocks, rule, loss, 30, 2)
			for k := 1; k < len(objs); k++ {
				if objs[k] < objs[k-1]-1e-9*math.Abs(objs[k-1]) {
					t.Errorf("%v %v: objective fell at step %d: %.12g -> %.12g", rule, loss, k, objs[k-1], objs[k])
				}
			}
			if dev := maxRowDeviation(md); dev > 1e-12 {
				t.Errorf("%v %v: rows deviate from 1 by %g", rule, loss, dev)
			}
		}
	}
}

// TestMUFrobeniusAndMasks: under the Frobenius losses norm and repa keep
// rows stochastic, rela stays near 1 and its output is normalized, zeros
// stay zero, and the result is bitwise the same for 1 and 3 workers.
func TestMUFrobeniusAndMasks(t *testing.T) {
	_, blocks := klmSampled(t, 20, 3, 2, 1500, 8)
	for _, loss := range []MULoss{LossFrob, LossWFrob, LossWKL, LossKL} {
		for _, rule := range []MURule{MUNorm, MURepa, MURela} {
			start := NewRandom(20, 3, 2, TieNone, 4)
			start.D[1][5*3+1] = 0 // a mask entry of D
			start.KT[0][7*3+2] = 0
			normalizeModel(start)
			var models []*Model
			for _, workers := range []int{1, 3} {
				md := start.Clone()
				res, err := MUFrom(context.Background(), md, blocks, MUOptions{Rule: rule, Loss: loss, Workers: workers,
					Converger: Converger{MaxIter: 25}})
				if err != nil {
					t.Fatal(err)
				}
				if rule != MURela || loss == LossWKL || loss == LossKL {
					if res.MaxRowDeviation > 1e-12 {
						t.Errorf("%v %v: rows deviate from 1 by %g", rule, loss, res.MaxRowDeviation)
					}
				} else if res.MaxRowDeviation > 0.2 {
					t.Errorf("%v %v: rela rows deviate from 1 by %g", rule, loss, res.MaxRowDeviation)
				}
				if dev := maxRowDeviation(md); dev > 1e-12 {
					t.Errorf("%v %v: output rows deviate from 1 by %g", rule, loss, dev)
				}
				if md.D[1][5*3+1] != 0 || md.KT[0][7*3+2] != 0 {
					t.Errorf("%v %v: a zero entry became positive", rule, loss)
				}
				models = append(models, md)
			}
			if !models[0].Equal(models[1]) {
				t.Errorf("%v %v: 1 and 3 workers differ", rule, loss)
			}
		}
	}
}

// TestMUOrderOne: with m = 1 every variant reaches the closed form K* of
// its loss (spec §1.5 test 9) in one step.
func TestMUOrderOne(t *testing.T) {
	_, blocks := muHand(t)
	cnt, _ := NewCNT(3, 1, blocks, 0)
	for _, loss := range []MULoss{LossWKL, LossFrob, LossWFrob} {
		want := make([]float64, 3)
		wsum := 0.0
		row := make([]float64, 3)
		for i := range 3 {
			x := cnt.RowTotal(0, i)
			w := 1.0
			if loss != LossFrob {
				w = x
			}
			cnt.Row(0, i, row)
			for j := range 3 {
				want[j] += w * row[j]
			}
			wsum += w
		}
		for j := range want {
			want[j] /= wsum
		}
		for _, rule := range []MURule{MUNorm, MURepa, MURela} {
			md, _, err := MU(context.Background(), 3, 1, 1, blocks, 2, MUOptions{Rule: rule, Loss: loss, Converger: Converger{MaxIter: 200}})
			if err != nil {
				t.Fatal(err)
			}
			near(t, rule.String()+" "+loss.String()+" K*", kRow(md, 0), want, 1e-9)
		}
	}
}

// TestMUFixedPoint: from a converged EMSF model one step of every
// variant under wkl moves nothing by more than 1e-8.
func TestMUFixedPoint(t *testing.T) {
	_, blocks := klmSampled(t, 15, 3, 1, 2000, 12)
	md := NewRandom(15, 3, 1, TieNone, 1)
	if _, err := Fit(context.Background(), md, blocks, FitOptions{Converger: Converger{Tol: 1e-14, MaxIter: 20000}}); err != nil {
		t.Fatal(err)
	}
	for _, rule := range []MURule{MUNorm, MURepa, MURela} {
		got := md.Clone()
		muSteps(t, got, blocks, rule, LossWKL, 1, 1)
		for k := range got.D[0] {
			if d := math.Abs(got.D[0][k] - md.D[0][k]); d > 1e-8 {
				t.Fatalf("%v: D moved by %g", rule, d)
			}
		}
		for k := range got.KT[0] {
			if d := math.Abs(got.KT[0][k] - md.KT[0][k]); d > 1e-8 {
				t.Fatalf("%v: K moved by %g", rule, d)
			}
		}
	}
}

func TestMUBadInput(t *testing.T) {
	_, blocks := muHand(t)
	if _, _, err := MU(context.Background(), 3, 4, 1, blocks, 1, MUOptions{Converger: Converger{MaxIter: 1}}); err == nil {
		t.Error("m > n accepted")
	}
	if _, _, err := MU(context.Background(), 3, 2, 1, blocks, 1, MUOptions{Loss: LossFrob, Tie: TieSharedK, Converger: Converger{MaxIter: 1}}); err == nil {
		t.Error("frob with a tie accepted")
	}
	if _, err := ParseMULoss("l2"); err == nil {
		t.Error("loss l2 accepted")
	}
	if _, err := ParseMURule("normal"); err == nil {
		t.Error("rule normal accepted")
	}
}

// TestMUCommitLoopEqualsMU: MU under wkl run by Loop (factor.Fit with
// MUCommit as its commit rule, ended by MUFinish: how a cluster runs it)
// equals MU bitwise, for every rule and tie mode, 1 and 3 workers, a
// fixed iteration count and a tolerance, and with a group size other
// than the default; progress reports the same objectives.
func TestMUCommitLoopEqualsMU(t *testing.T) {
	_, blocks := klmSampled(t, 30, 4, 2, 3000, 3)
	for _, tie := range []Tie{TieNone, TieSharedK, TieSharedD} {
		for _, rule := range []MURule{MUNorm, MURepa, MURela} {
			for _, workers := range []int{1, 3} {
				for _, conv := range []Converger{{MaxIter: 7}, {Tol: 1e-6, MaxIter: 500}} {
					group := []int{0, 500}[workers%2]
					var wantObjs, gotObjs []float64
					want, wantRes, err := MU(context.Background(), 30, 5, 2, blocks, 9, MUOptions{Rule: rule, Tie: tie,
						Workers: workers, GroupNNZ: group, Converger: conv,
						Progress: func(s IterStats) { wantObjs = append(wantObjs, s.LogLik) }})
					if err != nil {
						t.Fatal(err)
					}
					got := NewRandom(30, 5, 2, tie, 9)
					c, err := NewMUCommit(got, blocks, rule)
					if err != nil {
						t.Fatal(err)
					}
					res, err := Fit(context.Background(), got, blocks, FitOptions{Workers: workers, GroupNNZ: group,
						Converger: conv, Commit: c.Commit,
						Progress: func(s IterStats) { gotObjs = append(gotObjs, s.LogLik) }})
					if err != nil {
						t.Fatal(err)
					}
					dev, err := MUFinish(got, blocks)
					if err != nil {
						t.Fatal(err)
					}
					name := fmt.Sprintf("tie %v rule %v workers %d tol %v", tie, rule, workers, conv.Tol)
					if !got.Equal(want) || got.Iteration != want.Iteration || !sameBits(
						[]float64{got.LogLik, got.WKL, res.LogLik, dev, float64(res.Iterations)},
						[]float64{want.LogLik, want.WKL, wantRes.Objective, wantRes.MaxRowDeviation, float64(wantRes.Iterations)}) {
						t.Fatalf("%s: Loop with MUCommit differs from MU: iterations %d/%d, loglik %v/%v, objective %v/%v",
							name, res.Iterations, wantRes.Iterations, got.LogLik, want.LogLik, res.LogLik, wantRes.Objective)
					}
					if res.Status != wantRes.Status || !sameBits(gotObjs, wantObjs) {
						t.Fatalf("%s: status %v/%v, progress objectives differ", name, res.Status, wantRes.Status)
					}
				}
			}
		}
	}
	// The learning rate is EMSF's: refused with another commit rule.
	md := NewRandom(30, 5, 2, TieNone, 9)
	c, err := NewMUCommit(md, blocks, MURepa)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Fit(context.Background(), md, blocks, FitOptions{Alpha: 0.5, Commit: c.Commit, Converger: Converger{MaxIter: 1}}); err == nil ||
		!strings.Contains(err.Error(), "learning rate 0.5") {
		t.Errorf("alpha 0.5 with MUCommit: %v", err)
	}
	if _, err := NewMUCommit(md, blocks, MURule(7)); err == nil {
		t.Error("rule 7 accepted")
	}
}
