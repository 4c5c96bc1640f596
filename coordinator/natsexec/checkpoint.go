package natsexec

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

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
	e.mu.Lock()
	if st.Iteration == 0 {
		delete(e.resumes, st.Job) // a new run
	} else if r := e.resumes[st.Job]; r != nil {
		st.Loop = r.rec // a resumed run: its resume point stays named
	}
	e.mu.Unlock()
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
	// ls's points live in the loop's buffers: encoded now, when this
	// iteration is a resume point (resumeDue; always the last).
	var lp *loopPoints
	if ls != nil && (st.Status != "running" || e.resumeDue(st.Job, time.Now())) {
		var err error
		if lp, err = encodeLoop(ls); err != nil {
			return fmt.Errorf("natsexec: commit job %s iteration %d: %w", st.Job, st.Iteration, err)
		}
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
	e.mu.Lock()
	last := e.resumes[st.Job]
	e.mu.Unlock()
	var rp *resumePoint
	switch {
	case lp != nil:
		if rp, err = e.persistLoop(ctx, st, lp); err != nil {
			return err
		}
		st.Loop = rp.rec
	case last != nil:
		st.Loop = last.rec
	default:
		st.Loop = nil
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
	if rp != nil {
		e.resumes[st.Job] = rp
	}
	e.mu.Unlock()
	if rp != nil && last != nil {
		e.dropResume(ctx, st.Job, last.rec, st.Iteration)
	}
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
// buckets, or a nil state when the job has none. A checkpoint whose
// objects are gone, fail their digest or do not decode is logged and
// returned without a model: the job starts afresh, and since a fit is a
// function of its data and parameters it ends bitwise where the lost one
// would have (a read that fails otherwise, e.g. a timeout, is an error).
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
	var ls *factor.LoopState
	lost := func(err error) (*coordinator.JobState, *factor.Model, *factor.LoopState, error) {
		if !errors.Is(err, errUnreadable) {
			return nil, nil, nil, err
		}
		e.log.Warn("the job's checkpoint does not read: it starts afresh (to the same bits)", "job", job, "error", err)
		return st, nil, nil, nil
	}
	if lc := st.Loop; lc != nil {
		// A fit with loop state goes on from its last resume point.
		if ls, err = e.loadLoop(ctx, job, lc); err != nil {
			return lost(err)
		}
		st.Iteration, st.ModelIteration, st.ModelObject, st.ModelDigest = lc.Iteration, lc.ModelIteration, lc.ModelObject, lc.ModelDigest
		st.LogLik, st.SumX = lc.LogLik, lc.SumX
	}
	md, data, err := e.loadModel(ctx, job, "model", st.ModelObject, st.ModelDigest)
	if err != nil {
		return lost(err)
	}
	// The next iteration runs on this version: no need to store it again.
	e.mu.Lock()
	e.models[job] = objRef{name: st.ModelObject, digest: st.ModelDigest, version: st.Iteration, size: int64(len(data))}
	delete(e.resumes, job)
	if st.Loop != nil {
		e.resumes[job] = &resumePoint{rec: st.Loop, at: time.Now()}
	}
	e.mu.Unlock()
	return st, md, ls, nil
}

// loadModel reads the model object name of a job's checkpoint (what it
// is: "model", "loop point") and checks its digest.
func (e *Executor) loadModel(ctx context.Context, job, what, name, digest string) (*factor.Model, []byte, error) {
	data, err := e.loadObject(ctx, job, what, name, digest)
	if err != nil {
		return nil, nil, err
	}
	mf, err := arrowio.DecodeModel(data)
	if err != nil {
		return nil, nil, fmt.Errorf("natsexec: job %s: %w: %s %s: %w", job, errUnreadable, what, name, err)
	}
	return mf.Model, data, nil
}

// loadObject reads the object name of a job's checkpoint (what it is)
// and checks its digest.
func (e *Executor) loadObject(ctx context.Context, job, what, name, digest string) ([]byte, error) {
	data, err := e.obs.GetBytes(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		err = fmt.Errorf("%w: %w", errUnreadable, err)
	}
	if err != nil {
		return nil, fmt.Errorf("natsexec: job %s: %s %s: %w", job, what, name, err)
	}
	sum := sha256.Sum256(data)
	if d := hex.EncodeToString(sum[:]); d != digest {
		return nil, fmt.Errorf("natsexec: job %s: %w: %s %s has digest %s, state says %s", job, errUnreadable, what, name, d, digest)
	}
	return data, nil
}

// errUnreadable marks a checkpoint object that is gone, fails its digest
// or does not decode (Resume then starts the job afresh).
var errUnreadable = errors.New("the checkpoint object is lost or corrupt")

// loopPoints is a factor.LoopState encoded for storing: its scalars and
// its points as Arrow model files (nil where it has none), and when
// and at what cost it was encoded.
type loopPoints struct {
	state       []byte
	cycle, best []byte
	at          time.Time
	encode      time.Duration
}

// resumePoint is a job's last resume point (Executor.resumes): its
// record, when it was taken and what taking it cost.
type resumePoint struct {
	rec  *coordinator.LoopCheckpoint
	at   time.Time
	cost time.Duration
}

// resumeEvery is how many times its cost a fit runs between two resume
// points: storing the loop states (each as large as two models, stored
// beside the commit's model, whose version then stays) takes about a
// twentieth of the fit's time, and a resumed fit redoes at most twenty
// times a point's cost (the dependency graph of docs/quality.md at 20 %,
// 125 iterations on an embedded cluster with --store: 15 points at 10
// times their cost made the fit 12 % slower).
const resumeEvery = 20

// resumeDue reports whether a commit at now is a resume point of the
// job: its first, or resumeEvery times the last one's cost after it.
func (e *Executor) resumeDue(job string, now time.Time) bool {
	e.mu.Lock()
	last := e.resumes[job]
	e.mu.Unlock()
	every := e.cfg.ResumeEvery
	if every == 0 {
		every = resumeEvery
	}
	return last == nil || every < 0 || now.Sub(last.at) >= time.Duration(every*float64(last.cost))
}

// encodeLoop encodes ls's points.
func encodeLoop(ls *factor.LoopState) (*loopPoints, error) {
	t0 := time.Now()
	lp := &loopPoints{state: ls.State, at: t0}
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
	lp.encode = time.Since(t0)
	return lp, nil
}

// loopObject names a point of the loop state of version v of a job's
// model (beside wire.ModelObject's).
func loopObject(job string, v int, point string) string {
	return wire.ModelObject(job, v) + "." + point
}

// persistLoop stores lp's points as the objects of the version that st
// commits (its model is stored) and returns the resume point.
func (e *Executor) persistLoop(ctx context.Context, st *coordinator.JobState, lp *loopPoints) (*resumePoint, error) {
	t0 := time.Now()
	lc := &coordinator.LoopCheckpoint{Iteration: st.Iteration, ModelIteration: st.ModelIteration, ModelObject: st.ModelObject,
		ModelDigest: st.ModelDigest, LogLik: st.LogLik, SumX: st.SumX}
	for _, p := range []struct {
		point        string
		data         []byte
		name, digest *string
	}{{"state", lp.state, &lc.StateObject, &lc.StateDigest}, {"cycle", lp.cycle, &lc.CycleObject, &lc.CycleDigest}, {"best", lp.best, &lc.BestObject, &lc.BestDigest}} {
		if p.data == nil {
			continue
		}
		name := loopObject(st.Job, st.Iteration, p.point)
		digest, err := e.putDigest(ctx, name, p.data)
		if err != nil {
			return nil, fmt.Errorf("natsexec: store loop state: %w", err)
		}
		*p.name, *p.digest = name, digest
	}
	rp := &resumePoint{rec: lc, at: lp.at, cost: lp.encode + time.Since(t0)}
	e.log.Debug("resume point stored", "job", st.Job, "iteration", st.Iteration, "encode", lp.encode, "cost", rp.cost)
	return rp, nil
}

// dropResume deletes the objects of a job's resume point old once the
// commit of version v named a newer one: its loop points, and its model
// unless a straggler may still read it (versions v and v-1 stay, as
// persistModel keeps them).
func (e *Executor) dropResume(ctx context.Context, job string, old *coordinator.LoopCheckpoint, v int) {
	names := []string{old.StateObject, old.CycleObject, old.BestObject}
	if old.Iteration <= v-2 {
		names = append(names, old.ModelObject)
	}
	for _, name := range names {
		if name == "" {
			continue
		}
		if err := e.obs.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			e.log.Warn("delete an old resume point", "object", name, "error", err)
		}
	}
}

// keptForResume reports whether model version v of a job is its resume
// point's (persistModel keeps it).
func (e *Executor) keptForResume(job string, v int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.resumes[job]
	return r != nil && r.rec.Iteration == v
}

// loadLoop reads the loop state of a job's resume point.
func (e *Executor) loadLoop(ctx context.Context, job string, lc *coordinator.LoopCheckpoint) (*factor.LoopState, error) {
	ls := &factor.LoopState{Iteration: lc.Iteration}
	var err error
	if ls.State, err = e.loadObject(ctx, job, "loop state", lc.StateObject, lc.StateDigest); err != nil {
		return nil, err
	}
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
