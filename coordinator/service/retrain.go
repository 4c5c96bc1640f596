package service

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/wire"
)

// fitJob is a retrain in progress: its input, taken from the service's
// state when it started, and the requests waiting for it.
type fitJob struct {
	reason string
	start  time.Time
	reqs   []micro.Request
	// The snapshot: the latest version's model (nil before the first; the
	// fit only reads it), the counts (a frozen view of the table: blocks
	// alias it, and the pending counts are read from it) and the version
	// being made.
	base   *factor.Model
	counts *shard.Frozen
	blocks []*factor.Block
	v      *Version
	// Online-em mode: the counts the latest version has seen (a copy) and
	// its unit transitions.
	prior []*factor.Block
	units int64
}

// fitResult is what a fit goroutine hands back to Run.
type fitResult struct {
	job *fitJob
	md  *factor.Model
	err error
}

// retrain asks for a new version from the counts so far (see the package
// doc); req, if not nil, gets the reply. With no transition since the
// latest version the reply is that version (New false). The fit runs on a
// goroutine of its own while ingestion goes on; a request that arrives
// during it is answered when it ends (with a further version if data
// arrived meanwhile), and a policy that fires during it is checked again
// then.
func (s *Service) retrain(ctx context.Context, reason string, req micro.Request) {
	if ctx.Err() != nil {
		if req != nil {
			s.refuseStopping(req)
		}
		return
	}
	if s.job != nil {
		if req != nil {
			s.waiting = append(s.waiting, req)
		}
		return
	}
	all, pending := s.table.Added()
	if all == 0 {
		s.reply(nil, fmt.Errorf("service: %s: no transitions yet: publish some to %s first", s.cfg.Name, TransitionsSubject(s.cfg.Prefix, s.cfg.Name)), reason, req)
		return
	}
	if pending == 0 && s.latest != nil {
		v := *s.latest
		v.New = false
		s.reply(&v, nil, reason, req)
		return
	}
	n, u := s.dims()
	counts := s.table.Freeze(u)
	job := &fitJob{reason: reason, start: time.Now(), base: s.model, counts: counts, blocks: counts.Blocks(),
		v: &Version{Name: s.cfg.Name, Version: s.version() + 1, Mode: s.cfg.Mode, Transitions: all, Count: s.table.Sum(),
			StreamSeq: s.seq, N: n, M: s.cfg.Order, U: u, New: true, Reason: reason}}
	if req != nil {
		job.reqs = append(job.reqs, req)
	}
	if s.cfg.Mode == ModeOnlineEM {
		job.prior = counts.Prior()
		if s.latest != nil {
			job.units = s.latest.Units
		}
	}
	s.job = job
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if s.fitHook != nil {
			s.fitHook()
		}
		md, err := s.fit(ctx, job)
		s.done <- fitResult{job: job, md: md, err: err}
	}()
}

// finish ends the retrain in progress: it commits the new version (or
// keeps the counts pending when the fit failed), answers the requests,
// and starts the next retrain when requests or the policy want one.
func (s *Service) finish(ctx context.Context, r fitResult) {
	job := r.job
	s.job = nil
	v, err := job.v, r.err
	switch {
	case err != nil && ctx.Err() != nil:
		err = errStopping // the fit saw the stop
	case err != nil:
		err = fmt.Errorf("service: %s: retrain: %w", s.cfg.Name, err)
	default:
		v.Created = time.Now().UTC()
		v.Seconds = time.Since(job.start).Seconds()
		err = s.commitVersion(ctx, v, r.md)
		switch {
		case err == nil:
			s.m.retrain.Observe(v.Seconds)
			fields := []any{"version", v.Version, "reason", job.reason, "loglik", v.LogLik, "transitions", v.Transitions,
				"seq", v.StreamSeq, "n", v.N, "u", v.U, "iterations", v.Iterations, "seconds", v.Seconds}
			if v.Status != "" {
				fields = append(fields, "status", v.Status)
			}
			if v.Rule != "" {
				fields = append(fields, "best_iteration", v.BestIteration, "heldout", v.HeldOut, "rule", v.Rule)
			}
			s.log.Info("new version", fields...)
		case ctx.Err() != nil && s.latest != v:
			// Stopping while the model was stored: the version is not
			// made, and the requests are told so (not a failure).
			s.log.Info("stopping: version not made", "version", v.Version, "error", err)
			err = errStopping
		}
	}
	if s.table.Frozen() {
		// Not committed: every count stays pending.
		s.table.Thaw(false)
	}
	// The fit's working memory (its model copies, factor's index of the
	// blocks, cached in them: about as much as the counts) is garbage once
	// the job lets go of its blocks: give it back at once rather than at
	// the runtime's pace, so that what the process holds between retrains
	// is the counts (the heap it scans is small, the counts being outside
	// it).
	job.counts, job.blocks, job.prior = nil, nil, nil
	debug.FreeOSMemory()
	if err != nil && err != errStopping {
		s.m.failures.Inc()
	}
	s.snapshot() // a status request after the reply sees the new version
	for _, req := range job.reqs {
		s.reply(v, err, job.reason, req)
	}
	if job.reqs == nil {
		s.reply(v, err, job.reason, nil)
	}
	waiting := s.waiting
	s.waiting = nil
	_, pending := s.table.Added()
	switch {
	case len(waiting) > 0 && (err != nil || pending == 0):
		// Nothing new since the snapshot (or the fit failed): they get
		// the same answer.
		for _, req := range waiting {
			s.reply(v, err, "request", req)
		}
	case len(waiting) > 0:
		s.retrain(ctx, "request", waiting[0])
		s.waiting = append(s.waiting, waiting[1:]...)
	default:
		s.policy(ctx, false)
	}
}

// errStopping is the outcome of a retrain that the service's stop cut
// short (refused with 503, not logged as a failure).
var errStopping = errors.New("emsf serve is stopping: the retrain was not made; ask again once it runs")

// refuseStopping answers a retrain request the stop leaves unanswered:
// 503, saying why.
func (s *Service) refuseStopping(req micro.Request) {
	_ = req.Error("503", fmt.Sprintf("service: %s: %v", s.cfg.Name, errStopping), nil)
}

// reply answers a retrain request, or logs the outcome of one nobody
// waits for.
func (s *Service) reply(v *Version, err error, reason string, req micro.Request) {
	if err == errStopping {
		if req != nil {
			s.refuseStopping(req)
		}
		return
	}
	if req == nil {
		if err != nil {
			s.log.Error("retrain", "reason", reason, "error", err)
		}
		return
	}
	if err != nil {
		_ = req.Error("500", err.Error(), nil)
		return
	}
	_ = req.RespondJSON(v)
}

// WarmSmoothing is the weight of the uniform distribution mixed into the
// latest version before it is warm-started (factor.Model.Smooth): EM
// cannot move an entry away from 0, and a next state the latest version
// never saw has a zero column of K, so without it a transition to such a
// state would make every later retrain fail.
const WarmSmoothing = 1e-9

// fit computes the model of job.v from the job's snapshot. It runs on its
// own goroutine: it reads only the job, s.cfg and s.log, and the
// executor (which only fits use).
func (s *Service) fit(ctx context.Context, job *fitJob) (*factor.Model, error) {
	v := job.v
	q := s.cfg.Quality
	train, val := job.blocks, []*factor.Block(nil)
	if s.cfg.Mode == ModeRefit && q.split() {
		train, val = s.splitCounts(job.blocks)
	}
	var md *factor.Model
	switch {
	case job.base != nil:
		var err error
		if md, err = job.base.Grow(v.N, v.U); err != nil {
			return nil, err
		}
		if err := md.Smooth(WarmSmoothing); err != nil {
			return nil, err
		}
	case q.Seeded:
		md = factor.NewSeeded(v.N, s.cfg.Order, v.U, s.cfg.Tie, train, s.cfg.Seed, s.cfg.Workers)
	default:
		md = factor.NewRandom(v.N, s.cfg.Order, v.U, s.cfg.Tie, s.cfg.Seed)
	}
	v.M = md.M
	switch s.cfg.Mode {
	case ModeRefit:
		shards, man := shard.Split(train, v.N, s.cfg.ShardNNZ)
		tol := s.cfg.Tol
		if tol == TolNever {
			tol = 0 // the Converger's "never"
		}
		opts := factor.FitOptions{Workers: s.cfg.Workers, Converger: factor.Converger{MaxIter: s.cfg.MaxIter, Tol: tol}, Accel: s.cfg.Accel}
		if q.Prior.Active() {
			opts.Prior = &q.Prior
		}
		var vs *factor.Validation
		if val != nil {
			var err error
			if vs, err = factor.NewValidation(v.N, v.U, s.cfg.Tie, train, val); err != nil {
				return nil, err
			}
			vs.NoCounts = s.ruleWithoutCounts(v, job.blocks)
			if q.Patience > 0 {
				opts.EarlyStop = vs.EarlyStop(q.Patience, q.MinGain, s.cfg.Workers)
			}
		}
		exec, err := s.executor(ctx)
		if err != nil {
			return nil, err
		}
		var res factor.FitResult
		if exec != nil {
			res, err = coordinator.Fit(ctx, exec, shards, man, md, coordinator.Options{
				Job:         fmt.Sprintf("serve-%s-%d", s.cfg.Name, v.Version),
				Params:      map[string]string{"m": strconv.Itoa(md.M), "tie": md.Tie.String(), "model": s.cfg.Name},
				Converger:   opts.Converger,
				Accel:       opts.Accel,
				EarlyStop:   opts.EarlyStop,
				Prior:       opts.Prior,
				TaskTimeout: s.cfg.WorkerTimeout,
				Verify:      s.cfg.Verify,
				MinWorkers:  1,
				WaitWorkers: 30 * time.Second,
				Checkpoint:  exec,
				Logger:      s.log.Named("cluster"),
			})
		} else {
			res, err = factor.Fit(ctx, md, shard.Blocks(shards), opts)
		}
		if err != nil {
			return nil, err
		}
		v.Iterations, v.Status, v.BestIteration = res.Iterations, res.Status.String(), res.BestIteration
		if res.Status.Early() {
			s.log.Warn("the refit stopped before converging: raise --iters", "version", v.Version, "status", v.Status,
				"iterations", v.Iterations, "tol", s.cfg.Tol)
		}
		if q != (Quality{}) {
			// A state without counts is predicted like the average state,
			// never by the row it started from (emsf fit's default).
			md.SetUnseenRows(train)
		}
		if vs != nil {
			score, rules := vs.Tune(md, s.cfg.Workers)
			v.HeldOut = score
			if q.Smooth != SmoothNone {
				var err error
				if md.Smoothing, err = factor.NewSmoothing(v.N, v.U, job.blocks, rules); err != nil {
					return nil, err
				}
				v.Rule = factor.RulesString(rules)
			}
		}
	case ModeIncremental:
		inc, err := factor.NewIncremental(md, factor.IncrementalOptions{EtaMax: s.cfg.EtaMax, Alpha: s.cfg.Alpha})
		if err != nil {
			return nil, err
		}
		if err := job.counts.Pending(inc.Add); err != nil {
			return nil, err
		}
		if err := inc.EndPass(); err != nil {
			return nil, err
		}
		md = inc.Model()
		v.Iterations = inc.Stats().Commits
	case ModeOnlineEM:
		var err error
		if md, err = onlineEM(ctx, md, s.cfg.OnlineEM, job, v); err != nil {
			return nil, err
		}
	}
	// The metrics of the new version on all counts: −Inf and +Inf when it
	// gives a counted transition probability 0 (an incremental commit
	// with α = 1 forgets what the new data does not show).
	ll, _, err := factor.LogLikelihood(md, job.blocks)
	var te *factor.TransitionError
	switch {
	case errors.As(err, &te):
		s.log.Warn("the new version gives a counted transition probability 0", "transition", te.Error())
		v.LogLik, v.WKL = math.Inf(-1), math.Inf(1)
	case err != nil:
		return nil, err
	default:
		wkl, err := factor.WKL(md, job.blocks)
		if err != nil {
			return nil, err
		}
		v.LogLik, v.WKL = ll, wkl
	}
	md.LogLik, md.WKL = v.LogLik, v.WKL
	return md, nil
}

// splitCounts is the refit's validation split of the counts
// (Quality.Validation, seeded by Seed: shard.SplitCounts). Counts too few
// to leave both parts some are not split: the version is then fitted on
// all of them, stops on the relative change and stores no rule (the log
// says so).
func (s *Service) splitCounts(blocks []*factor.Block) (train, val []*factor.Block) {
	train, val = shard.SplitCounts(blocks, s.cfg.Quality.Validation, s.cfg.Seed)
	if factor.NNZ(train) == 0 || factor.NNZ(val) == 0 {
		s.log.Warn("too few counts to hold some out: this version has no held-out stop and no rule",
			"validation", s.cfg.Quality.Validation, "nonzeros", factor.NNZ(blocks))
		return blocks, nil
	}
	return train, val
}

// ruleWithoutCounts reports whether version v stores the background rule
// (no counts): asked for (SmoothBackground), or the counts (24 bytes a
// nonzero, and q: 8 bytes a state and action) would take its model file
// beyond MaxModelBytes.
func (s *Service) ruleWithoutCounts(v *Version, blocks []*factor.Block) bool {
	if s.cfg.Quality.Smooth != SmoothAuto {
		return s.cfg.Quality.Smooth == SmoothBackground
	}
	bytes := factor.ModelBytes(v.N, s.cfg.Order, v.U, s.cfg.Tie) + 24*int64(factor.NNZ(blocks)) + 8*int64(v.N)*int64(v.U)
	if bytes > s.cfg.MaxModelBytes {
		s.log.Warn("the rule's counts would take the model beyond --max-model-bytes: this version stores the background rule (no counts)",
			"version", v.Version, "bytes", bytes, "max_model_bytes", s.cfg.MaxModelBytes)
		return true
	}
	return false
}

// onlineEM is the online-em retrain: online EM goes on from md (the
// latest version, grown and smoothed) at its unit transition job.units,
// with statistics re-derived from md and the counts it has seen
// (factor.ResumeOnlineEM), and takes the pending counts in the table's
// order, each count c as c unit transitions (O(c·m) time: it stops when
// ctx ends).
func onlineEM(ctx context.Context, md *factor.Model, opts factor.OnlineEMOptions, job *fitJob, v *Version) (*factor.Model, error) {
	o, err := factor.ResumeOnlineEM(md, opts, job.units, job.prior)
	if err != nil {
		return nil, err
	}
	err = job.counts.Pending(func(i, a, j int, c float64) error {
		// A pending count is an integer (ingestion refuses others in this
		// mode), given in parts of at most onlineEMChunk units.
		for ; c > 0; c -= onlineEMChunk {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := o.Add(i, a, j, min(c, onlineEMChunk)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	md = o.Model()
	st := o.Stats()
	v.Iterations, v.Units = int(st.MSteps), st.Units
	return md, nil
}

// onlineEMChunk is the largest count given to one factor.OnlineEM.Add
// (between two looks at the context).
const onlineEMChunk = 1 << 16

// executor returns the NATS executor when refits use workers and some
// answer, else nil (fit in-process).
func (s *Service) executor(ctx context.Context) (*natsexec.Executor, error) {
	if s.cfg.UseWorkers == WorkersNever {
		return nil, nil
	}
	if s.exec == nil {
		cfg := s.cfg.Exec
		cfg.Logger = s.log
		exec, err := natsexec.New(ctx, s.nc, cfg)
		if err != nil {
			return nil, err
		}
		s.exec = exec
	}
	if s.cfg.UseWorkers == WorkersAlways {
		return s.exec, nil
	}
	ids, err := s.exec.Census(ctx)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	s.log.Info("refit on the cluster's workers", "workers", len(ids))
	return s.exec, nil
}

// commitVersion stores md as version v, checkpoints the counts as seen by
// it, records it as latest and announces it, in that order (package doc).
func (s *Service) commitVersion(ctx context.Context, v *Version, md *factor.Model) error {
	params := map[string]string{"model": s.cfg.Name, "version": strconv.Itoa(v.Version), "mode": string(v.Mode),
		"stream_seq": strconv.FormatUint(v.StreamSeq, 10), "transitions": strconv.FormatInt(v.Transitions, 10)}
	mf, err := s.modelFile(md)
	if err != nil {
		return err
	}
	mf.Fingerprint, mf.Params = fmt.Sprintf("%s@%d", s.cfg.Name, v.StreamSeq), params
	data, err := arrowio.EncodeModel(mf)
	if err != nil {
		return fmt.Errorf("service: encode version %d: %w", v.Version, err)
	}
	v.Object, v.Digest, v.Size = ModelObject(s.cfg.Name, v.Version), digest(data), int64(len(data))
	meta, err := versionMeta(v)
	if err != nil {
		return err
	}
	if err := s.st.put(ctx, s.nc.MaxPayload(), v.Object, data, meta); err != nil {
		return err
	}
	// The checkpoint records the version with the counts as it leaves
	// them (pending: what arrived during the fit); the service's state
	// changes only once it is stored. If it cannot be, the version is not
	// made (the next one reuses its number) and the counts stay pending.
	if err := s.storeCheckpoint(ctx, true, s.table.FreshRows(), v.Version); err != nil {
		return err
	}
	s.table.Thaw(true)
	s.model, s.latest = md, v
	s.queries.version(v.Version, mf)
	// The version is made: its record and announcement are not cut short
	// by a stop.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StopTimeout)
	defer cancel()
	if err := s.publish(ctx, v); err != nil {
		return err
	}
	s.prune(ctx, v.Version)
	return nil
}

// publish records v as latest (compare-and-set) and announces it.
func (s *Service) publish(ctx context.Context, v *Version) error {
	b, err := jsonVersion(v)
	if err != nil {
		return err
	}
	key := LatestKey(s.cfg.Name)
	rev, err := wire.CompareAndSet(ctx, s.st.KV, key, b, s.kvRev)
	if s.kvRev == 0 && errors.Is(err, wire.ErrLostRace) {
		// A latest left by an earlier run whose checkpoint is gone (or
		// older): take its revision.
		if e, gerr := s.st.KV.Get(ctx, key); gerr == nil {
			rev, err = wire.CompareAndSet(ctx, s.st.KV, key, b, e.Revision())
		}
	}
	if errors.Is(err, wire.ErrLostRace) {
		s.fatal = errOwnership
		return fmt.Errorf("%w: %w", errOwnership, err)
	}
	if err != nil {
		return fmt.Errorf("service: record version %d as latest: %w", v.Version, err)
	}
	s.kvRev = rev
	s.m.versions.Inc()
	s.m.version.Set(float64(v.Version))
	if !math.IsNaN(v.LogLik) {
		s.m.loglik.Set(v.LogLik)
		s.m.wkl.Set(v.WKL)
	}
	_, pending := s.table.Added()
	s.m.pending.Set(float64(pending))
	if err := s.nc.Publish(ModelSubject(s.cfg.Prefix, s.cfg.Name), b); err != nil {
		s.log.Warn("announce", "version", v.Version, "error", err)
	}
	return nil
}

// prune deletes the model versions older than the last KeepVersions
// (latest is the newest): the Object Store keeps a bounded number of
// them. A failure is logged: the next version prunes again.
func (s *Service) prune(ctx context.Context, latest int) {
	if s.cfg.KeepVersions < 0 {
		return
	}
	vs, err := s.st.List(ctx, s.cfg.Name)
	if err != nil {
		s.log.Warn("list versions to prune", "error", err)
		return
	}
	for _, v := range vs {
		if v.Version > latest-s.cfg.KeepVersions || v.Version >= latest {
			continue
		}
		if err := s.st.Models.Delete(ctx, ModelObject(s.cfg.Name, v.Version)); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			s.log.Warn("delete an old version", "version", v.Version, "error", err)
			continue
		}
		s.log.Debug("old version deleted", "version", v.Version, "keep", s.cfg.KeepVersions)
	}
}
