package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"text/tabwriter"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/factor/blackjack"
	"github.com/emsf/emsf/factor/experiment"
)

// bjHeader is the header of blackjack.csv: experiment.BlackjackRow's
// fields.
var bjHeader = []string{"run", "seed", "agent", "batch", "hands", "return"}

// runBlackjack is emsf experiment blackjack, the online blackjack
// experiment of incremental-emsf §5 (Fig. 4; see experiment.Blackjack).
func runBlackjack(ctx context.Context, e *env, args []string) error {
	const (
		reducedRuns, paperRuns       = 10, 100
		reducedBatches, paperBatches = 50, 100
	)
	var (
		out        string
		seed       uint64
		runs       int
		batches    int
		orders     string
		paper      bool
		evalHands  int
		batchHands int
		epsilon    float64
		alpha      float64
		workers    int
		iters      int
		tol        float64
		emsfInit   string
		logs       logFlags
		prog       progressFlags
	)
	fs := newFlagSet(e, "experiment blackjack", "experiment blackjack [flags]")
	fs.StringVar(&out, "out", "experiment-out", "folder for the CSV and the PNG")
	fs.Uint64Var(&seed, "seed", 1, "base seed: run r uses seed+r for its hands, its EMSF starts and its evaluations")
	fs.IntVar(&runs, "runs", reducedRuns, fmt.Sprintf("independent runs (--paper: %d)", paperRuns))
	fs.IntVar(&batches, "batches", reducedBatches, fmt.Sprintf("batches of hands per run (--paper: %d)", paperBatches))
	fs.StringVar(&orders, "orders", "10,20", "orders m of the EMSF+PISF agents, comma-separated")
	fs.BoolVar(&paper, "paper", false, "use the paper's settings (100 runs, 100 batches): minutes instead of seconds")
	fs.IntVar(&evalHands, "eval-hands", 0, "evaluate each policy on this many simulated hands (the paper: 1000000); 0: its exact expected return")
	fs.IntVar(&batchHands, "batch-hands", 100, "hands per batch")
	fs.Float64Var(&epsilon, "epsilon", 0.15, "exploration rate of the collecting policies after the first batch")
	fs.Float64Var(&alpha, "alpha", 0.1, "learning rate of Q-learning")
	fs.IntVar(&workers, "workers", runtime.GOMAXPROCS(0), "(run, agent) pairs computed in parallel (the results do not depend on it)")
	fs.IntVar(&iters, "iters", 200, "maximum EM iterations per EMSF fit")
	fs.Float64Var(&tol, "tol", 1e-6, "stop an EMSF fit when the relative change of its log-likelihood is at most this")
	fs.StringVar(&emsfInit, "emsf-init", "uniform-unseen", "start of each EMSF fit: random (a fresh seeded random start per batch), uniform-unseen (random, with the rows of D of unvisited state-action pairs uniform), warm (the previous batch's model), warm-uniform (both)")
	logs.register(fs)
	prog.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if paper {
		if !set["runs"] {
			runs = paperRuns
		}
		if !set["batches"] {
			batches = paperBatches
		}
	}
	switch {
	case out == "":
		return usagef("--out must name a folder")
	case runs < 1:
		return usagef("--runs %d: must be >= 1", runs)
	case batches < 1:
		return usagef("--batches %d: must be >= 1", batches)
	case evalHands < 0:
		return usagef("--eval-hands %d: must be >= 0", evalHands)
	case batchHands < 1:
		return usagef("--batch-hands %d: must be >= 1", batchHands)
	case !(epsilon > 0 && epsilon <= 1):
		return usagef("--epsilon %v: must be in (0, 1]", epsilon)
	case !(alpha > 0 && alpha <= 1):
		return usagef("--alpha %v: must be in (0, 1]", alpha)
	case workers < 1:
		return usagef("--workers %d: must be >= 1", workers)
	case iters < 1:
		return usagef("--iters %d: must be >= 1", iters)
	case !(tol >= 0):
		return usagef("--tol %v: must be >= 0", tol)
	}
	var warm, uniformUnseen bool
	switch emsfInit {
	case "random":
	case "uniform-unseen":
		uniformUnseen = true
	case "warm":
		warm = true
	case "warm-uniform":
		warm, uniformUnseen = true, true
	default:
		return usagef("--emsf-init %q: must be random, uniform-unseen, warm or warm-uniform", emsfInit)
	}
	ms, err := intList("orders", orders)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m < 1 || m > blackjack.NumStates {
			return usagef("--orders: %d: must be in [1, %d]", m, blackjack.NumStates)
		}
	}
	if err := prog.validate(); err != nil {
		return err
	}
	log, err := logs.logger(e, "emsf.experiment")
	if err != nil {
		return err
	}

	job := &experiment.Blackjack{Orders: ms, Seed: seed, Batches: batches, BatchHands: batchHands,
		Epsilon: epsilon, Alpha: alpha, EvalHands: evalHands, Converger: factor.Converger{Tol: tol, MaxIter: iters},
		Warm: warm, UniformUnseen: uniformUnseen}
	recs, interrupted, err := runAll(ctx, newProgress(e, &logs, &prog, log), job.Jobs(runs), workers, func(ctx context.Context, k int) ([]experiment.BlackjackRow, error) {
		rows, err := job.Run(ctx, k)
		if err == nil {
			last := rows[len(rows)-1]
			log.Debug("run done", "seed", last.Seed, "agent", last.Agent, "return", last.Return)
		}
		return rows, err
	})
	if err != nil {
		return err
	}
	if err := bjFinish(e, out, evalHands, batches, batchHands, epsilon, recs); err != nil {
		return err
	}
	return interruptedErr(interrupted, len(recs), out)
}

// bjFinish writes blackjack.csv and blackjack.png into out and prints the
// table of means (at most about ten batches per agent; the CSV has all).
func bjFinish(e *env, out string, evalHands, batches, batchHands int, epsilon float64, recs []experiment.BlackjackRow) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	csvPath := filepath.Join(out, "blackjack.csv")
	err := writeRows(csvPath, bjHeader, len(recs), func(k int) []string {
		r := recs[k]
		return []string{strconv.Itoa(r.Run), strconv.FormatUint(r.Seed, 10), r.Agent, strconv.Itoa(r.Batch),
			strconv.Itoa(r.Hands), strconv.FormatFloat(r.Return, 'g', -1, 64)}
	})
	if err != nil {
		return err
	}
	sums := experiment.BlackjackSummaries(recs)
	evalText := "exact expected return"
	if evalHands > 0 {
		evalText = fmt.Sprintf("mean return on %d hands", evalHands)
	}
	pngPath := filepath.Join(out, "blackjack.png")
	if err := plotCurves(pngPath, fmt.Sprintf("Online blackjack, batches of %d hands, ε = %g (incremental-emsf Fig. 4)", batchHands, epsilon),
		"hands played", "return per hand ("+evalText+")", false, sums); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "agent\thands\treturn\tstd. error\truns\t")
	step := max(1, (batches+9)/10)
	for _, s := range sums {
		if b := s.X / batchHands; b != 1 && b%step != 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%.5f\t%.3g\t%d\t\n", s.Method, s.X, s.Mean, s.SE, s.Runs)
	}
	tw.Flush()
	fmt.Fprintf(e.stdout, "wrote %s (%d rows) and %s\n", csvPath, len(recs), pngPath)
	return nil
}
