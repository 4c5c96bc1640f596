package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"sync/atomic"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// inputFlags are the flags that say where transitions come from.
type inputFlags struct {
	input   string
	format  string
	state   string
	action  string
	next    string
	count   string
	states  int
	actions int
	ids     string
}

func (f *inputFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.input, "input", "", "transitions file: CSV with a header, Arrow IPC file or stream, or Parquet (required)")
	fs.StringVar(&f.format, "input-format", "", "input format: csv, arrow, arrows (stream) or parquet (default: from the extension or the file's magic bytes)")
	fs.StringVar(&f.state, "col-state", "state", "name of the state column")
	fs.StringVar(&f.action, "col-action", "action", "name of the action column")
	fs.StringVar(&f.next, "col-next", "next_state", "name of the next-state column")
	fs.StringVar(&f.count, "col-count", "", "name of the count column (default: a column named count if there is one, else every row counts 1)")
	fs.IntVar(&f.states, "states", 0, "number of states n (default: inferred as 1 + the largest state seen)")
	fs.IntVar(&f.actions, "actions", 0, "number of actions u (default: inferred as 1 + the largest action seen)")
	fs.StringVar(&f.ids, "ids", idsAuto, idsUsage)
}

func (f *inputFlags) validate() error {
	if f.input == "" {
		return usagef("--input is required")
	}
	if f.states < 0 {
		return usagef("--states %d: must be >= 1", f.states)
	}
	if f.actions < 0 {
		return usagef("--actions %d: must be >= 1", f.actions)
	}
	return validIDs(f.ids)
}

func (f *inputFlags) readOptions() arrowio.ReadOptions {
	return arrowio.ReadOptions{
		Format: f.format, StateCol: f.state, ActionCol: f.action, NextCol: f.next, CountCol: f.count,
		States: f.states, Actions: f.actions,
	}
}

// ingestGCPercent is the GOGC of loadData (the default is 100).
const ingestGCPercent = 25

// Limits on sizes inferred from the data (see loadData).
const (
	maxInferredStates  = 1 << 24
	maxInferredActions = 1 << 12
)

// dataset is the counted transitions of one input, optionally with a
// held-out part.
type dataset struct {
	file        string
	n, u        int
	transitions int
	train       []*factor.Block // one per action
	holdout     []*factor.Block // nil without a holdout
	fingerprint string
	// ids are the vocabularies of the groups named by ids (nil: integer
	// indices): state i of the counts is ids.states.ID(i).
	ids vocabs
	// unseen counts the rows set aside because they name an id the model
	// read against lacks (policy idsKnown); transitions does not count
	// them.
	unseen int
}

// loadData reads the transitions of f into per-action count matrices.
// With holdout > 0 each transition goes to the held-out set with that
// probability, drawn from a generator seeded by seed (so the split is
// reproducible and independent of the file format). Columns of ids (see
// --ids) get the sorted vocabulary of the data's ids.
func loadData(ctx context.Context, f *inputFlags, holdout float64, seed uint64) (*dataset, error) {
	return loadDataIDs(ctx, f, holdout, seed, vocabs{}, idsFresh)
}

// loadDataIDs is loadData against the vocabularies of a model (base; a
// nil group holds integers), whose ids keep their indices: new ids are
// appended sorted among themselves (policy idsGrow), or the rows that
// name them are set aside (idsKnown, counted in dataset.unseen).
//
// Rows of ids are counted with indices numbered as first seen
// (arrowio.ReadOptions.StateIDs), then renumbered once the vocabulary is
// sorted (shard.Counter.Remap): the counts are bitwise those of reading
// the rows with their final indices. Such inputs are read in one pass
// whatever their format.
func loadDataIDs(ctx context.Context, f *inputFlags, holdout float64, seed uint64, base vocabs, policy idPolicy) (*dataset, error) {
	var d *dataset
	_, err := f.scanWithIDs(base, policy, func(opts arrowio.ReadOptions) error {
		var err error
		d, err = countData(ctx, f, opts, holdout, seed, base, policy)
		return err
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// countData is one read of loadDataIDs, with the vocabularies of opts.
func countData(ctx context.Context, f *inputFlags, opts arrowio.ReadOptions, holdout float64, seed uint64, base vocabs, policy idPolicy) (*dataset, error) {
	// The counts are a few large pointer-free buffers, cheap to collect:
	// collecting more often keeps the peak RSS near what is live (the
	// read batch, the counter's log and the CSR being built) rather than
	// twice that.
	defer debug.SetGCPercent(debug.SetGCPercent(ingestGCPercent))
	ids := vocabs{opts.StateIDs, opts.ActionIDs}
	if holdout == 0 && !ids.any() && twoPassFormat(f) {
		d, ok, err := loadTwoPass(ctx, f)
		if err != nil || ok {
			return d, err
		}
		// Too many states for a histogram: count in one pass.
	}
	var train, held shard.Counter
	rng := rand.New(rand.NewPCG(seed, 0x686f6c64)) // "hold"
	h := newFingerprint()
	known := knownRows{n: base.states.Len(), u: base.actions.Len(), ids: ids}
	err := scanPipelined(ctx, f.input, opts, func(b *arrowio.TransitionBatch) error {
		if policy == idsKnown && ids.any() {
			b = known.filter(b)
		}
		if holdout == 0 {
			k, err := train.AddBatch(b.State, b.Action, b.Next, b.Count)
			if err != nil {
				return fmt.Errorf("%s: row %d: %w", f.input, b.FirstRow+k, err)
			}
			return nil
		}
		for k := range b.State {
			ct := &train
			if rng.Float64() < holdout {
				ct = &held
			}
			if err := ct.Add(int(b.State[k]), int(b.Action[k]), int(b.Next[k]), b.Count[k]); err != nil {
				return fmt.Errorf("%s: row %d: %w", f.input, b.FirstRow+k, err)
			}
		}
		return nil
	}, h.add)
	if err != nil {
		return nil, err
	}
	if ids.any() {
		// The fingerprint is of the rows with each id numbered as first
		// seen, then of the ids in that order: the sequence of ids.
		h.addIDs(ids)
		if policy != idsKnown {
			var sp, ap []int32
			if ids.states != nil {
				sp = ids.states.SortFrom(base.states.Len())
			}
			if ids.actions != nil {
				ap = ids.actions.SortFrom(base.actions.Len())
			}
			train.Remap(sp, ap)
			held.Remap(sp, ap)
		}
	}
	n1, u1 := train.Dims()
	n2, u2 := held.Dims()
	d := &dataset{file: f.input, n: max(n1, n2), u: max(u1, u2), transitions: train.Len() + held.Len(),
		fingerprint: h.sum(), ids: ids, unseen: known.unseen}
	if policy == idsKnown {
		d.ids = base
	}
	if d.ids.states != nil {
		d.n = d.ids.states.Len()
	}
	if d.ids.actions != nil {
		d.u = d.ids.actions.Len()
	}
	if err := d.size(f); err != nil {
		return nil, err
	}
	if train.Len() == 0 {
		return nil, usagef("--holdout %v left no training transitions out of %d", holdout, d.transitions)
	}
	// The reader's buffers are garbage now: give back what of them the
	// collector has not (the counter's log is outside the Go heap), so
	// that the matrices' large arrays do not come on top of it.
	debug.FreeOSMemory()
	d.train = train.Matrices(d.u)
	if holdout > 0 {
		if held.Len() == 0 {
			return nil, usagef("--holdout %v drew no held-out transitions out of %d: use a larger fraction", holdout, d.transitions)
		}
		d.holdout = held.Matrices(d.u)
	}
	return d, nil
}

// size checks that d has transitions and sets its n and u from the flags,
// or checks the sizes inferred from the data.
func (d *dataset) size(f *inputFlags) error {
	if d.transitions == 0 && d.unseen > 0 {
		return fmt.Errorf("%s: no transitions to score: all %d rows name states or actions the model does not have", f.input, d.unseen)
	}
	if d.transitions == 0 {
		return fmt.Errorf("%s: no transitions: the input has no data rows", f.input)
	}
	if d.ids.states != nil && f.states > 0 {
		return usagef("--states %d: the states are named by ids, so n is the number of distinct ids (%d): drop --states", f.states, d.n)
	}
	if d.ids.actions != nil && f.actions > 0 {
		return usagef("--actions %d: the actions are named by ids, so u is the number of distinct ids (%d): drop --actions", f.actions, d.u)
	}
	// An inferred size is a guess from the largest index seen: one stray
	// huge index would make the model too big for memory, so past these
	// limits the user must confirm the size with a flag. (A vocabulary's
	// size is no guess: every id is in the data.)
	switch {
	case d.ids.states != nil:
	case f.states > 0:
		d.n = f.states
	case d.n > maxInferredStates:
		return usagef("%s: the largest state index is %d, so n would be %d states (over %d): pass --states N if that is right", f.input, d.n-1, d.n, maxInferredStates)
	}
	switch {
	case d.ids.actions != nil:
	case f.actions > 0:
		d.u = f.actions
	case d.u > maxInferredActions:
		return usagef("%s: the largest action index is %d, so u would be %d actions (over %d): pass --actions N if that is right", f.input, d.u-1, d.u, maxInferredActions)
	}
	return nil
}

// knownRows sets aside the rows of a batch that name an id a model lacks
// (an index at or beyond its vocabulary's length n or u, numbered so by
// the scan, which grew a clone of the vocabulary), for loadDataIDs with
// policy idsKnown.
type knownRows struct {
	n, u   int
	ids    vocabs
	kept   arrowio.TransitionBatch
	unseen int
}

// filter returns b, or the rows of b that name known ids only.
func (k *knownRows) filter(b *arrowio.TransitionBatch) *arrowio.TransitionBatch {
	n, u := int32(k.n), int32(k.u)
	if k.ids.states == nil {
		n = math.MaxInt32
	}
	if k.ids.actions == nil {
		u = math.MaxInt32
	}
	o := &k.kept
	o.State, o.Action, o.Next, o.Count = o.State[:0], o.Action[:0], o.Next[:0], o.Count[:0]
	o.FirstRow = b.FirstRow
	for r := range b.State {
		if b.State[r] >= n || b.Next[r] >= n || b.Action[r] >= u {
			k.unseen++
			continue
		}
		o.State, o.Action, o.Next = append(o.State, b.State[r]), append(o.Action, b.Action[r]), append(o.Next, b.Next[r])
		if b.Count != nil {
			o.Count = append(o.Count, b.Count[r])
		}
	}
	if b.Count == nil {
		o.Count = nil
	}
	return o
}

// firstPassGCPercent is the GOGC of loadTwoPass's first read.
const firstPassGCPercent = 200

// twoPassFormat reports whether loadData reads f twice (shard.TwoPass):
// Arrow IPC and Parquet files, which decode fast, so that a second read
// costs less than keeping every transition while the matrices are built.
// CSV, whose parsing is most of its cost, is read once.
func twoPassFormat(f *inputFlags) bool {
	format, err := arrowio.NormalizeFormat(f.format)
	if err == nil && format == "" {
		format, _, err = arrowio.DetectFormat(f.input)
	}
	return err == nil && format != arrowio.FormatCSV
}

// loadTwoPass is loadData without a holdout, in two reads of the file
// (shard.TwoPass): the first validates, hashes and counts each (action,
// state); the second puts each transition in its place. ok is false, with
// no error, when the states are too spread for the first pass's histogram
// or when the second read differs from the first (shard.ErrInputChanged):
// the caller counts in one pass instead. The dataset is the one loadData
// builds in one pass, bitwise.
func loadTwoPass(ctx context.Context, f *inputFlags) (d *dataset, ok bool, err error) {
	// The first read keeps almost nothing live, so loadData's GOGC would
	// collect at every MiB or so of the readers' garbage: collect less
	// often until Plan, but not so rarely that the heap of this read
	// (the Parquet reader keeps ≈ 25 MB live: 75 MB at GOGC 200, 125 MB
	// at 400) outgrows the matrices and sets the peak.
	gcPercent := debug.SetGCPercent(firstPassGCPercent)
	defer debug.SetGCPercent(gcPercent)
	var tp shard.TwoPass
	h := &splitHash{f: newFingerprint()}
	var histDone atomic.Int64 // batches
	err = scanPipelined(ctx, f.input, f.readOptions(), func(b *arrowio.TransitionBatch) error {
		k, err := tp.Hist(b.State, b.Action, b.Next, b.Count)
		if err != nil {
			return fmt.Errorf("%s: row %d: %w", f.input, b.FirstRow+k, err)
		}
		histDone.Add(1)
		return nil
	}, func(b *arrowio.TransitionBatch) error {
		h.first(b, histDone.Load()-int64(h.batches) >= splitHashLag)
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	n, u := tp.Dims()
	d = &dataset{file: f.input, n: n, u: u, transitions: tp.Len()}
	if err := d.size(f); err != nil {
		return nil, false, err
	}
	if !tp.Fits() {
		return nil, false, nil
	}
	// Plan allocates the arrays of the result (about the CSR's size) and
	// nothing else: collecting while they are allocated (at GOGC 25 each
	// large allocation would start a cycle) finds no garbage.
	debug.SetGCPercent(-1)
	tp.Plan()
	debug.SetGCPercent(gcPercent)
	// Every count 1 (the common case): the second read skips the count
	// column, which the first has checked.
	opts := f.readOptions()
	opts.NoCount = !tp.Weighted()
	err = scanPipelined(ctx, f.input, opts, func(b *arrowio.TransitionBatch) error {
		return tp.Fill(b.State, b.Action, b.Next, b.Count)
	}, h.second)
	if err == nil {
		d.fingerprint = h.f.sum()
		// The readers' garbage is scattered small spans, which the
		// matrices' large arrays mostly cannot reuse and the runtime
		// would keep resident: give it back before they are allocated.
		debug.FreeOSMemory()
		// As for Plan: Matrices allocates the values of the result and
		// little else.
		debug.SetGCPercent(-1)
		d.train, err = tp.Matrices(d.u)
		debug.SetGCPercent(gcPercent)
	}
	if errors.Is(err, shard.ErrInputChanged) {
		// Written to while read (a growing log): count what one read
		// sees, as the one-pass path always has.
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err // the reader's, naming the file
	}
	return d, true, nil
}

// splitHashLag is how many batches the histogram of loadTwoPass's first
// read may get ahead of the fingerprint's hashing before the hashing
// stops holding the reading back and leaves the rest to the second read
// (scanPipelined has pipelineDepth + 1 batches in flight there).
const splitHashLag = pipelineDepth - 2

// splitHash hashes the fingerprint over loadTwoPass's two reads: in the
// first as long as it keeps up with the histogram (it must never hold
// that read back, while the second read, which only places transitions,
// leaves a core to spare), and the rows it did not hash there in the
// second. Each row is hashed once, in order: the value is that of
// hashing the first read's rows (the second reads the same rows, and
// without their counts only when every count is 1).
type splitHash struct {
	f       *fingerprintHash
	rows    int // hashed so far, from the first row on
	batches int // of the first read, seen so far
	stopped bool
}

// first is the hashing of a batch of the first read; with behind, and
// from then on, it leaves the batches to the second read.
func (s *splitHash) first(b *arrowio.TransitionBatch, behind bool) {
	s.batches++
	s.stopped = s.stopped || behind
	if !s.stopped {
		s.f.addBatch(b)
		s.rows += b.Len()
	}
}

// second is the hashing of a batch of the second read: its rows that
// first did not hash.
func (s *splitHash) second(b *arrowio.TransitionBatch) error {
	if from := s.rows - (b.FirstRow - 1); from < b.Len() {
		s.f.addRows(b, max(from, 0))
		s.rows = b.FirstRow - 1 + b.Len()
	}
	return nil
}

// all returns the training and held-out counts together, as one matrix per
// action, by adding the held-out nonzeros to the training ones.
func (d *dataset) all() []*factor.Block {
	if d.holdout == nil {
		return d.train
	}
	var ct shard.Counter
	for _, set := range [][]*factor.Block{d.train, d.holdout} {
		for _, b := range set {
			for r, i := range b.Rows {
				for q := b.Ptr[r]; q < b.Ptr[r+1]; q++ {
					// Counts were validated when read; Add cannot fail here.
					_ = ct.Add(int(i), b.Action, int(b.Cols[q]), b.Vals[q])
				}
			}
		}
	}
	return ct.Matrices(d.u)
}
