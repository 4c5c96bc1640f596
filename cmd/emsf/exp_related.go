package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/emsf/emsf/factor"
)

// The experiments of the related methods (related-methods spec):
// mu-hmm (multiplicative-stochastic_002), online-em (online-em-nmf_003)
// and epca (epca_004). Each run function returns the rows of its CSV;
// the run* functions parse flags and write the files.

// relatedFinish writes recs to NAME.csv and, per plot, the records of one
// measure to PNG, and prints a table per measure.
func relatedFinish(e *env, out, name string, recs []record, plots []relatedPlot) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	csvPath := filepath.Join(out, name+".csv")
	if err := writeCSV(csvPath, recs); err != nil {
		return err
	}
	var measures []string
	by := map[string][]record{}
	for _, r := range recs {
		if _, ok := by[r.Measure]; !ok {
			measures = append(measures, r.Measure)
		}
		by[r.Measure] = append(by[r.Measure], r)
	}
	var pngs []string
	for _, p := range plots {
		var sel []record
		for _, r := range by[p.measure] {
			if p.setting == "" || r.Setting == p.setting {
				sel = append(sel, r)
			}
		}
		// A point where some run is infinite (a fit that gave an observed
		// transition probability 0) is left off the plot, not averaged
		// over the finite runs; the CSV and the table keep it.
		var finite []summary
		for _, s := range summarize(sel) {
			if !math.IsInf(s.mean, 0) && !math.IsNaN(s.mean) {
				finite = append(finite, s)
			}
		}
		path := filepath.Join(out, p.file+".png")
		if err := plotCurves(path, p.title, p.xLabel, p.yLabel, p.logY, finite); err != nil {
			return err
		}
		pngs = append(pngs, path)
	}
	for _, ms := range measures {
		printSummary(e.stdout, ms, summarize(by[ms]))
	}
	fmt.Fprintf(e.stdout, "wrote %s (%d rows) and %v\n", csvPath, len(recs), pngs)
	return nil
}

// relatedPlot is one PNG: the records of measure (and setting, if set).
type relatedPlot struct {
	file, measure, setting string
	title, xLabel, yLabel  string
	logY                   bool
}

// checkpoints returns 1, 2, 5, 10, 20, 50, ... up to max (and max).
func checkpoints(maxX int) []int {
	var out []int
	for base := 1; base <= maxX; base *= 10 {
		for _, f := range []int{1, 2, 5} {
			if f*base <= maxX {
				out = append(out, f*base)
			}
		}
	}
	if out[len(out)-1] != maxX {
		out = append(out, maxX)
	}
	return out
}

// ---------------------------------------------------------------- mu-hmm

// muHMMConfig is the setting of emsf experiment mu-hmm.
type muHMMConfig struct {
	runs, observations, maxIter int
	eps                         float64
	seed                        uint64
	workers                     int
	// The in-emsf part: gen data (n states, true order, transitions),
	// order m, iterations.
	genStates, genTrueOrder, genTransitions, genOrder, genIters int
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
// each iteration (the form whose values match 002's Table 1).
func muHMMFit(x *mat.Dense, r int, rule factor.MURule, eps float64, maxIter int, rng *rand.Rand) []float64 {
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
	return objs
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

// muHMMRuns runs the experiment: per run, the HMM data and each rule's fit
// (objective after every checkpoint iteration, final objective, seconds,
// iterations), and the in-emsf comparison on gen data (log-likelihood per
// transition after each iteration for EMSF and the three MU rules, --loss
// wkl).
func muHMMRuns(ctx context.Context, c muHMMConfig) ([]record, error) {
	cps := checkpoints(c.maxIter)
	genCps := checkpoints(c.genIters)
	per := len(muHMMRules)*(len(cps)+3) + (len(muHMMRules)+1)*len(genCps)
	recs := make([]record, c.runs*per)
	err := forEach(ctx, c.runs, c.workers, func(run int) error {
		seed := c.seed + uint64(run)
		out := recs[run*per : run*per : (run+1)*per]
		x := muHMMObservations(c.observations, rand.New(rand.NewPCG(seed, 1)))
		for _, rule := range muHMMRules {
			name := rule.String() + "HMM"
			t0 := time.Now()
			objs := muHMMFit(x, 3, rule, c.eps, c.maxIter, rand.New(rand.NewPCG(seed, 2)))
			secs := time.Since(t0).Seconds()
			for _, cp := range cps {
				v := objs[min(cp, len(objs))-1]
				out = append(out, record{"hmm", name, 0, cp, seed, "hmm_objective", v})
			}
			out = append(out,
				record{"hmm", name, 0, c.observations, seed, "hmm_final_objective", objs[len(objs)-1]},
				record{"hmm", name, 0, c.observations, seed, "hmm_seconds", secs},
				record{"hmm", name, 0, c.observations, seed, "hmm_iterations", float64(len(objs))})
		}
		gen, err := muHMMGen(ctx, c, seed, genCps)
		if err != nil {
			return err
		}
		out = append(out, gen...)
		if len(out) != per {
			return fmt.Errorf("run %d: %d records, want %d", run, len(out), per)
		}
		return nil
	})
	return recs, err
}

// muHMMGen is the in-emsf part of one run: log-likelihood per transition
// before each iteration's update, at the checkpoints.
func muHMMGen(ctx context.Context, c muHMMConfig, seed uint64, cps []int) ([]record, error) {
	truth, err := factor.TrueModel(c.genStates, c.genTrueOrder, 1, factor.RowsDirichlet, 0.5, rand.New(rand.NewPCG(seed, 3)))
	if err != nil {
		return nil, err
	}
	blocks, _, err := sampleBlocks(truth, c.genTransitions, factor.SampleUniform, rand.New(rand.NewPCG(seed, 4)))
	if err != nil {
		return nil, err
	}
	total := factor.TotalCount(blocks)
	// A tolerance below rounding: every pass computes its log-likelihood
	// and the fits run to the limit (or to a fixed point, carried forward).
	conv := factor.Converger{Tol: 1e-300, MaxIter: c.genIters}
	var out []record
	trace := func(name string) (func(factor.IterStats), func()) {
		var lls []float64
		return func(s factor.IterStats) { lls = append(lls, s.LogLik/total) }, func() {
			for _, cp := range cps {
				out = append(out, record{"gen", name, c.genOrder, cp, seed, "gen_loglik", lls[min(cp, len(lls))-1]})
			}
		}
	}
	md := factor.NewRandom(c.genStates, c.genOrder, 1, factor.TieNone, seed)
	prog, done := trace("EMSF")
	if _, err := factor.Fit(ctx, md, blocks, factor.FitOptions{Converger: conv, Progress: prog}); err != nil {
		return nil, err
	}
	done()
	for _, rule := range muHMMRules {
		prog, done := trace("mu-" + rule.String())
		if _, _, err := factor.MU(ctx, c.genStates, c.genOrder, 1, blocks, seed, factor.MUOptions{Rule: rule, Loss: factor.LossWKL,
			Converger: conv, Progress: prog}); err != nil {
			return nil, err
		}
		done()
	}
	return out, nil
}

// runMUHMM is emsf experiment mu-hmm.
func runMUHMM(ctx context.Context, e *env, args []string) error {
	var x expFlags
	var obs, maxIter, genIters int
	var eps float64
	reduced, paper := expSetting{runs: 10, sizes: "20000"}, expSetting{runs: 50, sizes: "20000"}
	fs := newFlagSet(e, "experiment mu-hmm", "experiment mu-hmm [flags]")
	x.register(fs, reduced, paper)
	fs.IntVar(&obs, "observations", 100000, "HMM observations N (002 Table 1: 10^5)")
	fs.IntVar(&maxIter, "hmm-iters", 5000, "iteration limit of each HMM fit (--paper: 100000)")
	fs.Float64Var(&eps, "hmm-eps", 1e-6, "stop an HMM fit when the relative changes of P and S are both below this (002: 1e-6)")
	fs.IntVar(&genIters, "gen-iters", 100, "iterations of EMSF and each MU rule on the gen data (--paper: 500)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := x.validate(fs, paper); err != nil {
		return err
	}
	set := flagsSet(fs)
	if x.paper && !set["hmm-iters"] {
		maxIter = 100000
	}
	if x.paper && !set["gen-iters"] {
		genIters = 500
	}
	if obs < 2 || maxIter < 1 || genIters < 1 || !(eps >= 0) {
		return usagef("--observations %d (>= 2), --hmm-iters %d, --gen-iters %d (>= 1), --hmm-eps %v (>= 0): out of range", obs, maxIter, genIters, eps)
	}
	c := muHMMConfig{runs: x.runs, observations: obs, maxIter: maxIter, eps: eps, seed: x.seed, workers: x.workers,
		genStates: 100, genTrueOrder: 20, genTransitions: x.sizesV[0], genOrder: 10, genIters: genIters}
	recs, err := muHMMRuns(ctx, c)
	if err != nil {
		return err
	}
	return relatedFinish(e, x.out, "mu-hmm", recs, []relatedPlot{
		{"mu-hmm", "hmm_objective", "", "3-state HMM, X ≈ P S Pᵀ (002 Table 1 top, Fig. 1 top)", "iterations", "‖X − PSPᵀ‖²_F", true},
		{"mu-hmm-gen", "gen_loglik", "", fmt.Sprintf("gen data n = 100, m = 10, --loss wkl: EMSF vs MU (%d transitions)", x.sizesV[0]),
			"iterations", "log-likelihood per transition", false},
	})
}

// flagsSet returns the names of the flags given on the command line.
func flagsSet(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}
