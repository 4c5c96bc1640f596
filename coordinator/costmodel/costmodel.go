// Package costmodel is the cost model of a cluster iteration of EMSF
// (specs/scale-out.md §5): bytes per node and through the coordinator,
// compute, transfer and iteration time, for today's star (design A), the
// column-owner design (B, actions spread over all nodes or grouped on
// node groups) and the 2D grid (C). It is pure arithmetic, no I/O: the
// `emsf scaling` command prints its tables and checks it against the
// figures measured by scripts/netns-cluster.sh.
//
// # Formulas (per iteration; nms = n·m·s, one dense K or D block)
//
// Touched fraction of a block's columns by η' random nonzeros over n
// columns: f(η', n) = 1 − exp(−η'/n).
//
//   - A, star (every node holds one shard of every action, the default
//     at scale): a node pulls the whole K block of each action it
//     computes (u·nms in) and returns K̂ for the columns its shards touch
//     and D̂ for its rows (u·(f_a·nms + (n/P)·m·s) out, f_a =
//     f(η_a/P, n)). The coordinator carries P times both. Today's code
//     sends a node's K blocks and partials one task after the other, so
//     the coordinator's two directions overlap only between nodes:
//     T_comm = (max(in, out) + min(in, out)/u)/B for P > 1, (in + out)/B
//     for P = 1 (an overlap rule fitted on the netns harness). The reduce adds
//     every partial on the coordinator: T_merge = coordinator in / MemBW.
//   - B, owners: per node and action, in = out = 2·f_a·(1−1/P_a)·nms
//     (expand the touched columns owned elsewhere, fold the K̂ slices of
//     columns owned elsewhere); spread: P_a = P, × u actions; grouped:
//     P_a = P/u, one action per node (0 bytes when P ≤ u: whole actions
//     per node, the busiest node computing ⌈u/P⌉ actions). With k shards
//     of a K block on one node (Workload.Shards) each shard gathers and
//     sends its own slice: × k, f_a taken per shard; ColExtra adds the
//     int32 column index of a gather request and of a K̂ slice. The
//     coordinator (whose messages a node's link carries too, 1/P of
//     them), in the spec's idealisation, carries G·u·(m·s + 256)
//     bytes of per-group sums in and P·(control + u·m·s) out. The
//     protocol as built (worker/wire/owners.go, Workload.ColBlocks > 0)
//     sends the epoch's layout once (in the load) and per iteration a
//     task and a reply per shard (scalars, an m-vector, a CRC) and a
//     commit (the global Y of the owner's K blocks) and its digest per
//     owner; the owners pull the K̂ slices from the workers under
//     deterministic names: OwnersCoordBytes, fitted on emsf's own byte
//     count. Neither depends on n or on the column blocks (beyond the
//     owners they make); emsf's default shards grow with η.
//   - C, 2D grid pr×pc per action: per node and action in = out =
//     2·m·s·((n/pr)(pc−1)/pc + (n/pc)(pr−1)/pr).
//
// Compute: T_comp = (nonzeros of the busiest node)·t/c. Transfer of X
// bytes over a node's link: X·max(1/B, κ/conns) + RTT·⌈chunks/W⌉, with κ
// the CPU per byte of NATS transport. Iteration: max(T_comp, T_comm) +
// T_sync when the expand overlaps compute (B, C), and T_comm + T_merge +
// the compute tail for A, plus T_sync (a few RTTs). Calibration.Serial models today's owners
// exchange, which gathers, computes and folds one after the other:
// T_iter = T_comm + T_comp + T_sync.
package costmodel

import (
	"errors"
	"fmt"
	"math"
)

// Workload is the problem: n states, m hidden states, u actions, η
// nonzeros in total (spread evenly over the actions), s bytes per value.
type Workload struct {
	N, M, U int
	NNZ     float64
	// ValueBytes is s (8 for float64; 0 means 8).
	ValueBytes int
	// TouchedFraction, when > 0, replaces the random-columns f of every
	// block by this value (state locality: f ≈ (1 + halo)/P_a).
	TouchedFraction float64
	// SharedK fits one K for all actions (TieSharedK): B and C then work
	// on one block touched by all η nonzeros.
	SharedK bool
	// RowExtra and ColExtra are the bytes a design A partial carries per
	// D̂ row and per K̂ column besides the m values (today's raw partial:
	// an int32 index and Σx per row, 12; an int32 index per column, 4).
	// The spec's table counts 0.
	RowExtra, ColExtra float64
	// Shards is the number of shards in total (design B; 0: one per node
	// and K block it works on, the spec's layout). ColBlocks, when > 0,
	// is the column blocks per K block of the owners protocol as built:
	// the coordinator's bytes are then OwnersCoordBytes instead of the
	// spec's per-group idealisation.
	Shards, ColBlocks int
	// ColCells is the column cells per row range of design C as built
	// (emsf fit --col-cells): the grid is then GridCols's, and a node's
	// bytes those of the owners protocol (gathers and slices with their
	// index and x bytes). 0: the spec's grid (gridShape) and bytes.
	ColCells int
}

func (w Workload) s() float64 {
	if w.ValueBytes == 0 {
		return 8
	}
	return float64(w.ValueBytes)
}

// BlockBytes is n·m·s, one dense K or D block.
func (w Workload) BlockBytes() float64 { return float64(w.N) * float64(w.M) * w.s() }

// Validate reports a workload the formulas cannot evaluate.
func (w Workload) Validate() error {
	switch {
	case w.N < 1:
		return fmt.Errorf("costmodel: n = %d: must be >= 1", w.N)
	case w.M < 1:
		return fmt.Errorf("costmodel: m = %d: must be >= 1", w.M)
	case w.U < 1:
		return fmt.Errorf("costmodel: u = %d: must be >= 1", w.U)
	case !(w.NNZ > 0) || math.IsInf(w.NNZ, 0):
		return fmt.Errorf("costmodel: η = %v: must be finite and > 0", w.NNZ)
	case w.ValueBytes < 0:
		return fmt.Errorf("costmodel: s = %d: must be >= 0", w.ValueBytes)
	case !(w.RowExtra >= 0) || !(w.ColExtra >= 0):
		return fmt.Errorf("costmodel: partial framing %v/%v bytes per row/column: must be >= 0", w.RowExtra, w.ColExtra)
	case w.TouchedFraction < 0 || w.TouchedFraction > 1:
		return fmt.Errorf("costmodel: touched fraction %v: must be in [0, 1]", w.TouchedFraction)
	case w.Shards < 0 || w.ColBlocks < 0:
		return fmt.Errorf("costmodel: %d shards, %d column blocks: must be >= 0", w.Shards, w.ColBlocks)
	}
	return nil
}

// Touched is the expected fraction of n columns that η' nonzeros in
// uniformly random columns touch: 1 − exp(−η'/n).
func Touched(nnz float64, n int) float64 {
	if nnz <= 0 {
		return 0
	}
	return -math.Expm1(-nnz / float64(n))
}

// Calibration holds the machine constants the times are made of.
type Calibration struct {
	// NsPerNNZ is t, the compute per nonzero per core (ns).
	NsPerNNZ float64
	// Cores is c, the cores per node computing (fractional on an emulated
	// node that shares a machine).
	Cores float64
	// LinkBytesPerSec is B, a node's link in each direction (full duplex).
	LinkBytesPerSec float64
	// CoordLinkBytesPerSec is the coordinator's link (0: LinkBytesPerSec).
	CoordLinkBytesPerSec float64
	// CPUPerByte is κ, the seconds of CPU one NATS leg costs per byte
	// (client and server together); Conns the connections a node's
	// transfers spread over (0 means 1).
	CPUPerByte float64
	Conns      int
	// RTT, ChunkBytes and Window: a pull of X bytes takes ⌈X/ChunkBytes⌉
	// request-reply chunks, Window outstanding, each paying one RTT
	// (seconds) when the window is empty. 0 ChunkBytes means 1 MiB, 0
	// Window means 1.
	RTT        float64
	ChunkBytes float64
	Window     int
	// MemBytesPerSec is the coordinator's add rate for design A's reduce
	// (bytes of partial per second; 0: the merge is not counted).
	MemBytesPerSec float64
	// SyncRTTs is the number of round trips an iteration spends on
	// control (begin, y, commit record; 0 means 4).
	SyncRTTs float64
	// Serial: designs B and C gather, compute and fold one after the
	// other instead of overlapping the transfers with compute (today's
	// owners exchange: the owners pull the K̂ slices after the pass).
	Serial bool
}

// Validate reports a calibration the formulas cannot use.
func (c Calibration) Validate() error {
	switch {
	case !(c.NsPerNNZ >= 0):
		return fmt.Errorf("costmodel: t = %v ns/nnz: must be >= 0", c.NsPerNNZ)
	case !(c.Cores > 0):
		return fmt.Errorf("costmodel: c = %v cores: must be > 0", c.Cores)
	case !(c.LinkBytesPerSec > 0):
		return fmt.Errorf("costmodel: link %v B/s: must be > 0", c.LinkBytesPerSec)
	case c.CoordLinkBytesPerSec < 0, c.CPUPerByte < 0, c.Conns < 0, c.RTT < 0, c.ChunkBytes < 0, c.Window < 0,
		c.MemBytesPerSec < 0, c.SyncRTTs < 0:
		return errors.New("costmodel: calibration constants must be >= 0")
	}
	return nil
}

// GbitPerSec returns g Gbit/s in bytes per second.
func GbitPerSec(g float64) float64 { return g * 1e9 / 8 }

// Design names a way to run an iteration.
type Design int

const (
	// StarA is today's design: the coordinator serves every K block and
	// reduces every partial.
	StarA Design = iota
	// OwnersSpread is design B with every action on every node.
	OwnersSpread
	// OwnersGrouped is design B with the actions on node groups of P/u.
	OwnersGrouped
	// GridSpread is design C, a pr×pc grid of all P nodes per action.
	GridSpread
	// GridGrouped is design C on node groups of P/u per action.
	GridGrouped
)

var designNames = []string{"A star", "B spread", "B grouped", "C 2D spread", "C 2D grouped"}

func (d Design) String() string {
	if d < 0 || int(d) >= len(designNames) {
		return fmt.Sprintf("Design(%d)", int(d))
	}
	return designNames[d]
}

// Designs lists every design, in table order.
func Designs() []Design { return []Design{StarA, OwnersSpread, OwnersGrouped, GridSpread, GridGrouped} }

// Defaults of the coordinator's small messages in design B.
const (
	// GroupsPerAction is G, the reduction groups per action.
	GroupsPerAction = 256
	// groupStatsBytes is the scalars and CRCs a group reports besides Y.
	groupStatsBytes = 256
	// controlBytes is the plan, begin and commit messages per node.
	controlBytes = 4096
)

// The owners protocol as built (worker/wire/owners.go, JSON requests and
// replies), per iteration through the coordinator, in and out together:
// fitted by least squares (relative errors) on emsf's own count (the
// coordinator_bytes of `emsf fit --exchange owners --speculation=false
// --log-json`, mean of iterations 3–5) of 25 embedded fits at n = 2000 with
// u = 1, 2 and 4, m = 16–64, 1–8 workers, 1–32 shards, 1–32 column blocks
// and column cells 1 and 2, every one within ±0.9 %
// (docs/scaling/owners-coordfit-v2.txt, docs/scaling.md §7.3). The epoch's
// layout goes to the workers once, in the load, and a checkpoint's CRC
// lists to an object, so nothing depends on the column blocks or on n: a
// task and its reply per shard, a commit and its digest per owner (of
// column blocks or row groups), the global Y of each K block an owner
// owns in its commit, and the commit record (written to KV and announced:
// a constant, the owners' digests and every K block's Y, twice). The
// m-vectors are JSON numbers of about 18.9 bytes.
const (
	// ownIterBytes: the commit record's constant part (twice) and the
	// fit's other per-iteration messages.
	ownIterBytes = 1336
	// ownShardBytes + ownJSONFloat·m: a shard's task and its reply
	// (label, scalars, Y).
	ownShardBytes = 565
	// ownOwnerBytes: a commit to one owner, its digest, and the digest in
	// the commit record.
	ownOwnerBytes = 333
	// ownOwnerKBytes + ownJSONFloat·m: the global Y of one K block in an
	// owner's commit.
	ownOwnerKBytes = 5
	ownJSONFloat   = 18.85
	// ownRecordKBytes·m: one K block's Y in the commit record, twice.
	ownRecordKBytes = 37.1
)

// OwnersCoordBytes is the bytes through the coordinator per iteration
// (in and out together) of the owners protocol as built: shards in
// total, owners the workers owning column blocks or row groups (every
// worker that computes a shard owns row groups), ownerKBlocks the (owner,
// K block) pairs, i.e. the K blocks each owner holds column blocks of,
// summed over the owners, kblocks the K blocks of the model.
func OwnersCoordBytes(m, shards, owners, ownerKBlocks, kblocks int) float64 {
	y := ownJSONFloat * float64(m)
	return ownIterBytes + float64(shards)*(ownShardBytes+y) + float64(owners)*ownOwnerBytes +
		float64(ownerKBlocks)*(ownOwnerKBytes+y) + float64(kblocks)*ownRecordKBytes*float64(m)
}

// DefaultColBlocks is emsf fit's default column blocks per K block: one
// per 4 MiB of K^T rows, at most 1024 (natsexec.FitOwners).
func DefaultColBlocks(n, m int) int {
	return min(1024, max(1, (n*m*8+4<<20-1)/(4<<20)), n)
}

// Estimate is one design at one P.
type Estimate struct {
	Design Design
	P      int
	// Pa is the number of nodes sharing one action (P for spread, P/u
	// grouped); F the fraction of a K block's columns one node touches.
	Pa, F float64
	// Grid is pr×pc for the 2D designs.
	GridRows, GridCols int
	// Bytes per iteration: per node (the busiest) in and out, and
	// through the coordinator.
	NodeIn, NodeOut, CoordIn, CoordOut float64
	// Seconds: compute of the busiest node, transfer, the coordinator's
	// reduce (A), synchronisation, and the iteration.
	TComp, TComm, TMerge, TSync, TIter float64
}

// Evaluate evaluates design d at P nodes.
func Evaluate(w Workload, d Design, p int, c Calibration) (Estimate, error) {
	if err := w.Validate(); err != nil {
		return Estimate{}, err
	}
	if err := c.Validate(); err != nil {
		return Estimate{}, err
	}
	if p < 1 {
		return Estimate{}, fmt.Errorf("costmodel: P = %d: must be >= 1", p)
	}
	e := Estimate{Design: d, P: p}
	n, m, u, s := float64(w.N), float64(w.M), float64(w.U), w.s()
	nms := w.BlockBytes()
	P := float64(p)
	etaA := w.NNZ / u
	blocks := u // K blocks a node works on (spread)
	if w.SharedK {
		blocks = 1
	}
	// touched: the fraction of a block's columns nnz nonzeros touch.
	touched := func(nnz float64) float64 {
		if w.TouchedFraction > 0 {
			return w.TouchedFraction
		}
		return Touched(nnz, w.N)
	}
	nodeNNZ := w.NNZ / P
	switch d {
	case StarA:
		e.Pa = P
		e.F = touched(etaA / P)
		e.NodeIn = u * nms
		e.NodeOut = u * (e.F*n*(m*s+w.ColExtra) + n/P*(m*s+w.RowExtra))
		e.CoordIn, e.CoordOut = P*e.NodeOut, P*e.NodeIn
	case OwnersSpread, OwnersGrouped:
		e.Pa = P
		perBlockNNZ := etaA
		if w.SharedK {
			perBlockNNZ = w.NNZ
		}
		if d == OwnersGrouped && !w.SharedK {
			e.Pa = P / u
			blocks = 1
			if e.Pa <= 1 {
				// Whole actions per node: nothing to exchange, the busiest
				// node computes ⌈u/P⌉ actions.
				e.Pa, e.F = 1, 1
				nodeNNZ = math.Ceil(u/P) * etaA
				blocks = 0
			}
		}
		kblocks := u
		if w.SharedK {
			kblocks = 1
		}
		// k: shards of one K block on a node.
		k := 1.0
		if w.Shards > 0 {
			k = math.Max(1, float64(w.Shards)/(kblocks*e.Pa))
		}
		if blocks > 0 {
			e.F = touched(perBlockNNZ / (e.Pa * k))
			e.NodeIn = blocks * k * 2 * e.F * (1 - 1/e.Pa) * n * (m*s + w.ColExtra)
		}
		e.NodeOut = e.NodeIn
		if w.ColBlocks > 0 {
			shards := w.Shards
			if shards == 0 {
				shards = int(kblocks * e.Pa)
			}
			// Column block c of a K block is owned by node c mod P_a of
			// its group: min(P_a, C) owners per K block (whole actions:
			// one), each K block's owners distinct when grouped.
			pairs := int(kblocks) * min(int(math.Round(math.Max(1, e.Pa))), w.ColBlocks)
			b := OwnersCoordBytes(w.M, shards, min(p, max(shards, pairs)), pairs, int(kblocks))
			e.CoordIn, e.CoordOut = b/2, b/2
		} else {
			g := float64(GroupsPerAction)
			e.CoordIn = g*u*(m*s+groupStatsBytes) + P*controlBytes
			e.CoordOut = P * (controlBytes + u*m*s)
		}
		// A node's share of the coordinator's messages crosses its link.
		e.NodeIn += e.CoordOut / P
		e.NodeOut += e.CoordIn / P
	case GridSpread, GridGrouped:
		pa := P
		if d == GridGrouped && !w.SharedK {
			pa = math.Max(1, math.Floor(P/u))
			blocks = 1
			if pa <= 1 {
				nodeNNZ = math.Ceil(u/P) * etaA
			}
		}
		pr, pc := gridShape(int(pa))
		if w.ColCells > 0 {
			pc = GridCols(int(pa), w.ColCells)
			pr = int(pa) / pc
		}
		e.Pa, e.GridRows, e.GridCols, e.F = pa, pr, pc, 1
		fr, fc := float64(pr), float64(pc)
		if w.ColCells == 0 {
			e.NodeIn = blocks * 2 * m * s * ((n/fr)*(fc-1)/fc + (n/fc)*(fr-1)/fr)
			e.NodeOut = e.NodeIn
			g := float64(GroupsPerAction)
			e.CoordIn = g*u*(m*s+groupStatsBytes) + P*controlBytes
			e.CoordOut = P * (controlBytes + u*m*s)
			break
		}
		// As built: a node gathers the rows of D of its grid row that
		// others own and serves its own (an int32 index each way), its
		// row groups fold the D̂ slices of the other cells of their range
		// (index and x: 12 bytes a row), and the same for K within its
		// grid column (K̂ slices: an index, 4 bytes a column); the
		// traffic is symmetric, so in = out. The rows of K a cell reads
		// are the fraction f its nonzeros touch; every row of D of the
		// range is read.
		perBlockNNZ := etaA
		if w.SharedK {
			perBlockNNZ = w.NNZ
		}
		e.F = Touched(perBlockNNZ/pa, max(1, w.N/pc))
		if w.TouchedFraction > 0 {
			e.F = w.TouchedFraction
		}
		e.NodeIn = blocks * ((fc-1)/fc*(n/fr)*(2*m*s+16) + e.F*(fr-1)/fr*(n/fc)*(2*m*s+8))
		e.NodeOut = e.NodeIn
		kblocks := u
		if w.SharedK {
			kblocks = 1
		}
		shards := w.Shards
		if shards == 0 {
			shards = int(kblocks * pa)
		}
		owners := min(p, int(kblocks*pa))
		b := OwnersCoordBytes(w.M, shards, min(p, max(shards, owners)), owners, int(kblocks))
		e.CoordIn, e.CoordOut = b/2, b/2
		e.NodeIn += e.CoordOut / P
		e.NodeOut += e.CoordIn / P
	default:
		return Estimate{}, fmt.Errorf("costmodel: unknown design %d", int(d))
	}
	e.TComp = nodeNNZ * c.NsPerNNZ * 1e-9 / c.Cores
	syncRTTs := c.SyncRTTs
	if syncRTTs == 0 {
		syncRTTs = 4
	}
	e.TSync = syncRTTs * c.RTT
	if d == StarA {
		coordB := c.CoordLinkBytesPerSec
		if coordB == 0 {
			coordB = c.LinkBytesPerSec
		}
		// A worker runs its tasks one after the other (K block in,
		// compute, partial out), so the coordinator's two directions
		// overlap only between workers whose phases drifted apart: about
		// 1/u of the smaller direction (measured on the netns harness,
		// docs/scaling.md), and not at all with a single worker.
		hi, lo := math.Max(e.CoordIn, e.CoordOut), math.Min(e.CoordIn, e.CoordOut)
		if p > 1 {
			lo /= u
		}
		e.TComm = c.transfer(hi+lo, coordB)
		if c.MemBytesPerSec > 0 {
			e.TMerge = e.CoordIn / c.MemBytesPerSec
		}
		// The coordinator's link is busy from the first K byte to the
		// last partial byte; a node's compute hides under its K transfer
		// except for the last task's share.
		e.TIter = e.TComm + e.TMerge + e.TComp/u + e.TSync
		return e, nil
	}
	e.TComm = c.transfer(math.Max(e.NodeIn, e.NodeOut), c.LinkBytesPerSec)
	if c.Serial {
		e.TIter = e.TComm + e.TComp + e.TSync
		return e, nil
	}
	e.TIter = math.Max(e.TComp, e.TComm) + e.TSync
	return e, nil
}

// transfer is the time to move x bytes over a link of b bytes/s.
func (c Calibration) transfer(x, b float64) float64 {
	if x <= 0 {
		return 0
	}
	conns := float64(max(c.Conns, 1))
	t := x * math.Max(1/b, c.CPUPerByte/conns)
	chunk := c.ChunkBytes
	if chunk == 0 {
		chunk = 1 << 20
	}
	window := float64(max(c.Window, 1))
	return t + c.RTT*math.Ceil(math.Ceil(x/chunk)/window)
}

// GridCols is p_c of the grid that the owners exchange forms from a group
// of p nodes over q column cells (natsexec places by it): the divisor of p,
// at most q, whose grid p/p_c × p_c moves least per node, ∝ (1 − 1/p_c)/p_r
// + (1 − 1/p_r)/p_c (rows of D within a grid row, rows of K within a grid
// column), the smaller p_c on a tie (rows of D̂ carry 8 bytes more than
// rows of K̂).
func GridCols(p, q int) int {
	best, cost := 1, math.Inf(1)
	for pc := 1; pc <= min(p, q); pc++ {
		if p%pc != 0 {
			continue
		}
		pr := p / pc
		if c := (1-1/float64(pc))/float64(pr) + (1-1/float64(pr))/float64(pc); c < cost-1e-12 {
			best, cost = pc, c
		}
	}
	return best
}

// gridShape returns pr ≤ pc with pr·pc = p and pr as close to √p as p's
// divisors allow.
func gridShape(p int) (int, int) {
	pr := int(math.Sqrt(float64(p)))
	for pr > 1 && p%pr != 0 {
		pr--
	}
	return pr, p / pr
}
