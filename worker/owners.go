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
	"github.com/emsf/emsf/worker/wire"
)

// The owners exchange (see wire/owners.go for the protocol): this worker
// owns column blocks of K (their rows of K^T, served to the workers that
// gather them, and the fold of their K̂) and the rows of D of the shards
// it computes. All of it is per job and epoch: a request of an older
// epoch is refused, and a load of a newer epoch drops every block owned
// before (the coordinator rolled the job back to a checkpoint).

// ownJob is a job's state in the owners exchange.
type ownJob struct {
	job      string
	epoch    int
	n, m, u  int
	tie      factor.Tie
	groupNNZ int
	bucket   string
	blocks   map[[2]int]*ownBlock
	// layout[kblock] are the K block's column blocks with their owners,
	// shapes[kblock] its shards and their workers: the epoch's placement.
	layout [][]wire.ColBlock
	shapes map[int]wire.KShape
	// rows are the shards' rows of D by shard (the shard's rows in order,
	// m values each).
	rows map[int]*ownRows
	// served are the K̂ slice blobs served, with the iteration they are of.
	served []servedSlice
	// ctx is the epoch's: cancelled when a newer epoch, the job's end or
	// Stop replaces it.
	ctx    context.Context
	cancel context.CancelCauseFunc
}

type servedSlice struct {
	name string
	iter int
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
}

// ownRows are a shard's rows of D at one version.
type ownRows struct {
	version int
	rows    []float64
	crc     string
}

// startOwners registers the owners exchange's endpoints.
func (w *Worker) startOwners() error {
	var err error
	if w.slices, err = wire.ServeBlobs(w.nc, w.cfg.Prefix, w.id+"-s", math.MaxInt32); err != nil {
		return err
	}
	if err := w.svc.AddEndpoint("own", micro.HandlerFunc(w.handleOwn), micro.WithEndpointSubject(wire.OwnSubject(w.cfg.Prefix, w.id))); err != nil {
		return fmt.Errorf("worker: add endpoint: %w", err)
	}
	sub, err := w.nc.Subscribe(wire.GatherSubject(w.cfg.Prefix, w.id), w.serveGather)
	if err != nil {
		return fmt.Errorf("worker: gather: %w", err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	w.gather = sub
	return nil
}

// handleOwn serves an owners request on a goroutine of its own (owned:
// Stop waits for it), so that the load of a new epoch is seen at once and
// cancels what the old epoch still runs (a task gathering K from an owner
// that died, say). Requests of one epoch are sequenced by the coordinator.
func (w *Worker) handleOwn(req micro.Request) {
	if !w.begin() {
		data, _ := json.Marshal(wire.OwnReply{Worker: w.id, Error: ErrStopped.Error()})
		_ = req.Respond(data)
		return
	}
	go func() {
		defer w.tasks.Done()
		w.serveOwn(req)
	}()
}

func (w *Worker) serveOwn(req micro.Request) {
	reply := wire.OwnReply{Worker: w.id}
	var r wire.OwnRequest
	err := json.Unmarshal(req.Data(), &r)
	if err != nil {
		err = fmt.Errorf("worker: bad owners request: %w", err)
	}
	if err == nil && !slices.Contains([]string{wire.OpLoad, wire.OpTask, wire.OpCommit, wire.OpSave, wire.OpEnd}, r.Op) {
		err = fmt.Errorf("worker: unknown owners operation %q", r.Op)
	}
	var j *ownJob
	if err == nil && r.Op != wire.OpEnd {
		j, err = w.ownState(&r, r.Op == wire.OpLoad)
	}
	if err == nil && r.Op == wire.OpEnd {
		w.ownEnd(r.Job)
	} else if err == nil {
		ctx, cancel := context.WithCancel(j.ctx)
		if r.Deadline != 0 {
			ctx, cancel = context.WithDeadline(j.ctx, time.Unix(0, r.Deadline))
		}
		switch r.Op {
		case wire.OpLoad:
			err = w.ownLoad(ctx, j, &r)
		case wire.OpTask:
			w.running.Add(1)
			err = w.ownTask(ctx, j, &r, &reply)
			w.running.Add(-1)
		case wire.OpCommit:
			err = w.ownCommit(ctx, j, &r, &reply)
		case wire.OpSave:
			err = w.ownSave(ctx, j, &r, &reply)
		default:
			err = fmt.Errorf("worker: unknown owners operation %q", r.Op)
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
	}
	data, _ := json.Marshal(reply)
	_ = req.Respond(data)
}

// errSuperseded ends the requests of an epoch that a newer one replaced.
var errSuperseded = errors.New("worker: superseded by a newer epoch of the job")

// ownState returns the job's state for a request of epoch e: a newer
// epoch starts afresh (keeping the shards' rows, which are checked by
// CRC before use), an older one is refused.
func (w *Worker) ownState(r *wire.OwnRequest, create bool) (*ownJob, error) {
	w.omu.Lock()
	defer w.omu.Unlock()
	j := w.own[r.Job]
	if j != nil && r.Epoch < j.epoch {
		return nil, fmt.Errorf("worker: job %s: request of epoch %d, the job is at epoch %d", r.Job, r.Epoch, j.epoch)
	}
	if j != nil && r.Epoch == j.epoch {
		return j, nil
	}
	if !create {
		return nil, fmt.Errorf("worker: job %s epoch %d: no blocks loaded here", r.Job, r.Epoch)
	}
	tie, err := factor.ParseTie(r.Tie)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if r.N < 1 || r.M < 1 || r.U < 1 {
		return nil, fmt.Errorf("worker: job %s: bad shape n=%d m=%d u=%d", r.Job, r.N, r.M, r.U)
	}
	nj := &ownJob{job: r.Job, epoch: r.Epoch, n: r.N, m: r.M, u: r.U, tie: tie, groupNNZ: r.GroupNNZ, bucket: r.Bucket,
		blocks: map[[2]int]*ownBlock{}, shapes: map[int]wire.KShape{}, rows: map[int]*ownRows{}}
	nj.ctx, nj.cancel = context.WithCancelCause(w.ctx)
	if j != nil {
		j.cancel(errSuperseded)
		if j.n == nj.n && j.m == nj.m && j.u == nj.u && j.tie == nj.tie {
			nj.rows = j.rows
		}
		w.dropSlices(j, math.MaxInt)
	}
	w.own[r.Job] = nj
	return nj, nil
}

// ownLoad takes the blocks of a new placement from a checkpoint.
func (w *Worker) ownLoad(ctx context.Context, j *ownJob, r *wire.OwnRequest) error {
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
		name := wire.OwnersKObject(r.Job, r.Iteration, cb.KBlock, cb.C)
		data, err := obs.GetBytes(ctx, name)
		if err != nil {
			return fmt.Errorf("worker: load %s: %w", name, err)
		}
		if crc := wire.CRC(data); crc != cb.CRC {
			return fmt.Errorf("worker: load %s: CRC %s, the checkpoint says %s", name, crc, cb.CRC)
		}
		if len(data) != 8*(cb.Hi-cb.Lo)*j.m {
			return fmt.Errorf("worker: load %s: %d bytes, block [%d, %d) of m = %d has %d", name, len(data), cb.Lo, cb.Hi, j.m, 8*(cb.Hi-cb.Lo)*j.m)
		}
		b := &ownBlock{kb: cb.KBlock, c: cb.C, lo: cb.Lo, hi: cb.Hi, version: r.Iteration, kt: make([]float64, (cb.Hi-cb.Lo)*j.m), crc: cb.CRC}
		if err := wire.ReadFloats(b.kt, data); err != nil {
			return fmt.Errorf("worker: load %s: %w", name, err)
		}
		b.fold = factor.NewColumnFold(cb.Lo, cb.Hi, j.m, sh.NNZ, j.groupNNZ)
		w.omu.Lock()
		j.blocks[[2]int{cb.KBlock, cb.C}] = b
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
func (w *Worker) ownTask(ctx context.Context, j *ownJob, r *wire.OwnRequest, reply *wire.OwnReply) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	obs, err := w.store(ctx, r.Bucket)
	if err != nil {
		return err
	}
	s, _, err := w.shard(ctx, obs, &wire.TaskRequest{Shard: r.Shard, ShardObject: r.ShardObject, ShardChecksum: r.ShardChecksum})
	if err != nil {
		return err
	}
	if w.cfg.Delay > 0 && r.Iteration >= w.cfg.DelayFrom {
		t := time.NewTimer(w.cfg.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	b, m := s.Block, j.m
	if err := b.CheckShape(j.n, j.u); err != nil {
		return fmt.Errorf("worker: shard %d: %w", r.Shard, err)
	}
	kb := b.Action
	if j.tie == factor.TieSharedK {
		kb = 0
	}
	cs := w.compactShard(s.Checksum, b)
	md := w.compactModel(cs, m)
	// Rows of D at version Iteration−1.
	rows := j.rows[r.Shard]
	if rows == nil || rows.version != r.Iteration-1 || rows.crc != r.DCRC || len(rows.rows) != len(b.Rows)*m {
		if r.DObject == "" {
			return fmt.Errorf("worker: shard %d: rows of D of version %d are not here and the task names no checkpoint", r.Shard, r.Iteration-1)
		}
		data, err := obs.GetBytes(ctx, r.DObject)
		if err != nil {
			return fmt.Errorf("worker: shard %d: rows of D: %w", r.Shard, err)
		}
		if crc := wire.CRC(data); crc != r.DCRC {
			return fmt.Errorf("worker: shard %d: rows of D in %s have CRC %s, the task says %s", r.Shard, r.DObject, crc, r.DCRC)
		}
		rows = &ownRows{version: r.Iteration - 1, rows: make([]float64, len(b.Rows)*m), crc: r.DCRC}
		if err := wire.ReadFloats(rows.rows, data); err != nil {
			return fmt.Errorf("worker: shard %d: rows of D: %w", r.Shard, err)
		}
		j.rows[r.Shard] = rows
	}
	d := md.D[0]
	for q, i := range cs.blk.Rows {
		copy(d[int(i)*m:int(i)*m+m], rows.rows[q*m:q*m+m])
	}
	// K rows of the columns the shard touches, from their owners.
	t0 := time.Now()
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
	t2 := time.Now()
	// Commit the shard's rows of D: they are complete in this shard.
	alpha := r.Alpha
	if alpha == 0 {
		alpha = 1
	}
	for q := range p.Rows {
		factor.CommitRow(rows.rows[q*m:q*m+m], p.Dh[q*m:q*m+m], p.X[q], alpha)
	}
	rows.version, rows.crc = r.Iteration, wire.CRC(wire.FloatBytes(rows.rows))
	if r.SaveD != "" {
		if _, err := wire.PutObject(ctx, obs, w.nc.MaxPayload(), r.SaveD, wire.FloatBytes(rows.rows)); err != nil {
			rows.version = -1
			return fmt.Errorf("worker: shard %d: store rows of D: %w", r.Shard, err)
		}
	}
	// Serve the K̂ slices; drop those of earlier iterations (their
	// commits are done: the coordinator sequences).
	w.omu.Lock()
	w.dropSlices(j, r.Iteration)
	w.omu.Unlock()
	zero := make([]float64, m)
	var sent int64
	for _, cb := range j.layout[kb] {
		a, e := factor.SliceColumns(p.Cols, cb.Lo, cb.Hi)
		data := wire.EncodeRawPartial(&factor.Partial{Action: kb, Cols: p.Cols[a:e], KhT: p.KhT[a*m : e*m], Y: zero}, nil)
		name := wire.SliceName(r.Job, r.Epoch, r.Iteration, r.Shard, cb.C)
		w.slices.Put(name, data)
		sent += int64(len(data))
		w.omu.Lock()
		j.served = append(j.served, servedSlice{name, r.Iteration})
		w.omu.Unlock()
	}
	reply.Label = wire.Label{Job: r.Job, Iteration: r.Iteration, Shard: r.Shard, ShardChecksum: s.Checksum, ModelDigest: OwnersDigest(r.Epoch)}.String()
	reply.Y = slices.Clone(p.Y)
	reply.SumX, reply.NNZ = p.SumX, p.NNZ
	if !math.IsNaN(p.LogLik) {
		reply.LogLik, reply.HasLogLik = p.LogLik, true
	}
	reply.DCRC = rows.crc
	reply.GatherNanos, reply.ComputeNanos = int64(t1.Sub(t0)), int64(t2.Sub(t1))
	w.count(func(st *Stats) {
		st.Tasks++
		st.NNZ += int64(s.NNZ)
		st.ComputeSeconds += t2.Sub(t1).Seconds()
		st.BytesSent += sent
	})
	return nil
}

// OwnersDigest is the model digest a partial of the owners exchange is
// labelled with: the version is the task's iteration − 1 of that epoch
// (every K row and D row it read was checked against the version's CRC or
// served by the owner of that version).
func OwnersDigest(epoch int) string { return "owners-e" + strconv.Itoa(epoch) }

// ownShard is a shard in the compact form an owners task computes on:
// its rows and the columns it touches renumbered 0, 1, … in order, so
// that the worker holds only the rows of D and K^T its shard reads (not
// arrays of the model's full shape). The kernel visits columns ascending
// and rows ascending within a column, so the renumbered block adds every
// term in the same order: the partial is bitwise the shard's.
type ownShard struct {
	blk   *factor.Block
	rowLo int32
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
// N = max(rows spanned, columns touched), arrays reused across tasks
// (entries outside what a task writes are never read). The caller holds
// w.mu.
func (w *Worker) compactModel(cs *ownShard, m int) *factor.Model {
	n := len(cs.cols)
	if k := len(cs.blk.Rows); k > 0 {
		n = max(n, int(cs.blk.Rows[k-1])+1)
	}
	n = max(n, 1)
	md := w.ownMd
	if md == nil || md.M != m || md.N < n {
		md = &factor.Model{N: n, M: m, U: 1, D: [][]float64{make([]float64, n*m)}, KT: [][]float64{make([]float64, n*m)}}
		w.ownMd = md
	}
	return md
}

// gatherWindow is how many gather requests a task keeps in flight.
const gatherWindow = 8

// gatherK puts the K rows of cols (ascending) into kt, row q for cols[q]:
// from this worker's own blocks directly, from the others' owners by
// gather requests of at most one blob chunk each.
func (w *Worker) gatherK(ctx context.Context, j *ownJob, r *wire.OwnRequest, layout []wire.ColBlock, cols []int32, kt []float64) error {
	m := j.m
	per := max(1, min(wire.BlobChunk, int(w.nc.MaxPayload())-8<<10)/(8*m))
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
		for lo := a; lo < e; lo += per {
			part := cols[lo:min(lo+per, e)]
			dst := kt[lo*m : (lo+len(part))*m]
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
				if err := w.gatherPart(ctx, r, cb, part, dst, m); err != nil {
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

// gatherPart requests the K rows of part (columns of block cb) from cb's
// owner into dst (the rows in part's order).
func (w *Worker) gatherPart(ctx context.Context, r *wire.OwnRequest, cb wire.ColBlock, part []int32, dst []float64, m int) error {
	msg := nats.NewMsg(wire.GatherSubject(w.cfg.Prefix, cb.Owner))
	msg.Header.Set(wire.HeaderOwnJob, r.Job)
	msg.Header.Set(wire.HeaderOwnBlock, strconv.Itoa(cb.KBlock)+"/"+strconv.Itoa(cb.C))
	msg.Header.Set(wire.HeaderOwnVersion, strconv.Itoa(r.Iteration-1))
	msg.Header.Set(wire.HeaderOwnEpoch, strconv.Itoa(r.Epoch))
	msg.Data = wire.EncodeCols(part, nil)
	rep, err := w.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		return fmt.Errorf("gather K block %d/%d from %s: %w", cb.KBlock, cb.C, cb.Owner, err)
	}
	if e := rep.Header.Get(wire.HeaderBlobError); e != "" {
		return fmt.Errorf("gather K block %d/%d from %s: %s", cb.KBlock, cb.C, cb.Owner, e)
	}
	if len(rep.Data) != len(part)*m*8 {
		return fmt.Errorf("gather K block %d/%d from %s: %d bytes for %d rows", cb.KBlock, cb.C, cb.Owner, len(rep.Data), len(part))
	}
	if err := wire.ReadFloats(dst, rep.Data); err != nil {
		return err
	}
	w.count(func(s *Stats) { s.BytesFetched += int64(len(rep.Data)) })
	return nil
}

// ownBlockOf returns block (kb, c) of the job if this worker owns it in
// that epoch.
func (w *Worker) ownBlockOf(job string, epoch, kb, c int) (*ownBlock, error) {
	w.omu.Lock()
	j := w.own[job]
	var b *ownBlock
	if j != nil && j.epoch == epoch {
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
func (w *Worker) copyOwn(j *ownJob, r *wire.OwnRequest, cb wire.ColBlock, cols []int32, dst []float64) error {
	b, err := w.ownBlockOf(r.Job, r.Epoch, cb.KBlock, cb.C)
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

// serveGather answers a gather request for rows of an owned block.
func (w *Worker) serveGather(msg *nats.Msg) {
	reply := nats.NewMsg(msg.Reply)
	fail := func(err error) {
		reply.Header.Set(wire.HeaderBlobError, err.Error())
		_ = msg.RespondMsg(reply)
	}
	job := msg.Header.Get(wire.HeaderOwnJob)
	kbs, cs, _ := strings.Cut(msg.Header.Get(wire.HeaderOwnBlock), "/")
	kb, err1 := strconv.Atoi(kbs)
	c, err2 := strconv.Atoi(cs)
	v, err3 := strconv.Atoi(msg.Header.Get(wire.HeaderOwnVersion))
	e, err4 := strconv.Atoi(msg.Header.Get(wire.HeaderOwnEpoch))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		fail(fmt.Errorf("bad gather request: %w", err))
		return
	}
	b, err := w.ownBlockOf(job, e, kb, c)
	if err != nil {
		fail(err)
		return
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.version != v {
		fail(fmt.Errorf("block %d/%d is at version %d, not %d", kb, c, b.version, v))
		return
	}
	m := len(b.kt) / max(1, b.hi-b.lo)
	if limit := max(1, min(wire.BlobChunk, int(w.nc.MaxPayload())-8<<10)/(8*m)); len(msg.Data) > 4*limit {
		fail(fmt.Errorf("gather of %d columns: at most %d per request", len(msg.Data)/4, limit))
		return
	}
	cols, err := wire.DecodeCols(msg.Data, b.lo, b.hi, nil)
	if err != nil {
		fail(err)
		return
	}
	out := make([]float64, 0, len(cols)*m)
	for _, j := range cols {
		at := (int(j) - b.lo) * m
		out = append(out, b.kt[at:at+m]...)
	}
	reply.Data = wire.FloatBytes(out)
	_ = msg.RespondMsg(reply)
}

// ownCommit folds the owned blocks' K̂ slices and commits their columns.
func (w *Worker) ownCommit(ctx context.Context, j *ownJob, r *wire.OwnRequest, reply *wire.OwnReply) error {
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
		subjects := make([]string, len(sh.Shards))
		for q, k := range sh.Shards {
			subjects[q] = wire.SliceSubject(w.cfg.Prefix, sh.Workers[q]) + "." + wire.SliceName(r.Job, r.Epoch, r.Iteration, k, b.c)
		}
		if err := w.foldBlock(ctx, j, b, subjects); err != nil {
			return err
		}
		b.mu.Lock()
		if b.version != r.Iteration-1 {
			v := b.version
			b.mu.Unlock()
			return fmt.Errorf("worker: commit: block %d/%d is at version %d, the commit is of %d", b.kb, b.c, v, r.Iteration)
		}
		factor.CommitKRows(b.kt, b.fold.KhT(), y, j.m, alpha)
		b.version, b.crc = r.Iteration, wire.CRC(wire.FloatBytes(b.kt))
		cb := wire.ColBlock{KBlock: b.kb, C: b.c, Lo: b.lo, Hi: b.hi, Owner: w.id, CRC: b.crc}
		b.mu.Unlock()
		if r.Save {
			if err := w.saveBlock(ctx, obs, r.Job, b); err != nil {
				return err
			}
		}
		digest = append(digest, cb.CRC...)
		if r.Save {
			reply.Blocks = append(reply.Blocks, cb)
		}
	}
	reply.Digest = wire.CRC(digest)
	return nil
}

// foldWindow is how many K̂ slices an owner fetches ahead of its fold.
const foldWindow = 4

// foldBlock pulls a block's K̂ slices (one per shard of its K block, in
// block order) and folds them in the canonical order.
func (w *Worker) foldBlock(ctx context.Context, j *ownJob, b *ownBlock, refs []string) error {
	f := b.fold
	f.Reset()
	// The largest slice of this block: every column touched.
	maxSlice := wire.RawPartialSizeOf(0, b.hi-b.lo, j.m)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
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
		data, err := wire.FetchBlobAll(ctx, w.nc, ref, maxSlice)
		var p *factor.Partial
		if err == nil {
			p, err = wire.DecodeRawPartial(data)
		}
		if err == nil && (p.Action != b.kb || len(p.Y) != j.m) {
			err = fmt.Errorf("slice %s is of K block %d with m = %d, want %d and %d", ref, p.Action, len(p.Y), b.kb, j.m)
		}
		if err == nil {
			wire.DropBlob(w.nc, ref)
			w.count(func(s *Stats) { s.BytesFetched += int64(len(data)) })
		}
		out[k] <- got{p, err}
	}
	next := 0
	start := func() {
		for next < len(refs) && next < f.Next()+foldWindow {
			wg.Add(1)
			go fetch(next)
			next++
		}
	}
	for !f.Done() {
		start()
		k := f.Next()
		var g got
		select {
		case g = <-out[k]:
		case <-ctx.Done():
			return fmt.Errorf("worker: commit: block %d/%d: %w", b.kb, b.c, ctx.Err())
		}
		if g.err != nil {
			return fmt.Errorf("worker: commit: block %d/%d: %w", b.kb, b.c, g.err)
		}
		if err := f.Add(g.p.Cols, g.p.KhT); err != nil {
			return fmt.Errorf("worker: commit: block %d/%d, shard %d of its K block: %w", b.kb, b.c, k, err)
		}
	}
	return nil
}

func (w *Worker) saveBlock(ctx context.Context, obs jetstream.ObjectStore, job string, b *ownBlock) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	name := wire.OwnersKObject(job, b.version, b.kb, b.c)
	if _, err := wire.PutObject(ctx, obs, w.nc.MaxPayload(), name, wire.FloatBytes(b.kt)); err != nil {
		return fmt.Errorf("worker: store %s: %w", name, err)
	}
	return nil
}

// ownSave stores owned blocks and shards' rows of D at version Iteration
// (the last version of a fit, or a checkpoint the coordinator asks for).
func (w *Worker) ownSave(ctx context.Context, j *ownJob, r *wire.OwnRequest, reply *wire.OwnReply) error {
	obs, err := w.storeLocked(ctx, r.Bucket)
	if err != nil {
		return err
	}
	for _, cb := range r.Blocks {
		b, err := w.ownBlockOf(r.Job, r.Epoch, cb.KBlock, cb.C)
		if err != nil {
			return fmt.Errorf("worker: save: %w", err)
		}
		if b.version != r.Iteration {
			return fmt.Errorf("worker: save: block %d/%d is at version %d, not %d", b.kb, b.c, b.version, r.Iteration)
		}
		if err := w.saveBlock(ctx, obs, r.Job, b); err != nil {
			return err
		}
		reply.Blocks = append(reply.Blocks, wire.ColBlock{KBlock: b.kb, C: b.c, Lo: b.lo, Hi: b.hi, Owner: w.id, CRC: b.crc})
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range r.Shards {
		rows := j.rows[s]
		if rows == nil || rows.version != r.Iteration {
			return fmt.Errorf("worker: save: rows of D of shard %d at version %d are not here", s, r.Iteration)
		}
		name := wire.OwnersDObject(r.Job, r.Iteration, s)
		if _, err := wire.PutObject(ctx, obs, w.nc.MaxPayload(), name, wire.FloatBytes(rows.rows)); err != nil {
			return fmt.Errorf("worker: store %s: %w", name, err)
		}
		reply.DCRCs = append(reply.DCRCs, rows.crc)
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

// ownEnd forgets a job.
func (w *Worker) ownEnd(job string) {
	w.omu.Lock()
	defer w.omu.Unlock()
	if j := w.own[job]; j != nil {
		j.cancel(errors.New("worker: the job ended"))
		w.dropSlices(j, math.MaxInt)
		delete(w.own, job)
	}
}
