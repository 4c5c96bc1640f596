package factor

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// IncrementalOptions configures an Incremental fit (incremental-emsf
// Algorithm 1).
type IncrementalOptions struct {
	// EtaMax is η_max: the number of distinct buffered nonzeros (over all
	// actions) at which their statistics are accumulated with the current
	// model and the buffer is freed. 0 means unlimited (the buffer is only
	// flushed at a commit). It changes memory and time, never the result
	// beyond rounding (DESIGN.md invariant 5).
	EtaMax int
	// CommitEvery is t_c: the accumulated statistics are committed to the
	// model as soon as the total count added since the last commit reaches
	// it (with counts > 1 a commit can come a little after t_c). 0 means
	// only at Commit or EndPass.
	CommitEvery float64
	// Alpha is the learning rate of each commit, in (0, 1]; 0 means 1.
	Alpha float64
}

// IncrementalStats describes an Incremental fit so far.
type IncrementalStats struct {
	// PeakBuffered is the largest number of distinct nonzeros held in the
	// buffer at once; it never exceeds EtaMax when EtaMax > 0.
	PeakBuffered int
	// Flushes counts buffer flushes (statistics accumulated), Commits the
	// commits that changed the model.
	Flushes, Commits int
	// Transitions counts Add calls; Count is Σ c over them.
	Transitions int
	Count       float64
}

// incKey identifies one buffered nonzero.
type incKey struct{ a, i, j int32 }

// incEntry is one buffered nonzero: its key and its summed count.
type incEntry struct {
	incKey
	c float64
}

// Incremental is incremental EMSF (incremental-emsf Algorithm 1) as a
// stream: Add counts transitions into a buffer of at most EtaMax distinct
// nonzeros; when the buffer is full its statistics are computed with the
// *current* model, merged into an Accumulator, and the buffer is emptied;
// every CommitEvery transitions (and at Commit / EndPass) the accumulated
// statistics are committed with learning rate Alpha. Memory is
// O(u·(η_max + n·m)) whatever the length of the stream.
//
// With CommitEvery = all the data (or 0) and Alpha = 1, one pass followed by
// EndPass is one batch EM iteration (Fit with MaxIter 1) for every EtaMax, up
// to rounding: flushing in chunks changes the order of the sums.
//
// After a commit the model's LogLik is the log-likelihood, under the model
// before the commit, of the counts accumulated since the previous commit
// (exact, because the model does not change between commits). Its WKL is
// NaN: the data term Σ c·log(c/x_i) needs complete row totals, which a
// stream that frees its buffer does not keep.
//
// An Incremental is not safe for concurrent use.
type Incremental struct {
	md    *Model
	opts  IncrementalOptions
	alpha float64
	acc   *Accumulator

	index   map[incKey]int // key → position in buf
	buf     []incEntry
	scratch Scratch
	partial Partial
	rows    []int32
	ptr     []int64
	cols    []int32
	vals    []float64

	sinceCommit float64 // Σ c added since the last commit
	stats       IncrementalStats
}

// NewIncremental returns an incremental fit that updates md in place.
func NewIncremental(md *Model, opts IncrementalOptions) (*Incremental, error) {
	if md == nil {
		return nil, fmt.Errorf("factor: incremental: nil model")
	}
	if err := md.Validate(); err != nil {
		return nil, fmt.Errorf("factor: incremental: %w", err)
	}
	if md.Precision != Float64 {
		return nil, fmt.Errorf("factor: incremental: precision %s: the incremental fit runs float64 models only", md.Precision)
	}
	alpha := opts.Alpha
	if alpha == 0 {
		alpha = 1
	}
	if !(alpha > 0 && alpha <= 1) {
		return nil, fmt.Errorf("factor: incremental: learning rate %v must be in (0, 1]", opts.Alpha)
	}
	if opts.EtaMax < 0 {
		return nil, fmt.Errorf("factor: incremental: η_max %d must be >= 0 (0: unlimited)", opts.EtaMax)
	}
	if !(opts.CommitEvery >= 0) || math.IsInf(opts.CommitEvery, 0) {
		return nil, fmt.Errorf("factor: incremental: commit interval %v must be finite and >= 0 (0: only at the end of a pass)", opts.CommitEvery)
	}
	return &Incremental{md: md, opts: opts, alpha: alpha, acc: NewAccumulator(md), index: make(map[incKey]int)}, nil
}

// Model returns the model being fitted (updated in place at each commit).
func (inc *Incremental) Model() *Model { return inc.md }

// Stats returns the statistics of the fit so far.
func (inc *Incremental) Stats() IncrementalStats { return inc.stats }

// Buffered returns the number of distinct nonzeros now in the buffer.
func (inc *Incremental) Buffered() int { return len(inc.buf) }

// Add counts c transitions i --a--> j. Duplicates in the buffer are summed
// in arrival order. It flushes the buffer when it holds EtaMax distinct
// nonzeros and commits when CommitEvery is reached. Indices must be in
// range for the model and c finite and > 0.
func (inc *Incremental) Add(i, a, j int, c float64) error {
	md := inc.md
	if i < 0 || j < 0 || i >= md.N || j >= md.N || a < 0 || a >= md.U {
		return fmt.Errorf("factor: incremental: transition %d --%d--> %d out of range for n=%d states, u=%d actions", i, a, j, md.N, md.U)
	}
	if !(c > 0) || math.IsInf(c, 0) {
		return fmt.Errorf("factor: incremental: transition %d --%d--> %d: count %v must be finite and > 0", i, a, j, c)
	}
	k := incKey{int32(a), int32(i), int32(j)}
	if p, ok := inc.index[k]; ok {
		inc.buf[p].c += c
	} else {
		inc.index[k] = len(inc.buf)
		inc.buf = append(inc.buf, incEntry{k, c})
		inc.stats.PeakBuffered = max(inc.stats.PeakBuffered, len(inc.buf))
	}
	inc.stats.Transitions++
	inc.stats.Count += c
	inc.sinceCommit += c
	commit := inc.opts.CommitEvery > 0 && inc.sinceCommit >= inc.opts.CommitEvery
	if commit {
		return inc.Commit()
	}
	if inc.opts.EtaMax > 0 && len(inc.buf) >= inc.opts.EtaMax {
		return inc.Flush()
	}
	return nil
}

// Flush accumulates the statistics of the buffered counts under the current
// model and empties the buffer. The model does not change.
func (inc *Incremental) Flush() error {
	if len(inc.buf) == 0 {
		return nil
	}
	md := inc.md
	buf := inc.buf
	slices.SortFunc(buf, func(x, y incEntry) int {
		return cmp.Or(cmp.Compare(x.a, y.a), cmp.Compare(x.i, y.i), cmp.Compare(x.j, y.j))
	})
	for lo := 0; lo < len(buf); {
		a := buf[lo].a
		hi := lo
		inc.rows, inc.ptr, inc.cols, inc.vals = inc.rows[:0], inc.ptr[:0], inc.cols[:0], inc.vals[:0]
		for ; hi < len(buf) && buf[hi].a == a; hi++ {
			e := buf[hi]
			if len(inc.rows) == 0 || inc.rows[len(inc.rows)-1] != e.i {
				inc.rows = append(inc.rows, e.i)
				inc.ptr = append(inc.ptr, int64(len(inc.cols)))
			}
			inc.cols = append(inc.cols, e.j)
			inc.vals = append(inc.vals, e.c)
		}
		inc.ptr = append(inc.ptr, int64(len(inc.cols)))
		// A fresh Block each time: its cached visiting plan belongs to
		// these nonzeros only.
		b := &Block{Action: int(a), Rows: inc.rows, Ptr: inc.ptr, Cols: inc.cols, Vals: inc.vals}
		if err := Compute(md, b, &inc.scratch, &inc.partial, true); err != nil {
			return fmt.Errorf("factor: incremental: %w", err)
		}
		if err := inc.acc.Merge(&inc.partial); err != nil {
			return fmt.Errorf("factor: incremental: %w", err)
		}
		lo = hi
	}
	inc.buf = inc.buf[:0]
	clear(inc.index)
	inc.stats.Flushes++
	return nil
}

// Commit flushes the buffer and commits the statistics accumulated since
// the last commit to the model with learning rate Alpha (incremental-emsf
// eq. 13); rows of D and columns of K without data keep their values. It
// does nothing when no count arrived since the last commit.
func (inc *Incremental) Commit() error {
	if err := inc.Flush(); err != nil {
		return err
	}
	if inc.acc.SumX == 0 && inc.sinceCommit == 0 {
		return nil
	}
	// Invariant 3: every count added since the last commit was seen once.
	if err := CheckSumX(inc.acc.SumX, inc.sinceCommit); err != nil {
		return fmt.Errorf("factor: incremental: %w", err)
	}
	inc.acc.Commit(inc.md, inc.alpha, math.NaN())
	inc.acc.Reset()
	inc.sinceCommit = 0
	inc.stats.Commits++
	return nil
}

// EndPass ends a pass over the data: it flushes the buffer and commits what
// is left, so the next pass starts with an empty buffer and accumulator.
func (inc *Incremental) EndPass() error { return inc.Commit() }
