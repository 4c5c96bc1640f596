package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/ingestwire"
	"github.com/emsf/emsf/worker/wire"
)

// The worker's ingest endpoint (package ingestwire has the protocol,
// wire/ingest.go the transport): a subscription to
// wire.IngestSubject(prefix, "*", id) whose requests each run on a
// goroutine of their own (owned: Stop waits for them), since a pull or
// a status waits for news; the work is the worker's IngestNode. Shards
// it commits go to the worker's shard cache, where the fit's tasks find
// them by checksum, and (when asked) to the Object Store.

// ingestState is the worker's ingest endpoint.
type ingestState struct {
	node *IngestNode
	sub  *nats.Subscription
	wg   sync.WaitGroup
}

// startIngest subscribes the ingest endpoint.
func (w *Worker) startIngest() error {
	w.ing.node = NewIngestNode(w.id, ingestPeers{w}, w.js, w.keepShard, w.cfg.IngestHooks)
	sub, err := w.nc.Subscribe(wire.IngestSubject(w.cfg.Prefix, "*", w.id), func(m *nats.Msg) {
		if !w.begin() {
			return
		}
		w.ing.wg.Add(1)
		go func() {
			defer w.tasks.Done()
			defer w.ing.wg.Done()
			w.serveIngest(m)
		}()
	})
	if err != nil {
		return fmt.Errorf("worker: ingest: %w", err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	w.ing.sub = sub
	return nil
}

// stopIngest ends the ingest endpoint: no new request, the jobs'
// goroutines cancelled and waited for.
func (w *Worker) stopIngest() error {
	w.ing.node.Close()
	if err := w.ing.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("worker: stop: %w", err)
	}
	return nil
}

// keepShard puts a shard the ingest built into the shard cache.
func (w *Worker) keepShard(s *shard.Shard) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.shards[s.Checksum] = s
	n := len(w.shards)
	w.count(func(st *Stats) { st.ShardsCached = n })
}

// Ingest returns the worker's side of the distributed ingest (for tests
// and in-process clusters).
func (w *Worker) Ingest() *IngestNode { return w.ing.node }

// CachedShard returns the shard of that checksum in the worker's cache.
func (w *Worker) CachedShard(checksum string) (*shard.Shard, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.shards[checksum]
	return s, ok
}

// serveIngest answers one ingest request.
func (w *Worker) serveIngest(m *nats.Msg) {
	ctx := w.ctx
	n := w.ing.node
	var rep any
	var err error
	switch op := m.Header.Get(ingestwire.HeaderOp); op {
	case ingestwire.OpList:
		err = ingestDo(m, func(r *ingestwire.ListRequest) (any, error) { return n.List(ctx, r) }, &rep)
	case ingestwire.OpScan:
		err = ingestDo(m, func(r *ingestwire.ScanRequest) (any, error) { return n.Scan(ctx, r) }, &rep)
	case ingestwire.OpPlan:
		err = ingestDo(m, func(r *ingestwire.PlanRequest) (any, error) { return struct{}{}, w.ingestPlan(ctx, r) }, &rep)
	case ingestwire.OpStatus:
		err = ingestDo(m, func(r *ingestwire.StatusRequest) (any, error) { return n.Status(ctx, r) }, &rep)
	case ingestwire.OpCut:
		err = ingestDo(m, func(r *ingestwire.CutRequest) (any, error) { return n.Cut(ctx, r) }, &rep)
	case ingestwire.OpBuild:
		err = ingestDo(m, func(r *ingestwire.BuildRequest) (any, error) { return n.Build(ctx, r) }, &rep)
	case ingestwire.OpCommit:
		err = ingestDo(m, func(r *ingestwire.CommitRequest) (any, error) { return n.Commit(ctx, r) }, &rep)
	case ingestwire.OpGroups:
		err = ingestDo(m, func(r *ingestwire.GroupsRequest) (any, error) { return w.cutGroups(ctx, r) }, &rep)
	case ingestwire.OpInit:
		err = ingestDo(m, func(r *ingestwire.InitRequest) (any, error) { return w.initModel(ctx, r) }, &rep)
	case ingestwire.OpParts:
		err = ingestDo(m, func(r *ingestwire.PartsRequest) (any, error) { return w.writeParts(ctx, r) }, &rep)
	case ingestwire.OpIDScan:
		err = ingestDo(m, func(r *ingestwire.IDScanRequest) (any, error) { return n.IDScan(ctx, r) }, &rep)
	case ingestwire.OpIDCut:
		err = ingestDo(m, func(r *ingestwire.IDCutRequest) (any, error) { return n.IDCut(ctx, r) }, &rep)
	case ingestwire.OpIDRange:
		err = ingestDo(m, func(r *ingestwire.IDRangeRequest) (any, error) { return n.IDRange(ctx, r) }, &rep)
	case ingestwire.OpIDTrans:
		err = ingestDo(m, func(r *ingestwire.IDTransRequest) (any, error) { return struct{}{}, n.IDTrans(ctx, r) }, &rep)
	case ingestwire.OpEnd:
		err = ingestDo(m, func(r *ingestwire.EndRequest) (any, error) { n.End(r.Job); return struct{}{}, nil }, &rep)
	case ingestwire.OpPull:
		if err = pullDo(m, func(r *ingestwire.PullRequest) (*ingestwire.PullReply, []byte, error) { return n.Pull(ctx, r) }, w.respondIngest); err == nil {
			return
		}
	case ingestwire.OpIDPull:
		if err = pullDo(m, func(r *ingestwire.IDPullRequest) (*ingestwire.PullReply, []byte, error) { return n.IDPull(ctx, r) }, w.respondIngest); err == nil {
			return
		}
	case ingestwire.OpTail:
		var r ingestwire.TailRequest
		if err = json.Unmarshal(m.Data, &r); err == nil {
			var data []byte
			if data, err = n.Tail(ctx, &r); err == nil {
				out := nats.NewMsg("")
				out.Data = data
				w.respondIngest(m, out)
				return
			}
		}
	default:
		err = fmt.Errorf("worker: ingest: unknown op %q", op)
	}
	if err != nil {
		code, object := "", ""
		var se *StaleError
		var store *wire.StoreError
		switch {
		case errors.As(err, &se):
			code = wire.IngestStale
		case errors.Is(err, errNotYet):
			code = wire.IngestNotYet
		case errors.As(err, &store) && store.Fault == wire.StoreCorrupt:
			code, object = wire.IngestCorrupt, store.Name
		}
		rep := wire.IngestErrorReply(err, code)
		if object != "" {
			rep.Header.Set(wire.HeaderIngestObject, object)
		}
		w.respondIngest(m, rep)
		return
	}
	out := nats.NewMsg("")
	out.Data, _ = json.Marshal(rep)
	w.respondIngest(m, out)
}

// ingestDo decodes the request of m into a T, runs f and sets *rep.
func ingestDo[T any](m *nats.Msg, f func(*T) (any, error), rep *any) error {
	var r T
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return fmt.Errorf("worker: ingest: bad request: %w", err)
	}
	v, err := f(&r)
	*rep = v
	return err
}

// pullDo decodes the pull request of m into a T, runs f and responds
// with its reply: the header (wire.HeaderPull) and the binary data.
func pullDo[T any](m *nats.Msg, f func(*T) (*ingestwire.PullReply, []byte, error), respond func(m, out *nats.Msg)) error {
	var r T
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return fmt.Errorf("worker: ingest: bad request: %w", err)
	}
	pr, data, err := f(&r)
	if err != nil {
		return err
	}
	out := nats.NewMsg("")
	h, _ := json.Marshal(pr)
	out.Header.Set(wire.HeaderPull, string(h))
	out.Data = data
	respond(m, out)
	return nil
}

func (w *Worker) respondIngest(m *nats.Msg, out *nats.Msg) {
	if m.Reply == "" {
		return
	}
	out.Subject = m.Reply
	if err := w.nc.PublishMsg(out); err != nil {
		w.log.Warn("ingest reply", "error", err)
	}
}

// ingestPlan fetches an epoch's plan from the coordinator and starts it.
func (w *Worker) ingestPlan(ctx context.Context, r *ingestwire.PlanRequest) error {
	data, err := wire.FetchBlob(ctx, w.nc, r.Blob, r.Size, nil)
	if err != nil {
		return fmt.Errorf("worker: ingest %s: fetch the plan of epoch %d: %w", r.Job, r.Epoch, err)
	}
	if crc := wire.CRC(data); crc != r.CRC {
		return fmt.Errorf("worker: ingest %s: the plan of epoch %d has CRC %s, the request says %s", r.Job, r.Epoch, crc, r.CRC)
	}
	var p ingestwire.Plan
	if err := json.Unmarshal(data, &p); err != nil {
		return fmt.Errorf("worker: ingest %s: plan: %w", r.Job, err)
	}
	if p.Job != r.Job || p.Epoch != r.Epoch {
		return fmt.Errorf("worker: ingest %s: the plan is of job %s, epoch %d, not epoch %d", r.Job, p.Job, p.Epoch, r.Epoch)
	}
	maps, buckets := 0, 0
	for _, sp := range p.Splits {
		if sp.Mapper < len(p.Workers) && p.Workers[sp.Mapper] == w.id {
			maps++
		}
	}
	for _, b := range p.Buckets {
		if b.Reducer < len(p.Workers) && p.Workers[b.Reducer] == w.id {
			buckets++
		}
	}
	w.log.Info("ingest plan", "job", r.Job, "epoch", r.Epoch, "splits", maps, "buckets", buckets, "workers", len(p.Workers))
	return w.ing.node.Plan(&p)
}

// ingestPeers reaches the other workers' ingest endpoints.
type ingestPeers struct{ w *Worker }

// peerTimeout bounds a request to another worker beyond its wait: a
// worker that is gone has no responders at once; one that froze fails the
// request here, and the epoch with it.
const peerTimeout = 30 * time.Second

func (p ingestPeers) call(ctx context.Context, worker, job, op string, req any, wait int) (*nats.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, peerTimeout+time.Duration(wait)*time.Millisecond)
	defer cancel()
	rep, err := wire.IngestCall(ctx, p.w.nc, wire.IngestSubject(p.w.cfg.Prefix, job, worker), op, req)
	if wire.IngestCode(err) == wire.IngestNotYet {
		return nil, fmt.Errorf("%w (%s)", errNotYet, worker)
	}
	return rep, err
}

func (p ingestPeers) Pull(ctx context.Context, worker string, r *ingestwire.PullRequest) (*ingestwire.PullReply, []byte, error) {
	return p.pull(ctx, worker, r.Job, ingestwire.OpPull, r, r.WaitMillis)
}

// pull sends a pull request of op and decodes its reply's header.
func (p ingestPeers) pull(ctx context.Context, worker, job, op string, req any, wait int) (*ingestwire.PullReply, []byte, error) {
	rep, err := p.call(ctx, worker, job, op, req, wait)
	if err != nil {
		return nil, nil, err
	}
	var pr ingestwire.PullReply
	if err := json.Unmarshal([]byte(rep.Header.Get(wire.HeaderPull)), &pr); err != nil {
		return nil, nil, fmt.Errorf("worker: ingest: %s from %s: bad reply: %w", op, worker, err)
	}
	return &pr, rep.Data, nil
}

func (p ingestPeers) Tail(ctx context.Context, worker string, r *ingestwire.TailRequest) ([]byte, error) {
	rep, err := p.call(ctx, worker, r.Job, ingestwire.OpTail, r, 0)
	if err != nil {
		return nil, err
	}
	return rep.Data, nil
}

func (p ingestPeers) IDPull(ctx context.Context, worker string, r *ingestwire.IDPullRequest) (*ingestwire.PullReply, []byte, error) {
	return p.pull(ctx, worker, r.Job, ingestwire.OpIDPull, r, 0)
}
