package natsexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/emsf/emsf/coordinator"
	"github.com/emsf/emsf/coordinator/owners"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// The owners exchange (`emsf fit --exchange owners`; its messages in
// worker/wire/proto, its decisions in coordinator/owners): FitOwners
// adapts the sequencer of package owners to NATS. Its Cluster asks the
// workers on their owners subjects (wire.OwnSubject) and guards each
// phase with $SRV.PING probes of the placed workers and the connection's
// reconnect count (ownersCluster.Guard); its Store is the job's KV key
// (compare-and-set on this coordinator's last revision: the lease) and
// the Object Store bucket; its Model is the coordinator's md, stored as
// checkpoint 0 when the job starts and read back from the last
// checkpoint when it ends. Everything that decides (plan, placement,
// grid, backups, rebalance, checks, rollback and replay) is package
// owners', tested there with a fake cluster and store.
//
// Memory: the coordinator holds the caller's model (written out at the
// start, read back at the end) and the shards it cut (uploaded once); no
// iteration reads either, and the sequencer itself holds metadata only.

// OwnersOptions configure FitOwners: the sequencer's (owners.Options;
// its Logger is the executor's) and the NATS side's.
type OwnersOptions struct {
	owners.Options
	Job string
	// WaitWorkers is how long a placement waits for workers (default
	// 30s; MinWorkers for the first).
	WaitWorkers time.Duration
	// Params and Manifest are recorded in the job state (KV), with the
	// last checkpoint; Resume goes on from that checkpoint when the job
	// has one (the caller checks first that params and data are the
	// job's: coordinator.CheckResume), md being the same initial model.
	Params   map[string]string
	Manifest *shard.Manifest
}

// OwnersReport is one committed iteration of FitOwners.
type OwnersReport = owners.Report

// GridCols is p_c of the grid that a group of p workers forms over q
// column cells (owners.GridCols).
func GridCols(p, q int) int { return owners.GridCols(p, q) }

// FitOwners fits md (the initial model: random, or a warm start) to the
// shards with the owners exchange and leaves the fitted model in md. It
// is bitwise factor.Fit with the same GroupNNZ, for any number of
// workers, placement and rollbacks.
func (e *Executor) FitOwners(ctx context.Context, md *factor.Model, shards []*shard.Shard, opt OwnersOptions) (factor.FitResult, error) {
	if opt.Job == "" {
		return factor.FitResult{}, errors.New("natsexec: owners: no job name")
	}
	if md.Precision == factor.Float32 {
		// Checkpoint 0 holds the rounded factors the loop starts from.
		md.RoundFactors()
	}
	// Today's path: the coordinator cut the shards. It describes them
	// (the sequencer plans from these lines only), uploads them and the
	// row groups' row lists, and keeps md for checkpoint 0 and the end.
	shard.Describe(shards)
	groups, rows := shard.CutDGroups(shards, md.Tie)
	if _, err := e.Load(ctx, opt.Job, shards); err != nil {
		return factor.FitResult{}, err
	}
	for g := range groups {
		data := wire.EncodeCols(rows[g], nil)
		if err := e.putOwners(ctx, proto.RowsObject(opt.Job, g), data); err != nil {
			return factor.FitResult{}, err
		}
		groups[g].RowsCRC = wire.CRC(data)
	}
	job := &owners.Job{Name: opt.Job, Shards: make([]shard.Info, len(shards)), Groups: groups}
	for k, sh := range shards {
		job.Shards[k] = sh.Info
	}
	hdr := &factor.Model{N: md.N, M: md.M, U: md.U, Tie: md.Tie, Iteration: md.Iteration, LogLik: md.LogLik, WKL: md.WKL,
		Seed: md.Seed, Precision: md.Precision}
	held := make(map[string]*shard.Shard, len(shards))
	for _, sh := range shards {
		held[proto.ShardObject(sh.Checksum)] = sh
	}
	res, err := e.runOwners(ctx, job, hdr, &heldModel{e: e, md: md, rows: rows}, opt, held)
	md.Iteration, md.LogLik, md.WKL = hdr.Iteration, hdr.LogLik, hdr.WKL
	return res, err
}

// RunOwners fits a job given as metadata (owners.Job: its shard objects
// and row lists stored already, by whoever built them) with the owners
// exchange; model gives checkpoint 0 and takes the fitted model out, and
// hdr is the model's header, left as the fitted one's (owners.Run). It is
// what FitOwners runs once it has described, cut and stored the shards
// it holds, and the entry of a fit whose coordinator holds no shard.
func (e *Executor) RunOwners(ctx context.Context, job *owners.Job, hdr *factor.Model, model owners.Model, opt OwnersOptions) (factor.FitResult, error) {
	return e.runOwners(ctx, job, hdr, model, opt, nil)
}

// runOwners is RunOwners; held are the shards the coordinator holds, by
// object name (it stores again one that a worker found corrupt).
func (e *Executor) runOwners(ctx context.Context, job *owners.Job, hdr *factor.Model, model owners.Model, opt OwnersOptions, held map[string]*shard.Shard) (factor.FitResult, error) {
	if opt.Job == "" || job.Name != opt.Job {
		return factor.FitResult{}, fmt.Errorf("natsexec: owners: job %q, options of job %q", job.Name, opt.Job)
	}
	if opt.WaitWorkers <= 0 {
		opt.WaitWorkers = 30 * time.Second
	}
	if job.Bucket == "" {
		job.Bucket = e.cfg.ObjectBucket
	}
	if job.JobsBucket == "" {
		job.JobsBucket = e.cfg.KVBucket
	}
	st := &ownersStore{e: e, job: opt.Job, params: opt.Params, manifest: opt.Manifest, groupNNZ: opt.GroupNNZ, held: held}
	sopt := opt.Options
	sopt.Logger = e.log
	return owners.Run(ctx, &ownersCluster{e: e, wait: opt.WaitWorkers, job: opt.Job}, st, model, job, hdr, sopt)
}

func (e *Executor) putOwners(ctx context.Context, name string, data []byte) error {
	if _, err := wire.PutObject(ctx, e.obs, e.nc.MaxPayload(), name, data); err != nil {
		return fmt.Errorf("natsexec: owners: %w", e.storeErr(ctx, wire.OpStore, wire.KindObjects, name, err))
	}
	return nil
}

// ownersCluster is owners.Cluster on NATS.
type ownersCluster struct {
	e    *Executor
	wait time.Duration
	job  string

	mu       sync.Mutex
	admitted map[string]bool
	refused  map[string]string // why, as last logged
}

// Census waits until at least want admitted workers answer (at most the
// wait, then the fit ends), and through a restart of the server. A
// worker that answers $SRV.PING is admitted once it answers a hello on
// its own owners subject (admit). Of those, it returns the ones not
// behind a slow link (placeable).
func (c *ownersCluster) Census(ctx context.Context, want int) ([]string, error) {
	e := c.e
	deadline := time.Now().Add(c.wait)
	for {
		ids, err := e.Census(ctx)
		if err == nil {
			ids = c.admit(ctx, ids)
		}
		switch {
		case err != nil && e.nc.IsConnected():
			return nil, err
		case err != nil:
			// The server is away (restarting): wait for the reconnect.
			e.log.Warn("owners: waiting for the NATS server", "job", c.job, "status", e.nc.Status().String(), "until", deadline.Format(time.RFC3339))
		case len(ids) >= want:
			// Workers behind a slow link count as come, but are not
			// placed (placeable).
			return e.placeable(ctx, ids), nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return nil, owners.Fatal(fmt.Errorf("natsexec: owners: no NATS server within %v (--wait-workers): %w", c.wait, err))
			}
			return nil, owners.Fatal(fmt.Errorf("natsexec: owners: %d of %d workers answered within %v (--wait-workers)", len(ids), want, c.wait))
		}
		if err == nil {
			e.log.Warn("owners: waiting for workers", "job", c.job, "have", len(ids), "want", want, "until", deadline.Format(time.RFC3339))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(e.cfg.PingWait):
		}
	}
}

// admit returns the workers of ids that answered a hello on their own
// owners subject with this protocol and this coordinator's job bucket
// (asked once per worker, in parallel); the others are logged, once per
// reason.
func (c *ownersCluster) admit(ctx context.Context, ids []string) []string {
	c.mu.Lock()
	if c.admitted == nil {
		c.admitted, c.refused = map[string]bool{}, map[string]string{}
	}
	var ask []string
	for _, id := range ids {
		if !c.admitted[id] {
			ask = append(ask, id)
		}
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ask {
		wg.Go(func() {
			hctx, cancel := context.WithTimeout(ctx, max(2*c.e.cfg.PingWait, time.Second))
			defer cancel()
			rep, err := c.Ask(hctx, id, &proto.Request{Op: proto.OpHello})
			why := ""
			switch {
			case err != nil:
				why = err.Error()
			case rep.Error != "":
				why = rep.Error
			case rep.Worker != id || rep.Protocol != proto.Protocol:
				why = fmt.Sprintf("it answers as worker %q of owners protocol %d (this coordinator speaks %d)", rep.Worker, rep.Protocol, proto.Protocol)
			case rep.JobsBucket != c.e.cfg.KVBucket:
				why = fmt.Sprintf("it reads job records from bucket %s, this coordinator writes them to %s (emsf worker --bucket-jobs)", rep.JobsBucket, c.e.cfg.KVBucket)
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if why == "" {
				c.admitted[id] = true
			} else if c.refused[id] != why {
				c.refused[id] = why
				c.e.log.Warn("owners: a service answers the census as a worker but is not admitted", "job", c.job, "worker_id", id, "why", why)
			}
		})
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return !c.admitted[id] })
}

// Ask sends r to worker id on its owners subject. "No responders" from a
// worker that still answers $SRV.PING (a service that is not, or no
// longer, an owners worker) is owners.ErrUnreachable; from one that does
// not, the worker is gone.
func (c *ownersCluster) Ask(ctx context.Context, id string, r *proto.Request) (*proto.Reply, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("natsexec: %w", err)
	}
	msg, err := c.e.nc.RequestWithContext(ctx, wire.OwnSubject(c.e.cfg.Prefix, id), body)
	if errors.Is(err, nats.ErrNoResponders) && c.pings(ctx, id) {
		return nil, fmt.Errorf("natsexec: owners: worker %s answers $SRV.PING but nothing serves its owners subject: %w", id, owners.ErrUnreachable)
	}
	if err != nil {
		return nil, fmt.Errorf("natsexec: owners: %w", err)
	}
	var rep proto.Reply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return nil, fmt.Errorf("natsexec: owners: %w: %w", owners.ErrBadReply, err)
	}
	return &rep, nil
}

// pings reports whether worker id answers a $SRV.PING.
func (c *ownersCluster) pings(ctx context.Context, id string) bool {
	subj, err := micro.ControlSubject(micro.PingVerb, wire.ServiceName, id)
	if err != nil {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, max(c.e.cfg.PingWait, time.Second))
	defer cancel()
	_, err = c.e.nc.RequestWithContext(pctx, subj, nil)
	return err == nil
}

// Guard runs f with a context that ends, with the cause, as soon as a
// worker of ids leaves NATS or freezes (see watch) or the connection is
// re-established: a request that waits on another worker (a task
// gathering K from an owner, an owner pulling K̂ slices) fails within
// seconds, not at its lease.
func (c *ownersCluster) Guard(ctx context.Context, ids []string, f func(ctx context.Context) error) error {
	e := c.e
	gctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	for _, id := range ids {
		e.goRoutine(func() { e.watch(gctx, id, nil, cancel) })
	}
	e.goRoutine(func() { c.watchReconnect(gctx, cancel) })
	err := f(gctx)
	var gone *vanishedError
	var frozen *frozenError
	if cause := context.Cause(gctx); err != nil && (errors.As(cause, &gone) || errors.As(cause, &frozen) || errors.Is(cause, errReconnected)) {
		return fmt.Errorf("natsexec: owners: %w (while: %w)", cause, err)
	}
	return err
}

// errReconnected ends a phase during which the coordinator's connection
// was re-established: a request or reply in flight may have been lost
// with the server, so the phase is redone at once (from the last
// checkpoint) rather than after its lease.
var errReconnected = errors.New("the connection to the NATS server was re-established")

// watchReconnect cancels ctx with errReconnected when the connection's
// reconnect count moves, checking every ProbeEvery.
func (c *ownersCluster) watchReconnect(ctx context.Context, cancel context.CancelCauseFunc) {
	nc := c.e.nc
	was := nc.Stats().Reconnects
	tick := time.NewTicker(c.e.cfg.ProbeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if nc.Stats().Reconnects != was {
			cancel(errReconnected)
			return
		}
	}
}

func (c *ownersCluster) Strike(id string, err error)     { c.e.strike(id, err) }
func (c *ownersCluster) Quarantine(id string, err error) { c.e.quarantineNow(id, err) }
func (c *ownersCluster) Quarantined() []string           { return c.e.Quarantined() }

func (c *ownersCluster) Bytes() int64 {
	st := c.e.nc.Stats()
	return int64(st.InBytes + st.OutBytes)
}

// ownersStore is owners.Store on the KV and Object Store buckets: the
// record is the job's coordinator.JobState.
type ownersStore struct {
	e        *Executor
	job      string
	params   map[string]string
	manifest *shard.Manifest
	groupNNZ int
	body     []byte                  // the JSON last written
	held     map[string]*shard.Shard // the shards the coordinator holds, by object name
}

// Record reads the job's state; nil when it has none of the owners
// exchange.
func (s *ownersStore) Record(ctx context.Context) (*owners.Record, error) {
	st, _, err := s.e.State(ctx, s.job)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	o := st.Owners
	if o == nil {
		return nil, nil
	}
	r := &owners.Record{Status: st.Status, Version: st.Iteration, ModelIteration: st.ModelIteration, LogLik: orNaN(st.LogLik), SumX: st.SumX,
		Lease: o.Lease, CRCObject: o.CRCObject, ColBlocks: o.ColBlocks, Digests: o.Digests, Y: o.Y,
		Checkpoint: owners.Checkpoint{Version: o.Version, KCRC: o.KCRC, DCRC: o.DCRC, LogLik: orNaN(o.LogLik), ModelIteration: o.ModelIteration}}
	if p := o.Previous; p != nil && p.KCRC != nil {
		r.Previous = &owners.Checkpoint{Version: p.Version, KCRC: p.KCRC, DCRC: p.DCRC, LogLik: orNaN(p.LogLik), ModelIteration: p.ModelIteration}
	}
	return r, nil
}

func orNaN(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

func ptr(v float64) *float64 {
	if math.IsNaN(v) {
		return nil
	}
	return &v
}

// state is r as the job's state.
func (s *ownersStore) state(r *owners.Record) *coordinator.JobState {
	ck := r.Checkpoint
	st := &coordinator.JobState{Job: s.job, Params: s.params, Manifest: s.manifest, ReduceOrder: factor.ReduceOrder, GroupNNZ: s.groupNNZ,
		SumX: r.SumX, Status: r.Status, Iteration: r.Version, ModelIteration: r.ModelIteration, Updated: time.Now().UTC(), LogLik: ptr(r.LogLik),
		Owners: &coordinator.OwnersCheckpoint{Version: ck.Version, Lease: r.Lease, ColBlocks: r.ColBlocks, KCRC: ck.KCRC, DCRC: ck.DCRC,
			CRCObject: r.CRCObject, LogLik: ptr(ck.LogLik), ModelIteration: ck.ModelIteration, Digests: r.Digests, Y: r.Y}}
	if p := r.Previous; p != nil {
		st.Owners.Previous = &coordinator.OwnersPrevious{Version: p.Version, LogLik: ptr(p.LogLik), ModelIteration: p.ModelIteration}
	}
	return st
}

// Begin writes the first state of this run (Executor.Begin: it takes the
// job over from any earlier run, and stores the manifest as its object).
func (s *ownersStore) Begin(ctx context.Context, r *owners.Record) error {
	st := s.state(r)
	if err := s.e.Begin(ctx, st); err != nil {
		return err
	}
	body, err := stateJSON(st)
	s.body = body
	return err
}

// Save writes r, compare-and-set on this coordinator's last write.
func (s *ownersStore) Save(ctx context.Context, r *owners.Record) error {
	e := s.e
	st := s.state(r)
	if s.manifest != nil {
		st.ManifestObject = manifestObject(s.job) // Begin stored it
	}
	body, err := stateJSON(st)
	if err != nil {
		return err
	}
	e.mu.Lock()
	rev := e.kvRev[s.job]
	e.mu.Unlock()
	rev, err = wire.CompareAndSet(ctx, e.kv, s.job, body, rev)
	if errors.Is(err, wire.ErrLostRace) {
		return fmt.Errorf("natsexec: owners: job %s: its state changed since this coordinator's last write: %w: %w", s.job, owners.ErrLeaseLost, err)
	}
	if err != nil {
		return fmt.Errorf("natsexec: owners: job %s: %w", s.job, e.storeErr(ctx, wire.OpWriteRecord, wire.KindKV, s.job, err))
	}
	e.mu.Lock()
	e.kvRev[s.job] = rev
	e.mu.Unlock()
	s.body = body
	return nil
}

// Announce publishes the state last written on the job's committed
// subject.
func (s *ownersStore) Announce(r *owners.Record) {
	if err := s.e.nc.Publish(wire.CommittedSubject(s.e.cfg.Prefix, s.job), s.body); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		s.e.log.Warn("announce commit", "job", s.job, "iteration", r.Version, "error", err)
	}
}

func (s *ownersStore) Put(ctx context.Context, name string, data []byte) error {
	return s.e.putOwners(ctx, name, data)
}

// Repair stores a shard object again from the shard the coordinator
// holds (FitOwners); a fit of a job built elsewhere holds none.
func (s *ownersStore) Repair(ctx context.Context, name string) error {
	sh := s.held[name]
	if sh == nil {
		return fmt.Errorf("natsexec: owners: %s: %w", name, owners.ErrNoRepair)
	}
	return s.e.putShard(ctx, name, sh)
}

func (s *ownersStore) Delete(ctx context.Context, name string) error {
	if err := s.e.obs.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("natsexec: owners: delete %s: %w", name, err)
	}
	return nil
}

// heldModel is owners.Model for a model the coordinator holds (md): the
// path of a coordinator that read the data and cut the shards. When the
// owners create the initial model and write the parts, this is what
// goes.
type heldModel struct {
	e    *Executor
	md   *factor.Model
	rows [][]int32 // each row group's rows, ascending
}

// Initial stores md as checkpoint 0.
func (h *heldModel) Initial(ctx context.Context, p *owners.Plan) ([][]string, []string, error) {
	md, m := h.md, h.md.M
	kcrc, dcrc := make([][]string, len(p.Cols)), make([]string, len(p.Groups))
	for kb, cbs := range p.Cols {
		for _, cb := range cbs {
			data := wire.FloatBytes(md.KT[kb][cb.Lo*m : cb.Hi*m])
			if err := h.e.putOwners(ctx, proto.KObject(p.Job, 0, kb, cb.C), data); err != nil {
				return nil, nil, err
			}
			kcrc[kb] = append(kcrc[kb], wire.CRC(data))
		}
	}
	for g, dg := range p.Groups {
		d := md.D[dg.DBlock]
		rows := make([]float64, 0, len(h.rows[g])*m)
		for _, i := range h.rows[g] {
			rows = append(rows, d[int(i)*m:int(i)*m+m]...)
		}
		data := wire.FloatBytes(rows)
		if err := h.e.putOwners(ctx, proto.DObject(p.Job, 0, g), data); err != nil {
			return nil, nil, err
		}
		dcrc[g] = wire.CRC(data)
	}
	return kcrc, dcrc, nil
}

// Final reads checkpoint c into md, each object checked against its CRC.
// It checks every object before it writes a value into md (one more read
// of the checkpoint, once per fit): a checkpoint that fails its check
// leaves md the initial model, which a fall back to the start stores
// again (Initial).
func (h *heldModel) Final(ctx context.Context, p *owners.Plan, c owners.Checkpoint) error {
	md, m := h.md, h.md.M
	for _, write := range []bool{false, true} {
		// get reads object name (size floats, CRC crc) into into when
		// writing, and only checks it before.
		get := func(name, crc string, size int, into []float64) error {
			data, err := h.e.obs.GetBytes(ctx, name)
			if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) && wire.ClassifyStore(err) != wire.StoreCorrupt {
				return fmt.Errorf("natsexec: owners: %w", h.e.storeErr(ctx, "read", wire.KindObjects, name, err))
			}
			if err == nil && wire.CRC(data) != crc {
				err = fmt.Errorf("CRC %s, the checkpoint says %s", wire.CRC(data), crc)
			}
			if err == nil && len(data) != 8*size {
				err = fmt.Errorf("%d bytes, want %d", len(data), 8*size)
			}
			if err == nil && write {
				err = wire.ReadFloats(into, data)
			}
			if err != nil {
				// Missing, or not what the checkpoint wrote: the sequencer
				// falls back to the checkpoint before.
				return &owners.CorruptError{Object: name, Err: fmt.Errorf("natsexec: owners: read %s of checkpoint %d from Object Store bucket %s: %w", name, c.Version, h.e.cfg.ObjectBucket, err)}
			}
			return nil
		}
		for kb, cbs := range p.Cols {
			for q, cb := range cbs {
				if err := get(proto.KObject(p.Job, c.Version, kb, cb.C), c.KCRC[kb][q], (cb.Hi-cb.Lo)*m, md.KT[kb][cb.Lo*m:cb.Hi*m]); err != nil {
					return err
				}
			}
		}
		for g, dg := range p.Groups {
			idx := h.rows[g]
			var rows []float64
			if write {
				rows = make([]float64, len(idx)*m)
			}
			if err := get(proto.DObject(p.Job, c.Version, g), c.DCRC[g], len(idx)*m, rows); err != nil {
				return err
			}
			d := md.D[dg.DBlock]
			for q, i := range idx {
				if write {
					copy(d[int(i)*m:int(i)*m+m], rows[q*m:q*m+m])
				}
			}
		}
	}
	if md.Precision == factor.Float32 {
		// The values are rounded already; this refreshes the model's
		// float32 copy of K.
		md.RoundFactors()
	}
	return nil
}
