package factor

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// within5SE reports whether an observed frequency f of N draws is within
// five standard errors of probability p. Five: with ≤ 100 cells per test
// the chance that any correct cell fails is < 1e-4 (and the seeds are
// fixed, so a pass is a pass).
func within5SE(f, p float64, N int) bool {
	se := math.Sqrt(p * (1 - p) / float64(N))
	if p == 0 {
		return f == 0
	}
	return math.Abs(f-p) <= 5*se
}

func TestSynthTrueModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		rows string
		conc float64
	}{{RowsDirichlet, 0.5}, {RowsDirichlet, 1e-3}, {RowsDirichlet, 5}, {RowsUniform, 0}} {
		md, err := TrueModel(50, 7, 3, tc.rows, tc.conc, rng)
		if err != nil {
			t.Fatal(err)
		}
		if md.N != 50 || md.M != 7 || md.U != 3 || md.Tie != TieNone {
			t.Errorf("%s/%v: shape %d %d %d %s", tc.rows, tc.conc, md.N, md.M, md.U, md.Tie)
		}
		if err := md.Validate(); err != nil {
			t.Errorf("%s/%v: %v", tc.rows, tc.conc, err)
		}
	}
	for _, bad := range []struct {
		n, m, u int
		rows    string
		conc    float64
	}{
		{0, 2, 1, RowsUniform, 0}, {5, 0, 1, RowsUniform, 0}, {5, 2, 0, RowsUniform, 0},
		{5, 2, 1, "gaussian", 1}, {5, 2, 1, RowsDirichlet, 0}, {5, 2, 1, RowsDirichlet, math.Inf(1)},
	} {
		if _, err := TrueModel(bad.n, bad.m, bad.u, bad.rows, bad.conc, rng); err == nil {
			t.Errorf("TrueModel(%d, %d, %d, %q, %v) accepted", bad.n, bad.m, bad.u, bad.rows, bad.conc)
		}
	}
}

// TestSynthDirichletMoments checks the first two moments of a symmetric
// Dirichlet(α) with k components: E[x] = 1/k and
// E[x²] = α(α+1) / (kα(kα+1)).
func TestSynthDirichletMoments(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, conc := range []float64{0.1, 0.5, 2} {
		const k, N = 4, 40000
		x := make([]float64, k)
		var s1, s2, s4 float64
		for range N {
			Dirichlet(x, conc, rng)
			if d := math.Abs(floatsSum(x) - 1); d > 1e-15 {
				t.Fatalf("α=%v: draw sums to 1%+g", conc, d)
			}
			v := x[0]
			s1 += v
			s2 += v * v
			s4 += v * v * v * v
		}
		mean, m2 := s1/N, s2/N
		seMean := math.Sqrt((m2 - mean*mean) / N)
		seM2 := math.Sqrt((s4/N - m2*m2) / N)
		wantM2 := conc * (conc + 1) / (k * conc * (k*conc + 1))
		if math.Abs(mean-1.0/k) > 5*seMean {
			t.Errorf("α=%v: E[x] = %v, want %v ± %v", conc, mean, 1.0/k, 5*seMean)
		}
		if math.Abs(m2-wantM2) > 5*seM2 {
			t.Errorf("α=%v: E[x²] = %v, want %v ± %v", conc, m2, wantM2, 5*seM2)
		}
	}
}

func floatsSum(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s
}

// TestSynthSamplerFrequencies: next states drawn by the two-stage sampler
// (hidden state from D, next state from K) have the frequencies of D K.
func TestSynthSamplerFrequencies(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const n, m, u, N = 6, 3, 2, 50000
	truth, err := TrueModel(n, m, u, RowsDirichlet, 1, rng)
	if err != nil {
		t.Fatal(err)
	}
	smp := NewSampler(truth)
	freq := make([]float64, n)
	for a := range u {
		for i := range n {
			clear(freq)
			for range N {
				freq[smp.Next(i, a, rng)]++
			}
			for j := range n {
				if p, f := truth.Prob(a, i, j), freq[j]/N; !within5SE(f, p, N) {
					t.Errorf("P^%d[%d,%d] = %v, sampled %v", a, i, j, p, f)
				}
			}
		}
	}
}

// TestSynthSampleUniform: the joint frequency of (s, a, s') is
// P^a_{s s'}/(n·u).
func TestSynthSampleUniform(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const n, u, N = 5, 2, 200000
	truth, err := TrueModel(n, 2, u, RowsUniform, 0, rng)
	if err != nil {
		t.Fatal(err)
	}
	cnt := make([]float64, u*n*n)
	k := 0
	err = Sample(truth, N, SampleOptions{Mode: SampleUniform}, rng, func(tr Transition) {
		if tr.Episode != k || tr.Step != 0 {
			t.Fatalf("transition %d has episode %d step %d, want %d 0", k, tr.Episode, tr.Step, k)
		}
		k++
		cnt[(tr.Action*n+tr.State)*n+tr.Next]++
	})
	if err != nil {
		t.Fatal(err)
	}
	if k != N {
		t.Fatalf("%d transitions, want %d", k, N)
	}
	for a := range u {
		for i := range n {
			for j := range n {
				p := truth.Prob(a, i, j) / (n * u)
				if f := cnt[(a*n+i)*n+j] / N; !within5SE(f, p, N) {
					t.Errorf("Pr(%d, %d, %d) = %v, sampled %v", i, a, j, p, f)
				}
			}
		}
	}
}

// TestSynthSampleSkewed: ≈90% of the samples start in half of the states
// (incremental-emsf §5).
func TestSynthSampleSkewed(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const n, N = 100, 100000
	truth, err := TrueModel(n, 4, 2, RowsDirichlet, 0.5, rng)
	if err != nil {
		t.Fatal(err)
	}
	cnt := make([]int, n)
	err = Sample(truth, N, SampleOptions{Mode: SampleSkewed}, rng, func(tr Transition) { cnt[tr.State]++ })
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(cnt)
	slices.Reverse(cnt)
	// A favoured state expects 0.9/50·N = 1800 draws (sd ≈ 42), another
	// 0.1/50·N = 200 (sd ≈ 14): the halves separate completely.
	if cnt[n/2-1] < 3*cnt[n/2] {
		t.Errorf("no clear split: the 50th most sampled state has %d draws, the 51st %d", cnt[n/2-1], cnt[n/2])
	}
	hot := 0
	for _, c := range cnt[:n/2] {
		hot += c
	}
	if f := float64(hot) / N; !within5SE(f, 0.9, N) {
		t.Errorf("the favoured half of the states has %.4f of the samples, want 0.9", f)
	}
	if err := Sample(truth, 1, SampleOptions{Mode: SampleSkewed, SkewMass: 1.5}, rng, func(Transition) {}); err == nil {
		t.Error("skew mass 1.5 accepted")
	}
}

func TestSynthSampleTrajectory(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const L, N = 7, 100 // 14 full episodes and one of 2 transitions
	truth, err := TrueModel(20, 3, 2, RowsDirichlet, 0.5, rng)
	if err != nil {
		t.Fatal(err)
	}
	var prev Transition
	k := 0
	err = Sample(truth, N, SampleOptions{Mode: SampleTrajectory, EpisodeLen: L}, rng, func(tr Transition) {
		if tr.Episode != k/L || tr.Step != k%L {
			t.Errorf("transition %d: episode %d step %d, want %d %d", k, tr.Episode, tr.Step, k/L, k%L)
		}
		if tr.Step > 0 && tr.State != prev.Next {
			t.Errorf("transition %d starts in %d, the previous ended in %d", k, tr.State, prev.Next)
		}
		if truth.Prob(tr.Action, tr.State, tr.Next) == 0 {
			t.Errorf("transition %d: %d --%d--> %d has probability 0", k, tr.State, tr.Action, tr.Next)
		}
		prev = tr
		k++
	})
	if err != nil {
		t.Fatal(err)
	}
	eps, err := SampleEpisodes(truth, N, L, rng)
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 15 || len(eps[0].Actions) != L || len(eps[14].Actions) != N%L {
		t.Errorf("SampleEpisodes: %d episodes, first %d transitions, last %d; want 15, %d, %d",
			len(eps), len(eps[0].Actions), len(eps[len(eps)-1].Actions), L, N%L)
	}
	for e, ep := range eps {
		if err := checkEpisode(ep, truth.N, truth.U); err != nil {
			t.Errorf("episode %d: %v", e, err)
		}
	}
	blocks, err := EpisodeBlocks(eps, truth.N, truth.U)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 || TotalCount(blocks) != N {
		t.Errorf("EpisodeBlocks: %d blocks with Σc = %v, want 2 and %d", len(blocks), TotalCount(blocks), N)
	}
	for _, bad := range []SampleOptions{{Mode: "random"}, {Mode: SampleTrajectory, EpisodeLen: -1}} {
		if err := Sample(truth, 1, bad, rng, func(Transition) {}); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestSynthZeroNeverDrawn: entries of probability 0 (a sparsity pattern in
// the truth) are never sampled.
func TestSynthZeroNeverDrawn(t *testing.T) {
	md := NewModel(4, 2, 1, TieNone)
	copy(md.D[0], []float64{1, 0, 0, 1, 0.5, 0.5, 0, 1})
	// K row 0 = (0, 1, 0, 0), row 1 = (0.5, 0, 0, 0.5); stored transposed.
	copy(md.KT[0], []float64{0, 0.5, 1, 0, 0, 0, 0, 0.5})
	if err := md.Validate(); err != nil {
		t.Fatal(err)
	}
	smp := NewSampler(md)
	rng := rand.New(rand.NewPCG(13, 14))
	for i := range 4 {
		for range 2000 {
			if j := smp.Next(i, 0, rng); md.Prob(0, i, j) == 0 {
				t.Fatalf("drew %d --0--> %d of probability 0", i, j)
			}
		}
	}
}

func TestSynthDeterminism(t *testing.T) {
	draw := func(seed uint64, mode string) (*Model, []Transition) {
		rng := rand.New(rand.NewPCG(seed, 1))
		md, err := TrueModel(30, 4, 2, RowsDirichlet, 0.5, rng)
		if err != nil {
			t.Fatal(err)
		}
		var out []Transition
		if err := Sample(md, 500, SampleOptions{Mode: mode, EpisodeLen: 20}, rng, func(tr Transition) { out = append(out, tr) }); err != nil {
			t.Fatal(err)
		}
		return md, out
	}
	for _, mode := range []string{SampleUniform, SampleSkewed, SampleTrajectory} {
		m1, t1 := draw(42, mode)
		m2, t2 := draw(42, mode)
		if !m1.Equal(m2) || !slices.Equal(t1, t2) {
			t.Errorf("%s: the same seed gave different data", mode)
		}
		m3, t3 := draw(43, mode)
		if m1.Equal(m3) || slices.Equal(t1, t3) {
			t.Errorf("%s: different seeds gave the same data", mode)
		}
	}
}

// TestTrueModelLocal: the local MDP is stochastic, each D' row uses at
// most two hidden states, and each next state is within about two arcs of
// the state left (on the ring).
func TestTrueModelLocal(t *testing.T) {
	const n, m = 1000, 10
	md, err := TrueModel(n, m, 2, RowsLocal, 0, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if err := md.Validate(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		nz := 0
		for _, v := range md.DRow(1, i) {
			if v > 0 {
				nz++
			}
		}
		if nz < 1 || nz > 2 {
			t.Fatalf("D' row %d has %d hidden states", i, nz)
		}
		for j := range n {
			dist := min((i-j+n)%n, (j-i+n)%n)
			if p := md.Prob(1, i, j); p > 0 && dist > 2*n/m+1 {
				t.Fatalf("P'(%d|%d) = %v at distance %d", j, i, p, dist)
			}
		}
	}
}
