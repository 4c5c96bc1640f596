package shard

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/emsf/emsf/factor"
)

// TableEntry is one distinct transition of a Table: its total count and
// the part of it added since the last ClearPending (or committed Thaw).
type TableEntry struct {
	Action, State, Next int32
	Count, Pending      float64
}

// Table is a running count table for a stream of transitions (the service
// mode's state): one entry per distinct transition, so memory is
// O(distinct transitions) whatever the stream's length. Next to the total
// it keeps the counts added since the last ClearPending (the data a model
// version has not seen yet). The zero value is empty and ready to use.
//
// # Layout
//
// The counts are one CSR matrix per action, the fit's own layout (rows:
// the states with data, ascending; per row its next states ascending),
// with two values per nonzero, the total and the pending count: 20 bytes a
// distinct transition and 12 a row, against the fit's 12 and 12 (its
// CSR). The arrays live outside the Go heap once large (column), so what
// the table holds is what the process holds.
//
// Add does not search the matrices: it appends the transition to a
// buffer (the arrival log of a Counter: 8 bytes a row, 16 with a count
// other than 1). When the buffer holds BufferRows rows (the larger of
// MinBufferRows and a sixteenth of the distinct transitions), it is merged:
// sorted by (state, next state) with a stable radix sort, then walked with
// each action's matrix, adding every buffered count to its entry where the
// entry exists (each count separately, in arrival order) and collecting the
// others, which are then inserted in one backward pass over the grown
// arrays. A merge moves the matrix once (in place: the arrays grow by
// remapping, not copying) and happens every NNZ/16 rows at most: about 16
// entries, 320 bytes, moved per row ingested. At the peak of a merge the
// table takes its 20 bytes a distinct transition plus at most 56 per
// buffered row (the buffer, the sorted keys and counts, the sort's
// scratch, the new entries' sums), 3.5 bytes a distinct transition once
// NNZ/16 rows are buffered (2 with unit counts), and the buffer's floor:
// within twice the fit's CSR plus a fixed amount.
//
// Every total is therefore the sum of its counts in arrival order, summed
// from zero, and every pending count the sum of those since the pending
// counts were last cleared: bitwise what one float64 per transition updated
// at each arrival gives, whatever the buffer's size or when merges happen.
//
// # Freezing
//
// Freeze merges the buffer and returns a Frozen view whose blocks alias
// the matrices: a fit reads the counts without a copy. Until Thaw, Add
// only appends to the buffer (nothing the view reads moves or changes),
// and Full says when the buffer has reached its size: the caller then
// stops adding until Thaw. Thaw(true) makes the counts added since Freeze
// the pending ones (as if ClearPending had been called at Freeze), and
// Thaw(false) keeps every count pending; both merge the buffer.
//
// NNZ counts the distinct transitions merged so far: buffered rows of a
// new transition count once merged (Merge, Freeze, Thaw, or the buffer
// filling up).
type Table struct {
	acts   []*tableAction         // by action, for actions < denseActions
	sparse map[int32]*tableAction // larger actions

	log     Counter // rows added and not merged yet, in arrival order
	logRows int
	nnz     int

	n, u        int
	sum, pend   float64
	added, padd int64

	frozen    bool
	freshSum  float64 // since Freeze
	freshRows int64

	// MinBufferRows, when > 0, replaces DefaultMinBufferRows.
	MinBufferRows int
}

// tableAction is one action's counts: CSR rows, pointers, columns, and
// the total and pending count of every nonzero.
type tableAction struct {
	rows        column[int32]
	ptr         column[int64] // len(rows)+1 once a row exists
	cols        column[int32]
	count, pend column[float64]
}

// DefaultMinBufferRows is the fewest rows the buffer holds before it is
// merged: 2^21, 16 MiB of unit counts.
const DefaultMinBufferRows = 1 << 21

// MaxCount bounds a Table's total count (and so every entry's): 2^53,
// beyond which adding 1 to a float64 no longer changes it, so counting
// would silently stop. Every quantity derived from counts below it (sums,
// expected counts, log-likelihoods) stays finite.
const MaxCount = 1 << 53

// ErrCountLimit is the error of an Add that would take the total count
// above MaxCount (the row is not counted).
var ErrCountLimit = errors.New("the total count would exceed the limit 2^53")

// Add records count c of the transition i --a--> j. A count that would
// take the total above MaxCount is refused with ErrCountLimit (wrapped),
// and the table is left as it was. It merges the buffer when it is full
// and the table is not frozen.
func (t *Table) Add(i, a, j int, c float64) error {
	if i < 0 || a < 0 || j < 0 || i >= math.MaxInt32 || a >= math.MaxInt32 || j >= math.MaxInt32 {
		return fmt.Errorf("shard: transition %d --%d--> %d: indices must be in [0, %d)", i, a, j, math.MaxInt32)
	}
	if !(c > 0) || math.IsInf(c, 0) {
		return fmt.Errorf("shard: transition %d --%d--> %d: count %v must be finite and > 0", i, a, j, c)
	}
	if c > MaxCount-t.sum {
		return fmt.Errorf("shard: transition %d --%d--> %d: count %v: %w (%v, the total so far %v)", i, a, j, c, ErrCountLimit, float64(MaxCount), t.sum)
	}
	t.log.log(int32(a)).add(int32(i), int32(j), c)
	t.logRows++
	if t.frozen {
		t.freshSum += c
		t.freshRows++
	}
	t.sum += c
	t.pend += c
	t.added++
	t.padd++
	t.n = max(t.n, i+1, j+1)
	t.u = max(t.u, a+1)
	if !t.frozen && t.logRows >= t.BufferRows() {
		t.Merge()
	}
	return nil
}

// BufferRows is the number of buffered rows at which the buffer is merged
// (or, frozen, Full): the larger of MinBufferRows and NNZ/16.
func (t *Table) BufferRows() int {
	lo := t.MinBufferRows
	if lo <= 0 {
		lo = DefaultMinBufferRows
	}
	return max(lo, t.nnz/16)
}

// Buffered returns the number of rows added and not merged yet.
func (t *Table) Buffered() int { return t.logRows }

// Full reports whether the table is frozen with a full buffer: rows added
// now would grow the buffer past its size (Add still takes them).
func (t *Table) Full() bool { return t.frozen && t.logRows >= t.BufferRows() }

// Dims returns the smallest n and u that hold every transition.
func (t *Table) Dims() (n, u int) { return t.n, t.u }

// NNZ returns the number of distinct transitions merged (see Table).
func (t *Table) NNZ() int { return t.nnz }

// Sum returns the total count.
func (t *Table) Sum() float64 { return t.sum }

// PendingSum returns the count added since the last ClearPending.
func (t *Table) PendingSum() float64 { return t.pend }

// Added returns the number of Add calls (rows ingested), and Pending the
// number since the last ClearPending.
func (t *Table) Added() (all, pending int64) { return t.added, t.padd }

// Bytes returns the memory the table holds: its matrices and its buffer.
func (t *Table) Bytes() int64 {
	var b int64
	t.eachUnordered(func(ta *tableAction) {
		b += ta.rows.bytes() + ta.ptr.bytes() + ta.cols.bytes() + ta.count.bytes() + ta.pend.bytes()
	})
	return b + t.log.bytes()
}

// CSRBytes returns the size of the fit's CSR matrices of the merged
// counts (4-byte columns and 8-byte values per nonzero, a 4-byte row and
// an 8-byte pointer per row): the yardstick of Bytes.
func (t *Table) CSRBytes() int64 {
	var b int64
	t.eachUnordered(func(ta *tableAction) {
		b += 12*int64(len(ta.cols.s)) + 12*int64(len(ta.rows.s)) + 8
	})
	return b
}

// Free gives the table's memory back at once (rather than when it is
// collected); the table is empty afterwards. Nothing read from it (a
// Frozen view's blocks) may be used after.
func (t *Table) Free() {
	t.eachUnordered(func(ta *tableAction) { ta.free() })
	t.log.release()
	*t = Table{MinBufferRows: t.MinBufferRows}
}

func (ta *tableAction) free() {
	ta.rows.free()
	ta.ptr.free()
	ta.cols.free()
	ta.count.free()
	ta.pend.free()
}

// each calls fn for every action with counts, in ascending order.
func (t *Table) each(fn func(a int32, ta *tableAction)) {
	for a, ta := range t.acts {
		if ta != nil {
			fn(int32(a), ta)
		}
	}
	for _, a := range slices.Sorted(maps.Keys(t.sparse)) {
		fn(a, t.sparse[a])
	}
}

// eachUnordered calls fn for every action with counts, in no order.
func (t *Table) eachUnordered(fn func(ta *tableAction)) {
	for _, ta := range t.acts {
		if ta != nil {
			fn(ta)
		}
	}
	for _, ta := range t.sparse {
		fn(ta)
	}
}

// action returns action a's counts (nil when it has none).
func (t *Table) action(a int32) *tableAction {
	if int(a) < len(t.acts) {
		return t.acts[a]
	}
	return t.sparse[a]
}

// makeAction returns action a's counts, creating them.
func (t *Table) makeAction(a int32) *tableAction {
	if ta := t.action(a); ta != nil {
		return ta
	}
	ta := &tableAction{}
	if a < denseActions {
		if int(a) >= len(t.acts) {
			t.acts = append(t.acts, make([]*tableAction, int(a)+1-len(t.acts))...)
		}
		t.acts[a] = ta
		return ta
	}
	if t.sparse == nil {
		t.sparse = map[int32]*tableAction{}
	}
	t.sparse[a] = ta
	return ta
}

// logActions returns the actions with buffered rows, ascending.
func (t *Table) logActions() []int32 {
	var out []int32
	for a, l := range t.log.acts {
		if l != nil && l.n > 0 {
			out = append(out, int32(a))
		}
	}
	for a, l := range t.log.sparse {
		if l.n > 0 {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// Merge merges the buffer into the matrices (nothing while frozen).
func (t *Table) Merge() {
	if t.frozen || t.logRows == 0 {
		return
	}
	for _, a := range t.logActions() {
		keys, vals := t.log.log(a).sorted(true)
		t.nnz += t.makeAction(a).merge(keys, vals)
	}
	t.log.release()
	t.logRows = 0
}

// rowOf and colOf take a buffered key apart: state<<32 | next state.
func rowOf(k uint64) int32 { return int32(k >> 32) }
func colOf(k uint64) int32 { return int32(uint32(k)) }

// merge adds the buffered rows of keys (sorted, with their counts vals;
// nil: all 1) to the action's matrix and returns how many distinct
// transitions it gained. It writes the new entries over keys.
func (ta *tableAction) merge(keys []uint64, vals []float64) int {
	val := func(k int) float64 {
		if vals == nil {
			return 1
		}
		return vals[k]
	}
	// Pass 1: counts of existing entries are updated in place, one
	// buffered row at a time in arrival order; the others are summed per
	// transition (from zero, in arrival order) into keys[:fresh] and nv.
	rows, ptr, cols, count, pend := ta.rows.s, ta.ptr.s, ta.cols.s, ta.count.s, ta.pend.s
	var nv []float64
	fresh, newRows, r := 0, 0, 0
	for k := 0; k < len(keys); {
		i := rowOf(keys[k])
		d, found := slices.BinarySearch(rows[r:], i)
		r += d
		if !found {
			newRows++
		}
		var lo, hi int64
		if found {
			lo, hi = ptr[r], ptr[r+1]
		}
		for k < len(keys) && rowOf(keys[k]) == i {
			key, j := keys[k], colOf(keys[k])
			var p int
			if found {
				d, ok := slices.BinarySearch(cols[lo:hi], j)
				p, lo = int(lo)+d, lo+int64(d)
				if ok {
					for ; k < len(keys) && keys[k] == key; k++ {
						count[p] += val(k)
						pend[p] += val(k)
					}
					continue
				}
			}
			s := val(k)
			for k++; k < len(keys) && keys[k] == key; k++ {
				s += val(k)
			}
			if nv == nil {
				nv = make([]float64, 0, len(keys)-k+1)
			}
			keys[fresh] = key
			nv = append(nv, s)
			fresh++
		}
	}
	if fresh == 0 {
		return 0
	}
	// Pass 2: grow the arrays and merge the new entries in from the end,
	// each element moving once (writes stay at or after the reads).
	nr, ne := len(rows), len(cols)
	ta.rows.resize(nr + newRows)
	ta.ptr.resize(nr + newRows + 1)
	ta.cols.resize(ne + fresh)
	ta.count.resize(ne + fresh)
	ta.pend.resize(ne + fresh)
	rows, ptr, cols, count, pend = ta.rows.s, ta.ptr.s, ta.cols.s, ta.count.s, ta.pend.s
	w := int64(ne + fresh) // entries below w are not written yet
	hiOld := int64(ne)     // the end of old row r
	r, q := nr-1, fresh-1
	ptr[nr+newRows] = w
	for wr := nr + newRows - 1; wr >= 0; wr-- {
		var i int32
		old := r >= 0 && (q < 0 || rows[r] >= rowOf(keys[q]))
		if old {
			i = rows[r]
		} else {
			i = rowOf(keys[q])
		}
		lo := hiOld
		if old {
			lo = ptr[r] // read before ptr[wr] (wr >= r) is written
		}
		p := hiOld - 1
		for p >= lo || (q >= 0 && rowOf(keys[q]) == i) {
			w--
			if q >= 0 && rowOf(keys[q]) == i && (p < lo || colOf(keys[q]) > cols[p]) {
				cols[w], count[w], pend[w] = colOf(keys[q]), nv[q], nv[q]
				q--
			} else {
				cols[w], count[w], pend[w] = cols[p], count[p], pend[p]
				p--
			}
		}
		rows[wr] = i
		ptr[wr] = w
		if old {
			hiOld = lo
			r--
		}
	}
	return fresh
}

// sorted returns the log's rows as keys (state<<32 | next state) sorted
// stably, with their counts (nil when all are 1); with release it frees
// the log's chunks as it reads them.
func (l *actionLog) sorted(release bool) ([]uint64, []float64) {
	keys := make([]uint64, 0, l.n)
	var vals []float64
	for _, ch := range l.chunks {
		if ch.c != nil {
			vals = make([]float64, 0, l.n)
			break
		}
	}
	for k, ch := range l.chunks {
		for q, i := range ch.i {
			keys = append(keys, uint64(uint32(i))<<32|uint64(uint32(ch.j[q])))
		}
		if vals != nil {
			if ch.c != nil {
				vals = append(vals, ch.c...)
			} else {
				for range ch.i {
					vals = append(vals, 1)
				}
			}
		}
		if release {
			l.chunks[k] = nil
			if ch.s != nil && (k+1 == len(l.chunks) || l.chunks[k+1].s != ch.s) {
				ch.s.release()
			}
		}
	}
	sortKeys(keys, vals)
	return keys, vals
}

// release frees the counter's logs (a Table's buffer once merged).
func (ct *Counter) release() {
	for _, l := range ct.acts {
		l.release()
	}
	for _, l := range ct.sparse {
		l.release()
	}
	*ct = Counter{}
}

func (l *actionLog) release() {
	if l == nil {
		return
	}
	for _, ch := range l.chunks {
		if ch != nil && ch.s != nil {
			ch.s.release()
		}
	}
	l.chunks = nil
}

// bytes is the memory the counter's logs hold.
func (ct *Counter) bytes() int64 {
	var b int64
	add := func(l *actionLog) {
		for _, ch := range l.chunks {
			if ch != nil {
				b += 8*int64(cap(ch.i)) + 8*int64(cap(ch.c))
			}
		}
	}
	for _, l := range ct.acts {
		if l != nil {
			add(l)
		}
	}
	for _, l := range ct.sparse {
		add(l)
	}
	return b
}

// ClearPending marks every count as seen by a model version (it merges
// the buffer; the table must not be frozen).
func (t *Table) ClearPending() {
	if t.frozen {
		panic("shard: ClearPending on a frozen table")
	}
	t.Merge()
	t.each(func(_ int32, ta *tableAction) { clear(ta.pend.s) })
	t.pend, t.padd = 0, 0
}

// Frozen is a view of a Table's counts as of Freeze, valid until Thaw:
// its blocks alias the table's arrays. It may be read on any goroutine
// while the table's owner goes on adding.
type Frozen struct {
	acts []frozenAction
}

type frozenAction struct {
	rows        []int32
	ptr         []int64
	cols        []int32
	count, pend []float64
}

// Freeze merges the buffer and returns a view of the counts of actions
// below u (see Table). The table must not be frozen already.
func (t *Table) Freeze(u int) *Frozen {
	if t.frozen {
		panic("shard: Freeze on a frozen table")
	}
	t.Merge()
	t.frozen, t.freshSum, t.freshRows = true, 0, 0
	f := &Frozen{acts: make([]frozenAction, u)}
	for a := range f.acts {
		if ta := t.action(int32(a)); ta != nil && len(ta.rows.s) > 0 {
			f.acts[a] = frozenAction{rows: ta.rows.s, ptr: ta.ptr.s, cols: ta.cols.s, count: ta.count.s, pend: ta.pend.s}
		}
	}
	return f
}

// Frozen reports whether the table is frozen.
func (t *Table) Frozen() bool { return t.frozen }

// Thaw ends a freeze: with commit the counts added since Freeze become the
// pending ones (each summed from zero in arrival order), without it every
// count stays pending. It merges the buffer.
func (t *Table) Thaw(commit bool) {
	if !t.frozen {
		panic("shard: Thaw on a table that is not frozen")
	}
	t.frozen = false
	if commit {
		t.each(func(_ int32, ta *tableAction) { clear(ta.pend.s) })
		t.pend, t.padd = t.freshSum, t.freshRows
	}
	t.freshSum, t.freshRows = 0, 0
	t.Merge()
}

// FreshRows returns the rows added since Freeze (0 when not frozen).
func (t *Table) FreshRows() int64 { return t.freshRows }

// Blocks returns the total counts of every action as a Block aliasing the
// table (an action without data gives an empty Block).
func (f *Frozen) Blocks() []*factor.Block {
	out := make([]*factor.Block, len(f.acts))
	for a, fa := range f.acts {
		out[a] = &factor.Block{Action: a, Ptr: []int64{0}}
		if fa.rows != nil {
			out[a] = &factor.Block{Action: a, Rows: fa.rows, Ptr: fa.ptr, Cols: fa.cols, Vals: fa.count}
		}
	}
	return out
}

// Pending calls fn for every entry with a pending count, in (action,
// state, next state) order, until fn returns an error.
func (f *Frozen) Pending(fn func(i, a, j int, c float64) error) error {
	for a, fa := range f.acts {
		for r, i := range fa.rows {
			for p := fa.ptr[r]; p < fa.ptr[r+1]; p++ {
				if c := fa.pend[p]; c > 0 {
					if err := fn(int(i), a, int(fa.cols[p]), c); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// Prior returns the counts without their pending part (what the latest
// version has seen) as Blocks: a copy (Go memory), entries with nothing
// left out.
func (f *Frozen) Prior() []*factor.Block {
	out := make([]*factor.Block, len(f.acts))
	for a, fa := range f.acts {
		b := &factor.Block{Action: a, Ptr: []int64{0}}
		for r, i := range fa.rows {
			n := len(b.Cols)
			for p := fa.ptr[r]; p < fa.ptr[r+1]; p++ {
				if c := fa.count[p] - fa.pend[p]; c > 0 {
					b.Cols = append(b.Cols, fa.cols[p])
					b.Vals = append(b.Vals, c)
				}
			}
			if len(b.Cols) > n {
				b.Rows = append(b.Rows, i)
				b.Ptr = append(b.Ptr, int64(len(b.Cols)))
			}
		}
		out[a] = b
	}
	return out
}

// Scan calls fn for every entry in (action, state, next state) order, as
// the table holds it with its buffer merged (it merges nothing: the table
// may be frozen), until fn returns an error. With committed, the pending
// counts are those a Thaw(true) now would leave (the rows since Freeze).
func (t *Table) Scan(committed bool, fn func(TableEntry) error) error {
	acts := map[int32]bool{}
	t.each(func(a int32, _ *tableAction) { acts[a] = true })
	for _, a := range t.logActions() {
		acts[a] = true
	}
	for _, a := range slices.Sorted(maps.Keys(acts)) {
		var keys []uint64
		var vals []float64
		if l := t.log.action(a); l != nil && l.n > 0 {
			keys, vals = l.sorted(false)
		}
		if err := scanAction(a, t.action(a), keys, vals, committed, fn); err != nil {
			return err
		}
	}
	return nil
}

// scanAction is Scan for one action: the matrix ta (nil: none) merged
// with the sorted buffered rows keys and vals.
func scanAction(a int32, ta *tableAction, keys []uint64, vals []float64, committed bool, fn func(TableEntry) error) error {
	val := func(k int) float64 {
		if vals == nil {
			return 1
		}
		return vals[k]
	}
	var rows []int32
	var ptr []int64
	var cols []int32
	var count, pend []float64
	if ta != nil {
		rows, ptr, cols, count, pend = ta.rows.s, ta.ptr.s, ta.cols.s, ta.count.s, ta.pend.s
	}
	k, r := 0, 0
	var p int64
	for r < len(rows) || k < len(keys) {
		var bk uint64
		base := r < len(rows)
		if base {
			bk = uint64(uint32(rows[r]))<<32 | uint64(uint32(cols[p]))
		}
		e := TableEntry{Action: a}
		switch {
		case base && (k == len(keys) || bk <= keys[k]):
			e.State, e.Next, e.Count, e.Pending = rows[r], cols[p], count[p], pend[p]
			if committed {
				e.Pending = 0
			}
			for ; k < len(keys) && keys[k] == bk; k++ {
				e.Count += val(k)
				e.Pending += val(k)
			}
			if p++; p == ptr[r+1] {
				r++
			}
		default:
			key := keys[k]
			e.State, e.Next, e.Count = rowOf(key), colOf(key), val(k)
			for k++; k < len(keys) && keys[k] == key; k++ {
				e.Count += val(k)
			}
			e.Pending = e.Count
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// action returns action a's log, nil when it has none.
func (ct *Counter) action(a int32) *actionLog {
	if int(a) < len(ct.acts) {
		return ct.acts[a]
	}
	return ct.sparse[a]
}

// Entries returns the entries sorted by (action, state, next) (a copy).
func (t *Table) Entries() []TableEntry {
	var out []TableEntry
	_ = t.Scan(false, func(e TableEntry) error {
		out = append(out, e)
		return nil
	})
	return out
}

// Blocks returns the count matrix of every action a < u as a Block (one
// per action, empty when it has no data), in Go memory: the totals, or
// with pending the pending counts only (entries with none left out).
func (t *Table) Blocks(u int, pending bool) []*factor.Block {
	out := make([]*factor.Block, u)
	for a := range out {
		out[a] = &factor.Block{Action: a, Ptr: []int64{0}}
	}
	_ = t.Scan(false, func(e TableEntry) error {
		c := e.Count
		if pending {
			c = e.Pending
		}
		if int(e.Action) >= u || !(c > 0) {
			return nil
		}
		b := out[e.Action]
		if len(b.Rows) == 0 || b.Rows[len(b.Rows)-1] != e.State {
			b.Rows = append(b.Rows, e.State)
			b.Ptr = append(b.Ptr, b.Ptr[len(b.Ptr)-1])
		}
		b.Cols = append(b.Cols, e.Next)
		b.Vals = append(b.Vals, c)
		b.Ptr[len(b.Ptr)-1]++
		return nil
	})
	return out
}

// TableBuilder builds a Table from its entries in (action, state, next)
// order (a checkpoint read back), appending each to the matrices: no
// buffer, no second copy.
type TableBuilder struct {
	t    Table
	prev TableEntry
	any  bool
	cur  *tableAction
}

// Add appends e, which must come after the entry before it, with a finite
// count > 0 and 0 <= Pending <= Count.
func (b *TableBuilder) Add(e TableEntry) error {
	if e.Action < 0 || e.State < 0 || e.Next < 0 || e.Action == math.MaxInt32 || e.State == math.MaxInt32 || e.Next == math.MaxInt32 {
		return fmt.Errorf("shard: restore: transition %d --%d--> %d: index out of range", e.State, e.Action, e.Next)
	}
	if !(e.Count > 0) || math.IsInf(e.Count, 0) || !(e.Pending >= 0) || e.Pending > e.Count {
		return fmt.Errorf("shard: restore: transition %d --%d--> %d: count %v, pending %v", e.State, e.Action, e.Next, e.Count, e.Pending)
	}
	if b.any && !entryBefore(b.prev, e) {
		return fmt.Errorf("shard: restore: transition %d --%d--> %d is not after %d --%d--> %d: entries must be distinct and sorted",
			e.State, e.Action, e.Next, b.prev.State, b.prev.Action, b.prev.Next)
	}
	t := &b.t
	if !b.any || e.Action != b.prev.Action {
		b.cur = t.makeAction(e.Action)
	}
	ta := b.cur
	if !b.any || e.Action != b.prev.Action || e.State != b.prev.State {
		nr := len(ta.rows.s)
		ta.rows.resize(nr + 1)
		ta.rows.s[nr] = e.State
		ta.ptr.resize(nr + 2)
		ta.ptr.s[nr] = int64(len(ta.cols.s))
	}
	ne := len(ta.cols.s)
	ta.cols.resize(ne + 1)
	ta.count.resize(ne + 1)
	ta.pend.resize(ne + 1)
	ta.cols.s[ne], ta.count.s[ne], ta.pend.s[ne] = e.Next, e.Count, e.Pending
	ta.ptr.s[len(ta.rows.s)] = int64(ne + 1)
	t.nnz++
	t.sum += e.Count
	t.pend += e.Pending
	t.n = max(t.n, int(e.State)+1, int(e.Next)+1)
	t.u = max(t.u, int(e.Action)+1)
	b.prev, b.any = e, true
	return nil
}

func entryBefore(x, y TableEntry) bool {
	if x.Action != y.Action {
		return x.Action < y.Action
	}
	if x.State != y.State {
		return x.State < y.State
	}
	return x.Next < y.Next
}

// Table returns the table built, with added rows ingested in all and
// pending since the latest version (the builder is spent).
func (b *TableBuilder) Table(added, pending int64) (*Table, error) {
	t := &b.t
	if !(t.sum <= MaxCount) {
		return nil, fmt.Errorf("shard: restore: total count %v is above the limit %v", t.sum, float64(MaxCount))
	}
	if added < 0 || pending < 0 || pending > added {
		return nil, fmt.Errorf("shard: restore: %d rows added, %d pending", added, pending)
	}
	t.added, t.padd = added, pending
	out := &Table{}
	*out = *t
	b.t = Table{}
	return out, nil
}

// Restore returns a table holding entries (as Entries returns them) and
// the row counters added and pending: a checkpoint read back.
func Restore(entries []TableEntry, added, pending int64) (*Table, error) {
	var b TableBuilder
	for _, e := range entries {
		if err := b.Add(e); err != nil {
			return nil, err
		}
	}
	return b.Table(added, pending)
}
