package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/emsf/emsf/factor/experiment"
)

var onlineHeader = []string{"run", "seed", "commit_every", "alpha", "transitions", "commits", "kl_rho"}

// The reduced and paper settings of emsf experiment online. The paper's
// text gives n, m, Dirichlet(0.5) rows, ρ and the 50 runs (Fig. 3's caption)
// but not the t_c and α values nor the stream length, which were only in
// the figure; the paper defaults below are our choice (docs/experiments.md).
const (
	onlineReducedSizes  = "1000,3000,10000,30000,100000,300000,1000000"
	onlinePaperSizes    = "1000,3000,10000,30000,100000,300000,1000000,3000000"
	onlineReducedCommit = "100,1000,10000"
	onlinePaperCommit   = "100,1000,10000"
	onlineReducedAlpha  = "0.1,1"
	onlinePaperAlpha    = "0.01,0.1,1"
)

// runOnline is emsf experiment online, incremental-emsf Fig. 3 (see
// experiment.Online): points where KL_ρ is +Inf (α = 1 with a small t_c)
// are kept in the CSV and noted in the figure's legend and the table.
func runOnline(ctx context.Context, e *env, args []string) error {
	reduced := expSetting{runs: 10, sizes: onlineReducedSizes}
	paper := expSetting{runs: 50, sizes: onlinePaperSizes}
	var x expFlags
	var commitEvery, alphas string
	var m int
	fs := newFlagSet(e, "experiment online", "experiment online [flags]")
	registerOnlineFlags(fs, &x, reduced, paper)
	fs.StringVar(&commitEvery, "commit-every", onlineReducedCommit, fmt.Sprintf("commit intervals t_c in transitions, comma-separated (--paper: %s)", onlinePaperCommit))
	fs.StringVar(&alphas, "alpha", onlineReducedAlpha, fmt.Sprintf("learning rates α in (0, 1], comma-separated; every t_c is run with every α (--paper: %s)", onlinePaperAlpha))
	fs.IntVar(&m, "order", 30, "order m of the incremental EMSF fits")
	if err := parse(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if x.paper {
		if !set["commit-every"] {
			commitEvery = onlinePaperCommit
		}
		if !set["alpha"] {
			alphas = onlinePaperAlpha
		}
	}
	if err := x.validate(fs, paper); err != nil {
		return err
	}
	for k := 1; k < len(x.sizesV); k++ {
		if x.sizesV[k] <= x.sizesV[k-1] {
			return usagef("--sizes %q: must be increasing", x.sizes)
		}
	}
	tcs, err := intList("commit-every", commitEvery)
	if err != nil {
		return err
	}
	for _, tc := range tcs {
		if tc < 1 {
			return usagef("--commit-every %q: t_c = %d: must be >= 1", commitEvery, tc)
		}
	}
	as, err := floatList("alpha", alphas)
	if err != nil {
		return err
	}
	for _, a := range as {
		if !(a > 0 && a <= 1) {
			return usagef("--alpha %q: α = %v: must be in (0, 1]", alphas, a)
		}
	}
	if m < 1 || m > experiment.OnlineStates {
		return usagef("--order %d: must be in [1, %d]", m, experiment.OnlineStates)
	}
	log, err := x.logs.logger(e, "emsf.experiment")
	if err != nil {
		return err
	}

	job := &experiment.Online{M: m, Sizes: x.sizesV, Seed: x.seed}
	for _, tc := range tcs {
		for _, a := range as {
			job.Settings = append(job.Settings, experiment.OnlineSetting{CommitEvery: tc, Alpha: a})
		}
	}
	recs, interrupted, err := runAll(ctx, newProgress(e, &x.logs, &x.progress, log), job.Jobs(x.runs), x.workers,
		func(ctx context.Context, k int) ([]experiment.OnlineRecord, error) {
			rows, err := job.Run(ctx, k)
			if err == nil {
				last := rows[len(rows)-1]
				log.Debug("run done", "seed", last.Seed, "setting", experiment.OnlineSetting{CommitEvery: last.CommitEvery, Alpha: last.Alpha}.Label(), "kl_rho", last.KLRho)
			}
			return rows, err
		})
	if err != nil {
		return err
	}
	if err := onlineFinish(e, x.out, m, recs); err != nil {
		return err
	}
	return interruptedErr(interrupted, len(recs), x.out)
}

// registerOnlineFlags registers the shared experiment flags that online
// uses: all of expFlags but --iters and --tol (an incremental fit makes one
// pass over its stream and has no convergence test), with --sizes
// documented as the points of the stream where KL_ρ is recorded.
func registerOnlineFlags(fs *flag.FlagSet, x *expFlags, reduced, paper expSetting) {
	all := flag.NewFlagSet("", flag.ContinueOnError)
	x.register(all, reduced, paper)
	all.VisitAll(func(f *flag.Flag) {
		switch f.Name {
		case "iters", "tol":
			return
		case "sizes":
			f.Usage = fmt.Sprintf("numbers of transitions seen at which KL_ρ is recorded, increasing, comma-separated; the stream has the largest (--paper: %s)", paper.sizes)
		case "paper":
			f.Usage = "use the paper's settings (runs, sizes, t_c and α values): minutes instead of seconds"
		}
		fs.Var(f.Value, f.Name, f.Usage)
	})
}

// floatList parses "0.1,0.5,1".
func floatList(flagName, s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, usagef("--%s %q: %q is not a number", flagName, s, strings.TrimSpace(f))
		}
		out = append(out, v)
	}
	return out, nil
}

// onlineFinish writes online.csv (every record) and online.png (mean ±
// one standard error over runs of the finite points, one curve per
// setting) into out and prints the table of means.
func onlineFinish(e *env, out string, m int, recs []experiment.OnlineRecord) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	csvPath := filepath.Join(out, "online.csv")
	err := writeRows(csvPath, onlineHeader, len(recs), func(k int) []string {
		r := recs[k]
		return []string{strconv.Itoa(r.Run), strconv.FormatUint(r.Seed, 10), strconv.Itoa(r.CommitEvery),
			strconv.FormatFloat(r.Alpha, 'g', -1, 64), strconv.Itoa(r.Transitions), strconv.Itoa(r.Commits),
			strconv.FormatFloat(r.KLRho, 'g', -1, 64)}
	})
	if err != nil {
		return err
	}
	// The summaries of the shared plot helper: the setting is the method
	// and the transitions seen the x.
	asRecords := make([]experiment.Record, len(recs))
	for i, r := range recs {
		st := experiment.OnlineSetting{CommitEvery: r.CommitEvery, Alpha: r.Alpha}
		asRecords[i] = experiment.Record{Method: st.Label(), Transitions: r.Transitions, Measure: "kl_rho", Error: r.KLRho}
	}
	sums := experiment.Summarize(asRecords)
	infinite := 0
	for _, s := range sums {
		if math.IsInf(s.Mean, 0) || math.IsNaN(s.Mean) {
			infinite++
		}
	}
	pngPath := filepath.Join(out, "online.png")
	title := fmt.Sprintf("Incremental EMSF online (incremental-emsf Fig. 3)\nDirichlet(%g) P, n = %d, m = %d; ρ: stationary distribution of P", experiment.OnlineConc, experiment.OnlineStates, m)
	if err := plotCurves(pngPath, title, "transitions seen", "KL divergence, ρ-weighted", false, sums); err != nil {
		return err
	}
	printSummary(e.stdout, "kl_rho", sums)
	if infinite > 0 {
		fmt.Fprintf(e.stdout, "%d points with KL_ρ = +Inf in some run (DK gives probability 0 to a transition of P) are left off the plot; the legend says which\n", infinite)
	}
	fmt.Fprintf(e.stdout, "wrote %s (%d rows) and %s\n", csvPath, len(recs), pngPath)
	return nil
}
