package natsexec

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// pendingCommit is a commit whose model and state are being stored in the
// background; err is set before done is closed.
type pendingCommit struct {
	done chan struct{}
	err  error
}

// manifestObject is the Object Store name of a job's manifest.
func manifestObject(job string) string { return "manifests/" + job }

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
		st.ManifestObject = manifestObject(st.Job)
		if err := e.putBytes(ctx, st.ManifestObject, data); err != nil {
			return fmt.Errorf("natsexec: manifest of job %s: %w", st.Job, err)
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
		rev, err = wire.CompareAndSet(ctx, e.kv, st.Job, body, 0)
	case err != nil:
	default:
		rev, err = wire.CompareAndSet(ctx, e.kv, st.Job, body, old.Revision())
	}
	if err != nil && !errors.Is(err, wire.ErrLostRace) {
		err = e.storeErr(ctx, wire.OpWriteRecord, wire.KindKV, st.Job, err)
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
func (e *Executor) Commit(ctx context.Context, st *coordinator.JobState, md *factor.Model, ls *factor.LoopState) error {
	if err := e.waitCommit(st.Job); err != nil {
		return err
	}
	// ls's points live in the loop's buffers: encoded now.
	lp, err := encodeLoop(ls)
	if err != nil {
		return fmt.Errorf("natsexec: commit job %s iteration %d: %w", st.Job, st.Iteration, err)
	}
	snap := e.serveModel(st.Job, st.Iteration, md)
	if st.Status != "running" {
		return e.persistCommit(ctx, st, snap, lp)
	}
	// The caller changes st and md after Commit returns: store copies.
	stc := *st
	pc := &pendingCommit{done: make(chan struct{})}
	e.mu.Lock()
	e.commits[st.Job] = pc
	e.mu.Unlock()
	persist := func() {
		pc.err = e.persistCommit(context.WithoutCancel(ctx), &stc, snap, lp)
		close(pc.done)
	}
	if !e.goRoutine(persist) {
		persist()
	}
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
func (e *Executor) persistCommit(ctx context.Context, st *coordinator.JobState, md *factor.Model, lp *loopPoints) error {
	name, digest, _, err := e.persistModel(ctx, st.Job, st.Iteration, md, st.Params)
	if err != nil {
		return err
	}
	st.ModelObject, st.ModelDigest = name, digest
	if st.Loop, err = e.persistLoop(ctx, st.Job, st.Iteration, lp); err != nil {
		return err
	}
	body, err := stateJSON(st)
	if err != nil {
		return err
	}
	e.mu.Lock()
	rev := e.kvRev[st.Job]
	e.mu.Unlock()
	nrev, err := wire.CompareAndSet(ctx, e.kv, st.Job, body, rev)
	if errors.Is(err, wire.ErrLostRace) {
		return fmt.Errorf("natsexec: commit job %s iteration %d: another coordinator took the job over: %w", st.Job, st.Iteration, err)
	}
	if err != nil {
		return fmt.Errorf("natsexec: commit job %s iteration %d: %w", st.Job, st.Iteration, e.storeErr(ctx, wire.OpWriteRecord, wire.KindKV, st.Job, err))
	}
	e.mu.Lock()
	e.kvRev[st.Job] = nrev
	e.mu.Unlock()
	if err := e.nc.Publish(wire.CommittedSubject(e.cfg.Prefix, st.Job), body); err != nil {
		e.log.Warn("announce commit", "job", st.Job, "iteration", st.Iteration, "error", err)
	}
	return nil
}

// CorruptRecordError is a job record in the KV bucket that does not
// decode: nothing can resume from it, and the error says how to start
// the job again.
type CorruptRecordError struct {
	Job, Bucket string
	Revision    uint64
	Err         error
}

func (e *CorruptRecordError) Error() string {
	return fmt.Sprintf("natsexec: job %s: its record (key %s of KV bucket %s, revision %d) is corrupt: %v; "+
		"no run can resume from it: delete it ('nats kv del %s %s') and run the job again without --resume, or give it another --job name",
		e.Job, e.Job, e.Bucket, e.Revision, e.Err, e.Bucket, e.Job)
}

func (e *CorruptRecordError) Unwrap() error { return e.Err }

// State returns the job state stored in the KV bucket.
func (e *Executor) State(ctx context.Context, job string) (*coordinator.JobState, uint64, error) {
	ent, err := e.kv.Get(ctx, job)
	if err != nil {
		return nil, 0, fmt.Errorf("natsexec: job %s: %w", job, err)
	}
	var st coordinator.JobState
	if err := json.Unmarshal(ent.Value(), &st); err != nil {
		return nil, 0, &CorruptRecordError{Job: job, Bucket: e.cfg.KVBucket, Revision: ent.Revision(), Err: err}
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
	if o := st.Owners; o != nil && o.CRCObject != "" && o.KCRC == nil && o.DCRC == nil {
		data, err := e.obs.GetBytes(ctx, o.CRCObject)
		var crcs proto.CRCLists
		if err == nil {
			err = json.Unmarshal(data, &crcs)
		}
		if err != nil {
			return nil, 0, fmt.Errorf("natsexec: job %s: checkpoint CRCs %s: %w", job, o.CRCObject, err)
		}
		o.KCRC, o.DCRC = crcs.KCRC, crcs.DCRC
	}
	if o := st.Owners; o != nil && o.Previous != nil {
		// The checkpoint before the last: without its CRC lists nothing
		// can fall back to it (a fall back then goes to the start).
		name := proto.CRCObject(job, o.Previous.Version)
		data, err := e.obs.GetBytes(ctx, name)
		var crcs proto.CRCLists
		if err == nil {
			err = json.Unmarshal(data, &crcs)
		}
		if err != nil {
			e.log.Warn("the CRC lists of the checkpoint before the last do not read", "job", job, "object", name, "error", err)
		} else {
			o.Previous.KCRC, o.Previous.DCRC = crcs.KCRC, crcs.DCRC
		}
	}
	return &st, ent.Revision(), nil
}

// Resume returns the job's state and its committed model from the
// buckets, or a nil state when the job has none.
func (e *Executor) Resume(ctx context.Context, job string) (*coordinator.JobState, *factor.Model, *factor.LoopState, error) {
	st, _, err := e.State(ctx, job)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil, nil, nil
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if st.ModelObject == "" {
		return st, nil, nil, nil
	}
	md, data, err := e.loadModel(ctx, job, "model", st.ModelObject, st.ModelDigest)
	if err != nil {
		return nil, nil, nil, err
	}
	ls, err := e.loadLoop(ctx, job, st)
	if err != nil {
		return nil, nil, nil, err
	}
	// The next iteration runs on this version: no need to store it again.
	e.mu.Lock()
	e.models[job] = objRef{name: st.ModelObject, digest: st.ModelDigest, version: st.Iteration, size: int64(len(data))}
	e.mu.Unlock()
	return st, md, ls, nil
}

// loadModel reads the model object name of a job's checkpoint (what it
// is: "model", "loop point") and checks its digest.
func (e *Executor) loadModel(ctx context.Context, job, what, name, digest string) (*factor.Model, []byte, error) {
	data, err := e.obs.GetBytes(ctx, name)
	if err != nil {
		return nil, nil, fmt.Errorf("natsexec: job %s: %s %s: %w", job, what, name, err)
	}
	sum := sha256.Sum256(data)
	if d := hex.EncodeToString(sum[:]); d != digest {
		return nil, nil, fmt.Errorf("natsexec: job %s: %s %s has digest %s, state says %s", job, what, name, d, digest)
	}
	mf, err := arrowio.DecodeModel(data)
	if err != nil {
		return nil, nil, fmt.Errorf("natsexec: job %s: %s %s: %w", job, what, name, err)
	}
	return mf.Model, data, nil
}

// loopPoints is a factor.LoopState encoded for storing: its scalars and
// its points as Arrow model files (nil where it has none).
type loopPoints struct {
	state       []byte
	cycle, best []byte
}

// encodeLoop encodes ls's points (nil for nil).
func encodeLoop(ls *factor.LoopState) (*loopPoints, error) {
	if ls == nil {
		return nil, nil
	}
	lp := &loopPoints{state: ls.State}
	for _, p := range []struct {
		md  *factor.Model
		out *[]byte
	}{{ls.Cycle, &lp.cycle}, {ls.Best, &lp.best}} {
		if p.md == nil {
			continue
		}
		data, err := arrowio.EncodeModel(&arrowio.ModelFile{Model: p.md})
		if err != nil {
			return nil, fmt.Errorf("encode loop state: %w", err)
		}
		*p.out = data
	}
	return lp, nil
}

// loopObject names a point of the loop state of version v of a job's
// model (beside wire.ModelObject's).
func loopObject(job string, v int, point string) string {
	return wire.ModelObject(job, v) + "." + point
}

// persistLoop stores lp's points as the objects of version v of the job
// (deleting version v-2's, as persistModel does models) and returns the
// record that names them; nil for nil.
func (e *Executor) persistLoop(ctx context.Context, job string, v int, lp *loopPoints) (*coordinator.LoopCheckpoint, error) {
	if v >= 2 {
		for _, point := range []string{"cycle", "best"} {
			if err := e.obs.Delete(ctx, loopObject(job, v-2, point)); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				e.log.Warn("delete old loop state", "object", loopObject(job, v-2, point), "error", err)
			}
		}
	}
	if lp == nil {
		return nil, nil
	}
	lc := &coordinator.LoopCheckpoint{State: lp.state}
	for _, p := range []struct {
		point        string
		data         []byte
		name, digest *string
	}{{"cycle", lp.cycle, &lc.CycleObject, &lc.CycleDigest}, {"best", lp.best, &lc.BestObject, &lc.BestDigest}} {
		if p.data == nil {
			continue
		}
		name := loopObject(job, v, p.point)
		if err := e.putBytes(ctx, name, p.data); err != nil {
			return nil, fmt.Errorf("natsexec: store loop state: %w", err)
		}
		sum := sha256.Sum256(p.data)
		*p.name, *p.digest = name, hex.EncodeToString(sum[:])
	}
	return lc, nil
}

// loadLoop reads the loop state a job's checkpoint names (nil: none).
func (e *Executor) loadLoop(ctx context.Context, job string, st *coordinator.JobState) (*factor.LoopState, error) {
	lc := st.Loop
	if lc == nil {
		return nil, nil
	}
	ls := &factor.LoopState{Iteration: st.Iteration, State: lc.State}
	var err error
	if lc.CycleObject != "" {
		if ls.Cycle, _, err = e.loadModel(ctx, job, "loop point", lc.CycleObject, lc.CycleDigest); err != nil {
			return nil, err
		}
	}
	if lc.BestObject != "" {
		if ls.Best, _, err = e.loadModel(ctx, job, "loop point", lc.BestObject, lc.BestDigest); err != nil {
			return nil, err
		}
	}
	return ls, nil
}

// stateJSON is the KV value of a job state: without the manifest when it
// is kept as an object.
func stateJSON(st *coordinator.JobState) ([]byte, error) {
	v := *st
	if v.ManifestObject != "" {
		v.Manifest = nil
	}
	if o := v.Owners; o != nil && o.CRCObject != "" {
		// The CRC lists are in their object (see OwnersCheckpoint).
		oc := *o
		oc.KCRC, oc.DCRC = nil, nil
		v.Owners = &oc
	}
	body, err := json.Marshal(&v)
	if err != nil {
		return nil, fmt.Errorf("natsexec: job state: %w", err)
	}
	return body, nil
}

// LatestJob returns the state of the job last updated in the KV bucket
// (with its manifest), or nil when the bucket holds none.
func (e *Executor) LatestJob(ctx context.Context) (*coordinator.JobState, error) {
	keys, err := e.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("natsexec: list jobs: %w", err)
	}
	var latest *coordinator.JobState
	for key := range keys.Keys() {
		ent, err := e.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("natsexec: job %s: %w", key, err)
		}
		var st coordinator.JobState
		if json.Unmarshal(ent.Value(), &st) != nil {
			continue
		}
		if latest == nil || st.Updated.After(latest.Updated) {
			latest = &st
		}
	}
	if latest == nil {
		return nil, nil
	}
	st, _, err := e.State(ctx, latest.Job)
	return st, err
}
