package owners

import (
	"cmp"
	"math"
	"slices"

	"github.com/emsf/emsf/coordinator/costmodel"
	"github.com/emsf/emsf/factor"
)

// Placement is where an epoch puts the job: each shard's worker, each row
// group's owner, each column block's owner (per K block), and each
// worker's predicted busy time (nonzeros × its cost).
type Placement struct {
	ShardW   []string
	GOwner   []string
	ColOwner [][]string
	Busy     map[string]float64
}

// Assign places plan p on workers ids (sorted). Each K block gets a group
// of workers (a whole one per K block when there are at least as many K
// blocks as workers: balanced by nonzeros, heaviest first). Without
// column cells, each shard goes to the worker of its group that would
// finish it first, by nonzeros × cost[worker] (a worker's seconds per
// nonzero as measured; workers not measured yet cost the median of the
// others, or 1), unless the worker that holds it (holders) is in the
// group and would finish it no later than that plus the shard's own time
// (affinity: a shard built or cached there stays, at most one shard off
// the balance); a shard's worker owns its row groups, and the column
// blocks go round the group. With column cells (shard.SplitGrid) a group
// of P_a workers is a grid of p_r × p_c (GridCols): the cell of row range
// r and column cell c goes to worker (r mod p_r, c mod p_c), the row
// groups of range r go round grid row r mod p_r, the column blocks of
// column cell c round grid column c mod p_c, so that a worker reads rows
// of D from its grid row only and rows of K from its grid column only:
// its traffic is ∝ n·m·(1/p_r + 1/p_c) instead of ∝ n·m.
func Assign(p *Plan, ids []string, cost map[string]float64, holders []string) Placement {
	def := 1.0
	if len(cost) > 0 {
		var cs []float64
		for _, c := range cost {
			cs = append(cs, c)
		}
		slices.Sort(cs)
		def = cs[len(cs)/2]
	}
	costOf := func(id string) float64 {
		if c, ok := cost[id]; ok {
			return c
		}
		return def
	}
	nk := len(p.KShards)
	kload := make([]int, nk)
	for kb, ks := range p.KShards {
		for _, k := range ks {
			kload[kb] += p.Shards[k].NNZ
		}
	}
	busy := map[string]float64{}
	first := func(g []string, nnz int) (string, float64) {
		best, at := "", math.Inf(1)
		for _, id := range g {
			if t := busy[id] + float64(nnz)*costOf(id); t < at {
				best, at = id, t
			}
		}
		return best, at
	}
	groups := make([][]string, nk)
	if nk >= len(ids) {
		order := make([]int, nk)
		for kb := range order {
			order[kb] = kb
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(kload[b], kload[a]) })
		for _, kb := range order {
			id, _ := first(ids, kload[kb])
			groups[kb] = []string{id}
			busy[id] += float64(kload[kb]) * costOf(id)
		}
		clear(busy)
	} else {
		for kb := range groups {
			groups[kb] = ids[kb*len(ids)/nk : (kb+1)*len(ids)/nk]
		}
	}
	pl := Placement{ShardW: make([]string, len(p.Shards)), GOwner: make([]string, len(p.Groups)), ColOwner: make([][]string, nk)}
	// Row groups of each K block, in order.
	kgroups := make([][]int, nk)
	for g, dg := range p.Groups {
		kb := p.kblock(p.Shards[dg.Cells[0]].Action)
		kgroups[kb] = append(kgroups[kb], g)
	}
	for kb := range p.KShards {
		g := groups[kb]
		cells := cellsPerRange(p, kb)
		if cells > 1 && len(g) > 1 && p.Tie != factor.TieSharedD {
			assignGrid(p, &pl, kb, g, kgroups[kb], cells)
			for _, k := range p.KShards[kb] {
				busy[pl.ShardW[k]] += float64(p.Shards[k].NNZ) * costOf(pl.ShardW[k])
			}
			continue
		}
		for _, k := range p.KShards[kb] {
			nnz := p.Shards[k].NNZ
			id, at := first(g, nnz)
			if len(holders) > 0 && holders[k] != "" && holders[k] != id && slices.Contains(g, holders[k]) {
				if h := holders[k]; busy[h]+float64(nnz)*costOf(h) <= at+float64(nnz)*costOf(id) {
					id = h
				}
			}
			pl.ShardW[k] = id
			busy[id] += float64(nnz) * costOf(id)
		}
		pl.ColOwner[kb] = make([]string, len(p.Cols[kb]))
		for c := range p.Cols[kb] {
			pl.ColOwner[kb][c] = g[c%len(g)]
		}
	}
	for gr, dg := range p.Groups {
		if pl.GOwner[gr] == "" {
			// Without a grid: the worker of the group's first shard.
			pl.GOwner[gr] = pl.ShardW[dg.Cells[0]]
		}
	}
	pl.Busy = busy
	return pl
}

// GridCols is p_c of the grid that a group of p workers forms over q
// column cells (see Assign): costmodel.GridCols, the grid that moves
// least per worker.
func GridCols(p, q int) int { return costmodel.GridCols(p, q) }

// cellsPerRange is the number of column cells the row ranges of K block
// kb are cut into (1: no grid): the distinct ColLo of its shards.
func cellsPerRange(p *Plan, kb int) int {
	seen := map[int]bool{}
	for _, k := range p.KShards[kb] {
		seen[p.Shards[k].ColLo] = true
	}
	return len(seen)
}

// assignGrid places K block kb's shards (column cells of its row groups
// kgroups, q distinct column cells) on the worker group g as a grid (see
// Assign).
func assignGrid(p *Plan, pl *Placement, kb int, g []string, kgroups []int, q int) {
	pc := GridCols(len(g), q)
	pr := len(g) / pc
	at := func(r, c int) string { return g[(r%pr)*pc+c%pc] }
	// Column cell index of each ColLo, ascending.
	var los []int
	for _, k := range p.KShards[kb] {
		los = append(los, p.Shards[k].ColLo)
	}
	slices.Sort(los)
	los = slices.Compact(los)
	cellOf := func(col int) int {
		c, found := slices.BinarySearch(los, col)
		if !found {
			c--
		}
		return max(c, 0)
	}
	// Row ranges in order; a range's groups go round its grid row.
	r, b := -1, 0
	for q, gr := range kgroups {
		if q == 0 || p.Groups[gr].Cells[0] != p.Groups[kgroups[q-1]].Cells[0] {
			r, b = r+1, 0
			for _, k := range p.Groups[gr].Cells {
				pl.ShardW[k] = at(r, cellOf(p.Shards[k].ColLo))
			}
		}
		pl.GOwner[gr] = at(r, (r/pr+b)%pc)
		b++
	}
	// Column blocks: by the column cell of their first column, round the
	// cell's grid column.
	pl.ColOwner[kb] = make([]string, len(p.Cols[kb]))
	seen := map[int]int{}
	for c, cb := range p.Cols[kb] {
		cc := cellOf(cb.Lo)
		pl.ColOwner[kb][c] = at(seen[cc], cc)
		seen[cc]++
	}
}

// Stragglers: a worker much slower than the others (a loaded machine, a
// slow disk) would make every pass wait for its shards. Within a pass the
// other workers take its queued shards and back up its running task
// (pass.go: MapReduce's backup tasks, first answer wins). A worker that
// stays slow is also re-placed at a checkpoint, so that it does not own
// more column blocks and row groups than it can serve: when its measured
// seconds per nonzero are at least twice the median's and the last pass's
// per-worker times predict that a placement weighted by each worker's
// measured seconds per nonzero ends the pass in under 3/4 of the time,
// the sequencer starts a new epoch on that placement (from the
// checkpoint just written: nothing is replayed). The straggler keeps the
// share it can finish in time.
const (
	rebalanceGain   = 0.75
	stragglerFactor = 2
)

// Rebalance updates cost (seconds per nonzero, by worker) from the last
// pass's busy times and nonzeros per worker, and reports whether a
// placement by the new costs on workers pays (see above): the pass took
// was seconds, it would take will.
func Rebalance(p *Plan, workers []string, cost map[string]float64, busy, nnz map[string]float64, holders []string) (ok bool, was, will float64) {
	if len(workers) < 2 || len(busy) == 0 {
		return false, 0, 0
	}
	for id, b := range busy {
		if nnz[id] > 0 {
			cost[id] = b / nnz[id]
		}
		was = max(was, b)
	}
	// Only a real straggler: its cost at least twice the median's.
	var cs []float64
	for _, id := range workers {
		if c, ok := cost[id]; ok {
			cs = append(cs, c)
		}
	}
	slices.Sort(cs)
	if len(cs) < 2 || cs[len(cs)-1] < stragglerFactor*cs[len(cs)/2] {
		return false, was, 0
	}
	for _, b := range Assign(p, workers, cost, holders).Busy {
		will = max(will, b)
	}
	return will < rebalanceGain*was, was, will
}
