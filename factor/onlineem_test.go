package factor

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// onlineStream samples count unit transitions of a true model of order 3.
func onlineStream(t *testing.T, n, u, count int, seed uint64) []ivTriple {
	t.Helper()
	truth, err := TrueModel(n, 3, u, RowsDirichlet, 0.5, rand.New(rand.NewPCG(seed, 1)))
	if err != nil {
		t.Fatal(err)
	}
	var ts []ivTriple
	err = Sample(truth, count, SampleOptions{Mode: SampleUniform}, rand.New(rand.NewPCG(seed, 2)), func(tr Transition) {
		ts = append(ts, ivTriple{a: tr.Action, i: tr.State, j: tr.Next, c: 1})
	})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// TestOnlineEMBatchEStep: with γ_t = 1/t, a fixed model and one M-step at
// the end (floor 0), online EM is one batch EMSF iteration (spec §2.8
// test 7(i)), for every tie mode, also with counts > 1.
func TestOnlineEMBatchEStep(t *testing.T) {
	for _, tie := range []Tie{TieNone, TieSharedK, TieSharedD} {
		ts := onlineStream(t, 15, 2, 1500, 3)
		ts[3].c, ts[10].c = 3, 2
		start := NewRandom(15, 4, 2, tie, 5)
		em := start.Clone()
		if _, err := Fit(context.Background(), em, ivBlocks(t, 2, ts, 4), FitOptions{Converger: Converger{MaxIter: 1}}); err != nil {
			t.Fatal(err)
		}
		md := start.Clone()
		o, err := NewOnlineEM(md, OnlineEMOptions{GammaExp: 1, BurnIn: NoMStep})
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range ts {
			if err := o.Add(tr.i, tr.a, tr.j, tr.c); err != nil {
				t.Fatal(err)
			}
		}
		if !o.Model().Equal(start) {
			t.Fatalf("tie %v: the model changed without an M-step", tie)
		}
		o.MStep()
		if d := modelRelDiff(o.Model(), em); d > 1e-12 {
			t.Errorf("tie %v: online EM with γ = 1/t differs from one EMSF iteration by %g relative", tie, d)
		}
		if st := o.Stats(); st.Units != 1503 || st.Transitions != 1500 || st.MSteps != 1 {
			t.Errorf("stats %+v", st)
		}
	}
}

// TestOnlineEMParameterAveraging: statistics averaging equals parameter
// averaging with the per-row rates β of spec §2.7 (test 7(ii)), floor
// applied to the averaged rows; rows stay
// stochastic (7(iii)); the result is deterministic (7(iv)); the rescaled
// statistics equal the plain ones (7(v)).
func TestOnlineEMParameterAveraging(t *testing.T) {
	const n, m = 12, 3
	ts := onlineStream(t, n, 1, 3000, 8)
	start := NewRandom(n, m, 1, TieNone, 2)
	run := func(rescaleAt float64) *Model {
		md := start.Clone()
		o, err := NewOnlineEM(md, OnlineEMOptions{GammaExp: 0.8, BurnIn: 1, Floor: 1e-3})
		if err != nil {
			t.Fatal(err)
		}
		o.rescaleAt = rescaleAt
		for _, tr := range ts {
			if err := o.Add(tr.i, tr.a, tr.j, 1); err != nil {
				t.Fatal(err)
			}
		}
		return o.Model()
	}
	got := run(1e150)
	// Parameter averaging of the unfloored rows D̃, K̃ (masses σ kept
	// unscaled); the model is the floored row where σ > 0, else the start.
	const eps = 1e-3
	dt, ktt := slices.Clone(start.D[0]), slices.Clone(start.KT[0])
	sigD, sigK := make([]float64, n), make([]float64, m)
	model := func() *Model {
		md := start.Clone()
		for i := range n {
			for l := range m {
				if sigD[i] > 0 {
					md.D[0][i*m+l] = (1-eps)*dt[i*m+l] + eps/m
				}
				if sigK[l] > 0 {
					md.KT[0][i*m+l] = (1-eps)*ktt[i*m+l] + eps/n
				}
			}
		}
		return md
	}
	w := make([]float64, m)
	for k, tr := range ts {
		cur := model()
		gamma := math.Pow(float64(k+1), -0.8)
		g := 0.0
		for l := range m {
			w[l] = cur.D[0][tr.i*m+l] * cur.KT[0][tr.j*m+l]
			g += w[l]
		}
		for l := range m {
			w[l] /= g
		}
		beta := gamma / ((1-gamma)*sigD[tr.i] + gamma)
		for l := range m {
			dt[tr.i*m+l] = (1-beta)*dt[tr.i*m+l] + beta*w[l]
		}
		for i := range sigD {
			sigD[i] *= 1 - gamma
		}
		sigD[tr.i] += gamma
		for l := range m {
			if w[l] == 0 {
				sigK[l] *= 1 - gamma
				continue
			}
			bl := gamma * w[l] / ((1-gamma)*sigK[l] + gamma*w[l])
			for j := range n {
				ktt[j*m+l] *= 1 - bl
			}
			ktt[tr.j*m+l] += bl
			sigK[l] = (1-gamma)*sigK[l] + gamma*w[l]
		}
	}
	want := model()
	if dd := modelRelDiff(got, want); dd > 1e-9 {
		t.Errorf("statistics averaging differs from parameter averaging by %g relative", dd)
	}
	checkRowsStochastic(t, got)
	if again := run(1e150); !again.Equal(got) {
		t.Error("two runs differ")
	}
	if d := modelRelDiff(run(10), got); d > 1e-12 {
		t.Errorf("rescaling at 10 changes the model by %g relative", d)
	}
}

// TestOnlineEMFloor: with ε = 0 a transition to a state no transition
// reached before the first M-step has probability 0 (TransitionError);
// with ε > 0 it is absorbed and every entry is at least ε/n (spec §2.8
// test 7(vi)).
func TestOnlineEMFloor(t *testing.T) {
	const n, m = 6, 2
	for _, eps := range []float64{0, 1e-3} {
		md := NewRandom(n, m, 1, TieNone, 1)
		o, err := NewOnlineEM(md, OnlineEMOptions{GammaExp: 0.8, BurnIn: 3, Floor: eps})
		if err != nil {
			t.Fatal(err)
		}
		for k := range 5 {
			if err := o.Add(k%3, 0, (k+1)%3, 1); err != nil {
				t.Fatal(err)
			}
		}
		err = o.Add(0, 0, 5, 1)
		var te *TransitionError
		if eps == 0 {
			if !errors.As(err, &te) || te.To != 5 {
				t.Errorf("ε = 0: %v, want a TransitionError to 5", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("ε = %v: %v", eps, err)
		}
		got := o.Model()
		for _, v := range got.KT[0] {
			if v < eps/n*(1-1e-12) {
				t.Fatalf("ε = %v: K entry %v < ε/n", eps, v)
			}
		}
		for _, v := range got.D[0] {
			if v < eps/m*(1-1e-12) {
				t.Fatalf("ε = %v: D entry %v < ε/m", eps, v)
			}
		}
		checkRowsStochastic(t, got)
	}
}

// TestOnlineEMConverges: on a stream from a true model, KL_ρ of online
// EM falls between 2 000 and 40 000 transitions for a = 0.6, 0.8, 1
// (averaged over 3 seeds; spec §2.8 test 7(vii), loose).
func TestOnlineEMConverges(t *testing.T) {
	const n, m = 20, 3
	for _, a := range []float64{0.6, 0.8, 1} {
		early, late := 0.0, 0.0
		for seed := uint64(1); seed <= 3; seed++ {
			truth, err := TrueModel(n, m, 1, RowsDirichlet, 0.5, rand.New(rand.NewPCG(seed, 1)))
			if err != nil {
				t.Fatal(err)
			}
			o, err := NewOnlineEM(NewRandom(n, m, 1, TieNone, seed+10), OnlineEMOptions{GammaExp: a, BurnIn: 100, Floor: 1e-6})
			if err != nil {
				t.Fatal(err)
			}
			rho := make([]float64, n)
			for i := range rho {
				rho[i] = 1 / float64(n)
			}
			count := 0
			var addErr error
			err = Sample(truth, 40000, SampleOptions{Mode: SampleUniform}, rand.New(rand.NewPCG(seed, 2)), func(tr Transition) {
				if addErr == nil {
					addErr = o.Add(tr.State, tr.Action, tr.Next, 1)
				}
				count++
				if count == 2000 {
					early += KLRho(truth, o.Model(), rho)
				}
			})
			if err != nil || addErr != nil {
				t.Fatal(err, addErr)
			}
			late += KLRho(truth, o.Model(), rho)
		}
		if !(late < early) {
			t.Errorf("a = %v: KL_ρ %v at 2000 transitions, %v at 40000: no improvement", a, early/3, late/3)
		}
	}
}

func TestOnlineEMBadOptions(t *testing.T) {
	md := NewRandom(4, 2, 1, TieNone, 1)
	for _, o := range []OnlineEMOptions{{GammaExp: 0.5, BurnIn: 1}, {GammaExp: 1.1, BurnIn: 1}, {GammaExp: 0.8, BurnIn: 0},
		{GammaExp: 0.8, BurnIn: 1, Floor: 1}, {GammaExp: 0.8, BurnIn: 1, Floor: -1}} {
		if _, err := NewOnlineEM(md, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	o, err := NewOnlineEM(md, OnlineEMOptions{GammaExp: 0.8, BurnIn: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []float64{0, 1.5, -1, math.Inf(1)} {
		if err := o.Add(0, 0, 1, c); err == nil {
			t.Errorf("count %v accepted", c)
		}
	}
	if err := o.Add(0, 1, 1, 1); err == nil {
		t.Error("action out of range accepted")
	}
}

// TestOnlineEMLogLik: the model's LogLik is the prequential
// log-likelihood of the transitions since the last Model call.
func TestOnlineEMLogLik(t *testing.T) {
	md := NewRandom(5, 2, 1, TieNone, 3)
	start := md.Clone()
	o, err := NewOnlineEM(md, OnlineEMOptions{GammaExp: 0.8, BurnIn: NoMStep})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Add(1, 0, 2, 2); err != nil {
		t.Fatal(err)
	}
	want := 2 * math.Log(start.Prob(0, 1, 2))
	if got := o.Model().LogLik; math.Abs(got-want) > 1e-12 {
		t.Errorf("LogLik %v, want %v", got, want)
	}
	if got := o.Model().LogLik; got != 0 {
		t.Errorf("LogLik after a second Model call %v, want 0", got)
	}
}
