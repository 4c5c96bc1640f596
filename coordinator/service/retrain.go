package service

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// fitJob is a retrain in progress: its input, taken from the service's
// state when it started, and the requests waiting for it.
type fitJob struct {
	reason string
	start  time.Time
	reqs   []micro.Request
	// The snapshot: the latest version's model (nil before the first; the
	// fit only reads it), the counts and the version being made.
	base    *factor.Model
	blocks  []*factor.Block
	pending []*factor.Block
	v       *Version
	// Online-em mode: the counts the latest version has seen and its
	// unit transitions.
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
	if s.job != nil {
		if req != nil {
			s.waiting = append(s.waiting, req)
		}
		return
	}
	all, pending := s.table.Added()
	if all == 0 || s.table.NNZ() == 0 {
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
	job := &fitJob{reason: reason, start: time.Now(), base: s.model, blocks: s.table.Blocks(u, false),
		v: &Version{Name: s.cfg.Name, Version: s.version() + 1, Mode: s.cfg.Mode, Transitions: all, Count: s.table.Sum(),
			StreamSeq: s.seq, N: n, M: s.cfg.Order, U: u, New: true, Reason: reason}}
	if req != nil {
		job.reqs = append(job.reqs, req)
	}
	switch s.cfg.Mode {
	case ModeIncremental:
		job.pending = s.table.Blocks(u, true)
	case ModeOnlineEM:
		job.pending = s.table.Blocks(u, true)
		job.prior = priorBlocks(s.table.Entries(), u)
		if s.latest != nil {
			job.units = s.latest.Units
		}
	}
	s.table.BeginSnapshot()
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
	if err != nil {
		s.table.AbortSnapshot()
		err = fmt.Errorf("service: %s: retrain: %w", s.cfg.Name, err)
	} else {
		v.Created = time.Now().UTC()
		v.Seconds = time.Since(job.start).Seconds()
		if err = s.commitVersion(ctx, v, r.md); err == nil {
			s.m.retrain.Observe(v.Seconds)
			s.log.Info("new version", "version", v.Version, "reason", job.reason, "loglik", v.LogLik, "transitions", v.Transitions,
				"seq", v.StreamSeq, "n", v.N, "u", v.U, "iterations", v.Iterations, "seconds", v.Seconds)
		}
	}
	if err != nil {
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
	case s.cfg.Every > 0 && pending >= s.cfg.Every:
		s.retrain(ctx, "every", nil)
	}
}

// reply answers a retrain request, or logs the outcome of one nobody
// waits for.
func (s *Service) reply(v *Version, err error, reason string, req micro.Request) {
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
	var md *factor.Model
	if job.base != nil {
		var err error
		if md, err = job.base.Grow(v.N, v.U); err != nil {
			return nil, err
		}
		if err := md.Smooth(WarmSmoothing); err != nil {
			return nil, err
		}
	} else {
		md = factor.NewRandom(v.N, s.cfg.Order, v.U, s.cfg.Tie, s.cfg.Seed)
	}
	v.M = md.M
	switch s.cfg.Mode {
	case ModeRefit:
		shards, man := shard.Split(job.blocks, v.N, s.cfg.ShardNNZ)
		opts := factor.FitOptions{Workers: s.cfg.Workers, Converger: factor.Converger{MaxIter: s.cfg.MaxIter, Tol: s.cfg.Tol}}
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
				TaskTimeout: s.cfg.WorkerTimeout,
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
		v.Iterations = res.Iterations
	case ModeIncremental:
		inc, err := factor.NewIncremental(md, factor.IncrementalOptions{EtaMax: s.cfg.EtaMax, Alpha: s.cfg.Alpha})
		if err != nil {
			return nil, err
		}
		for _, b := range job.pending {
			for r, i := range b.Rows {
				for p := b.Ptr[r]; p < b.Ptr[r+1]; p++ {
					if err := inc.Add(int(i), b.Action, int(b.Cols[p]), b.Vals[p]); err != nil {
						return nil, err
					}
				}
			}
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
	for _, b := range job.pending {
		for r, i := range b.Rows {
			for p := b.Ptr[r]; p < b.Ptr[r+1]; p++ {
				// A pending count is an integer (ingestion refuses others in
				// this mode), given in parts of at most onlineEMChunk units.
				for c := b.Vals[p]; c > 0; c -= onlineEMChunk {
					if err := ctx.Err(); err != nil {
						return nil, err
					}
					if err := o.Add(int(i), b.Action, int(b.Cols[p]), min(c, onlineEMChunk)); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	md = o.Model()
	st := o.Stats()
	v.Iterations, v.Units = int(st.MSteps), st.Units
	return md, nil
}

// onlineEMChunk is the largest count given to one factor.OnlineEM.Add
// (between two looks at the context).
const onlineEMChunk = 1 << 16

// priorBlocks are the counts of es without their pending part: what the
// latest version has seen.
func priorBlocks(es []shard.TableEntry, u int) []*factor.Block {
	var ct shard.Counter
	for _, e := range es {
		if c := e.Count - e.Pending; c > 0 && int(e.Action) < u {
			// Entries hold valid transitions: Add cannot fail.
			_ = ct.Add(int(e.State), int(e.Action), int(e.Next), c)
		}
	}
	return ct.Matrices(u)
}

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
	data, err := arrowio.EncodeModel(&arrowio.ModelFile{Model: md, Fingerprint: fmt.Sprintf("%s@%d", s.cfg.Name, v.StreamSeq), Params: params})
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
	es, pending := s.table.CommittedEntries()
	all, _ := s.table.Added()
	if err := s.storeCheckpoint(ctx, es, all, pending, v.Version); err != nil {
		return err
	}
	s.table.CommitSnapshot()
	s.model, s.latest = md, v
	s.queries.version(v.Version, &arrowio.ModelFile{Model: md})
	return s.publish(ctx, v)
}

// publish records v as latest (compare-and-set) and announces it.
func (s *Service) publish(ctx context.Context, v *Version) error {
	b, err := jsonVersion(v)
	if err != nil {
		return err
	}
	var rev uint64
	if s.kvRev == 0 {
		rev, err = s.st.KV.Create(ctx, LatestKey(s.cfg.Name), b)
		if errors.Is(err, jetstream.ErrKeyExists) {
			// A latest left by an earlier run whose checkpoint is gone (or
			// older): take its revision.
			if e, gerr := s.st.KV.Get(ctx, LatestKey(s.cfg.Name)); gerr == nil {
				rev, err = s.st.KV.Update(ctx, LatestKey(s.cfg.Name), b, e.Revision())
			}
		}
	} else {
		rev, err = s.st.KV.Update(ctx, LatestKey(s.cfg.Name), b, s.kvRev)
	}
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			s.fatal = errOwnership
			return fmt.Errorf("%w: %s changed under it", errOwnership, LatestKey(s.cfg.Name))
		}
		return fmt.Errorf("service: record version %d as latest: %w", v.Version, err)
	}
	s.kvRev = rev
	s.m.versions.Inc()
	s.m.version.Set(float64(v.Version))
	if !math.IsNaN(v.LogLik) {
		s.m.loglik.Set(v.LogLik)
		s.m.wkl.Set(v.WKL)
	}
	s.m.pending.Set(0)
	if err := s.nc.Publish(ModelSubject(s.cfg.Prefix, s.cfg.Name), b); err != nil {
		s.log.Warn("announce", "version", v.Version, "error", err)
	}
	return nil
}
