package experiment

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/emsf/emsf/factor"
)

// MUHMM is multiplicative-stochastic_002 Table 1 (top) and its in-emsf
// counterpart. Per run r (seed Seed + r, job r):
//   - "hmm": Observations draws of 002's 3-state HMM give X (eq. 5), fitted
//     as X ≈ P S Pᵀ by each rule of muHMMRules from the same start;
//     ‖X − PSPᵀ‖²_F at the checkpoints 1, 2, 5, 10, ... of HMMIters
//     ("hmm_objective", x = iterations), and at the end the final
//     objective, the seconds and the iterations taken (x = Observations);
//   - "gen": P = D'K' (GenStates states, true order GenTrueOrder,
//     Dirichlet(0.5) rows), GenTransitions uniform transitions, EMSF and
//     the three MU rules under the weighted KL loss (factor.LossWKL, fit
//     --loss wkl) of order GenOrder for GenIters iterations;
//     log-likelihood per transition at the checkpoints ("gen_loglik").
type MUHMM struct {
	Observations, HMMIters  int
	HMMEps                  float64
	GenStates, GenTrueOrder int
	GenTransitions          int
	GenOrder, GenIters      int
	Seed                    uint64
}

// Jobs returns the number of jobs of runs runs: one per run.
func (x *MUHMM) Jobs(runs int) int { return runs }

// Rows returns the number of rows of a job.
func (x *MUHMM) Rows() int {
	return len(muHMMRules)*(len(checkpoints(x.HMMIters))+3) + (len(muHMMRules)+1)*len(checkpoints(x.GenIters))
}

// Run runs job k (run k).
func (x *MUHMM) Run(ctx context.Context, k int) ([]Record, error) {
	seed := x.Seed + uint64(k)
	out := make([]Record, 0, x.Rows())
	obs := muHMMObservations(x.Observations, rand.New(rand.NewPCG(seed, 1)))
	for _, rule := range muHMMRules {
		name := rule.String() + "HMM"
		t0 := time.Now()
		objs, err := muHMMFit(ctx, obs, 3, rule, x.HMMEps, x.HMMIters, rand.New(rand.NewPCG(seed, 2)))
		if err != nil {
			return nil, fmt.Errorf("run %d (seed %d), %s: %w", k, seed, name, err)
		}
		secs := time.Since(t0).Seconds()
		for _, cp := range checkpoints(x.HMMIters) {
			out = append(out, Record{"hmm", name, 0, cp, seed, "hmm_objective", objs[min(cp, len(objs))-1]})
		}
		out = append(out,
			Record{"hmm", name, 0, x.Observations, seed, "hmm_final_objective", objs[len(objs)-1]},
			Record{"hmm", name, 0, x.Observations, seed, "hmm_seconds", secs},
			Record{"hmm", name, 0, x.Observations, seed, "hmm_iterations", float64(len(objs))})
	}
	gen, err := x.gen(ctx, seed)
	if err != nil {
		return nil, fmt.Errorf("run %d (seed %d), gen: %w", k, seed, err)
	}
	return append(out, gen...), nil
}

// gen is the in-emsf part of one run: log-likelihood per transition
// before each iteration's update, at the checkpoints.
func (x *MUHMM) gen(ctx context.Context, seed uint64) ([]Record, error) {
	cps := checkpoints(x.GenIters)
	truth, err := factor.TrueModel(x.GenStates, x.GenTrueOrder, 1, factor.RowsDirichlet, 0.5, rand.New(rand.NewPCG(seed, 3)))
	if err != nil {
		return nil, err
	}
	blocks, _, err := SampleBlocks(truth, x.GenTransitions, factor.SampleUniform, rand.New(rand.NewPCG(seed, 4)))
	if err != nil {
		return nil, err
	}
	total := factor.TotalCount(blocks)
	// A tolerance below rounding: every pass computes its log-likelihood
	// and the fits run to the limit (or to a fixed point, carried forward).
	conv := factor.Converger{Tol: 1e-300, MaxIter: x.GenIters}
	var out []Record
	trace := func(name string) (func(factor.IterStats), func()) {
		var lls []float64
		return func(s factor.IterStats) { lls = append(lls, s.LogLik/total) }, func() {
			for _, cp := range cps {
				out = append(out, Record{"gen", name, x.GenOrder, cp, seed, "gen_loglik", lls[min(cp, len(lls))-1]})
			}
		}
	}
	md := factor.NewRandom(x.GenStates, x.GenOrder, 1, factor.TieNone, seed)
	prog, done := trace("EMSF")
	// One goroutine per fit: the runs are the parallelism.
	if _, err := factor.Fit(ctx, md, blocks, factor.FitOptions{Workers: 1, Converger: conv, Progress: prog}); err != nil {
		return nil, err
	}
	done()
	for _, rule := range muHMMRules {
		prog, done := trace("mu-" + rule.String())
		if _, _, err := factor.MU(ctx, x.GenStates, x.GenOrder, 1, blocks, seed, factor.MUOptions{Rule: rule, Loss: factor.LossWKL,
			Converger: conv, Progress: prog}); err != nil {
			return nil, err
		}
		done()
	}
	return out, nil
}

var muHMMRules = []factor.MURule{factor.MUNorm, factor.MURepa, factor.MURela}

// muHMMObservations draws the 3-state HMM of 002 §3.1 (spec §1.4):
// A = [[0,.9,.1],[0,0,1],[1,0,0]], emissions round(N(11, 2)), round(N(16,
// 3)), round(U(16, 26)), the first state from the stationary law, and
// returns X (alphabet×alphabet, eq. 5) over the observed integer range.
func muHMMObservations(count int, rng *rand.Rand) *mat.Dense {
	cum := [][]float64{{0, 0.9, 1}, {0, 0, 1}, {1, 1, 1}}
	pi := []float64{10.0 / 29, 9.0 / 29, 10.0 / 29}
	u := rng.Float64()
	s := 0
	for acc := pi[0]; u > acc && s < 2; acc += pi[s] {
		s++
	}
	obs := make([]int, count)
	lo, hi := math.MaxInt, math.MinInt
	for t := range obs {
		var x float64
		switch s {
		case 0:
			x = 11 + 2*rng.NormFloat64()
		case 1:
			x = 16 + 3*rng.NormFloat64()
		default:
			x = 16 + 10*rng.Float64()
		}
		obs[t] = int(math.Round(x))
		lo, hi = min(lo, obs[t]), max(hi, obs[t])
		u := rng.Float64()
		next := 0
		for next < 2 && u >= cum[s][next] {
			next++
		}
		s = next
	}
	m := hi - lo + 1
	x := mat.NewDense(m, m, nil)
	for t := 0; t+1 < count; t++ {
		x.Set(obs[t]-lo, obs[t+1]-lo, x.At(obs[t]-lo, obs[t+1]-lo)+1/float64(count-1))
	}
	return x
}

// muHMMFit fits X ≈ P S Pᵀ (P m×r left-stochastic, S r×r summing to 1)
// by rule under ½‖X − PSPᵀ‖²_F from a Uniform(0,1) start (002 §3.1), both
// factors from the same old iterate, until the relative changes of P and
// S are both below eps or maxIter. It returns ‖X − PSPᵀ‖²_F = 2J after
// each iteration (the form whose values match 002's Table 1), or ctx's
// error.
func muHMMFit(ctx context.Context, x *mat.Dense, r int, rule factor.MURule, eps float64, maxIter int, rng *rand.Rand) ([]float64, error) {
	m, _ := x.Dims()
	p, s := mat.NewDense(m, r, nil), mat.NewDense(r, r, nil)
	for i := range m {
		for k := range r {
			p.Set(i, k, rng.Float64())
		}
	}
	for k := range r {
		for q := range r {
			s.Set(k, q, rng.Float64())
		}
	}
	normCols(p)
	s.Scale(1/mat.Sum(s), s)
	mul := func(a, b mat.Matrix) *mat.Dense {
		var d mat.Dense
		d.Mul(a, b)
		return &d
	}
	col := make([]float64, max(m, r*r))
	gp, gm := make([]float64, max(m, r*r)), make([]float64, max(m, r*r))
	var objs []float64
	for iter := 0; iter < maxIter; iter++ {
		if iter%100 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		g := mul(p.T(), p) // PᵀP
		// ∇⁺_P = P S G Sᵀ + P Sᵀ G S, ∇⁻_P = X P Sᵀ + Xᵀ P S.
		gpP := mul(p, mul(mul(s, g), s.T()))
		gpP.Add(gpP, mul(p, mul(mul(s.T(), g), s)))
		xp := mul(x, p)
		gmP := mul(xp, s.T())
		gmP.Add(gmP, mul(mul(x.T(), p), s))
		// ∇⁺_S = G S G, ∇⁻_S = Pᵀ X P.
		gpS := mul(mul(g, s), g)
		gmS := mul(p.T(), xp)
		oldP, oldS := mat.DenseCopyOf(p), mat.DenseCopyOf(s)
		for k := range r {
			for i := range m {
				col[i], gp[i], gm[i] = p.At(i, k), gpP.At(i, k), gmP.At(i, k)
			}
			factor.MUVector(rule, col[:m], gp[:m], gm[:m])
			for i := range m {
				p.Set(i, k, col[i])
			}
		}
		for k := range r {
			for q := range r {
				col[k*r+q], gp[k*r+q], gm[k*r+q] = s.At(k, q), gpS.At(k, q), gmS.At(k, q)
			}
		}
		factor.MUVector(rule, col[:r*r], gp[:r*r], gm[:r*r])
		for k := range r {
			for q := range r {
				s.Set(k, q, col[k*r+q])
			}
		}
		recon := mul(mul(p, s), p.T())
		recon.Sub(x, recon)
		f := mat.Norm(recon, 2)
		objs = append(objs, f*f)
		if relChange(p, oldP) < eps && relChange(s, oldS) < eps {
			break
		}
	}
	return objs, nil
}

func normCols(p *mat.Dense) {
	m, r := p.Dims()
	for k := range r {
		s := 0.0
		for i := range m {
			s += p.At(i, k)
		}
		for i := range m {
			p.Set(i, k, p.At(i, k)/s)
		}
	}
}

// relChange returns ‖a − b‖_F/‖a‖_F.
func relChange(a, b *mat.Dense) float64 {
	var d mat.Dense
	d.Sub(a, b)
	return mat.Norm(&d, 2) / mat.Norm(a, 2)
}
