package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// fitFlags are the flags of emsf fit.
type fitFlags struct {
	in         inputFlags
	logs       logFlags
	cluster    clusterFlags
	inc        incrementalFlags
	onlineEM   onlineEMFlags
	limits     limitFlags
	order      string
	tie        string
	stop       stopFlags
	progress   progressFlags
	report     *progress // set by runFit
	seed       uint64
	restarts   int
	workers    int
	alpha      float64
	initModel  string
	initIters  int // the iterations of the --init model (set by runFit)
	initSmooth float64
	holdout    float64
	out        string
	format     string
	shardNNZ   int
	groupNNZ   int
	colCells   int
	algorithm  string
	loss       string
	precision  string
	accel      string
	smooth     string
	stopRule   string
	validation float64
	patience   int
	minGain    float64
	cpuProfile string
	priorD     float64
	priorK     float64
	plain      bool
	// clusterPlain: plain set by clusterPlainDefault, not by the user;
	// qualityGiven: --accel, --smooth, --stop, --prior-d or --prior-k given.
	clusterPlain, qualityGiven bool

	orders     []int
	tieV       factor.Tie
	precisionV factor.Precision
	accelV     factor.Accel
	start      string // --start
	seeded     bool   // --start resolved: NewSeeded, else NewRandom
	accelAuto  bool   // --accel auto chose accelV
	priorSet   bool   // --prior-d or --prior-k given
	stopTuned  bool   // --patience or --min-gain given
	// valAuto: no flag that needs the validation split was given
	// (--smooth, --stop, --validation, --patience, --min-gain): an input
	// too small to hold some out then falls back to --stop tol --smooth
	// none instead of failing.
	valAuto bool
	stopV   string
}

func runFit(ctx context.Context, e *env, args []string) error {
	var f fitFlags
	fs := newFlagSet(e, "fit", "fit --input FILE --order M [flags]")
	f.in.register(fs)
	f.in.nats = &f.cluster.natsFlags
	f.logs.register(fs)
	f.cluster.register(fs)
	f.inc.register(fs)
	f.onlineEM.register(fs)
	f.limits.register(fs)
	fs.StringVar(&f.order, "order", "", "order m of the factorization (number of hidden states); a list like 5,10,20 with --holdout picks the best (required)")
	fs.StringVar(&f.tie, "tie", "none", "tie mode: none (D^a, K^a per action), shared-k (one K), shared-d (one D)")
	f.stop.register(fs)
	f.progress.register(fs)
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the random initialisation and of the held-out split")
	fs.IntVar(&f.restarts, "restarts", 1, "fit from this many random seeds (seed, seed+1, ...) and keep the best log-likelihood")
	fs.IntVar(&f.workers, "workers", 2, "goroutines computing statistics in parallel (the result does not depend on it)")
	fs.Float64Var(&f.alpha, "alpha", 1, "learning rate of each commit, in (0, 1]; 1 is plain EM")
	fs.StringVar(&f.initModel, "init", "", "warm-start from this model instead of a random initialisation: "+modelPathUsage)
	fs.Float64Var(&f.initSmooth, "init-smooth", 0, "mix the --init model with the uniform distribution, this weight in [0, 1), so that new data may hold transitions it gives probability 0 (e.g. 0.01)")
	fs.Float64Var(&f.holdout, "holdout", 0, "fraction of transitions held out to score each --order (0: none)")
	fs.StringVar(&f.out, "out", "model.arrow", "where to write the model: a file (Arrow, or Parquet for a .parquet name), or a model dataset (one part per block and manifest.json): a new directory (a name that ends in /) or nats-obj://BUCKET/PREFIX; a cluster fit from metadata has its workers write the parts")
	fs.StringVar(&f.format, "format", "", "model file format: arrow (Arrow IPC file) or parquet (default: parquet for an --out ending in .parquet or .pq, else arrow)")
	fs.IntVar(&f.shardNNZ, "shard-nnz", shard.DefaultTargetNNZ, "target nonzeros per shard (the reduce order, hence the exact result, depends on it)")
	fs.IntVar(&f.groupNNZ, "group-nnz", factor.DefaultGroupNNZ, "target nonzeros per reduction group: the sums of a pass follow a fixed tree over groups of shards (reduce order "+factor.ReduceOrder+"), so the exact result depends on it, never on --workers or the cluster")
	fs.IntVar(&f.colCells, "col-cells", 1, "cut each shard's rows further into this many column cells (a grid: with --exchange owners, nodes of one action then exchange rows of D and K of their grid row and column only, so per-node traffic falls with the grid; the exact result depends on it, never on --workers or the cluster)")
	fs.StringVar(&f.algorithm, "algorithm", algEMSF, algorithmUsage)
	fs.StringVar(&f.loss, "loss", "wkl", lossUsage)
	fs.StringVar(&f.precision, "precision", "float64", precisionUsage)
	fs.StringVar(&f.accel, "accel", "auto", "acceleration between EM passes: squarem (SQUAREM: extrapolated steps with a safeguard, the log-likelihood never below the EM step it replaces), none (plain EM, bitwise as before), or auto: squarem where the fit holds the model (local, --exchange coordinator) with --alpha 1, else none")
	fs.StringVar(&f.smooth, "smooth", "auto", "the model's predictive rule beyond D·K, stored in the model and used by eval, trick, serve and queries: auto (the training counts, discounted (d, κ, μ), backed off to D·K interpolated with the next-state and Kneser–Ney continuation frequencies (λ, δ, ρ), all chosen per action on the --validation split; factor.Smoothing), background (λ only: no counts stored, the model stays a factorization, of order m+1), or none (D·K itself)")
	fs.StringVar(&f.stopRule, "stop", "auto", "stopping rule beside --iters, --tol and --time-limit: validation (stop once the --validation score has not gained for --patience scores, and keep the best iterate), tol (the relative change alone), or auto: validation where the fit holds the model, else tol")
	fs.Float64Var(&f.validation, "validation", 0.1, "fraction of the training transitions held out (seeded by --seed) to choose the smoothing and to stop the fit; used with --smooth auto|background or --stop validation")
	fs.Float64Var(&f.priorD, "prior-d", factor.DefaultPriorD, "Dirichlet prior on the rows of D (MAP-EM): pseudo-counts added to every entry of a row before it is normalized (0: none)")
	fs.Float64Var(&f.priorK, "prior-k", factor.DefaultPriorK, "Dirichlet prior on the rows of K (MAP-EM): pseudo-counts per row, spread as the next-state frequencies, added before it is normalized (0: none)")
	fs.StringVar(&f.start, "start", "auto", "EM's start: seeded (the rows of K drawn from the data's rows, in proportion to their counts, and smoothed; each row of D its counts' tempered posterior under them: factor.NewSeeded), random (rows drawn uniformly at random), or auto: seeded for a fit that holds the model with --tie none and not --plain, else random; --seed draws either")
	fs.BoolVar(&f.plain, "plain", false, "plain EM as before issue 28, bitwise: --accel none --smooth none --stop tol --prior-d 0 --prior-k 0 --start random, and rows without data left at their random start")
	fs.IntVar(&f.patience, "patience", factor.DefaultPatience, "with --stop validation: scores in a row without gain before the fit stops")
	fs.Float64Var(&f.minGain, "min-gain", factor.DefaultMinGain, "with --stop validation: the least rise of the validation score (log-likelihood per validation transition, in nats) over the score of the last gain that counts as a gain (the best iterate is kept whatever it gained)")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole command to this file (go tool pprof)")
	if err := parse(fs, args); err != nil {
		return err
	}
	for _, name := range []string{"accel", "smooth", "stop", "prior-d", "prior-k", "start"} {
		f.qualityGiven = f.qualityGiven || flagGiven(fs, name)
	}
	f.valAuto = !flagGiven(fs, "smooth") && !flagGiven(fs, "stop") && !flagGiven(fs, "validation") &&
		!flagGiven(fs, "patience") && !flagGiven(fs, "min-gain")
	if f.cpuProfile != "" {
		stop, err := startCPUProfile(f.cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer stop()
	}
	fs.Visit(func(fl *flag.Flag) {
		f.priorSet = f.priorSet || fl.Name == "prior-d" || fl.Name == "prior-k"
		f.stopTuned = f.stopTuned || fl.Name == "patience" || fl.Name == "min-gain"
	})
	if err := f.validate(); err != nil {
		return err
	}
	log, err := f.logs.logger(e, "emsf.fit")
	if err != nil {
		return err
	}
	f.report = newProgress(e, &f.logs, &f.progress, log)
	f.cluster.report = f.report
	if err := f.preflight(log); err != nil {
		return err
	}
	mw, err := startMemWatch(os.Getenv(memProfileEnv), memWatchInterval)
	if err != nil {
		return err
	}
	defer mw.Close()
	if e.hugePages && !f.cluster.enabled() {
		mem, _ := machineMemory()
		n := hugeHeapBytes(f.in.input, f.in.format, mem)
		log.Debug("huge pages for the heap", "bytes", n, "granted", hugeHeap(n) != 0)
	}
	if f.inc.enabled {
		return fitIncremental(ctx, e, &f, log)
	}
	if _, ok := muRule(f.algorithm); ok {
		return fitMU(ctx, e, &f, log)
	}
	if f.algorithm != algEMSF {
		return fitBaseline(ctx, e, &f, log)
	}

	if f.cluster.enabled() {
		if f.clusterPlain {
			log.Info("a cluster fit runs plain EM and stores no smoothing rule unless told otherwise (its workers hold D and K; the rule needs the counts in one place): the model is the local 'emsf fit --plain' one; --smooth auto given smooths (the coordinator then reads the data)")
		}
		ok, why := f.ingestedPath()
		if ok {
			log.Info("cluster fit from metadata: the workers ingest the dataset, cut the shards and hold the model; the coordinator reads no data")
			mw.Phase("fit")
			return fitIngested(ctx, e, &f, log)
		}
		log.Info("cluster fit with the data read in the coordinator", "why", why)
	}
	var warm *arrowio.ModelFile
	if f.initModel != "" {
		if warm, err = readModel(ctx, &f.cluster.natsFlags, f.initModel); err != nil {
			return fmt.Errorf("--init: %w", err)
		}
		f.initIters = warm.Model.Iteration
	}
	valFrac := 0.0
	if f.needsValidation() {
		valFrac = f.validation
	}
	mw.Phase("read")
	var data *dataset
	if warm != nil {
		// The model's ids keep their indices; new ones are appended.
		data, err = loadDataIDs(ctx, &f.in, f.holdout, valFrac, f.seed, vocabsOf(warm), idsGrow)
	} else {
		data, err = loadDataVal(ctx, &f.in, f.holdout, valFrac, f.seed)
	}
	if err != nil {
		return err
	}
	if err := data.checkValidation(valFrac); err != nil {
		if !f.valAuto {
			return err
		}
		// Too few transitions to hold some out, and the user named no
		// flag that needs them: the automatic choices fall back to what
		// needs no validation part.
		log.Warn("too few transitions to hold out a validation part: the fit stops on the relative change and stores no smoothing rule (--stop tol --smooth none); a larger --validation, or more data, uses them",
			"validation", f.validation, "transitions", data.transitions)
		f.stopV, f.smooth = stopTol, smoothNone
	}
	mw.Phase("fit")
	for _, m := range f.orders {
		if m > data.n {
			return usagef("--order %d: must be at most the number of states n = %d", m, data.n)
		}
	}
	if err := f.checkMemory(data); err != nil {
		return err
	}
	if warm != nil {
		if err := growWarm(log, warm, data.ids); err != nil {
			return err
		}
		if err := warm.Model.CheckCompatible(data.n, f.orders[0], data.u, f.tieV); err != nil {
			return fmt.Errorf("--init %s: %w", f.initModel, err)
		}
		if err := warm.Model.Smooth(f.initSmooth); err != nil {
			return err // validate checked the weight
		}
	}
	log.Info("data", "file", f.in.name(), "transitions", data.transitions, "states", data.n, "actions", data.u,
		"nonzeros", factor.NNZ(data.train), "held_out", f.holdout > 0, "validation_nonzeros", factor.NNZ(data.val))

	bestM := 0
	if len(f.orders) > 1 || f.holdout > 0 {
		bestHO := math.Inf(-1)
		for _, m := range f.orders {
			md, status, err := f.fitOrder(ctx, log, data.train, data.val, data.n, m, data.u, warm)
			if err != nil {
				return err
			}
			if status == statusInterrupted {
				// The model of the interrupted fit, of order m on the
				// training part: the work done so far, kept.
				return f.write(e, md, data, status, fmt.Sprintf("while fitting order %d on the training part", m))
			}
			// Scored by the one held-out rule of every method (eval's,
			// CNT's under --algorithm cnt): the model's own predictive
			// rule, mixed with the uniform distribution so that a
			// transition no method has seen scores finite.
			ho, err := heldOutRule.PerTransition(md, data.holdout, data.n)
			if err != nil {
				return fmt.Errorf("held-out evaluation of order %d: %w", m, err)
			}
			fmt.Fprintf(e.stdout, "order %d: held-out log-likelihood %.6f per transition\n", m, ho)
			if ho > bestHO {
				bestHO, bestM = ho, m
			}
		}
		fmt.Fprintf(e.stdout, "best order: %d (held-out scoring rule: %s); refitting it on all %d transitions\n",
			bestM, heldOutRule, data.transitions)
	} else {
		bestM = f.orders[0]
	}
	best, status, err := f.fitOrder(ctx, log, data.all(), data.val, data.n, bestM, data.u, warm)
	if err != nil {
		return err
	}
	return f.write(e, best, data, status, "")
}

// heldOutRule is the scoring rule of fit --holdout, the same for every
// method (EMSF orders, --algorithm cnt) and eval's default.
var heldOutRule = factor.HeldOutRule{Mix: factor.DefaultHeldOutMix}

// warmNote says, for a warm-started fit (--init) whose model has total
// iterations, how many this fit ran: a model counts its --init model's
// iterations too. "" without --init.
func (f *fitFlags) warmNote(total int) string {
	if f.initModel == "" {
		return ""
	}
	return fmt.Sprintf("; %d in this fit, after the %d of --init %s", total-f.initIters, f.initIters, f.initModel)
}

// warmFields are warmNote's log fields: the model's iterations, this
// fit's and the --init model's included.
func (f *fitFlags) warmFields(total int) []any {
	if f.initModel == "" {
		return nil
	}
	return []any{"model_iterations", total, "init_iterations", f.initIters}
}

// statusInterrupted is the model status of a fit stopped by a signal.
const statusInterrupted = "interrupted"

// write writes the fitted model with its status. An interrupted fit's
// model is written too (the last completed iteration), and then write
// returns an error so that emsf exits non-zero; where says what was being
// fitted when the signal came.
func (f *fitFlags) write(e *env, md *factor.Model, data *dataset, status, where string) error {
	mf := &arrowio.ModelFile{Model: md, Fingerprint: data.fingerprint, Params: f.params(md.M), Status: status,
		ReduceOrder: factor.ReduceOrder, GroupNNZ: f.groupNNZ, States: data.ids.states, Actions: data.ids.actions}
	// The model is written even after a signal cancelled the fit's context.
	if err := writeModelOut(context.Background(), &f.cluster.natsFlags, f.out, mf, f.format); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "model n=%d m=%d u=%d tie=%s: %d iterations (%s%s), log-likelihood %.6g, WKL %.6g\nwrote %s\n",
		md.N, md.M, md.U, md.Tie, md.Iteration, status, f.warmNote(md.Iteration), md.LogLik, md.WKL, f.out)
	if status == statusInterrupted {
		if where != "" {
			where = " " + where
		}
		return fmt.Errorf("interrupted%s: wrote the model of the last completed iteration (%d) to %s", where, md.Iteration, f.out)
	}
	return nil
}

func (f *fitFlags) validate() error {
	if err := f.in.validate(); err != nil {
		return err
	}
	if f.algorithm == algCNT {
		return f.validateCNT()
	}
	if f.order == "" {
		return usagef("--order is required (the number of hidden states m, e.g. --order 10)")
	}
	orders, err := intList("order", f.order)
	if err != nil {
		return err
	}
	for _, m := range orders {
		if m < 1 {
			return usagef("--order %d: must be >= 1", m)
		}
	}
	f.orders = orders
	if len(orders) > 1 && f.holdout == 0 {
		return usagef("--order %q lists several orders: give --holdout FRACTION to choose among them", f.order)
	}
	if f.tieV, err = factor.ParseTie(f.tie); err != nil {
		return usagef("--tie %q: want none, shared-k or shared-d", f.tie)
	}
	if err := f.stop.validate(); err != nil {
		return err
	}
	if err := f.progress.validate(); err != nil {
		return err
	}
	if f.restarts < 1 {
		return usagef("--restarts %d: must be >= 1", f.restarts)
	}
	if f.workers < 1 {
		return usagef("--workers %d: must be >= 1", f.workers)
	}
	if !(f.alpha > 0 && f.alpha <= 1) {
		return usagef("--alpha %v: must be in (0, 1]", f.alpha)
	}
	if !(f.holdout >= 0 && f.holdout < 1) {
		return usagef("--holdout %v: must be in [0, 1)", f.holdout)
	}
	if f.out == "" {
		return usagef("--out must name a file")
	}
	if err := modelFormat(&f.format, f.out); err != nil {
		return err
	}
	if f.shardNNZ < 1 {
		return usagef("--shard-nnz %d: must be >= 1", f.shardNNZ)
	}
	if f.groupNNZ < 1 {
		return usagef("--group-nnz %d: must be >= 1", f.groupNNZ)
	}
	if f.colCells < 1 || f.colCells > shard.MaxColCells {
		return usagef("--col-cells %d: must be in [1, %d]", f.colCells, shard.MaxColCells)
	}
	if !(f.initSmooth >= 0 && f.initSmooth < 1) {
		return usagef("--init-smooth %v: must be in [0, 1)", f.initSmooth)
	}
	if f.initSmooth > 0 && f.initModel == "" {
		return usagef("--init-smooth mixes the --init model: give --init FILE")
	}
	if f.initModel != "" && (len(orders) > 1 || f.restarts > 1) {
		return usagef("--init warm-starts one model: it cannot be combined with several --order values or --restarts")
	}
	if err := f.validateAlgorithm(); err != nil {
		return err
	}
	if err := f.validatePrecision(); err != nil {
		return err
	}
	if err := f.validateQuality(); err != nil {
		return err
	}
	if err := f.inc.validate(f); err != nil {
		return err
	}
	if err := f.onlineEM.validate(&f.inc, f); err != nil {
		return err
	}
	if err := f.limits.validate(); err != nil {
		return err
	}
	return f.cluster.validate()
}

// preflight finds before any work what would otherwise fail after it: an
// --out that cannot be written, a --nats server that cannot be reached;
// and warns when the input's content and name disagree on its format.
func (f *fitFlags) preflight(log hclog.Logger) error {
	if st, err := os.Stat(f.in.input); f.in.format == "" && err == nil && st.Mode().IsRegular() {
		if _, note, err := arrowio.DetectFormat(f.in.input); err != nil {
			return err
		} else if note != "" {
			log.Warn(note)
		}
	}
	switch {
	case f.algorithm == algCNT:
	case datasetOut(f.out):
		if err := checkDatasetDir(f.out); err != nil {
			return err
		}
	default:
		if err := arrowio.CheckWritable(f.out); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	if f.cluster.url != "" {
		nc, err := f.cluster.conn("emsf-preflight").Connect()
		if err != nil {
			return fmt.Errorf("--nats %s: %w", f.cluster.url, err)
		}
		nc.Close()
	}
	return nil
}

// modelFormat sets *format, the model file format, from the extension of
// out unless it was given, and refuses a format that contradicts the
// extension (Parquet written into model.arrow).
func modelFormat(format *string, out string) error {
	byName := arrowio.ModelArrow
	switch strings.ToLower(filepath.Ext(out)) {
	case ".parquet", ".pq":
		byName = arrowio.ModelParquet
	case ".arrow", ".feather", ".ipc":
	default:
		byName = ""
	}
	switch {
	case *format == "":
		*format = cmp.Or(byName, arrowio.ModelArrow)
	case *format != arrowio.ModelArrow && *format != arrowio.ModelParquet:
		return usagef("--format %q: want arrow or parquet", *format)
	case byName != "" && byName != *format:
		return usagef("--format %s but --out %s names a%s file: give --out a .%s name, or drop --format", *format, out,
			map[string]string{arrowio.ModelArrow: "n Arrow", arrowio.ModelParquet: " Parquet"}[byName], *format)
	}
	return nil
}

// fitOrder fits order m from each restart's seed (or from the warm model)
// and returns the model with the best log-likelihood and how its fit
// ended. Each model carries the log-likelihood of its own final
// parameters (factor.Evaluate). A fit stopped by an iteration or time
// limit before reaching a positive --tol is reported with a warning. When
// ctx is cancelled (Ctrl-C, SIGTERM), fitOrder stops and returns the best
// of the models fitted so far, the interrupted one included (it is the
// model of its last completed iteration), with status "interrupted"; it
// fails only if no iteration completed at all.
func (f *fitFlags) fitOrder(ctx context.Context, log hclog.Logger, mats, val []*factor.Block, n, m, u int, warm *arrowio.ModelFile) (*factor.Model, string, error) {
	shards, man := shard.SplitGrid(mats, n, f.shardNNZ, f.colCells)
	blocks := shard.Blocks(shards)
	var best *factor.Model
	bestStatus := ""
	bestScore := math.Inf(-1)
	for r := range f.restarts {
		var md *factor.Model
		if warm != nil {
			md = warm.Model.CloneFactors() // the rule is chosen anew for these data
		} else if f.seeded {
			md = factor.NewSeeded(n, m, u, f.tieV, mats, f.seed+uint64(r), f.workers)
		} else {
			md = factor.NewRandom(n, m, u, f.tieV, f.seed+uint64(r))
		}
		if f.precisionV != factor.Float64 {
			md.SetPrecision(f.precisionV)
		}
		var v *factor.Validation
		if val != nil {
			var err error
			if v, err = factor.NewValidation(n, u, f.tieV, mats, val); err != nil {
				return nil, "", err
			}
			v.NoCounts = f.smooth == smoothBackground
		}
		opts := factor.FitOptions{
			Alpha:     f.alpha,
			Workers:   f.workers,
			GroupNNZ:  f.groupNNZ,
			Converger: f.stop.converger(),
			Progress:  f.report.iterations(f.stop.iters, "order", m, "seed", md.Seed),
			Accel:     f.accelV,
		}
		if f.priorD > 0 || f.priorK > 0 {
			opts.Prior = &factor.Prior{D: f.priorD, K: f.priorK}
		}
		if f.stopV == stopValidation {
			opts.EarlyStop = v.EarlyStop(f.patience, f.minGain, f.workers)
		}
		var res factor.FitResult
		var err error
		if f.cluster.enabled() {
			f.cluster.params = f.params(m)
			res, err = fitCluster(ctx, &f.cluster, log, shards, man, md, opts, f.workers)
		} else {
			res, err = factor.Fit(ctx, md, blocks, opts)
		}
		f.report.done()
		interrupted := err != nil && ctx.Err() != nil
		if err != nil && !interrupted {
			if warm != nil && f.initSmooth == 0 && strings.Contains(err.Error(), "has probability 0") {
				err = fmt.Errorf("%w\n(the --init model cannot explain a transition of this data: --init-smooth 0.01 mixes it with the uniform distribution)", err)
			}
			return nil, "", err
		}
		status := res.Status.String()
		if interrupted {
			status = statusInterrupted
			if warm == nil && md.Iteration == 0 {
				if best != nil {
					break
				}
				return nil, "", fmt.Errorf("interrupted before the first iteration completed: no model written: %w", err)
			}
		}
		// A state without training data is predicted like the average
		// state, never by the random row it started from (--plain keeps
		// the fit of before, bits included).
		if !f.plain {
			md.SetUnseenRows(mats)
		}
		// What the fit held besides md (SQUAREM's points and their
		// logarithms, the statistics: several models' worth) is garbage
		// now; collected before the final pass, the tuning and the rule's
		// counts allocate, they reuse its memory instead of growing the
		// heap by fresh pages, each a page fault (peak RSS of a default
		// fit 11-17 % lower: docs/quality.md, round 9).
		runtime.GC()
		// The final pass is short (one E-step); it runs even after an
		// interrupt, so the model written carries its own log-likelihood.
		if err := factor.Evaluate(context.WithoutCancel(ctx), md, blocks, f.workers); err != nil {
			return nil, "", err
		}
		score := md.LogLik
		if v != nil {
			var rules []factor.RuleParams
			score, rules = v.Tune(md, f.workers)
			if f.smooth != smoothNone {
				if md.Smoothing, err = factor.NewSmoothing(n, u, mergeBlocks(u, mats, val), rules); err != nil {
					return nil, "", err
				}
			}
			log.Info("validation", "order", m, "seed", md.Seed, "loglik_per_transition", score, "rule", factor.RulesString(rules),
				"smooth", f.smooth, "best_iteration", res.BestIteration, "scores", res.Evaluations)
		}
		log.Info("fit done", append([]any{"order", m, "seed", md.Seed, "status", status, "iterations", res.Iterations},
			append(f.warmFields(md.Iteration), "loglik", md.LogLik, "accel", opts.Accel, "rejected", res.Rejected,
				"elapsed", res.Elapsed.Round(time.Millisecond))...)...)
		if !interrupted {
			f.warnEarly(log, res.Status, append([]any{"order", m, "seed", md.Seed, "iterations", res.Iterations}, f.warmFields(md.Iteration)...)...)
		}
		if best == nil || score > bestScore {
			best, bestStatus, bestScore = md, status, score
		}
		if interrupted {
			return best, statusInterrupted, nil
		}
	}
	return best, bestStatus, nil
}

// Values of --smooth and --stop.
const (
	smoothAuto       = "auto"
	smoothBackground = "background"
	smoothNone       = "none"
	stopValidation   = "validation"
	stopTol          = "tol"
)

// clusterPlainDefault reports whether f is a cluster fit of the owners
// exchange that names none of the quality flags (--accel, --smooth,
// --stop, the priors, --plain; given with their default values they
// count): it runs as --plain.
func (f *fitFlags) clusterPlainDefault() bool {
	return f.cluster.enabled() && f.cluster.exchange != "coordinator" && f.algorithm == algEMSF && !f.inc.enabled &&
		!f.plain && !f.qualityGiven
}

// needsValidation reports whether the fit splits a validation part off
// its training data (--smooth or --stop use it).
func (f *fitFlags) needsValidation() bool {
	return f.algorithm == algEMSF && !f.inc.enabled && (f.smooth != smoothNone || f.stopV == stopValidation)
}

// validateQuality checks --accel, --smooth, --stop, --validation and
// --patience and resolves their auto values for a fit that holds the
// model; fitCluster drops what the owners exchange cannot run.
func (f *fitFlags) validateQuality() error {
	if f.clusterPlainDefault() {
		// A cluster fit's default: the owners exchange runs plain EM
		// (its workers hold D and K), and the smoothing rule, the
		// validation split and the start of unseen rows need the data in
		// one place; so it is --plain, and the coordinator need not read
		// the data (ingestedPath). The model is the local --plain fit's.
		f.plain, f.clusterPlain, f.cluster.plainDefault = true, true, true
	}
	if f.plain {
		if f.priorSet || f.accel != "auto" || f.smooth != smoothAuto || f.stopRule != "auto" || f.start != "auto" {
			return usagef("--plain sets --accel, --smooth, --stop, --start and the priors itself: give it alone")
		}
		f.accel, f.smooth, f.stopRule, f.priorD, f.priorK, f.start = "none", smoothNone, stopTol, 0, 0, "random"
	}
	switch f.smooth {
	case smoothAuto, smoothBackground, smoothNone:
	default:
		return usagef("--smooth %q: want auto, background or none", f.smooth)
	}
	if !(f.validation > 0 && f.validation < 1) {
		return usagef("--validation %v: must be in (0, 1)", f.validation)
	}
	if !(f.priorD >= 0) || !(f.priorK >= 0) || math.IsInf(f.priorD, 0) || math.IsInf(f.priorK, 0) {
		return usagef("--prior-d %v, --prior-k %v: must be finite and >= 0", f.priorD, f.priorK)
	}
	f.cluster.priorExplicit = f.priorSet && (f.priorD > 0 || f.priorK > 0)
	if (f.priorD > 0 || f.priorK > 0) && (f.algorithm != algEMSF || f.inc.enabled || f.alpha != 1) {
		if f.priorSet {
			return usagef("--prior-d/--prior-k: MAP-EM runs a batch EMSF fit with --alpha 1 that holds the model (not --algorithm %s, --incremental, --alpha %v or --exchange owners)", f.algorithm, f.alpha)
		}
		f.priorD, f.priorK = 0, 0
	}
	if f.patience < 1 {
		return usagef("--patience %d: must be >= 1", f.patience)
	}
	if !(f.minGain >= 0) || math.IsInf(f.minGain, 1) {
		return usagef("--min-gain %v: must be a number >= 0 (nats per validation transition)", f.minGain)
	}
	// A resumed fit too: its checkpoint keeps the loop's state
	// (factor.LoopState) beside the model.
	holds := f.algorithm == algEMSF && !f.inc.enabled
	switch f.stopRule {
	case "auto":
		f.stopV = stopTol
		if holds {
			f.stopV = stopValidation
		}
	case stopValidation:
		if !holds {
			return usagef("--stop validation: stops a batch EMSF fit (not --algorithm %s or --incremental)", f.algorithm)
		}
		f.stopV = stopValidation
	case stopTol:
		f.stopV = stopTol
	default:
		return usagef("--stop %q: want auto, validation or tol", f.stopRule)
	}
	if f.stopTuned && f.stopV != stopValidation {
		return usagef("--patience and --min-gain tune --stop validation, and this fit stops on the relative change alone (--stop tol, --plain, an --algorithm other than emsf, --incremental, or a cluster fit's default): drop them, or use --stop validation")
	}
	f.cluster.stopExplicit = f.stopRule == stopValidation
	f.cluster.accelExplicit = f.accel == "squarem"
	switch f.accel {
	case "auto":
		f.accelV = factor.AccelNone
		if holds && f.alpha == 1 {
			f.accelV, f.accelAuto = factor.AccelSquarem, true
		}
	case "none":
		f.accelV = factor.AccelNone
	case "squarem":
		if !holds || f.alpha != 1 {
			return usagef("--accel squarem: accelerates a batch EMSF fit with --alpha 1 (not --algorithm %s, --incremental or --alpha %v)", f.algorithm, f.alpha)
		}
		f.accelV = factor.AccelSquarem
	default:
		return usagef("--accel %q: want auto, none or squarem", f.accel)
	}
	// The seeded start needs the training rows and TieNone (NewSeeded);
	// a warm start (--init) has its own (a resumed fit starts from its
	// checkpoint, and records the start of the run it resumes).
	seedable := holds && f.initModel == "" && f.tieV == factor.TieNone
	switch f.start {
	case "auto":
		f.seeded = seedable
	case "random":
		f.seeded = false
	case "seeded":
		if !seedable {
			return usagef("--start seeded: starts a batch EMSF fit with --tie none from the training data (not --algorithm %s, --incremental, --init or --tie %s)", f.algorithm, f.tieV)
		}
		f.seeded = true
	default:
		return usagef("--start %q: want auto, seeded or random", f.start)
	}
	return nil
}

// warnEarly warns when a fit (EMSF, KLM, MU) stopped at --iters or
// --time-limit before reaching a positive --tol; fields say which fit.
func (f *fitFlags) warnEarly(log hclog.Logger, st factor.Status, fields ...any) {
	if st.Early() && f.stop.tol > 0 {
		log.Warn("the fit stopped before converging: raise --iters or --time-limit (or loosen --tol)",
			append(fields, "status", st.String(), "tol", f.stop.tol)...)
	}
}

// interruptedUnfinished is the error of a KLM or MU fit stopped by a
// signal: their iterates become a stochastic factorization only at the
// end, so nothing is written.
func (f *fitFlags) interruptedUnfinished(err error) error {
	return fmt.Errorf("interrupted: --algorithm %s writes no model of an unfinished fit: %w", f.algorithm, err)
}

func (f *fitFlags) params(m int) map[string]string {
	p := map[string]string{
		"input":     f.in.input,
		"order":     strconv.Itoa(m),
		"tie":       f.tieV.String(),
		"iters":     strconv.Itoa(f.stop.iters),
		"tol":       strconv.FormatFloat(f.stop.tol, 'g', -1, 64),
		"seed":      strconv.FormatUint(f.seed, 10),
		"restarts":  strconv.Itoa(f.restarts),
		"alpha":     strconv.FormatFloat(f.alpha, 'g', -1, 64),
		"holdout":   strconv.FormatFloat(f.holdout, 'g', -1, 64),
		"shard_nnz": strconv.Itoa(f.shardNNZ),
		"group_nnz": strconv.Itoa(f.groupNNZ),
		"init":      f.initModel,
	}
	// Recorded only when not plain EM: a plain fit's files and job state
	// stay as they were.
	if f.accelV != factor.AccelNone {
		p["accel"] = f.accelV.String()
	}
	if f.seeded {
		p["start"] = "seeded"
	}
	if f.priorD > 0 || f.priorK > 0 {
		p["prior_d"] = strconv.FormatFloat(f.priorD, 'g', -1, 64)
		p["prior_k"] = strconv.FormatFloat(f.priorK, 'g', -1, 64)
	}
	if f.needsValidation() {
		p["smooth"], p["stop"] = f.smooth, f.stopV
		p["validation"] = strconv.FormatFloat(f.validation, 'g', -1, 64)
		if f.stopV == stopValidation {
			p["patience"] = strconv.Itoa(f.patience)
			p["min_gain"] = strconv.FormatFloat(f.minGain, 'g', -1, 64)
		}
	}
	// Recorded only when not the default: a float64 fit's files and job
	// state stay as they were, and a file without it is float64.
	if f.precisionV != factor.Float64 {
		p[paramPrecision] = f.precisionV.String()
	}
	// Jobs of earlier versions have no col_cells; resume compares only
	// the keys both have (the manifest's shards then differ anyway).
	p["col_cells"] = strconv.Itoa(f.colCells)
	return p
}

// paramPrecision is the fit parameter (model file emsf.param.precision,
// job state) naming a --precision other than float64.
const paramPrecision = "precision"

const precisionUsage = "precision of the factors D and K: float64, or float32 (stored rounded to float32, K read by the pass at half the bytes; " +
	"statistics still summed in float64; agrees with float64 to about 1e-7 in the loglik per transition; EMSF only: " +
	"not with --incremental or --algorithm mu-*/klm/cnt; needs --alpha >= 0.1)"

// validatePrecision parses --precision and refuses the fits that do not
// run float32 factors.
func (f *fitFlags) validatePrecision() error {
	p, err := factor.ParsePrecision(f.precision)
	if err != nil {
		return usagef("--precision %q: want float64 or float32", f.precision)
	}
	f.precisionV = p
	if p == factor.Float64 {
		return nil
	}
	switch {
	case f.algorithm != algEMSF:
		return usagef("--precision %s runs --algorithm emsf only (not %s)", p, f.algorithm)
	case f.inc.enabled:
		return usagef("--precision %s does not run with --incremental: the batch fit only", p)
	case f.alpha < factor.MinAlpha32:
		return usagef("--precision %s needs --alpha >= %v (rounding drifts row sums by up to 6e-8/alpha), got %v", p, factor.MinAlpha32, f.alpha)
	}
	return nil
}

// The stopping rule of fit and demo. The defaults converge (reach --tol)
// on the README's data (100 states, 2 000 transitions, order 5: 621
// iterations); a fit that stops at --iters or --time-limit first says so.
const (
	defaultIters = 1000
	defaultTol   = 1e-7
)

// stopFlags are --iters, --tol and --time-limit.
type stopFlags struct {
	iters     int
	tol       float64
	timeLimit time.Duration
}

func (s *stopFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&s.iters, "iters", defaultIters, "maximum number of EM iterations (0: no limit)")
	fs.Float64Var(&s.tol, "tol", defaultTol, "stop when the relative change of the log-likelihood is at most this (0: never)")
	fs.DurationVar(&s.timeLimit, "time-limit", 0, "stop after this long, e.g. 10m (0: no limit)")
}

func (s *stopFlags) validate() error {
	if s.iters < 0 {
		return usagef("--iters %d: must be >= 0", s.iters)
	}
	if !(s.tol >= 0) {
		return usagef("--tol %v: must be >= 0", s.tol)
	}
	if s.timeLimit < 0 {
		return usagef("--time-limit %v: must be >= 0", s.timeLimit)
	}
	if s.iters == 0 && s.tol == 0 && s.timeLimit == 0 {
		return usagef("--iters 0 and --tol 0 with no --time-limit would never stop")
	}
	return nil
}

func (s *stopFlags) converger() factor.Converger {
	return factor.Converger{Tol: s.tol, MaxIter: s.iters, TimeLimit: s.timeLimit}
}
