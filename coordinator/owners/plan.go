package owners

import (
	"fmt"
	"math"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/wire/proto"
)

// Job is what a fit of the owners exchange is made of, as metadata: no
// shard, row of D or column of K is here.
type Job struct {
	// Name is the job's name (its record's key, its objects' prefix).
	Name string
	// Shards are the shards' lines, in shard order (ID = index), with
	// Rows and DataTerm filled in (shard.Describe, or the builders).
	Shards []shard.Info
	// Groups are the row groups of D (shard.CutDGroups, or the
	// builders), with RowsCRC, the CRC of each group's row list stored as
	// proto.RowsObject(Name, g).
	Groups []shard.DGroup
	// Holders, when set, names for each shard the worker that already
	// holds it ("" for none): placement keeps a shard there when that
	// costs the balance at most one shard (see assign).
	Holders []string
	// Bucket is the object bucket the workers read shards and
	// checkpoints from; JobsBucket the bucket of the job's record, which
	// workers prove epochs against.
	Bucket, JobsBucket string
}

// Plan is a job's decomposition, fixed at its creation from the
// metadata: the canonical reduce order, each K block's shards, the
// column blocks of K and the row groups of D.
type Plan struct {
	Job     string
	N, M, U int
	Tie     factor.Tie
	Shards  []shard.Info
	Groups  []shard.DGroup
	Reduce  *factor.ReducePlan
	// KShards are each K block's shards in block order; Cols each K
	// block's column blocks (Owner and CRC empty: a placement's).
	KShards [][]int
	Cols    [][]proto.ColBlock
}

// NewPlan checks job's metadata against the model's shape (hdr: n, m, u,
// tie) and plans it: the reduce order of groupNNZ (factor.PlanReduce,
// the local fit's), colBlocks column blocks per K block (0: one per 4 MiB
// of K^T rows, at most 1024).
func NewPlan(job *Job, hdr *factor.Model, groupNNZ, colBlocks int) (*Plan, error) {
	p := &Plan{Job: job.Name, N: hdr.N, M: hdr.M, U: hdr.U, Tie: hdr.Tie, Shards: job.Shards, Groups: job.Groups}
	if err := p.check(job); err != nil {
		return nil, fmt.Errorf("owners: job %s: %w", job.Name, err)
	}
	actions, nnz := make([]int, len(p.Shards)), make([]int, len(p.Shards))
	p.KShards = make([][]int, factor.NumK(p.U, p.Tie))
	for k, in := range p.Shards {
		actions[k], nnz[k] = in.Action, in.NNZ
		kb := p.kblock(in.Action)
		p.KShards[kb] = append(p.KShards[kb], k)
	}
	p.Reduce = factor.PlanReduce(actions, nnz, p.Tie, groupNNZ)
	c := colBlocks
	if c <= 0 {
		c = min(1024, max(1, (p.N*p.M*8+4<<20-1)/(4<<20)))
	}
	c = min(c, p.N)
	w := (p.N + c - 1) / c
	p.Cols = make([][]proto.ColBlock, len(p.KShards))
	for kb := range p.Cols {
		for lo, k := 0, 0; lo < p.N; lo, k = lo+w, k+1 {
			p.Cols[kb] = append(p.Cols[kb], proto.ColBlock{KBlock: kb, C: k, Lo: lo, Hi: min(p.N, lo+w)})
		}
	}
	return p, nil
}

// check checks the metadata: every line and group within the model's
// shape, groups that name shards of their D block in order, every shard
// with rows in a group. Metadata may come from other processes: a bad
// value is an error naming it, never a panic or a wrong plan.
func (p *Plan) check(job *Job) error {
	if p.N < 1 || p.M < 1 || p.U < 1 {
		return fmt.Errorf("bad model shape n=%d m=%d u=%d", p.N, p.M, p.U)
	}
	if len(p.Shards) == 0 {
		return fmt.Errorf("no shards")
	}
	fin := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	for k, in := range p.Shards {
		switch {
		case in.ID != k:
			return fmt.Errorf("shard line %d has ID %d", k, in.ID)
		case in.Action < 0 || in.Action >= p.U:
			return fmt.Errorf("shard %d: action %d outside [0, %d)", k, in.Action, p.U)
		case in.RowLo < 0 || in.RowLo > in.RowHi || in.RowHi > p.N:
			return fmt.Errorf("shard %d: rows [%d, %d) outside [0, %d)", k, in.RowLo, in.RowHi, p.N)
		case in.ColLo < 0 || in.ColLo > in.ColHi || in.ColHi > p.N:
			return fmt.Errorf("shard %d: columns [%d, %d) outside [0, %d)", k, in.ColLo, in.ColHi, p.N)
		case in.NNZ < 0 || in.Rows < 0 || in.Rows > in.NNZ || in.Rows > in.RowHi-in.RowLo:
			return fmt.Errorf("shard %d: %d nonzeros in %d rows of [%d, %d)", k, in.NNZ, in.Rows, in.RowLo, in.RowHi)
		case !fin(in.Sum) || in.Sum < 0 || !fin(in.DataTerm):
			return fmt.Errorf("shard %d: Σcount %v, data term %v", k, in.Sum, in.DataTerm)
		case in.Checksum == "":
			return fmt.Errorf("shard %d: no checksum", k)
		}
	}
	if len(job.Holders) != 0 && len(job.Holders) != len(p.Shards) {
		return fmt.Errorf("%d holders for %d shards", len(job.Holders), len(p.Shards))
	}
	grouped := make([]bool, len(p.Shards))
	for g, dg := range p.Groups {
		switch {
		case dg.DBlock < 0 || dg.DBlock >= factor.NumD(p.U, p.Tie):
			return fmt.Errorf("row group %d: D block %d outside [0, %d)", g, dg.DBlock, factor.NumD(p.U, p.Tie))
		case dg.Lo < 0 || dg.Lo > dg.Hi || dg.Hi > p.N || dg.Rows < 0 || dg.Rows > dg.Hi-dg.Lo || (dg.Rows > 0) != (dg.Hi > dg.Lo):
			return fmt.Errorf("row group %d: %d rows in [%d, %d) of n = %d", g, dg.Rows, dg.Lo, dg.Hi, p.N)
		case len(dg.Cells) == 0:
			return fmt.Errorf("row group %d: no shards", g)
		case dg.Rows > 0 && dg.RowsCRC == "":
			return fmt.Errorf("row group %d: no CRC of its row list", g)
		}
		for q, k := range dg.Cells {
			if k < 0 || k >= len(p.Shards) || (q > 0 && k <= dg.Cells[q-1]) {
				return fmt.Errorf("row group %d: shards %v are not distinct shards in order", g, dg.Cells)
			}
			if d := p.dblock(p.Shards[k].Action); d != dg.DBlock {
				return fmt.Errorf("row group %d of D block %d names shard %d, of D block %d", g, dg.DBlock, k, d)
			}
			grouped[k] = true
		}
	}
	for k, in := range p.Shards {
		if in.Rows > 0 && !grouped[k] {
			return fmt.Errorf("shard %d has %d rows in no row group", k, in.Rows)
		}
	}
	return nil
}

// kblock is the K block of action a; dblock its D block.
func (p *Plan) kblock(a int) int {
	if p.Tie == factor.TieSharedK {
		return 0
	}
	return a
}

func (p *Plan) dblock(a int) int {
	if p.Tie == factor.TieSharedD {
		return 0
	}
	return a
}

// Sums are the data's Σc and data term, folded over the shard lines in
// shard order as factor.TotalCount and factor.DataTerm fold the blocks.
func (p *Plan) Sums() factor.DataSums {
	var s factor.DataSums
	terms := make([]float64, len(p.Shards))
	for k, in := range p.Shards {
		s.Total += in.Sum
		terms[k] = in.DataTerm
	}
	s.DataTerm = factor.SumDataTerms(terms)
	return s
}

// owned returns, per worker, the column blocks and row groups it owns
// under cols (a placement's) and gowner.
func owned(cols [][]proto.ColBlock, gowner []string) (map[string][]proto.ColBlock, map[string][]int) {
	blocks, groups := map[string][]proto.ColBlock{}, map[string][]int{}
	for _, cbs := range cols {
		for _, cb := range cbs {
			blocks[cb.Owner] = append(blocks[cb.Owner], cb)
		}
	}
	for g, id := range gowner {
		groups[id] = append(groups[id], g)
	}
	return blocks, groups
}
