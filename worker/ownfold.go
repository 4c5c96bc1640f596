package worker

import (
	"context"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// Memory of the owners exchange (docs/scaling.md, "Memory"): a task's
// K̂ and D̂ slices are the largest thing a worker makes, about the touched
// columns × m × 8 bytes per shard, ≈ 20× the shard's own bytes on dense
// data. Each one waits, served, until its owner pulls it at the commit.
// A slice this worker owns need not wait: when its fold is due at that
// shard (the canonical order, ColumnFold.Next), the task folds it into the
// owner's sums at once and serves nothing, and the commit's pull starts at
// the first shard not folded yet. On one worker every slice goes this
// way; the sums are bitwise those of the pull (the same values, added in
// the same order).

// foldIterate brings a fold of K block column block b to iteration iter:
// a fold of an earlier iteration starts afresh. It reports false when the
// fold is already of a later iteration (a task copy that lost the race to
// a commit: it folds nothing). The caller holds b.fmu.
func (b *ownBlock) foldIterate(iter int) bool {
	if iter < b.foldIter {
		return false
	}
	if iter > b.foldIter {
		b.fold.Reset()
		b.foldIter = iter
		b.ps.ready = nil
	}
	return true
}

// foldIterate is ownBlock.foldIterate for a row group's D̂ and x. The
// caller holds g.fmu.
func (g *ownGroup) foldIterate(iter, m int) bool {
	if iter < g.foldIter {
		return false
	}
	if iter > g.foldIter {
		g.dh = slices.Grow(g.dh[:0], len(g.rows)*m)[:len(g.rows)*m]
		g.x = slices.Grow(g.x[:0], len(g.rows))[:len(g.rows)]
		clear(g.dh)
		clear(g.x)
		g.folded = 0
		g.foldIter = iter
		g.ps.ready = nil
	}
	return true
}

// addSlice folds the D̂ slice p of the group's cell q (shard cells[q]) into
// g.dh and g.x: each row's values added to the row's sums. The caller
// holds g.fmu and has brought the fold to the slice's iteration.
func (g *ownGroup) addSlice(j *ownJob, q int, p *factor.Partial) error {
	m := j.m
	cells := j.rowLayout[g.g].Cells
	if p.Action < 0 || p.Action >= j.u || j.dblock(p.Action) != g.action || len(p.Y) != m || len(p.Cols) != 0 || len(p.Dh) != len(p.Rows)*m || len(p.X) != len(p.Rows) {
		return fmt.Errorf("worker: commit: row group %d: the D̂ slice of shard %d is of action %d with m = %d, %d rows and %d columns", g.g, cells[q], p.Action, len(p.Y), len(p.Rows), len(p.Cols))
	}
	if err := factor.CheckPartialValues(p); err != nil {
		return fmt.Errorf("worker: commit: row group %d, shard %d: %w", g.g, cells[q], err)
	}
	at := 0
	for c, i := range p.Rows {
		k, found := slices.BinarySearch(g.rows[at:], i)
		if !found {
			return fmt.Errorf("worker: commit: row group %d: the D̂ slice of shard %d has row %d, which the group does not hold (or out of order)", g.g, cells[q], i)
		}
		at += k
		dst := g.dh[at*m : at*m+m]
		for l, v := range p.Dh[c*m : c*m+m] {
			dst[l] += v
		}
		g.x[at] += p.X[c]
	}
	g.folded++
	return nil
}

// foldOwn folds the slices of a task's partial p (global rows and
// columns) that this worker owns and whose fold is due at this shard:
// the K̂ slices of column blocks of K block kb, and the D̂ slices of the
// shard's row groups (groups, with their row positions spans). It returns
// the column blocks (by C) and the groups (by position in groups) it
// folded: those slices are not served.
func (w *Worker) foldOwn(j *ownJob, r *proto.Request, kb int, p *factor.Partial, groups []int, spans [][2]int) (kdone map[int]bool, gdone map[int]bool, err error) {
	m := j.m
	kdone, gdone = map[int]bool{}, map[int]bool{}
	pos := slices.Index(j.shapes[kb].Shards, r.Shard)
	for _, cb := range j.layout[kb] {
		if cb.Owner != w.id || pos < 0 {
			continue
		}
		b, err := w.ownBlockOf(r.Job, r.Epoch, r.Fence, cb.KBlock, cb.C)
		if err != nil {
			return nil, nil, fmt.Errorf("worker: %w", err)
		}
		a, e := factor.SliceColumns(p.Cols, cb.Lo, cb.Hi)
		b.fmu.Lock()
		if b.foldIterate(r.Iteration) && b.fold.Next() == pos {
			if err := b.fold.Add(p.Cols[a:e], p.KhT[a*m:e*m]); err != nil {
				b.fmu.Unlock()
				return nil, nil, fmt.Errorf("worker: block %d/%d, shard %d of its K block: %w", cb.KBlock, cb.C, pos, err)
			}
			kdone[cb.C] = true
			w.kickPullLocked(j, b)
		}
		b.fmu.Unlock()
	}
	for q, gi := range groups {
		if j.rowLayout[gi].Owner != w.id {
			continue
		}
		g, err := w.ownGroupOf(r.Job, r.Epoch, r.Fence, gi)
		if err != nil {
			return nil, nil, fmt.Errorf("worker: %w", err)
		}
		cells := j.rowLayout[gi].Cells
		a, e := spans[q][0], spans[q][1]
		g.fmu.Lock()
		if g.foldIterate(r.Iteration, m) && g.folded < len(cells) && cells[g.folded] == r.Shard {
			sl := &factor.Partial{Action: p.Action, Rows: p.Rows[a:e], Dh: p.Dh[a*m : e*m], X: p.X[a:e], Y: make([]float64, m)}
			for _, x := range sl.X {
				sl.SumX += x
			}
			if err := g.addSlice(j, g.folded, sl); err != nil {
				g.fmu.Unlock()
				return nil, nil, err
			}
			gdone[q] = true
			w.kickPullLocked(j, g)
		}
		g.fmu.Unlock()
	}
	if k := len(kdone) + len(gdone); k > 0 {
		w.count(func(s *Stats) { s.SlicesFolded += int64(k) })
	}
	return kdone, gdone, nil
}

// ownShardOf returns the compact form of the task's shard (see ownShard),
// from the cache or fetched and compacted. The decoded shard is not kept
// beside it, nor the compact form's row-major arrays: an owners task
// computes on the compact form's column index only (12 bytes per
// nonzero where the decoded shard, its compact copy and the index held
// 36).
func (w *Worker) ownShardOf(ctx context.Context, obs jetstream.ObjectStore, r *proto.Request) (*ownShard, error) {
	if cs, ok := w.ownShards[r.ShardChecksum]; ok {
		return cs, nil
	}
	s, _, err := w.shard(ctx, obs, &wire.TaskRequest{Shard: r.Shard, Bucket: r.Bucket, ShardObject: r.ShardObject, ShardChecksum: r.ShardChecksum})
	if err != nil {
		return nil, err
	}
	cs := w.compactShard(s.Checksum, s.Block)
	// The kernel reads the column index only: the row-major arrays go.
	cs.blk.DropRowMajor()
	cs.info = s.Info
	cs.rows = s.Block.Rows
	cs.maxCol = -1
	if len(cs.cols) > 0 {
		cs.maxCol = cs.cols[len(cs.cols)-1]
	}
	// The compact form is what stays, whether the shard was fetched for
	// this task or built here by the ingest (keepShard): the decoded
	// shard's counts and column indices go (the memory proof at n = 2·10^6
	// found a worker's built shards held twice, 137 MB of them beside
	// their column index: docs/scaling.md §9.7). A later use of the
	// decoded shard (another job's init, a coordinator exchange task)
	// reads it from the Object Store again.
	delete(w.shards, r.ShardChecksum)
	n := len(w.shards)
	w.count(func(st *Stats) { st.ShardsCached = n })
	return cs, nil
}

// checkShape checks the shard against the job's shape (Block.CheckShape
// of the decoded shard).
func (cs *ownShard) checkShape(n, u int) error {
	if cs.info.Action < 0 || cs.info.Action >= u {
		return fmt.Errorf("factor: block action %d out of range [0, %d)", cs.info.Action, u)
	}
	r := -1
	if k := len(cs.rows); k > 0 {
		r = int(cs.rows[k-1])
	}
	if r >= n || int(cs.maxCol) >= n {
		return fmt.Errorf("factor: block of action %d has index (%d, %d) out of range for n=%d states", cs.info.Action, r, cs.maxCol, n)
	}
	return nil
}
