// Package ingest is the coordinator's side of the distributed ingest: the
// decisions that turn a dataset on shared storage (or in the Object
// Store) into exactly the shards a local fit builds from it, built on
// the workers, while the coordinator holds only lines per split, per
// bucket and per shard. It imports no NATS: Run drives a Cluster (the
// NATS one is in coordinator/natsexec, an in-process one in the tests),
// and the protocol's phases are described in package
// worker/ingestwire.
//
// Why the shards are the local ones, bitwise. A local fit counts each
// (action, state, next state) by summing its counts in arrival order
// (files in path order, rows in order), and cuts each action's rows
// greedily into shards (shard.Split); column cells then cut each row
// shard (shard.SplitGrid). Here (1) splits are numbered in dataset
// order and a mapper numbers each reducer's segments of a split in
// order, so a reducer that counts (shard.Counter) a split's segments in
// sequence order, and the splits in order, sees each of its rows'
// transitions in arrival order: the rows are the local rows; (2) the
// greedy cut is a carry chain (shard.CutStep) run over each action's
// buckets in row order, so the cuts are shard.Split's whatever the
// buckets; (3) n, u, the fingerprint and the holdout draws come from
// pass 1's per-split summaries (shard.Summary, the CRCs combined with
// shard.RowsCRC.Then; factor.PCGAt jumps each split's draws to its first
// transition). The buckets and the workers decide where work is done,
// never a bit.
//
// User ids: the states or actions of a dataset named by ids are
// numbered by the vocabulary phase (ids.go) before pass 1: the indices
// are the local fit's (the ranks in the sorted set of ids) and the
// fingerprint hashes the ids, as a local read's does.
//
// Errors are a local read's. Pass 1 reads every split; the first split
// in dataset order with an issue decides: a bad row is the error, its
// row counted from its file's first row; a split that cannot be read on
// its own (a CSV file with a quote, a Parquet bad value, a corrupt file)
// makes its file be read whole, whose error is the local one. Nothing is
// planned or built before every split is clean. A file that changes
// between the two reads fails the job naming it (pass 2 checks each
// split's transitions and fingerprint against pass 1's, and each file's
// size and modification time, or an object's digest).
//
// Failures. A worker lost in pass 1 gives its splits back to the queue.
// A worker lost in pass 2 or later ends the epoch: the next epoch plans
// mappers and reducers over the workers left, and every worker drops the
// older epoch's data (a plan of a newer epoch cancels it; its requests
// are refused). Recomputation reads the same bytes, so the shards are the
// same whoever fails when.
package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/ingestwire"
)

// Cluster is what Run needs of the workers. A method that fails because
// its worker is gone (it left, or stopped answering) returns a
// *LostError; any other error is the worker's answer.
type Cluster interface {
	// Workers returns the ids of the workers alive, sorted.
	Workers(ctx context.Context) ([]string, error)
	List(ctx context.Context, worker string, r *ingestwire.ListRequest) (*ingestwire.ListReply, error)
	Scan(ctx context.Context, worker string, r *ingestwire.ScanRequest) (*ingestwire.ScanReply, error)
	Plan(ctx context.Context, worker string, p *ingestwire.Plan) error
	Status(ctx context.Context, worker string, r *ingestwire.StatusRequest) (*ingestwire.StatusReply, error)
	Cut(ctx context.Context, worker string, r *ingestwire.CutRequest) (*ingestwire.CutReply, error)
	Build(ctx context.Context, worker string, r *ingestwire.BuildRequest) (*ingestwire.BuildReply, error)
	Commit(ctx context.Context, worker string, r *ingestwire.CommitRequest) (*ingestwire.CommitReply, error)
	// End drops the job's ingest state on worker (best effort).
	End(ctx context.Context, worker string, job string)
	// The vocabulary phase of a dataset of user ids (ids.go).
	IDScan(ctx context.Context, worker string, r *ingestwire.IDScanRequest) (*ingestwire.IDScanReply, error)
	IDCut(ctx context.Context, worker string, r *ingestwire.IDCutRequest) (*ingestwire.IDCutReply, error)
	IDRange(ctx context.Context, worker string, r *ingestwire.IDRangeRequest) (*ingestwire.IDRangeReply, error)
	IDTrans(ctx context.Context, worker string, r *ingestwire.IDTransRequest) error
}

// LostError says a worker is gone.
type LostError struct {
	Worker string
	Err    error
}

func (e *LostError) Error() string {
	return fmt.Sprintf("ingest: worker %s is gone: %v", e.Worker, e.Err)
}
func (e *LostError) Unwrap() error { return e.Err }

// Options configures Run. Zero values take the defaults written beside
// each field.
type Options struct {
	// Job names the ingest (required).
	Job string
	// Input is the dataset: a file, directory or glob on storage every
	// worker reads at the same path, or nats-obj://BUCKET/NAME; Format
	// its format ("" to detect each file's).
	Input, Format string
	// Read holds the column names and the numbers of states and
	// actions, when given (arrowio.ReadOptions; its vocabularies are
	// not used: IDs says which groups hold ids).
	Read arrowio.ReadOptions
	// IDs are the groups of index columns read as user ids from the
	// start; with AutoIDs, a group of integer columns found to hold ids
	// (arrowio.StringIDsError) is read as ids too, as a local read with
	// arrowio.ScanAutoIDs does; without, that is the data error.
	IDs     ingestwire.IDGroups
	AutoIDs bool
	// MaxStates and MaxActions bound n and u inferred from the data (0:
	// no bound): beyond, Run fails with a *SizeError.
	MaxStates, MaxActions int
	// SplitBytes is the size of a split (default: the dataset's size
	// over 4 splits per worker, between 1 MiB and
	// arrowio.DefaultSplitBytes).
	SplitBytes int64
	// Holdout and Seed: a fraction of the transitions drawn into a
	// held-out set as a local fit draws it (0: none).
	Holdout float64
	Seed    uint64
	// Target and ColCells are the shard layout (shard.SplitGrid:
	// shard.DefaultTargetNNZ, 1).
	Target, ColCells int
	// Store puts every shard into the Object Store bucket Bucket as
	// proto.ShardObject of its checksum (for recovery).
	Store  bool
	Bucket string
	// Byte budgets of a worker (ingestwire.Plan): outbox 32 MiB, segments
	// ahead 32 MiB, pull replies 1 MiB less 4 KiB (below NATS' default
	// max payload), segments 256 KiB; Window splits pulled at once (4).
	OutboxBytes, AheadBytes int64
	PullBytes, SegmentBytes int
	Window                  int
	// BucketsPerWorker: row buckets planned per worker (4).
	BucketsPerWorker int
	// MaxEpochs bounds the epochs of pass 2 before Run gives up (8).
	MaxEpochs int
	// Poll is how long a status request waits for news (1s).
	Poll time.Duration
	// Logger receives progress and failures (default: none).
	Logger hclog.Logger
}

func (o *Options) defaults() error {
	if o.Job == "" {
		return errors.New("ingest: a job name is required")
	}
	if o.Input == "" {
		return errors.New("ingest: an input is required")
	}
	if o.Holdout < 0 || o.Holdout >= 1 {
		return fmt.Errorf("ingest: holdout %v: must be in [0, 1)", o.Holdout)
	}
	o.Target = cmpOr(o.Target, shard.DefaultTargetNNZ)
	o.ColCells = max(1, o.ColCells)
	o.OutboxBytes = cmpOr(o.OutboxBytes, 32<<20)
	o.AheadBytes = cmpOr(o.AheadBytes, 32<<20)
	o.PullBytes = cmpOr(o.PullBytes, 1<<20-4<<10)
	o.SegmentBytes = cmpOr(o.SegmentBytes, 256<<10)
	o.Window = cmpOr(o.Window, 4)
	o.BucketsPerWorker = cmpOr(o.BucketsPerWorker, 4)
	o.MaxEpochs = cmpOr(o.MaxEpochs, 8)
	o.Poll = cmpOr(o.Poll, time.Second)
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	return nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Result is the dataset's shards: per set (ingestwire.SetTrain, and with
// a holdout SetHeld and SetAll) its manifest and its lines, each naming
// the worker that holds the shard.
type Result struct {
	N, U        int
	Transitions int64
	Fingerprint string
	// IDs are the groups of user ids; Vocab[g] is group g's sorted
	// vocabulary in ranges (with Options.Store, each in the Object Store
	// as proto.VocabObject(Job, VocabEpoch, g, r)). VocabRanges bounds
	// the ranges of every epoch (those of failed epochs may have left
	// objects: RemoveVocab).
	IDs         ingestwire.IDGroups
	Vocab       [2][]ingestwire.IDOwner
	VocabEpoch  int
	VocabRanges int
	Sets        []SetResult
	// Epochs of pass 2 it took (1 without failures); Files and Splits
	// are how the dataset was read.
	Epochs int
	Files  []arrowio.DataFile
	Splits []arrowio.Split
}

// SetResult is one set's shards.
type SetResult struct {
	Manifest    *shard.Manifest
	Lines       []shard.Line
	Transitions int64
}

// Run reads the dataset of o on the workers of c and returns its shards,
// which stay on the workers (and, with o.Store, in the Object Store).
// A data error is the local fit's (an *arrowio.InputError naming file,
// row, column and value), and nothing is built when there is one.
func Run(ctx context.Context, c Cluster, o Options) (*Result, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	log := o.Logger.Named("ingest").With("job", o.Job)
	files, err := list(ctx, c, &o)
	if err != nil {
		return nil, err
	}
	if o.SplitBytes == 0 {
		workers, err := c.Workers(ctx)
		if err != nil {
			return nil, err
		}
		o.SplitBytes = splitBytes(files, len(workers))
	}
	splits := arrowio.PlanSplits(files, o.SplitBytes)
	log.Info("dataset", "files", len(files), "splits", len(splits))
	t0 := time.Now()
	var p1 *pass1
	ids := &idPhase{groups: o.IDs}
	for p1 == nil {
		if err := o.checkIDs(ids.groups); err != nil {
			return nil, err
		}
		var res *resolution
		if res, err = ids.build(ctx, c, &o, log, files, splits); err != nil {
			return nil, err
		}
		if res == nil {
			replies, err := scanAll(ctx, c, &o, files, splits, ids.v)
			if errors.Is(err, errHolderLost) {
				log.Warn("a worker holding ids is gone: the vocabulary is built again", "error", err)
				ids.v = nil
				continue
			}
			if err != nil {
				return nil, err
			}
			r := resolve(files, splits, replies, &o, ids.v)
			res = &r
		}
		switch {
		case res.err != nil:
			return nil, res.err
		case res.ids != "":
			g := ingestwire.Group(res.ids)
			if !o.AutoIDs || ids.groups[g] {
				return nil, &arrowio.StringIDsError{Input: res.idsErr, Actions: g == ingestwire.GroupActions}
			}
			log.Info("the dataset names its "+res.ids+" by user ids", "group", res.ids)
			ids.groups[g], ids.v = true, nil
		case res.whole >= 0:
			log.Info("a file is read whole", "file", files[res.whole].Name)
			splits = arrowio.ReadWhole(splits, res.whole, files[res.whole].Size)
			ids.v = nil
		default:
			p1 = res.p1
		}
	}
	log.Info("pass 1 done", "transitions", p1.transitions, "states", p1.n, "actions", p1.u, "elapsed", time.Since(t0).Round(time.Millisecond))
	var lastErr error
	for epoch := 1; epoch <= o.MaxEpochs; epoch++ {
		if ids.groups.Any() && ids.v == nil {
			// A holder was lost: the vocabulary again (the same), on
			// the workers left.
			res, err := ids.build(ctx, c, &o, log, files, splits)
			if err != nil {
				return nil, err
			}
			if res != nil {
				return nil, fmt.Errorf("ingest: the dataset changed while it was read: %w", cmp.Or(res.err, errors.New("its splits read otherwise")))
			}
		}
		workers, err := c.Workers(ctx)
		if err != nil {
			return nil, err
		}
		if len(workers) == 0 {
			return nil, errors.New("ingest: no workers")
		}
		res, err := runEpoch(ctx, c, &o, log, epoch, workers, files, splits, p1, ids.v)
		var lost *LostError
		switch {
		case err == nil:
			res.Epochs, res.Files, res.Splits = epoch, files, splits
			if ids.v != nil {
				res.IDs, res.Vocab, res.VocabEpoch, res.VocabRanges = ids.v.groups, ids.v.owners, ids.v.epoch, ids.ranges
			}
			for _, w := range workers {
				c.End(ctx, w, o.Job)
			}
			return res, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.As(err, &lost), errors.Is(err, errRetry), errors.Is(err, errHolderLost):
			log.Warn("epoch failed: planning again with the workers left", "epoch", epoch, "error", err)
			lastErr = err
			if ids.v != nil && (lost != nil || errors.Is(err, errHolderLost)) {
				ids.v = nil // the lost worker held ids
			}
		default:
			for _, w := range workers {
				c.End(context.WithoutCancel(ctx), w, o.Job)
			}
			return nil, err
		}
	}
	return nil, fmt.Errorf("ingest: %d epochs failed, the last: %w", o.MaxEpochs, lastErr)
}

// errRetry marks an epoch's failure that another epoch may not meet (a
// worker that could not reach another).
var errRetry = errors.New("ingest: the epoch failed")

// list asks the workers, one after the other, to list the dataset.
func list(ctx context.Context, c Cluster, o *Options) ([]arrowio.DataFile, error) {
	workers, err := c.Workers(ctx)
	if err != nil {
		return nil, err
	}
	var lost error
	for _, w := range workers {
		rep, err := c.List(ctx, w, &ingestwire.ListRequest{Job: o.Job, Input: o.Input, Format: o.Format})
		var le *LostError
		if errors.As(err, &le) {
			lost = err
			continue
		}
		if err != nil {
			return nil, err
		}
		return rep.Files, nil
	}
	if lost != nil {
		return nil, lost
	}
	return nil, errors.New("ingest: no workers to list the dataset")
}

// scanAll is pass 1: every split summarized, each worker reading one
// split at a time; the splits of a worker that is lost go to others. A
// dataset of user ids is read with the vocabulary v: each split by its
// holder.
func scanAll(ctx context.Context, c Cluster, o *Options, files []arrowio.DataFile, splits []arrowio.Split, v *vocab) (map[int]*ingestwire.ScanReply, error) {
	var holder func(int) string
	var ids *ingestwire.SplitIDs
	if v != nil {
		holder, ids = v.holderOf, v.splitIDs()
	}
	done, _, err := leaseSplits(ctx, c, splits, holder, func(ctx context.Context, w string, sp arrowio.Split) (*ingestwire.ScanReply, error) {
		rep, err := c.Scan(ctx, w, &ingestwire.ScanRequest{Job: o.Job, File: files[sp.File], Split: sp, Read: o.Read, IDs: ids})
		if err != nil && !isLost(err) {
			err = fmt.Errorf("ingest: split %d of %s: %w", sp.Ordinal, files[sp.File].Name, err)
		}
		return rep, err
	})
	return done, err
}

func isLost(err error) bool {
	var lost *LostError
	return errors.As(err, &lost)
}

// errHolderLost: a split's holder (the only worker that may read it) is
// gone.
var errHolderLost = errors.New("ingest: a worker holding ids of the dataset is gone")

// leaseSplits runs call for every split, each worker one split at a time
// (scans), and returns each split's reply and the worker that gave it, by
// ordinal. The splits of a worker that is lost go to the workers alive;
// with holder set only to their holder, so that a lost holder ends it
// with errHolderLost. Another error ends it at once.
func leaseSplits[T any](ctx context.Context, c Cluster, splits []arrowio.Split, holder func(int) string, call func(ctx context.Context, w string, sp arrowio.Split) (T, error)) (map[int]T, map[int]string, error) {
	done, by := map[int]T{}, map[int]string{}
	for {
		var left []arrowio.Split
		for _, sp := range splits {
			if _, ok := done[sp.Ordinal]; !ok {
				left = append(left, sp)
			}
		}
		if len(left) == 0 {
			return done, by, nil
		}
		workers, err := c.Workers(ctx)
		if err != nil {
			return nil, nil, err
		}
		if len(workers) == 0 {
			return nil, nil, errors.New("ingest: no workers")
		}
		if holder != nil {
			for _, sp := range left {
				if !slices.Contains(workers, holder(sp.Ordinal)) {
					return nil, nil, fmt.Errorf("%w: %s", errHolderLost, holder(sp.Ordinal))
				}
			}
		}
		st := newScans[T](left, holder)
		var mu sync.Mutex
		var first error
		lostAny := false
		var wg sync.WaitGroup
		for _, w := range workers {
			wg.Go(func() {
				for {
					mu.Lock()
					sp, ok := st.next(w)
					stop := first != nil
					mu.Unlock()
					if !ok || stop {
						return
					}
					rep, err := call(ctx, w, sp)
					mu.Lock()
					switch {
					case isLost(err):
						st.lost(w)
						lostAny = true
						if holder != nil && first == nil {
							first = fmt.Errorf("%w: %w", errHolderLost, err)
						}
						mu.Unlock()
						return
					case err != nil:
						if first == nil {
							first = err
						}
					default:
						st.finish(w, sp.Ordinal, rep)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if first != nil {
			return nil, nil, first
		}
		for k, rep := range st.done {
			done[k], by[k] = rep, st.by[k]
		}
		if !lostAny && len(st.done) < len(left) {
			return nil, nil, errors.New("ingest: splits left unread")
		}
		// Workers were lost: the splits left are read by those alive.
	}
}

// runEpoch is pass 2 and the build on workers, in one epoch.
func runEpoch(ctx context.Context, c Cluster, o *Options, log hclog.Logger, epoch int, workers []string, files []arrowio.DataFile, splits []arrowio.Split, p1 *pass1, v *vocab) (*Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mappers := assignSplits(splits, len(workers))
	var numbered *ingestwire.SplitIDs
	if v != nil {
		// Each split is mapped by its holder, which numbers its ids.
		numbered = v.splitIDs()
		for k, sp := range splits {
			if mappers[k] = slices.Index(workers, v.holderOf(sp.Ordinal)); mappers[k] < 0 {
				return nil, fmt.Errorf("%w: %s", errHolderLost, v.holderOf(sp.Ordinal))
			}
		}
	}
	plan := &ingestwire.Plan{Job: o.Job, Epoch: epoch, Workers: workers, Files: files, Read: o.Read, N: p1.n, U: p1.u,
		Holdout: o.Holdout, Seed: o.Seed, Combine: p1.combine, OutboxBytes: o.OutboxBytes, AheadBytes: o.AheadBytes,
		PullBytes: o.PullBytes, SegmentBytes: o.SegmentBytes, Window: o.Window, Target: o.Target, ColCells: o.ColCells, IDs: numbered,
		Buckets: planBuckets(&p1.hist, p1.n, p1.u, len(workers), o.BucketsPerWorker)}
	for k, sp := range splits {
		plan.Splits = append(plan.Splits, ingestwire.MapSplit{Split: sp, Mapper: mappers[k], First: p1.first[k], Rows: p1.rows[k], CRC: p1.crc[k]})
	}
	t0 := time.Now()
	if err := each(ctx, workers, func(ctx context.Context, w string) error { return c.Plan(ctx, w, plan) }); err != nil {
		return nil, err
	}
	transitions, err := pass2(ctx, c, o, plan)
	if err != nil {
		return nil, err
	}
	log.Info("pass 2 done", "epoch", epoch, "workers", len(workers), "buckets", len(plan.Buckets), "elapsed", time.Since(t0).Round(time.Millisecond))
	if o.Holdout > 0 {
		switch {
		case transitions[ingestwire.SetTrain] == 0:
			return nil, fmt.Errorf("ingest: holdout %v left no training transitions out of %d", o.Holdout, p1.transitions)
		case transitions[ingestwire.SetHeld] == 0:
			return nil, fmt.Errorf("ingest: holdout %v drew no held-out transitions out of %d: use a larger fraction", o.Holdout, p1.transitions)
		}
	}
	shards, err := cutChains(ctx, c, plan)
	if err != nil {
		return nil, err
	}
	lines, reqs, err := build(ctx, c, plan, shards)
	if err != nil {
		return nil, err
	}
	res := &Result{N: p1.n, U: p1.u, Transitions: p1.transitions, Fingerprint: p1.fingerprint}
	for _, set := range plan.Sets() {
		if err := checkLines(lines[set]); err != nil {
			return nil, err
		}
		m := manifest(lines[set], p1.n, p1.u)
		res.Sets = append(res.Sets, SetResult{Manifest: m, Lines: lines[set], Transitions: transitions[set]})
	}
	// IDs, per worker, per build request, per row shard, per cell.
	ids := map[string][][][]int{}
	for _, w := range workers {
		rs := reqs[w]
		ids[w] = make([][][]int, len(rs))
		for k, r := range rs {
			ids[w][k] = r.ids
		}
	}
	err = each(ctx, workers, func(ctx context.Context, w string) error {
		_, err := c.Commit(ctx, w, &ingestwire.CommitRequest{Job: o.Job, Epoch: epoch, IDs: ids[w], Store: o.Store, Bucket: o.Bucket})
		return err
	})
	if err != nil {
		return nil, err
	}
	log.Info("shards built", "epoch", epoch, "shards", len(res.Sets[0].Lines), "elapsed", time.Since(t0).Round(time.Millisecond))
	return res, nil
}

// each runs f for every worker in parallel and returns the first error
// (a *LostError before any other).
func each(ctx context.Context, workers []string, f func(ctx context.Context, w string) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(workers))
	var wg sync.WaitGroup
	for k, w := range workers {
		wg.Go(func() {
			if errs[k] = f(ctx, w); errs[k] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	return firstError(errs)
}

// firstError returns a *LostError among errs, else the first error that
// is not a cancellation, else the first.
func firstError(errs []error) error {
	var first, real error
	for _, err := range errs {
		var lost *LostError
		switch {
		case err == nil:
		case errors.As(err, &lost):
			return err
		case real == nil && !errors.Is(err, context.Canceled):
			real = err
		case first == nil:
			first = err
		}
	}
	if real != nil {
		return real
	}
	return first
}

// pass2 waits until every worker has mapped and reduced, and returns the
// transitions of each set.
func pass2(ctx context.Context, c Cluster, o *Options, p *ingestwire.Plan) ([]int64, error) {
	transitions := make([]int64, len(p.Sets()))
	var mu sync.Mutex
	err := each(ctx, p.Workers, func(ctx context.Context, w string) error {
		for {
			st, err := c.Status(ctx, w, &ingestwire.StatusRequest{Job: p.Job, Epoch: p.Epoch, WaitMillis: int(o.Poll.Milliseconds())})
			if err != nil {
				return err
			}
			switch {
			case st.Input != nil:
				return st.Input
			case st.Peer != "":
				return &LostError{Worker: st.Peer, Err: fmt.Errorf("worker %s could not reach it: %s", w, st.Error)}
			case st.Error != "":
				return fmt.Errorf("%w: worker %s: %s", errRetry, w, st.Error)
			case st.Reduced && st.Mapped == st.Maps:
				mu.Lock()
				for set, t := range st.Transitions {
					transitions[set] += t
				}
				mu.Unlock()
				return nil
			}
		}
	})
	return transitions, err
}

// chainKey is one cut chain: a set and an action.
type chainKey struct{ set, action int }

// cutChains runs the cut chain of every (set, action) over its buckets in
// row order (chains in parallel) and returns the row shards to build,
// per set in (action, row) order.
func cutChains(ctx context.Context, c Cluster, p *ingestwire.Plan) ([][]shardPlan, error) {
	byAction := map[int][]int{}
	var actions []int
	for k, b := range p.Buckets {
		if _, ok := byAction[b.Action]; !ok {
			actions = append(actions, b.Action)
		}
		byAction[b.Action] = append(byAction[b.Action], k)
	}
	var keys []chainKey
	for _, set := range p.Sets() {
		for _, a := range actions {
			keys = append(keys, chainKey{set, a})
		}
	}
	results := make([][]shardPlan, len(keys))
	errs := make([]error, len(keys))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for q, key := range keys {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			buckets := byAction[key.action]
			var cuts []int32
			var cutBucket []int
			carry := int64(0)
			for _, b := range buckets {
				if ctx.Err() != nil {
					errs[q] = ctx.Err()
					return
				}
				rep, err := c.Cut(ctx, p.Workers[p.Buckets[b].Reducer], &ingestwire.CutRequest{Job: p.Job, Epoch: p.Epoch, Set: key.set, Bucket: b, Carry: carry})
				if err != nil {
					errs[q] = err
					cancel()
					return
				}
				for _, r := range rep.Cuts {
					cuts = append(cuts, r)
					cutBucket = append(cutBucket, b)
				}
				carry = rep.Carry
			}
			results[q] = chainShards(key.set, key.action, cuts, cutBucket, buckets, p.Buckets, p.Workers, p.N)
		})
	}
	wg.Wait()
	if err := firstError(errs); err != nil {
		return nil, err
	}
	out := make([][]shardPlan, len(p.Sets()))
	for q, key := range keys {
		out[key.set] = append(out[key.set], results[q]...)
	}
	for _, set := range out {
		slices.SortStableFunc(set, func(a, b shardPlan) int {
			if a.Action != b.Action {
				return a.Action - b.Action
			}
			return int(a.First - b.First)
		})
	}
	return out, nil
}

// buildReq is a build request sent to a worker and the IDs of what it
// built.
type buildReq struct {
	shards []*shardPlan
	ids    [][]int
}

// maxBuildShards bounds the row shards of one build request (so its
// reply of lines stays far below a message's size).
const maxBuildShards = 1024

// build has every row shard built by its builder and returns each set's
// lines in shard order, and the requests sent to each worker.
func build(ctx context.Context, c Cluster, p *ingestwire.Plan, shards [][]shardPlan) ([][]shard.Line, map[string][]*buildReq, error) {
	reqs := map[string][]*buildReq{}
	for set := range shards {
		for k := range shards[set] {
			sp := &shards[set][k]
			rs := reqs[sp.builder]
			if len(rs) == 0 || len(rs[len(rs)-1].shards) == maxBuildShards {
				rs = append(rs, &buildReq{})
				reqs[sp.builder] = rs
			}
			last := rs[len(rs)-1]
			last.shards = append(last.shards, sp)
		}
	}
	// Lines by row shard, then laid out in shard order.
	cells := map[*shardPlan][]shard.Line{}
	var mu sync.Mutex
	err := each(ctx, p.Workers, func(ctx context.Context, w string) error {
		for _, r := range reqs[w] {
			br := &ingestwire.BuildRequest{Job: p.Job, Epoch: p.Epoch}
			for _, sp := range r.shards {
				br.Shards = append(br.Shards, sp.BuildShard)
			}
			rep, err := c.Build(ctx, w, br)
			if err != nil {
				return err
			}
			if len(rep.Lines) != len(r.shards) {
				return fmt.Errorf("ingest: worker %s built %d of %d shards", w, len(rep.Lines), len(r.shards))
			}
			mu.Lock()
			for k, sp := range r.shards {
				cells[sp] = rep.Lines[k]
			}
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	lines := make([][]shard.Line, len(shards))
	ids := map[*shardPlan][]int{}
	for set := range shards {
		for k := range shards[set] {
			sp := &shards[set][k]
			for _, l := range cells[sp] {
				ids[sp] = append(ids[sp], len(lines[set]))
				lines[set] = append(lines[set], l)
			}
		}
	}
	for _, rs := range reqs {
		for _, r := range rs {
			for _, sp := range r.shards {
				r.ids = append(r.ids, ids[sp])
			}
		}
	}
	return lines, reqs, nil
}
