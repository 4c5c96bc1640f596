package worker

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// Early pulls (see wire.ReadySubject): a worker that serves a K̂ or D̂
// slice tells the slice's owner, and the owner folds the slices that are
// due (ColumnFold.Next for a column block of K, the next cell for a row
// group of D) while the pass runs, one at a time per fold, each
// dropped at its server once folded. So a slice lives about as long as
// the slices before it in the canonical order take to appear, not until
// the commit: on a cluster whose workers progress at one pace, a few per
// worker instead of one per shard computed. The commit pulls whatever is
// left (ownCommit, foldBlock, foldGroup), as before. D̂ slices were
// pulled only at the commit until the memory proof at n = 2·10^6 found
// them to be half of a worker's 396 MB of served slices at its peak
// (docs/scaling.md §9.7): a pass's D̂ slices are n·cells·(8m + 12)/P
// bytes a worker, growing with n. Nothing here decides a value:
// a slice folded early is the slice the commit would have pulled, folded
// at the same position.

// earlyPullTimeout bounds one early pull (a server that stopped answering
// leaves the slice to the commit, which has the coordinator's deadline).
const earlyPullTimeout = 30 * time.Second

// errNotServed is a slice an early pull could not use.
var errNotServed = errors.New("worker: slice not served, or not of its block")

// startReady subscribes to this worker's ready notices.
func (w *Worker) startReady() error {
	sub, err := w.nc.Subscribe(wire.ReadySubject(w.cfg.Prefix, w.id), w.serveReady)
	if err != nil {
		return err
	}
	_ = sub.SetPendingLimits(-1, -1)
	w.ready = sub
	return nil
}

// serveReady records a notice for a block or row group this worker owns
// in the notice's epoch; any other notice is dropped.
func (w *Worker) serveReady(msg *nats.Msg) {
	rd, err := wire.ParseReady(msg)
	if err != nil {
		w.log.Debug("ready notice dropped", "error", err)
		return
	}
	w.omu.Lock()
	j := w.own[rd.Job]
	var f earlyFold
	pos := -1
	// A notice naming a server outside the epoch is dropped: an early
	// pull fetches only from the epoch's workers (a client that may
	// publish notices cannot make an owner fold what it serves).
	if j != nil && j.epoch == rd.Epoch && j.members[rd.Worker] {
		if rd.Group >= 0 {
			if g := j.groups[rd.Group]; g != nil {
				f, pos = g, slices.Index(j.rowLayout[rd.Group].Cells, rd.Shard)
			}
		} else if b := j.blocks[[2]int{rd.KBlock, rd.C}]; b != nil {
			f, pos = b, slices.Index(j.shapes[rd.KBlock].Shards, rd.Shard)
		}
	}
	w.omu.Unlock()
	if f == nil || pos < 0 {
		return
	}
	w.sliceReady(j, f, rd.Iteration, pos, rd.Worker)
}

// earlyFold is a fold an early puller feeds: an owned column block's K̂
// fold (ownBlock) or an owned row group's D̂ fold (ownGroup). Every method
// but lock is called with the fold's lock held.
type earlyFold interface {
	lock() func()
	// pulls is the fold's early-pull state.
	pulls() *pullState
	// iterate brings the fold to iteration iter (false: it is of a later
	// one).
	iterate(j *ownJob, iter int) bool
	// foldIteration is the iteration the fold is of.
	foldIteration() int
	// due is the position due next in iteration iter; false when the
	// fold is done or of another iteration.
	due(j *ownJob, iter int) (int, bool)
	// slice is the name of the slice at position q and the most bytes
	// it may have.
	slice(j *ownJob, iter, q int) (name string, limit int)
	// add folds p, the slice at position q (the one due).
	add(j *ownJob, q int, p *factor.Partial) error
}

// pullState is a fold's early pulls: the known servers of its
// iteration's slices by position, and whether a puller runs.
type pullState struct {
	ready   map[int]string
	pulling bool
}

func (b *ownBlock) lock() func()      { b.fmu.Lock(); return b.fmu.Unlock }
func (b *ownBlock) pulls() *pullState { return &b.ps }
func (b *ownBlock) iterate(_ *ownJob, iter int) bool {
	return b.foldIterate(iter)
}

func (b *ownBlock) foldIteration() int { return b.foldIter }

func (b *ownBlock) due(_ *ownJob, iter int) (int, bool) {
	if b.foldIter != iter || b.fold.Done() {
		return 0, false
	}
	return b.fold.Next(), true
}

func (b *ownBlock) slice(j *ownJob, iter, q int) (string, int) {
	return wire.SliceName(j.job, j.epoch, iter, j.shapes[b.kb].Shards[q], b.c, j.sliceKey), wire.RawPartialSizeOf(0, b.hi-b.lo, j.m)
}

func (b *ownBlock) add(j *ownJob, _ int, p *factor.Partial) error {
	if p.Action != b.kb || len(p.Y) != j.m {
		return errNotServed
	}
	return b.fold.Add(p.Cols, p.KhT)
}

func (g *ownGroup) lock() func()      { g.fmu.Lock(); return g.fmu.Unlock }
func (g *ownGroup) pulls() *pullState { return &g.ps }
func (g *ownGroup) iterate(j *ownJob, iter int) bool {
	return g.foldIterate(iter, j.m)
}

func (g *ownGroup) foldIteration() int { return g.foldIter }

func (g *ownGroup) due(j *ownJob, iter int) (int, bool) {
	if g.foldIter != iter || g.folded >= len(j.rowLayout[g.g].Cells) {
		return 0, false
	}
	return g.folded, true
}

func (g *ownGroup) slice(j *ownJob, iter, q int) (string, int) {
	return wire.DSliceName(j.job, j.epoch, iter, j.rowLayout[g.g].Cells[q], g.g, j.sliceKey), wire.RawPartialSizeOf(len(g.rows), 0, j.m)
}

func (g *ownGroup) add(j *ownJob, q int, p *factor.Partial) error {
	return g.addSlice(j, q, p)
}

// sliceReady records that the slice of fold f at position pos (iteration
// iter) is served by worker src, and starts f's puller if that slice is
// due.
func (w *Worker) sliceReady(j *ownJob, f earlyFold, iter, pos int, src string) {
	defer f.lock()()
	if !f.iterate(j, iter) {
		return
	}
	ps := f.pulls()
	if ps.ready == nil {
		ps.ready = map[int]string{}
	}
	if _, ok := ps.ready[pos]; !ok {
		ps.ready[pos] = src
	}
	w.kickPullLocked(j, f)
}

// kickPullLocked starts f's puller when the slice due next is known to be
// served and none runs. The caller holds f's lock.
func (w *Worker) kickPullLocked(j *ownJob, f earlyFold) {
	ps := f.pulls()
	if ps.pulling {
		return
	}
	iter := f.foldIteration()
	q, ok := f.due(j, iter)
	if !ok {
		return
	}
	if _, ok := ps.ready[q]; !ok {
		return
	}
	if !w.begin() {
		return
	}
	ps.pulling = true
	go func() {
		defer w.tasks.Done()
		w.pullDue(j, f, iter)
	}()
}

// pullDue folds f's due slices of iteration iter while their servers are
// known, one at a time, and stops at the first unknown one, at any error
// (the commit pulls again and reports it) and when the fold moved on (a
// commit, a later iteration, the task's own fold).
func (w *Worker) pullDue(j *ownJob, f earlyFold, iter int) {
	ps := f.pulls()
	for {
		unlock := f.lock()
		q, ok := f.due(j, iter)
		src := ""
		if ok {
			src, ok = ps.ready[q]
		}
		if !ok {
			ps.pulling = false
			w.kickPullLocked(j, f) // a later iteration's, if it is due
			unlock()
			return
		}
		name, limit := f.slice(j, iter, q)
		unlock()
		var data []byte
		var err error
		subject := wire.SliceSubject(w.cfg.Prefix, src) + "." + name
		if src == w.id {
			if data, ok = w.slices.Get(name); !ok {
				err = errNotServed
			}
		} else {
			ctx, cancel := context.WithTimeout(j.ctx, earlyPullTimeout)
			if data, err = wire.FetchBlobAll(ctx, w.nc, subject, limit); err == nil {
				w.count(func(s *Stats) { s.BytesFetched += int64(len(data)) })
			}
			cancel()
		}
		var p *factor.Partial
		if err == nil {
			p, err = wire.DecodeRawPartial(data)
		}
		unlock = f.lock()
		folded := false
		if due, ok := f.due(j, iter); err == nil && ok && due == q {
			err = f.add(j, q, p)
			folded = err == nil
		}
		if !folded {
			// An error, or the fold moved on: the commit has the last
			// word.
			delete(ps.ready, q)
			ps.pulling = false
			w.kickPullLocked(j, f)
			unlock()
			if err != nil {
				w.log.Debug("early pull stopped", "slice", name, "worker", src, "error", err)
			}
			return
		}
		unlock()
		w.count(func(s *Stats) { s.SlicesPulledEarly++ })
		if src == w.id {
			w.slices.Drop(name)
			w.sliceDropped()
		} else {
			wire.DropBlob(w.nc, subject)
		}
	}
}

// announce tells the owners of the task's slices (but this worker) that
// they are served: those of K block kb's column blocks layout not folded
// by the task (served, by C) and those of the shard's row groups (groups,
// but those folded: gdone by position); and records those of blocks and
// groups this worker owns for its own pullers.
func (w *Worker) announce(j *ownJob, r *proto.Request, kb int, layout []proto.ColBlock, served map[int]bool, groups []int, gdone map[int]bool) {
	tell := func(owner string, rd wire.Ready, own func() (earlyFold, int, error)) {
		if owner != w.id {
			_ = w.nc.PublishMsg(rd.Msg(w.cfg.Prefix, owner))
			return
		}
		if f, pos, err := own(); err == nil && pos >= 0 {
			w.sliceReady(j, f, r.Iteration, pos, w.id)
		}
	}
	rd := wire.Ready{Job: r.Job, Epoch: r.Epoch, Iteration: r.Iteration, Shard: r.Shard, Worker: w.id, Group: -1}
	pos := slices.Index(j.shapes[kb].Shards, r.Shard)
	for _, cb := range layout {
		if !served[cb.C] {
			continue
		}
		rd.KBlock, rd.C = kb, cb.C
		tell(cb.Owner, rd, func() (earlyFold, int, error) {
			b, err := w.ownBlockOf(r.Job, r.Epoch, r.Fence, cb.KBlock, cb.C)
			return b, pos, err
		})
	}
	rd.KBlock, rd.C = 0, 0
	for q, g := range groups {
		if gdone[q] {
			continue
		}
		rd.Group = g
		tell(j.rowLayout[g].Owner, rd, func() (earlyFold, int, error) {
			og, err := w.ownGroupOf(r.Job, r.Epoch, r.Fence, g)
			return og, slices.Index(j.rowLayout[g].Cells, r.Shard), err
		})
	}
}

// Back-pressure on served slices. A worker whose tasks run ahead of the
// others' (a grid row that computes faster, an owner whose pullers get
// less of the CPU) serves slices that cannot be folded yet: an owner
// folds a block's slices in the canonical order, so a slice waits for
// every slice before it. Unbounded, that was about 25 tasks' slices a
// worker at n = 2·10^6 (docs/scaling.md §9.7). So an owners task waits,
// before it starts, while this worker serves slices of heldTasks or more
// earlier shards of its iteration (shards before it in the canonical
// order, the order of the pass and of every fold) not pulled yet, until
// a pull drops one, or for at most sliceWaitMax(the last task's time).
//
// It cannot deadlock: slices of later shards (a backup copy's) do not
// count, and the worker of the first shard not computed yet serves only
// slices of earlier shards, whose folds have every slice before them, so
// its owners pull them and it goes on. The bound on the wait keeps a
// slice whose early pull failed or whose notice was lost (it waits for
// the commit) from stalling the pass. Nothing here decides a value.
const heldTasks = 2

// sliceWaitMax bounds one task's wait: twice the last task's time, at
// least 100 ms and at most 10 s.
func sliceWaitMax(last time.Duration) time.Duration {
	return min(10*time.Second, max(100*time.Millisecond, 2*last))
}

// sliceDropped wakes the tasks waiting for a served slice to be pulled.
func (w *Worker) sliceDropped() {
	w.dmu.Lock()
	defer w.dmu.Unlock()
	close(w.dropCh)
	w.dropCh = make(chan struct{})
}

// heldBefore is the number of shards before shard whose slices of
// iteration iter this worker still serves.
func (w *Worker) heldBefore(j *ownJob, iter, shard int) int {
	w.omu.Lock()
	defer w.omu.Unlock()
	held, last := 0, -1
	for _, s := range j.served {
		if s.iter != iter || s.shard >= shard || s.shard == last {
			continue
		}
		if _, ok := w.slices.Get(s.name); ok {
			held, last = held+1, s.shard
		}
	}
	return held
}

// waitSlices holds task r back while this worker serves the slices of
// heldTasks or more earlier shards (see heldTasks).
func (w *Worker) waitSlices(ctx context.Context, j *ownJob, r *proto.Request) {
	w.dmu.Lock()
	limit := sliceWaitMax(w.lastTask)
	w.dmu.Unlock()
	start := time.Now()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		w.dmu.Lock()
		dropped := w.dropCh
		w.dmu.Unlock()
		if w.heldBefore(j, r.Iteration, r.Shard) < heldTasks {
			break
		}
		select {
		case <-dropped:
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		break
	}
	if d := time.Since(start); d > time.Millisecond {
		w.count(func(s *Stats) { s.SliceWaits++; s.SliceWaitSeconds += d.Seconds() })
	}
}
