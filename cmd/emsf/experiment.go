package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"text/tabwriter"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/factor/experiment"
)

// experimentCmd is one subcommand of emsf experiment: a figure of the papers.
type experimentCmd struct {
	name    string
	summary string
	run     func(ctx context.Context, e *env, args []string) error
}

// experiments is the table of emsf experiment's subcommands.
func experiments() []experimentCmd {
	return []experimentCmd{
		{"sample-size", "emsf-ijcai2015 Fig. 2: ‖P − P̃‖_F against the number of transitions, EMSF (m = 5, 10, 20) vs CNT", runSampleSize},
		{"sampling", "incremental-emsf Fig. 2: uniform vs skewed sampling, EMSF vs KLM (m = 10), ρ-weighted ‖P − DK‖_F (KL_ρ in the CSV)", runSampling},
		{"online", "incremental-emsf Fig. 3: incremental EMSF (m = 30) on a stream, KL_ρ against transitions for several t_c and α", runOnline},
		{"blackjack", "incremental-emsf Fig. 4: online blackjack, dealer vs Q-learning vs CNT+PI vs EMSF+PISF, exact returns", runBlackjack},
		{"mu-hmm", "multiplicative-stochastic_002 Table 1 (top): norm/repa/rela on a 3-state HMM; EMSF vs mu-* on gen data", runMUHMM},
		{"epca", "epca_004: E-PCA (exponential link, all-ones basis) vs EMSF by number of bases, held-out log-likelihood and KL_ρ, on gen data and blackjack", runEPCA},
		{"online-em", "online-em-nmf_003: online EM vs incremental EMSF on the Fig. 3 stream (KL_ρ); the paper's Fig. 1 (exact online EM)", runOnlineEMExperiment},
	}
}

// runExperiment dispatches emsf experiment <name>.
func runExperiment(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := e.stdout // like every command's -h
		fmt.Fprintln(w, "Usage: emsf experiment <name> [flags]\n\nReproduce a figure of the papers: a CSV of every run and a PNG plot in --out.\n\nExperiments:")
		for _, x := range experiments() {
			fmt.Fprintf(w, "  %-12s %s\n", x.name, x.summary)
		}
		fmt.Fprintln(w, "\nRun 'emsf experiment <name> -h' for its flags; --paper uses the paper's settings.")
		if len(args) == 0 {
			return usagef("name an experiment")
		}
		return flag.ErrHelp
	}
	for _, x := range experiments() {
		if x.name == args[0] {
			if err := x.run(ctx, e, args[1:]); err != nil {
				return fmt.Errorf("%s: %w", x.name, err)
			}
			return nil
		}
	}
	names := make([]string, 0, len(experiments()))
	for _, x := range experiments() {
		names = append(names, x.name)
	}
	return usagef("unknown experiment %q (want one of %v)", args[0], names)
}

// expFlags are the flags every experiment shares. The reduced and the
// paper's settings differ in the defaults of --runs and --sizes (and
// whatever the experiment adds); a flag given explicitly always wins.
type expFlags struct {
	out      string
	seed     uint64
	runs     int
	paper    bool
	sizes    string
	workers  int
	iters    int
	tol      float64
	logs     logFlags
	progress progressFlags

	sizesV []int
}

// expSetting is one set of defaults (reduced or paper).
type expSetting struct {
	runs  int
	sizes string
}

func (x *expFlags) register(fs *flag.FlagSet, reduced, paper expSetting) {
	fs.StringVar(&x.out, "out", "experiment-out", "folder for the CSV and the PNG")
	fs.Uint64Var(&x.seed, "seed", 1, "base seed: run r uses seed+r for the true model, the sample and the initialisations")
	fs.IntVar(&x.runs, "runs", reduced.runs, fmt.Sprintf("independent runs per point (--paper: %d)", paper.runs))
	fs.BoolVar(&x.paper, "paper", false, "use the paper's settings (runs, sample sizes): minutes instead of seconds")
	fs.StringVar(&x.sizes, "sizes", reduced.sizes, fmt.Sprintf("numbers of sampled transitions, comma-separated (--paper: %s)", paper.sizes))
	fs.IntVar(&x.workers, "workers", runtime.GOMAXPROCS(0), "runs computed in parallel (the results do not depend on it)")
	fs.IntVar(&x.iters, "iters", 1000, "maximum EM (and KLM) iterations per fit")
	fs.Float64Var(&x.tol, "tol", 1e-6, "stop a fit when the relative change of its objective is at most this")
	x.logs.register(fs)
	x.progress.register(fs)
}

// validate applies --paper to the flags not given and checks them all.
func (x *expFlags) validate(fs *flag.FlagSet, paper expSetting) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if x.paper {
		if !set["runs"] {
			x.runs = paper.runs
		}
		if !set["sizes"] {
			x.sizes = paper.sizes
		}
	}
	if x.out == "" {
		return usagef("--out must name a folder")
	}
	if x.runs < 1 {
		return usagef("--runs %d: must be >= 1", x.runs)
	}
	if x.workers < 1 {
		return usagef("--workers %d: must be >= 1", x.workers)
	}
	if x.iters < 1 {
		return usagef("--iters %d: must be >= 1", x.iters)
	}
	if !(x.tol >= 0) {
		return usagef("--tol %v: must be >= 0", x.tol)
	}
	sizes, err := intList("sizes", x.sizes)
	if err != nil {
		return err
	}
	for _, s := range sizes {
		if s < 1 {
			return usagef("--sizes: %d transitions: must be >= 1", s)
		}
	}
	x.sizesV = sizes
	return x.progress.validate()
}

func (x *expFlags) converger() factor.Converger {
	return factor.Converger{Tol: x.tol, MaxIter: x.iters}
}

// csvHeader is the header of an experiment's CSV: x_name says what x is
// (transitions, iterations, bases, observations: experiments and their
// measures differ), value is the measure's value (an error, a
// log-likelihood, seconds).
var csvHeader = []string{"setting", "method", "m", "x_name", "x", "seed", "measure", "value"}

// xNamer names the x of a record in an experiment's CSV.
type xNamer func(experiment.Record) string

// xIs is the xNamer of an experiment whose every x is one quantity.
func xIs(name string) xNamer { return func(experiment.Record) string { return name } }

// runAll runs job(ctx, k) for k in [0, count) on at most workers
// goroutines and returns the rows of every job, in job order (so they do
// not depend on the schedule), or the error of the lowest k that failed.
// It reports the runs done on rep. When ctx is cancelled (Ctrl-C, SIGTERM)
// no new job starts and the running ones stop: runAll then returns the
// rows of the jobs that finished and interrupted; an error if none did.
func runAll[T any](ctx context.Context, rep *progress, count, workers int, job func(ctx context.Context, k int) ([]T, error)) (rows []T, interrupted bool, err error) {
	errs := make([]error, count)
	out := make([][]T, count)
	finished := make([]bool, count)
	next := make(chan int)
	var mu sync.Mutex
	done := 0
	rep.runs(0, count)
	var wg sync.WaitGroup
	for range min(workers, count) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				if out[k], errs[k] = job(ctx, k); errs[k] == nil {
					finished[k] = true
					mu.Lock()
					done++
					rep.runs(done, count)
					mu.Unlock()
				}
			}
		}()
	}
	for k := 0; k < count; k++ {
		if ctx.Err() != nil {
			break
		}
		next <- k
	}
	close(next)
	wg.Wait()
	rep.done()
	if ctx.Err() != nil {
		// A job stopped by the cancellation fails with ctx's error:
		// whatever else failed is reported, the rest is kept.
		for _, err := range errs {
			if err != nil && !errors.Is(err, ctx.Err()) {
				return nil, false, err
			}
		}
		for k, ok := range finished {
			if ok {
				rows = append(rows, out[k]...)
			}
		}
		if len(rows) == 0 {
			return nil, true, fmt.Errorf("interrupted before any of the %d runs finished: nothing written", count)
		}
		return rows, true, nil
	}
	for _, err := range errs {
		if err != nil {
			return nil, false, err
		}
	}
	for _, r := range out {
		rows = append(rows, r...)
	}
	return rows, false, nil
}

// interruptedErr is the error of an experiment that was interrupted after
// writing the records of the runs it finished (nil if it was not).
func interruptedErr(interrupted bool, rows int, out string) error {
	if !interrupted {
		return nil
	}
	return fmt.Errorf("interrupted: wrote the %d rows of the finished runs to %s (the figure shows them; run again for all)", rows, out)
}

// writeCSV writes the records atomically.
func writeCSV(path string, recs []experiment.Record, xName xNamer) error {
	return writeRows(path, csvHeader, len(recs), func(k int) []string {
		r := recs[k]
		m := ""
		if r.M > 0 {
			m = strconv.Itoa(r.M)
		}
		return []string{r.Setting, r.Method, m, xName(r), strconv.Itoa(r.Transitions), strconv.FormatUint(r.Seed, 10),
			r.Measure, strconv.FormatFloat(r.Error, 'g', -1, 64)}
	})
}

// writeRows writes a CSV file atomically: header, then row(k) for k < n.
func writeRows(path string, header []string, n int, row func(k int) []string) error {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	if err := w.Write(header); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	for k := range n {
		if err := w.Write(row(k)); err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(path), err)
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return arrowio.WriteFileAtomic(path, buf.Bytes())
}

// printSummary prints the table of means and standard errors.
func printSummary(w io.Writer, measure string, sums []experiment.Summary) {
	sorted := append([]experiment.Summary(nil), sums...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].CurveName() != sorted[j].CurveName() {
			return sorted[i].CurveName() < sorted[j].CurveName()
		}
		return sorted[i].X < sorted[j].X
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "curve\ttransitions\t%s\tstd. error\truns\t\n", measure)
	for _, s := range sorted {
		fmt.Fprintf(tw, "%s\t%d\t%.6g\t%.3g\t%d\t\n", s.CurveName(), s.X, s.Mean, s.SE, s.Runs)
	}
	tw.Flush()
}

// finish writes the CSV (all records) and the PNG (the records of
// measure) of an experiment and prints a table per measure.
func finish(e *env, x *expFlags, name, title, yLabel, measure string, logY bool, recs []experiment.Record) error {
	if err := os.MkdirAll(x.out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	csvPath := filepath.Join(x.out, name+".csv")
	if err := writeCSV(csvPath, recs, xIs("transitions")); err != nil {
		return err
	}
	var measures []string
	byMeasure := map[string][]experiment.Record{}
	for _, r := range recs {
		if _, ok := byMeasure[r.Measure]; !ok {
			measures = append(measures, r.Measure)
		}
		byMeasure[r.Measure] = append(byMeasure[r.Measure], r)
	}
	pngPath := filepath.Join(x.out, name+".png")
	if err := plotCurves(pngPath, title, "sampled transitions", yLabel, logY, experiment.Summarize(byMeasure[measure])); err != nil {
		return err
	}
	for _, ms := range measures {
		printSummary(e.stdout, ms, experiment.Summarize(byMeasure[ms]))
	}
	fmt.Fprintf(e.stdout, "wrote %s (%d runs) and %s\n", csvPath, len(recs), pngPath)
	return nil
}

// runSampleSize is emsf experiment sample-size, emsf-ijcai2015 Fig. 2
// (see experiment.SampleSize).
func runSampleSize(ctx context.Context, e *env, args []string) error {
	reduced := expSetting{runs: 5, sizes: "500,1000,2000,5000,10000,50000,200000,1000000"}
	paper := expSetting{runs: 50, sizes: "500,1000,2000,5000,10000,20000,50000,100000,200000,500000,1000000,2000000,5000000"}
	var x expFlags
	var orders string
	var n, trueOrder int
	fs := newFlagSet(e, "experiment sample-size", "experiment sample-size [flags]")
	x.register(fs, reduced, paper)
	fs.StringVar(&orders, "orders", "5,10,20", "orders m of the EMSF fits")
	fs.IntVar(&n, "states", 100, "number of states n")
	fs.IntVar(&trueOrder, "true-order", 20, "order of the true factorization P = DK")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := x.validate(fs, paper); err != nil {
		return err
	}
	ms, err := intList("orders", orders)
	if err != nil {
		return err
	}
	if n < 1 || trueOrder < 1 || trueOrder > n {
		return usagef("--states %d, --true-order %d: want 1 <= true order <= states", n, trueOrder)
	}
	for _, m := range ms {
		if m < 1 || m > n {
			return usagef("--orders: %d: must be in [1, --states=%d]", m, n)
		}
	}
	log, err := x.logs.logger(e, "emsf.experiment")
	if err != nil {
		return err
	}
	job := &experiment.SampleSize{States: n, TrueOrder: trueOrder, Orders: ms, Sizes: x.sizesV, Seed: x.seed, Converger: x.converger()}
	recs, interrupted, err := runAll(ctx, newProgress(e, &x.logs, &x.progress, log), job.Jobs(x.runs), x.workers,
		func(ctx context.Context, k int) ([]experiment.Record, error) {
			rows, err := job.Run(ctx, k)
			if err == nil {
				log.Debug("run done", "seed", rows[0].Seed, "transitions", rows[0].Transitions)
			}
			return rows, err
		})
	if err != nil {
		return err
	}
	if err := finish(e, &x, "sample-size", fmt.Sprintf("P = DK, n = %d states, true order %d (emsf-ijcai2015 Fig. 2)", n, trueOrder),
		"Frobenius error ‖P − estimate‖", "frobenius", true, recs); err != nil {
		return err
	}
	return interruptedErr(interrupted, len(recs), x.out)
}

// runSampling is emsf experiment sampling, incremental-emsf Fig. 2 (see
// experiment.Sampling); the figure shows frobenius_rho, the CSV also
// kl_rho.
func runSampling(ctx context.Context, e *env, args []string) error {
	reduced := expSetting{runs: 5, sizes: "3000,10000,30000,100000"}
	paper := expSetting{runs: 50, sizes: "3000,10000,30000,100000,300000"}
	var x expFlags
	var m int
	fs := newFlagSet(e, "experiment sampling", "experiment sampling [flags]")
	x.register(fs, reduced, paper)
	fs.IntVar(&m, "order", 10, "order m of the EMSF and KLM fits")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := x.validate(fs, paper); err != nil {
		return err
	}
	const n = experiment.SamplingStates
	if m < 1 || m > n {
		return usagef("--order %d: must be in [1, %d]", m, n)
	}
	log, err := x.logs.logger(e, "emsf.experiment")
	if err != nil {
		return err
	}
	job := &experiment.Sampling{M: m, Sizes: x.sizesV, Seed: x.seed, Converger: x.converger()}
	recs, interrupted, err := runAll(ctx, newProgress(e, &x.logs, &x.progress, log), job.Jobs(x.runs), x.workers,
		func(ctx context.Context, k int) ([]experiment.Record, error) {
			rows, err := job.Run(ctx, k)
			if err == nil {
				log.Debug("run done", "seed", rows[0].Seed, "transitions", rows[0].Transitions, "sampling", rows[0].Setting)
			}
			return rows, err
		})
	if err != nil {
		return err
	}
	if err := finish(e, &x, "sampling", fmt.Sprintf("Uniform vs skewed sampling (incremental-emsf Fig. 2)\nDirichlet(0.5) P = D'K', n = %d, m = %d; ρ: start states of each sample", n, m),
		"ρ-weighted Frobenius error", "frobenius_rho", false, recs); err != nil {
		return err
	}
	return interruptedErr(interrupted, len(recs), x.out)
}
