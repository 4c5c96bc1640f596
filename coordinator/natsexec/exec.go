package natsexec

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker"
)

// Config configures an Executor.
type Config struct {
	// Prefix is the subject prefix (default worker.DefaultPrefix).
	Prefix string
	// ObjectBucket and KVBucket name the buckets (defaults
	// worker.DefaultObjectBucket and worker.DefaultKVBucket); they are
	// created when missing, with file storage and Replicas replicas
	// (default 1; 3 on a 3-node cluster).
	ObjectBucket, KVBucket string
	Replicas               int
	// PingWait is how long a worker census waits for PING replies
	// (default 250ms); PingEvery how old a census may be before Workers
	// refreshes it in the background (default 5s).
	PingWait, PingEvery time.Duration
	// ProbeEvery is how often the executor checks that the worker holding
	// a task is still connected (default 1s): a $SRV.PING to that worker
	// that finds no responders fails the task at once (it is handed out
	// again) instead of at the end of its lease.
	ProbeEvery time.Duration
	// QuarantineAfter is how many of a worker's partials may fail the
	// executor's checks (label, CRC, encoding, values, log-likelihood)
	// before it is quarantined (default 3): logged with its id, given no
	// more tasks (it is left out of direct hand-outs and named in every
	// task's Avoid), and its answers are dropped.
	QuarantineAfter int
	// Logger receives the executor's logs (default: none).
	Logger hclog.Logger
}

func (c *Config) defaults() error {
	if c.Prefix == "" {
		c.Prefix = worker.DefaultPrefix
	}
	if c.ObjectBucket == "" {
		c.ObjectBucket = worker.DefaultObjectBucket
	}
	if c.KVBucket == "" {
		c.KVBucket = worker.DefaultKVBucket
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.PingWait <= 0 {
		c.PingWait = 250 * time.Millisecond
	}
	if c.PingEvery <= 0 {
		c.PingEvery = 5 * time.Second
	}
	if c.ProbeEvery <= 0 {
		c.ProbeEvery = time.Second
	}
	if c.QuarantineAfter <= 0 {
		c.QuarantineAfter = 3
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if err := worker.CheckPrefix(c.Prefix); err != nil {
		return fmt.Errorf("natsexec: %w", err)
	}
	for _, b := range []string{c.ObjectBucket, c.KVBucket} {
		if err := worker.CheckBucket(b); err != nil {
			return fmt.Errorf("natsexec: %w", err)
		}
	}
	return nil
}

// Executor hands tasks to NATS workers; it implements
// coordinator.Executor and coordinator.Checkpointer. Close waits for the
// requests it started.
type Executor struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	obs jetstream.ObjectStore
	kv  jetstream.KeyValue
	cfg Config
	log hclog.Logger

	blobs *worker.BlobServer

	mu      sync.Mutex
	shards  map[string][]objRef // by job, in shard order
	models  map[string]objRef   // by job: the latest stored version
	kvRev   map[string]uint64
	commits map[string]*pendingCommit // by job: the commit being stored
	census  censusState
	quar    quarantine
	wg      sync.WaitGroup
	closing bool
}

// pendingCommit is a commit whose model and state are being stored in the
// background; err is set before done is closed.
type pendingCommit struct {
	done chan struct{}
	err  error
}

type objRef struct {
	name, digest string
	version      int
	size         int64
	// blob is where the coordinator serves the bytes from memory ("" when
	// it does not).
	blob string
	// A shard's action and rows; a served model's parts (see
	// worker.TaskRequest.KCRCs): the K blocks' offset and CRCs, and the
	// CRC of each shard's rows of D, in shard order.
	action, rowLo, rowHi int
	kOffset              int
	kCRCs, dCRCs         []string
	header               []byte
}

type censusState struct {
	alive   int
	ids     []string // sorted
	at      time.Time
	running bool
}

var _ coordinator.Executor = (*Executor)(nil)
var _ coordinator.Resumer = (*Executor)(nil)

// New returns an executor on nc, creating the buckets when missing. The
// caller keeps nc: Close the executor, then close nc.
func New(ctx context.Context, nc *nats.Conn, cfg Config) (*Executor, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsexec: jetstream: %w", err)
	}
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket: cfg.ObjectBucket, Description: "emsf shards, models and job manifests",
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("natsexec: object store %s: %w", cfg.ObjectBucket, err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: cfg.KVBucket, Description: "emsf job state", History: 8,
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("natsexec: key-value store %s: %w", cfg.KVBucket, err)
	}
	blobs, err := worker.ServeBlobs(nc, cfg.Prefix, "c"+rand.Text(), 4)
	if err != nil {
		return nil, fmt.Errorf("natsexec: %w", err)
	}
	return &Executor{nc: nc, js: js, obs: obs, kv: kv, cfg: cfg, log: cfg.Logger.Named("natsexec"), blobs: blobs,
		shards: map[string][]objRef{}, models: map[string]objRef{}, kvRev: map[string]uint64{},
		commits: map[string]*pendingCommit{}}, nil
}

// Close waits for the outstanding requests (they end at their deadlines).
func (e *Executor) Close() {
	e.mu.Lock()
	e.closing = true
	e.mu.Unlock()
	e.wg.Wait()
	if err := e.blobs.Close(); err != nil {
		e.log.Warn("close", "error", err)
	}
}

// Load uploads the shards of a job that the Object Store lacks.
func (e *Executor) Load(ctx context.Context, job string, shards []*shard.Shard) (int64, error) {
	refs := make([]objRef, len(shards))
	var moved int64
	for k, s := range shards {
		name := worker.ShardObject(s.Checksum)
		refs[k] = objRef{name: name, digest: s.Checksum, action: s.Action, rowLo: s.RowLo, rowHi: s.RowHi}
		data, err := arrowio.EncodeShard(s)
		if err != nil {
			return moved, fmt.Errorf("natsexec: encode shard %d: %w", k, err)
		}
		if info, err := e.obs.GetInfo(ctx, name); err == nil && info.Size == uint64(len(data)) {
			continue
		} else if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return moved, fmt.Errorf("natsexec: shard %d: %w", k, err)
		}
		if _, err := worker.PutObject(ctx, e.obs, e.nc.MaxPayload(), name, data); err != nil {
			return moved, fmt.Errorf("natsexec: upload shard %d: %w", k, err)
		}
		moved += int64(len(data))
	}
	e.mu.Lock()
	e.shards[job] = refs
	e.mu.Unlock()
	e.log.Debug("shards uploaded", "job", job, "shards", len(shards), "bytes", moved)
	return moved, nil
}

// Publish stores md as the model version iteration-1 of the job, unless
// Commit stored that version already.
func (e *Executor) Publish(ctx context.Context, job string, iteration int, md *factor.Model) (int64, error) {
	v := iteration - 1
	e.mu.Lock()
	ref, ok := e.models[job]
	e.mu.Unlock()
	if ok && ref.version == v {
		return 0, nil
	}
	return e.storeModel(ctx, job, v, md, nil)
}

func (e *Executor) storeModel(ctx context.Context, job string, v int, md *factor.Model, params map[string]string) (int64, error) {
	snap := e.serveModel(job, v, md)
	_, _, n, err := e.persistModel(ctx, job, v, snap, params)
	return n, err
}

// serveModel serves model version v of a job from memory to the workers
// (a raw model blob) and makes it the version tasks run on. It returns a
// snapshot of md that stays valid while the blob is held.
func (e *Executor) serveModel(job string, v int, md *factor.Model) *factor.Model {
	data, snap := worker.EncodeRawModel(md)
	if snap == nil {
		snap = md.Clone()
	}
	ref := objRef{name: worker.ModelObject(job, v), digest: worker.RawDigest(data, rand.Text()[:12]), version: v, size: int64(len(data))}
	e.mu.Lock()
	shards := e.shards[job]
	e.mu.Unlock()
	if len(shards) > 0 {
		ranges := make([]worker.RowRange, len(shards))
		for k, sh := range shards {
			ranges[k] = worker.RowRange{Block: md.DBlock(sh.action), Lo: sh.rowLo, Hi: sh.rowHi}
		}
		var err error
		if ref.kOffset, ref.kCRCs, ref.dCRCs, err = worker.RawModelParts(data, ranges); err != nil {
			// Workers then fetch the whole model.
			e.log.Warn("model parts", "job", job, "version", v, "error", err)
			ref.kOffset, ref.kCRCs, ref.dCRCs = 0, nil, nil
		} else {
			ref.header = data[:worker.RawHeaderBytes]
		}
	}
	ref.blob = e.blobs.Put(fmt.Sprintf("model-%s-%d", job, v), data)
	e.mu.Lock()
	e.models[job] = ref
	e.mu.Unlock()
	return snap
}

// persistModel stores model version v of a job in the Object Store as an
// Arrow model file (for resume) and returns its name, digest and size.
func (e *Executor) persistModel(ctx context.Context, job string, v int, md *factor.Model, params map[string]string) (string, string, int64, error) {
	data, err := arrowio.EncodeModel(&arrowio.ModelFile{Model: md, Params: params})
	if err != nil {
		return "", "", 0, fmt.Errorf("natsexec: encode model: %w", err)
	}
	name := worker.ModelObject(job, v)
	info, err := worker.PutObject(ctx, e.obs, e.nc.MaxPayload(), name, data)
	if err != nil {
		return "", "", 0, fmt.Errorf("natsexec: store model %s: %w", name, err)
	}
	// The Object Store hashed the bytes with SHA-256 as it stored them:
	// its digest is ours (hex), no second pass over 10 MB per iteration.
	sum, err := jetstream.DecodeObjectDigest(info.Digest)
	if err != nil || len(sum) != sha256.Size {
		s := sha256.Sum256(data)
		sum = s[:]
	}
	if v >= 2 {
		// Keep the previous version for stragglers; older ones go.
		if err := e.obs.Delete(ctx, worker.ModelObject(job, v-2)); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			e.log.Warn("delete old model", "object", worker.ModelObject(job, v-2), "error", err)
		}
	}
	return name, hex.EncodeToString(sum[:]), int64(len(data)), nil
}

// Workers returns the number of workers under this prefix that answered
// the last $SRV.PING census. The first call waits for a census; later
// ones refresh it in the background when older than PingEvery, or wait
// for a new one when the last found none.
func (e *Executor) Workers(ctx context.Context) (int, error) {
	e.mu.Lock()
	c := e.census
	stale := time.Since(c.at) > e.cfg.PingEvery
	if c.at.IsZero() || c.alive == 0 {
		e.mu.Unlock()
		ids, err := e.Census(ctx)
		if err != nil {
			return 0, err
		}
		e.mu.Lock()
		e.census.alive, e.census.ids, e.census.at = len(ids), ids, time.Now()
		e.mu.Unlock()
		return len(ids), nil
	}
	if stale && !c.running && !e.closing {
		e.census.running = true
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			pctx, cancel := context.WithTimeout(context.Background(), 2*e.cfg.PingWait+time.Second)
			defer cancel()
			ids, err := e.Census(pctx)
			e.mu.Lock()
			defer e.mu.Unlock()
			e.census.running = false
			if err == nil {
				e.census.alive, e.census.ids, e.census.at = len(ids), ids, time.Now()
			}
		}()
	}
	e.mu.Unlock()
	return c.alive, nil
}

// Census lists the ids of the workers under this prefix that answer a
// $SRV.PING within the executor's PingWait.
func (e *Executor) Census(ctx context.Context) ([]string, error) {
	inbox := e.nc.NewRespInbox()
	sub, err := e.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("natsexec: ping: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	subj, err := micro.ControlSubject(micro.PingVerb, worker.ServiceName, "")
	if err != nil {
		return nil, fmt.Errorf("natsexec: ping: %w", err)
	}
	if err := e.nc.PublishRequest(subj, inbox, nil); err != nil {
		return nil, fmt.Errorf("natsexec: ping: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.PingWait)
	defer cancel()
	seen := map[string]bool{}
	var ids []string
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			break
		}
		var p micro.Ping
		if json.Unmarshal(m.Data, &p) != nil || p.Metadata["prefix"] != e.cfg.Prefix || seen[p.ID] {
			continue
		}
		seen[p.ID] = true
		ids = append(ids, p.ID)
	}
	slices.Sort(ids)
	return ids, nil
}

// Submit sends t to the workers' queue group and delivers the answer. A
// worker that declines (it failed this task before) is skipped by asking
// again, up to a bound, after which any worker may take it.
func (e *Executor) Submit(ctx context.Context, t worker.Task, deliver func(worker.Result)) {
	e.mu.Lock()
	if e.closing {
		e.mu.Unlock()
		deliver(worker.Result{Task: t, Err: errors.New("natsexec: executor closed")})
		return
	}
	e.wg.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.wg.Done()
		start := time.Now()
		r := e.do(ctx, t)
		r.Elapsed = time.Since(start)
		deliver(r)
	}()
}

func (e *Executor) do(ctx context.Context, t worker.Task) worker.Result {
	r := worker.Result{Task: t}
	e.mu.Lock()
	refs, md := e.shards[t.Job], e.models[t.Job]
	// Quarantined workers get no direct hand-outs, and every task asks
	// them to decline it.
	var ids, out []string
	for _, id := range e.census.ids {
		if !e.quarantinedLocked(id) {
			ids = append(ids, id)
		}
	}
	for id := range e.quar.out {
		out = append(out, id)
	}
	e.mu.Unlock()
	slices.Sort(out)
	switch {
	case t.Shard < 0 || t.Shard >= len(refs):
		r.Err = fmt.Errorf("natsexec: job %s has no shard %d loaded", t.Job, t.Shard)
		return r
	case md.version != t.Iteration-1:
		r.Err = fmt.Errorf("natsexec: job %s: no model published for iteration %d", t.Job, t.Iteration)
		return r
	}
	avoid := slices.Concat(t.Avoid, out)
	req := worker.TaskRequest{Job: t.Job, Iteration: t.Iteration, Shard: t.Shard, Attempt: t.Attempt,
		WithLogLik: t.WithLogLik, Avoid: avoid, Bucket: e.cfg.ObjectBucket,
		ShardObject: refs[t.Shard].name, ShardChecksum: refs[t.Shard].digest,
		ModelObject: md.name, ModelDigest: md.digest, ModelBlob: md.blob, ModelSize: int(md.size)}
	if md.blob != "" && len(md.kCRCs) > 0 && len(md.dCRCs) == len(refs) {
		sh := refs[t.Shard]
		req.KOffset, req.KCRCs, req.DRowLo, req.DRowHi, req.DCRC, req.Alpha = md.kOffset, md.kCRCs, sh.rowLo, sh.rowHi, md.dCRCs[t.Shard], t.Alpha
		req.ModelHeader = md.header
	}
	if dl, ok := ctx.Deadline(); ok {
		req.Deadline = dl.UnixNano()
	}
	// A first hand-out goes to the shard's worker (shard k to the k-th
	// worker of the census, modulo), so that shards stay cached where they
	// are and every worker gets its share; hand-outs after a failure, and
	// any when that worker does not answer, go to the queue group.
	subject, direct := worker.TaskSubject(e.cfg.Prefix), ""
	if t.Attempt <= 1 && len(t.Avoid) == 0 && len(ids) > 0 {
		direct = ids[t.Shard%len(ids)]
		subject = worker.DirectTaskSubject(e.cfg.Prefix, direct)
	}
	const maxDeclines = 16
	for declines := 0; ; declines++ {
		if declines == maxDeclines {
			req.Avoid = out
		}
		reply, err := e.request(ctx, subject, direct, &req, &r.Bytes)
		if errors.Is(err, nats.ErrNoResponders) && subject != worker.TaskSubject(e.cfg.Prefix) {
			subject, direct = worker.TaskSubject(e.cfg.Prefix), ""
			reply, err = e.request(ctx, subject, direct, &req, &r.Bytes)
		}
		var gone *vanishedError
		if errors.As(err, &gone) {
			r.Worker = gone.id
		}
		if err != nil {
			r.Err = fmt.Errorf("natsexec: shard %d: request: %w", t.Shard, err)
			return r
		}
		r.Bytes += int64(len(reply.Data))
		r.Worker = reply.Header.Get(worker.HeaderWorker)
		if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
			if code == worker.CodeDeclined && declines < maxDeclines {
				continue
			}
			r.Err = fmt.Errorf("natsexec: shard %d: worker %s: %s (code %s)", t.Shard, r.Worker, reply.Header.Get(micro.ErrorHeader), code)
			return r
		}
		e.mu.Lock()
		quarantined := e.quarantinedLocked(r.Worker)
		e.mu.Unlock()
		if quarantined {
			r.Err = fmt.Errorf("natsexec: shard %d: worker %s is quarantined: its partial is dropped", t.Shard, r.Worker)
			return r
		}
		want := worker.Label{Job: t.Job, Iteration: t.Iteration, Shard: t.Shard, ShardChecksum: refs[t.Shard].digest, ModelDigest: md.digest}
		if err := e.decode(ctx, reply, want, &r); err != nil {
			r.Err = fmt.Errorf("natsexec: shard %d: worker %s: %w", t.Shard, r.Worker, err)
			if isRejected(err) {
				e.strike(r.Worker, r.Err)
			}
		}
		return r
	}
}

// vanishedError says the worker that took a task left NATS before it
// answered.
type vanishedError struct{ id string }

func (e *vanishedError) Error() string {
	return fmt.Sprintf("worker %s vanished (no responders to $SRV.PING)", e.id)
}

// request sends a task and waits for the reply, while checking every
// ProbeEvery that the worker holding it (direct, or the one that announces
// it took the task on req.Started) is still connected; a worker that is
// gone fails the request with a *vanishedError, not at the lease's end.
func (e *Executor) request(ctx context.Context, subject, direct string, req *worker.TaskRequest, sent *int64) (*nats.Msg, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var started *nats.Subscription
	req.Started = ""
	if direct == "" {
		inbox := e.nc.NewInbox()
		var err error
		if started, err = e.nc.SubscribeSync(inbox); err != nil {
			return nil, fmt.Errorf("natsexec: %w", err)
		}
		defer func() { _ = started.Unsubscribe() }()
		req.Started = inbox
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("natsexec: %w", err)
	}
	*sent += int64(len(body))
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.watch(ctx, direct, started, cancel)
	}()
	reply, err := e.nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
			return nil, cause
		}
		return nil, err
	}
	return reply, nil
}

// watch probes the worker holding a task every ProbeEvery until ctx ends,
// and cancels ctx with a *vanishedError when no one answers its PING.
func (e *Executor) watch(ctx context.Context, id string, started *nats.Subscription, cancel context.CancelCauseFunc) {
	if id == "" {
		if started == nil {
			return
		}
		m, err := started.NextMsgWithContext(ctx)
		if err != nil {
			return
		}
		id = string(m.Data)
	}
	subj, err := micro.ControlSubject(micro.PingVerb, worker.ServiceName, id)
	if err != nil {
		return
	}
	tick := time.NewTicker(e.cfg.ProbeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, pcancel := context.WithTimeout(ctx, max(e.cfg.PingWait, e.cfg.ProbeEvery))
		_, err := e.nc.RequestWithContext(pctx, subj, nil)
		pcancel()
		if errors.Is(err, nats.ErrNoResponders) {
			cancel(&vanishedError{id: id})
			return
		}
	}
}

// decode reads the partial a reply carries or names into r.Partial,
// after checking that its label is want; an error from a check of the
// partial (not of its transfer) is a *rejectedError.
func (e *Executor) decode(ctx context.Context, reply *nats.Msg, want worker.Label, r *worker.Result) error {
	t := r.Task
	for _, f := range []struct {
		h string
		d *time.Duration
	}{{worker.HeaderComputeNanos, &r.Compute}, {worker.HeaderModelNanos, &r.Model}, {worker.HeaderEncodeNanos, &r.Encode}} {
		if ns, err := strconv.ParseInt(reply.Header.Get(f.h), 10, 64); err == nil {
			*f.d = time.Duration(ns)
		}
	}
	t0 := time.Now()
	defer func() { r.Fetch = time.Since(t0) }()
	if nb, err := strconv.ParseInt(reply.Header.Get(worker.HeaderFetchBytes), 10, 64); err == nil {
		r.Bytes += nb
	}
	label, err := worker.ParseLabel(reply.Header.Get(worker.HeaderPartialOf))
	if err != nil {
		return &rejectedError{err: err}
	}
	if err := label.Check(want); err != nil {
		return &rejectedError{err: err}
	}
	data := reply.Data
	var p *factor.Partial
	if blob := reply.Header.Get(worker.HeaderBlob); blob != "" {
		size, err := strconv.Atoi(reply.Header.Get(worker.HeaderBlobSize))
		if err != nil || size < 0 || size > 1<<40 {
			return reject("blob size %q", reply.Header.Get(worker.HeaderBlobSize))
		}
		if data, err = worker.FetchBlob(ctx, e.nc, blob, size, worker.AlignedBuffer(size)); err != nil {
			return fmt.Errorf("fetch partial: %w", err)
		}
		worker.DropBlob(e.nc, blob)
		r.Bytes += int64(len(data))
		if crc := worker.CRC(data); crc != reply.Header.Get(worker.HeaderBlobCRC) {
			return reject("partial blob has CRC %s, reply says %s", crc, reply.Header.Get(worker.HeaderBlobCRC))
		}
		if p, err = worker.DecodeRawPartial(data); err != nil {
			return &rejectedError{err: err}
		}
	} else {
		var meta arrowio.PartialMeta
		if p, meta, err = arrowio.DecodePartial(data); err != nil {
			return &rejectedError{err: err}
		}
		if meta.Job != t.Job || meta.Iteration != t.Iteration || meta.Shard != t.Shard {
			return reject("answered task (%s, %d, %d) with a partial of (%s, %d, %d)",
				t.Job, t.Iteration, t.Shard, meta.Job, meta.Iteration, meta.Shard)
		}
		if meta.Worker != "" {
			r.Worker = meta.Worker
		}
	}
	// Check the values here, as each partial arrives and in parallel with
	// the others, rather than in the coordinator's serial merge.
	if err := factor.CheckPartialValues(p); err != nil {
		return &rejectedError{err: err}
	}
	if t.WithLogLik && math.IsNaN(p.LogLik) {
		return reject("iteration %d asked for the log-likelihood and the partial's is NaN", t.Iteration)
	}
	r.Partial, r.Checked = p, true
	return nil
}

// Begin records a new run of a job in the KV bucket, replacing an older
// run's state, and remembers the revision for the first Commit.
func (e *Executor) Begin(ctx context.Context, st *coordinator.JobState) error {
	if st.Manifest != nil {
		// The manifest grows with the shards: it goes to the Object Store,
		// the KV value only names it (values stay below max payload).
		data, err := json.Marshal(st.Manifest)
		if err != nil {
			return fmt.Errorf("natsexec: manifest: %w", err)
		}
		st.ManifestObject = "manifests/" + st.Job
		if _, err := worker.PutObject(ctx, e.obs, e.nc.MaxPayload(), st.ManifestObject, data); err != nil {
			return fmt.Errorf("natsexec: store manifest of job %s: %w", st.Job, err)
		}
	}
	body, err := stateJSON(st)
	if err != nil {
		return err
	}
	var rev uint64
	old, err := e.kv.Get(ctx, st.Job)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		rev, err = e.kv.Create(ctx, st.Job, body)
	case err != nil:
	default:
		rev, err = e.kv.Update(ctx, st.Job, body, old.Revision())
	}
	if err != nil {
		return fmt.Errorf("natsexec: begin job %s: %w", st.Job, err)
	}
	e.mu.Lock()
	e.kvRev[st.Job] = rev
	e.mu.Unlock()
	return nil
}

// Commit stores md as the model version st.Iteration, then updates the
// job's state with compare-and-set on the revision of this executor's
// last write, then announces the commit.
//
// While the job is running (st.Status "running"), the model is served to
// the workers from memory at once and the storing runs in the background,
// overlapping the next iteration: Commit first waits for the previous
// commit's storing and returns its error, and the last commit (any other
// status) stores before it returns, so commits stay in order and the job
// state never names a model that is not stored. A coordinator that dies
// meanwhile resumes from the last stored commit.
func (e *Executor) Commit(ctx context.Context, st *coordinator.JobState, md *factor.Model) error {
	if err := e.waitCommit(st.Job); err != nil {
		return err
	}
	snap := e.serveModel(st.Job, st.Iteration, md)
	if st.Status != "running" {
		return e.persistCommit(ctx, st, snap)
	}
	// The caller changes st and md after Commit returns: store copies.
	stc := *st
	pc := &pendingCommit{done: make(chan struct{})}
	e.mu.Lock()
	e.commits[st.Job] = pc
	e.wg.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.wg.Done()
		pc.err = e.persistCommit(context.WithoutCancel(ctx), &stc, snap)
		close(pc.done)
	}()
	return nil
}

// waitCommit waits for the job's commit being stored and returns its
// error.
func (e *Executor) waitCommit(job string) error {
	e.mu.Lock()
	pc := e.commits[job]
	delete(e.commits, job)
	e.mu.Unlock()
	if pc == nil {
		return nil
	}
	<-pc.done
	return pc.err
}

// persistCommit stores a committed model (md, version st.Iteration), then
// the job state with compare-and-set on the revision of this executor's
// last write, then announces the commit.
func (e *Executor) persistCommit(ctx context.Context, st *coordinator.JobState, md *factor.Model) error {
	name, digest, _, err := e.persistModel(ctx, st.Job, st.Iteration, md, st.Params)
	if err != nil {
		return err
	}
	st.ModelObject, st.ModelDigest = name, digest
	body, err := stateJSON(st)
	if err != nil {
		return err
	}
	e.mu.Lock()
	rev := e.kvRev[st.Job]
	e.mu.Unlock()
	nrev, err := e.kv.Update(ctx, st.Job, body, rev)
	if err != nil {
		return fmt.Errorf("natsexec: commit job %s iteration %d on revision %d (did another coordinator take the job over?): %w",
			st.Job, st.Iteration, rev, err)
	}
	e.mu.Lock()
	e.kvRev[st.Job] = nrev
	e.mu.Unlock()
	if err := e.nc.Publish(worker.CommittedSubject(e.cfg.Prefix, st.Job), body); err != nil {
		e.log.Warn("announce commit", "job", st.Job, "iteration", st.Iteration, "error", err)
	}
	return nil
}

// State returns the job state stored in the KV bucket.
func (e *Executor) State(ctx context.Context, job string) (*coordinator.JobState, uint64, error) {
	ent, err := e.kv.Get(ctx, job)
	if err != nil {
		return nil, 0, fmt.Errorf("natsexec: job %s: %w", job, err)
	}
	var st coordinator.JobState
	if err := json.Unmarshal(ent.Value(), &st); err != nil {
		return nil, 0, fmt.Errorf("natsexec: job %s: %w", job, err)
	}
	if st.ManifestObject != "" && st.Manifest == nil {
		data, err := e.obs.GetBytes(ctx, st.ManifestObject)
		if err != nil {
			return nil, 0, fmt.Errorf("natsexec: job %s: manifest: %w", job, err)
		}
		if err := json.Unmarshal(data, &st.Manifest); err != nil {
			return nil, 0, fmt.Errorf("natsexec: job %s: manifest: %w", job, err)
		}
	}
	return &st, ent.Revision(), nil
}

// Resume returns the job's state and its committed model from the
// buckets, or a nil state when the job has none.
func (e *Executor) Resume(ctx context.Context, job string) (*coordinator.JobState, *factor.Model, error) {
	st, _, err := e.State(ctx, job)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if st.ModelObject == "" {
		return st, nil, nil
	}
	data, err := e.obs.GetBytes(ctx, st.ModelObject)
	if err != nil {
		return nil, nil, fmt.Errorf("natsexec: job %s: model %s: %w", job, st.ModelObject, err)
	}
	sum := sha256.Sum256(data)
	if d := hex.EncodeToString(sum[:]); d != st.ModelDigest {
		return nil, nil, fmt.Errorf("natsexec: job %s: model %s has digest %s, state says %s", job, st.ModelObject, d, st.ModelDigest)
	}
	mf, err := arrowio.DecodeModel(data)
	if err != nil {
		return nil, nil, fmt.Errorf("natsexec: job %s: %w", job, err)
	}
	// The next iteration runs on this version: no need to store it again.
	e.mu.Lock()
	e.models[job] = objRef{name: st.ModelObject, digest: st.ModelDigest, version: st.Iteration, size: int64(len(data))}
	e.mu.Unlock()
	return st, mf.Model, nil
}

// stateJSON is the KV value of a job state: without the manifest when it
// is kept as an object.
func stateJSON(st *coordinator.JobState) ([]byte, error) {
	v := *st
	if v.ManifestObject != "" {
		v.Manifest = nil
	}
	body, err := json.Marshal(&v)
	if err != nil {
		return nil, fmt.Errorf("natsexec: job state: %w", err)
	}
	return body, nil
}
