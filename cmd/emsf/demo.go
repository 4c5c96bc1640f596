package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// runDemo is the README's first command: the experiment of emsf-ijcai2015
// Fig. 2 at one sample size. It generates an MDP whose transition matrix is
// a factorization of order 20, samples few transitions, fits EMSF of order 5
// and compares its error with the counting estimate (CNT).
func runDemo(ctx context.Context, e *env, args []string) error {
	var g genFlags
	var dir string
	var m, workers int
	var logs logFlags
	var stop stopFlags
	var prog progressFlags
	fs := newFlagSet(e, "demo", "demo [flags]")
	g.register(fs)
	logs.register(fs)
	stop.register(fs)
	prog.register(fs)
	fs.StringVar(&dir, "dir", "", "folder for the generated data and the fitted model (default: a new temporary folder, printed; the demo leaves nothing where it runs)")
	fs.IntVar(&m, "order", 5, "order m of the fitted factorization")
	fs.IntVar(&workers, "workers", 2, "goroutines computing statistics")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := g.validate(); err != nil {
		return err
	}
	if m < 1 || m > g.states {
		return usagef("--order %d: must be in [1, --states=%d]", m, g.states)
	}
	if workers < 1 {
		return usagef("--workers %d: must be >= 1", workers)
	}
	if err := stop.validate(); err != nil {
		return err
	}
	if err := prog.validate(); err != nil {
		return err
	}
	log, err := logs.logger(e, "emsf.demo")
	if err != nil {
		return err
	}
	w := e.stdout
	if dir == "" {
		// Not the working folder: run in a clone, the demo would leave
		// untracked files in the repository.
		if dir, err = os.MkdirTemp("", "emsf-demo-"); err != nil {
			return fmt.Errorf("a folder for the demo's files: %w (give one with --dir)", err)
		}
		fmt.Fprintf(w, "Writing the demo's files to %s (--dir DIR to choose).\n", dir)
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--dir: %w", err)
	}
	fmt.Fprintf(w, "1. A random MDP: n=%d states, u=%d action(s), P^a = D'K' of true order %d (rows %s).\n",
		g.states, g.actions, g.order, g.rows)
	data := filepath.Join(dir, "transitions.csv")
	truth, err := g.generate(ctx, data)
	if err != nil {
		return err
	}
	truthPath := filepath.Join(dir, "truth.arrow")
	if err := arrowio.WriteModel(truthPath, &arrowio.ModelFile{Model: truth, Params: g.params()}, "arrow"); err != nil {
		return err
	}
	fmt.Fprintf(w, "2. Sampled %d transitions (%s sampling) into %s.\n", g.transitions, g.sampling, data)

	in := inputFlags{input: data, state: "state", action: "action", next: "next_state", count: "",
		states: g.states, actions: g.actions}
	ds, err := loadData(ctx, &in, 0, 0)
	if err != nil {
		return err
	}
	shards, _ := shard.Split(ds.train, ds.n, shard.DefaultTargetNNZ)
	blocks := shard.Blocks(shards)
	md := factor.NewRandom(ds.n, m, ds.u, factor.TieNone, g.seed)
	t0 := time.Now()
	report := newProgress(e, &logs, &prog, log)
	// The same stopping rule as emsf fit (stopFlags): emsf fit on the
	// demo's data gives the demo's model.
	res, err := factor.Fit(ctx, md, blocks, factor.FitOptions{
		Workers:   workers,
		Converger: stop.converger(),
		Progress:  report.iterations(stop.iters),
	})
	report.done()
	if err != nil {
		return err
	}
	if err := factor.Evaluate(ctx, md, blocks, workers); err != nil {
		return err
	}
	if res.Status.Early() && stop.tol > 0 {
		log.Warn("the fit stopped before converging: raise --iters or --time-limit (or loosen --tol)",
			"status", res.Status, "iterations", res.Iterations, "tol", stop.tol)
	}
	modelPath := filepath.Join(dir, "model.arrow")
	mf := &arrowio.ModelFile{Model: md, Fingerprint: ds.fingerprint, Params: map[string]string{"source": "emsf demo"},
		Status: res.Status.String()}
	if err := arrowio.WriteModel(modelPath, mf, "arrow"); err != nil {
		return err
	}
	fmt.Fprintf(w, "3. Fitted EMSF of order m=%d: %d iterations (%s) in %s, log-likelihood %.6g.\n",
		m, res.Iterations, res.Status, time.Since(t0).Round(time.Millisecond), md.LogLik)

	cnt, err := factor.NewCNT(ds.n, ds.u, ds.train, 0)
	if err != nil {
		return err
	}
	fe, fc := factor.FrobeniusError(truth, md), factor.FrobeniusError(truth, cnt)
	fmt.Fprintf(w, "4. Error against the true P, ‖P − P̃‖_F (lower is better):\n")
	fmt.Fprintf(w, "     EMSF, m=%-3d %.4f\n     CNT         %.4f   (counting: P̃_ij = C_ij / Σ_j C_ij)\n", m, fe, fc)
	if fe < fc {
		fmt.Fprintf(w, "   EMSF is %.1fx closer to the truth than counting from the same %d transitions.\n", fc/fe, g.transitions)
	} else {
		fmt.Fprintf(w, "   Counting wins at this sample size: EMSF helps most when transitions are scarce.\n")
	}
	fmt.Fprintf(w, "\nModel written to %s (Arrow IPC; try: emsf inspect --model %s).\n", modelPath, modelPath)
	fmt.Fprintf(w, "Evaluate it:       emsf eval --model %s --input %s --truth %s --cnt\n", modelPath, data, truthPath)
	return nil
}
