package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"text/tabwriter"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/factor/blackjack"
	"github.com/emsf/emsf/factor/experiment"
)

// bjRecord is one evaluation of one agent's greedy policy after one batch
// of one run: a row of blackjack.csv.
type bjRecord struct {
	Run    int
	Seed   uint64
	Agent  string
	Batch  int
	Hands  int
	Return float64
}

var bjHeader = []string{"run", "seed", "agent", "batch", "hands", "return"}

// bjAgent is one curve of the experiment.
type bjAgent struct {
	name string
	m    int // EMSF order; 0 for the others
}

// runBlackjack is the online blackjack experiment of incremental-emsf §5
// (Fig. 4; the batch version is emsf-ijcai2015 Fig. 3). Each run r (seed
// --seed + r) and each agent: starting with the random policy, collect a
// batch of 100 hands, improve the policy on all hands so far, evaluate its
// greedy policy, then collect the next batch with the 0.15-greedy version
// of it, and so on (blackjack.Online). The agents:
//   - dealer: the dealer's policy (hit below 17), a constant baseline;
//   - Q-learning: tabular Q-learning with learning rate 0.1, learning from
//     its own hands, random in the first batch and 0.15-greedy after;
//   - CNT+PI: the counted model and policy iteration (blackjack.PlanCNT);
//   - EMSF+PISF m: EMSF with a shared K, refitted on all hands after every
//     batch, and PISF (blackjack.EMSFPlanner). --emsf-init picks the start
//     of each fit: uniform-unseen (default) a seeded random start with the
//     rows of D of unvisited state-action pairs uniform, as CNT's; random
//     the plain seeded random start (blackjack.PlanEMSF); warm and
//     warm-uniform the previous batch's model (mixed 1% with the random
//     start).
//
// The paper tests each policy on 10^6 simulated hands; by default we
// compute the policy's expected return exactly (blackjack.Evaluate, the
// noise-free limit of that estimate); --eval-hands N simulates N hands
// instead. The model-based agents and Q-learning of one run share their
// random stream, so their first batches (random play) are the same hands.
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

	agents := []bjAgent{{name: "dealer"}, {name: "Q-learning"}, {name: "CNT+PI"}}
	for _, m := range ms {
		agents = append(agents, bjAgent{name: "EMSF+PISF", m: m})
	}
	fit := factor.FitOptions{Workers: 1, Converger: factor.Converger{Tol: tol, MaxIter: iters}}
	opts := blackjack.OnlineOptions{Batches: batches, BatchHands: batchHands, Epsilon: epsilon}
	recs, interrupted, err := runAll(ctx, newProgress(e, &logs, &prog, log), runs*len(agents), workers, func(ctx context.Context, k int) ([]bjRecord, error) {
		r, ai := k/len(agents), k%len(agents)
		ag := agents[ai]
		runSeed := seed + uint64(r)
		name := ag.name
		if ag.m > 0 {
			name = fmt.Sprintf("%s m=%d", ag.name, ag.m)
		}
		evalRNG := rand.New(rand.NewPCG(runSeed, 1000+uint64(ai)))
		rows := make([]bjRecord, batches)
		report := func(b, hands int, policy []int) error {
			ret, err := bjEvaluate(policy, evalHands, evalRNG)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			rows[b-1] = bjRecord{r, runSeed, name, b, hands, ret}
			return nil
		}
		play := rand.New(rand.NewPCG(runSeed, 1))
		var err error
		switch {
		case ag.name == "dealer":
			dealer := blackjack.DealerPolicy()
			for b := 1; b <= batches && err == nil; b++ {
				err = report(b, b*batchHands, dealer)
			}
		case ag.name == "Q-learning":
			err = bjQLearning(alpha, epsilon, batches, batchHands, play, report)
		case ag.name == "CNT+PI":
			err = blackjack.Online(blackjack.PlanCNT, opts, play, report)
		default:
			batch := 0
			planner := &blackjack.EMSFPlanner{M: ag.m, Fit: fit, Warm: warm, UniformUnseen: uniformUnseen}
			plan := func(eps []blackjack.Episode) ([]int, error) {
				batch++
				// A random start seeded by run and batch (with --emsf-init
				// warm only the first batch's is used).
				return planner.Plan(ctx, eps, runSeed<<20|uint64(batch))
			}
			err = blackjack.Online(plan, opts, play, report)
		}
		if err != nil {
			return nil, fmt.Errorf("run %d (seed %d), %s: %w", r, runSeed, name, err)
		}
		log.Debug("run done", "seed", runSeed, "agent", name, "return", rows[batches-1].Return)
		return rows, nil
	})
	if err != nil {
		return err
	}
	if err := bjFinish(e, out, evalHands, batches, batchHands, epsilon, recs); err != nil {
		return err
	}
	return interruptedErr(interrupted, len(recs), out)
}

// bjQLearning runs Q-learning online: batches of hands played by the
// learner itself, random in the first batch (like the model-based agents'
// first batch) and ε-greedy after; its greedy policy is reported after each
// batch.
func bjQLearning(alpha, epsilon float64, batches, batchHands int, rng *rand.Rand, report func(batch, hands int, policy []int) error) error {
	q, err := blackjack.NewQLearner(alpha, 1)
	if err != nil {
		return err
	}
	for b := 1; b <= batches; b++ {
		for range batchHands {
			q.Episode(rng)
		}
		q.Epsilon = epsilon
		if err := report(b, b*batchHands, q.Greedy()); err != nil {
			return err
		}
	}
	return nil
}

// bjEvaluate returns the policy's expected return per hand: exact if hands
// is 0, else the mean return of that many simulated hands.
func bjEvaluate(policy []int, hands int, rng *rand.Rand) (float64, error) {
	if hands == 0 {
		return blackjack.Evaluate(policy)
	}
	play := blackjack.Table(policy)
	sum := 0.0
	for range hands {
		sum += blackjack.Play(play, rng).Return
	}
	return sum / float64(hands), nil
}

// bjFinish writes blackjack.csv and blackjack.png into out and prints the
// table of means (at most about ten batches per agent; the CSV has all).
func bjFinish(e *env, out string, evalHands, batches, batchHands int, epsilon float64, recs []bjRecord) error {
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
	// The summaries of the shared plot helper: the agent is the method and
	// the hands played the x.
	asRecords := make([]experiment.Record, len(recs))
	for i, r := range recs {
		asRecords[i] = experiment.Record{Method: r.Agent, Transitions: r.Hands, Measure: "return", Error: r.Return}
	}
	sums := experiment.Summarize(asRecords)
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
