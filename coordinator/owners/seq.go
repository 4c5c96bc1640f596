package owners

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker/wire/proto"
)

// Options configure Run.
type Options struct {
	Alpha     float64
	Converger factor.Converger
	Progress  func(factor.IterStats)
	// Report, if set, is called after each committed iteration.
	Report func(Report)
	// GroupNNZ is the canonical order's reduction group size (0: the
	// default), as factor.Fit's.
	GroupNNZ int
	// ColBlocks is the number of column blocks of each K block (0: one
	// per 4 MiB of K^T rows, at most 1024).
	ColBlocks int
	// CheckpointEvery is how often the owners store their blocks (default
	// 10 iterations).
	CheckpointEvery int
	// TaskTimeout bounds every request (default 2 minutes).
	TaskTimeout time.Duration
	// NoBackups turns off the backup copies of stragglers' tasks (see
	// pass.go): for measurements of the protocol's own bytes, which a
	// backup copy (timing-dependent) would add to.
	NoBackups bool
	// Verify is the fraction of tasks computed again on another worker
	// and compared bit for bit before the pass is committed (verify.go;
	// 0: none, 1: every task). VerifySeed seeds the draws (0: a random
	// seed, so that no worker can tell which of its answers are checked).
	Verify     float64
	VerifySeed uint64
	// MaxRollbacks bounds the rollbacks of one fit (default 8).
	MaxRollbacks int
	// MinWorkers is how many workers the first placement of a run waits
	// for (default 1; a placement after a rollback takes whoever
	// answers).
	MinWorkers int
	// Committed, if set, is called after each committed iteration (a
	// test hook: faults at chosen points).
	Committed func(ctx context.Context, iter int) error
	// Resume goes on from the job's last checkpoint when its record has
	// one (the caller checked that the data and parameters are the
	// job's).
	Resume bool
	// Evaluate, once the fitted model is stored, runs one more pass that
	// computes its log-likelihood into hdr.LogLik and hdr.WKL: what
	// factor.Evaluate gives the local fit's model before it is written
	// (a caller that holds no shard cannot run it).
	Evaluate bool
	// Logger receives the sequencer's logs (default: none); Clock is its
	// time (default RealClock).
	Logger hclog.Logger
	Clock  Clock
}

// passRecord is what a pass computed, to check a replay against.
type passRecord struct {
	withLL bool
	y      [][]float64
	ll, sx float64
	nnz    int
}

// seq is the state of one Run.
type seq struct {
	cl    Cluster
	store Store
	model Model
	job   *Job
	opt   Options
	log   hclog.Logger
	clock Clock
	plan  *Plan
	sums  factor.DataSums
	prec  factor.Precision
	alpha float64

	// cols are the column blocks with their owners and CRCs at version;
	// gowner the row groups' owners, shardW the shards' workers: the
	// epoch's placement.
	cols   [][]proto.ColBlock
	gowner []string
	shardW []string

	version int      // the committed version the workers hold
	dcrc    []string // per row group, at the last version stored
	ck      Checkpoint
	// prev is the checkpoint before ck, whose objects are kept until a
	// later one is recorded (nil: none); stale are the versions of
	// checkpoints found corrupt, whose objects go once the record no
	// longer names them; init is checkpoint 0's model scalars (a fall
	// back to the start stores it again).
	prev  *Checkpoint
	stale []int
	init  Checkpoint
	// epoch and token are the current epoch and its secret; lease what
	// the last record written holds of them, wtoken its token.
	epoch, tokenEpoch int
	token             string
	lease             proto.Lease
	wlease            proto.Lease
	wtoken            string
	leaseLost         bool
	setup             bool
	placed            bool
	workers           []string
	// ever are the workers placed in any epoch of this run (end tells
	// them all).
	ever map[string]bool
	// winner is who computed each shard in the last pass (its placed
	// worker, or a backup's: the owners pull its slices from there).
	winner  []string
	results []*proto.Reply
	// digests are the owners' digests of their blocks at version, by
	// worker, and lastY and lastLL the pass's that made it: the commit
	// record of the version.
	digests   map[string]string
	lastY     [][]float64
	lastLL    float64
	history   map[int]passRecord
	red       factor.Reducer
	rollbacks int
	// streak counts the rollbacks since the last committed iteration
	// (Backoff), stalls those for a stalled store write.
	streak, stalls int
	// cost is each worker's measured seconds per nonzero (a task's time
	// from request to answer); busy (seconds) and nnz are the last pass's
	// per worker; rebalances counts re-placements for stragglers.
	cost       map[string]float64
	busy       map[string]float64
	nnz        map[string]float64
	rebalances int
	backups    int
	// vrand draws the tasks to verify; verified is, by worker, the last
	// iteration in which an answer of it was verified (verify.go);
	// verifications and rogues count them.
	vrand         *rand.Rand
	verified      map[string]int
	verifications int
	rogues        int
	// iter0 is the model's iteration count at version 0; status the
	// record's; last the record last written.
	iter0  int
	status string
	last   *Record
}

// Run fits a job with the owners exchange: it plans job (NewPlan), takes
// the job over in store, places it on cl's workers, and sequences
// iterations (factor.Loop) until the converger stops them, rolling back
// to the last checkpoint on any failure; model gives the initial model
// and takes the fitted one. hdr is the model's header (shape, precision,
// iteration, log-likelihood), without factors: Run reads no row of D or
// K; it leaves hdr as the fitted model's header. The result is bitwise
// factor.Fit's with the same GroupNNZ, for any number of workers,
// placement and failures.
func Run(ctx context.Context, cl Cluster, store Store, model Model, job *Job, hdr *factor.Model, opt Options) (factor.FitResult, error) {
	if hdr.D != nil || hdr.KT != nil {
		return factor.FitResult{}, errors.New("owners: Run takes a model header; the factors go through its Model")
	}
	if job.Name == "" {
		return factor.FitResult{}, errors.New("owners: no job name")
	}
	if opt.CheckpointEvery <= 0 {
		opt.CheckpointEvery = 10
	}
	if opt.TaskTimeout <= 0 {
		opt.TaskTimeout = 2 * time.Minute
	}
	if opt.MaxRollbacks <= 0 {
		opt.MaxRollbacks = 8
	}
	if opt.Logger == nil {
		opt.Logger = hclog.NewNullLogger()
	}
	if opt.Clock == nil {
		opt.Clock = RealClock{}
	}
	plan, err := NewPlan(job, hdr, opt.GroupNNZ, opt.ColBlocks)
	if err != nil {
		return factor.FitResult{}, err
	}
	s := &seq{cl: cl, store: store, model: model, job: job, opt: opt, log: opt.Logger, clock: opt.Clock, plan: plan,
		sums: plan.Sums(), prec: hdr.Precision, alpha: opt.Alpha, history: map[int]passRecord{}, ever: map[string]bool{},
		cost: map[string]float64{}, lastLL: nan, status: "running", vrand: newVerifyRand(opt.VerifySeed), verified: map[string]int{}}
	if s.alpha == 0 {
		s.alpha = 1
	}
	s.cols = make([][]proto.ColBlock, len(plan.Cols))
	for kb := range plan.Cols {
		s.cols[kb] = slices.Clone(plan.Cols[kb])
	}
	start, err := s.begin(ctx, hdr)
	if err != nil {
		return factor.FitResult{}, err
	}
	defer s.end()
	var last time.Time
	var lastBytes int64
	hooks := factor.LoopHooks{
		Start:       start,
		Accumulator: factor.NewScalarAccumulator(hdr.M, hdr.U, hdr.Tie),
		Commit:      s.commit,
		Rounds:      true, // the owners round a float32 model's rows (Request.Precision)
		Sums:        &s.sums,
		Committed: func(ctx context.Context, st factor.IterStats, _ factor.Status, _ *factor.LoopState) error {
			if opt.Report != nil {
				b := cl.Bytes()
				now := s.clock.Now()
				if last.IsZero() {
					last = now.Add(-st.IterTime)
				}
				shards := map[string]int{}
				for _, id := range s.winner {
					shards[id]++
				}
				opt.Report(Report{Iteration: st.Iteration, Wall: now.Sub(last), Bytes: b - lastBytes, Workers: len(s.workers), Epoch: s.epoch,
					Rollbacks: s.rollbacks, Rebalances: s.rebalances, Backups: s.backups, Shards: shards, Quarantined: len(cl.Quarantined()),
					Verifications: s.verifications, Rogues: s.rogues})
				last, lastBytes = now, b
			}
			if opt.Committed != nil {
				return opt.Committed(ctx, st.Iteration)
			}
			return nil
		},
	}
	lastBytes = cl.Bytes()
	res, err := factor.Loop(ctx, hdr, nil, s, factor.FitOptions{Alpha: opt.Alpha, Converger: opt.Converger, Progress: opt.Progress, GroupNNZ: opt.GroupNNZ}, hooks)
	if err != nil {
		return res, err
	}
	if err := s.finish(ctx, hdr.LogLik); err != nil {
		return res, err
	}
	if opt.Evaluate {
		if err := s.evaluate(ctx, hdr); err != nil {
			return res, err
		}
	}
	s.status = res.Status.String()
	return res, s.saveState(ctx)
}

// begin starts the job's record: from its last checkpoint (Resume, when
// the job has one; it returns the first iteration to run), or afresh with
// the initial model stored as checkpoint 0.
func (s *seq) begin(ctx context.Context, hdr *factor.Model) (int, error) {
	s.epoch = 1
	s.iter0 = hdr.Iteration
	s.init = Checkpoint{LogLik: hdr.LogLik, ModelIteration: hdr.Iteration}
	if s.opt.Resume {
		old, err := s.store.Record(ctx)
		if err != nil {
			return 0, err
		}
		if old != nil {
			ck := old.Checkpoint
			if len(ck.KCRC) != len(s.cols) || len(ck.DCRC) != len(s.plan.Groups) || (len(ck.KCRC) > 0 && len(ck.KCRC[0]) != len(s.cols[0])) {
				kc := 0
				if len(ck.KCRC) > 0 {
					kc = len(ck.KCRC[0])
				}
				return 0, fmt.Errorf("owners: resume job %s: its checkpoint has %d K blocks × %d column blocks and %d row groups, this run %d × %d and %d (--col-blocks, --col-cells?)",
					s.plan.Job, len(ck.KCRC), kc, len(ck.DCRC), len(s.cols), len(s.cols[0]), len(s.plan.Groups))
			}
			s.ck = ck
			if p := old.Previous; p != nil && len(p.KCRC) == len(ck.KCRC) && len(p.DCRC) == len(ck.DCRC) {
				pc := *p
				s.prev = &pc
			}
			s.version, s.epoch = ck.Version, old.Lease.Epoch+1
			s.iter0 = ck.ModelIteration - ck.Version
			hdr.Iteration, hdr.LogLik = ck.ModelIteration, ck.LogLik
			s.log.Info("owners: resuming from the last checkpoint", "job", s.plan.Job, "version", ck.Version, "epoch", s.epoch)
			// Again: a job of an earlier release kept them in its record.
			if err := s.putCRCs(ctx); err != nil {
				return 0, err
			}
			return ck.Version + 1, s.beginRecord(ctx)
		}
		s.log.Warn("owners: --resume: the job has no checkpoint of the owners exchange; starting afresh", "job", s.plan.Job)
	}
	kcrc, dcrc, err := s.model.Initial(ctx, s.plan)
	if err != nil {
		return 0, err
	}
	if len(kcrc) != len(s.cols) || len(dcrc) != len(s.plan.Groups) {
		return 0, fmt.Errorf("owners: the initial model has %d K blocks and %d row groups, the plan %d and %d", len(kcrc), len(dcrc), len(s.cols), len(s.plan.Groups))
	}
	for kb := range kcrc {
		if len(kcrc[kb]) != len(s.cols[kb]) {
			return 0, fmt.Errorf("owners: the initial model has %d column blocks of K block %d, the plan %d", len(kcrc[kb]), kb, len(s.cols[kb]))
		}
	}
	s.ck = Checkpoint{Version: 0, KCRC: kcrc, DCRC: dcrc, LogLik: hdr.LogLik, ModelIteration: hdr.Iteration}
	if err := s.putCRCs(ctx); err != nil {
		return 0, err
	}
	return 1, s.beginRecord(ctx)
}

// beginRecord takes the job over with its first record of this run.
func (s *seq) beginRecord(ctx context.Context) error {
	s.lease = proto.Lease{Epoch: s.epoch}
	r := s.record()
	if err := s.store.Begin(ctx, r); err != nil {
		return err
	}
	s.wlease, s.wtoken, s.last = r.Lease, "", r
	return nil
}

// record is the job's record now: the commit record of the current
// version, the last checkpoint, and the lease of the epoch placed last.
func (s *seq) record() *Record {
	ck := s.ck
	ck.ModelIteration = s.iter0 + ck.Version
	r := &Record{Status: s.status, Version: s.version, ModelIteration: s.iter0 + s.version, LogLik: s.lastLL, SumX: s.sums.Total,
		Lease: s.lease, Checkpoint: ck, CRCObject: proto.CRCObject(s.plan.Job, ck.Version), ColBlocks: len(s.cols[0]),
		Digests: s.digests, Y: s.lastY}
	if s.prev != nil {
		p := *s.prev
		r.Previous = &p
	}
	return r
}

// saveState writes the job's record, compare-and-set on this run's last
// write: a run that another one replaced fails here, for good.
func (s *seq) saveState(ctx context.Context) error {
	r := s.record()
	if err := s.store.Save(ctx, r); err != nil {
		if errors.Is(err, ErrLeaseLost) {
			s.leaseLost = true
			return Fatal(fmt.Errorf("owners: job %s: %w", s.plan.Job, err))
		}
		// The store may be restarting: the step is rolled back and tried
		// again.
		return fmt.Errorf("owners: job %s: write its record: %w", s.plan.Job, err)
	}
	s.wlease, s.last = r.Lease, r
	if r.Lease.Epoch == s.tokenEpoch {
		s.wtoken = s.token
	}
	return nil
}

// putCRCs stores the last checkpoint's CRC lists as their object: the
// commit record, written every iteration, then names it instead of
// carrying one CRC per column block and row group.
func (s *seq) putCRCs(ctx context.Context) error {
	data, err := json.Marshal(proto.CRCLists{KCRC: s.ck.KCRC, DCRC: s.ck.DCRC})
	if err != nil {
		return fmt.Errorf("owners: %w", err)
	}
	name := proto.CRCObject(s.plan.Job, s.ck.Version)
	if err := s.store.Put(ctx, name, data); err != nil {
		return fmt.Errorf("owners: store %s: %w", name, err)
	}
	return nil
}

func (s *seq) request(op string, iter int) *proto.Request {
	return &proto.Request{Op: op, Job: s.plan.Job, Epoch: s.epoch, Fence: s.token, JobsBucket: s.job.JobsBucket, Iteration: iter,
		Bucket: s.job.Bucket, N: s.plan.N, M: s.plan.M, U: s.plan.U, Tie: s.plan.Tie.String(), GroupNNZ: s.opt.GroupNNZ, Alpha: s.alpha,
		Precision: precisionName(s.prec), Deadline: s.clock.Now().Add(s.opt.TaskTimeout).UnixNano()}
}

// precisionName is p's name on the wire: "" for float64 (what workers
// of earlier versions assume).
func precisionName(p factor.Precision) string {
	if p == factor.Float64 {
		return ""
	}
	return p.String()
}

// ask sends one request to worker id and waits for its answer (at most
// TaskTimeout). A worker that answers the census but whose owners
// subject nobody serves is quarantined (its work goes elsewhere after the
// rollback), an unreadable answer counts against it.
func (s *seq) ask(ctx context.Context, id string, r *proto.Request) (*proto.Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opt.TaskTimeout)
	defer cancel()
	rep, err := s.cl.Ask(ctx, id, r)
	switch {
	case errors.Is(err, ErrUnreachable):
		s.cl.Quarantine(id, err)
	case errors.Is(err, ErrBadReply):
		s.cl.Strike(id, err)
	case err == nil && rep.Error != "":
		err = replyError(rep)
	}
	if err != nil {
		return nil, &WorkerError{Worker: id, Err: fmt.Errorf("%s of iteration %d: %w", r.Op, r.Iteration, err)}
	}
	return rep, nil
}

// replyError is the error of a reply that failed: a full or disabled
// store ends the fit (retrying cannot help: the worker's error says which
// store and what to do), a corrupt object is a *CorruptError.
func replyError(rep *proto.Reply) error {
	err := errors.New(rep.Error)
	switch rep.Fault {
	case proto.FaultStoreFull, proto.FaultStoreDisabled:
		return Fatal(err)
	case proto.FaultStoreStalled:
		return Stalled(err)
	case proto.FaultCorrupt:
		return &CorruptError{Object: rep.Object, Err: err}
	}
	return err
}

// each asks every worker of ids (in parallel) the request mk makes for it
// and hands the replies to got (from one goroutine at a time), under the
// placement's guard.
func (s *seq) each(ctx context.Context, ids []string, mk func(id string) *proto.Request, got func(id string, rep *proto.Reply) error) error {
	return s.guard(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var first error
		for _, id := range ids {
			r := mk(id)
			if r == nil {
				continue
			}
			wg.Go(func() {
				rep, err := s.ask(ctx, id, r)
				mu.Lock()
				defer mu.Unlock()
				if err == nil && got != nil {
					err = got(id, rep)
				}
				if err != nil && first == nil {
					first = err
					cancel()
				}
			})
		}
		wg.Wait()
		return first
	})
}

// guard runs f under the cluster's guard of the placed workers.
func (s *seq) guard(ctx context.Context, f func(ctx context.Context) error) error {
	return s.cl.Guard(ctx, s.workers, f)
}

// pass computes iteration iter on the workers and folds Y and the
// scalars into acc in the canonical order.
func (s *seq) pass(ctx context.Context, iter int, withLL bool, acc *factor.Accumulator) error {
	if err := s.guard(ctx, func(ctx context.Context) error { return s.tasks(ctx, iter, withLL) }); err != nil {
		return err
	}
	s.red.Reset(acc, s.plan.Reduce)
	for !s.red.Done() {
		k := s.red.Next()
		rep := s.results[k]
		ll := nan
		if rep.HasLogLik {
			ll = rep.LogLik
		}
		if err := s.red.MergeChecked(&factor.Partial{Action: s.plan.Shards[k].Action, Y: rep.Y, SumX: rep.SumX, LogLik: ll, NNZ: rep.NNZ}); err != nil {
			return Fatal(fmt.Errorf("owners: shard %d: %w", k, err))
		}
	}
	return nil
}

// task is the task of shard k in iteration iter.
func (s *seq) task(iter, k int, withLL bool) *proto.Request {
	in := s.plan.Shards[k]
	r := s.request(proto.OpTask, iter)
	r.Shard, r.ShardObject, r.ShardChecksum, r.WithLogLik = k, proto.ShardObject(in.Checksum), in.Checksum, withLL
	r.Nonce = proto.NewNonce()
	return r
}

// Step is factor.Stepper: the pass of iteration iter, after a placement
// and a replay where a rollback asks for them.
func (s *seq) Step(ctx context.Context, iter int, _ *factor.Model, acc *factor.Accumulator, withLL bool) error {
	for {
		err := s.ready(ctx, iter)
		if err == nil {
			if err = s.pass(ctx, iter, withLL, acc); err == nil {
				return nil
			}
		}
		if err = s.rollback(ctx, err); err != nil {
			return err
		}
	}
}

// commit is the loop's commit: the owners fold and commit their blocks.
func (s *seq) commit(ctx context.Context, iter int, hdr *factor.Model, acc *factor.Accumulator, _, dataTerm float64) error {
	rec := passRecord{withLL: !math.IsNaN(acc.LogLik), ll: acc.LogLik, sx: acc.SumX, nnz: acc.NNZ}
	for _, y := range acc.Y {
		rec.y = append(rec.y, slices.Clone(y))
	}
	for {
		err := s.commitOwners(ctx, iter, acc.Y, acc.LogLik)
		if err == nil && s.ck.Version != iter {
			// The commit record (a checkpoint wrote it already).
			err = s.saveState(ctx)
		}
		if err == nil {
			s.history[iter] = rec
			s.streak, s.stalls = 0, 0
			acc.RecordPass(hdr, dataTerm)
			s.store.Announce(s.last)
			if s.ck.Version == iter {
				s.rebalance()
			}
			return nil
		}
		// Roll back, replay and recompute this pass, then commit again.
		for err != nil {
			if err = s.rollback(ctx, err); err != nil {
				return err
			}
			if err = s.ready(ctx, iter); err == nil {
				err = s.replayPass(ctx, iter, rec)
			}
		}
	}
}

// replayPass recomputes pass iter and checks it against rec.
func (s *seq) replayPass(ctx context.Context, iter int, rec passRecord) error {
	acc := factor.NewScalarAccumulator(s.plan.M, s.plan.U, s.plan.Tie)
	if err := s.pass(ctx, iter, rec.withLL, acc); err != nil {
		return err
	}
	same := acc.SumX == rec.sx && acc.NNZ == rec.nnz && (acc.LogLik == rec.ll || (math.IsNaN(acc.LogLik) && math.IsNaN(rec.ll)))
	for b := range acc.Y {
		for l := range acc.Y[b] {
			same = same && acc.Y[b][l] == rec.y[b][l]
		}
	}
	if !same {
		return Fatal(fmt.Errorf("owners: the replay of iteration %d differs from its first pass (loglik %v vs %v): the workers do not compute deterministically", iter, acc.LogLik, rec.ll))
	}
	return nil
}

// ready places the job and replays up to version iter−1 when a rollback
// asked for it.
func (s *seq) ready(ctx context.Context, iter int) error {
	if s.setup {
		return nil
	}
	if err := s.place(ctx); err != nil {
		return err
	}
	s.setup = true
	for v := s.version + 1; v < iter; v++ {
		rec, ok := s.history[v]
		if ok {
			if err := s.replayPass(ctx, v, rec); err != nil {
				return err
			}
		} else {
			// No record of the pass (this run resumed after it, or fell
			// back before its records): the replay is the record, with
			// nothing to check it against.
			acc := factor.NewScalarAccumulator(s.plan.M, s.plan.U, s.plan.Tie)
			if err := s.pass(ctx, v, true, acc); err != nil {
				return err
			}
			rec = passRecord{withLL: true, y: acc.Y, ll: acc.LogLik, sx: acc.SumX, nnz: acc.NNZ}
			s.history[v] = rec
		}
		if err := s.commitOwners(ctx, v, rec.y, rec.ll); err != nil {
			return err
		}
	}
	return nil
}

// rollback handles a failed step: the job goes back to its last
// checkpoint on a new placement (the next ready), or the fit ends.
func (s *seq) rollback(ctx context.Context, err error) error {
	if ctx.Err() != nil || IsFatal(err) {
		return err
	}
	s.rollbacks++
	if s.rollbacks > s.opt.MaxRollbacks {
		return fmt.Errorf("owners: giving up after %d rollbacks: %w", s.opt.MaxRollbacks, err)
	}
	if IsStalled(err) {
		if s.stalls++; s.stalls >= 2 {
			return Fatal(fmt.Errorf("owners: job %s: the store stalled twice in a row: %w", s.plan.Job, err))
		}
	}
	var ce *CorruptError
	if errors.As(err, &ce) {
		if err := s.corrupt(ctx, ce); err != nil {
			return err
		}
	}
	var re *RogueError
	if errors.As(err, &re) {
		if err := s.rewind(ctx, re); err != nil {
			return err
		}
	}
	s.streak++
	wait := Backoff(s.streak)
	s.log.Warn("owners: rolling back to the last checkpoint", "job", s.plan.Job, "checkpoint", s.ck.Version,
		"version", s.version, "epoch", s.epoch+1, "after", wait, "error", err)
	s.epoch++
	s.setup = false
	if wait > 0 {
		return s.clock.Sleep(ctx, wait)
	}
	return nil
}

// Backoff is how long the rollback that makes streak rollbacks since the
// last committed iteration waits before it places the job again: none for
// the first (a lost worker is replaced at once), then 250 ms doubling up
// to 4 s, so that a store or server that is restarting (a transient
// fault) has time to come back within the rollbacks allowed (8 by
// default: 15.75 s in all). Permanent faults never get here: they end the
// fit.
func Backoff(streak int) time.Duration {
	if streak <= 1 {
		return 0
	}
	return min(250*time.Millisecond<<min(streak-2, 8), 4*time.Second)
}

// corrupt acts on an object that failed its check: an object of the last
// checkpoint makes the run fall back to the one before (fallBack); a
// shard object is stored again by the store (Repair), or the fit ends
// with the error and the way out.
func (s *seq) corrupt(ctx context.Context, ce *CorruptError) error {
	if slices.Contains(s.checkpointObjects(s.ck.Version), ce.Object) {
		return s.fallBack(ctx, ce)
	}
	for _, in := range s.plan.Shards {
		if ce.Object != proto.ShardObject(in.Checksum) {
			continue
		}
		err := s.store.Repair(ctx, ce.Object)
		if errors.Is(err, ErrNoRepair) {
			return Fatal(fmt.Errorf("owners: job %s: shard object %s is corrupt (%w) and this coordinator does not hold its data: "+
				"delete it ('nats obj rm BUCKET %s') and build the shards again (emsf data ingest, or fit from the input file)", s.plan.Job, ce.Object, ce, ce.Object))
		}
		if err != nil {
			return fmt.Errorf("owners: job %s: store the corrupt shard object %s again: %w", s.plan.Job, ce.Object, err)
		}
		s.log.Warn("owners: a shard object was corrupt; stored it again from the data", "job", s.plan.Job, "object", ce.Object, "error", ce.Err)
		return nil
	}
	return nil
}

// fallBack makes the checkpoint before the last one the last one, after
// an object of the last failed its check: the next placement loads it and
// replays the iterations since (their records are kept from it on). With
// none before, the run goes back to the start: the Model stores the
// initial model again as checkpoint 0 (it is drawn from the seed or held:
// the same bits), and the iterations are replayed from there.
func (s *seq) fallBack(ctx context.Context, ce *CorruptError) error {
	bad := s.ck.Version
	if s.prev != nil {
		s.log.Warn("owners: the last checkpoint is corrupt; falling back to the one before", "job", s.plan.Job, "checkpoint", bad,
			"to", s.prev.Version, "object", ce.Object, "error", ce.Err)
		s.ck, s.prev = *s.prev, nil
	} else {
		s.log.Warn("owners: the only checkpoint is corrupt; going back to the start of the fit", "job", s.plan.Job, "checkpoint", bad,
			"object", ce.Object, "error", ce.Err)
		if err := s.restart(ctx); err != nil {
			return err
		}
	}
	if bad != s.ck.Version {
		s.stale = append(s.stale, bad)
	}
	return nil
}

// restart makes the start the last checkpoint: the Model stores the
// initial model again as checkpoint 0 (drawn from the seed or held: the
// same bits), with no checkpoint before it.
func (s *seq) restart(ctx context.Context) error {
	kcrc, dcrc, err := s.model.Initial(ctx, s.plan)
	if err != nil {
		return err
	}
	s.ck, s.prev = Checkpoint{Version: 0, KCRC: kcrc, DCRC: dcrc, LogLik: s.init.LogLik, ModelIteration: s.init.ModelIteration}, nil
	return s.putCRCs(ctx)
}

// place takes a census and gives every worker its blocks and shards of
// the last checkpoint (a new epoch), after writing the epoch's lease.
func (s *seq) place(ctx context.Context) error {
	want := 1
	if !s.placed {
		want = max(1, s.opt.MinWorkers)
	}
	ids, err := s.cl.Census(ctx, want)
	if err != nil {
		return err
	}
	if q := s.cl.Quarantined(); len(q) > 0 {
		ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return slices.Contains(q, id) })
		if len(ids) == 0 {
			return Fatal(fmt.Errorf("owners: every worker that answers is quarantined (%s)", strings.Join(q, ", ")))
		}
	}
	s.placed = true
	s.workers = ids
	for _, id := range ids {
		s.ever[id] = true
	}
	pl := Assign(s.plan, ids, s.cost, s.job.Holders)
	s.shardW, s.gowner = pl.ShardW, pl.GOwner
	for kb := range s.cols {
		for c := range s.cols[kb] {
			s.cols[kb][c].Owner, s.cols[kb][c].CRC = pl.ColOwner[kb][c], s.ck.KCRC[kb][c]
		}
	}
	blocks, _ := owned(s.cols, nil)
	layout := make([]proto.RowGroup, len(s.plan.Groups))
	for g, dg := range s.plan.Groups {
		layout[g] = proto.RowGroup{G: g, Action: dg.DBlock, Cells: dg.Cells, Lo: dg.Lo, Hi: dg.Hi, Owner: s.gowner[g], CRC: s.ck.DCRC[g], RowsCRC: dg.RowsCRC}
	}
	shapes := make([]proto.KShape, len(s.plan.KShards))
	for kb, ks := range s.plan.KShards {
		shapes[kb] = proto.KShape{KBlock: kb, Shards: ks, NNZ: make([]int, len(ks)), Workers: make([]string, len(ks))}
		for q, k := range ks {
			shapes[kb].NNZ[q], shapes[kb].Workers[q] = s.plan.Shards[k].NNZ, s.shardW[k]
		}
	}
	s.version = s.ck.Version
	s.dcrc = slices.Clone(s.ck.DCRC)
	if s.tokenEpoch != s.epoch {
		s.token, s.tokenEpoch = proto.NewToken(), s.epoch
	}
	s.lease = proto.Lease{Epoch: s.epoch, Fence: proto.FenceOf(s.token)}
	if err := s.saveState(ctx); err != nil {
		return err
	}
	// The record no longer names the corrupt checkpoints.
	for _, v := range s.stale {
		s.dropCheckpoint(ctx, v)
	}
	s.stale = nil
	return s.each(ctx, ids, func(id string) *proto.Request {
		r := s.request(proto.OpLoad, s.version)
		r.Blocks = blocks[id]
		r.Layout = s.cols
		r.Shapes = shapes
		r.Groups = layout
		return r
	}, nil)
}

// rebalance re-places the job for stragglers when it pays (Rebalance).
func (s *seq) rebalance() {
	ok, was, will := Rebalance(s.plan, s.workers, s.cost, s.busy, s.nnz, s.job.Holders)
	if !ok {
		return
	}
	s.rebalances++
	s.log.Info("owners: re-placing for a straggler", "job", s.plan.Job, "version", s.version,
		"pass", time.Duration(was*float64(time.Second)).Round(time.Millisecond), "predicted", time.Duration(will*float64(time.Second)).Round(time.Millisecond))
	s.epoch++
	s.setup = false
}

// commitOwners has every owner fold and commit its column blocks and row
// groups to version iter with the global Y, and records their digests
// (and in a checkpoint their CRCs).
func (s *seq) commitOwners(ctx context.Context, iter int, y [][]float64, ll float64) error {
	save := iter%s.opt.CheckpointEvery == 0
	blocks, groups := owned(s.cols, s.gowner)
	// Shards whose slices another worker than the placed one serves (it
	// won a backup copy).
	var moved []proto.ShardWorker
	for k, id := range s.winner {
		if id != "" && id != s.shardW[k] {
			moved = append(moved, proto.ShardWorker{Shard: k, Worker: id})
		}
	}
	crcs := map[[2]int]string{}
	dcrcs := map[int]string{}
	digests := map[string]string{}
	err := s.each(ctx, s.workers, func(id string) *proto.Request {
		if len(blocks[id]) == 0 && len(groups[id]) == 0 {
			return nil
		}
		r := s.request(proto.OpCommit, iter)
		r.Save = save
		r.Moved = moved
		seen := map[int]bool{}
		for _, cb := range blocks[id] {
			if !seen[cb.KBlock] {
				seen[cb.KBlock] = true
				r.Y = append(r.Y, proto.KBlockY{KBlock: cb.KBlock, Y: y[cb.KBlock]})
			}
		}
		return r
	}, func(id string, rep *proto.Reply) error {
		if err := s.checkCommit(id, rep, save, len(blocks[id]), len(groups[id])); err != nil {
			return err
		}
		digests[id] = rep.Digest
		for _, b := range rep.Blocks {
			crcs[[2]int{b.KBlock, b.C}] = b.CRC
		}
		for _, g := range rep.Groups {
			dcrcs[g.G] = g.CRC
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.digests = digests
	s.lastY, s.lastLL = y, ll
	s.version = iter
	if save {
		for kb := range s.cols {
			for c := range s.cols[kb] {
				s.cols[kb][c].CRC = crcs[[2]int{kb, c}]
			}
		}
		for g := range s.dcrc {
			s.dcrc[g] = dcrcs[g]
		}
		return s.checkpointed(ctx, ll)
	}
	return nil
}

// checkpointed records the current version (made by a pass of loglik ll)
// as the last checkpoint, in the job's record too.
//
// Until the record names it, the checkpoint before stays the last one: a
// failed write rolls back to it and replays (the iterations since are
// still recorded).
func (s *seq) checkpointed(ctx context.Context, ll float64) error {
	was := s.ck
	s.ck = Checkpoint{Version: s.version, KCRC: make([][]string, len(s.cols)), DCRC: slices.Clone(s.dcrc), LogLik: ll, ModelIteration: s.iter0 + s.version}
	for kb, cbs := range s.cols {
		for _, cb := range cbs {
			s.ck.KCRC[kb] = append(s.ck.KCRC[kb], cb.CRC)
		}
	}
	wasPrev := s.prev
	s.prev = &was
	err := s.putCRCs(ctx)
	if err == nil {
		err = s.saveState(ctx)
	}
	if err != nil {
		s.ck, s.prev = was, wasPrev
		return err
	}
	// The records of the passes after the checkpoint before are kept: a
	// fall back to it replays them.
	for v := range s.history {
		if v <= was.Version {
			delete(s.history, v)
		}
	}
	if wasPrev != nil {
		s.dropCheckpoint(ctx, wasPrev.Version)
	}
	return nil
}

// dropCheckpoint deletes the objects of checkpoint v (its column blocks,
// row groups and CRC lists) once the record names two later ones (or
// none: v was found corrupt): checkpoints replace each other, so that the
// store holds the shards once and two checkpoints (n·m·8 bytes per D and
// K block each), not one per checkpoint written. Two, not one: the
// checkpoint before the last is what a run falls back to when an object
// of the last fails its check (bit rot, an object overwritten), instead
// of retrying a load that cannot succeed; it goes only once a later
// checkpoint is recorded, one whose objects the owners wrote and whose
// CRCs they reported. Best effort: an object left behind (a delete that
// failed, a coordinator that died between the record and here) costs
// space, never a value, and its name says what it is.
func (s *seq) dropCheckpoint(ctx context.Context, v int) {
	if v == s.ck.Version || (s.prev != nil && v == s.prev.Version) {
		return
	}
	for _, name := range s.checkpointObjects(v) {
		if err := s.store.Delete(ctx, name); err != nil {
			s.log.Warn("owners: an old checkpoint's object was not deleted", "job", s.plan.Job, "object", name, "error", err)
		}
	}
}

// checkpointObjects are the names of checkpoint v's objects: its CRC
// lists, column blocks and row groups.
func (s *seq) checkpointObjects(v int) []string {
	names := []string{proto.CRCObject(s.plan.Job, v)}
	for kb, cbs := range s.cols {
		for _, cb := range cbs {
			names = append(names, proto.KObject(s.plan.Job, v, kb, cb.C))
		}
	}
	for g := range s.plan.Groups {
		names = append(names, proto.DObject(s.plan.Job, v, g))
	}
	return names
}

// finish makes the last version a checkpoint where it is not one (its
// pass's loglik ll) and takes the model out there.
func (s *seq) finish(ctx context.Context, ll float64) error {
	last := s.version
	for {
		var err error
		if s.ck.Version != last {
			// (A fall back's replay may store it again on the way.)
			if err = s.ready(ctx, last+1); err == nil && s.ck.Version != last {
				err = s.saveAll(ctx, ll)
			}
		}
		if err == nil {
			// A corrupt object of the checkpoint falls back and replays;
			// any other failure to take the model out ends the fit, as it
			// always did (a store with no room for the model's parts).
			var ce *CorruptError
			if err = s.model.Final(ctx, s.plan, s.ck); err == nil || !errors.As(err, &ce) {
				return err
			}
		}
		if err = s.rollback(ctx, err); err != nil {
			return err
		}
	}
}

// evaluate computes the log-likelihood of the last version (a pass that
// commits nothing) into hdr, as factor.Evaluate does.
func (s *seq) evaluate(ctx context.Context, hdr *factor.Model) error {
	acc := factor.NewScalarAccumulator(s.plan.M, s.plan.U, s.plan.Tie)
	for iter := s.version + 1; ; {
		err := s.ready(ctx, iter)
		if err == nil {
			if err = s.pass(ctx, iter, true, acc); err == nil {
				break
			}
		}
		if err = s.rollback(ctx, err); err != nil {
			return err
		}
	}
	hdr.LogLik, hdr.WKL = acc.LogLik, nan
	if acc.SumX > 0 {
		hdr.WKL = (s.sums.DataTerm - acc.LogLik) / acc.SumX
	}
	return nil
}

// saveAll has the owners store their column blocks and row groups at
// the current version, and makes it the last checkpoint.
func (s *seq) saveAll(ctx context.Context, ll float64) error {
	blocks, groups := owned(s.cols, s.gowner)
	err := s.each(ctx, s.workers, func(id string) *proto.Request {
		if len(blocks[id]) == 0 && len(groups[id]) == 0 {
			return nil
		}
		r := s.request(proto.OpSave, s.version)
		r.Blocks = blocks[id]
		for _, g := range groups[id] {
			r.Groups = append(r.Groups, proto.RowGroup{G: g})
		}
		return r
	}, func(id string, rep *proto.Reply) error {
		if err := s.checkSave(id, rep, len(blocks[id]), len(groups[id])); err != nil {
			return err
		}
		for _, b := range rep.Blocks {
			s.cols[b.KBlock][b.C].CRC = b.CRC
		}
		for _, g := range rep.Groups {
			s.dcrc[g.G] = g.CRC
		}
		return nil
	})
	if err != nil {
		return err
	}
	return s.checkpointed(ctx, ll)
}

// end tells every worker placed in this run to forget the job (best
// effort), under the lease of the last record written: unless another
// coordinator took the job over, in which case they are its workers now
// and are left alone (they would refuse anyway: the record names the
// other run's epoch).
func (s *seq) end() {
	if s.leaseLost || s.wtoken == "" {
		if s.leaseLost {
			s.log.Info("owners: the job was taken over; its workers are left to the coordinator that holds it", "job", s.plan.Job)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ids := make([]string, 0, len(s.ever))
	for id := range s.ever {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var wg sync.WaitGroup
	for _, id := range ids {
		r := s.request(proto.OpEnd, s.version)
		r.Epoch, r.Fence = s.wlease.Epoch, s.wtoken
		wg.Go(func() { _, _ = s.cl.Ask(ctx, id, r) })
	}
	wg.Wait()
}
