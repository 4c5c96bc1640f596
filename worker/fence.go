package worker

import (
	"context"
	"crypto/subtle"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/worker/wire/proto"
)

// Fencing (proto's package doc): every owners request carries the job's
// epoch and the epoch's token, the job's record in KV the epoch and
// proto.FenceOf(token). checkFence is the rule, apart from where the
// record is read, so that it is tested alone (fence_test.go).

// leaseCatchUp is how long a worker reads the job's record again when it
// names an older epoch than a load's (a KV replica that has not caught
// up with the coordinator's write yet), every leaseRetry. Only a load
// waits: an end or a forgery is answered at once.
const (
	leaseCatchUp = 2 * time.Second
	leaseRetry   = 100 * time.Millisecond
)

// checkFence decides on request r for a job this worker is at epoch
// epoch of, with token (have false: the worker holds nothing of the job).
// It returns whether r takes the worker to r's epoch (a load that opens
// it, or an end of it), or why r is refused:
//
//   - no epoch (< 1) or no token: refused (a coordinator of an older
//     release, or a forgery);
//   - an older epoch than the worker's: refused (a coordinator that the
//     job was taken from, or a replay);
//   - the worker's epoch with another token: refused (a forgery);
//   - the worker's epoch and token: accepted, but an end only when the
//     record still names them (only the holder of the lease ends a job);
//   - a newer epoch, or a job the worker does not hold: only a load or
//     an end, and only when the record names r's epoch and FenceOf its
//     token; anything else is refused. A worker never takes up an epoch
//     that no coordinator wrote.
//
// lease reads the job's lease from its record, read again for a moment
// while it names an older epoch than want (a load's epoch; 0 for an
// end).
func checkFence(have bool, epoch int, token string, r *proto.Request, lease func(want int) (proto.Lease, error)) (bool, error) {
	switch {
	case r.Epoch < 1 || r.Fence == "":
		return false, fmt.Errorf("worker: job %s: %s without an epoch and its fence (a coordinator of an older release, or a forgery): refused", r.Job, r.Op)
	case have && r.Epoch < epoch:
		return false, fmt.Errorf("worker: job %s: %s of epoch %d, the job is at epoch %d here: refused", r.Job, r.Op, r.Epoch, epoch)
	case have && r.Epoch == epoch:
		if subtle.ConstantTimeCompare([]byte(r.Fence), []byte(token)) != 1 {
			return false, fmt.Errorf("worker: job %s: %s of epoch %d with another fence than the epoch's: refused", r.Job, r.Op, r.Epoch)
		}
		if r.Op != proto.OpEnd {
			return false, nil
		}
	case r.Op != proto.OpLoad && r.Op != proto.OpEnd:
		if !have {
			return false, fmt.Errorf("worker: job %s epoch %d: no blocks loaded here", r.Job, r.Epoch)
		}
		return false, fmt.Errorf("worker: job %s: %s of epoch %d, which no load opened here (the job is at epoch %d)", r.Job, r.Op, r.Epoch, epoch)
	}
	want := 0
	if r.Op == proto.OpLoad {
		want = r.Epoch
	}
	l, err := lease(want)
	if err != nil {
		return false, fmt.Errorf("worker: job %s: %s of epoch %d: its record: %w", r.Job, r.Op, r.Epoch, err)
	}
	if l.Epoch != r.Epoch || l.Fence != proto.FenceOf(r.Fence) {
		return false, fmt.Errorf("worker: job %s: %s of epoch %d, the job's record names epoch %d (or another fence): only the coordinator that holds the job moves or ends its workers: refused",
			r.Job, r.Op, r.Epoch, l.Epoch)
	}
	return !have || r.Epoch > epoch, nil
}

// lease reads the lease of job from its record in the worker's jobs
// bucket, again for up to leaseCatchUp while it names an older epoch
// than want.
func (w *Worker) lease(ctx context.Context, job string, want int) (proto.Lease, error) {
	kv, err := w.jobsKV(ctx)
	if err != nil {
		return proto.Lease{}, err
	}
	deadline := time.Now().Add(leaseCatchUp)
	for {
		e, err := kv.Get(ctx, job)
		if err != nil {
			return proto.Lease{}, fmt.Errorf("key %s of bucket %s: %w", job, w.cfg.JobsBucket, err)
		}
		l, err := proto.RecordLease(e.Value())
		if err != nil || l.Epoch >= want || time.Now().After(deadline) {
			return l, err
		}
		t := time.NewTimer(leaseRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return l, nil
		case <-t.C:
		}
	}
}

// jobsKV returns the worker's jobs bucket (JetStream KV).
func (w *Worker) jobsKV(ctx context.Context) (jetstream.KeyValue, error) {
	w.kmu.Lock()
	defer w.kmu.Unlock()
	if w.kv != nil {
		return w.kv, nil
	}
	kv, err := w.js.KeyValue(ctx, w.cfg.JobsBucket)
	if err != nil {
		return nil, fmt.Errorf("jobs bucket %s (--bucket-jobs): %w", w.cfg.JobsBucket, err)
	}
	w.kv = kv
	return kv, nil
}

// sameToken compares a request's token with the epoch's in constant time.
func sameToken(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
