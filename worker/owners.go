package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// The owners exchange (see wire/owners.go for the protocol): this worker
// owns column blocks of K (their rows of K^T, served to the workers that
// gather them, and the fold of their K̂) and row groups of D (their rows,
// served the same way, and the fold of their D̂). All of it is per job
// and epoch: a request of an older epoch is refused, and a load of a
// newer epoch drops every block and group owned before (the coordinator
// rolled the job back to a checkpoint).

// ownJob is a job's state in the owners exchange.
type ownJob struct {
	job   string
	epoch int
	// token is the epoch's secret (proto: fencing); sliceKey the key in the
	// names of the slices served in the epoch (proto.SliceKey), which no
	// one without the token can name (or drop).
	token    string
	sliceKey string
	n, m, u  int
	tie      factor.Tie
	prec     factor.Precision
	groupNNZ int
	bucket   string
	blocks   map[[2]int]*ownBlock
	// layout[kblock] are the K block's column blocks with their owners,
	// shapes[kblock] its shards and their workers: the epoch's placement.
	layout [][]proto.ColBlock
	shapes map[int]proto.KShape
	// groups are the row groups of D owned here; rowLayout is every
	// group of the epoch (index = group), cellGroups each shard's groups
	// (in row order) and cellWorker each shard's worker.
	groups     map[int]*ownGroup
	rowLayout  []proto.RowGroup
	cellGroups map[int][]int
	cellWorker map[int]string
	// members are the epoch's workers: those the layouts and shapes name
	// (an early pull fetches only from one of them).
	members map[string]bool
	// served are the K̂ slice blobs served, with the iteration they are of.
	served []servedSlice
	// ctx is the epoch's: cancelled when a newer epoch, the job's end or
	// Stop replaces it.
	ctx    context.Context
	cancel context.CancelCauseFunc
}

type servedSlice struct {
	name        string
	iter, shard int
}

// ownBlock is an owned column block [lo, hi) of K block kb.
type ownBlock struct {
	mu      sync.RWMutex
	kb, c   int
	lo, hi  int
	version int
	kt      []float64
	crc     string
	fold    *factor.ColumnFold
	// fmu guards fold, foldIter, the iteration it folds (ownfold.go),
	// and the early pulls' state (ownpull.go).
	fmu      sync.Mutex
	foldIter int
	ps       pullState
}

// dblock is the D block of action a.
func (j *ownJob) dblock(a int) int {
	if j.tie == factor.TieSharedD {
		return 0
	}
	return a
}

// ownGroup is an owned row group g of D: its rows (ascending) and their
// values at version (m per row), and the sums of its fold.
type ownGroup struct {
	mu      sync.RWMutex
	g       int
	action  int
	rows    []int32
	version int
	d       []float64
	crc     string
	// fmu guards dh and x, the sums of iteration foldIter, folded, the
	// cells (Cells[:folded]) summed into them (ownfold.go), and the early
	// pulls' state (ownpull.go).
	fmu      sync.Mutex
	dh, x    []float64
	foldIter int
	folded   int
	ps       pullState
}

// startOwners registers the owners exchange's endpoints.
func (w *Worker) startOwners() error {
	var err error
	if w.slices, err = wire.ServeBlobs(w.nc, w.cfg.Prefix, w.id+"-s", math.MaxInt32); err != nil {
		return err
	}
	w.dropCh = make(chan struct{})
	w.slices.SetOnDrop(func([]byte) { w.sliceDropped() })
	if err := w.svc.AddEndpoint("own", micro.HandlerFunc(w.handleOwn), micro.WithEndpointSubject(wire.OwnSubject(w.cfg.Prefix, w.id))); err != nil {
		return fmt.Errorf("worker: add endpoint: %w", err)
	}
	sub, err := w.nc.Subscribe(wire.GatherSubject(w.cfg.Prefix, w.id), w.serveGather)
	if err != nil {
		return fmt.Errorf("worker: gather: %w", err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	w.gather = sub
	if err := w.startReady(); err != nil {
		return fmt.Errorf("worker: ready notices: %w", err)
	}
	return nil
}

// handleOwn serves an owners request on a goroutine of its own (owned:
// Stop waits for it), so that the load of a new epoch is seen at once and
// cancels what the old epoch still runs (a task gathering K from an owner
// that died, say). Requests of one epoch are sequenced by the coordinator.
func (w *Worker) handleOwn(req micro.Request) {
	if !w.begin() {
		data, _ := json.Marshal(proto.Reply{Worker: w.id, Error: ErrStopped.Error()})
		_ = req.Respond(data)
		return
	}
	// Answered from the goroutine, after this handler returned: a
	// detached copy (micro reads its own request once the handler
	// returns).
	later := wire.Detach(w.nc, req)
	go func() {
		defer w.tasks.Done()
		w.serveOwn(later)
	}()
}

func (w *Worker) serveOwn(req micro.Request) {
	reply := proto.Reply{Worker: w.id}
	var r proto.Request
	err := json.Unmarshal(req.Data(), &r)
	if err != nil {
		err = fmt.Errorf("worker: bad owners request: %w", err)
	}
	if err == nil && !slices.Contains(proto.Ops, r.Op) {
		err = fmt.Errorf("worker: unknown owners operation %q", r.Op)
	}
	var j *ownJob
	switch {
	case err != nil:
	case r.Op == proto.OpHello:
		// The census's handshake: no job, nothing fenced.
		reply.Protocol, reply.JobsBucket = proto.Protocol, w.cfg.JobsBucket
	case r.Op == proto.OpEnd:
		if err = w.ownAdmit(&r); err == nil {
			w.ownEnd(r.Job, r.Epoch)
		}
	default:
		if err = w.ownAdmit(&r); err == nil {
			j, err = w.ownState(&r)
		}
	}
	if j != nil {
		if w.cfg.OnOwnersOp != nil {
			w.cfg.OnOwnersOp(r.Op, r.Iteration)
		}
		ctx, cancel := context.WithCancel(j.ctx)
		if r.Deadline != 0 {
			ctx, cancel = context.WithDeadline(j.ctx, replyBy(time.Now(), time.Unix(0, r.Deadline)))
		}
		switch r.Op {
		case proto.OpLoad:
			err = w.ownLoad(ctx, j, &r)
		case proto.OpTask:
			w.running.Add(1)
			err = w.ownTask(ctx, j, &r, &reply)
			w.running.Add(-1)
		case proto.OpCommit:
			err = w.ownCommit(ctx, j, &r, &reply)
		case proto.OpSave:
			err = w.ownSave(ctx, j, &r, &reply)
		}
		if err != nil && ctx.Err() != nil && !errors.Is(err, context.Cause(ctx)) {
			err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		}
		cancel()
	}
	if err != nil {
		w.log.Warn("owners request failed", "op", r.Op, "job", r.Job, "epoch", r.Epoch, "iter", r.Iteration, "shard", r.Shard, "error", err)
		w.count(func(s *Stats) { s.Failed++ })
		reply.Error = err.Error()
		reply.Fault, reply.Object = replyFault(err)
	}
	data, _ := json.Marshal(reply)
	_ = req.Respond(data)
}

// replyBy is when a request due at deadline stops its work, so that its
// answer says why (a store write that stalled: a full disk) before the
// coordinator gives up on it: a tenth of the time left before the
// deadline, between 100 ms and 5 s.
func replyBy(now, deadline time.Time) time.Time {
	return deadline.Add(-min(max(deadline.Sub(now)/10, 100*time.Millisecond), 5*time.Second))
}

// errSuperseded ends the requests of an epoch that a newer one replaced.
var errSuperseded = errors.New("worker: superseded by a newer epoch of the job")

// ownAdmit fences request r (checkFence): nil when it may act on the
// job, the epoch of a load or end being proven by the job's record.
func (w *Worker) ownAdmit(r *proto.Request) error {
	if r.JobsBucket != "" && r.JobsBucket != w.cfg.JobsBucket {
		return fmt.Errorf("worker: job %s: the coordinator keeps its record in bucket %s, this worker reads bucket %s (--bucket-jobs)", r.Job, r.JobsBucket, w.cfg.JobsBucket)
	}
	w.omu.Lock()
	j := w.own[r.Job]
	have, epoch, token := j != nil, 0, ""
	if j != nil {
		epoch, token = j.epoch, j.token
	}
	w.omu.Unlock()
	ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
	defer cancel()
	_, err := checkFence(have, epoch, token, r, func(want int) (proto.Lease, error) { return w.lease(ctx, r.Job, want) })
	return err
}

// ownState returns the job's state for an admitted request: the
// epoch's, or for a load of a newer epoch a new one (what the older
// epoch runs is cancelled and its slices dropped).
func (w *Worker) ownState(r *proto.Request) (*ownJob, error) {
	w.omu.Lock()
	defer w.omu.Unlock()
	j := w.own[r.Job]
	if j != nil && r.Epoch < j.epoch {
		// A newer epoch came in meanwhile.
		return nil, fmt.Errorf("worker: job %s: request of epoch %d, the job is at epoch %d", r.Job, r.Epoch, j.epoch)
	}
	if j != nil && r.Epoch == j.epoch {
		if !sameToken(r.Fence, j.token) {
			return nil, fmt.Errorf("worker: job %s: %s of epoch %d with another fence than the epoch's: refused", r.Job, r.Op, r.Epoch)
		}
		return j, nil
	}
	if r.Op != proto.OpLoad {
		return nil, fmt.Errorf("worker: job %s epoch %d: no blocks loaded here", r.Job, r.Epoch)
	}
	tie, err := factor.ParseTie(r.Tie)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	prec, err := factor.ParsePrecision(r.Precision)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if r.N < 1 || r.M < 1 || r.U < 1 {
		return nil, fmt.Errorf("worker: job %s: bad shape n=%d m=%d u=%d", r.Job, r.N, r.M, r.U)
	}
	nj := &ownJob{job: r.Job, epoch: r.Epoch, token: r.Fence, sliceKey: proto.SliceKey(r.Fence), n: r.N, m: r.M, u: r.U, tie: tie, prec: prec, groupNNZ: r.GroupNNZ, bucket: r.Bucket,
		blocks: map[[2]int]*ownBlock{}, shapes: map[int]proto.KShape{}, groups: map[int]*ownGroup{},
		cellGroups: map[int][]int{}, cellWorker: map[int]string{}}
	nj.ctx, nj.cancel = context.WithCancelCause(w.ctx)
	if j != nil {
		j.cancel(errSuperseded)
		w.dropSlices(j, math.MaxInt)
	}
	w.own[r.Job] = nj
	return nj, nil
}

// ownLoad takes the blocks of a new placement from a checkpoint.
func (w *Worker) ownLoad(ctx context.Context, j *ownJob, r *proto.Request) error {
	for _, sh := range r.Shapes {
		if len(sh.NNZ) != len(sh.Shards) || len(sh.Workers) != len(sh.Shards) {
			return fmt.Errorf("worker: job %s: K block %d: %d shards, %d nonzero counts, %d workers", r.Job, sh.KBlock, len(sh.Shards), len(sh.NNZ), len(sh.Workers))
		}
		j.shapes[sh.KBlock] = sh
	}
	if len(r.Layout) != factor.NumK(j.u, j.tie) {
		return fmt.Errorf("worker: job %s: layout of %d K blocks, the model has %d", r.Job, len(r.Layout), factor.NumK(j.u, j.tie))
	}
	j.layout = r.Layout
	obs, err := w.storeLocked(ctx, r.Bucket)
	if err != nil {
		return err
	}
	for _, cb := range r.Blocks {
		sh, ok := j.shapes[cb.KBlock]
		if !ok || cb.Lo < 0 || cb.Hi > j.n || cb.Lo > cb.Hi || cb.KBlock < 0 || cb.KBlock >= factor.NumK(j.u, j.tie) {
			return fmt.Errorf("worker: job %s: bad column block %+v", r.Job, cb)
		}
		name := proto.KObject(r.Job, r.Iteration, cb.KBlock, cb.C)
		data, err := w.getObject(ctx, obs, "load", r.Bucket, name)
		if err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		if crc := wire.CRC(data); crc != cb.CRC {
			return fmt.Errorf("worker: %w", corruptObject("load", r.Bucket, name, fmt.Errorf("CRC %s, the checkpoint says %s", crc, cb.CRC)))
		}
		if len(data) != 8*(cb.Hi-cb.Lo)*j.m {
			return fmt.Errorf("worker: %w", corruptObject("load", r.Bucket, name, fmt.Errorf("%d bytes, block [%d, %d) of m = %d has %d", len(data), cb.Lo, cb.Hi, j.m, 8*(cb.Hi-cb.Lo)*j.m)))
		}
		b := &ownBlock{kb: cb.KBlock, c: cb.C, lo: cb.Lo, hi: cb.Hi, version: r.Iteration, kt: make([]float64, (cb.Hi-cb.Lo)*j.m), crc: cb.CRC}
		if err := wire.ReadFloats(b.kt, data); err != nil {
			return fmt.Errorf("worker: %w", corruptObject("load", r.Bucket, name, err))
		}
		b.fold = factor.NewColumnFold(cb.Lo, cb.Hi, j.m, sh.NNZ, j.groupNNZ)
		w.omu.Lock()
		j.blocks[[2]int{cb.KBlock, cb.C}] = b
		w.omu.Unlock()
		w.count(func(s *Stats) { s.BytesFetched += int64(len(data)) })
	}
	return w.loadGroups(ctx, obs, j, r)
}

// loadGroups takes the epoch's row layout and loads the groups this
// worker owns: their row lists and their rows of D at version
// r.Iteration, each checked against the CRCs of the layout.
func (w *Worker) loadGroups(ctx context.Context, obs jetstream.ObjectStore, j *ownJob, r *proto.Request) error {
	j.members = map[string]bool{}
	for _, sh := range j.shapes {
		for q, k := range sh.Shards {
			j.cellWorker[k] = sh.Workers[q]
			j.members[sh.Workers[q]] = true
		}
	}
	for _, l := range j.layout {
		for _, cb := range l {
			j.members[cb.Owner] = true
		}
	}
	for _, g := range r.Groups {
		j.members[g.Owner] = true
	}
	for gi, g := range r.Groups {
		if g.G != gi || g.Action < 0 || g.Action >= j.u || len(g.Cells) == 0 || g.Lo < 0 || g.Hi > j.n || g.Lo > g.Hi {
			return fmt.Errorf("worker: job %s: bad row group %d: %+v", r.Job, gi, g)
		}
		for _, k := range g.Cells {
			if gs := j.cellGroups[k]; len(gs) > 0 && r.Groups[gs[len(gs)-1]].Hi > g.Lo {
				return fmt.Errorf("worker: job %s: row groups %d and %d of shard %d overlap or are out of order", r.Job, gs[len(gs)-1], gi, k)
			}
			j.cellGroups[k] = append(j.cellGroups[k], gi)
		}
	}
	j.rowLayout = r.Groups
	for _, g := range r.Groups {
		if g.Owner != w.id {
			continue
		}
		// An object that reads but fails its check, or is missing, is
		// corrupt; another read error is the store's.
		failed := func(name string, err error) error {
			var se *wire.StoreError
			if !errors.As(err, &se) {
				err = corruptObject("load", r.Bucket, name, err)
			}
			return fmt.Errorf("worker: %w", err)
		}
		name := proto.RowsObject(r.Job, g.G)
		data, err := w.getObject(ctx, obs, "load", r.Bucket, name)
		if err == nil && wire.CRC(data) != g.RowsCRC {
			err = fmt.Errorf("CRC %s, the layout says %s", wire.CRC(data), g.RowsCRC)
		}
		var rows []int32
		if err == nil {
			rows, err = wire.DecodeCols(data, 0, j.n, nil)
		}
		if err == nil && len(rows) == 0 {
			err = errors.New("no rows")
		}
		for q := 1; err == nil && q < len(rows); q++ {
			if rows[q] <= rows[q-1] {
				err = fmt.Errorf("row %d after row %d: the list must ascend", rows[q], rows[q-1])
			}
		}
		if err != nil {
			return failed(name, err)
		}
		name = proto.DObject(r.Job, r.Iteration, g.G)
		data, err = w.getObject(ctx, obs, "load", r.Bucket, name)
		if err == nil && wire.CRC(data) != g.CRC {
			err = fmt.Errorf("CRC %s, the checkpoint says %s", wire.CRC(data), g.CRC)
		}
		if err == nil && len(data) != 8*len(rows)*j.m {
			err = fmt.Errorf("%d bytes, %d rows of m = %d have %d", len(data), len(rows), j.m, 8*len(rows)*j.m)
		}
		og := &ownGroup{g: g.G, action: g.Action, rows: rows, version: r.Iteration, d: make([]float64, len(rows)*j.m), crc: g.CRC}
		if err == nil {
			err = wire.ReadFloats(og.d, data)
		}
		if err != nil {
			return failed(name, err)
		}
		w.omu.Lock()
		j.groups[g.G] = og
		w.omu.Unlock()
		w.count(func(s *Stats) { s.BytesFetched += int64(len(data)) })
	}
	return nil
}

// storeLocked is store under w.mu.
func (w *Worker) storeLocked(ctx context.Context, bucket string) (jetstream.ObjectStore, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.store(ctx, bucket)
}

// ownTask computes a shard: rows of D (kept or from the checkpoint), K
// rows gathered from their owners, the partial, the D commit, and the K̂
// slices served for the owners.
func (w *Worker) ownTask(ctx context.Context, j *ownJob, r *proto.Request, reply *proto.Reply) error {
	w.waitSlices(ctx, j, r)
	w.mu.Lock()
	defer w.mu.Unlock()
	start := time.Now()
	defer func() { w.dmu.Lock(); w.lastTask = time.Since(start); w.dmu.Unlock() }()
	obs, err := w.store(ctx, r.Bucket)
	if err != nil {
		return err
	}
	// A shard placed on another worker (this is a backup copy or a
	// verification) costs its compact form only while the task runs.
	_, had := w.ownShards[r.ShardChecksum]
	if j.cellWorker[r.Shard] != w.id && !had {
		defer func() {
			delete(w.ownShards, r.ShardChecksum)
			n := len(w.ownShards)
			w.count(func(st *Stats) { st.CompactShards = n })
		}()
	}
	cs, err := w.ownShardOf(ctx, obs, r)
	if err != nil {
		return err
	}
	nc := len(w.ownShards)
	w.count(func(st *Stats) { st.CompactShards = nc })
	if w.cfg.Delay > 0 && r.Iteration >= w.cfg.DelayFrom {
		t := time.NewTimer(w.cfg.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	b, m := &factor.Block{Action: cs.info.Action, Rows: cs.rows}, j.m
	if err := cs.checkShape(j.n, j.u); err != nil {
		return fmt.Errorf("worker: shard %d: %w", r.Shard, err)
	}
	kb := b.Action
	if j.tie == factor.TieSharedK {
		kb = 0
	}
	md := w.compactModel(cs, m)
	// Rows of D at version Iteration−1, from the owners of the shard's
	// row groups (which split its rows: spans[q] are group q's).
	groups := j.cellGroups[r.Shard]
	w.ownD = slices.Grow(w.ownD[:0], len(b.Rows)*m)[:len(b.Rows)*m]
	spans := make([][2]int, len(groups))
	t0 := time.Now()
	var parts []gatherPart
	covered := 0
	for q, g := range groups {
		grp := j.rowLayout[g]
		a, e := factor.SliceColumns(b.Rows, grp.Lo, grp.Hi)
		if grp.Action != j.dblock(b.Action) || a != covered {
			return fmt.Errorf("worker: shard %d (action %d): row group %d (D block %d, rows [%d, %d)) does not follow its rows before", r.Shard, b.Action, g, grp.Action, grp.Lo, grp.Hi)
		}
		spans[q], covered = [2]int{a, e}, e
		if a == e {
			continue
		}
		if grp.Owner == w.id {
			if err := w.copyOwnRows(j, r, g, b.Rows[a:e], w.ownD[a*m:e*m]); err != nil {
				return fmt.Errorf("worker: shard %d: rows of D: %w", r.Shard, err)
			}
			continue
		}
		parts = append(parts, gatherPart{owner: grp.Owner, block: "d/" + strconv.Itoa(g), idx: b.Rows[a:e], dst: w.ownD[a*m : e*m]})
	}
	if covered != len(b.Rows) {
		return fmt.Errorf("worker: shard %d (action %d): the row groups of the epoch's layout hold %d of its %d rows", r.Shard, b.Action, covered, len(b.Rows))
	}
	if err := w.gatherParts(ctx, r, parts, m); err != nil {
		return fmt.Errorf("worker: shard %d: rows of D: %w", r.Shard, err)
	}
	d := md.D[0]
	for q, i := range cs.blk.Rows {
		copy(d[int(i)*m:int(i)*m+m], w.ownD[q*m:q*m+m])
	}
	// K rows of the columns the shard touches, from their owners.
	if kb >= len(j.layout) {
		return fmt.Errorf("worker: shard %d: K block %d is not in the epoch's layout", r.Shard, kb)
	}
	if err := w.gatherK(ctx, j, r, j.layout[kb], cs.cols, md.KT[0]); err != nil {
		return fmt.Errorf("worker: shard %d: %w", r.Shard, err)
	}
	t1 := time.Now()
	p := &w.partial
	if err := factor.Compute(md, cs.blk, &w.scratch, p, r.WithLogLik); err != nil {
		return fmt.Errorf("worker: shard %d: %w", r.Shard, err)
	}
	// Back to the shard's indices (the renumbering kept their order).
	p.Action = b.Action
	for q := range p.Rows {
		p.Rows[q] += cs.rowLo
	}
	for c, lc := range p.Cols {
		p.Cols[c] = cs.cols[lc]
	}
	if w.cfg.WrongFrom >= 1 && r.Iteration >= w.cfg.WrongFrom && len(p.Dh) > 0 {
		p.Dh[0] *= 1 + 0x1p-20
	}
	t2 := time.Now()
	reply.Label = proto.Label{Job: r.Job, Iteration: r.Iteration, Shard: r.Shard, ShardChecksum: cs.info.Checksum, ModelDigest: proto.Digest(r.Epoch), Nonce: r.Nonce}.String()
	reply.Y = slices.Clone(p.Y)
	reply.SumX, reply.NNZ = p.SumX, p.NNZ
	if !math.IsNaN(p.LogLik) {
		reply.LogLik, reply.HasLogLik = p.LogLik, true
	}
	reply.Out = wire.PartialDigest(p)
	reply.GatherNanos, reply.ComputeNanos = int64(t1.Sub(t0)), int64(t2.Sub(t1))
	if r.Verify {
		// A verification: the answer only.
		w.count(func(st *Stats) {
			st.Verified++
			st.ComputeSeconds += t2.Sub(t1).Seconds()
		})
		return nil
	}
	// Fold what this worker owns and is due (ownfold.go), serve the
	// other K̂ slices; drop those of earlier iterations (their commits
	// are done: the coordinator sequences).
	kdone, gdone, err := w.foldOwn(j, r, kb, p, groups, spans)
	if err != nil {
		return fmt.Errorf("worker: shard %d: %w", r.Shard, err)
	}
	w.omu.Lock()
	w.dropSlices(j, r.Iteration)
	w.omu.Unlock()
	zero := make([]float64, m)
	// The D̂ slice of each row group, for its owner.
	var sent int64
	for q, g := range groups {
		if gdone[q] {
			continue
		}
		a, e := spans[q][0], spans[q][1]
		sum := 0.0
		for _, x := range p.X[a:e] {
			sum += x
		}
		data := wire.EncodeRawPartial(&factor.Partial{Action: b.Action, Rows: p.Rows[a:e], Dh: p.Dh[a*m : e*m], X: p.X[a:e], Y: zero, SumX: sum}, nil)
		name := wire.DSliceName(r.Job, r.Epoch, r.Iteration, r.Shard, g, j.sliceKey)
		w.slices.Put(name, data)
		sent += int64(len(data))
		w.omu.Lock()
		j.served = append(j.served, servedSlice{name, r.Iteration, r.Shard})
		w.omu.Unlock()
	}
	servedC := map[int]bool{}
	for _, cb := range j.layout[kb] {
		if kdone[cb.C] {
			continue
		}
		servedC[cb.C] = true
		a, e := factor.SliceColumns(p.Cols, cb.Lo, cb.Hi)
		data := wire.EncodeRawPartial(&factor.Partial{Action: kb, Cols: p.Cols[a:e], KhT: p.KhT[a*m : e*m], Y: zero}, nil)
		name := wire.SliceName(r.Job, r.Epoch, r.Iteration, r.Shard, cb.C, j.sliceKey)
		w.slices.Put(name, data)
		sent += int64(len(data))
		w.omu.Lock()
		j.served = append(j.served, servedSlice{name, r.Iteration, r.Shard})
		w.omu.Unlock()
	}
	w.announce(j, r, kb, j.layout[kb], servedC, groups, gdone)
	w.count(func(st *Stats) {
		st.Tasks++
		st.NNZ += int64(cs.info.NNZ)
		st.ComputeSeconds += t2.Sub(t1).Seconds()
		st.BytesSent += sent
	})
	return nil
}

// ownShard is a shard in the compact form an owners task computes on:
// its rows and the columns it touches renumbered 0, 1, … in order, so
// that the worker holds only the rows of D and K^T its shard reads (not
// arrays of the model's full shape). The kernel visits columns ascending
// and rows ascending within a column, so the renumbered block adds every
// term in the same order: the partial is bitwise the shard's.
type ownShard struct {
	blk   *factor.Block
	info  shard.Info
	rows  []int32 // the shard's rows (global)
	rowLo int32
	// maxCol is the shard's largest column (-1: none).
	maxCol int32
	// cols is the shard's column of each local column, ascending.
	cols []int32
}

// compactShard returns the compact form of shard b (cached by checksum
// beside the shard). The caller holds w.mu.
func (w *Worker) compactShard(checksum string, b *factor.Block) *ownShard {
	if cs, ok := w.ownShards[checksum]; ok {
		return cs
	}
	cols := slices.Clone(b.Cols)
	slices.Sort(cols)
	cols = slices.Compact(cols)
	cs := &ownShard{cols: slices.Clip(cols)}
	if len(b.Rows) > 0 {
		cs.rowLo = b.Rows[0]
	}
	lb := &factor.Block{Action: 0, Rows: make([]int32, len(b.Rows)), Ptr: b.Ptr, Cols: make([]int32, len(b.Cols)), Vals: b.Vals}
	for q, i := range b.Rows {
		lb.Rows[q] = i - cs.rowLo
	}
	for k, c := range b.Cols {
		lc, _ := slices.BinarySearch(cs.cols, c)
		lb.Cols[k] = int32(lc)
	}
	cs.blk = lb
	if w.cfg.MaxCachedShards > 0 && len(w.ownShards) >= w.cfg.MaxCachedShards {
		clear(w.ownShards)
	}
	w.ownShards[checksum] = cs
	return cs
}

// compactModel returns the worker's model for computing cs: one action,
// D of the rows spanned, K^T of the columns touched, N the larger (Compute
// reads rows of D and of K^T at the block's indices only), arrays reused
// across tasks (entries outside what a task writes are never read). The
// caller holds w.mu.
func (w *Worker) compactModel(cs *ownShard, m int) *factor.Model {
	nc, nr := max(len(cs.cols), 1), 1
	if k := len(cs.blk.Rows); k > 0 {
		nr = int(cs.blk.Rows[k-1]) + 1
	}
	md := w.ownMd
	if md == nil || md.M != m || len(md.D[0]) < nr*m || len(md.KT[0]) < nc*m {
		if md != nil && md.M == m {
			nr, nc = max(nr, len(md.D[0])/m), max(nc, len(md.KT[0])/m)
		}
		md = &factor.Model{M: m, U: 1, D: [][]float64{make([]float64, nr*m)}, KT: [][]float64{make([]float64, nc*m)}}
		w.ownMd = md
	}
	md.N = max(nr, nc)
	return md
}

// gatherWindow is how many gather requests a task keeps in flight.
const gatherWindow = 8

// gatherK puts the K rows of cols (ascending) into kt, row q for cols[q]:
// from this worker's own blocks directly, from the others' owners by
// gather requests.
func (w *Worker) gatherK(ctx context.Context, j *ownJob, r *proto.Request, layout []proto.ColBlock, cols []int32, kt []float64) error {
	m := j.m
	var parts []gatherPart
	for _, cb := range layout {
		a, e := factor.SliceColumns(cols, cb.Lo, cb.Hi)
		if a == e {
			continue
		}
		if cb.Owner == w.id {
			if err := w.copyOwn(j, r, cb, cols[a:e], kt[a*m:e*m]); err != nil {
				return err
			}
			continue
		}
		parts = append(parts, gatherPart{owner: cb.Owner, block: strconv.Itoa(cb.KBlock) + "/" + strconv.Itoa(cb.C), idx: cols[a:e], dst: kt[a*m : e*m]})
	}
	return w.gatherParts(ctx, r, parts, m)
}

// gatherPart is what one owner is asked for: the rows idx (ascending) of
// its block (HeaderOwnBlock: "kblock/c" of K, "d/g" of D), into dst.
type gatherPart struct {
	owner, block string
	idx          []int32
	dst          []float64
}

// gatherMax is how many rows of m values one gather request may ask for:
// its reply fits one blob chunk and the server's max payload.
func gatherMax(nc *nats.Conn, m int) int {
	return max(1, min(wire.BlobChunk, int(nc.MaxPayload())-8<<10)/(8*m))
}

// gatherParts fetches parts at version r.Iteration−1, in requests of at
// most gatherMax rows, gatherWindow of them in flight.
func (w *Worker) gatherParts(ctx context.Context, r *proto.Request, parts []gatherPart, m int) error {
	per := gatherMax(w.nc, m)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, gatherWindow)
	var emu sync.Mutex
	var first error
	fail := func(err error) {
		emu.Lock()
		if first == nil {
			first = err
		}
		emu.Unlock()
		cancel()
	}
	for _, gp := range parts {
		for lo := 0; lo < len(gp.idx) && ctx.Err() == nil; lo += per {
			part := gatherPart{owner: gp.owner, block: gp.block, idx: gp.idx[lo:min(lo+per, len(gp.idx))]}
			part.dst = gp.dst[lo*m : (lo+len(part.idx))*m]
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := w.gatherOne(ctx, r, part, m); err != nil {
					fail(err)
				}
			}()
		}
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// gatherOne requests the rows of one part from its owner.
func (w *Worker) gatherOne(ctx context.Context, r *proto.Request, part gatherPart, m int) error {
	msg := nats.NewMsg(wire.GatherSubject(w.cfg.Prefix, part.owner))
	msg.Header.Set(wire.HeaderOwnJob, r.Job)
	msg.Header.Set(wire.HeaderOwnBlock, part.block)
	msg.Header.Set(wire.HeaderOwnVersion, strconv.Itoa(r.Iteration-1))
	msg.Header.Set(wire.HeaderOwnEpoch, strconv.Itoa(r.Epoch))
	msg.Header.Set(wire.HeaderOwnFence, r.Fence)
	msg.Data = wire.EncodeCols(part.idx, nil)
	rep, err := w.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		return fmt.Errorf("gather block %s from %s: %w", part.block, part.owner, err)
	}
	if e := rep.Header.Get(wire.HeaderBlobError); e != "" {
		return fmt.Errorf("gather block %s from %s: %s", part.block, part.owner, e)
	}
	if len(rep.Data) != len(part.idx)*m*8 {
		return fmt.Errorf("gather block %s from %s: %d bytes for %d rows", part.block, part.owner, len(rep.Data), len(part.idx))
	}
	if err := wire.ReadFloats(part.dst, rep.Data); err != nil {
		return err
	}
	w.count(func(s *Stats) { s.BytesFetched += int64(len(rep.Data)) })
	return nil
}

// ownBlockOf returns block (kb, c) of the job if this worker owns it in
// that epoch, whose token fence is.
func (w *Worker) ownBlockOf(job string, epoch int, fence string, kb, c int) (*ownBlock, error) {
	w.omu.Lock()
	j := w.own[job]
	var b *ownBlock
	if j != nil && j.epoch == epoch && sameToken(fence, j.token) {
		b = j.blocks[[2]int{kb, c}]
	}
	w.omu.Unlock()
	if b == nil {
		return nil, fmt.Errorf("block %d/%d of job %s epoch %d is not owned here", kb, c, job, epoch)
	}
	return b, nil
}

// copyOwn copies the rows of cols from a block this worker owns into dst
// (in cols' order).
func (w *Worker) copyOwn(j *ownJob, r *proto.Request, cb proto.ColBlock, cols []int32, dst []float64) error {
	b, err := w.ownBlockOf(r.Job, r.Epoch, r.Fence, cb.KBlock, cb.C)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.version != r.Iteration-1 {
		return fmt.Errorf("worker: block %d/%d is at version %d, the task reads %d", cb.KBlock, cb.C, b.version, r.Iteration-1)
	}
	m := j.m
	for q, c := range cols {
		at := (int(c) - b.lo) * m
		copy(dst[q*m:q*m+m], b.kt[at:at+m])
	}
	return nil
}

// ownGroupOf returns row group g of the job if this worker owns it in
// that epoch, whose token fence is.
func (w *Worker) ownGroupOf(job string, epoch int, fence string, g int) (*ownGroup, error) {
	w.omu.Lock()
	j := w.own[job]
	var og *ownGroup
	if j != nil && j.epoch == epoch && sameToken(fence, j.token) {
		og = j.groups[g]
	}
	w.omu.Unlock()
	if og == nil {
		return nil, fmt.Errorf("row group %d of job %s epoch %d is not owned here", g, job, epoch)
	}
	return og, nil
}

// copyOwnRows copies rows (ascending) of a row group this worker owns,
// at the task's version, into dst (m values each, in rows' order).
func (w *Worker) copyOwnRows(j *ownJob, r *proto.Request, g int, rows []int32, dst []float64) error {
	og, err := w.ownGroupOf(r.Job, r.Epoch, r.Fence, g)
	if err != nil {
		return err
	}
	og.mu.RLock()
	defer og.mu.RUnlock()
	if og.version != r.Iteration-1 {
		return fmt.Errorf("row group %d is at version %d, the task reads %d", g, og.version, r.Iteration-1)
	}
	return og.copyRows(rows, dst, j.m)
}

// copyRows copies rows (ascending) of the group into dst; a row the
// group does not hold is an error. The caller holds og.mu.
func (og *ownGroup) copyRows(rows []int32, dst []float64, m int) error {
	at := 0
	for q, i := range rows {
		k, found := slices.BinarySearch(og.rows[at:], i)
		if !found {
			return fmt.Errorf("row %d is not in row group %d", i, og.g)
		}
		at += k
		copy(dst[q*m:q*m+m], og.d[at*m:at*m+m])
	}
	return nil
}

// serveGather answers a gather request for rows of an owned column
// block of K ("kblock/c") or row group of D ("d/g").
func (w *Worker) serveGather(msg *nats.Msg) {
	reply := nats.NewMsg(msg.Reply)
	fail := func(err error) {
		reply.Header.Set(wire.HeaderBlobError, err.Error())
		_ = msg.RespondMsg(reply)
	}
	job := msg.Header.Get(wire.HeaderOwnJob)
	kbs, cs, _ := strings.Cut(msg.Header.Get(wire.HeaderOwnBlock), "/")
	c, err2 := strconv.Atoi(cs)
	v, err3 := strconv.Atoi(msg.Header.Get(wire.HeaderOwnVersion))
	e, err4 := strconv.Atoi(msg.Header.Get(wire.HeaderOwnEpoch))
	var kb int
	var err1 error
	if kbs != "d" {
		kb, err1 = strconv.Atoi(kbs)
	}
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		fail(fmt.Errorf("bad gather request: %w", err))
		return
	}
	fence := msg.Header.Get(wire.HeaderOwnFence)
	var out []float64
	var err error
	if kbs == "d" {
		out, err = w.gatherD(msg.Data, job, e, fence, c, v)
	} else {
		out, err = w.gatherKRows(msg.Data, job, e, fence, kb, c, v)
	}
	if err != nil {
		fail(err)
		return
	}
	reply.Data = wire.FloatBytes(out)
	_ = msg.RespondMsg(reply)
}

// gatherIndices decodes a gather request's indices of rows of m values,
// at most one reply's worth, within [lo, hi).
func (w *Worker) gatherIndices(data []byte, m, lo, hi int, what string) ([]int32, error) {
	if limit := gatherMax(w.nc, m); len(data) > 4*limit {
		return nil, fmt.Errorf("gather of %d %s: at most %d per request", len(data)/4, what, limit)
	}
	return wire.DecodeCols(data, lo, hi, nil)
}

// gatherKRows returns the rows of K^T that a gather request asks of owned
// column block kb/c at version v.
func (w *Worker) gatherKRows(data []byte, job string, epoch int, fence string, kb, c, v int) ([]float64, error) {
	b, err := w.ownBlockOf(job, epoch, fence, kb, c)
	if err != nil {
		return nil, err
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.version != v {
		return nil, fmt.Errorf("block %d/%d is at version %d, not %d", kb, c, b.version, v)
	}
	m := len(b.kt) / max(1, b.hi-b.lo)
	cols, err := w.gatherIndices(data, m, b.lo, b.hi, "columns")
	if err != nil {
		return nil, err
	}
	out := make([]float64, 0, len(cols)*m)
	for _, j := range cols {
		at := (int(j) - b.lo) * m
		out = append(out, b.kt[at:at+m]...)
	}
	return out, nil
}

// gatherD returns the rows of D that a gather request asks of owned row
// group g at version v.
func (w *Worker) gatherD(data []byte, job string, epoch int, fence string, g, v int) ([]float64, error) {
	og, err := w.ownGroupOf(job, epoch, fence, g)
	if err != nil {
		return nil, err
	}
	og.mu.RLock()
	defer og.mu.RUnlock()
	if og.version != v {
		return nil, fmt.Errorf("row group %d is at version %d, not %d", g, og.version, v)
	}
	m := len(og.d) / len(og.rows)
	rows, err := w.gatherIndices(data, m, int(og.rows[0]), int(og.rows[len(og.rows)-1])+1, "rows")
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(rows)*m)
	if err := og.copyRows(rows, out, m); err != nil {
		return nil, err
	}
	return out, nil
}

// ownCommit folds the owned blocks' K̂ slices and the owned row groups'
// D̂ slices and commits their columns and rows.
func (w *Worker) ownCommit(ctx context.Context, j *ownJob, r *proto.Request, reply *proto.Reply) error {
	// Shards whose slices a backup copy's worker serves this iteration.
	moved := map[int]string{}
	for _, sw := range r.Moved {
		if sw.Worker == "" || strings.ContainsAny(sw.Worker, ".*> \t") {
			return fmt.Errorf("worker: commit: shard %d moved to a bad worker name %q", sw.Shard, sw.Worker)
		}
		moved[sw.Shard] = sw.Worker
	}
	ys := map[int][]float64{}
	for _, y := range r.Y {
		if len(y.Y) != j.m {
			return fmt.Errorf("worker: commit: Y of K block %d has %d values, want %d", y.KBlock, len(y.Y), j.m)
		}
		ys[y.KBlock] = y.Y
	}
	alpha := r.Alpha
	if alpha == 0 {
		alpha = 1
	}
	var obs jetstream.ObjectStore
	var err error
	if r.Save {
		if obs, err = w.storeLocked(ctx, r.Bucket); err != nil {
			return err
		}
	}
	w.omu.Lock()
	owned := make([]*ownBlock, 0, len(j.blocks))
	for _, b := range j.blocks {
		owned = append(owned, b)
	}
	w.omu.Unlock()
	slices.SortFunc(owned, func(a, b *ownBlock) int { return cmp.Or(cmp.Compare(a.kb, b.kb), cmp.Compare(a.c, b.c)) })
	var digest []byte
	for _, b := range owned {
		y, ok := ys[b.kb]
		if !ok {
			return fmt.Errorf("worker: commit: no Y for K block %d", b.kb)
		}
		sh := j.shapes[b.kb]
		refs := make([]sliceRef, len(sh.Shards))
		for q, k := range sh.Shards {
			refs[q] = sliceRef{worker: cmp.Or(moved[k], sh.Workers[q]), name: wire.SliceName(r.Job, r.Epoch, r.Iteration, k, b.c, j.sliceKey)}
		}
		if err := w.foldBlock(ctx, j, b, refs, r.Iteration); err != nil {
			return err
		}
		b.mu.Lock()
		if b.version != r.Iteration-1 {
			v := b.version
			b.mu.Unlock()
			return fmt.Errorf("worker: commit: block %d/%d is at version %d, the commit is of %d", b.kb, b.c, v, r.Iteration)
		}
		factor.CommitKRows(b.kt, b.fold.KhT(), y, j.m, alpha)
		if j.prec == factor.Float32 {
			factor.RoundRows32(b.kt) // as Accumulator.Commit rounds
		}
		b.version, b.crc = r.Iteration, wire.CRC(wire.FloatBytes(b.kt))
		cb := proto.ColBlock{KBlock: b.kb, C: b.c, Lo: b.lo, Hi: b.hi, Owner: w.id, CRC: b.crc}
		b.mu.Unlock()
		if r.Save {
			if err := w.saveBlock(ctx, obs, r.Bucket, r.Job, b); err != nil {
				return err
			}
		}
		digest = append(digest, cb.CRC...)
		if r.Save {
			reply.Blocks = append(reply.Blocks, cb)
		}
	}
	w.omu.Lock()
	groups := make([]*ownGroup, 0, len(j.groups))
	for _, g := range j.groups {
		groups = append(groups, g)
	}
	w.omu.Unlock()
	slices.SortFunc(groups, func(a, b *ownGroup) int { return cmp.Compare(a.g, b.g) })
	for _, g := range groups {
		if err := w.foldGroup(ctx, j, r, g, moved); err != nil {
			return err
		}
		g.mu.Lock()
		if g.version != r.Iteration-1 {
			v := g.version
			g.mu.Unlock()
			return fmt.Errorf("worker: commit: row group %d is at version %d, the commit is of %d", g.g, v, r.Iteration)
		}
		m := j.m
		for q := range g.rows {
			factor.CommitRow(g.d[q*m:q*m+m], g.dh[q*m:q*m+m], g.x[q], alpha)
		}
		if j.prec == factor.Float32 {
			factor.RoundRows32(g.d)
		}
		g.version, g.crc = r.Iteration, wire.CRC(wire.FloatBytes(g.d))
		g.mu.Unlock()
		if r.Save {
			if err := w.saveGroup(ctx, obs, r.Bucket, r.Job, g); err != nil {
				return err
			}
			reply.Groups = append(reply.Groups, proto.RowGroup{G: g.g, Action: g.action, CRC: g.crc})
		}
		digest = append(digest, g.crc...)
	}
	reply.Digest = wire.CRC(digest)
	return nil
}

// foldGroup pulls the D̂ slices of a row group's cells (in cell order)
// and sums them into g.dh and g.x, left to right from zero: the order in
// which a local pass adds the cells' rows of D̂ (factor.ReducePlan).
func (w *Worker) foldGroup(ctx context.Context, j *ownJob, r *proto.Request, g *ownGroup, moved map[int]string) error {
	m := j.m
	cells := j.rowLayout[g.g].Cells
	g.fmu.Lock()
	defer g.fmu.Unlock()
	// Tasks of this iteration may have folded a prefix (foldOwn).
	from := len(cells)
	if g.foldIterate(r.Iteration, m) {
		from = g.folded
	}
	refs := make([]sliceRef, len(cells)-from)
	for q, k := range cells[from:] {
		refs[q] = sliceRef{worker: cmp.Or(moved[k], j.cellWorker[k]), name: wire.DSliceName(r.Job, r.Epoch, r.Iteration, k, g.g, j.sliceKey)}
	}
	// The largest slice of this group: every row.
	limit := wire.RawPartialSizeOf(len(g.rows), 0, m)
	return w.pullInOrder(ctx, refs, limit, func(q int, p *factor.Partial) error {
		return g.addSlice(j, from+q, p)
	})
}

func (w *Worker) saveGroup(ctx context.Context, obs jetstream.ObjectStore, bucket, job string, g *ownGroup) error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return w.putObject(ctx, obs, bucket, proto.DObject(job, g.version, g.g), wire.FloatBytes(g.d))
}

// foldWindow is how many slices an owner fetches ahead of its fold.
const foldWindow = 4

// foldBlock pulls a block's K̂ slices (one per shard of its K block, in
// block order) and folds them in the canonical order.
func (w *Worker) foldBlock(ctx context.Context, j *ownJob, b *ownBlock, refs []sliceRef, iter int) error {
	f := b.fold
	b.fmu.Lock()
	defer b.fmu.Unlock()
	// Tasks of this iteration may have folded a prefix (foldOwn).
	from := len(refs)
	if b.foldIterate(iter) && !f.Done() {
		from = f.Next()
	}
	// The largest slice of this block: every column touched.
	limit := wire.RawPartialSizeOf(0, b.hi-b.lo, j.m)
	return w.pullInOrder(ctx, refs[from:], limit, func(k int, p *factor.Partial) error {
		k += from
		if p.Action != b.kb || len(p.Y) != j.m {
			return fmt.Errorf("worker: commit: block %d/%d: the slice of shard %d of its K block is of K block %d with m = %d", b.kb, b.c, k, p.Action, len(p.Y))
		}
		if k != f.Next() {
			return fmt.Errorf("worker: commit: block %d/%d: slice %d arrived where %d is due", b.kb, b.c, k, f.Next())
		}
		if err := f.Add(p.Cols, p.KhT); err != nil {
			return fmt.Errorf("worker: commit: block %d/%d, shard %d of its K block: %w", b.kb, b.c, k, err)
		}
		return nil
	})
}

// sliceRef names a slice: the worker that serves it and its name.
type sliceRef struct{ worker, name string }

// pullInOrder fetches the slices refs (each at most limit bytes: the
// server is another process) and hands them to add in order, k = 0, 1, …,
// fetching up to foldWindow ahead. A slice this worker serves is taken
// from its own blob server; each slice is dropped at its server once
// read.
func (w *Worker) pullInOrder(ctx context.Context, refs []sliceRef, limit int, add func(k int, p *factor.Partial) error) error {
	ctx, cancel := context.WithCancel(ctx)
	type got struct {
		p   *factor.Partial
		err error
	}
	out := make([]chan got, len(refs))
	for k := range out {
		out[k] = make(chan got, 1)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	fetch := func(k int) {
		defer wg.Done()
		ref := refs[k]
		var data []byte
		var err error
		if ref.worker == w.id {
			var ok bool
			if data, ok = w.slices.Get(ref.name); !ok {
				err = fmt.Errorf("slice %s is not served here", ref.name)
			}
		} else {
			subject := wire.SliceSubject(w.cfg.Prefix, ref.worker) + "." + ref.name
			if data, err = wire.FetchBlobAll(ctx, w.nc, subject, limit); err == nil {
				wire.DropBlob(w.nc, subject)
				w.count(func(s *Stats) { s.BytesFetched += int64(len(data)) })
			}
		}
		var p *factor.Partial
		if err == nil {
			p, err = wire.DecodeRawPartial(data)
		}
		if err == nil && ref.worker == w.id {
			w.slices.Drop(ref.name)
		}
		if err != nil {
			err = fmt.Errorf("worker: commit: slice %s of worker %s: %w", ref.name, ref.worker, err)
		}
		out[k] <- got{p, err}
	}
	next := 0
	for k := range refs {
		for ; next < len(refs) && next < k+foldWindow; next++ {
			wg.Add(1)
			go fetch(next)
		}
		var g got
		select {
		case g = <-out[k]:
		case <-ctx.Done():
			return fmt.Errorf("worker: commit: %w", ctx.Err())
		}
		if g.err != nil {
			return g.err
		}
		if err := add(k, g.p); err != nil {
			return err
		}
	}
	return nil
}

func (w *Worker) saveBlock(ctx context.Context, obs jetstream.ObjectStore, bucket, job string, b *ownBlock) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return w.putObject(ctx, obs, bucket, proto.KObject(job, b.version, b.kb, b.c), wire.FloatBytes(b.kt))
}

// ownSave stores owned column blocks and row groups at version Iteration
// (the last version of a fit, or a checkpoint the coordinator asks for).
func (w *Worker) ownSave(ctx context.Context, j *ownJob, r *proto.Request, reply *proto.Reply) error {
	obs, err := w.storeLocked(ctx, r.Bucket)
	if err != nil {
		return err
	}
	for _, cb := range r.Blocks {
		b, err := w.ownBlockOf(r.Job, r.Epoch, r.Fence, cb.KBlock, cb.C)
		if err != nil {
			return fmt.Errorf("worker: save: %w", err)
		}
		if b.version != r.Iteration {
			return fmt.Errorf("worker: save: block %d/%d is at version %d, not %d", b.kb, b.c, b.version, r.Iteration)
		}
		if err := w.saveBlock(ctx, obs, r.Bucket, r.Job, b); err != nil {
			return err
		}
		reply.Blocks = append(reply.Blocks, proto.ColBlock{KBlock: b.kb, C: b.c, Lo: b.lo, Hi: b.hi, Owner: w.id, CRC: b.crc})
	}
	for _, rg := range r.Groups {
		g, err := w.ownGroupOf(r.Job, r.Epoch, r.Fence, rg.G)
		if err != nil {
			return fmt.Errorf("worker: save: %w", err)
		}
		if g.version != r.Iteration {
			return fmt.Errorf("worker: save: row group %d is at version %d, not %d", g.g, g.version, r.Iteration)
		}
		if err := w.saveGroup(ctx, obs, r.Bucket, r.Job, g); err != nil {
			return err
		}
		reply.Groups = append(reply.Groups, proto.RowGroup{G: g.g, Action: g.action, CRC: g.crc})
	}
	return nil
}

// dropSlices forgets the slices of a job served for iterations before
// iter. The caller holds w.omu.
func (w *Worker) dropSlices(j *ownJob, iter int) {
	keep := j.served[:0]
	for _, s := range j.served {
		if s.iter < iter {
			w.slices.Drop(s.name)
		} else {
			keep = append(keep, s)
		}
	}
	j.served = keep
}

// ownEnd forgets a job at epoch epoch or before (an admitted end).
func (w *Worker) ownEnd(job string, epoch int) {
	w.omu.Lock()
	defer w.omu.Unlock()
	if j := w.own[job]; j != nil && j.epoch <= epoch {
		j.cancel(errors.New("worker: the job ended"))
		w.dropSlices(j, math.MaxInt)
		delete(w.own, job)
	}
}
