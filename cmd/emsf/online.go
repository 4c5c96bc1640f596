package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/mat"

	"github.com/emsf/emsf/factor"
)

// onlineRecord is KL_ρ(P ‖ DK) of one run of one (t_c, α) setting after some
// transitions of the stream: a row of online.csv.
type onlineRecord struct {
	Run         int
	Seed        uint64
	CommitEvery int
	Alpha       float64
	Transitions int
	Commits     int
	KLRho       float64
}

var onlineHeader = []string{"run", "seed", "commit_every", "alpha", "transitions", "commits", "kl_rho"}

// onlineSetting is one curve: commit every t_c transitions with learning
// rate α.
type onlineSetting struct {
	commitEvery int
	alpha       float64
}

func (s onlineSetting) label() string {
	return fmt.Sprintf("t_c=%d, α=%g", s.commitEvery, s.alpha)
}

// The reduced and paper settings of emsf experiment online. The paper's
// text gives n, m, Dirichlet(0.5) rows, ρ and the 50 runs (Fig. 3's caption)
// but not the t_c and α values nor the stream length, which were only in
// the figure; the paper defaults below are our choice (docs/experiments.md).
const (
	onlineStates = 100
	onlineConc   = 0.5

	onlineReducedSizes  = "1000,3000,10000,30000,100000,300000,1000000"
	onlinePaperSizes    = "1000,3000,10000,30000,100000,300000,1000000,3000000"
	onlineReducedCommit = "100,1000,10000"
	onlinePaperCommit   = "100,1000,10000"
	onlineReducedAlpha  = "0.1,1"
	onlinePaperAlpha    = "0.01,0.1,1"
)

// runOnline is incremental-emsf Fig. 3: the online behaviour of incremental
// EMSF (Algorithm 1, factor.Incremental). For each run r (seed --seed + r):
// a true P (n = 100, every row drawn from Dirichlet(0.5): full rank, not a
// factorization) and ρ its stationary distribution; one trajectory that
// follows P from a uniform start ("transitions sampled through direct
// interaction with P", i.e. under ρ); and for each (t_c, α) an incremental
// EMSF fit of order m = 30 from the run's random start, fed the trajectory
// one transition at a time, committing every t_c transitions with learning
// rate α. KL_ρ(P ‖ DK) (incremental-emsf eq. 12) of the committed model is
// recorded after each number of transitions in --sizes. Every setting of a
// run sees the same trajectory and starts from the same model.
//
// With α = 1 a commit replaces K by the statistics of the last t_c
// transitions only, so (DK)_ij = 0 for every next state j not seen in
// that window and KL_ρ = +Inf: small t_c needs α < 1 (the paper's point that
// larger t_c affords larger α). Such points are kept in the CSV and left
// off the plot, and the table says how many.
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
	if m < 1 || m > onlineStates {
		return usagef("--order %d: must be in [1, %d]", m, onlineStates)
	}
	log, err := x.logs.logger(e, "emsf.experiment")
	if err != nil {
		return err
	}

	var settings []onlineSetting
	for _, tc := range tcs {
		for _, a := range as {
			settings = append(settings, onlineSetting{tc, a})
		}
	}
	sizes := x.sizesV
	per := len(sizes)
	recs := make([]onlineRecord, x.runs*len(settings)*per)
	recs, interrupted, err := runAll(ctx, newProgress(e, &x.logs, &x.progress, log), x.runs*len(settings), per, x.workers, recs, func(k int) error {
		r, st := k/len(settings), settings[k%len(settings)]
		seed := x.seed + uint64(r)
		out := recs[k*per : (k+1)*per]
		if err := onlineRun(ctx, m, st, seed, sizes, out); err != nil {
			return fmt.Errorf("run %d (seed %d), %s: %w", r, seed, st.label(), err)
		}
		for q := range out {
			out[q].Run = r
		}
		log.Debug("run done", "seed", seed, "setting", st.label(), "kl_rho", out[per-1].KLRho)
		return nil
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

// onlineRun is one run of one setting: it fills out[q] with KL_ρ after
// sizes[q] transitions.
func onlineRun(ctx context.Context, m int, st onlineSetting, seed uint64, sizes []int, out []onlineRecord) error {
	n := onlineStates
	chain, truth, rho, err := onlineTruth(n, onlineConc, rand.New(rand.NewPCG(seed, 1)))
	if err != nil {
		return err
	}
	md := factor.NewRandom(n, m, 1, factor.TieNone, seed)
	inc, err := factor.NewIncremental(md, factor.IncrementalOptions{CommitEvery: float64(st.commitEvery), Alpha: st.alpha})
	if err != nil {
		return err
	}
	total := sizes[len(sizes)-1]
	seen, q := 0, 0
	var addErr error
	// One trajectory of total steps: EpisodeLen = total never restarts it.
	err = factor.Sample(chain, total, factor.SampleOptions{Mode: factor.SampleTrajectory, EpisodeLen: total},
		rand.New(rand.NewPCG(seed, 2)), func(t factor.Transition) {
			if addErr != nil {
				return
			}
			if addErr = inc.Add(t.State, t.Action, t.Next, 1); addErr != nil {
				return
			}
			seen++
			if seen == sizes[q] {
				if addErr = ctx.Err(); addErr != nil {
					return
				}
				out[q] = onlineRecord{Seed: seed, CommitEvery: st.commitEvery, Alpha: st.alpha, Transitions: seen,
					Commits: inc.Stats().Commits, KLRho: factor.KLRho(truth, md, rho)}
				q++
			}
		})
	if err != nil {
		return err
	}
	var te *factor.TransitionError
	if errors.As(addErr, &te) {
		// Some (DK)_ij is 0 (with α = 1 a commit zeroes what its window
		// does not show; with α < 1 entries stop at factor.EntryFloor) and
		// then i → j was observed: EM cannot go on. P_ij > 0, so
		// KL_ρ(P ‖ DK) is +Inf from here on; the remaining points say so.
		for ; q < len(sizes); q++ {
			out[q] = onlineRecord{Seed: seed, CommitEvery: st.commitEvery, Alpha: st.alpha, Transitions: sizes[q],
				Commits: inc.Stats().Commits, KLRho: math.Inf(1)}
		}
		return nil
	}
	return addErr
}

// onlineTruth draws the true P of incremental-emsf Fig. 3: n×n, each row
// from Dirichlet(conc). It returns P twice, as a Model to sample from (D
// the identity, K = P, so the hidden state is the state itself) and as a
// Dense for KL_ρ, and ρ, the stationary distribution of P.
func onlineTruth(n int, conc float64, rng *rand.Rand) (*factor.Model, *factor.Dense, []float64, error) {
	p := make([]float64, n*n)
	for i := range n {
		factor.Dirichlet(p[i*n:(i+1)*n], conc, rng)
	}
	rho, err := factor.StationaryOf(mat.NewDense(n, n, p))
	if err != nil {
		return nil, nil, nil, err
	}
	chain := factor.NewModel(n, n, 1, factor.TieNone)
	d, kt := chain.D[0], chain.KT[0]
	for i := range n {
		d[i*n+i] = 1
		for j := range n {
			kt[j*n+i] = p[i*n+j] // KT is K transposed: KT[j, l] = K[l, j] = P[l, j]
		}
	}
	return chain, &factor.Dense{N: n, P: [][]float64{p}}, rho, nil
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
func onlineFinish(e *env, out string, m int, recs []onlineRecord) error {
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
	asRecords := make([]record, len(recs))
	for i, r := range recs {
		st := onlineSetting{r.CommitEvery, r.Alpha}
		asRecords[i] = record{Method: st.label(), Transitions: r.Transitions, Measure: "kl_rho", Error: r.KLRho}
	}
	sums := summarize(asRecords)
	infinite := 0
	for _, s := range sums {
		if math.IsInf(s.mean, 0) || math.IsNaN(s.mean) {
			infinite++
		}
	}
	pngPath := filepath.Join(out, "online.png")
	title := fmt.Sprintf("Incremental EMSF online (incremental-emsf Fig. 3)\nDirichlet(%g) P, n = %d, m = %d; ρ: stationary distribution of P", onlineConc, onlineStates, m)
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
