package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// Config configures a NATS worker.
type Config struct {
	// Prefix is the subject prefix (default DefaultPrefix).
	Prefix string
	// JobsBucket is the KV bucket of the coordinators' job records
	// (default wire.DefaultKVBucket): the owners exchange takes up an
	// epoch, or ends a job, only when the job's record there names it.
	JobsBucket string
	// Logger receives the worker's logs (default: none).
	Logger hclog.Logger
	// MaxCachedShards bounds the shard cache (0: no bound). When full, the
	// cache is emptied (shards are fetched again on demand).
	MaxCachedShards int
	// Delay is added to every task before it computes: a test hook that
	// widens the window in which a worker can be killed mid-task. It ends
	// early at the task's deadline and when the worker stops. DelayFrom
	// limits it to the tasks of that iteration and later (0: every task),
	// so that a test can hold a worker in a chosen iteration.
	Delay     time.Duration
	DelayFrom int
	// WrongFrom, when ≥ 1, makes the worker compute wrong owners tasks
	// from that iteration on (it scales the first entry of each D̂ by
	// 1 + 2^-20 before it digests, folds and serves it): a fault
	// injection for the tests of the owners exchange's verification, a
	// machine whose arithmetic has gone bad.
	WrongFrom int
	// OnOwnersOp, when set, is called as each owners operation starts,
	// with its name and iteration: a debugging hook (emsf worker
	// --memprofile-dir records memory by phase with it). It must not block.
	OnOwnersOp func(op string, iteration int)
	// IngestHooks are test hooks of the distributed ingest (ingest.go).
	IngestHooks IngestHooks
	// Memory, when set, is the memory in bytes this worker may use (its
	// machine's or its cgroup's), announced in its service metadata
	// (wire.MetaMemory): a coordinator that does not hold the model
	// checks the model against its workers' memory before they allocate.
	Memory int64
}

// serviceMeta is the worker's micro service metadata.
func serviceMeta(cfg Config) map[string]string {
	md := map[string]string{"prefix": cfg.Prefix}
	if cfg.Memory > 0 {
		md[wire.MetaMemory] = strconv.FormatInt(cfg.Memory, 10)
	}
	return md
}

// Stats are a worker's counters, served as the data of $SRV.STATS.
type Stats struct {
	Tasks    int64 `json:"tasks"`
	Failed   int64 `json:"failed"`
	Declined int64 `json:"declined"`
	Expired  int64 `json:"expired"`
	NNZ      int64 `json:"nnz"`
	// ComputeSeconds is the time spent in factor.Compute; NNZPerSecond the
	// rate over it.
	ComputeSeconds float64 `json:"compute_seconds"`
	NNZPerSecond   float64 `json:"nnz_per_second"`
	ShardsCached   int     `json:"shards_cached"`
	ShardFetches   int64   `json:"shard_fetches"`
	ModelFetches   int64   `json:"model_fetches"`
	BytesFetched   int64   `json:"bytes_fetched"`
	BytesSent      int64   `json:"bytes_sent"`
	// LargePartials counts partials too large for a reply, served as
	// raw partial blobs.
	LargePartials int64 `json:"large_partials"`
	// DerivedRows counts tasks whose shard's rows of D the worker derived
	// from the previous iteration instead of fetching them (model parts).
	DerivedRows int64 `json:"derived_rows"`
	// SlicesFolded counts K̂ and D̂ slices of the owners exchange that a
	// task folded into this worker's own sums at once (never served);
	// SlicesPulledEarly those this worker, their owner, pulled and folded
	// while the pass ran (ownfold.go, ownpull.go).
	SlicesFolded      int64 `json:"slices_folded"`
	SlicesPulledEarly int64 `json:"slices_pulled_early"`
	// SliceWaits counts owners tasks that waited before they started for
	// the slices of earlier shards served here to be pulled, and
	// SliceWaitSeconds the time they waited (ownpull.go, waitSlices).
	SliceWaits       int64   `json:"slice_waits"`
	SliceWaitSeconds float64 `json:"slice_wait_seconds"`
	// Verified counts owners tasks computed as verifications of another
	// worker's answer (proto.Request.Verify).
	Verified int64 `json:"verified"`
	// CompactShards is how many shards this worker holds in the compact
	// form owners tasks compute on: those placed on it (a backup copy or
	// a verification of another worker's shard holds one only while it
	// runs).
	CompactShards int `json:"compact_shards"`
	// Running is 1 while a task is being computed.
	Running int32 `json:"running"`
}

// Worker is a running NATS worker: a micro service whose task endpoint
// computes partials. Its handler runs one task at a time; run several
// workers to use several cores.
type Worker struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	cfg   Config
	svc   micro.Service
	id    string
	blobs *wire.BlobServer
	nblob atomic.Int64
	log   hclog.Logger

	// Guarded by mu: the handler's state (the handler runs serially; the
	// lock makes that explicit).
	mu      sync.Mutex
	stores  map[string]jetstream.ObjectStore
	shards  map[string]*shard.Shard
	mdDig   string
	md      *factor.Model
	scratch factor.Scratch
	partial factor.Partial
	mdBuf   []byte
	// kDig[digest][b] says K block b of w.md is that of the model version
	// with this digest (model parts); drows keeps shards' rows of D by
	// job and shard.
	kDig  map[string][]bool
	drows map[string]*dRows
	// The owners exchange (owners.go): the job states by job (guarded by
	// omu), the K̂ slices served, the gather subscription, and the
	// columns of the current task (guarded by mu).
	omu sync.Mutex
	own map[string]*ownJob
	// kv is the jobs bucket (guarded by kmu), where epochs are proven.
	kmu    sync.Mutex
	kv     jetstream.KeyValue
	slices *wire.BlobServer
	gather *nats.Subscription
	ready  *nats.Subscription // early pulls' notices (ownpull.go)
	// dropCh is closed (and replaced) when a served slice is dropped;
	// lastTask is the nanoseconds the last owners task took (both for
	// waitSlices; guarded by dmu).
	dmu       sync.Mutex
	dropCh    chan struct{}
	lastTask  time.Duration
	ownShards map[string]*ownShard
	ownMd     *factor.Model
	ownD      []float64 // an owners task's rows of D, as gathered
	// ing is the distributed ingest's endpoint (ingest.go).
	ing ingestState
	// pbufs are raw partial buffers the coordinator has dropped (read
	// whole), kept for reuse; guarded by pmu.
	pmu   sync.Mutex
	pbufs [][]byte

	// ctx is the parent of every task's context; Stop cancels it (cause
	// ErrStopped) and waits for the handlers in tasks. stopped, guarded by
	// stopMu, turns away tasks that arrive after Stop began.
	ctx    context.Context
	cancel context.CancelCauseFunc
	tasks  sync.WaitGroup
	stopMu sync.Mutex
	stop   bool

	// Guarded by smu, so that $SRV.STATS answers while a task runs.
	smu     sync.Mutex
	stats   Stats
	running atomic.Int32
}

// Starter returns a function that starts a worker with cfg on the
// connection it is given: what natsexec.StartLocalCluster takes to build
// a cluster of such workers in one process.
func Starter(cfg Config) func(ctx context.Context, nc *nats.Conn) (*Worker, error) {
	return func(ctx context.Context, nc *nats.Conn) (*Worker, error) { return Start(ctx, nc, cfg) }
}

// Start registers a worker on nc. The caller keeps nc: Stop the worker,
// then drain or close nc.
func Start(ctx context.Context, nc *nats.Conn, cfg Config) (*Worker, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = wire.DefaultPrefix
	}
	if err := wire.CheckPrefix(cfg.Prefix); err != nil {
		return nil, err
	}
	if cfg.JobsBucket == "" {
		cfg.JobsBucket = wire.DefaultKVBucket
	}
	if err := wire.CheckBucket(cfg.JobsBucket); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("worker: jetstream: %w", err)
	}
	w := &Worker{nc: nc, js: js, cfg: cfg, stores: map[string]jetstream.ObjectStore{}, shards: map[string]*shard.Shard{},
		kDig: map[string][]bool{}, drows: map[string]*dRows{}, own: map[string]*ownJob{}, ownShards: map[string]*ownShard{}}
	w.ctx, w.cancel = context.WithCancelCause(context.Background())
	svc, err := micro.AddService(nc, micro.Config{
		Name:         wire.ServiceName,
		Version:      wire.ServiceVersion,
		Description:  "emsf worker: statistics of shards under model versions",
		Metadata:     serviceMeta(cfg),
		QueueGroup:   wire.QueueGroup(cfg.Prefix),
		StatsHandler: func(*micro.Endpoint) any { return w.Stats() },
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			w.log.Error("service error", "subject", e.Subject, "error", e.Description)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("worker: add service: %w", err)
	}
	w.svc = svc
	w.id = svc.Info().ID
	w.log = cfg.Logger.Named("worker").With("worker_id", w.id)
	if err := svc.AddEndpoint("task", micro.HandlerFunc(w.handle), micro.WithEndpointSubject(wire.TaskSubject(cfg.Prefix))); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("worker: add endpoint: %w", err)
	}
	if err := svc.AddEndpoint("task-direct", micro.HandlerFunc(w.handle), micro.WithEndpointSubject(wire.DirectTaskSubject(cfg.Prefix, w.id))); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("worker: add endpoint: %w", err)
	}
	// The link probe: the request's body back, as it came.
	echo := micro.HandlerFunc(func(req micro.Request) { _ = req.Respond(req.Data()) })
	if err := svc.AddEndpoint("link", echo, micro.WithEndpointSubject(wire.LinkSubject(cfg.Prefix, w.id))); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("worker: add endpoint: %w", err)
	}
	if w.blobs, err = wire.ServeBlobs(nc, cfg.Prefix, w.id, 4); err != nil {
		_ = svc.Stop()
		return nil, err
	}
	if err := w.startOwners(); err != nil {
		_ = svc.Stop()
		_ = w.blobs.Close()
		return nil, err
	}
	if err := w.startIngest(); err != nil {
		_ = svc.Stop()
		_ = w.blobs.Close()
		return nil, err
	}
	w.blobs.SetOnDrop(func(b []byte) {
		w.pmu.Lock()
		defer w.pmu.Unlock()
		if len(w.pbufs) < 2 {
			w.pbufs = append(w.pbufs, b)
		}
	})
	// Discoverable when Start returns: the server has processed the
	// service's subscriptions before a census (or a test) pings.
	// A flush that fails (not connected yet, or a slow server) is only
	// logged: the subscriptions are processed when the connection is.
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if err := nc.FlushWithContext(fctx); err != nil {
		w.log.Warn("subscriptions not yet confirmed by the server", "error", err)
	}
	cancel()
	w.log.Info("worker started", "subject", wire.TaskSubject(cfg.Prefix), "queue_group", wire.QueueGroup(cfg.Prefix))
	return w, nil
}

// ID returns the worker's service instance id.
func (w *Worker) ID() string { return w.id }

// ErrStopped is the cause of a task's context ending because its worker
// stopped.
var ErrStopped = errors.New("worker: stopped")

// Stop stops taking tasks, cancels the tasks running (they answer with an
// error that names ErrStopped, so that the coordinator hands them out
// again at once) and returns when their handlers have returned. The
// caller then drains or closes the connection. A second Stop does
// nothing.
func (w *Worker) Stop() error {
	w.stopMu.Lock()
	if w.stop {
		w.stopMu.Unlock()
		return nil
	}
	w.stop = true
	w.stopMu.Unlock()
	err := w.svc.Stop()
	w.cancel(ErrStopped)
	ierr := w.stopIngest()
	w.tasks.Wait()
	if err != nil {
		return fmt.Errorf("worker: stop: %w", err)
	}
	if err := w.blobs.Close(); err != nil {
		return err
	}
	if err := w.slices.Close(); err != nil {
		return err
	}
	if err := w.gather.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("worker: stop: %w", err)
	}
	if err := w.ready.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("worker: stop: %w", err)
	}
	if ierr != nil {
		return ierr
	}
	w.log.Info("worker stopped", "tasks", w.Stats().Tasks)
	return nil
}

// begin registers a task handler with Stop, or reports that the worker
// is stopping.
func (w *Worker) begin() bool {
	w.stopMu.Lock()
	defer w.stopMu.Unlock()
	if w.stop {
		return false
	}
	w.tasks.Add(1)
	return true
}

// Stats returns a snapshot of the worker's counters.
func (w *Worker) Stats() Stats {
	w.smu.Lock()
	defer w.smu.Unlock()
	s := w.stats
	s.Running = w.running.Load()
	if s.ComputeSeconds > 0 {
		s.NNZPerSecond = float64(s.NNZ) / s.ComputeSeconds
	}
	return s
}

// count updates the counters.
func (w *Worker) count(f func(*Stats)) {
	w.smu.Lock()
	f(&w.stats)
	w.smu.Unlock()
}

func (w *Worker) handle(req micro.Request) {
	hdr := micro.Headers{wire.HeaderWorker: []string{w.id}}
	if !w.begin() {
		w.fail(req, hdr, wire.CodeFailed, ErrStopped)
		return
	}
	defer w.tasks.Done()
	var tr wire.TaskRequest
	if err := json.Unmarshal(req.Data(), &tr); err != nil {
		w.fail(req, hdr, wire.CodeFailed, fmt.Errorf("worker: bad task: %w", err))
		return
	}
	log := w.log.With("job", tr.Job, "iter", tr.Iteration, "shard", tr.Shard, "attempt", tr.Attempt)
	if tr.Task().Avoids(w.id) {
		w.count(func(s *Stats) { s.Declined++ })
		_ = req.Error(wire.CodeDeclined, "declined: this worker failed the task before", nil, micro.WithHeaders(hdr))
		return
	}
	deadline := time.Unix(0, tr.Deadline)
	if tr.Deadline != 0 && time.Now().After(deadline) {
		w.count(func(s *Stats) { s.Expired++ })
		_ = req.Error(wire.CodeExpired, "expired before it started", nil, micro.WithHeaders(hdr))
		return
	}
	if tr.Started != "" {
		_ = w.nc.Publish(tr.Started, []byte(w.id))
	}
	ctx, cancel := context.WithCancel(w.ctx)
	if tr.Deadline != 0 {
		ctx, cancel = context.WithDeadline(w.ctx, deadline)
	}
	defer cancel()
	w.running.Add(1)
	data, fetched, compute, err := w.run(ctx, &tr, hdr)
	if err != nil && ctx.Err() != nil && !errors.Is(err, context.Cause(ctx)) {
		// A step that saw only "context canceled" (a fetch, say) still
		// names why: the worker stopped, or the task's deadline passed.
		err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
	}
	w.running.Add(-1)
	if err != nil {
		log.Warn("task failed", "error", err)
		w.fail(req, hdr, wire.CodeFailed, err)
		return
	}
	hdr[wire.HeaderComputeNanos] = []string{strconv.FormatInt(int64(compute), 10)}
	hdr[wire.HeaderFetchBytes] = []string{strconv.FormatInt(fetched, 10)}
	if err := req.Respond(data, micro.WithHeaders(hdr)); err != nil {
		log.Warn("reply failed", "error", err)
		return
	}
	log.Trace("task done", "compute", compute, "bytes", len(data), "via_blob", data == nil)
}

func (w *Worker) fail(req micro.Request, hdr micro.Headers, code string, err error) {
	w.count(func(s *Stats) { s.Failed++ })
	_ = req.Error(code, err.Error(), nil, micro.WithHeaders(hdr))
}

// run computes a task: it returns the encoded partial (nil when it is
// served as a blob named in hdr), the bytes fetched and the compute time.
func (w *Worker) run(ctx context.Context, tr *wire.TaskRequest, hdr micro.Headers) (data []byte, fetched int64, compute time.Duration, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	obs, err := w.store(ctx, tr.Bucket)
	if err != nil {
		return nil, 0, 0, err
	}
	s, nb, err := w.shard(ctx, obs, tr)
	fetched += nb
	if err != nil {
		return nil, fetched, 0, err
	}
	if w.cfg.Delay > 0 && tr.Iteration >= w.cfg.DelayFrom {
		t := time.NewTimer(w.cfg.Delay)
		select {
		case <-t.C:
		case <-ctx.Done(): // also at Stop: task contexts derive from w.ctx
		}
		t.Stop()
	}
	if ctx.Err() != nil {
		return nil, fetched, 0, fmt.Errorf("worker: shard %d: %w", tr.Shard, context.Cause(ctx))
	}
	var pr partsResult
	err = errNoParts
	if usesParts(tr) {
		pr, err = w.computeParts(ctx, tr, s)
		fetched += pr.fetched
		if err != nil && !errors.Is(err, errNoParts) {
			return nil, fetched, 0, err
		}
	}
	// The label names the shard and model version computed: with model
	// parts, every part was checked against the task's CRCs, so the
	// version is the task's; else it is the one the worker holds.
	label := proto.Label{Job: tr.Job, Iteration: tr.Iteration, Shard: tr.Shard, ShardChecksum: s.Checksum, ModelDigest: tr.ModelDigest, Nonce: tr.Nonce}
	if err == nil {
		compute = pr.compute
		hdr[wire.HeaderModelNanos] = []string{strconv.FormatInt(int64(pr.model), 10)}
	} else {
		t0 := time.Now()
		md, nb, err := w.model(ctx, obs, tr)
		fetched += nb
		if err != nil {
			return nil, fetched, 0, err
		}
		hdr[wire.HeaderModelNanos] = []string{strconv.FormatInt(int64(time.Since(t0)), 10)}
		label.ModelDigest = w.mdDig
		t0 = time.Now()
		if err := factor.Compute(md, s.Block, &w.scratch, &w.partial, tr.WithLogLik); err != nil {
			return nil, fetched, 0, fmt.Errorf("worker: shard %d: %w", tr.Shard, err)
		}
		compute = time.Since(t0)
	}
	hdr[wire.HeaderPartialOf] = []string{label.String()}
	te := time.Now()
	defer func() { hdr[wire.HeaderEncodeNanos] = []string{strconv.FormatInt(int64(time.Since(te)), 10)} }()
	// Headers and protocol overhead ride along with the body: keep a
	// margin below the server's limit.
	limit := w.nc.MaxPayload() - 8<<10
	if int64(wire.RawPartialSize(&w.partial)) <= limit {
		data, err = arrowio.EncodePartial(&w.partial, arrowio.PartialMeta{Job: tr.Job, Iteration: tr.Iteration, Shard: tr.Shard, Worker: w.id})
		if err != nil {
			return nil, fetched, 0, fmt.Errorf("worker: encode partial of shard %d: %w", tr.Shard, err)
		}
		if int64(len(data)) <= limit {
			w.count(func(st *Stats) {
				st.Tasks++
				st.NNZ += int64(s.NNZ)
				st.ComputeSeconds += compute.Seconds()
				st.BytesSent += int64(len(data))
			})
			return data, fetched, compute, nil
		}
	}
	// Too large for the reply: served from memory as a raw partial until
	// the coordinator has pulled it (at most a few are kept).
	data = wire.EncodeRawPartial(&w.partial, w.partialBuffer(wire.RawPartialSize(&w.partial)))
	name := fmt.Sprintf("p%d", w.nblob.Add(1))
	hdr[wire.HeaderBlob] = []string{w.blobs.Put(name, data)}
	hdr[wire.HeaderBlobSize] = []string{strconv.Itoa(len(data))}
	hdr[wire.HeaderBlobCRC] = []string{wire.CRC(data)}
	w.count(func(st *Stats) {
		st.Tasks++
		st.NNZ += int64(s.NNZ)
		st.ComputeSeconds += compute.Seconds()
		st.BytesSent += int64(len(data))
		st.LargePartials++
	})
	return nil, fetched, compute, nil
}

// partialBuffer returns a dropped raw partial buffer of at least size
// bytes, or nil.
func (w *Worker) partialBuffer(size int) []byte {
	w.pmu.Lock()
	defer w.pmu.Unlock()
	for k, b := range w.pbufs {
		if cap(b) >= size {
			w.pbufs = append(w.pbufs[:k], w.pbufs[k+1:]...)
			return b
		}
	}
	return nil
}

func (w *Worker) store(ctx context.Context, bucket string) (jetstream.ObjectStore, error) {
	if bucket == "" {
		bucket = wire.DefaultObjectBucket
	}
	if obs, ok := w.stores[bucket]; ok {
		return obs, nil
	}
	obs, err := w.js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("worker: object store %s: %w", bucket, err)
	}
	w.stores[bucket] = obs
	return obs, nil
}

// shard returns the task's shard from the cache or the Object Store.
func (w *Worker) shard(ctx context.Context, obs jetstream.ObjectStore, tr *wire.TaskRequest) (*shard.Shard, int64, error) {
	if s, ok := w.shards[tr.ShardChecksum]; ok {
		return s, 0, nil
	}
	// A shard object that is missing, does not decode or is not the
	// task's shard is corrupt (the coordinator stores it again).
	data, err := w.getObject(ctx, obs, "fetch", tr.Bucket, tr.ShardObject)
	if err != nil {
		return nil, 0, fmt.Errorf("worker: fetch shard %d: %w", tr.Shard, err)
	}
	s, err := arrowio.DecodeShard(data)
	if err == nil {
		err = s.Verify()
	}
	if err == nil && s.Checksum != tr.ShardChecksum {
		err = fmt.Errorf("checksum %s, task says %s", s.Checksum, tr.ShardChecksum)
	}
	if err != nil {
		return nil, int64(len(data)), fmt.Errorf("worker: shard %d: %w", tr.Shard, corruptObject("fetch", tr.Bucket, tr.ShardObject, err))
	}
	if w.cfg.MaxCachedShards > 0 && len(w.shards) >= w.cfg.MaxCachedShards {
		clear(w.shards)
	}
	w.shards[tr.ShardChecksum] = s
	n := len(w.shards)
	w.count(func(st *Stats) {
		st.ShardFetches++
		st.BytesFetched += int64(len(data))
		st.ShardsCached = n
	})
	return s, int64(len(data)), nil
}

// model returns the task's model version, fetching it when it is not the
// one cached.
func (w *Worker) model(ctx context.Context, obs jetstream.ObjectStore, tr *wire.TaskRequest) (*factor.Model, int64, error) {
	if w.md != nil && w.mdDig == tr.ModelDigest {
		return w.md, 0, nil
	}
	if tr.ModelBlob != "" {
		return w.rawModel(ctx, tr)
	}
	data, err := obs.GetBytes(ctx, tr.ModelObject)
	if err != nil {
		return nil, 0, fmt.Errorf("worker: fetch model %s: %w", tr.ModelObject, err)
	}
	sum := sha256.Sum256(data)
	if d := hex.EncodeToString(sum[:]); d != tr.ModelDigest {
		return nil, int64(len(data)), fmt.Errorf("worker: model %s has digest %s, task says %s", tr.ModelObject, d, tr.ModelDigest)
	}
	mf, err := arrowio.DecodeModel(data)
	if err != nil {
		return nil, int64(len(data)), fmt.Errorf("worker: model %s: %w", tr.ModelObject, err)
	}
	if mf.Model == nil {
		return nil, int64(len(data)), errors.New("worker: model file without a model")
	}
	w.md, w.mdDig = mf.Model, tr.ModelDigest
	clear(w.kDig)
	w.count(func(s *Stats) {
		s.ModelFetches++
		s.BytesFetched += int64(len(data))
	})
	return w.md, int64(len(data)), nil
}

// rawModel fetches the task's model version from the coordinator's blob
// (a raw model, see EncodeRawModel) into the model the worker keeps.
func (w *Worker) rawModel(ctx context.Context, tr *wire.TaskRequest) (*factor.Model, int64, error) {
	data, err := wire.FetchBlob(ctx, w.nc, tr.ModelBlob, tr.ModelSize, w.mdBuf)
	if err != nil {
		return nil, 0, fmt.Errorf("worker: fetch model %s: %w", tr.ModelObject, err)
	}
	w.mdBuf = data
	if err := wire.CheckRawDigest(data, tr.ModelDigest); err != nil {
		return nil, int64(len(data)), err
	}
	// The kept model is overwritten: it is no longer the cached version.
	w.mdDig = ""
	clear(w.kDig)
	md, err := wire.DecodeRawModel(data, w.md)
	if err != nil {
		return nil, int64(len(data)), err
	}
	if err := md.Validate(); err != nil {
		w.md = nil
		return nil, int64(len(data)), fmt.Errorf("worker: model %s: %w", tr.ModelObject, err)
	}
	w.md, w.mdDig = md, tr.ModelDigest
	w.count(func(s *Stats) {
		s.ModelFetches++
		s.BytesFetched += int64(len(data))
	})
	return md, int64(len(data)), nil
}
