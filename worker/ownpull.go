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

// Early pulls (see wire.ReadySubject): a worker that serves a K̂ slice
// tells the slice's owner, and the owner folds the slices that are due
// (ColumnFold.Next) while the pass runs, one at a time per block, each
// dropped at its server once folded. So a slice lives about as long as
// the slices before it in the canonical order take to appear, not until
// the commit: on a cluster whose workers progress at one pace, a few per
// worker instead of one per shard computed. The commit pulls whatever is
// left (ownCommit, foldBlock), as before. Nothing here decides a value:
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

// serveReady records a notice for a block this worker owns in the
// notice's epoch; any other notice is dropped.
func (w *Worker) serveReady(msg *nats.Msg) {
	rd, err := wire.ParseReady(msg)
	if err != nil {
		w.log.Debug("ready notice dropped", "error", err)
		return
	}
	w.omu.Lock()
	j := w.own[rd.Job]
	var b *ownBlock
	if j != nil && j.epoch == rd.Epoch {
		b = j.blocks[[2]int{rd.KBlock, rd.C}]
	}
	w.omu.Unlock()
	if b == nil {
		return
	}
	pos := slices.Index(j.shapes[rd.KBlock].Shards, rd.Shard)
	if pos < 0 {
		return
	}
	w.sliceReady(j, b, rd.Iteration, pos, rd.Worker)
}

// sliceReady records that the slice of block b at position pos of its K
// block (iteration iter) is served by worker src, and starts the block's
// puller if that slice is due.
func (w *Worker) sliceReady(j *ownJob, b *ownBlock, iter, pos int, src string) {
	b.fmu.Lock()
	defer b.fmu.Unlock()
	if !b.foldIterate(iter) {
		return
	}
	if b.ready == nil {
		b.ready = map[int]string{}
	}
	if _, ok := b.ready[pos]; !ok {
		b.ready[pos] = src
	}
	w.kickPullLocked(j, b)
}

// kickPullLocked starts block b's puller when the slice due next is known
// to be served and none runs. The caller holds b.fmu.
func (w *Worker) kickPullLocked(j *ownJob, b *ownBlock) {
	if b.pulling || b.fold.Done() {
		return
	}
	if _, ok := b.ready[b.fold.Next()]; !ok {
		return
	}
	if !w.begin() {
		return
	}
	b.pulling = true
	iter := b.foldIter
	go func() {
		defer w.tasks.Done()
		w.pullDue(j, b, iter)
	}()
}

// pullDue folds block b's due slices of iteration iter while their
// servers are known, one at a time, and stops at the first unknown one,
// at any error (the commit pulls again and reports it) and when the
// fold moved on (a commit, a later iteration, the task's own fold).
func (w *Worker) pullDue(j *ownJob, b *ownBlock, iter int) {
	m := j.m
	limit := wire.RawPartialSizeOf(0, b.hi-b.lo, m)
	for {
		b.fmu.Lock()
		src, ok := "", false
		q := -1
		if b.foldIter == iter && !b.fold.Done() {
			q = b.fold.Next()
			src, ok = b.ready[q]
		}
		if !ok {
			b.pulling = false
			w.kickPullLocked(j, b) // a later iteration's, if it is due
			b.fmu.Unlock()
			return
		}
		b.fmu.Unlock()
		name := wire.SliceName(j.job, j.epoch, iter, j.shapes[b.kb].Shards[q], b.c, j.sliceKey)
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
		if err == nil && (p.Action != b.kb || len(p.Y) != m) {
			err = errNotServed
		}
		b.fmu.Lock()
		folded := false
		if err == nil && b.foldIter == iter && !b.fold.Done() && b.fold.Next() == q {
			err = b.fold.Add(p.Cols, p.KhT)
			folded = err == nil
		}
		if !folded {
			// An error, or the fold moved on: the commit has the last
			// word.
			delete(b.ready, q)
			b.pulling = false
			w.kickPullLocked(j, b)
			b.fmu.Unlock()
			if err != nil {
				w.log.Debug("early pull stopped", "slice", name, "worker", src, "error", err)
			}
			return
		}
		b.fmu.Unlock()
		w.count(func(s *Stats) { s.SlicesPulledEarly++ })
		if src == w.id {
			w.slices.Drop(name)
		} else {
			wire.DropBlob(w.nc, subject)
		}
	}
}

// announce tells the owners of K block kb's column blocks layout (but
// this worker) that the task's slices are served, and records those of
// blocks this worker owns (not folded by the task) for its own pullers.
func (w *Worker) announce(j *ownJob, r *proto.Request, kb int, layout []proto.ColBlock, served map[int]bool) {
	pos := slices.Index(j.shapes[kb].Shards, r.Shard)
	for _, cb := range layout {
		if !served[cb.C] {
			continue
		}
		if cb.Owner != w.id {
			rd := wire.Ready{Job: r.Job, Epoch: r.Epoch, Iteration: r.Iteration, KBlock: kb, C: cb.C, Shard: r.Shard, Worker: w.id}
			_ = w.nc.PublishMsg(rd.Msg(w.cfg.Prefix, cb.Owner))
			continue
		}
		if b, err := w.ownBlockOf(r.Job, r.Epoch, r.Fence, cb.KBlock, cb.C); err == nil && pos >= 0 {
			w.sliceReady(j, b, r.Iteration, pos, w.id)
		}
	}
}
