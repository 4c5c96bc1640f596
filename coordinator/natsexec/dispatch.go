package natsexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// Submit sends t to the workers' queue group and delivers the answer. A
// worker that declines (it failed this task before) is skipped by asking
// again, up to a bound, after which any worker may take it.
func (e *Executor) Submit(ctx context.Context, t wire.Task, deliver func(wire.Result)) {
	started := e.goRoutine(func() {
		start := time.Now()
		r := e.do(ctx, t)
		r.Elapsed = time.Since(start)
		deliver(r)
	})
	if !started {
		deliver(wire.Result{Task: t, Err: errors.New("natsexec: executor closed")})
	}
}

func (e *Executor) do(ctx context.Context, t wire.Task) wire.Result {
	r := wire.Result{Task: t}
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
	req := wire.TaskRequest{Job: t.Job, Iteration: t.Iteration, Shard: t.Shard, Attempt: t.Attempt, Nonce: proto.NewNonce(),
		WithLogLik: t.WithLogLik, Avoid: avoid, Bucket: e.cfg.ObjectBucket,
		ShardObject: refs[t.Shard].name, ShardChecksum: refs[t.Shard].digest,
		ModelObject: md.name, ModelDigest: md.digest, ModelBlob: md.blob, ModelSize: int(md.size)}
	if md.blob != "" && len(md.kCRCs) > 0 && len(md.dCRCs) == len(refs) {
		sh := refs[t.Shard]
		req.KOffset, req.KCRCs, req.DRowLo, req.DRowHi, req.DCRC, req.Alpha = md.kOffset, md.kCRCs, sh.rowLo, sh.rowHi, md.dCRCs[t.Shard], t.Alpha
		req.ModelHeader = md.header
		if md.precision != factor.Float64 {
			req.Precision = md.precision.String()
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		req.Deadline = dl.UnixNano()
	}
	// A first hand-out goes to the shard's worker (shard k to the k-th
	// worker of the census, modulo), so that shards stay cached where they
	// are and every worker gets its share; hand-outs after a failure, and
	// any when that worker does not answer, go to the queue group.
	subject, direct := wire.TaskSubject(e.cfg.Prefix), ""
	if t.Attempt <= 1 && len(t.Avoid) == 0 && len(ids) > 0 {
		direct = ids[t.Shard%len(ids)]
		subject = wire.DirectTaskSubject(e.cfg.Prefix, direct)
	}
	const maxDeclines = 16
	for declines := 0; ; declines++ {
		if declines == maxDeclines {
			req.Avoid = out
		}
		reply, err := e.request(ctx, subject, direct, &req, &r.Bytes)
		if errors.Is(err, nats.ErrNoResponders) && subject != wire.TaskSubject(e.cfg.Prefix) {
			subject, direct = wire.TaskSubject(e.cfg.Prefix), ""
			reply, err = e.request(ctx, subject, direct, &req, &r.Bytes)
		}
		var gone *vanishedError
		var frozen *frozenError
		if errors.As(err, &gone) {
			r.Worker = gone.id
		} else if errors.As(err, &frozen) {
			r.Worker = frozen.id
		}
		if err != nil {
			r.Err = fmt.Errorf("natsexec: shard %d: request: %w", t.Shard, err)
			return r
		}
		r.Bytes += int64(len(reply.Data))
		r.Worker = reply.Header.Get(wire.HeaderWorker)
		if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
			if code == wire.CodeDeclined && declines < maxDeclines {
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
		want := proto.Label{Job: t.Job, Iteration: t.Iteration, Shard: t.Shard, ShardChecksum: refs[t.Shard].digest, ModelDigest: md.digest, Nonce: req.Nonce}
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
func (e *Executor) request(ctx context.Context, subject, direct string, req *wire.TaskRequest, sent *int64) (*nats.Msg, error) {
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
	e.goRoutine(func() { e.watch(ctx, direct, started, cancel) })
	reply, err := e.nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
			return nil, cause
		}
		return nil, err
	}
	return reply, nil
}

// frozenError says the worker that holds a task has left its PINGs
// unanswered for Config.FrozenAfter.
type frozenError struct {
	id   string
	for_ time.Duration
}

func (e *frozenError) Error() string {
	return fmt.Sprintf("worker %s is frozen (no answer to $SRV.PING for %v)", e.id, e.for_.Round(time.Millisecond))
}

// watch probes the worker holding a task every ProbeEvery until ctx ends,
// and cancels ctx with a *vanishedError when no one answers its PING, or
// a *frozenError when no PING was answered for FrozenAfter.
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
	subj, err := micro.ControlSubject(micro.PingVerb, wire.ServiceName, id)
	if err != nil {
		return
	}
	tick := time.NewTicker(e.cfg.ProbeEvery)
	defer tick.Stop()
	answered := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, pcancel := context.WithTimeout(ctx, max(e.cfg.PingWait, e.cfg.ProbeEvery))
		_, err := e.nc.RequestWithContext(pctx, subj, nil)
		pcancel()
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			cancel(&vanishedError{id: id})
			return
		case err == nil:
			answered = time.Now()
		case ctx.Err() == nil && time.Since(answered) >= e.cfg.FrozenAfter:
			cancel(&frozenError{id, time.Since(answered)})
			return
		}
	}
}

// decode reads the partial a reply carries or names into r.Partial,
// after checking that its label is want; an error from a check of the
// partial (not of its transfer) is a *rejectedError.
func (e *Executor) decode(ctx context.Context, reply *nats.Msg, want proto.Label, r *wire.Result) error {
	t := r.Task
	for _, f := range []struct {
		h string
		d *time.Duration
	}{{wire.HeaderComputeNanos, &r.Compute}, {wire.HeaderModelNanos, &r.Model}, {wire.HeaderEncodeNanos, &r.Encode}} {
		if ns, err := strconv.ParseInt(reply.Header.Get(f.h), 10, 64); err == nil {
			*f.d = time.Duration(ns)
		}
	}
	t0 := time.Now()
	defer func() { r.Fetch = time.Since(t0) }()
	if nb, err := strconv.ParseInt(reply.Header.Get(wire.HeaderFetchBytes), 10, 64); err == nil {
		r.Bytes += nb
	}
	label, err := proto.ParseLabel(reply.Header.Get(wire.HeaderPartialOf))
	if err != nil {
		return &rejectedError{err: err}
	}
	if err := label.Check(want); err != nil {
		return &rejectedError{err: err}
	}
	data := reply.Data
	var p *factor.Partial
	if blob := reply.Header.Get(wire.HeaderBlob); blob != "" {
		size, err := strconv.Atoi(reply.Header.Get(wire.HeaderBlobSize))
		if err != nil || size < 0 || size > 1<<40 {
			return reject("blob size %q", reply.Header.Get(wire.HeaderBlobSize))
		}
		if data, err = wire.FetchBlob(ctx, e.nc, blob, size, wire.AlignedBuffer(size)); err != nil {
			return fmt.Errorf("fetch partial: %w", err)
		}
		wire.DropBlob(e.nc, blob)
		r.Bytes += int64(len(data))
		if crc := wire.CRC(data); crc != reply.Header.Get(wire.HeaderBlobCRC) {
			return reject("partial blob has CRC %s, reply says %s", crc, reply.Header.Get(wire.HeaderBlobCRC))
		}
		if p, err = wire.DecodeRawPartial(data); err != nil {
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
		if meta.Worker != "" && meta.Worker != r.Worker {
			return reject("partial names worker %s, its reply worker %s", meta.Worker, r.Worker)
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
