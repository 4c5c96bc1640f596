package service

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	// version; Count is their total count, NNZ the distinct transitions
	// in the count table's matrices (rows still Buffered join them at the
	// next merge: a checkpoint, a retrain, or a full buffer).
	Transitions int64   `json:"transitions"`
	Pending     int64   `json:"pending"`
	Count       float64 `json:"count"`
	NNZ         int     `json:"nnz"`
	// States and Actions are the size the data needs (or the fixed size).
	States  int `json:"states"`
	Actions int `json:"actions"`
	// IDs says which kinds the service counts by user ids: "states",
	// "actions" or "states,actions" ("": integer indices; ids.go).
	IDs string `json:"ids,omitempty"`
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
	// CountsBytes is the memory the count table holds, CSRBytes the size
	// of the fit's CSR of the same counts (shard.Table); Buffered the rows
	// counted and not merged into the table's matrices yet (NNZ counts
	// the merged ones).
	CountsBytes int64 `json:"counts_bytes"`
	CSRBytes    int64 `json:"csr_bytes"`
	Buffered    int   `json:"buffered"`
	// Paused is set while ingestion waits for the retrain in progress:
	// the table's buffer is full, and the retrain reads the counts.
	Paused bool `json:"paused,omitempty"`
	// PurgedTo is the stream sequence up to which this process purged the
	// stream (StreamPurge), CheckpointSeconds how long the last checkpoint
	// took.
	PurgedTo          uint64  `json:"purged_to,omitempty"`
	CheckpointSeconds float64 `json:"checkpoint_seconds,omitempty"`
	// Stream is what the transitions stream holds when the status request
	// is answered (nil when the server did not say in time).
	Stream *StreamState `json:"stream,omitempty"`
}

// StreamState is what the transitions stream holds: messages, bytes, and
// the first and last sequences (first = last+1 when it is empty).
type StreamState struct {
	Msgs     uint64 `json:"msgs"`
	Bytes    uint64 `json:"bytes"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
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

	// Owned by Run's goroutine. stateIDs and actionIDs are the
	// vocabularies of a service that counts ids (ids.go; nil: indices).
	table       *shard.Table
	stateIDs    *shard.Vocab
	actionIDs   *shard.Vocab
	seq         uint64
	ckptSeq     uint64
	dirty       bool
	nextCkpt    time.Time // no periodic checkpoint before (CheckpointCost)
	ckptSecs    float64
	purgedTo    uint64
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
		id: "serve-" + rand.Text()[:10], table: cfg.newTable(), ctl: make(chan func()), ready: make(chan struct{}), done: make(chan fitResult, 1)}, nil
}

// newTable returns an empty count table with the configured buffer.
func (c *Config) newTable() *shard.Table { return &shard.Table{MinBufferRows: c.BufferRows} }

func (c *Config) storeConfig() StoreConfig {
	return StoreConfig{Prefix: c.Prefix, Name: c.Name, StateBucket: c.StateBucket, ModelBucket: c.ModelBucket,
		Replicas: c.Replicas, StreamMaxAge: c.StreamMaxAge, StreamMaxBytes: c.StreamMaxBytes}
}

// ID returns the service's instance id (in Status and the micro service).
func (s *Service) ID() string { return s.id }

// Ready is closed once Run answers requests.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run restores the checkpoint, then ingests, retrains and answers requests
// until ctx is done, then stops cleanly (stop). It returns nil when ctx
// ends it (also during start-up).
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

	msgs, stopConsumer, err := s.consume(ctx, &wg)
	if err != nil {
		return err
	}
	defer stopConsumer()
	// The status endpoint answers from the start: the restored state,
	// before the query index (which may take seconds) is built.
	s.snapshot()
	svc, err := s.serveRequests(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = svc.Stop() }()
	if s.queries, err = startQueries(ctx, s.nc, s.log, s.cfg.Prefix, s.cfg.Name, svc, &wg); err != nil {
		return err
	}
	if s.model != nil {
		mf, err := s.modelFile(s.model)
		if err != nil {
			return err
		}
		s.queries.version(s.latest.Version, mf)
	}
	s.snapshot()
	close(s.ready)
	s.log.Info("serving", "id", s.id, "mode", s.cfg.Mode, "stream", StreamName(s.cfg.Prefix, s.cfg.Name),
		"from_seq", s.seq+1, "transitions", s.table.Sum(), "version", s.version())

	ckpt := time.NewTicker(s.cfg.CheckpointEvery)
	defer ckpt.Stop()
	var interval <-chan time.Time
	if s.cfg.Policy.Interval > 0 {
		t := time.NewTicker(s.cfg.Policy.Interval)
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
		// While a fit reads the counts and the table's buffer is full,
		// messages wait in the stream (Status.Paused).
		in := msgs
		if s.table.Full() {
			in = nil
		}
		select {
		case <-ctx.Done():
			return s.stop(ctx, svc, stopConsumer)
		case m, ok := <-in:
			if !ok {
				if ctx.Err() != nil {
					msgs = nil // stopping: the ctx.Done case ends the loop
					continue
				}
				return fmt.Errorf("service: %s: the stream consumer stopped", s.cfg.Name)
			}
			s.ingest(ctx, m)
			s.policy(ctx, false)
			s.unpark(ctx, time.Now())
		case now := <-parkC:
			s.unpark(ctx, now)
		case r := <-s.done:
			s.finish(ctx, r)
		case f := <-s.ctl:
			f()
		case <-interval:
			s.policy(ctx, true)
			if s.tickHook != nil {
				s.tickHook()
			}
		case now := <-ckpt.C:
			if now.Before(s.nextCkpt) {
				break
			}
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

// policy starts the retrain the policy asks for (Policy.Due), unless one
// runs: finish asks again when it ends.
func (s *Service) policy(ctx context.Context, tick bool) {
	if s.job != nil {
		return
	}
	_, pending := s.table.Added()
	if reason := s.cfg.Policy.Due(pending, tick); reason != "" {
		s.retrain(ctx, reason, nil)
	}
}

// stop ends Run cleanly: no request is taken any more, the consumer stops
// (messages not counted stay in the stream for the next run), requests
// waiting for a retrain are refused with 503, the fit in progress is
// abandoned (cancelled: its counts stay pending) and waited for, then the
// counts are checkpointed and the stream purged, with contexts of their
// own (ctx is done), each bounded by StopTimeout.
func (s *Service) stop(ctx context.Context, svc micro.Service, stopConsumer func()) error {
	_ = svc.Stop()
	stopConsumer()
	refused := 0
	refuse := func(req micro.Request) {
		s.refuseStopping(req)
		refused++
	}
	if s.job != nil {
		for _, req := range append(s.job.reqs, s.waiting...) {
			refuse(req)
		}
		s.waiting = nil
		r := <-s.done // the fit sees ctx done
		s.job = nil
		s.table.Thaw(false)
		if r.err == nil {
			s.log.Info("the retrain in progress ended as the service stopped: its version is not kept", "version", r.job.v.Version)
		}
	}
	for _, p := range s.parked {
		refuse(p.req)
	}
	s.parked = nil
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StopTimeout)
	defer cancel()
	if err := s.checkpoint(cctx); err != nil {
		return fmt.Errorf("service: %s: stopping: %w", s.cfg.Name, err)
	}
	s.log.Info("stopped", "seq", s.seq, "checkpointed_seq", s.ckptSeq, "requests_refused", refused)
	return nil
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
// a restart succeeds, provided the stream still holds every message. Once
// messages were purged (StreamPurge) the checkpoint is the only copy of
// them: without a usable one the service does not start, and says why.
func (s *Service) load(ctx context.Context) error {
	data, err := s.st.Models.GetBytes(ctx, StateObject(s.cfg.Name))
	var version int
	rebuild := ""
	found := true
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		found = false
	case err != nil:
		return fmt.Errorf("service: load checkpoint %s: %w", StateObject(s.cfg.Name), err)
	default:
		t, meta, err := arrowio.DecodeCounts(data)
		data = nil
		switch {
		case err != nil:
			rebuild = err.Error()
		case meta.Name != s.cfg.Name:
			t.Free()
			return fmt.Errorf("service: checkpoint %s belongs to model %q", StateObject(s.cfg.Name), meta.Name)
		default:
			t.MinBufferRows = s.cfg.BufferRows
			s.table, s.seq, s.ckptSeq, version = t, meta.Seq, meta.Seq, meta.Version
			s.stateIDs, s.actionIDs = meta.States, meta.Actions
			if err := s.checkLimits(); err != nil {
				rebuild = err.Error()
				s.table.Free()
				s.table, s.seq, s.ckptSeq = s.cfg.newTable(), 0, 0
				s.stateIDs, s.actionIDs = nil, nil
			}
		}
		if rebuild == "" {
			s.log.Info("checkpoint loaded", "seq", s.seq, "nnz", s.table.NNZ(), "count", s.table.Sum(), "version", version,
				"bytes", s.table.Bytes())
		}
	}
	if !found || rebuild != "" {
		if err := s.streamWhole(ctx, rebuild); err != nil {
			return err
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

// streamWhole checks that counting the stream from its start counts
// every transition ever published: nothing was purged (a stream whose
// own limits drop messages, StreamMaxAge or StreamMaxBytes, is let be, as
// its owner chose). unusable is why the checkpoint cannot be used ("":
// there is none).
func (s *Service) streamWhole(ctx context.Context, unusable string) error {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("service: stream %s: %w", StreamName(s.cfg.Prefix, s.cfg.Name), err)
	}
	st, cfg := info.State, info.Config
	if st.FirstSeq <= 1 || cfg.MaxAge > 0 || cfg.MaxBytes > 0 || cfg.MaxMsgs > 0 {
		return nil
	}
	what := "there is no checkpoint " + StateObject(s.cfg.Name) + " in bucket " + s.cfg.ModelBucket
	if unusable != "" {
		what = "the checkpoint " + StateObject(s.cfg.Name) + " cannot be used (" + unusable + ")"
	}
	return fmt.Errorf("service: %s: %s, and stream %s starts at sequence %d: the transitions before it were purged once a checkpoint held them, so the counts cannot be rebuilt; restore the checkpoint (or the limits it was written under), or serve under a new name",
		s.cfg.Name, what, StreamName(s.cfg.Prefix, s.cfg.Name), st.FirstSeq)
}

// checkLimits checks the restored counts against --max-states,
// --max-actions and --max-model-bytes.
func (s *Service) checkLimits() error {
	n, u := s.table.Dims()
	if n > s.cfg.MaxStates || u > s.cfg.MaxActions || factor.ModelBytes(n, s.cfg.Order, u, s.cfg.Tie) > s.cfg.MaxModelBytes {
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
// anything changed since the last one, merging the table's buffer first
// unless a fit reads the table.
func (s *Service) checkpoint(ctx context.Context) error {
	if !s.dirty {
		return nil
	}
	s.table.Merge()
	_, pending := s.table.Added()
	return s.storeCheckpoint(ctx, false, pending, s.version())
}

// storeCheckpoint stores the table as the checkpoint of the current
// sequence: its entries as Scan(committed) gives them (committed: as they
// will be once the version in progress is committed), pending rows and the
// latest version. The file is streamed into the Object Store as it is
// encoded, never whole in memory. The context it uses is its own, cut
// from ctx's values but not its cancellation (a stop does not cancel a
// checkpoint half-way; StopTimeout bounds it). Once stored, the stream is
// purged up to it (StreamPurge).
func (s *Service) storeCheckpoint(ctx context.Context, committed bool, pending int64, version int) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StopTimeout)
	defer cancel()
	start := time.Now()
	all, _ := s.table.Added()
	meta := arrowio.CountsMeta{Name: s.cfg.Name, Seq: s.seq, Added: all, Pending: pending, Version: version, States: s.stateIDs, Actions: s.actionIDs}
	pr, pw := io.Pipe()
	encoded := make(chan error, 1)
	go func() {
		err := arrowio.WriteCounts(pw, meta, func(yield func(shard.TableEntry) error) error { return s.table.Scan(committed, yield) })
		pw.CloseWithError(err)
		encoded <- err
	}()
	info, err := wire.PutObjectReader(ctx, s.st.Models, s.nc.MaxPayload(), jetstream.ObjectMeta{Name: StateObject(s.cfg.Name)}, pr)
	pr.CloseWithError(errors.New("service: checkpoint put ended")) // unblocks the encoder if the put failed
	eerr := <-encoded
	switch {
	case err != nil && !errors.Is(err, eerr):
		return fmt.Errorf("service: checkpoint: %w", s.st.storeErr(ctx, StateObject(s.cfg.Name), err))
	case err != nil:
		return fmt.Errorf("service: checkpoint: %w", err)
	case eerr != nil:
		return fmt.Errorf("service: checkpoint: %w", eerr)
	}
	s.ckptSeq, s.dirty = s.seq, false
	d := time.Since(start)
	s.ckptSecs = d.Seconds()
	s.nextCkpt = time.Now().Add(CheckpointCost * d)
	s.log.Debug("checkpoint", "seq", s.seq, "bytes", info.Size, "seconds", d.Seconds())
	s.purge(ctx)
	return nil
}

// purge removes from the stream the messages the checkpoint just stored
// holds (keeping the last StreamKeep of them). A failure is logged: the
// next checkpoint purges again.
func (s *Service) purge(ctx context.Context) {
	if s.cfg.StreamPurge != PurgeCheckpointed || s.ckptSeq <= s.cfg.StreamKeep {
		return
	}
	upTo := s.ckptSeq - s.cfg.StreamKeep // messages below upTo+1 go
	if upTo <= s.purgedTo {
		return
	}
	if err := s.stream.Purge(ctx, jetstream.WithPurgeSequence(upTo+1)); err != nil {
		s.log.Warn("purge the stream up to the checkpoint", "seq", upTo, "error", err)
		return
	}
	s.purgedTo = upTo
	s.log.Debug("stream purged", "up_to", upTo)
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
		Rejected: s.rejected, RejectedMessages: s.rejectedMsg, LastRejection: s.lastReject, Latest: s.latest,
		CountsBytes: s.table.Bytes(), CSRBytes: s.table.CSRBytes(), Buffered: s.table.Buffered(), Paused: s.table.Full(),
		PurgedTo: s.purgedTo, CheckpointSeconds: s.ckptSecs, IDs: s.idKinds()}
}

// idKinds is Status.IDs.
func (s *Service) idKinds() string {
	switch {
	case s.stateIDs != nil && s.actionIDs != nil:
		return "states,actions"
	case s.stateIDs != nil:
		return "states"
	case s.actionIDs != nil:
		return "actions"
	}
	return ""
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
		Name: "emsf-serve", Version: s.cfg.Version,
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
			s.refuseStopping(req)
		}
	}), micro.WithEndpointSubject(RetrainSubject(s.cfg.Prefix, s.cfg.Name)))
	if err == nil {
		err = svc.AddEndpoint("status", micro.HandlerFunc(func(req micro.Request) {
			snap := s.snap.Load()
			if snap == nil { // not reached: Run snapshots before it serves
				_ = req.Error("503", "the service is starting", nil)
				return
			}
			st := *snap
			// What the stream holds, asked now (best effort: a status
			// without it is still an answer).
			ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if info, err := s.stream.Info(ictx); err == nil {
				st.Stream = &StreamState{Msgs: info.State.Msgs, Bytes: info.State.Bytes, FirstSeq: info.State.FirstSeq, LastSeq: info.State.LastSeq}
			}
			_ = req.RespondJSON(&st)
		}), micro.WithEndpointSubject(StatusSubject(s.cfg.Prefix, s.cfg.Name)))
	}
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("service: micro endpoint: %w", err)
	}
	return svc, nil
}
