package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker"
)

// inputFlags are the flags that say where transitions come from.
type inputFlags struct {
	input   string
	natsURL string
	// nats, when set, holds the command's NATS flags: a nats-obj://
	// input connects with their URL (unless --input-nats) and
	// credentials.
	nats    *natsFlags
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
	fs.StringVar(&f.input, "input", "", "transitions: a file (CSV with a header, Arrow IPC file or stream, or Parquet, each possibly gzip-compressed), a directory of such files or a glob (read in path order), nats-obj://BUCKET/NAME, a dataset uploaded by emsf data put, or - (standard input) (required)")
	fs.StringVar(&f.natsURL, "input-nats", "", "NATS server URL of a nats-obj:// --input (default: --nats, $NATS_URL)")
	fs.StringVar(&f.format, "input-format", "", "input format: csv, arrow, arrows (stream) or parquet (default: from the extension or the file's magic bytes)")
	fs.StringVar(&f.state, "col-state", "state", "name of the state column")
	fs.StringVar(&f.action, "col-action", "action", "name of the action column")
	fs.StringVar(&f.next, "col-next", "next_state", "name of the next-state column")
	fs.StringVar(&f.count, "col-count", "", "name of the count column (default: a column named count if there is one, else every row counts 1)")
	fs.IntVar(&f.states, "states", 0, "number of states n (default: inferred as 1 + the largest state seen)")
	fs.IntVar(&f.actions, "actions", 0, "number of actions u (default: inferred as 1 + the largest action seen)")
	fs.StringVar(&f.ids, "ids", idsAuto, idsUsage)
}

// name is the input as messages name it: its path, or "stdin".
func (f *inputFlags) name() string {
	if f.input == arrowio.StdinPath {
		return "stdin"
	}
	return f.input
}

// spoolStdin copies r (standard input) to a file named "stdin" in a new
// temporary folder, for a command that reads its input more than once
// (its messages then name ".../stdin"); remove deletes the copy.
func spoolStdin(r io.Reader) (path string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "emsf-input-")
	if err != nil {
		return "", nil, fmt.Errorf("--input -: a temporary copy of standard input: %w", err)
	}
	remove = func() { os.RemoveAll(dir) }
	path = filepath.Join(dir, "stdin")
	f, err := os.Create(path)
	if err == nil {
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		remove()
		return "", nil, fmt.Errorf("--input -: a temporary copy of standard input: %w", err)
	}
	return path, remove, nil
}

// stdinReplay lets standard input be read more than once (a read with
// --ids auto that meets ids late is read again): what any read takes from
// standard input is also written to a temporary file, and a later read
// replays the file before it goes on with standard input. Reads must not
// overlap.
type stdinReplay struct {
	src  io.Reader
	file *os.File
	size int64 // bytes written to file
	err  error // the first write error
}

func newStdinReplay(src io.Reader) (*stdinReplay, error) {
	file, err := os.CreateTemp("", "emsf-stdin-")
	if err != nil {
		return nil, fmt.Errorf("--input -: a temporary copy of standard input: %w", err)
	}
	return &stdinReplay{src: src, file: file}, nil
}

// reader returns a reader of standard input from its first byte.
func (r *stdinReplay) reader() io.Reader {
	return io.MultiReader(io.NewSectionReader(r.file, 0, r.size), r)
}

// Read reads standard input on and keeps a copy of what it read.
func (r *stdinReplay) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.src.Read(p)
	if n > 0 {
		if _, werr := r.file.WriteAt(p[:n], r.size); werr != nil {
			r.err = fmt.Errorf("--input -: a temporary copy of standard input: %w", werr)
			return 0, r.err
		}
		r.size += int64(n)
	}
	return n, err
}

// close removes the copy.
func (r *stdinReplay) close() {
	r.file.Close()
	os.Remove(r.file.Name())
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

// dataSource is the dataset an input names, listed once: its files in
// the order their rows arrive in, and the NATS connection that reads an
// Object Store dataset.
type dataSource struct {
	files []arrowio.DataFile
	nc    *nats.Conn
	js    jetstream.JetStream
}

// open lists the dataset of --input.
func (f *inputFlags) open(ctx context.Context) (*dataSource, error) {
	bucket, name, isObj, err := worker.ParseObjectInput(f.input)
	if err != nil {
		return nil, usagef("--input: %v", err)
	}
	if !isObj {
		files, err := arrowio.ListDataset(f.input, f.format)
		if err != nil {
			return nil, err
		}
		return &dataSource{files: files}, nil
	}
	var cc *worker.ConnConfig
	if f.nats != nil {
		cc = f.nats.conn("emsf-data")
	} else {
		cc = &worker.ConnConfig{Name: "emsf-data", URL: os.Getenv("NATS_URL")}
	}
	if f.natsURL != "" {
		cc.URL = f.natsURL
	}
	if cc.URL == "" {
		return nil, usagef("--input %s: give the NATS server with --input-nats URL (or --nats, $NATS_URL)", f.input)
	}
	nc, err := cc.Connect()
	if err != nil {
		return nil, fmt.Errorf("--input %s: %w", f.input, err)
	}
	js, err := jetstream.New(nc)
	if err == nil {
		var files []arrowio.DataFile
		if files, err = worker.ListObjectDataset(ctx, js, bucket, name, f.format); err == nil {
			return &dataSource{files: files, nc: nc, js: js}, nil
		}
	}
	nc.Close()
	return nil, err
}

// close closes the connection of an Object Store dataset.
func (d *dataSource) close() {
	if d.nc != nil {
		d.nc.Close()
	}
}

// allOf reports whether keep says yes to every file of the dataset.
func (d *dataSource) allOf(keep func(f arrowio.DataFile) bool) bool {
	for _, f := range d.files {
		if !keep(f) {
			return false
		}
	}
	return true
}

func (f *inputFlags) readOptions() arrowio.ReadOptions {
	return arrowio.ReadOptions{
		Format: f.format, StateCol: f.state, ActionCol: f.action, NextCol: f.next, CountCol: f.count,
		States: f.states, Actions: f.actions,
	}
}

// ingestGCPercent is the GOGC of loadData's matrices (the default is
// 100), for inputs of at least largeIngestTransitions.
const ingestGCPercent = 25

// smallReadGCPercent is the GOGC of loadData's first
// largeIngestTransitions rows (see countData).
const smallReadGCPercent = 400

// largeIngestTransitions is the least number of transitions for which
// loadData manages the memory of the matrices: it gives the reader's
// garbage back to the system first and builds them at ingestGCPercent.
// Below it the matrices (≤ 20 bytes a transition: the log and the CSR)
// are smaller than the reader's few tens of MB, so neither lowers the
// peak, and they cost a small input's fit a fifth of its time to the
// "data:" line: a forced collection, every free page returned and faulted
// in again, and at GOGC 25 a collection as soon as the matrices allocate.
const largeIngestTransitions = 1 << 21

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
	// val is the validation split of the training transitions (nil
	// without one): what chooses a model's smoothing and stops its fit.
	val         []*factor.Block
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
	return loadDataIDs(ctx, f, holdout, 0, seed, vocabs{}, idsFresh)
}

// loadDataVal is loadData with a validation split: each transition not
// held out goes to d.val with probability validation, drawn from a
// second generator seeded by seed (so the held-out part, and the split of
// the rest, do not depend on each other's fraction).
func loadDataVal(ctx context.Context, f *inputFlags, holdout, validation float64, seed uint64) (*dataset, error) {
	return loadDataIDs(ctx, f, holdout, validation, seed, vocabs{}, idsFresh)
}

// loadDataIDs is loadDataVal against the vocabularies of a model (base; a
// nil group holds integers), whose ids keep their indices: new ids are
// appended sorted among themselves (policy idsGrow), or the rows that
// name them are set aside (idsKnown, counted in dataset.unseen).
//
// Rows of ids are counted with indices numbered as first seen
// (arrowio.ReadOptions.StateIDs), then renumbered once the vocabulary is
// sorted (shard.Counter.Remap): the counts are bitwise those of reading
// the rows with their final indices. Such inputs are read in one pass
// whatever their format. With --ids auto a column whose rows turn to ids
// is read again (arrowio.ScanAutoIDs): standard input then replays what
// the first read took (stdinReplay).
func loadDataIDs(ctx context.Context, f *inputFlags, holdout, validation float64, seed uint64, base vocabs, policy idPolicy) (*dataset, error) {
	var replay *stdinReplay
	if f.input == arrowio.StdinPath && policy == idsFresh && f.ids == idsAuto {
		var err error
		if replay, err = newStdinReplay(os.Stdin); err != nil {
			return nil, err
		}
		defer replay.close()
	}
	var d *dataset
	_, err := f.scanWithIDs(base, policy, func(opts arrowio.ReadOptions) error {
		if replay != nil {
			opts.Stdin = replay.reader()
		}
		var err error
		d, err = countData(ctx, f, opts, holdout, validation, seed, base, policy)
		return err
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// countData is one read of loadDataIDs, with the vocabularies of opts.
func countData(ctx context.Context, f *inputFlags, opts arrowio.ReadOptions, holdout, validation float64, seed uint64, base vocabs, policy idPolicy) (*dataset, error) {
	// GOGC (the caller's, Go's default 100, unless set below): the
	// read's heap is the reader's chunks and batches, a few tens of MB
	// whatever the input's size (the counter's log is outside the Go
	// heap, in slabs, beyond its first small chunks). Every collection
	// marks, besides, the few MB of pointers that the process's packages
	// hold from the start; a small input is read in a few tens of ms, and
	// at GOGC 25 (as all reads were) it took ~20 collections for a 3 MB
	// file, most of its reading time. So the first largeIngestTransitions
	// rows are read at smallReadGCPercent, then the caller's GOGC; large
	// inputs build the matrices at ingestGCPercent.
	ids := vocabs{opts.StateIDs, opts.ActionIDs}
	src, err := f.open(ctx)
	if err != nil {
		return nil, err
	}
	defer src.close()
	if holdout == 0 && validation == 0 && !ids.any() && src.allOf(twoPassFile) {
		d, ok, err := loadTwoPass(ctx, f, src)
		if err != nil || ok {
			return d, err
		}
		// Too many states for a histogram: count in one pass.
	}
	gcPercent := debug.SetGCPercent(smallReadGCPercent)
	defer debug.SetGCPercent(gcPercent)
	read := 0 // rows read while at smallReadGCPercent (the first callback's goroutine)
	rows := 0 // rows read (a row split between the sets is one transition)
	var train, held, val shard.Counter
	// One draw a row from each split's stream (a row of count c > 1 is
	// cut unit by unit from a stream of its draw's own: shard.SplitRowSets).
	hold := rand.NewPCG(seed, 0x686f6c64) // "hold"
	vsrc := rand.NewPCG(seed, 0x76616c)   // "val"
	h := newFingerprint()
	known := knownRows{n: base.states.Len(), u: base.actions.Len(), ids: ids}
	err = scanPipelined(ctx, src, opts, func(b *arrowio.TransitionBatch) error {
		if read < largeIngestTransitions {
			if read += b.Len(); read >= largeIngestTransitions {
				debug.SetGCPercent(gcPercent)
			}
		}
		if policy == idsKnown && ids.any() {
			b = known.filter(b)
		}
		rows += b.Len()
		if holdout == 0 && validation == 0 {
			k, err := train.AddBatch(b.State, b.Action, b.Next, b.Count)
			if err != nil {
				return fmt.Errorf("%s: row %d: %w", f.name(), b.FirstRow+k, err)
			}
			return nil
		}
		for k := range b.State {
			i, a, j, c := int(b.State[k]), int(b.Action[k]), int(b.Next[k]), b.Count[k]
			if !(c > 0 && c <= math.MaxFloat64) {
				// Not a count to split: Add says what is wrong with it.
				if err := train.Add(i, a, j, c); err != nil {
					return fmt.Errorf("%s: row %d: %w", f.name(), b.FirstRow+k, err)
				}
			}
			t, h, v := shard.SplitRowSets(c, holdout, hold, validation, vsrc)
			for _, p := range [...]struct {
				ct *shard.Counter
				c  float64
			}{{&held, h}, {&val, v}, {&train, t}} {
				if p.c == 0 {
					continue
				}
				if err := p.ct.Add(i, a, j, p.c); err != nil {
					return fmt.Errorf("%s: row %d: %w", f.name(), b.FirstRow+k, err)
				}
			}
		}
		return nil
	}, h.add)
	if err != nil {
		return nil, err
	}
	if ids.any() {
		// (The fingerprint hashed the ids' bytes, through the batches'
		// views: the renumbering does not touch it.)
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
			val.Remap(sp, ap)
		}
	}
	n1, u1 := train.Dims()
	n2, u2 := held.Dims()
	n3, u3 := val.Dims()
	d := &dataset{file: f.name(), n: max(n1, n2, n3), u: max(u1, u2, u3), transitions: rows,
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
		switch {
		case validation > 0 && holdout > 0:
			return nil, usagef("--holdout %v and --validation %v left no training transitions out of %d: use smaller fractions", holdout, validation, d.transitions)
		case validation > 0:
			return nil, usagef("--validation %v left no training transitions out of %d: use a smaller fraction", validation, d.transitions)
		}
		return nil, usagef("--holdout %v left no training transitions out of %d", holdout, d.transitions)
	}
	if d.transitions >= largeIngestTransitions {
		// The reader's buffers are garbage now: give back what of them
		// the collector has not (the counter's log is outside the Go
		// heap), so that the matrices' large arrays do not come on top
		// of it. They are a few large pointer-free buffers, cheap to
		// collect: collecting more often while they are built keeps the
		// peak RSS near what is live (the counter's log and the CSR
		// being built) rather than twice that.
		defer debug.SetGCPercent(debug.SetGCPercent(ingestGCPercent))
		debug.FreeOSMemory()
	}
	d.train = train.Matrices(d.u)
	if holdout > 0 {
		if held.Len() == 0 {
			return nil, usagef("--holdout %v drew no held-out transitions out of %d: use a larger fraction", holdout, d.transitions)
		}
		d.holdout = held.Matrices(d.u)
	}
	if validation > 0 && val.Len() > 0 {
		d.val = val.Matrices(d.u)
	}
	return d, nil
}

// checkValidation returns the error of a validation split (fraction
// validation > 0) that drew no transition: a caller that needs one
// refuses the input with it (fit degrades its automatic choices instead).
func (d *dataset) checkValidation(validation float64) error {
	if validation > 0 && d.val == nil {
		return usagef("--validation %v drew no validation transitions out of %d: use a larger fraction", validation, d.transitions)
	}
	return nil
}

// size checks that d has transitions and sets its n and u from the flags,
// or checks the sizes inferred from the data.
func (d *dataset) size(f *inputFlags) error {
	if d.transitions == 0 && d.unseen > 0 {
		return fmt.Errorf("%s: no transitions to score: all %d rows name states or actions the model does not have", f.name(), d.unseen)
	}
	if d.transitions == 0 {
		return fmt.Errorf("%s: no transitions: the input has no data rows", f.name())
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
		return usagef("%s: the largest state index is %d, so n would be %d states (over %d): pass --states N if that is right", f.name(), d.n-1, d.n, maxInferredStates)
	}
	switch {
	case d.ids.actions != nil:
	case f.actions > 0:
		d.u = f.actions
	case d.u > maxInferredActions:
		return usagef("%s: the largest action index is %d, so u would be %d actions (over %d): pass --actions N if that is right", f.name(), d.u-1, d.u, maxInferredActions)
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
	o.FirstRow, o.StateIDs, o.ActionIDs = b.FirstRow, b.StateIDs, b.ActionIDs
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

// Sparse indices: a fit's work and memory grow with n·u·m, the data's
// with the transitions. One stray large index in a small file (a typo, a
// corrupted row) would make a model of millions of mostly empty rows, or
// thousands of empty actions, that takes minutes and gigabytes to fit
// (--max-model-bytes bounds only the memory). So an inferred size must be
// plausible for the data: at most sparseStatesPer states per transition
// (beyond sparseStatesMin states) and sparseActionsPer actions per
// distinct action seen (beyond sparseActionsMin actions); past that the
// user confirms the size with --states or --actions.
const (
	sparseStatesMin  = 1 << 16
	sparseStatesPer  = 16
	sparseActionsMin = 64
	sparseActionsPer = 4
)

// checkSparse applies checkInferredStates and checkInferredActions to
// the sizes of d that no flag set. A fit checks its memory first, so
// that a size beyond the machine is named as such.
func (d *dataset) checkSparse(f *inputFlags) error {
	// (A vocabulary's size is no guess: every id is in the data.)
	if f.states == 0 && d.ids.states == nil {
		if err := checkInferredStates(f.input, d.n, d.transitions); err != nil {
			return err
		}
	}
	if f.actions == 0 && d.ids.actions == nil {
		return checkInferredActions(f.input, d.u, actionsSeen(d.train, d.holdout, d.val))
	}
	return nil
}

// checkInferredStates checks n, inferred from the largest state index of
// file, against the transitions read.
func checkInferredStates(file string, n, transitions int) error {
	if n > sparseStatesMin && n/sparseStatesPer > transitions {
		return usagef("%s: the largest state index is %d, so n would be %d states, but the input has only %d transitions (at most %d states per transition are inferred): pass --states N if that is right", file, n-1, n, transitions, sparseStatesPer)
	}
	return nil
}

// checkInferredActions checks u, inferred from the largest action index
// of file, against the number of actions that have transitions.
func checkInferredActions(file string, u, seen int) error {
	if u > sparseActionsMin && u > sparseActionsPer*seen {
		return usagef("%s: the largest action index is %d, so u would be %d actions, but only %d of them have transitions: pass --actions N if that is right", file, u-1, u, seen)
	}
	return nil
}

// actionsSeen is the number of actions with transitions in any of the
// sets of blocks (one block per action each).
func actionsSeen(sets ...[]*factor.Block) int {
	seen := map[int]bool{}
	for _, set := range sets {
		for _, b := range set {
			if b.NNZ() > 0 {
				seen[b.Action] = true
			}
		}
	}
	return len(seen)
}

// firstPassGCPercent is the GOGC of loadTwoPass's first read.
const firstPassGCPercent = 200

// twoPassFormat reports whether loadData reads files of format twice
// (shard.TwoPass): Arrow IPC and Parquet files, which decode fast, so
// that a second read costs less than keeping every transition while the
// matrices are built. CSV, whose parsing is most of its cost, is read
// once.
func twoPassFormat(format string) bool { return format != arrowio.FormatCSV }

// twoPassFile reports whether loadData may read f twice: a file (not
// standard input, which cannot be read twice, nor a stream) of a
// twoPassFormat, not gzip data (decompressed once: a one-pass read's peak
// memory is about a two-pass read's).
func twoPassFile(f arrowio.DataFile) bool {
	return !f.Stream && f.Name != arrowio.StdinPath && twoPassFormat(f.Format) && !arrowio.IsGzipFile(f.Name)
}

// loadTwoPass is loadData without a holdout, in two reads of the file
// (shard.TwoPass): the first validates, hashes and counts each (action,
// state); the second puts each transition in its place. ok is false, with
// no error, when the states are too spread for the first pass's histogram
// or when the second read differs from the first (shard.ErrInputChanged):
// the caller counts in one pass instead. The dataset is the one loadData
// builds in one pass, bitwise.
func loadTwoPass(ctx context.Context, f *inputFlags, src *dataSource) (d *dataset, ok bool, err error) {
	// The first read keeps almost nothing live, so ingestGCPercent would
	// collect at every MiB or so of the readers' garbage: collect less
	// often until Plan, but not so rarely that the heap of this read
	// (the Parquet reader keeps ≈ 25 MB live: 75 MB at GOGC 200, 125 MB
	// at 400) outgrows the matrices and sets the peak. From Plan on, the
	// result's arrays are live: ingestGCPercent.
	gcPercent := debug.SetGCPercent(firstPassGCPercent)
	defer debug.SetGCPercent(gcPercent)
	var tp shard.TwoPass
	h := &splitHash{f: newFingerprint()}
	var histDone atomic.Int64 // batches
	err = scanPipelined(ctx, src, f.readOptions(), func(b *arrowio.TransitionBatch) error {
		k, err := tp.Hist(b.State, b.Action, b.Next, b.Count)
		if err != nil {
			return fmt.Errorf("%s: row %d: %w", f.name(), b.FirstRow+k, err)
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
	d = &dataset{file: f.name(), n: n, u: u, transitions: tp.Len()}
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
	debug.SetGCPercent(ingestGCPercent)
	// Every count 1 (the common case): the second read skips the count
	// column, which the first has checked.
	opts := f.readOptions()
	opts.NoCount = !tp.Weighted()
	err = scanPipelined(ctx, src, opts, func(b *arrowio.TransitionBatch) error {
		return tp.Fill(b.State, b.Action, b.Next, b.Count)
	}, h.second)
	if err == nil {
		d.fingerprint = h.f.sum()
		// The readers' garbage is scattered small spans, which the
		// matrices' large arrays mostly cannot reuse and the runtime
		// would keep resident: give it back before they are allocated
		// (unless they are small: largeIngestTransitions).
		if d.transitions >= largeIngestTransitions {
			debug.FreeOSMemory()
		}
		// As for Plan: Matrices allocates the values of the result and
		// little else.
		debug.SetGCPercent(-1)
		d.train, err = tp.Matrices(d.u)
		debug.SetGCPercent(ingestGCPercent)
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
	seen    int // rows of the second read seen so far
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
// first did not hash. (Rows are counted here, not by b.FirstRow, which
// starts again at 1 with each file of a dataset.)
func (s *splitHash) second(b *arrowio.TransitionBatch) error {
	at := s.seen
	s.seen += b.Len()
	if from := s.rows - at; from < b.Len() {
		s.f.addRows(b, max(from, 0))
		s.rows = at + b.Len()
	}
	return nil
}

// all returns the training and held-out counts together, as one matrix per
// action, by adding the held-out nonzeros to the training ones.
func (d *dataset) all() []*factor.Block {
	if d.holdout == nil {
		return d.train
	}
	return mergeBlocks(d.u, d.train, d.holdout)
}

// mergeBlocks adds the nonzeros of the sets into one matrix per action
// (shard.Union).
func mergeBlocks(u int, sets ...[]*factor.Block) []*factor.Block {
	return shard.Union(u, sets...)
}
