package ingest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/ingestwire"
)

// scans is a lease table of splits read one at a time per worker (pass
// 1, and the vocabulary phase's steps 0 and 1): splits waiting, those each
// worker is reading, and the first reply of each.
type scans[T any] struct {
	queue  []arrowio.Split // not leased, in ordinal order
	leased map[string][]arrowio.Split
	done   map[int]T // by ordinal
	by     map[int]string
	// holder, when set, is the only worker that may read a split.
	holder func(ordinal int) string
}

func newScans[T any](splits []arrowio.Split, holder func(int) string) *scans[T] {
	return &scans[T]{queue: slices.Clone(splits), leased: map[string][]arrowio.Split{}, done: map[int]T{}, by: map[int]string{}, holder: holder}
}

// next leases the first waiting split that worker may read.
func (s *scans[T]) next(worker string) (arrowio.Split, bool) {
	for k, sp := range s.queue {
		if s.holder == nil || s.holder(sp.Ordinal) == worker {
			s.queue = slices.Delete(s.queue, k, k+1)
			s.leased[worker] = append(s.leased[worker], sp)
			return sp, true
		}
	}
	return arrowio.Split{}, false
}

// finish records worker's reply for split k.
func (s *scans[T]) finish(worker string, k int, rep T) {
	s.leased[worker] = slices.DeleteFunc(s.leased[worker], func(sp arrowio.Split) bool { return sp.Ordinal == k })
	if _, ok := s.done[k]; !ok {
		s.done[k], s.by[k] = rep, worker
	}
}

// lost gives the splits worker was reading back to the queue (in order).
func (s *scans[T]) lost(worker string) {
	s.queue = append(s.queue, s.leased[worker]...)
	slices.SortFunc(s.queue, func(a, b arrowio.Split) int { return cmp.Compare(a.Ordinal, b.Ordinal) })
	delete(s.leased, worker)
}

// pass1 is what the coordinator knows after pass 1: the dataset's size,
// fingerprint and histogram, and each split's place in it.
type pass1 struct {
	n, u        int
	transitions int64
	fingerprint string
	combine     bool
	hist        shard.Hist
	// ids are the groups named by user ids.
	ids ingestwire.IDGroups
	// first[k] is the dataset index of split k's first transition;
	// rows and crc what pass 1 read of it.
	first []int64
	rows  []int64
	crc   []shard.RowsCRC
}

// resolution is the outcome of a read of every split (pass 1, or the
// vocabulary phase's step 1): the job's data error, or a file to read
// whole (its splits then scanned again), or a group of index columns that
// holds user ids (ids: a name of ingestwire.GroupNames), or the dataset.
type resolution struct {
	err   error
	whole int // file to read whole; -1: none
	// ids names the group, idsErr is the row or file error that says so
	// (its row counted from the file's first).
	ids    string
	idsErr *arrowio.InputError
	p1     *pass1
}

// firstIssue returns the resolution of the first split, in dataset order,
// whose read stopped, or whose file has no row; ok is false when there is
// none. A split that cannot be read on its own, or a file of splits
// without any row (a read of the whole file gives its error), makes its
// file be read whole; a bad row of a split is the data error, its row
// counted from the file's first row (the rows of the file's earlier
// splits added); a data error of a whole file is the data error as it
// is; either, when it is a column of integers holding ids, names that
// group instead. Each is what a local read of the dataset meets first,
// since a local read stops at it. get returns a split's issue and rows.
func firstIssue(files []arrowio.DataFile, splits []arrowio.Split, get func(ordinal int) (*ingestwire.ScanIssue, int64)) (resolution, bool) {
	fileRows := int64(0)
	for k, sp := range splits {
		if k == 0 || splits[k-1].File != sp.File {
			fileRows = 0
		}
		is, rows := get(sp.Ordinal)
		switch {
		case is.ReadWhole != "" && !sp.Whole:
			return resolution{whole: sp.File}, true
		case is.ReadWhole != "":
			return resolution{err: fmt.Errorf("ingest: %s: a whole split cannot be cut further: %s", files[sp.File].Name, is.ReadWhole), whole: -1}, true
		case is.RowError != nil || is.Error != nil && sp.Whole:
			e := is.Error
			if is.RowError != nil {
				r := *is.RowError
				r.Row += int(fileRows)
				e = &r
			}
			if is.StringIDs != "" {
				return resolution{ids: is.StringIDs, idsErr: e, whole: -1}, true
			}
			return resolution{err: e, whole: -1}, true
		case is.Error != nil:
			return resolution{whole: sp.File}, true
		}
		fileRows += rows
		if last := k+1 == len(splits) || splits[k+1].File != sp.File; last && fileRows == 0 {
			if !sp.Whole {
				return resolution{whole: sp.File}, true
			}
			// A whole split without rows and without an error: only
			// if the reader read it so; the local read would say so.
			return resolution{err: &arrowio.InputError{File: files[sp.File].Name, Reason: "no data rows"}, whole: -1}, true
		}
	}
	return resolution{whole: -1}, false
}

// resolve decides the outcome of pass 1 from the splits' replies: the
// first issue (firstIssue), or the dataset.
func resolve(files []arrowio.DataFile, splits []arrowio.Split, replies map[int]*ingestwire.ScanReply, o *Options, v *vocab) resolution {
	if res, ok := firstIssue(files, splits, func(k int) (*ingestwire.ScanIssue, int64) {
		return &replies[k].ScanIssue, replies[k].Summary.Rows
	}); ok {
		return res
	}
	p := &pass1{first: make([]int64, len(splits)), rows: make([]int64, len(splits)), crc: make([]shard.RowsCRC, len(splits))}
	var all shard.Summary
	for k, sp := range splits {
		rep := replies[sp.Ordinal]
		p.first[k] = all.Rows
		p.rows[k] = rep.Summary.Rows
		p.crc[k] = rep.Summary.CRC
		all.Merge(&rep.Summary)
	}
	p.transitions = all.Rows
	p.fingerprint = all.CRC.Fingerprint()
	p.combine = all.Combinable()
	p.hist = all.Hist
	p.n, p.u = all.States, all.Actions
	if v != nil {
		// Every id of a vocabulary is in a row, so the largest index
		// is its size less one.
		for g, want := range v.groups {
			if got := [2]int{p.n, p.u}[g]; want && got != v.size(g) {
				return resolution{err: fmt.Errorf("ingest: %s: a vocabulary of %d %s, indices up to %d (the dataset changed while it was read?)", o.Input, v.size(g), ingestwire.GroupNames[g], got-1), whole: -1}
			}
		}
		p.ids = v.groups
	}
	if err := o.size(p); err != nil {
		return resolution{err: err, whole: -1}
	}
	return resolution{p1: p, whole: -1}
}

// SizeError is a number of states or actions inferred from the data
// above its limit: the user must confirm it (Options.States, Actions).
type SizeError struct {
	Input string
	What  string // "state" or "action"
	Max   int    // the largest index seen
	Limit int
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("%s: the largest %s index is %d, so there would be %d %ss (over %d): give the number if that is right",
		e.Input, e.What, e.Max, e.Max+1, e.What, e.Limit)
}

// size sets n and u from the options or checks the inferred ones, as a
// local fit does.
func (o *Options) size(p *pass1) error {
	if p.transitions == 0 {
		return fmt.Errorf("ingest: %s: no transitions: the input has no data rows", o.Input)
	}
	// A vocabulary's size is no guess (every id is in the data): no
	// bound.
	switch {
	case p.ids[ingestwire.GroupStates]:
	case o.Read.States > 0:
		p.n = o.Read.States
	case o.MaxStates > 0 && p.n > o.MaxStates:
		return &SizeError{Input: o.Input, What: "state", Max: p.n - 1, Limit: o.MaxStates}
	}
	switch {
	case p.ids[ingestwire.GroupActions]:
	case o.Read.Actions > 0:
		p.u = o.Read.Actions
	case o.MaxActions > 0 && p.u > o.MaxActions:
		return &SizeError{Input: o.Input, What: "action", Max: p.u - 1, Limit: o.MaxActions}
	}
	return nil
}

// splitBytes is the default split size: 4 splits per worker (so that a
// slow split holds no one back for long), at least 1 MiB (fewer splits
// read at lower cost) and at most arrowio.DefaultSplitBytes.
func splitBytes(files []arrowio.DataFile, workers int) int64 {
	total := int64(0)
	for _, f := range files {
		total += f.Size
	}
	return min(arrowio.DefaultSplitBytes, max(1<<20, total/int64(4*max(1, workers))))
}

// planBuckets cuts each action's rows into buckets of about
// transitions/(perWorker·workers) transitions each, at the histogram's
// bin edges (an action without transitions gets none), and gives the
// buckets in (action, row) order to the workers as contiguous runs of
// about transitions/workers each. The buckets change only where the work
// goes, never a bit of the result.
func planBuckets(h *shard.Hist, n, u, workers, perWorker int) []shard.Bucket {
	total := int64(0)
	for a := range u {
		total += h.Total(a)
	}
	target := max(1, total/int64(max(1, workers*perWorker)))
	var out []shard.Bucket
	var load []int64
	for a := range min(u, len(h.Bins)) {
		t := h.Total(a)
		if t == 0 {
			continue
		}
		lo, acc := 0, int64(0)
		for b, v := range h.Bins[a] {
			acc += v
			edge := (b + 1) << h.Shift
			if acc >= target && edge < n && t-acc > 0 {
				out = append(out, shard.Bucket{Action: a, RowLo: lo, RowHi: edge})
				load = append(load, acc)
				lo, t, acc = edge, t-acc, 0
			}
		}
		out = append(out, shard.Bucket{Action: a, RowLo: lo, RowHi: n})
		load = append(load, acc)
	}
	// Contiguous runs: bucket k goes to the worker whose share of the
	// transitions its middle falls in.
	at := int64(0)
	for k := range out {
		mid := at + load[k]/2
		out[k].Reducer = min(workers-1, int(mid*int64(workers)/max(1, total)))
		at += load[k]
	}
	return out
}

// assignSplits gives each split to a mapper: in dataset order, to the
// mapper with the fewest bytes so far (the first of them on a tie), so
// that every mapper works on the early splits first.
func assignSplits(splits []arrowio.Split, workers int) []int {
	bytes := make([]int64, workers)
	out := make([]int, len(splits))
	for k, sp := range splits {
		w := 0
		for q := range bytes {
			if bytes[q] < bytes[w] {
				w = q
			}
		}
		out[k] = w
		bytes[w] += max(sp.Length, 1)
	}
	return out
}

// shardPlan is a row shard to build, from the cut chains.
type shardPlan struct {
	ingestwire.BuildShard
	builder string
}

// chainShards turns the cuts of one (set, action) chain — the first row
// of each shard, in row order, and the bucket it lies in — into the row
// shards to build: shard k's rows are [cut_k, cut_{k+1}), its manifest
// rows [cut_k, cut_{k+1}) but from 0 for the first and to n for the last
// (as shard.Split), built by its first row's reducer, pulling the rows of
// the later buckets it runs into.
func chainShards(set, action int, cuts []int32, cutBucket []int, buckets []int, all []shard.Bucket, workers []string, n int) []shardPlan {
	out := make([]shardPlan, len(cuts))
	for k, c := range cuts {
		end := int32(-1)
		rowLo, rowHi := int(c), n
		if k == 0 {
			rowLo = 0
		}
		if k+1 < len(cuts) {
			end = cuts[k+1]
			rowHi = int(end)
		}
		b := cutBucket[k]
		sp := shardPlan{BuildShard: ingestwire.BuildShard{Set: set, Action: action, Bucket: b, First: c, End: end, RowLo: rowLo, RowHi: rowHi},
			builder: workers[all[b].Reducer]}
		for _, t := range buckets {
			if t > b && (end < 0 || all[t].RowLo < int(end)) {
				sp.Tails = append(sp.Tails, ingestwire.Tail{Bucket: t, Worker: workers[all[t].Reducer]})
			}
		}
		out[k] = sp
	}
	return out
}

// manifest numbers the lines of a set's shards, given in (action, row,
// column cell) order, and returns the set's manifest: the lines' Infos,
// their nonzeros and their Σcount folded left to right in shard order
// (as shard.Split).
func manifest(lines []shard.Line, n, u int) *shard.Manifest {
	m := &shard.Manifest{N: n, U: u}
	for k := range lines {
		lines[k].ID = k
		m.Shards = append(m.Shards, lines[k].Info)
		m.NNZ += lines[k].NNZ
		m.Total += lines[k].Sum
	}
	return m
}

// checkLines checks a set's lines against what the reducers counted:
// their nonzeros cover the set's rows in order, and no shard is empty.
func checkLines(lines []shard.Line) error {
	for k, l := range lines {
		if l.NNZ <= 0 {
			return fmt.Errorf("ingest: shard %d is empty", k)
		}
		if k > 0 {
			p := lines[k-1]
			if cmp.Compare(p.Action, l.Action) > 0 || (p.Action == l.Action && p.RowLo > l.RowLo) {
				return errors.New("ingest: shard lines out of order")
			}
		}
	}
	return nil
}
