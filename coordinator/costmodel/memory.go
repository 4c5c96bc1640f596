package costmodel

import (
	"fmt"
	"math"
)

// Memory per node of the owners exchange (designs B and C as built),
// for the target design of specs/distributed-ingest.md §4.2, where each
// worker builds and holds its own shards and the coordinator holds
// metadata only. Per worker (s = 8 bytes a value, P_a the nodes of an
// action, k = a node's shards):
//
//   - Shards: the kernel's column index of its shards, 12 bytes a
//     nonzero (int32 row, float64 count) and 12 a (shard, touched
//     column) (column, its start, its global index), plus 8 a row:
//     12·η/P + 12·k·c_s + 8·rows, c_s = n·f(η_s, n) the columns a shard
//     of η_s nonzeros touches.
//   - Owned: its share of every D and K block, the values and the fold
//     of their D̂ or K̂: 2·(D + K blocks)·n·m·s/P, and x (n·s per D
//     block, /P); and, where a K block has G > 1 reduction groups
//     (η/K blocks > GroupNNZ), the reduction tree's pending sums of K̂
//     (factor.Reducer: ⌊log2 G⌋ more of its share of each K block,
//     measured as one at n = 2·10^6, 40M nonzeros, G = 2).
//   - Task: the running shard's rows of D and K^T gathered from their
//     owners and its partial's D̂ and K̂ rows: 2·m·s·(c_s + r_s), plus
//     the kernel's scratch, 8 bytes a nonzero.
//   - Slices: the K̂ and D̂ slices served and not yet pulled, Slices
//     tasks' worth ((m·s + 4)·c_s + (m·s + 12)·r_s each), and the
//     owners' pull window (4 slices of one column block in flight), less
//     the 1/P a worker owns and folds at its task (worker/ownfold.go):
//     none on one worker.
//   - Buffers: the NATS client's and the gather window's (8 requests of
//     ≤ 1 MiB in flight): MemBuffers.
//   - Base: the runtime, code and libraries of an idle worker, MemBase.
//
// The Go heap (all but Base) is then scaled by 1 + GOGC/100: the
// collector lets the heap grow that far above what is live (emsf worker
// runs at GOGC 25).
//
// The coordinator of the target design holds metadata: ≈ 250 bytes a
// shard line, ≈ 1 KiB a worker, each K block's Y and its reduction
// groups' sums, over its own Base. Today's coordinator still reads every
// transition, counts and cuts every shard and holds the whole model:
// about the local fit's peak (measured, docs/scaling.md §9).

// MemCalibration holds the constants of the memory model.
type MemCalibration struct {
	// ShardNNZ is the nonzeros of a shard (emsf fit --shard-nnz; 0:
	// 131072, its default).
	ShardNNZ float64
	// GOGC is the workers' GC percent (0: 25, emsf worker's default).
	GOGC float64
	// Base and Buffers are bytes (0: 35 MB and 16 MB, measured on an idle
	// worker and the gather window).
	Base, Buffers float64
	// Slices is the number of tasks whose slices a worker holds at its
	// peak (0: 5, from heap profiles of workers at P = 6: 82 MB of
	// served slices, 5 tasks' worth with --col-cells 2 and 2.7 without,
	// while the early pulls wait for a slower worker's slice; since then
	// a task waits while a worker serves the slices of 2 earlier shards,
	// worker/ownpull.go: the bound is then 3 tasks' slices; 5 is kept,
	// the fitted value, as the checks of docs/scaling.md §9.4 and §9.10
	// pass with it).
	Slices float64
	// GroupNNZ is the nonzeros of a reduction group (emsf fit
	// --group-nnz; 0: 1<<25, factor.DefaultGroupNNZ).
	GroupNNZ float64
}

func (c MemCalibration) withDefaults() MemCalibration {
	if c.ShardNNZ == 0 {
		c.ShardNNZ = 131072
	}
	if c.GOGC == 0 {
		c.GOGC = 25
	}
	if c.Base == 0 {
		c.Base = 35e6
	}
	if c.Buffers == 0 {
		c.Buffers = 16e6
	}
	if c.Slices == 0 {
		c.Slices = 5
	}
	if c.GroupNNZ == 0 {
		c.GroupNNZ = 1 << 25
	}
	return c
}

// MemEstimate is the memory of one node, in bytes, by part.
type MemEstimate struct {
	P int
	// The parts of a worker (see the package's memory model).
	Shards, Owned, Task, Slices, Buffers, Base float64
	// Headroom is the collector's: (GOGC/100)·the heap's parts.
	Headroom float64
	// Worker is the sum: the peak resident set of a worker.
	Worker float64
	// Coordinator is the target design's coordinator (metadata).
	Coordinator float64
}

// Memory estimates the memory per worker of the owners exchange with
// the workload's shards on P nodes (design B: a worker's share of every
// block; with w.ColCells, design C's column cells make a shard touch
// columns of its cell only).
func Memory(w Workload, p int, c MemCalibration) (MemEstimate, error) {
	if err := w.Validate(); err != nil {
		return MemEstimate{}, err
	}
	if p < 1 {
		return MemEstimate{}, fmt.Errorf("costmodel: P = %d: must be >= 1", p)
	}
	c = c.withDefaults()
	if !(c.ShardNNZ > 0) || !(c.GroupNNZ > 0) || c.GOGC < 0 || c.Base < 0 || c.Buffers < 0 || c.Slices < 0 {
		return MemEstimate{}, fmt.Errorf("costmodel: memory calibration %+v: must be >= 0 (shard and group nonzeros > 0)", c)
	}
	n, m, u, s := float64(w.N), float64(w.M), float64(w.U), w.s()
	P := float64(p)
	kblocks, dblocks := u, u
	if w.SharedK {
		kblocks = 1
	}
	// A row range's nonzeros and rows (the cut adds whole rows until
	// ShardNNZ; a row of an action holds η/(u·n) nonzeros on average),
	// and a shard's: the range cut into q column cells of n/q columns.
	q := float64(max(1, w.ColCells))
	etaR := math.Min(c.ShardNNZ, w.NNZ/u)
	rS := math.Min(n, etaR*u*n/w.NNZ)
	etaS, cols := etaR/q, n/q
	cS := cols * Touched(etaS, int(math.Max(1, cols)))
	if w.TouchedFraction > 0 {
		cS = w.TouchedFraction * cols
	}
	nodeNNZ := w.NNZ / P
	shards := nodeNNZ / etaS
	e := MemEstimate{P: p}
	e.Shards = 12*nodeNNZ + 12*shards*cS + 8*shards*rS
	e.Owned = (2*(dblocks+kblocks)*n*m*s + dblocks*n*s) / P
	if g := math.Ceil(w.NNZ / kblocks / c.GroupNNZ); g > 1 {
		e.Owned += math.Floor(math.Log2(g)) * kblocks * n * m * s / P
	}
	e.Task = 2*m*s*(cS+rS) + 8*etaS
	// The slices of the blocks and groups this worker owns (1/P of
	// them) are folded by the task at once: none on one worker.
	slice := ((m*s+4)*cS + (m*s+12)*rS) * (1 - 1/P)
	// An owner pulls slices of one column block at a time: a shard's
	// columns within the block (emsf's default blocks hold 4 MiB of K).
	cb := w.ColBlocks
	if cb == 0 {
		cb = DefaultColBlocks(w.N, w.M)
	}
	width := math.Min(cols, n/float64(cb))
	e.Slices = c.Slices*slice + 4*(m*s+4)*cS*width/cols*(1-1/P)
	e.Buffers, e.Base = c.Buffers, c.Base
	heap := e.Shards + e.Owned + e.Task + e.Slices + e.Buffers
	e.Headroom = c.GOGC / 100 * heap
	e.Worker = heap + e.Headroom + e.Base
	// The target coordinator: a line of ≈ 250 bytes per shard, ≈ 1 KiB
	// of state per worker, each K block's Y and its groups' sums.
	e.Coordinator = c.Base + 250*w.NNZ/etaS + 1024*P + kblocks*m*s*(1+GroupsPerAction)
	return e, nil
}
