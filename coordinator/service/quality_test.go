package service

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker"
)

// lowRankRows draws k transitions of a chain P = D K of order m over n
// states and u actions (so that the factors have something to learn and
// held-out scores something to choose).
func lowRankRows(seed uint64, k, n, m, u int) rows {
	md := factor.NewRandom(n, m, u, factor.TieNone, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make(rows, k)
	s := 0
	for x := range out {
		a := rng.IntN(u)
		p := make([]float64, n)
		md.NextRow(a, s, p)
		r, j := rng.Float64(), 0
		for ; j < n-1 && r >= p[j]; j++ {
			r -= p[j]
		}
		out[x] = [3]int{s, a, j}
		s = j
	}
	return out
}

// qualityFit is what a refit with Config.Quality q computes from the
// counts of rs, written out step by step from the package docs (the
// composition emsf fit makes of its validation split): the counts split
// by shard.SplitCounts, the first version started from the training part,
// MAP-EM with SQUAREM and the held-out stopping rule, rows without counts
// set to the marginal, the rule tuned on the split and stored with all
// the counts.
func qualityFit(t *testing.T, rs rows, n, m, u int, seed uint64, q Quality, maxIter int) *factor.Model {
	t.Helper()
	all := blocksOf(rs, u)
	train, val := shard.SplitCounts(all, q.Validation, seed)
	md := factor.NewSeeded(n, m, u, factor.TieNone, train, seed, 1)
	v, err := factor.NewValidation(n, u, factor.TieNone, train, val)
	if err != nil {
		t.Fatal(err)
	}
	shards, _ := shard.Split(train, n, shard.DefaultTargetNNZ)
	opts := factor.FitOptions{Converger: factor.Converger{MaxIter: maxIter, Tol: 1e-7}, Accel: factor.AccelSquarem,
		Prior: &q.Prior, EarlyStop: v.EarlyStop(q.Patience, q.MinGain, 1)}
	if _, err := factor.Fit(t.Context(), md, shard.Blocks(shards), opts); err != nil {
		t.Fatal(err)
	}
	md.SetUnseenRows(train)
	_, rules := v.Tune(md, 1)
	if md.Smoothing, err = factor.NewSmoothing(n, u, all, rules); err != nil {
		t.Fatal(err)
	}
	return md
}

// samePredictions reports whether a and b predict every next-state
// distribution bitwise alike (their factors and their rules).
func samePredictions(a, b *factor.Model) bool {
	pa, pb := make([]float64, a.N), make([]float64, b.N)
	for s := range a.N {
		for act := range a.U {
			a.NextRow(act, s, pa)
			b.NextRow(act, s, pb)
			for j := range pa {
				if math.Float64bits(pa[j]) != math.Float64bits(pb[j]) {
					return false
				}
			}
		}
	}
	return true
}

// TestServeQualityRefit: with emsf fit's defaults (DefaultQuality) a
// refit holds a tenth of the counts out, stops at the held-out optimum
// and stores a rule, which the version records; the model is bitwise the
// step-by-step composition of qualityFit, gives every transition a
// positive probability (those never counted too), and scores fresh data
// of the chain better than the plain refit (Quality{}) of the same
// counts; a warm-started version 2 gets a rule of its own.
func TestServeQualityRefit(t *testing.T) {
	nc, _ := server(t)
	const n, m, u = 30, 3, 2
	// State n+1 is only ever a next state: it and state n have no counts
	// (the marginal's rows).
	data := append(lowRankRows(4, 3000, n, m, u), [3]int{0, 0, n + 1})
	fresh := lowRankRows(5, 3000, n, m, u)
	q := DefaultQuality()
	start(t, nc, Config{Name: "q", Order: m, Seed: 3, Workers: 1, UseWorkers: WorkersNever, Accel: factor.AccelSquarem, Quality: q})
	start(t, nc, Config{Name: "p", Order: m, Seed: 3, Workers: 1, UseWorkers: WorkersNever, Accel: factor.AccelSquarem})
	for _, name := range []string{"q", "p"} {
		waitSeq(t, nc, name, publish(t, nc, name, data.arrow(t)))
	}
	v, err := retrain(t, nc, "q")
	if err != nil {
		t.Fatal(err)
	}
	if v.Status != factor.HeldOutOptimum.String() || v.Rule == "" || !(v.HeldOut < 0) || v.BestIteration < 1 || v.BestIteration > v.Iterations {
		t.Fatalf("version %+v: want a held-out optimum, a rule and its validation score", v)
	}
	got := fetch(t, nc, "q", 1)
	want := qualityFit(t, data, n+2, m, u, 3, q, DefaultConfig().MaxIter)
	if got.Smoothing == nil || !got.Equal(want) || !samePredictions(got, want) {
		t.Fatal("version 1 differs from the step-by-step refit of the same counts")
	}
	if _, err := retrain(t, nc, "p"); err != nil {
		t.Fatal(err)
	}
	plain := fetch(t, nc, "p", 1)
	if plain.Smoothing != nil {
		t.Fatal("the plain refit stored a rule")
	}
	score := func(md *factor.Model) float64 {
		ll, p := 0.0, make([]float64, md.N)
		for _, r := range fresh {
			md.NextRow(r[1], r[0], p)
			ll += math.Log(p[r[2]])
		}
		return ll / float64(len(fresh))
	}
	if sq, sp := score(got), score(plain); !(sq > sp) {
		t.Errorf("fresh data: %.5f nats a transition under the refit with the rule, %.5f under the plain one", sq, sp)
	}
	p := make([]float64, got.N)
	for s := range got.N {
		for a := range u {
			got.NextRow(a, s, p)
			for j, x := range p {
				if !(x > 0) {
					t.Fatalf("P(%d | %d, %d) = %v under the stored rule", j, s, a, x)
				}
			}
		}
	}
	waitSeq(t, nc, "q", publish(t, nc, "q", lowRankRows(6, 500, n+5, m, u).arrow(t)))
	v2, err := retrain(t, nc, "q")
	if err != nil || v2.Version != 2 || v2.Rule == "" || v2.N != n+5 {
		t.Fatalf("version 2: %+v, %v", v2, err)
	}
	if fetch(t, nc, "q", 2).Smoothing == nil {
		t.Fatal("version 2 stored no rule")
	}
}

// The quality refit on emsf workers is bitwise the in-process one (the
// coordinator holds the model: SQUAREM, the prior and the held-out rule
// run there).
func TestServeQualityOnWorkers(t *testing.T) {
	nc, url := server(t)
	var wg sync.WaitGroup
	for range 2 {
		w, err := worker.Start(t.Context(), connect(t, url), worker.Config{})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		t.Cleanup(func() { defer wg.Done(); _ = w.Stop() })
	}
	data := lowRankRows(8, 3000, 40, 4, 2)
	for _, c := range []struct {
		name string
		use  UseWorkers
	}{{"local", WorkersNever}, {"cluster", WorkersAlways}} {
		start(t, nc, Config{Name: c.name, Order: 4, MaxIter: 60, UseWorkers: c.use, ShardNNZ: 500, Accel: factor.AccelSquarem, Quality: DefaultQuality()})
		waitSeq(t, nc, c.name, publish(t, nc, c.name, data.arrow(t)))
		if _, err := retrain(t, nc, c.name); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	local, cluster := fetch(t, nc, "local", 1), fetch(t, nc, "cluster", 1)
	if local.Smoothing == nil || !local.Equal(cluster) || !samePredictions(local, cluster) {
		t.Fatal("the quality refit on workers differs from the in-process one")
	}
}

// Counts too few to hold some out make a version without a rule (logged),
// not a failed retrain; a model whose rule's counts would exceed
// MaxModelBytes stores the background rule.
func TestServeQualityEdges(t *testing.T) {
	nc, _ := server(t)
	start(t, nc, Config{Name: "tiny", Order: 1, UseWorkers: WorkersNever, Quality: DefaultQuality()})
	waitSeq(t, nc, "tiny", publish(t, nc, "tiny", rows{{0, 0, 1}}.csv()))
	v, err := retrain(t, nc, "tiny")
	if err != nil || v.Rule != "" || fetch(t, nc, "tiny", 1).Smoothing != nil {
		t.Fatalf("one transition: %+v, %v; want a version without a rule", v, err)
	}
	data := randomRows(3, 2000, 40, 1)
	bound := factor.ModelBytes(40, 2, 1, factor.TieNone) + 1000 // the model, not its counts
	start(t, nc, Config{Name: "bg", Order: 2, UseWorkers: WorkersNever, MaxModelBytes: bound, Quality: DefaultQuality()})
	waitSeq(t, nc, "bg", publish(t, nc, "bg", data.csv()))
	if v, err = retrain(t, nc, "bg"); err != nil {
		t.Fatal(err)
	}
	md := fetch(t, nc, "bg", 1)
	if md.Smoothing == nil || md.Smoothing.Counts != nil || !strings.Contains(v.Rule, "κ=+Inf") {
		t.Fatalf("version %+v: want the background rule (no counts)", v)
	}
}

// Tied factors and counts that are fractional or beyond SplitUnitsMax
// refit with the rule too (shard.SplitCounts cuts them; NewSeeded starts
// a tied model at random).
func TestServeQualityTiesAndCounts(t *testing.T) {
	nc, _ := server(t)
	var b strings.Builder
	b.WriteString("state,action,next_state,count\n")
	rng := rand.New(rand.NewPCG(5, 5))
	for range 600 {
		fmt.Fprintf(&b, "%d,%d,%d,%d\n", rng.IntN(20), rng.IntN(2), rng.IntN(20), 1+rng.IntN(4))
	}
	b.WriteString("3,0,4,0.5\n5,1,6,1e12\n7,0,8,2.75\n")
	for _, tie := range []factor.Tie{factor.TieSharedK, factor.TieSharedD} {
		name := "tie-" + tie.String()
		start(t, nc, Config{Name: name, Order: 3, Tie: tie, UseWorkers: WorkersNever, Accel: factor.AccelSquarem, Quality: DefaultQuality()})
		waitSeq(t, nc, name, publish(t, nc, name, []byte(b.String())))
		v, err := retrain(t, nc, name)
		if err != nil || v.Rule == "" {
			t.Fatalf("%s: %+v, %v; want a version with a rule", tie, v, err)
		}
		md := fetch(t, nc, name, 1)
		if md.Smoothing == nil || md.Tie != tie || !(md.Prob(1, 5, 6) > 0.9) {
			t.Fatalf("%s: the rule %v, P(6 | 5, 1) = %v after 10^12 counts of it", tie, md.Smoothing != nil, md.Prob(1, 5, 6))
		}
	}
}

// Bad quality settings: one error naming the setting and the value.
func TestServeQualityConfig(t *testing.T) {
	nc, _ := server(t)
	q := DefaultQuality()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Quality: Quality{Validation: 1}}, "Quality.Validation 1: must be in [0, 1)"},
		{Config{Quality: Quality{Validation: 0.1, Smooth: "kn"}}, "Quality.Smooth kn: want auto, background or none"},
		{Config{Quality: Quality{Smooth: SmoothAuto}}, "needs a validation fraction > 0"},
		{Config{Quality: Quality{Patience: 3}}, "needs a validation fraction > 0"},
		{Config{Quality: Quality{Validation: 0.1, MinGain: math.NaN()}}, "Quality.MinGain NaN"},
		{Config{Quality: Quality{Prior: factor.Prior{K: -1}}}, "Quality.Prior.K -1"},
		{Config{Mode: ModeIncremental, Quality: q}, "apply to mode refit only"},
	} {
		c.cfg.Name = "qc"
		_, err := New(t.Context(), nc, c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error with %q", c.cfg.Quality, err, c.want)
		}
	}
}
