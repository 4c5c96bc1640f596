package factor

import (
	"math"
	"testing"
)

// TestResumeOnlineEM: the re-derived statistics normalize back to the
// model (floor 0, every tie mode), t goes on, and the next unit
// transition moves its D row by the parameter-averaging rate
// β = γ/((1−γ)σ_s + γ) with γ = (t+1)^−a and σ_s the row's share of the
// prior counts (spec §2.7).
func TestResumeOnlineEM(t *testing.T) {
	const units, a = 700, 0.8
	for _, tie := range []Tie{TieNone, TieSharedK, TieSharedD} {
		ts := onlineStream(t, 12, 2, 600, 4)
		ts[5].c = 101 // units = 700
		prior := ivBlocks(t, 2, ts, 5)
		start := NewRandom(12, 3, 2, tie, 9)
		o, err := ResumeOnlineEM(start.Clone(), OnlineEMOptions{GammaExp: a, BurnIn: 100}, units, prior)
		if err != nil {
			t.Fatal(err)
		}
		o.MStep()
		if d := modelRelDiff(o.Model(), start); d > 1e-13 {
			t.Errorf("tie %v: resumed statistics give a model %g (relative) away from the one resumed", tie, d)
		}
		if st := o.Stats(); st.Units != units {
			t.Errorf("tie %v: resumed at %d units, stats %+v", tie, units, st)
		}
		// One more unit transition i --0--> j.
		k := 0
		for ts[k].a != 0 {
			k++
		}
		i, j := ts[k].i, ts[k].j
		sigma := 0.0
		for _, tr := range ts {
			if tr.i == i && (tr.a == 0 || tie == TieSharedD) {
				sigma += tr.c
			}
		}
		sigma /= units
		md := o.Model()
		db, kb := md.DBlock(0), md.KBlock(0)
		w, g := make([]float64, md.M), 0.0
		for l := range w {
			w[l] = md.D[db][i*md.M+l] * md.KT[kb][j*md.M+l]
			g += w[l]
		}
		gamma := math.Pow(units+1, -a)
		beta := gamma / ((1-gamma)*sigma + gamma)
		want := make([]float64, md.M)
		for l := range want {
			want[l] = (1-beta)*md.D[db][i*md.M+l] + beta*w[l]/g
		}
		if err := o.Add(i, 0, j, 1); err != nil {
			t.Fatal(err)
		}
		got := o.Model().D[db][i*md.M : (i+1)*md.M]
		for l := range want {
			if math.Abs(got[l]-want[l]) > 1e-13 {
				t.Errorf("tie %v: D[%d,%d] = %v after one step, want %v (β = %v)", tie, i, l, got[l], want[l], beta)
			}
		}
	}
	if _, err := ResumeOnlineEM(NewRandom(3, 2, 1, TieNone, 1), OnlineEMOptions{GammaExp: 0.8, BurnIn: 1}, -1, nil); err == nil {
		t.Error("resume at t = -1: no error")
	}
}
