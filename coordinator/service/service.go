package service

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/wire"
)

// Status is the reply of a status request.
type Status struct {
	Name string `json:"name"`
	ID   string `json:"id"`
	Mode Mode   `json:"mode"`
	// StreamSeq is the last stream sequence counted, Checkpointed the one
	// in the last checkpoint.
	StreamSeq    uint64 `json:"stream_seq"`
	Checkpointed uint64 `json:"checkpointed_seq"`
	// Transitions counts the rows ingested, Pending those since the latest
	// version; Count is their total count, NNZ the distinct transitions.
	Transitions int64   `json:"transitions"`
	Pending     int64   `json:"pending"`
	Count       float64 `json:"count"`
	NNZ         int     `json:"nnz"`
	// States and Actions are the size the data needs (or the fixed size).
	States  int `json:"states"`
	Actions int `json:"actions"`
	// FixedStates and FixedActions are --states and --actions (0: the
	// model grows).
	FixedStates  int `json:"fixed_states,omitempty"`
	FixedActions int `json:"fixed_actions,omitempty"`
	// MaxStates, MaxActions and MaxModelBytes are the limits a row must
	// keep the model within (--max-states, --max-actions,
	// --max-model-bytes); MaxCount bounds the total count.
	MaxStates     int     `json:"max_states"`
	MaxActions    int     `json:"max_actions"`
	MaxModelBytes int64   `json:"max_model_bytes"`
	MaxCount      float64 `json:"max_count"`
	// Order and Tie are the model's order m and tie mode.
	Order int    `json:"order"`
	Tie   string `json:"tie"`
	// Rejected counts rows outside a fixed size or the limits, RejectedMessages payloads
	// that could not be read; LastRejection describes the latest.
	Rejected         int64  `json:"rejected"`
	RejectedMessages int64  `json:"rejected_messages"`
	LastRejection    string `json:"last_rejection,omitempty"`
	// Latest is the latest version (nil before the first).
	Latest *Version `json:"latest,omitempty"`
	// Retraining is set while a retrain runs (ingestion goes on), and
	// Waiting counts the retrain requests queued behind it.
	Retraining bool `json:"retraining"`
	Waiting    int  `json:"waiting"`
	// CatchingUp counts the retrain requests waiting for ingestion to
	// reach the stream sequence they asked for.
	CatchingUp int `json:"catching_up"`
}

// Service owns one model name; see the package doc. Create it with New and
// run it with Run.
type Service struct {
	cfg    Config
	nc     *nats.Conn
	st     *Stores
	stream jetstream.Stream
	log    hclog.Logger
	m      *metrics
	id     string

	// Owned by Run's goroutine.
	table       *shard.Table
	seq         uint64
	ckptSeq     uint64
	dirty       bool
	latest      *Version
	model       *factor.Model
	kvRev       uint64
	rejected    int64
	rejectedMsg int64
	lastReject  string
	exec        *natsexec.Executor
	fatal       error
	job         *fitJob         // the retrain in progress, nil when none
	waiting     []micro.Request // retrain requests that came during job
	parked      []parked        // retrain requests waiting for ingestion to reach their sequence
	done        chan fitResult  // a fit goroutine's result
	wg          sync.WaitGroup  // the fit goroutine
	fitHook     func()          // tests: called by the fit goroutine first
	tickHook    func()          // tests: called by Run after each --interval tick is handled
	queries     *queries        // the query endpoints (query.go), set by Run

	ctl   chan func()
	ready chan struct{}
	// snap is the Status as of the last event, so that a status request
	// is answered at once, also during a long retrain.
	snap atomic.Pointer[Status]
}

// New checks cfg, makes sure no other service owns the name, and opens the
// stream and buckets on nc (the caller keeps nc).
func New(ctx context.Context, nc *nats.Conn, cfg Config) (*Service, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if m, err := nc.Request(StatusSubject(cfg.Prefix, cfg.Name), nil, 500*time.Millisecond); err == nil {
		var st Status
		_ = json.Unmarshal(m.Data, &st)
		return nil, fmt.Errorf("service: model %s is already served (by %s): one emsf serve per name", cfg.Name, st.ID)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("service: jetstream: %w", err)
	}
	if err := RequireJetStream(ctx, js); err != nil {
		return nil, err
	}
	scfg := cfg.storeConfig()
	stream, err := EnsureStream(ctx, js, scfg)
	if err != nil {
		return nil, err
	}
	st, err := OpenStores(ctx, js, scfg)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registry, cfg.Name)
	if err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, nc: nc, st: st, stream: stream, log: cfg.Logger.Named("serve").With("model", cfg.Name), m: m,
		id: "serve-" + rand.Text()[:10], table: &shard.Table{}, ctl: make(chan func()), ready: make(chan struct{}), done: make(chan fitResult, 1)}, nil
}

func (c *Config) storeConfig() StoreConfig {
	return StoreConfig{Prefix: c.Prefix, Name: c.Name, StateBucket: c.StateBucket, ModelBucket: c.ModelBucket,
		Replicas: c.Replicas, StreamMaxAge: c.StreamMaxAge, StreamMaxBytes: c.StreamMaxBytes}
}

// ID returns the service's instance id (in Status and the micro service).
func (s *Service) ID() string { return s.id }

// Ready is closed once Run answers requests.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run restores the checkpoint, then ingests, retrains and answers requests
// until ctx is done; it checkpoints before it returns. It returns nil when
// ctx ends it (also during start-up).
func (s *Service) Run(ctx context.Context) (err error) {
	defer func() {
		if err != nil && ctx.Err() != nil && s.fatal == nil {
			err = nil // asked to stop
		}
	}()
	if err := s.restore(ctx); err != nil {
		return err
	}
	defer func() {
		if s.exec != nil {
			s.exec.Close()
		}
	}()
	// Deferred in this order, cancel runs first, then the goroutines
	// started below (and a fit in progress) are waited for.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer s.wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	msgs, stop, err := s.consume(ctx, &wg)
	if err != nil {
		return err
	}
	defer stop()
	svc, err := s.serveRequests(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = svc.Stop() }()
	if s.queries, err = s.startQueries(ctx, svc, &wg); err != nil {
		return err
	}
	if s.model != nil {
		s.queries.version(s.latest.Version, &arrowio.ModelFile{Model: s.model})
	}
	s.snapshot()
	close(s.ready)
	s.log.Info("serving", "id", s.id, "mode", s.cfg.Mode, "stream", StreamName(s.cfg.Prefix, s.cfg.Name),
		"from_seq", s.seq+1, "transitions", s.table.Sum(), "version", s.version())

	ckpt := time.NewTicker(s.cfg.CheckpointEvery)
	defer ckpt.Stop()
	var interval <-chan time.Time
	if s.cfg.Interval > 0 {
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		interval = t.C
	}
	parkTick := time.NewTicker(100 * time.Millisecond)
	defer parkTick.Stop()
	for {
		var parkC <-chan time.Time
		if len(s.parked) > 0 {
			parkC = parkTick.C
		}
		select {
		case <-ctx.Done():
			// Requests waiting for a retrain get an answer; a fit in
			// progress is abandoned (its counts stay pending).
			if s.job != nil {
				for _, req := range append(s.job.reqs, s.waiting...) {
					_ = req.Error("503", "service stopping: the retrain was abandoned", nil)
				}
			}
			for _, p := range s.parked {
				_ = p.req.Error("503", "service stopping: the retrain was abandoned", nil)
			}
			// A last checkpoint with a context of its own: ctx is done.
			cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer ccancel()
			if err := s.checkpoint(cctx); err != nil {
				return err
			}
			s.log.Info("stopped", "seq", s.seq)
			return nil
		case m, ok := <-msgs:
			if !ok {
				if ctx.Err() != nil {
					msgs = nil // stopping: the ctx.Done case ends the loop
					continue
				}
				return fmt.Errorf("service: %s: the stream consumer stopped", s.cfg.Name)
			}
			s.ingest(ctx, m)
			if _, pending := s.table.Added(); s.cfg.Every > 0 && pending >= s.cfg.Every {
				s.retrain(ctx, "every", nil)
			}
			s.unpark(ctx, time.Now())
		case now := <-parkC:
			s.unpark(ctx, now)
		case r := <-s.done:
			s.finish(ctx, r)
		case f := <-s.ctl:
			f()
		case <-interval:
			if _, pending := s.table.Added(); pending > 0 {
				s.retrain(ctx, "interval", nil)
			}
			if s.tickHook != nil {
				s.tickHook()
			}
		case <-ckpt.C:
			if err := s.checkpoint(ctx); err != nil {
				s.log.Error("checkpoint", "error", err)
			}
		}
		s.snapshot()
		if s.fatal != nil {
			return s.fatal
		}
	}
}

// errOwnership stops the service: another one took its name over.
var errOwnership = errors.New("service: another emsf serve has taken this model name over")

func (s *Service) version() int {
	if s.latest == nil {
		return 0
	}
	return s.latest.Version
}

// restore loads the checkpoint and the latest version, repairing
// NAME.latest after a crash between checkpoint and announcement.
func (s *Service) restore(ctx context.Context) error {
	if err := s.load(ctx); err != nil {
		return err
	}
	// The gauges start from the restored state.
	_, pending := s.table.Added()
	s.m.seq.Set(float64(s.seq))
	s.m.pending.Set(float64(pending))
	if v := s.latest; v != nil {
		s.m.version.Set(float64(v.Version))
		if !math.IsNaN(v.LogLik) && !math.IsInf(v.LogLik, 0) {
			s.m.loglik.Set(v.LogLik)
			s.m.wkl.Set(v.WKL)
		}
	}
	return nil
}

// load reads the checkpoint and the latest version (restore). A
// checkpoint that cannot be decoded or breaks the limits (only an older
// emsf serve can have written one) is not used: the counts are rebuilt
// from the whole stream, whose rows the limits then check one by one, so
// a restart always succeeds.
func (s *Service) load(ctx context.Context) error {
	data, err := s.st.Models.GetBytes(ctx, StateObject(s.cfg.Name))
	var version int
	rebuild := ""
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
	case err != nil:
		return fmt.Errorf("service: load checkpoint %s: %w", StateObject(s.cfg.Name), err)
	default:
		t, meta, err := arrowio.DecodeCounts(data)
		switch {
		case err != nil:
			rebuild = err.Error()
		case meta.Name != s.cfg.Name:
			return fmt.Errorf("service: checkpoint %s belongs to model %q", StateObject(s.cfg.Name), meta.Name)
		default:
			s.table, s.seq, s.ckptSeq, version = t, meta.Seq, meta.Seq, meta.Version
			if err := s.checkLimits(); err != nil {
				rebuild = err.Error()
				s.table, s.seq, s.ckptSeq = &shard.Table{}, 0, 0
			}
		}
		if rebuild == "" {
			s.log.Info("checkpoint loaded", "seq", s.seq, "nnz", s.table.NNZ(), "count", s.table.Sum(), "version", version)
		}
	}
	if err := s.checkSize(); err != nil {
		return err
	}
	latest, rev, err := s.st.Latest(ctx, s.cfg.Name)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	s.kvRev = rev
	if rebuild != "" {
		s.log.Error("checkpoint unusable: counting the whole stream again under the limits", "checkpoint", StateObject(s.cfg.Name), "error", rebuild)
		s.dirty = true
		if latest != nil {
			version = max(version, latest.Version)
		}
	}
	if version == 0 {
		if latest != nil {
			s.log.Warn("NAME.latest names a version the checkpoint does not know: ignored", "version", latest.Version)
		}
		return nil
	}
	f, err := s.st.Get(ctx, s.cfg.Name, version)
	if err != nil {
		return err
	}
	info := f.Info
	s.model, s.latest = f.File.Model, info
	if err := s.checkSize(); err != nil {
		return err
	}
	if s.model.M != s.cfg.Order || s.model.Tie != s.cfg.Tie {
		s.log.Warn("the latest version's order and tie mode are kept (the flags apply to a new model name)",
			"m", s.model.M, "tie", s.model.Tie, "order_flag", s.cfg.Order, "tie_flag", s.cfg.Tie)
	}
	if latest == nil || latest.Version < version {
		s.log.Warn("repairing the latest version after a crash", "version", version)
		return s.publish(ctx, info)
	}
	return nil
}

// checkLimits checks the restored counts against --max-states,
// --max-actions and --max-model-bytes.
func (s *Service) checkLimits() error {
	n, u := s.table.Dims()
	if n > s.cfg.MaxStates || u > s.cfg.MaxActions || ModelBytes(n, s.cfg.Order, u, s.cfg.Tie) > s.cfg.MaxModelBytes {
		return fmt.Errorf("service: the counts need %d states and %d actions, beyond the limits of %d states, %d actions and %d model bytes",
			n, u, s.cfg.MaxStates, s.cfg.MaxActions, s.cfg.MaxModelBytes)
	}
	return nil
}

// checkSize checks that a fixed size holds the counts and the latest
// version restored (a model never shrinks).
func (s *Service) checkSize() error {
	n, u := s.table.Dims()
	if s.model != nil {
		n, u = max(n, s.model.N), max(u, s.model.U)
	}
	if s.cfg.States > 0 && n > s.cfg.States {
		return fmt.Errorf("service: model %s already has %d states (counts and versions); a fixed size of %d states would drop data", s.cfg.Name, n, s.cfg.States)
	}
	if s.cfg.Actions > 0 && u > s.cfg.Actions {
		return fmt.Errorf("service: model %s already has %d actions (counts and versions); a fixed size of %d actions would drop data", s.cfg.Name, u, s.cfg.Actions)
	}
	return nil
}

// checkpoint stores the counts with the sequence they include, when
// anything changed since the last one.
func (s *Service) checkpoint(ctx context.Context) error {
	if !s.dirty {
		return nil
	}
	all, pending := s.table.Added()
	return s.storeCheckpoint(ctx, s.table.Entries(), all, pending, s.version())
}

// storeCheckpoint stores es (the table's entries, sorted) as the
// checkpoint of the current sequence with the given row counts and latest
// version.
func (s *Service) storeCheckpoint(ctx context.Context, es []shard.TableEntry, all, pending int64, version int) error {
	meta := arrowio.CountsMeta{Name: s.cfg.Name, Seq: s.seq, Added: all, Pending: pending, Version: version}
	data, err := arrowio.EncodeCounts(meta, es)
	if err != nil {
		return fmt.Errorf("service: checkpoint: %w", err)
	}
	if err := s.st.put(ctx, s.nc.MaxPayload(), StateObject(s.cfg.Name), data, nil); err != nil {
		return fmt.Errorf("service: checkpoint: %w", err)
	}
	s.ckptSeq, s.dirty = s.seq, false
	s.log.Debug("checkpoint", "seq", s.seq, "bytes", len(data))
	return nil
}

// snapshot records the current Status for status requests.
func (s *Service) snapshot() {
	st := s.status()
	st.Retraining, st.Waiting, st.CatchingUp = s.job != nil, len(s.waiting), len(s.parked)
	s.snap.Store(&st)
}

// status returns the current Status.
func (s *Service) status() Status {
	all, pending := s.table.Added()
	n, u := s.dims()
	return Status{Name: s.cfg.Name, ID: s.id, Mode: s.cfg.Mode, StreamSeq: s.seq, Checkpointed: s.ckptSeq,
		Transitions: all, Pending: pending, Count: s.table.Sum(), NNZ: s.table.NNZ(), States: n, Actions: u,
		FixedStates: s.cfg.States, FixedActions: s.cfg.Actions,
		MaxStates: s.cfg.MaxStates, MaxActions: s.cfg.MaxActions, MaxModelBytes: s.cfg.MaxModelBytes, MaxCount: shard.MaxCount,
		Order: s.order(), Tie: s.tie().String(),
		Rejected: s.rejected, RejectedMessages: s.rejectedMsg, LastRejection: s.lastReject, Latest: s.latest}
}

// dims returns the model size the data needs: the fixed size where set,
// else the data's and the latest version's, whichever is larger.
func (s *Service) dims() (n, u int) {
	n, u = s.table.Dims()
	if s.model != nil {
		n, u = max(n, s.model.N), max(u, s.model.U)
	}
	if s.cfg.States > 0 {
		n = s.cfg.States
	}
	if s.cfg.Actions > 0 {
		u = s.cfg.Actions
	}
	return n, u
}

// serveRequests starts the micro service: retrain and status endpoints
// whose work runs on Run's goroutine.
func (s *Service) serveRequests(ctx context.Context) (micro.Service, error) {
	svc, err := micro.AddService(s.nc, micro.Config{
		Name: "emsf-serve", Version: "1.0.0",
		Description: "emsf service mode: counts transitions, retrains and publishes model versions",
		Metadata:    map[string]string{"model": s.cfg.Name, "id": s.id, "mode": string(s.cfg.Mode)},
	})
	if err != nil {
		return nil, fmt.Errorf("service: micro service: %w", err)
	}
	// A retrain request is handed to Run's goroutine, which only starts
	// the fit (or queues the request) and answers later, so the handler
	// waits briefly; a request that arrives while the service stops gets
	// an error reply.
	err = svc.AddEndpoint("retrain", micro.HandlerFunc(func(req micro.Request) {
		rr, code, err := s.retrainRequest(ctx, req.Data())
		if err != nil {
			_ = req.Error(code, err.Error(), nil)
			return
		}
		// Answered later, from Run's goroutine: a detached copy (micro
		// reads its own request once this handler returns).
		later := wire.Detach(s.nc, req)
		select {
		case s.ctl <- func() { s.retrainAfter(ctx, rr, later) }:
		case <-ctx.Done():
			_ = req.Error("503", "service stopping", nil)
		}
	}), micro.WithEndpointSubject(RetrainSubject(s.cfg.Prefix, s.cfg.Name)))
	if err == nil {
		err = svc.AddEndpoint("status", micro.HandlerFunc(func(req micro.Request) {
			_ = req.RespondJSON(s.snap.Load())
		}), micro.WithEndpointSubject(StatusSubject(s.cfg.Prefix, s.cfg.Name)))
	}
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("service: micro endpoint: %w", err)
	}
	return svc, nil
}
