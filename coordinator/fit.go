package coordinator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// Options configure Fit.
type Options struct {
	// Job names the job (subjects, object names, the KV key); required.
	Job string
	// Params are recorded in the job state.
	Params map[string]string
	// Alpha is the learning rate of each commit; 0 means 1 (plain EM).
	Alpha float64
	// Commit, if set, is the commit rule in place of EMSF's (see
	// factor.FitOptions.Commit): factor.MUCommit.Commit runs MU under
	// the wkl loss on the same workers and partials. Alpha must then be
	// 0 or 1.
	Commit    func(md *factor.Model, acc *factor.Accumulator)
	Converger factor.Converger
	// Accel and EarlyStop are factor.FitOptions': the coordinator holds
	// the model, so SQUAREM and the held-out rule run here as in a local
	// fit, bitwise; a Checkpoint keeps their state (factor.LoopState,
	// with SaveLoopState), and Resume goes on from it, bitwise.
	Accel     factor.Accel
	EarlyStop *factor.EarlyStop
	Prior     *factor.Prior
	// Progress, if set, is called after every committed iteration with the
	// same values factor.Fit reports.
	Progress func(factor.IterStats)
	// Report, if set, is called after every committed iteration with the
	// cluster's view of it.
	Report func(IterReport)
	// TaskTimeout is the lease of a task: how long the coordinator waits
	// for its partial before handing it to another worker (default 30s).
	TaskTimeout time.Duration
	// MaxAttempts bounds how often one shard is handed out in one
	// iteration before the fit fails (default 8).
	MaxAttempts int
	// Window bounds the tasks outstanding at once (default 2 per live
	// worker, at least 2).
	Window int
	// MinWorkers is how many workers must be alive before the first
	// iteration (default 1); WaitWorkers how long to wait for them
	// (default 30s).
	MinWorkers  int
	WaitWorkers time.Duration
	// Checkpoint, if set, records the job state after every commit.
	Checkpoint Checkpointer
	// SaveLoopState hands the Checkpoint the loop state of a fit with
	// Accel or EarlyStop (factor.LoopState), for a later Resume of the
	// job: emsf fit's. Without it such a fit resumes from its start.
	SaveLoopState bool
	// Resume continues the job from its last checkpoint (Checkpoint must
	// be a Resumer) when one exists for the same shards and model shape:
	// md is overwritten with the checkpointed model and the fit goes on
	// from the next iteration. The result is bitwise that of an
	// uninterrupted fit (the elapsed time restarts from zero).
	Resume bool
	// Verify is the fraction of tasks checked by computing them again
	// on another worker (verify.go; 0: none); VerifyLast checks each
	// worker's last task of every pass too, before the commit;
	// VerifySalt draws the sample (0: at random; tests fix it). Over an
	// executor that cannot quarantine (Quarantiner) nothing is checked.
	Verify     float64
	VerifyLast bool
	VerifySalt uint64
	// GroupNNZ is the target nonzeros per reduction group of the
	// canonical reduce order (factor.ReducePlan; 0: the default). The fit
	// equals factor.Fit bitwise with the same GroupNNZ.
	GroupNNZ int
	// Logger receives the coordinator's logs (default: none).
	Logger hclog.Logger
}

// IterReport is the cluster's view of one committed iteration. Its wall
// time is split as Wall ≈ Compute + Transfer + Reduce + Commit: Reduce is
// the coordinator's time checking and merging partials, Commit the commit
// and checkpoint, Compute the workers' compute time per worker
// (ComputeTotal / Workers, at most the time spent waiting for partials),
// and Transfer the rest: model publication, task and partial messages,
// object fetches, queueing.
type IterReport struct {
	Iteration                               int
	Wall, Compute, Transfer, Reduce, Commit time.Duration
	// ComputeTotal is the sum of the accepted tasks' compute times.
	ComputeTotal time.Duration
	// Phases of a task, averaged over the accepted tasks where the
	// executor measures them (natsexec does): ModelFetch the worker's time
	// getting the model before it computes, PartialEncode its time
	// encoding the partial, PartialFetch the executor's time getting and
	// decoding it. With model parts a worker computes while K arrives, so
	// part of the model's transfer is inside Compute.
	ModelFetch, PartialEncode, PartialFetch time.Duration
	// Bytes moved: model publication plus every task's request, reply and
	// object fetches.
	Bytes int64
	// Tasks handed out (including retries); Retried the hand-outs after
	// the first of a shard; Dropped the late or duplicate partials;
	// Rejected the partials that failed a check.
	Tasks, Retried, Dropped, Rejected int
	// Verified counts the tasks computed again on another worker to
	// check them (Options.Verify), Mismatches the checks that caught a
	// wrong partial, Redone the passes run again for it.
	Verified, Mismatches, Redone int
	// Workers alive at the start of the iteration.
	Workers int
	SumX    float64
}

// Defaults of Options, and how often waitWorkers counts the workers.
const (
	defaultTaskTimeout = 30 * time.Second
	defaultMaxAttempts = 8
	defaultWaitWorkers = 30 * time.Second
	workerPoll         = 200 * time.Millisecond
)

// ErrNoWorkers is returned when fewer than MinWorkers workers answer.
var ErrNoWorkers = errors.New("coordinator: not enough workers")

// Fit runs batch EMSF on md in place with the shards computed by exec, and
// stops when opts.Converger says so. The result (the model, the progress
// values, the FitResult) is bitwise the same as factor.Fit(ctx, md,
// shard.Blocks(shards), factor.FitOptions{...}) with the same options and
// GroupNNZ: the EM loop is factor.Loop, with the executor as its stepper.
// With opts.Commit the same holds for factor.Fit with that commit rule.
func Fit(ctx context.Context, exec Executor, shards []*shard.Shard, man *shard.Manifest, md *factor.Model, opts Options) (factor.FitResult, error) {
	if err := opts.Converger.Validate(); err != nil {
		return factor.FitResult{}, err
	}
	if opts.Job == "" {
		return factor.FitResult{}, fmt.Errorf("coordinator: job name is empty")
	}
	if len(man.Shards) != len(shards) {
		return factor.FitResult{}, fmt.Errorf("coordinator: manifest lists %d shards, got %d", len(man.Shards), len(shards))
	}
	for k, s := range shards {
		if s.Info != man.Shards[k] {
			return factor.FitResult{}, fmt.Errorf("coordinator: shard %d differs from its manifest line", k)
		}
		if err := s.Block.CheckShape(md.N, md.U); err != nil {
			return factor.FitResult{}, fmt.Errorf("factor: block %d: %w", k, err)
		}
	}
	blocks := shard.Blocks(shards)
	if total := factor.TotalCount(blocks); !(total > 0) {
		return factor.FitResult{}, fmt.Errorf("factor: no data: the total count is %v", total)
	}
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	log = log.With("job", opts.Job)
	if opts.TaskTimeout <= 0 {
		opts.TaskTimeout = defaultTaskTimeout
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = defaultMaxAttempts
	}
	alpha := opts.Alpha
	if alpha == 0 {
		alpha = 1
	}
	if !(alpha > 0 && alpha <= 1) {
		return factor.FitResult{}, fmt.Errorf("coordinator: learning rate %v must be in (0, 1]", alpha)
	}
	if opts.Commit != nil && alpha != 1 {
		return factor.FitResult{}, fmt.Errorf("coordinator: learning rate %v: a fit with its own commit rule takes none (0 or 1)", alpha)
	}

	alive, err := waitWorkers(ctx, exec, opts, log)
	if err != nil {
		return factor.FitResult{}, err
	}
	loadBytes, err := exec.Load(ctx, opts.Job, shards)
	if err != nil {
		return factor.FitResult{}, fmt.Errorf("coordinator: load shards: %w", err)
	}
	log.Info("shards loaded", "shards", len(shards), "nnz", man.NNZ, "bytes", loadBytes, "workers", alive)
	plan := man.ReducePlan(md.Tie, opts.GroupNNZ)
	st := &JobState{Job: opts.Job, Params: opts.Params, Manifest: man, ModelIteration: md.Iteration, Status: "running",
		ReduceOrder: factor.ReduceOrder, GroupNNZ: plan.GroupNNZ}
	first := 1
	var ls *factor.LoopState
	if opts.Resume {
		if first, ls, err = resume(ctx, opts, man, md, st, log); err != nil {
			return factor.FitResult{}, err
		}
	}
	if opts.Checkpoint != nil {
		if err := opts.Checkpoint.Begin(ctx, st); err != nil {
			return factor.FitResult{}, err
		}
	}

	p := &pass{exec: exec, opts: &opts, log: log, man: man, plan: plan, cur: plan, alpha: alpha, alive: alive, shards: shards}
	if _, ok := exec.(Quarantiner); ok {
		if p.verify, err = newVerifier(opts.Verify, opts.VerifyLast, opts.VerifySalt); err != nil {
			return factor.FitResult{}, err
		}
	}
	committed := func(ctx context.Context, is factor.IterStats, status factor.Status, ls *factor.LoopState) error {
		iter, rep := is.Iteration, &p.rep
		if opts.Checkpoint != nil {
			st.Iteration, st.ModelIteration, st.SumX, st.Updated = iter, md.Iteration, is.SumX, time.Now()
			st.LogLik = nil
			if ll := is.LogLik; !math.IsNaN(ll) {
				st.LogLik = &ll
			}
			if status != factor.NotTerminated {
				st.Status = status.String()
			}
			if err := opts.Checkpoint.Commit(ctx, st, md, ls); err != nil {
				return fmt.Errorf("coordinator: checkpoint iteration %d: %w", iter, err)
			}
		}
		rep.Commit = time.Since(p.passEnd)
		rep.Wall = time.Since(p.t0)
		rep.SumX = is.SumX
		log.Debug("iteration committed", "iter", iter, "wall", rep.Wall, "compute", rep.Compute,
			"transfer", rep.Transfer, "reduce", rep.Reduce, "commit", rep.Commit, "bytes", rep.Bytes,
			"model_fetch", rep.ModelFetch, "partial_encode", rep.PartialEncode, "partial_fetch", rep.PartialFetch,
			"tasks", rep.Tasks, "retried", rep.Retried, "dropped", rep.Dropped, "rejected", rep.Rejected,
			"verified", rep.Verified, "mismatches", rep.Mismatches, "redone", rep.Redone,
			"workers", rep.Workers)
		if opts.Progress != nil {
			opts.Progress(is)
		}
		if opts.Report != nil {
			opts.Report(*rep)
		}
		return nil
	}
	return factor.Loop(ctx, md, blocks, p, factor.FitOptions{Alpha: opts.Alpha, Converger: opts.Converger, Commit: opts.Commit,
		Accel: opts.Accel, EarlyStop: opts.EarlyStop, Prior: opts.Prior},
		factor.LoopHooks{Start: first, Resume: ls, Committed: committed, SaveState: opts.Checkpoint != nil && opts.SaveLoopState})
}

// waitWorkers polls exec until MinWorkers workers are alive.
func waitWorkers(ctx context.Context, exec Executor, opts Options, log hclog.Logger) (int, error) {
	want := max(opts.MinWorkers, 1)
	wait := opts.WaitWorkers
	if wait <= 0 {
		wait = defaultWaitWorkers
	}
	deadline := time.Now().Add(wait)
	logged := false
	for {
		n, err := exec.Workers(ctx)
		if err != nil {
			return 0, fmt.Errorf("coordinator: count workers: %w", err)
		}
		if n >= want {
			return n, nil
		}
		if time.Now().After(deadline) {
			return n, fmt.Errorf("%w: %d alive after %v, want at least %d (start workers with 'emsf worker --nats URL')",
				ErrNoWorkers, n, wait, want)
		}
		if !logged {
			log.Info("waiting for workers", "alive", n, "want", want)
			logged = true
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-time.After(workerPoll):
		}
	}
}

// pass is the gather-and-reduce state of the fit, reused across
// iterations: factor.Loop's stepper.
type pass struct {
	exec Executor
	opts *Options
	log  hclog.Logger
	man  *shard.Manifest
	plan *factor.ReducePlan
	// cur is the plan of the passes: plan, or its trees of the actions
	// still fitted (SetActive).
	cur    *factor.ReducePlan
	active []bool
	red    factor.Reducer
	// alpha is the learning rate of the commits (tasks carry it).
	alpha float64
	// alive is the number of workers at the last count.
	alive int
	// rep is the report of the current iteration; t0 its start, passEnd
	// the end of its pass.
	rep         IterReport
	t0, passEnd time.Time
	// verify checks tasks (nil: none); shards, md (the model of the
	// current pass) and scratch let the coordinator compute a task
	// itself when two workers disagree (verify.go).
	verify  *verifier
	shards  []*shard.Shard
	md      *factor.Model
	scratch factor.Scratch
}

// Step publishes md for iteration iter and runs its pass over the
// executor (factor.Stepper).
func (p *pass) Step(ctx context.Context, iter int, md *factor.Model, acc *factor.Accumulator, withLL bool) error {
	p.t0 = time.Now()
	p.rep = IterReport{Iteration: iter}
	rep := &p.rep
	if iter > 1 {
		var err error
		if p.alive, err = p.exec.Workers(ctx); err != nil {
			return fmt.Errorf("coordinator: count workers: %w", err)
		}
	}
	rep.Workers = p.alive
	b, err := p.exec.Publish(ctx, p.opts.Job, iter, md)
	if err != nil {
		return fmt.Errorf("coordinator: publish model for iteration %d: %w", iter, err)
	}
	rep.Bytes += b
	tg := time.Now()
	p.md = md
	for {
		p.red.Reset(acc, p.cur)
		err := p.run(ctx, iter, withLL, p.alive, rep)
		if isRedo(err) && rep.Redone < maxRedos {
			rep.Redone++
			p.log.Warn("iteration's pass runs again", "iter", iter, "reason", err)
			if n, err := p.exec.Workers(ctx); err == nil {
				p.alive = n
			}
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	if !p.red.Done() {
		return fmt.Errorf("coordinator: iteration %d: pass ended before every shard was reduced", iter)
	}
	wait := time.Since(tg) - rep.Reduce
	rep.Compute = min(rep.ComputeTotal/time.Duration(max(p.alive, 1)), max(wait, 0))
	rep.Transfer = time.Since(p.t0) - rep.Reduce - rep.Compute
	p.passEnd = time.Now()
	return nil
}

// SetActive leaves the shards of the actions not active out of the
// passes from now on (factor.ActionFilter): a SQUAREM fit of a model
// without ties no longer reads the statistics of an action that
// stopped. The plan keeps the other actions' trees as they were, so
// their sums are bitwise those of a pass of every shard.
func (p *pass) SetActive(active []bool) {
	if slices.Equal(active, p.active) {
		return // called after every iteration: the plan only changes when an action stops
	}
	p.active = slices.Clone(active)
	if !slices.Contains(active, false) {
		p.cur = p.plan
		return
	}
	p.cur = p.plan.Only(func(kb int) bool { return kb >= len(active) || active[kb] })
}

// run computes one pass: every shard handed out in the plan's order,
// checked, and folded by p.red as soon as its turn comes (see scheduler).
func (p *pass) run(ctx context.Context, iter int, withLL bool, alive int, rep *IterReport) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := newScheduler(ctx, p, iter, withLL, alive, rep)
	defer s.close()
	return s.run()
}

// checkPartial checks a partial against its shard's manifest line: action,
// nonzeros, and Σx equal to the shard's Σcount (to the rounding that
// factor.CheckSumX allows: X is summed per row, the manifest over all
// nonzeros).
func checkPartial(pt *factor.Partial, in shard.Info) error {
	switch {
	case pt == nil:
		return fmt.Errorf("no partial")
	case pt.Action != in.Action:
		return fmt.Errorf("action %d, manifest says %d", pt.Action, in.Action)
	case pt.NNZ != in.NNZ:
		return fmt.Errorf("%d nonzeros, manifest says %d", pt.NNZ, in.NNZ)
	}
	sx := 0.0
	for _, v := range pt.X {
		sx += v
	}
	if math.Abs(sx-in.Sum) > 1e-12*math.Abs(in.Sum) || math.Abs(pt.SumX-in.Sum) > 1e-12*math.Abs(in.Sum) {
		return fmt.Errorf("Σx = %v (SumX %v), manifest Σcount = %v", sx, pt.SumX, in.Sum)
	}
	return nil
}

// Resumer is a Checkpointer that can load a job's last checkpoint.
type Resumer interface {
	Checkpointer
	// Resume returns the job's state, committed model and loop state
	// (nil for plain EM), or a nil state when the job has no checkpoint.
	Resume(ctx context.Context, job string) (*JobState, *factor.Model, *factor.LoopState, error)
}

// resume loads the job's checkpoint into md and st and returns the first
// iteration to run and the loop state to go on from.
func resume(ctx context.Context, opts Options, man *shard.Manifest, md *factor.Model, st *JobState, log hclog.Logger) (int, *factor.LoopState, error) {
	r, ok := opts.Checkpoint.(Resumer)
	if !ok {
		return 0, nil, fmt.Errorf("coordinator: resume needs a checkpointer that can load checkpoints")
	}
	old, m0, ls, err := r.Resume(ctx, opts.Job)
	if err != nil {
		return 0, nil, fmt.Errorf("coordinator: resume job %s: %w", opts.Job, err)
	}
	if old == nil || old.Iteration == 0 {
		log.Info("no checkpoint to resume from: starting afresh")
		return 1, nil, nil
	}
	if err := CheckResume(old, opts.Params, man); err != nil {
		return 0, nil, fmt.Errorf("coordinator: resume job %s: %w", opts.Job, err)
	}
	if m0 == nil {
		log.Info("no committed model to resume from: starting afresh", "last_iteration", old.Iteration)
		return 1, nil, nil
	}
	if old.ReduceOrder != st.ReduceOrder || old.GroupNNZ != st.GroupNNZ {
		return 0, nil, fmt.Errorf("coordinator: resume job %s: its checkpoint was reduced in order %q with group nnz %d, this fit uses %q with %d",
			opts.Job, old.ReduceOrder, old.GroupNNZ, st.ReduceOrder, st.GroupNNZ)
	}
	if err := m0.CheckCompatible(md.N, md.M, md.U, md.Tie); err != nil {
		return 0, nil, fmt.Errorf("coordinator: resume job %s: %w", opts.Job, err)
	}
	if ls == nil && (opts.Accel != factor.AccelNone || opts.EarlyStop != nil) {
		// Its loop state was never stored (the coordinator stopped
		// before its first resume point was).
		log.Info("no resume point of the fit's loop state: starting afresh", "last_iteration", old.Iteration)
		return 1, nil, nil
	}
	if ls != nil {
		if err := ls.Check(md, old.Iteration); err != nil {
			// Damaged (the objects passed their digests: the record
			// itself): the fit is a function of its data and
			// parameters, so afresh ends on the same bits.
			log.Warn("the resume point's loop state does not read: starting afresh", "iteration", old.Iteration, "error", err)
			return 1, nil, nil
		}
	}
	for b := range md.D {
		copy(md.D[b], m0.D[b])
	}
	for b := range md.KT {
		copy(md.KT[b], m0.KT[b])
	}
	md.Iteration, md.LogLik, md.WKL, md.Seed = m0.Iteration, m0.LogLik, m0.WKL, m0.Seed
	st.Iteration, st.ModelIteration = old.Iteration, md.Iteration
	log.Info("resuming", "from_iteration", old.Iteration, "model", old.ModelObject)
	return old.Iteration + 1, ls, nil
}
