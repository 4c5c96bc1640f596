package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"text/tabwriter"

	"gonum.org/v1/gonum/stat"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// experiment is one subcommand of emsf experiment: a figure of the papers.
type experiment struct {
	name    string
	summary string
	run     func(ctx context.Context, e *env, args []string) error
}

// experiments is the table of emsf experiment's subcommands.
func experiments() []experiment {
	return []experiment{
		{"sample-size", "emsf-ijcai2015 Fig. 2: ‖P − P̃‖_F against the number of transitions, EMSF (m = 5, 10, 20) vs CNT", runSampleSize},
		{"sampling", "incremental-emsf Fig. 2: uniform vs skewed sampling, EMSF vs KLM (m = 10), ρ-weighted ‖P − DK‖_F (KL_ρ in the CSV)", runSampling},
		{"online", "incremental-emsf Fig. 3: incremental EMSF (m = 30) on a stream, KL_ρ against transitions for several t_c and α", runOnline},
		{"blackjack", "incremental-emsf Fig. 4: online blackjack, dealer vs Q-learning vs CNT+PI vs EMSF+PISF, exact returns", runBlackjack},
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

// record is one fit of one run: a row of the CSV.
type record struct {
	Setting     string
	Method      string
	M           int // 0 for CNT, which has no order
	Transitions int
	Seed        uint64
	Measure     string
	Error       float64
}

var csvHeader = []string{"setting", "method", "m", "transitions", "seed", "measure", "error"}

// runAll runs job(k) for k in [0, count) on at most workers goroutines;
// job k fills recs[k*per : (k+1)*per] (results are written by index, so
// they do not depend on the schedule). It reports the runs done on rep and
// returns recs, or the error of the lowest k that failed. When ctx is
// cancelled (Ctrl-C, SIGTERM) no new job starts and the running ones stop:
// runAll then returns the records of the jobs that finished, in job order,
// and interrupted; an error if none finished.
func runAll[T any](ctx context.Context, rep *progress, count, per, workers int, recs []T, job func(k int) error) (kept []T, interrupted bool, err error) {
	errs := make([]error, count)
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
				if errs[k] = job(k); errs[k] == nil {
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
				kept = append(kept, recs[k*per:(k+1)*per]...)
			}
		}
		if len(kept) == 0 {
			return nil, true, fmt.Errorf("interrupted before any of the %d runs finished: nothing written", count)
		}
		return kept, true, nil
	}
	for _, err := range errs {
		if err != nil {
			return nil, false, err
		}
	}
	return recs, false, nil
}

// interruptedErr is the error of an experiment that was interrupted after
// writing the records of the runs it finished (nil if it was not).
func interruptedErr(interrupted bool, rows int, out string) error {
	if !interrupted {
		return nil
	}
	return fmt.Errorf("interrupted: wrote the %d rows of the finished runs to %s (the figure shows them; run again for all)", rows, out)
}

// sampleBlocks draws count transitions from truth and returns their count
// matrices, one block per action, and the empirical distribution of the
// start states (ρ̂_i = x_i / N).
func sampleBlocks(truth *factor.Model, count int, mode string, rng *rand.Rand) ([]*factor.Block, []float64, error) {
	var ct shard.Counter
	rho := make([]float64, truth.N)
	var addErr error
	err := factor.Sample(truth, count, factor.SampleOptions{Mode: mode}, rng, func(t factor.Transition) {
		if addErr == nil {
			addErr = ct.Add(t.State, t.Action, t.Next, 1)
		}
		rho[t.State]++
	})
	if err != nil {
		return nil, nil, err
	}
	if addErr != nil {
		return nil, nil, addErr
	}
	for i := range rho {
		rho[i] /= float64(count)
	}
	return ct.Matrices(truth.U), rho, nil
}

// fitEMSF fits EMSF of order m from the random start of seed.
func fitEMSF(ctx context.Context, n, m, u int, blocks []*factor.Block, seed uint64, conv factor.Converger) (*factor.Model, error) {
	md := factor.NewRandom(n, m, u, factor.TieNone, seed)
	if _, err := factor.Fit(ctx, md, blocks, factor.FitOptions{Workers: 1, Converger: conv}); err != nil {
		return nil, fmt.Errorf("EMSF m=%d seed %d: %w", m, seed, err)
	}
	return md, nil
}

// summary is the mean and standard error of one curve's point.
type summary struct {
	setting, method string
	m, x            int
	mean, se        float64
	runs            int
}

// summarize groups records by (setting, method, m, transitions) in the
// order the groups first appear.
func summarize(recs []record) []summary {
	type key struct {
		setting, method string
		m, x            int
	}
	idx := map[key]int{}
	var keys []key
	vals := map[key][]float64{}
	for _, r := range recs {
		k := key{r.Setting, r.Method, r.M, r.Transitions}
		if _, ok := idx[k]; !ok {
			idx[k] = len(keys)
			keys = append(keys, k)
		}
		vals[k] = append(vals[k], r.Error)
	}
	out := make([]summary, 0, len(keys))
	for _, k := range keys {
		v := vals[k]
		mean, se := stat.Mean(v, nil), 0.0
		if len(v) > 1 {
			// Standard error of the mean: the sample (n−1) standard
			// deviation over √n.
			se = stat.StdErr(stat.StdDev(v, nil), float64(len(v)))
		}
		out = append(out, summary{k.setting, k.method, k.m, k.x, mean, se, len(v)})
	}
	return out
}

// curveName labels a curve of the plot.
func (s summary) curveName() string {
	name := s.method
	if s.m > 0 {
		name += fmt.Sprintf(" m=%d", s.m)
	}
	if s.setting != "" {
		name += " (" + s.setting + ")"
	}
	return name
}

// writeCSV writes the records atomically.
func writeCSV(path string, recs []record) error {
	return writeRows(path, csvHeader, len(recs), func(k int) []string {
		r := recs[k]
		m := ""
		if r.M > 0 {
			m = strconv.Itoa(r.M)
		}
		return []string{r.Setting, r.Method, m, strconv.Itoa(r.Transitions), strconv.FormatUint(r.Seed, 10),
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
func printSummary(w io.Writer, measure string, sums []summary) {
	sorted := append([]summary(nil), sums...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].curveName() != sorted[j].curveName() {
			return sorted[i].curveName() < sorted[j].curveName()
		}
		return sorted[i].x < sorted[j].x
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "curve\ttransitions\t%s\tstd. error\truns\t\n", measure)
	for _, s := range sorted {
		fmt.Fprintf(tw, "%s\t%d\t%.6g\t%.3g\t%d\t\n", s.curveName(), s.x, s.mean, s.se, s.runs)
	}
	tw.Flush()
}

// finish writes the CSV (all records) and the PNG (the records of
// measure) of an experiment and prints a table per measure.
func finish(e *env, x *expFlags, name, title, yLabel, measure string, logY bool, recs []record) error {
	if err := os.MkdirAll(x.out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	csvPath := filepath.Join(x.out, name+".csv")
	if err := writeCSV(csvPath, recs); err != nil {
		return err
	}
	var measures []string
	byMeasure := map[string][]record{}
	for _, r := range recs {
		if _, ok := byMeasure[r.Measure]; !ok {
			measures = append(measures, r.Measure)
		}
		byMeasure[r.Measure] = append(byMeasure[r.Measure], r)
	}
	pngPath := filepath.Join(x.out, name+".png")
	if err := plotCurves(pngPath, title, "sampled transitions", yLabel, logY, summarize(byMeasure[measure])); err != nil {
		return err
	}
	for _, ms := range measures {
		printSummary(e.stdout, ms, summarize(byMeasure[ms]))
	}
	fmt.Fprintf(e.stdout, "wrote %s (%d runs) and %s\n", csvPath, len(recs), pngPath)
	return nil
}

// runSampleSize is emsf-ijcai2015 Fig. 2: P = DK with D 100×20 and K
// 20×100, entries uniform then rows normalised (factor.RowsUniform); for
// each run a new P, and for each sample size τ a new uniform sample (start
// state and action uniform); ‖P − P̃‖_F for EMSF of each order and CNT.
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
	per := len(ms) + 1
	recs := make([]record, x.runs*len(x.sizesV)*per)
	recs, interrupted, err := runAll(ctx, newProgress(e, &x.logs, &x.progress, log), x.runs*len(x.sizesV), per, x.workers, recs, func(k int) error {
		r, si := k/len(x.sizesV), k%len(x.sizesV)
		seed, size := x.seed+uint64(r), x.sizesV[si]
		truth, err := factor.TrueModel(n, trueOrder, 1, factor.RowsUniform, 0, rand.New(rand.NewPCG(seed, 1)))
		if err != nil {
			return err
		}
		blocks, _, err := sampleBlocks(truth, size, factor.SampleUniform, rand.New(rand.NewPCG(seed, 2+uint64(si))))
		if err != nil {
			return err
		}
		out := recs[k*per : (k+1)*per]
		for q, m := range ms {
			md, err := fitEMSF(ctx, n, m, 1, blocks, seed, x.converger())
			if err != nil {
				return err
			}
			out[q] = record{"uniform", "EMSF", m, size, seed, "frobenius", factor.FrobeniusError(truth, md)}
		}
		cnt, err := factor.NewCNT(n, 1, blocks, 0)
		if err != nil {
			return err
		}
		out[len(ms)] = record{"uniform", "CNT", 0, size, seed, "frobenius", factor.FrobeniusError(truth, cnt)}
		log.Debug("run done", "seed", seed, "transitions", size)
		return nil
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

// runSampling is incremental-emsf Fig. 2: P = D'K' with the rows of D'
// (100×20) and K' (20×100) drawn from Dirichlet(0.5); τ transitions whose
// start states are drawn uniformly, or with 90% of the mass on a random
// half of the states ("skewed"); EMSF and KLM of order 10 on the same
// sample from the same random start. The paper says only "approximation
// error"; its point is how each method weighs the rows of P by the
// sampling distribution ρ, so the error is weighted by ρ (estimated by the
// sample's start-state frequencies ρ̂_i = x_i/N, the weights of
// incremental-emsf eq. 11):
//   - frobenius_rho = sqrt(Σ_i n·ρ_i ‖P_i − (DK)_i‖²), plotted: for uniform
//     ρ it is the ‖P − DK‖_F of the sample-size experiment;
//   - kl_rho = KL_ρ(P ‖ DK) = Σ_i ρ_i KL(P_i ‖ (DK)_i) (eq. 12, the paper's
//     measure of Fig. 3), in the CSV only: it is +Inf whenever a fit gives
//     probability 0 to a transition P allows, which KLM does on
//     Dirichlet(0.5) data (unseen entries of P̂ are driven to 0).
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
	const n, trueOrder = 100, 20
	if m < 1 || m > n {
		return usagef("--order %d: must be in [1, %d]", m, n)
	}
	log, err := x.logs.logger(e, "emsf.experiment")
	if err != nil {
		return err
	}
	modes := []string{factor.SampleUniform, factor.SampleSkewed}
	jobs := x.runs * len(x.sizesV) * len(modes)
	const per = 4
	recs := make([]record, jobs*per)
	recs, interrupted, err := runAll(ctx, newProgress(e, &x.logs, &x.progress, log), jobs, per, x.workers, recs, func(k int) error {
		r, rest := k/(len(x.sizesV)*len(modes)), k%(len(x.sizesV)*len(modes))
		si, mi := rest/len(modes), rest%len(modes)
		seed, size, mode := x.seed+uint64(r), x.sizesV[si], modes[mi]
		truth, err := factor.TrueModel(n, trueOrder, 1, factor.RowsDirichlet, 0.5, rand.New(rand.NewPCG(seed, 1)))
		if err != nil {
			return err
		}
		blocks, rho, err := sampleBlocks(truth, size, mode, rand.New(rand.NewPCG(seed, 2+uint64(si))))
		if err != nil {
			return err
		}
		md, err := fitEMSF(ctx, n, m, 1, blocks, seed, x.converger())
		if err != nil {
			return err
		}
		klm, _, err := factor.KLM(ctx, n, m, 1, blocks, seed, factor.KLMOptions{Converger: x.converger()})
		if err != nil {
			return fmt.Errorf("KLM m=%d seed %d: %w", m, seed, err)
		}
		recs[per*k] = record{mode, "EMSF", m, size, seed, "frobenius_rho", frobeniusRho(truth, md, rho)}
		recs[per*k+1] = record{mode, "KLM", m, size, seed, "frobenius_rho", frobeniusRho(truth, klm, rho)}
		recs[per*k+2] = record{mode, "EMSF", m, size, seed, "kl_rho", factor.KLRho(truth, md, rho)}
		recs[per*k+3] = record{mode, "KLM", m, size, seed, "kl_rho", factor.KLRho(truth, klm, rho)}
		log.Debug("run done", "seed", seed, "transitions", size, "sampling", mode)
		return nil
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

// frobeniusRho returns the Frobenius error with row (state i, action a)
// weighted by n·u·w_ai: sqrt(Σ_a Σ_i n·u·w_ai ‖P^a_i − P̃^a_i‖²), with
// w_ai = rho[a·n+i] when len(rho) = u·n, or rho[i]/u when len(rho) = n.
// For uniform weights it is ‖P − P̃‖_F.
func frobeniusRho(truth, est factor.Estimate, rho []float64) float64 {
	n, u := truth.States(), truth.Actions()
	p, q := make([]float64, n), make([]float64, n)
	s := 0.0
	for a := range u {
		for i := range n {
			w := rho[i] / float64(u)
			if len(rho) == u*n {
				w = rho[a*n+i]
			}
			if w == 0 {
				continue
			}
			truth.Row(a, i, p)
			est.Row(a, i, q)
			r := 0.0
			for j := range p {
				d := p[j] - q[j]
				r += d * d
			}
			s += float64(n*u) * w * r
		}
	}
	return math.Sqrt(s)
}
