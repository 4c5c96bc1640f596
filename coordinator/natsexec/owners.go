package natsexec

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

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/coordinator"
	"github.com/emsf/emsf/coordinator/costmodel"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker"
	"github.com/emsf/emsf/worker/wire"
)

// The owners exchange (`emsf fit --exchange owners`; protocol in
// worker/wire/owners.go): FitOwners sequences a fit whose factors live
// on the workers. The coordinator plans (shards, column blocks of K, row
// groups of D, the tree-v1 order), places (which worker computes which
// shard and owns which column block and row group; sent to every worker
// once per epoch), hands out one small task per shard, folds the
// m-vectors Y and the scalars (loglik, Σx, nonzeros) in the canonical
// order, and sends each owner the global Y; the owner pulls its blocks'
// K̂ slices and its groups' D̂ slices from the workers under
// deterministic names and answers with one digest of what it committed. Per iteration the coordinator moves O(S·m + O·u·m) bytes for S
// shards and O owners: nothing that depends on n or on the number of
// column blocks (OwnersReport.Bytes measures it; TestFitOwnersBytesFlatInN
// at n and 4n). Its memory is the caller's model (written back at the
// end) and the shards it cut; no iteration reads either.
//
// Why this design (the survey in ../shared/specs/scale-out.md): it is the
// "owner computes" decomposition of parameter servers and of Spark's
// EM-LDA, with NATS request-reply as the only transport. K rows are
// pulled by the readers (a gather of the columns a shard touches, at most
// one max-payload reply each), K̂ slices are pulled by their owners (the
// reader sets the pace: no slow-consumer drops, no push windows), and the
// fold follows the plan's tree exactly, so an owner's columns are bitwise
// the local fit's (factor.ColumnFold).
//
// Placement, from the data and the census: with one K block per action
// (--tie none) and at least as many actions as workers, whole actions go
// to one worker each (balanced by nonzeros): its shards and all its
// column blocks, so that K and K̂ never leave the worker. Otherwise the
// workers are cut into one group per K block, the K block's shards are
// spread over its group by nonzeros, each shard's worker owns its rows of
// D, and the column blocks go round-robin. Quarantined workers are left
// out.
//
// That 1D layout makes each worker of a group read the K rows of (nearly)
// every column and fold as many K̂ rows: ≈ 2·(1 − 1/P_a)·n·m·8 bytes per
// iteration and worker on data where each shard touches most columns,
// growing toward 2·n·m·8 as workers are added. With column cells
// (`--col-cells`, shard.SplitGrid: each row range cut by column ranges,
// the cells' rows of D̂ summed in cell order, which the local fit does
// too) a group is a p_r × p_c grid (assign, GridCols): a worker reads rows
// of D from its grid row and rows of K from its grid column only, and
// the rows of D of each range are cut into row groups owned round the
// grid row, so it moves ≈ 2·n·m·8·((1 − 1/p_c)/p_r + (1 − 1/p_r)/p_c): flat
// from 2 to 8 workers, then falling (the 2D decomposition of HPC-NMF and
// PLANC, specs/scale-out.md; measured in docs/scaling.md §7.8). The grid
// changes no sum's order beyond the cells themselves: which worker owns a
// row of D or a column of K is not part of the order.
//
// Faults: any failed phase (a worker gone, frozen or out of its lease, a
// refused or malformed answer, the coordinator's connection re-established
// after a server restart) rolls the job back to its last checkpoint
// (every CheckpointEvery iterations; the initial model is checkpoint 0):
// the epoch is incremented and written to the job state, a new census
// places the blocks and shards on the workers alive (waiting for one when
// none is), each loads its blocks from the checkpoint's objects
// (CRC-checked), the shards' rows of D are read from the checkpoint's
// objects, and the iterations since are replayed. Since every sum's order
// is the plan's, the replay gives the same bits: the scalars of a
// replayed pass are checked against the ones recorded. Workers refuse
// requests of an older epoch and cancel what it still runs. This trades
// a replay of at most CheckpointEvery−1 iterations for keeping no second
// copy of any block (a buddy copy would double the owners' memory and
// traffic at every iteration, for a fault that is rare). A coordinator
// that dies is replaced by `fit --resume`, which goes on from the job
// state's checkpoint under a new epoch.
//
// Not yet: pre-summing a worker's shards (one task and slice per shard
// today), --tie shared-d (its D̂ rows would be folded across actions of
// different row ranges) and MU's commit rules.
//
// Memory: a worker holds its shards (and a renumbered copy of each: rows
// and touched columns 0, 1, …, which the kernel computes bitwise the
// same), its owned row groups (rows of D and their D̂), its owned column
// blocks with their fold (a block's K̂ and at most log2 G pending
// subtrees), the rows of D and K the shard it computes reads, and the D̂
// and K̂ slices of the current iteration; never an array of the model's
// full shape.

// OwnersOptions configure FitOwners.
type OwnersOptions struct {
	Job       string
	Alpha     float64
	Converger factor.Converger
	Progress  func(factor.IterStats)
	// Report, if set, is called after each committed iteration.
	Report func(OwnersReport)
	// GroupNNZ is the canonical order's reduction group size (0: the
	// default), as factor.Fit's.
	GroupNNZ int
	// ColBlocks is the number of column blocks of each K block (0: one
	// per 4 MiB of K^T rows, at most 1024).
	ColBlocks int
	// CheckpointEvery is how often the owners store their blocks (default
	// 10 iterations).
	CheckpointEvery int
	// TaskTimeout bounds every request (default 2 minutes); a worker that
	// leaves NATS fails its request within ProbeEvery.
	TaskTimeout time.Duration
	// NoBackups turns off the backup copies of stragglers' tasks (see
	// passSched): for measurements of the protocol's own bytes, which
	// a backup copy (timing-dependent) would add to.
	NoBackups bool
	// MaxRollbacks bounds the rollbacks of one fit (default 8).
	MaxRollbacks int
	// MinWorkers is how many workers the first placement waits for
	// (default 1; a placement after a rollback takes whoever answers);
	// WaitWorkers is how long a placement waits (default 30s).
	MinWorkers  int
	WaitWorkers time.Duration
	// Committed, if set, is called after each committed iteration (a
	// test hook: faults at chosen points).
	Committed func(ctx context.Context, iter int) error
	// Params and Manifest are recorded in the job state (KV), with the
	// last checkpoint; Resume goes on from that checkpoint when the job
	// has one (the caller checks first that params and data are the
	// job's: coordinator.CheckResume), md being the same initial model.
	Params   map[string]string
	Manifest *shard.Manifest
	Resume   bool
}

// OwnersReport is one committed iteration of FitOwners.
type OwnersReport struct {
	Iteration int
	Wall      time.Duration
	// Bytes is what the coordinator's connection sent and received for
	// the iteration (tasks, replies, commits; replays included).
	Bytes   int64
	Workers int
	Epoch   int
	// Rollbacks counts the fit's rollbacks so far, Rebalances its
	// re-placements for stragglers; Shards is how many shards each worker
	// computed in the iteration's pass.
	Rollbacks  int
	Rebalances int
	// Backups counts the tasks of stragglers that other workers took
	// (queued shards and backup copies) so far.
	Backups int
	Shards  map[string]int
}

// ownCheckpoint is a complete checkpoint: the CRC of every column block
// and of every shard's rows of D at one version.
type ownCheckpoint struct {
	version int
	kcrc    [][]string
	dcrc    []string
	// ll is the loglik of the pass that made the version (NaN: not
	// computed).
	ll float64
}

// passRecord is what a pass computed, to check a replay against.
type passRecord struct {
	withLL     bool
	y          [][]float64
	ll, sx     float64
	nnz        int
	checkpoint bool
}

// ownSeq is the state of one FitOwners.
type ownSeq struct {
	e    *Executor
	opt  OwnersOptions
	n    int
	m    int
	u    int
	tie  factor.Tie
	prec factor.Precision

	shards  []*shard.Shard
	plan    *factor.ReducePlan
	kshards [][]int           // per K block: its shards in block order
	cols    [][]wire.ColBlock // per K block: its column blocks (owner, CRC at version)
	// groups are the row groups of D (rowGroups) with their owners and
	// the CRCs of their row lists.
	groups  []rowGroup
	gowner  []string
	rowsCRC []string

	version int      // the committed version the workers hold
	dcrc    []string // per row group, at the last version stored
	ck      ownCheckpoint
	epoch   int
	setup   bool
	workers []string
	shardW  []string
	// winner is who computed each shard in the last pass (its placed
	// worker, or a backup's: the owners pull its slices from there).
	winner []string

	results []*wire.OwnReply
	// digests are the owners' digests of their blocks at version, by
	// worker, and lastY and lastLL the pass's that made it: the commit
	// record of the version.
	digests   map[string]string
	lastY     [][]float64
	lastLL    float64
	history   map[int]passRecord
	red       factor.Reducer
	rollbacks int
	alpha     float64
	// cost is each worker's measured seconds per nonzero (a task's time
	// from request to answer); busy and nnz are the last pass's per
	// worker; rebalances counts re-placements for stragglers.
	cost       map[string]float64
	busy       map[string]time.Duration
	nnz        map[string]int
	rebalances int
	backups    int
	// st is the job state in KV, stBody its JSON as last written; iter0
	// is md.Iteration at version 0.
	st     *coordinator.JobState
	stBody []byte
	iter0  int
}

// FitOwners fits md (the initial model: random, or a warm start) to the
// shards with the owners exchange and leaves the fitted model in md. It
// is bitwise factor.Fit with the same GroupNNZ, for any number of
// workers, placement and rollbacks.
func (e *Executor) FitOwners(ctx context.Context, md *factor.Model, shards []*shard.Shard, opt OwnersOptions) (factor.FitResult, error) {
	if opt.Job == "" {
		return factor.FitResult{}, errors.New("natsexec: owners: no job name")
	}
	if opt.CheckpointEvery <= 0 {
		opt.CheckpointEvery = 10
	}
	if opt.TaskTimeout <= 0 {
		opt.TaskTimeout = 2 * time.Minute
	}
	if opt.MaxRollbacks <= 0 {
		opt.MaxRollbacks = 8
	}
	if opt.WaitWorkers <= 0 {
		opt.WaitWorkers = 30 * time.Second
	}
	s := &ownSeq{e: e, opt: opt, n: md.N, m: md.M, u: md.U, tie: md.Tie, prec: md.Precision, shards: shards, history: map[int]passRecord{}}
	if md.Precision == factor.Float32 {
		// Checkpoint 0 holds the rounded factors the loop starts from.
		md.RoundFactors()
	}
	s.alpha = opt.Alpha
	if s.alpha == 0 {
		s.alpha = 1
	}
	blocks := make([]*factor.Block, len(shards))
	for k, sh := range shards {
		blocks[k] = sh.Block
	}
	s.plan = factor.PlanBlocks(blocks, md.Tie, opt.GroupNNZ)
	infos := make([]shard.Info, len(shards))
	for k, sh := range shards {
		infos[k] = sh.Info
	}
	s.groups = rowGroups(shards, infos, md.Tie)
	s.kshards = make([][]int, factor.NumK(md.U, md.Tie))
	for k, sh := range shards {
		kb := md.KBlock(sh.Action)
		s.kshards[kb] = append(s.kshards[kb], k)
	}
	c := opt.ColBlocks
	if c <= 0 {
		c = min(1024, max(1, (md.N*md.M*8+4<<20-1)/(4<<20)))
	}
	c = min(c, md.N)
	w := (md.N + c - 1) / c
	s.cols = make([][]wire.ColBlock, len(s.kshards))
	for kb := range s.cols {
		for lo, k := 0, 0; lo < md.N; lo, k = lo+w, k+1 {
			s.cols[kb] = append(s.cols[kb], wire.ColBlock{KBlock: kb, C: k, Lo: lo, Hi: min(md.N, lo+w)})
		}
	}
	if _, err := e.Load(ctx, opt.Job, shards); err != nil {
		return factor.FitResult{}, err
	}
	start, err := s.begin(ctx, md)
	if err != nil {
		return factor.FitResult{}, err
	}
	defer s.end()
	var last time.Time
	var lastBytes int64
	hooks := factor.LoopHooks{
		Start:       start,
		Accumulator: factor.NewScalarAccumulator(md.M, md.U, md.Tie),
		Commit:      s.commit,
		Rounds:      true, // the owners round a float32 model's rows (OwnRequest.Precision)
		Committed: func(ctx context.Context, st factor.IterStats, _ factor.Status) error {
			if opt.Report != nil {
				b := s.bytes()
				now := time.Now()
				if last.IsZero() {
					last = now.Add(-st.IterTime)
				}
				shards := map[string]int{}
				for _, id := range s.winner {
					shards[id]++
				}
				opt.Report(OwnersReport{Iteration: st.Iteration, Wall: now.Sub(last), Bytes: b - lastBytes,
					Workers: len(s.workers), Epoch: s.epoch, Rollbacks: s.rollbacks, Rebalances: s.rebalances, Backups: s.backups, Shards: shards})
				last, lastBytes = now, b
			}
			if opt.Committed != nil {
				return opt.Committed(ctx, st.Iteration)
			}
			return nil
		},
	}
	lastBytes = s.bytes()
	res, err := factor.Loop(ctx, md, blocks, s, factor.FitOptions{Alpha: opt.Alpha, Converger: opt.Converger, Progress: opt.Progress, GroupNNZ: opt.GroupNNZ}, hooks)
	if err != nil {
		return res, err
	}
	if err := s.finish(ctx, md); err != nil {
		return res, err
	}
	s.st.Status = res.Status.String()
	return res, s.saveState(ctx)
}

// begin starts the job's state: from its last checkpoint (Resume, when
// the job has one; it returns the first iteration to run), or afresh with
// md stored as checkpoint 0.
func (s *ownSeq) begin(ctx context.Context, md *factor.Model) (int, error) {
	s.st = &coordinator.JobState{Job: s.opt.Job, Params: s.opt.Params, Manifest: s.opt.Manifest, ReduceOrder: factor.ReduceOrder,
		GroupNNZ: s.opt.GroupNNZ, SumX: factor.TotalCount(shard.Blocks(s.shards)), Status: "running"}
	if s.opt.Resume {
		old, _, err := s.e.State(ctx, s.opt.Job)
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return 0, err
		}
		if old != nil && old.Owners != nil {
			o := old.Owners
			if len(o.KCRC) != len(s.cols) || len(o.DCRC) != len(s.groups) || (len(o.KCRC) > 0 && len(o.KCRC[0]) != len(s.cols[0])) {
				return 0, fmt.Errorf("natsexec: owners: resume job %s: its checkpoint has %d K blocks × %d column blocks and %d row groups, this run %d × %d and %d (--col-blocks, --col-cells?)",
					s.opt.Job, len(o.KCRC), len(o.KCRC[0]), len(o.DCRC), len(s.cols), len(s.cols[0]), len(s.groups))
			}
			if err := s.writeRows(ctx); err != nil {
				return 0, err
			}
			// (Again: a job of an earlier version kept them in its state.)
			if err := s.putCRCs(ctx); err != nil {
				return 0, err
			}
			s.ck = ownCheckpoint{version: o.Version, kcrc: o.KCRC, dcrc: o.DCRC}
			s.version, s.epoch = o.Version, o.Epoch+1
			s.iter0 = o.ModelIteration - o.Version
			md.Iteration, md.LogLik = o.ModelIteration, math.NaN()
			if o.LogLik != nil {
				md.LogLik = *o.LogLik
			}
			s.e.log.Info("owners: resuming from the last checkpoint", "job", s.opt.Job, "version", o.Version, "epoch", s.epoch)
			s.fillState()
			return o.Version + 1, s.e.Begin(ctx, s.st)
		}
		s.e.log.Warn("owners: --resume: the job has no checkpoint of the owners exchange; starting afresh", "job", s.opt.Job)
	}
	s.iter0 = md.Iteration
	if err := s.writeRows(ctx); err != nil {
		return 0, err
	}
	if err := s.writeBase(ctx, md); err != nil {
		return 0, err
	}
	if err := s.putCRCs(ctx); err != nil {
		return 0, err
	}
	s.fillState()
	return 1, s.e.Begin(ctx, s.st)
}

// saveState writes the job state with the last checkpoint and the epoch,
// compare-and-set on this coordinator's last write: a coordinator that
// another one replaced fails here.
func (s *ownSeq) saveState(ctx context.Context) error {
	s.fillState()
	body, err := stateJSON(s.st)
	if err != nil {
		return err
	}
	s.e.mu.Lock()
	rev := s.e.kvRev[s.st.Job]
	s.e.mu.Unlock()
	rev, err = s.e.kv.Update(ctx, s.st.Job, body, rev)
	var api *jetstream.APIError
	if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return &fatalError{fmt.Errorf("natsexec: owners: job %s: another coordinator took it over (its state changed since this one's last write): %w", s.st.Job, err)}
	}
	if err != nil {
		// The server may be restarting: the step is rolled back and
		// tried again.
		return fmt.Errorf("natsexec: owners: job %s: write its state: %w", s.st.Job, err)
	}
	s.e.mu.Lock()
	s.e.kvRev[s.st.Job] = rev
	s.e.mu.Unlock()
	s.stBody = body
	return nil
}

// announce publishes the job state last written (saveState) on the job's
// committed subject.
func (s *ownSeq) announce() {
	if err := s.e.nc.Publish(wire.CommittedSubject(s.e.cfg.Prefix, s.st.Job), s.stBody); err != nil {
		s.e.log.Warn("announce commit", "job", s.st.Job, "iteration", s.st.Iteration, "error", err)
	}
}

// fillState puts the commit record of the current version, the last
// checkpoint and the epoch into s.st.
func (s *ownSeq) fillState() {
	st := s.st
	st.Iteration, st.ModelIteration, st.Updated = s.version, s.iter0+s.version, time.Now().UTC()
	st.LogLik = nil
	if !math.IsNaN(s.lastLL) {
		ll := s.lastLL
		st.LogLik = &ll
	}
	o := &coordinator.OwnersCheckpoint{Version: s.ck.version, Epoch: s.epoch, ColBlocks: len(s.cols[0]),
		KCRC: s.ck.kcrc, DCRC: s.ck.dcrc, CRCObject: s.crcObject(s.ck.version), ModelIteration: s.iter0 + s.ck.version,
		Digests: s.digests, Y: s.lastY}
	if !math.IsNaN(s.ck.ll) {
		ll := s.ck.ll
		o.LogLik = &ll
	}
	st.Owners = o
}

func (s *ownSeq) bytes() int64 {
	st := s.e.nc.Stats()
	return int64(st.InBytes + st.OutBytes)
}

// writeBase stores md as checkpoint 0.
func (s *ownSeq) writeBase(ctx context.Context, md *factor.Model) error {
	m := s.m
	s.ck = ownCheckpoint{version: 0, kcrc: make([][]string, len(s.cols)), dcrc: make([]string, len(s.groups)), ll: md.LogLik}
	for kb, cbs := range s.cols {
		for _, cb := range cbs {
			data := wire.FloatBytes(md.KT[kb][cb.Lo*m : cb.Hi*m])
			if err := s.put(ctx, wire.OwnersKObject(s.opt.Job, 0, kb, cb.C), data); err != nil {
				return err
			}
			s.ck.kcrc[kb] = append(s.ck.kcrc[kb], wire.CRC(data))
		}
	}
	for g, rg := range s.groups {
		d := md.D[rg.dblock]
		rows := make([]float64, 0, len(rg.rows)*m)
		for _, i := range rg.rows {
			rows = append(rows, d[int(i)*m:int(i)*m+m]...)
		}
		data := wire.FloatBytes(rows)
		if err := s.put(ctx, wire.OwnersDObject(s.opt.Job, 0, g), data); err != nil {
			return err
		}
		s.ck.dcrc[g] = wire.CRC(data)
	}
	return nil
}

// rowGroup is a row group of D: rows (ascending) of D block dblock,
// whose D̂ is the sum over the shards cells (in shard order) that hold
// them.
type rowGroup struct {
	dblock int
	cells  []int
	rows   []int32
}

// rowGroups cuts the rows of D into the groups that owners hold: each
// row range (shard.RowGroups: a shard, or the column cells of one range)
// into as many groups as the data has column cells, of consecutive rows
// balanced by count. The cut depends on the data and --col-cells only (a
// checkpoint's groups fit any later placement) and changes no sum: a
// row's D̂ is folded over the range's cells whoever owns it. Cutting a
// range lets the p_c workers of a grid row (see assign) each own 1/p_c of
// its rows, so that each folds and serves n/(p_r·p_c) rows.
//
// With --tie shared-d every action's shards add to the rows of the one D:
// its rows (of every shard) are cut into as many groups as the actions
// have ranges at most, times the column cells, each with the shards (of
// any action) whose row range meets it. A row's D̂ is then the left fold
// over actions ascending and cells in order, the order of the local pass
// (shards are numbered by action first).
func rowGroups(shards []*shard.Shard, infos []shard.Info, tie factor.Tie) []rowGroup {
	ranges := shard.RowGroups(infos)
	q := 0
	for _, cells := range ranges {
		q = max(q, len(cells))
	}
	if tie == factor.TieSharedD {
		return sharedRowGroups(shards, len(ranges), q)
	}
	var out []rowGroup
	for _, cells := range ranges {
		var rows []int32
		if len(cells) == 1 {
			rows = shards[cells[0]].Block.Rows
		} else {
			for _, k := range cells {
				rows = append(rows, shards[k].Block.Rows...)
			}
			slices.Sort(rows)
			rows = slices.Compact(rows)
		}
		parts := min(q, max(1, len(rows)))
		for b := range parts {
			part := rows[b*len(rows)/parts : (b+1)*len(rows)/parts]
			if len(part) > 0 || b == 0 {
				out = append(out, rowGroup{dblock: shards[cells[0]].Action, cells: cells, rows: part})
			}
		}
	}
	return out
}

// sharedRowGroups is rowGroups under --tie shared-d: ranges row ranges
// (of all actions), q column cells.
func sharedRowGroups(shards []*shard.Shard, ranges, q int) []rowGroup {
	var rows []int32
	perAction := map[int]int{}
	for _, sh := range shards {
		rows = append(rows, sh.Block.Rows...)
		if sh.ColLo == 0 {
			perAction[sh.Action]++
		}
	}
	slices.Sort(rows)
	rows = slices.Compact(rows)
	most := 1
	for _, r := range perAction {
		most = max(most, r)
	}
	parts := min(max(1, most*max(1, q)), max(1, len(rows)))
	var out []rowGroup
	for b := range parts {
		part := rows[b*len(rows)/parts : (b+1)*len(rows)/parts]
		if len(part) == 0 && b > 0 {
			continue
		}
		g := rowGroup{dblock: 0, rows: part}
		for k, sh := range shards {
			if len(part) > 0 && sh.RowLo <= int(part[len(part)-1]) && int(part[0]) < sh.RowHi {
				g.cells = append(g.cells, k)
			}
		}
		if len(g.cells) == 0 {
			// Only when there are no rows at all: a group needs a cell.
			g.cells = []int{0}
		}
		out = append(out, g)
	}
	return out
}

// writeRows stores every row group's row list (read by its owners).
func (s *ownSeq) writeRows(ctx context.Context) error {
	s.rowsCRC = make([]string, len(s.groups))
	for g, rg := range s.groups {
		data := wire.EncodeCols(rg.rows, nil)
		if err := s.put(ctx, wire.OwnersRowsObject(s.opt.Job, g), data); err != nil {
			return err
		}
		s.rowsCRC[g] = wire.CRC(data)
	}
	return nil
}

func (s *ownSeq) put(ctx context.Context, name string, data []byte) error {
	if _, err := wire.PutObject(ctx, s.e.obs, s.e.nc.MaxPayload(), name, data); err != nil {
		return fmt.Errorf("natsexec: owners: store %s: %w", name, err)
	}
	return nil
}

// Step is factor.Stepper: the pass of iteration iter, after a placement
// and a replay where a rollback asks for them.
func (s *ownSeq) Step(ctx context.Context, iter int, _ *factor.Model, acc *factor.Accumulator, withLL bool) error {
	for {
		err := s.ready(ctx, iter)
		if err == nil {
			if err = s.pass(ctx, iter, withLL, acc); err == nil {
				return nil
			}
		}
		if err = s.rollback(ctx, err); err != nil {
			return err
		}
	}
}

// commit is the loop's commit: the owners fold and commit their blocks.
func (s *ownSeq) commit(ctx context.Context, iter int, md *factor.Model, acc *factor.Accumulator, _, dataTerm float64) error {
	rec := passRecord{withLL: !math.IsNaN(acc.LogLik), ll: acc.LogLik, sx: acc.SumX, nnz: acc.NNZ}
	for _, y := range acc.Y {
		rec.y = append(rec.y, slices.Clone(y))
	}
	for {
		err := s.commitOwners(ctx, iter, acc.Y, acc.LogLik)
		if err == nil && s.ck.version != iter {
			// The commit record (a checkpoint wrote it already).
			err = s.saveState(ctx)
		}
		if err == nil {
			s.history[iter] = rec
			acc.RecordPass(md, dataTerm)
			s.announce()
			if s.ck.version == iter {
				s.rebalance()
			}
			return nil
		}
		// Roll back, replay and recompute this pass, then commit again.
		for err != nil {
			if err = s.rollback(ctx, err); err != nil {
				return err
			}
			if err = s.ready(ctx, iter); err == nil {
				err = s.replayPass(ctx, iter, rec)
			}
		}
	}
}

// replayPass recomputes pass iter and checks it against rec.
func (s *ownSeq) replayPass(ctx context.Context, iter int, rec passRecord) error {
	acc := factor.NewScalarAccumulator(s.m, s.u, s.tie)
	if err := s.pass(ctx, iter, rec.withLL, acc); err != nil {
		return err
	}
	same := acc.SumX == rec.sx && acc.NNZ == rec.nnz && (acc.LogLik == rec.ll || (math.IsNaN(acc.LogLik) && math.IsNaN(rec.ll)))
	for b := range acc.Y {
		for l := range acc.Y[b] {
			same = same && acc.Y[b][l] == rec.y[b][l]
		}
	}
	if !same {
		return &fatalError{fmt.Errorf("natsexec: owners: the replay of iteration %d differs from its first pass (loglik %v vs %v): the workers do not compute deterministically", iter, acc.LogLik, rec.ll)}
	}
	return nil
}

// fatalError ends a fit instead of rolling back.
type fatalError struct{ error }

func (e *fatalError) Unwrap() error { return e.error }

// ready places the job and replays up to version iter−1 when a rollback
// asked for it.
func (s *ownSeq) ready(ctx context.Context, iter int) error {
	if s.setup {
		return nil
	}
	if err := s.place(ctx); err != nil {
		return err
	}
	s.setup = true
	for v := s.version + 1; v < iter; v++ {
		rec, ok := s.history[v]
		if !ok {
			return &fatalError{fmt.Errorf("natsexec: owners: no record of iteration %d to replay", v)}
		}
		if err := s.replayPass(ctx, v, rec); err != nil {
			return err
		}
		if err := s.commitOwners(ctx, v, rec.y, rec.ll); err != nil {
			return err
		}
	}
	return nil
}

// rollback handles a failed step: the job goes back to its last
// checkpoint on a new placement (the next ready), or the fit ends.
func (s *ownSeq) rollback(ctx context.Context, err error) error {
	var fe *fatalError
	if ctx.Err() != nil || errors.As(err, &fe) {
		return err
	}
	s.rollbacks++
	if s.rollbacks > s.opt.MaxRollbacks {
		return fmt.Errorf("natsexec: owners: giving up after %d rollbacks: %w", s.opt.MaxRollbacks, err)
	}
	s.e.log.Warn("owners: rolling back to the last checkpoint", "job", s.opt.Job, "checkpoint", s.ck.version,
		"version", s.version, "epoch", s.epoch+1, "error", err)
	s.epoch++
	s.setup = false
	return nil
}

// place takes a census and gives every worker its blocks and shards of
// the last checkpoint (a new epoch).
func (s *ownSeq) place(ctx context.Context) error {
	ids, err := s.census(ctx)
	if err != nil {
		return err
	}
	if q := s.e.Quarantined(); len(q) > 0 {
		ids = slices.DeleteFunc(ids, func(id string) bool { return slices.Contains(q, id) })
		if len(ids) == 0 {
			return &fatalError{fmt.Errorf("natsexec: owners: every worker that answers is quarantined (%s)", strings.Join(q, ", "))}
		}
	}
	s.workers = ids
	nk := len(s.kshards)
	pl := s.assign(ids, s.cost)
	s.shardW, s.gowner = pl.shardW, pl.gowner
	owned := map[string][]wire.ColBlock{}
	for kb := range s.kshards {
		for c := range s.cols[kb] {
			cb := &s.cols[kb][c]
			cb.Owner = pl.colOwner[kb][c]
			cb.CRC = s.ck.kcrc[kb][c]
			owned[cb.Owner] = append(owned[cb.Owner], *cb)
		}
	}
	layout := make([]wire.RowGroup, len(s.groups))
	for g, rg := range s.groups {
		layout[g] = wire.RowGroup{G: g, Action: rg.dblock, Cells: rg.cells, Owner: s.gowner[g], CRC: s.ck.dcrc[g], RowsCRC: s.rowsCRC[g]}
		if len(rg.rows) > 0 {
			layout[g].Lo, layout[g].Hi = int(rg.rows[0]), int(rg.rows[len(rg.rows)-1])+1
		}
	}
	shapes := make([]wire.KShape, nk)
	for kb, ks := range s.kshards {
		shapes[kb] = wire.KShape{KBlock: kb, Shards: ks, NNZ: make([]int, len(ks)), Workers: make([]string, len(ks))}
		for q, k := range ks {
			shapes[kb].NNZ[q], shapes[kb].Workers[q] = s.shards[k].NNZ, s.shardW[k]
		}
	}
	s.version = s.ck.version
	s.dcrc = slices.Clone(s.ck.dcrc)
	if err := s.saveState(ctx); err != nil {
		return err
	}
	return s.each(ctx, ids, func(id string) *wire.OwnRequest {
		r := s.request(wire.OpLoad, s.version)
		r.Blocks = owned[id]
		r.Layout = s.cols
		r.Shapes = shapes
		r.Groups = layout
		return r
	}, nil)
}

// Stragglers: a worker much slower than the others (a loaded machine, a
// slow disk) would make every pass wait for its shards. Within a pass the
// other workers take its queued shards and back up its running task
// (passSched: MapReduce's backup tasks, first answer wins). A worker that
// stays slow is also re-placed at a checkpoint, so that it does not own
// more column blocks and row groups than it can serve: when its measured
// seconds per nonzero are at least twice the median's and the last pass's
// per-worker times predict that a placement weighted by each worker's
// measured seconds per nonzero ends the pass in under 3/4 of the time,
// the coordinator starts a new epoch on that placement (from the
// checkpoint just written: nothing is replayed). The straggler keeps the
// share it can finish in time.
const (
	rebalanceGain   = 0.75
	stragglerFactor = 2
)

// rebalance re-places the job for stragglers when it pays (see above).
func (s *ownSeq) rebalance() {
	if len(s.workers) < 2 || len(s.busy) == 0 {
		return
	}
	if s.cost == nil {
		s.cost = map[string]float64{}
	}
	var was time.Duration
	for id, b := range s.busy {
		if s.nnz[id] > 0 {
			s.cost[id] = b.Seconds() / float64(s.nnz[id])
		}
		was = max(was, b)
	}
	// Only a real straggler: its cost at least twice the median's.
	var cs []float64
	for _, id := range s.workers {
		if c, ok := s.cost[id]; ok {
			cs = append(cs, c)
		}
	}
	slices.Sort(cs)
	if len(cs) < 2 || cs[len(cs)-1] < stragglerFactor*cs[len(cs)/2] {
		return
	}
	will := 0.0
	for _, b := range s.assign(s.workers, s.cost).busy {
		will = max(will, b)
	}
	if will >= rebalanceGain*was.Seconds() {
		return
	}
	s.rebalances++
	s.e.log.Info("owners: re-placing for a straggler", "job", s.opt.Job, "version", s.version,
		"pass", was.Round(time.Millisecond), "predicted", time.Duration(will*float64(time.Second)).Round(time.Millisecond))
	s.epoch++
	s.setup = false
}

// placement is where a placement puts the job: each shard's worker,
// each row group's owner, each column block's owner (per K block), and
// each worker's predicted busy time.
type placement struct {
	shardW   []string
	gowner   []string
	colOwner [][]string
	busy     map[string]float64
}

// assign places the job on workers ids. Each K block gets a group of
// workers (a whole one per K block when there are at least as many K
// blocks as workers). Without column cells, each shard goes to the worker
// of its group that would finish it first, by nonzeros × cost[worker] (a
// worker's seconds per nonzero as measured; workers not measured yet cost
// the median of the others, or 1), owns its row group, and the column
// blocks go round the group. With column cells (shard.SplitGrid) a group
// of P_a workers is a grid of p_r × p_c (GridCols): the cell of row range r and column
// cell c goes to worker (r mod p_r, c mod p_c), the row group of range r
// to a worker of grid row r mod p_r, the column blocks of column cell c to
// the workers of grid column c mod p_c, so that a worker reads rows of D
// from its grid row only and rows of K from its grid column only: its
// traffic is ∝ n·m·(1/p_r + 1/p_c) instead of ∝ n·m.
func (s *ownSeq) assign(ids []string, cost map[string]float64) placement {
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
	nk := len(s.kshards)
	kload := make([]int, nk)
	for kb, ks := range s.kshards {
		for _, k := range ks {
			kload[kb] += s.shards[k].NNZ
		}
	}
	busy := map[string]float64{}
	first := func(g []string, nnz int) string {
		best, at := "", math.Inf(1)
		for _, id := range g {
			if t := busy[id] + float64(nnz)*costOf(id); t < at {
				best, at = id, t
			}
		}
		return best
	}
	groups := make([][]string, nk)
	if nk >= len(ids) {
		order := make([]int, nk)
		for kb := range order {
			order[kb] = kb
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(kload[b], kload[a]) })
		for _, kb := range order {
			id := first(ids, kload[kb])
			groups[kb] = []string{id}
			busy[id] += float64(kload[kb]) * costOf(id)
		}
		clear(busy)
	} else {
		for kb := range groups {
			groups[kb] = ids[kb*len(ids)/nk : (kb+1)*len(ids)/nk]
		}
	}
	pl := placement{shardW: make([]string, len(s.shards)), gowner: make([]string, len(s.groups)), colOwner: make([][]string, nk)}
	// Row groups of each K block, in order.
	kgroups := make([][]int, nk)
	for g, rg := range s.groups {
		kb := s.kblock(s.shards[rg.cells[0]].Action)
		kgroups[kb] = append(kgroups[kb], g)
	}
	for kb := range s.kshards {
		g := groups[kb]
		cells := s.cellsPerRange(kb)
		if cells > 1 && len(g) > 1 && s.tie != factor.TieSharedD {
			s.assignGrid(&pl, kb, g, kgroups[kb], cells)
			for _, k := range s.kshards[kb] {
				busy[pl.shardW[k]] += float64(s.shards[k].NNZ) * costOf(pl.shardW[k])
			}
			continue
		}
		for _, k := range s.kshards[kb] {
			id := first(g, s.shards[k].NNZ)
			pl.shardW[k] = id
			busy[id] += float64(s.shards[k].NNZ) * costOf(id)
		}
		pl.colOwner[kb] = make([]string, len(s.cols[kb]))
		for c := range s.cols[kb] {
			pl.colOwner[kb][c] = g[c%len(g)]
		}
	}
	for gr, rg := range s.groups {
		if pl.gowner[gr] == "" {
			// Without a grid: the worker of the group's first shard.
			pl.gowner[gr] = pl.shardW[rg.cells[0]]
		}
	}
	pl.busy = busy
	return pl
}

// GridCols is p_c of the grid that a group of p workers forms over q
// column cells (see assign): costmodel.GridCols, the grid that moves
// least per worker.
func GridCols(p, q int) int { return costmodel.GridCols(p, q) }

// cellsPerRange is the number of column cells the row ranges of K block
// kb are cut into (1: no grid): the distinct ColLo of its shards.
func (s *ownSeq) cellsPerRange(kb int) int {
	seen := map[int]bool{}
	for _, k := range s.kshards[kb] {
		seen[s.shards[k].ColLo] = true
	}
	return len(seen)
}

// assignGrid places K block kb's shards (column cells of its row groups
// kgroups, q distinct column cells) on the worker group g as a grid (see
// assign).
func (s *ownSeq) assignGrid(pl *placement, kb int, g []string, kgroups []int, q int) {
	pc := GridCols(len(g), q)
	pr := len(g) / pc
	at := func(r, c int) string { return g[(r%pr)*pc+c%pc] }
	// Column cell index of each ColLo, ascending.
	var los []int
	for _, k := range s.kshards[kb] {
		los = append(los, s.shards[k].ColLo)
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
		if q == 0 || s.groups[gr].cells[0] != s.groups[kgroups[q-1]].cells[0] {
			r, b = r+1, 0
			for _, k := range s.groups[gr].cells {
				pl.shardW[k] = at(r, cellOf(s.shards[k].ColLo))
			}
		}
		pl.gowner[gr] = at(r, (r/pr+b)%pc)
		b++
	}
	// Column blocks: by the column cell of their first column, round the
	// cell's grid column.
	pl.colOwner[kb] = make([]string, len(s.cols[kb]))
	seen := map[int]int{}
	for c, cb := range s.cols[kb] {
		cc := cellOf(cb.Lo)
		pl.colOwner[kb][c] = at(seen[cc], cc)
		seen[cc]++
	}
}

// census waits until at least one worker answers.
func (s *ownSeq) census(ctx context.Context) ([]string, error) {
	deadline := time.Now().Add(s.opt.WaitWorkers)
	want := 1
	if s.epoch == 0 {
		want = max(1, s.opt.MinWorkers)
	}
	for {
		ids, err := s.e.Census(ctx)
		switch {
		case err != nil && s.e.nc.IsConnected():
			return nil, err
		case err != nil:
			// The server is away (restarting): wait for the reconnect.
			s.e.log.Warn("owners: waiting for the NATS server", "job", s.opt.Job, "status", s.e.nc.Status().String(), "until", deadline.Format(time.RFC3339))
		case len(ids) >= want:
			return ids, nil
		}
		if err != nil && time.Now().After(deadline) {
			return nil, &fatalError{fmt.Errorf("natsexec: owners: no NATS server within %v (--wait-workers): %w", s.opt.WaitWorkers, err)}
		}
		if err != nil {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(s.e.cfg.PingWait):
			}
			continue
		}
		if time.Now().After(deadline) {
			return nil, &fatalError{fmt.Errorf("natsexec: owners: %d of %d workers answered within %v (--wait-workers)", len(ids), want, s.opt.WaitWorkers)}
		}
		s.e.log.Warn("owners: waiting for workers", "job", s.opt.Job, "have", len(ids), "want", want, "until", deadline.Format(time.RFC3339))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(s.e.cfg.PingWait):
		}
	}
}

func (s *ownSeq) request(op string, iter int) *wire.OwnRequest {
	return &wire.OwnRequest{Op: op, Job: s.opt.Job, Epoch: s.epoch, Iteration: iter, Bucket: s.e.cfg.ObjectBucket,
		N: s.n, M: s.m, U: s.u, Tie: s.tie.String(), GroupNNZ: s.opt.GroupNNZ, Alpha: s.alpha, Precision: precisionName(s.prec),
		Deadline: time.Now().Add(s.opt.TaskTimeout).UnixNano()}
}

// ask sends one request to worker id and waits for its answer, failing
// early when the worker leaves NATS (see watch).
func (s *ownSeq) ask(ctx context.Context, id string, r *wire.OwnRequest) (*wire.OwnReply, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("natsexec: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.opt.TaskTimeout)
	defer cancel()
	msg, err := s.e.nc.RequestWithContext(ctx, wire.OwnSubject(s.e.cfg.Prefix, id), body)
	if err != nil {
		return nil, fmt.Errorf("natsexec: owners: %s of iteration %d on worker %s: %w", r.Op, r.Iteration, id, err)
	}
	var rep wire.OwnReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return nil, fmt.Errorf("natsexec: owners: %s on worker %s: bad reply: %w", r.Op, id, err)
	}
	if rep.Error != "" {
		return nil, fmt.Errorf("natsexec: owners: %s of iteration %d on worker %s: %s", r.Op, r.Iteration, id, rep.Error)
	}
	return &rep, nil
}

// each asks every worker of ids (in parallel) the request mk makes for it
// and hands the replies to got (from one goroutine at a time).
func (s *ownSeq) each(ctx context.Context, ids []string, mk func(id string) *wire.OwnRequest, got func(id string, rep *wire.OwnReply) error) error {
	return s.guard(ctx, func(ctx context.Context) error { return s.eachGuarded(ctx, ids, mk, got) })
}

func (s *ownSeq) eachGuarded(ctx context.Context, ids []string, mk func(id string) *wire.OwnRequest, got func(id string, rep *wire.OwnReply) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, id := range ids {
		r := mk(id)
		if r == nil {
			continue
		}
		wg.Add(1)
		if !s.e.goRoutine(func() {
			defer wg.Done()
			rep, err := s.ask(ctx, id, r)
			mu.Lock()
			defer mu.Unlock()
			if err == nil && got != nil {
				err = got(id, rep)
			}
			if err != nil && first == nil {
				first = err
				cancel()
			}
		}) {
			wg.Done()
			return errors.New("natsexec: executor closed")
		}
	}
	wg.Wait()
	return first
}

// pass computes iteration iter on the workers and folds Y and the
// scalars into acc in the canonical order.
func (s *ownSeq) pass(ctx context.Context, iter int, withLL bool, acc *factor.Accumulator) error {
	if err := s.guard(ctx, func(ctx context.Context) error { return s.tasks(ctx, iter, withLL) }); err != nil {
		return err
	}
	s.red.Reset(acc, s.plan)
	return s.foldScalars(acc)
}

// foldScalars folds the pass's Y and scalars.
func (s *ownSeq) foldScalars(acc *factor.Accumulator) error {
	for !s.red.Done() {
		k := s.red.Next()
		rep := s.results[k]
		ll := math.NaN()
		if rep.HasLogLik {
			ll = rep.LogLik
		}
		if err := s.red.MergeChecked(&factor.Partial{Action: s.shards[k].Action, Y: rep.Y, SumX: rep.SumX, LogLik: ll, NNZ: rep.NNZ}); err != nil {
			return &fatalError{fmt.Errorf("natsexec: owners: shard %d: %w", k, err)}
		}
	}
	return nil
}

// task is the task of shard k in iteration iter.
func (s *ownSeq) task(iter, k int, withLL bool) *wire.OwnRequest {
	sh := s.shards[k]
	r := s.request(wire.OpTask, iter)
	r.Shard, r.ShardObject, r.ShardChecksum, r.WithLogLik = k, wire.ShardObject(sh.Checksum), sh.Checksum, withLL
	return r
}

// check checks a task's answer: label, dimensions, values and Σx.
func (s *ownSeq) check(iter, k int, withLL bool, rep *wire.OwnReply) error {
	sh := s.shards[k]
	want := wire.Label{Job: s.opt.Job, Iteration: iter, Shard: k, ShardChecksum: sh.Checksum, ModelDigest: worker.OwnersDigest(s.epoch)}
	got, err := wire.ParseLabel(rep.Label)
	if err == nil {
		err = got.Check(want)
	}
	switch {
	case err != nil:
	case len(rep.Y) != s.m:
		err = fmt.Errorf("Y has %d values, want %d", len(rep.Y), s.m)
	case rep.NNZ != sh.NNZ:
		err = fmt.Errorf("%d nonzeros, the shard has %d", rep.NNZ, sh.NNZ)
	case math.Abs(rep.SumX-sh.Sum) > 1e-12*math.Abs(sh.Sum) || math.IsNaN(rep.SumX):
		err = fmt.Errorf("Σx = %v, the shard's Σcount is %v", rep.SumX, sh.Sum)
	case rep.HasLogLik != withLL || math.IsInf(rep.LogLik, 0):
		err = fmt.Errorf("loglik %v (computed %v, asked %v)", rep.LogLik, rep.HasLogLik, withLL)
	}
	for l, v := range rep.Y {
		if err == nil && (!(v >= 0) || math.IsInf(v, 0)) {
			err = fmt.Errorf("Y[%d] = %v", l, v)
		}
	}
	if err != nil {
		s.e.strike(rep.Worker, err)
		return fmt.Errorf("natsexec: owners: shard %d from worker %s: %w", k, rep.Worker, err)
	}
	return nil
}

// owned returns, per worker, the column blocks and row groups it owns.
func (s *ownSeq) owned() (map[string][]wire.ColBlock, map[string][]int) {
	blocks, groups := map[string][]wire.ColBlock{}, map[string][]int{}
	for _, cbs := range s.cols {
		for _, cb := range cbs {
			blocks[cb.Owner] = append(blocks[cb.Owner], cb)
		}
	}
	for g, id := range s.gowner {
		groups[id] = append(groups[id], g)
	}
	return blocks, groups
}

// commitOwners has every owner fold and commit its column blocks and row
// groups to version iter with the global Y, and records their digests
// (and in a checkpoint their CRCs).
func (s *ownSeq) commitOwners(ctx context.Context, iter int, y [][]float64, ll float64) error {
	save := iter%s.opt.CheckpointEvery == 0
	blocks, groups := s.owned()
	// Shards whose slices another worker than the placed one serves (it
	// won a backup copy).
	var moved []wire.ShardWorker
	for k, id := range s.winner {
		if id != "" && id != s.shardW[k] {
			moved = append(moved, wire.ShardWorker{Shard: k, Worker: id})
		}
	}
	crcs := map[[2]int]string{}
	dcrcs := map[int]string{}
	digests := map[string]string{}
	err := s.each(ctx, s.workers, func(id string) *wire.OwnRequest {
		if len(blocks[id]) == 0 && len(groups[id]) == 0 {
			return nil
		}
		r := s.request(wire.OpCommit, iter)
		r.Save = save
		r.Moved = moved
		seen := map[int]bool{}
		for _, cb := range blocks[id] {
			if !seen[cb.KBlock] {
				seen[cb.KBlock] = true
				r.Y = append(r.Y, wire.KBlockY{KBlock: cb.KBlock, Y: y[cb.KBlock]})
			}
		}
		return r
	}, func(id string, rep *wire.OwnReply) error {
		if rep.Digest == "" || (save && (len(rep.Blocks) != len(blocks[id]) || len(rep.Groups) != len(groups[id]))) {
			return fmt.Errorf("natsexec: owners: worker %s committed %d blocks and %d row groups (digest %q), it owns %d and %d", id, len(rep.Blocks), len(rep.Groups), rep.Digest, len(blocks[id]), len(groups[id]))
		}
		digests[id] = rep.Digest
		if err := s.ownedBy(id, rep); err != nil {
			return err
		}
		for _, b := range rep.Blocks {
			crcs[[2]int{b.KBlock, b.C}] = b.CRC
		}
		for _, g := range rep.Groups {
			dcrcs[g.G] = g.CRC
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.digests = digests
	s.lastY, s.lastLL = y, ll
	s.version = iter
	if save {
		for kb := range s.cols {
			for c := range s.cols[kb] {
				s.cols[kb][c].CRC = crcs[[2]int{kb, c}]
			}
		}
		for g := range s.dcrc {
			s.dcrc[g] = dcrcs[g]
		}
		return s.checkpointed(ctx, ll)
	}
	return nil
}

// ownedBy checks that the blocks and groups a reply of worker id names
// are its own.
func (s *ownSeq) ownedBy(id string, rep *wire.OwnReply) error {
	for _, b := range rep.Blocks {
		if b.KBlock < 0 || b.KBlock >= len(s.cols) || b.C < 0 || b.C >= len(s.cols[b.KBlock]) || s.cols[b.KBlock][b.C].Owner != id {
			return fmt.Errorf("natsexec: owners: worker %s answered for column block %d/%d, which it does not own", id, b.KBlock, b.C)
		}
	}
	for _, g := range rep.Groups {
		if g.G < 0 || g.G >= len(s.gowner) || s.gowner[g.G] != id {
			return fmt.Errorf("natsexec: owners: worker %s answered for row group %d, which it does not own", id, g.G)
		}
	}
	return nil
}

// ownersCRCs is the object that holds a checkpoint's CRC lists
// (coordinator.OwnersCheckpoint.CRCObject).
type ownersCRCs struct {
	KCRC [][]string `json:"k_crc"`
	DCRC []string   `json:"d_crc"`
}

// crcObject is the name of the CRC lists' object of checkpoint v.
func (s *ownSeq) crcObject(v int) string {
	return "owners/" + s.opt.Job + "/" + strconv.Itoa(v) + "/crcs"
}

// putCRCs stores the last checkpoint's CRC lists as their object: the
// commit record, written every iteration, then names it (a few bytes)
// instead of carrying one CRC per column block and row group.
func (s *ownSeq) putCRCs(ctx context.Context) error {
	data, err := json.Marshal(ownersCRCs{KCRC: s.ck.kcrc, DCRC: s.ck.dcrc})
	if err != nil {
		return fmt.Errorf("natsexec: owners: %w", err)
	}
	return s.put(ctx, s.crcObject(s.ck.version), data)
}

// checkpointed records the current version (made by a pass of loglik ll)
// as the last checkpoint, in the job state too.
func (s *ownSeq) checkpointed(ctx context.Context, ll float64) error {
	prev := s.ck.version
	s.ck = ownCheckpoint{version: s.version, kcrc: make([][]string, len(s.cols)), dcrc: slices.Clone(s.dcrc), ll: ll}
	for kb, cbs := range s.cols {
		for _, cb := range cbs {
			s.ck.kcrc[kb] = append(s.ck.kcrc[kb], cb.CRC)
		}
	}
	for v := range s.history {
		if v <= s.version {
			delete(s.history, v)
		}
	}
	if err := s.putCRCs(ctx); err != nil {
		return err
	}
	if err := s.saveState(ctx); err != nil {
		return err
	}
	s.dropCheckpoint(ctx, prev)
	return nil
}

// finish stores the last version where it is not a checkpoint and reads
// it into md.
func (s *ownSeq) finish(ctx context.Context, md *factor.Model) error {
	last := s.version
	for s.ck.version != last {
		err := s.ready(ctx, last+1)
		if err == nil {
			err = s.saveAll(ctx, md.LogLik)
		}
		if err == nil {
			break
		}
		if err = s.rollback(ctx, err); err != nil {
			return err
		}
	}
	m := s.m
	for kb, cbs := range s.cols {
		for c, cb := range cbs {
			name := wire.OwnersKObject(s.opt.Job, last, kb, cb.C)
			data, err := s.e.obs.GetBytes(ctx, name)
			if err == nil && wire.CRC(data) != s.ck.kcrc[kb][c] {
				err = fmt.Errorf("CRC %s, the commit says %s", wire.CRC(data), s.ck.kcrc[kb][c])
			}
			if err == nil {
				err = wire.ReadFloats(md.KT[kb][cb.Lo*m:cb.Hi*m], data)
			}
			if err != nil {
				return fmt.Errorf("natsexec: owners: read %s: %w", name, err)
			}
		}
	}
	for g, rg := range s.groups {
		name := wire.OwnersDObject(s.opt.Job, last, g)
		data, err := s.e.obs.GetBytes(ctx, name)
		if err == nil && wire.CRC(data) != s.ck.dcrc[g] {
			err = fmt.Errorf("CRC %s, the commit says %s", wire.CRC(data), s.ck.dcrc[g])
		}
		idx := rg.rows
		rows := make([]float64, len(idx)*m)
		if err == nil {
			err = wire.ReadFloats(rows, data)
		}
		if err != nil {
			return fmt.Errorf("natsexec: owners: read %s: %w", name, err)
		}
		d := md.D[rg.dblock]
		for q, i := range idx {
			copy(d[int(i)*m:int(i)*m+m], rows[q*m:q*m+m])
		}
	}
	if md.Precision == factor.Float32 {
		// The values are rounded already; this refreshes the model's
		// float32 copy of K.
		md.RoundFactors()
	}
	return nil
}

// saveAll has the owners store their column blocks and row groups at
// the current version, and makes it the last checkpoint.
func (s *ownSeq) saveAll(ctx context.Context, ll float64) error {
	blocks, groups := s.owned()
	err := s.each(ctx, s.workers, func(id string) *wire.OwnRequest {
		if len(blocks[id]) == 0 && len(groups[id]) == 0 {
			return nil
		}
		r := s.request(wire.OpSave, s.version)
		r.Blocks = blocks[id]
		for _, g := range groups[id] {
			r.Groups = append(r.Groups, wire.RowGroup{G: g})
		}
		return r
	}, func(id string, rep *wire.OwnReply) error {
		if len(rep.Blocks) != len(blocks[id]) || len(rep.Groups) != len(groups[id]) {
			return fmt.Errorf("natsexec: owners: worker %s saved %d blocks and %d row groups, asked %d and %d", id, len(rep.Blocks), len(rep.Groups), len(blocks[id]), len(groups[id]))
		}
		if err := s.ownedBy(id, rep); err != nil {
			return err
		}
		for _, b := range rep.Blocks {
			s.cols[b.KBlock][b.C].CRC = b.CRC
		}
		for _, g := range rep.Groups {
			s.dcrc[g.G] = g.CRC
		}
		return nil
	})
	if err != nil {
		return err
	}
	return s.checkpointed(ctx, ll)
}

// end tells the workers to forget the job (best effort).
func (s *ownSeq) end() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, id := range s.workers {
		body, _ := json.Marshal(s.request(wire.OpEnd, s.version))
		_, _ = s.e.nc.RequestWithContext(ctx, wire.OwnSubject(s.e.cfg.Prefix, id), body)
	}
}

// guard runs f with a context that ends, with the cause, as soon as a
// worker of the placement leaves NATS or freezes (see watch): a request
// that waits on another worker (a task gathering K from an owner, an
// owner pulling K̂ slices) fails within seconds, not at its lease.
func (s *ownSeq) guard(ctx context.Context, f func(ctx context.Context) error) error {
	gctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	for _, id := range s.workers {
		s.e.goRoutine(func() { s.e.watch(gctx, id, nil, cancel) })
	}
	s.e.goRoutine(func() { s.watchReconnect(gctx, cancel) })
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
func (s *ownSeq) watchReconnect(ctx context.Context, cancel context.CancelCauseFunc) {
	was := s.e.nc.Stats().Reconnects
	tick := time.NewTicker(s.e.cfg.ProbeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if s.e.nc.Stats().Reconnects != was {
			cancel(errReconnected)
			return
		}
	}
}

// precisionName is p's name on the wire: "" for float64 (what workers
// of earlier versions assume).
func precisionName(p factor.Precision) string {
	if p == factor.Float64 {
		return ""
	}
	return p.String()
}

// kblock is the K block of action a.
func (s *ownSeq) kblock(a int) int {
	if s.tie == factor.TieSharedK {
		return 0
	}
	return a
}
