package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/emsf/emsf/factor/experiment"
)

// The experiments of the related methods (related-methods spec): mu-hmm
// (multiplicative-stochastic_002), online-em (online-em-nmf_003) and epca
// (epca_004). Their runs are package experiment's (MUHMM, OnlineEM, EPCA);
// the run* functions parse flags, run the jobs and write the files.

// relatedPlot is one PNG: the records of measure (and setting, if set).
type relatedPlot struct {
	file, measure, setting string
	title, xLabel, yLabel  string
	logY                   bool
}

// runRelated runs count jobs of run with runAll (progress, the rows of the
// finished runs kept on Ctrl-C), writes NAME.csv and the plots, and
// returns interruptedErr's error.
func runRelated(ctx context.Context, e *env, x *expFlags, name string, count int,
	run func(ctx context.Context, k int) ([]experiment.Record, error), xName xNamer, plots []relatedPlot) error {
	log, err := x.logs.logger(e, "emsf.experiment")
	if err != nil {
		return err
	}
	recs, interrupted, err := runAll(ctx, newProgress(e, &x.logs, &x.progress, log), count, x.workers,
		func(ctx context.Context, k int) ([]experiment.Record, error) {
			rows, err := run(ctx, k)
			if err == nil && len(rows) > 0 {
				log.Debug("run done", "job", k, "seed", rows[0].Seed, "rows", len(rows))
			}
			return rows, err
		})
	if err != nil {
		return err
	}
	if err := relatedFinish(e, x.out, name, recs, xName, plots); err != nil {
		return err
	}
	return interruptedErr(interrupted, len(recs), x.out)
}

// relatedFinish writes recs to NAME.csv and, per plot, the records of one
// measure (and setting) to a PNG, and prints a table per measure. Points
// where some run is infinite (a fit that gave an observed transition
// probability 0) are not drawn and the legend says so; the CSV and the
// table keep them.
func relatedFinish(e *env, out, name string, recs []experiment.Record, xName xNamer, plots []relatedPlot) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	csvPath := filepath.Join(out, name+".csv")
	if err := writeCSV(csvPath, recs, xName); err != nil {
		return err
	}
	var measures []string
	by := map[string][]experiment.Record{}
	for _, r := range recs {
		if _, ok := by[r.Measure]; !ok {
			measures = append(measures, r.Measure)
		}
		by[r.Measure] = append(by[r.Measure], r)
	}
	var pngs []string
	for _, p := range plots {
		var sel []experiment.Record
		for _, r := range by[p.measure] {
			if p.setting == "" || r.Setting == p.setting {
				sel = append(sel, r)
			}
		}
		path := filepath.Join(out, p.file+".png")
		if err := plotCurves(path, p.title, p.xLabel, p.yLabel, p.logY, experiment.Summarize(sel)); err != nil {
			return err
		}
		pngs = append(pngs, path)
	}
	for _, ms := range measures {
		printSummary(e.stdout, ms, experiment.Summarize(by[ms]))
	}
	fmt.Fprintf(e.stdout, "wrote %s (%d rows) and %v\n", csvPath, len(recs), pngs)
	return nil
}

// runMUHMM is emsf experiment mu-hmm (see experiment.MUHMM).
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
	job := &experiment.MUHMM{Observations: obs, HMMIters: maxIter, HMMEps: eps, Seed: x.seed,
		GenStates: 100, GenTrueOrder: 20, GenTransitions: x.sizesV[0], GenOrder: 10, GenIters: genIters}
	// The objective curves are by iteration; the totals of a run (its
	// final objective, seconds and iterations) at the HMM's observations.
	xName := func(r experiment.Record) string {
		if r.Measure == "hmm_objective" || r.Measure == "gen_loglik" {
			return "iterations"
		}
		return "observations"
	}
	return runRelated(ctx, e, &x, "mu-hmm", job.Jobs(x.runs), job.Run, xName, []relatedPlot{
		{"mu-hmm", "hmm_objective", "", "3-state HMM, X ≈ P S Pᵀ (multiplicative-stochastic paper, Table 1 top and Fig. 1 top)", "iterations", "squared Frobenius error ‖X − PSPᵀ‖²", true},
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
