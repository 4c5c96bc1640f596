package shard

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/emsf/emsf/factor"
)

// TableEntry is one distinct transition of a Table: its total count and
// the part of it added since the last ClearPending.
type TableEntry struct {
	Action, State, Next int32
	Count, Pending      float64
}

// Table is a running count table for a stream of transitions (the service
// mode's state): one entry per distinct transition, its count summed in
// arrival order, so memory is O(distinct transitions) whatever the stream's
// length. Next to the total it keeps the counts added since the last
// ClearPending (the data a model version has not seen yet). The zero
// value is empty and ready to use.
type Table struct {
	idx         map[[3]int32]int
	entries     []TableEntry
	n, u        int
	sum, pend   float64
	added, padd int64

	// Between BeginSnapshot and its end, what Add counts is also kept
	// apart: fresh[k] for entries[k], and its sum and rows.
	snap      bool
	fresh     []float64
	freshSum  float64
	freshRows int64
}

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
// and the table is left as it was.
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
	if t.idx == nil {
		t.idx = map[[3]int32]int{}
	}
	k := [3]int32{int32(a), int32(i), int32(j)}
	p, ok := t.idx[k]
	if !ok {
		p = len(t.entries)
		t.idx[k] = p
		t.entries = append(t.entries, TableEntry{Action: k[0], State: k[1], Next: k[2]})
	}
	e := &t.entries[p]
	e.Count += c
	e.Pending += c
	if t.snap {
		for len(t.fresh) <= p {
			t.fresh = append(t.fresh, 0)
		}
		t.fresh[p] += c
		t.freshSum += c
		t.freshRows++
	}
	t.sum += c
	t.pend += c
	t.added++
	t.padd++
	t.n = max(t.n, i+1, j+1)
	t.u = max(t.u, a+1)
	return nil
}

// Dims returns the smallest n and u that hold every transition.
func (t *Table) Dims() (n, u int) { return t.n, t.u }

// NNZ returns the number of distinct transitions.
func (t *Table) NNZ() int { return len(t.entries) }

// Sum returns the total count; PendingSum the count since ClearPending.
func (t *Table) Sum() float64 { return t.sum }

// PendingSum returns the count added since the last ClearPending.
func (t *Table) PendingSum() float64 { return t.pend }

// Added returns the number of Add calls (rows ingested), and Pending the
// number since the last ClearPending.
func (t *Table) Added() (all, pending int64) { return t.added, t.padd }

// ClearPending marks every count as seen by a model version.
func (t *Table) ClearPending() {
	for k := range t.entries {
		t.entries[k].Pending = 0
	}
	t.pend, t.padd = 0, 0
	t.AbortSnapshot()
}

// BeginSnapshot marks the moment a model version's data is taken (while
// the table keeps counting): CommitSnapshot then makes the counts added
// since this moment the pending ones, exactly as if ClearPending had been
// called here (each summed from zero in arrival order), and AbortSnapshot
// forgets the mark.
func (t *Table) BeginSnapshot() {
	t.snap = true
	t.fresh = make([]float64, len(t.entries))
	t.freshSum, t.freshRows = 0, 0
}

// CommitSnapshot ends a snapshot: the counts added since BeginSnapshot
// become the pending counts. Without a snapshot it is ClearPending.
func (t *Table) CommitSnapshot() {
	if !t.snap {
		t.ClearPending()
		return
	}
	for k := range t.entries {
		t.entries[k].Pending = 0
		if k < len(t.fresh) {
			t.entries[k].Pending = t.fresh[k]
		}
	}
	t.pend, t.padd = t.freshSum, t.freshRows
	t.AbortSnapshot()
}

// AbortSnapshot ends a snapshot and keeps every count pending.
func (t *Table) AbortSnapshot() {
	t.snap, t.fresh, t.freshSum, t.freshRows = false, nil, 0, 0
}

// Entries returns a copy of the entries sorted by (action, state, next).
func (t *Table) Entries() []TableEntry {
	return sortEntries(slices.Clone(t.entries))
}

// CommittedEntries returns the entries as Entries will after
// CommitSnapshot (pending = what arrived since BeginSnapshot; without a
// snapshot, none), and that pending row count, leaving the table as it
// is: a checkpoint of the committed state can be written first and the
// table changed only once it is stored.
func (t *Table) CommittedEntries() ([]TableEntry, int64) {
	es := slices.Clone(t.entries)
	for k := range es {
		es[k].Pending = 0
		if t.snap && k < len(t.fresh) {
			es[k].Pending = t.fresh[k]
		}
	}
	if !t.snap {
		return sortEntries(es), 0
	}
	return sortEntries(es), t.freshRows
}

func sortEntries(es []TableEntry) []TableEntry {
	slices.SortFunc(es, func(x, y TableEntry) int {
		return cmp.Or(cmp.Compare(x.Action, y.Action), cmp.Compare(x.State, y.State), cmp.Compare(x.Next, y.Next))
	})
	return es
}

// Restore returns a table holding entries (as Entries returns them) and
// the row counters added and pending: a checkpoint read back. Entries must
// be distinct, with finite counts, Count > 0 and 0 <= Pending <= Count.
func Restore(entries []TableEntry, added, pending int64) (*Table, error) {
	t := &Table{idx: make(map[[3]int32]int, len(entries)), entries: make([]TableEntry, 0, len(entries)), added: added, padd: pending}
	for _, e := range entries {
		if e.Action < 0 || e.State < 0 || e.Next < 0 || e.Action == math.MaxInt32 || e.State == math.MaxInt32 || e.Next == math.MaxInt32 {
			return nil, fmt.Errorf("shard: restore: transition %d --%d--> %d: negative index", e.State, e.Action, e.Next)
		}
		if !(e.Count > 0) || math.IsInf(e.Count, 0) || !(e.Pending >= 0) || e.Pending > e.Count {
			return nil, fmt.Errorf("shard: restore: transition %d --%d--> %d: count %v, pending %v", e.State, e.Action, e.Next, e.Count, e.Pending)
		}
		k := [3]int32{e.Action, e.State, e.Next}
		if _, dup := t.idx[k]; dup {
			return nil, fmt.Errorf("shard: restore: transition %d --%d--> %d listed twice", e.State, e.Action, e.Next)
		}
		t.idx[k] = len(t.entries)
		t.entries = append(t.entries, e)
		t.sum += e.Count
		t.pend += e.Pending
		t.n = max(t.n, int(e.State)+1, int(e.Next)+1)
		t.u = max(t.u, int(e.Action)+1)
	}
	if !(t.sum <= MaxCount) {
		return nil, fmt.Errorf("shard: restore: total count %v is above the limit %v", t.sum, float64(MaxCount))
	}
	if added < 0 || pending < 0 || pending > added {
		return nil, fmt.Errorf("shard: restore: %d rows added, %d pending", added, pending)
	}
	return t, nil
}

// Blocks returns the count matrix of every action a < u as a Block (one
// per action, empty when it has no data): the totals, or with pending the
// counts since ClearPending only (entries with none left out).
func (t *Table) Blocks(u int, pending bool) []*factor.Block {
	var ct Counter
	for _, e := range t.entries {
		c := e.Count
		if pending {
			c = e.Pending
		}
		if c > 0 && int(e.Action) < u {
			// Entries hold valid transitions: Add cannot fail.
			_ = ct.Add(int(e.State), int(e.Action), int(e.Next), c)
		}
	}
	return ct.Matrices(u)
}
