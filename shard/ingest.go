package shard

import (
	"math"
	"slices"
)

// Summary is what a first read of a split of transitions reports, all a
// coordinator needs to plan the counting without seeing a transition:
// rows, the largest indices, whether the counts are integers (and their
// sum), the fingerprint's CRCs and a coarse histogram of (action, state).
type Summary struct {
	Rows int64 `json:"rows"`
	// States and Actions are 1 + the largest state (or next state) and
	// action seen (0: none).
	States  int `json:"states"`
	Actions int `json:"actions"`
	// Fractional: some count is not an integer of at most 2^53; else
	// IntSum is Σ count (saturating at the largest uint64; meaningless
	// once Fractional).
	Fractional bool    `json:"fractional,omitempty"`
	IntSum     uint64  `json:"int_sum"`
	CRC        RowsCRC `json:"crc"`
	Hist       Hist    `json:"hist"`
	fp         FingerprintHash
}

// Add summarizes the transitions state[k] --action[k]--> next[k] with
// count counts[k] (1 when counts is nil), already validated.
func (s *Summary) Add(state, action, next []int32, counts []float64) {
	s.fp.Add(state, action, next, counts)
	s.CRC = s.fp.Sum()
	s.count(state, action, next, counts)
}

// AddRows is Add without the fingerprint: the caller sets CRC (rows
// hashed where they were read: a split of ids read once, held, and
// summarized from memory).
func (s *Summary) AddRows(state, action, next []int32, counts []float64) {
	s.count(state, action, next, counts)
}

// Renumber replaces each state and next state i by index[0][i] and each
// action a by index[1][a] (a nil index: unchanged); every index must be
// in range.
func Renumber(state, action, next []int32, index [2][]int32) {
	for g, cols := range [2][][]int32{{state, next}, {action}} {
		if ix := index[g]; ix != nil {
			for _, col := range cols {
				for k, i := range col {
					col[k] = ix[i]
				}
			}
		}
	}
}

// count is Add less the fingerprint.
func (s *Summary) count(state, action, next []int32, counts []float64) {
	s.Rows += int64(len(state))
	maxS, maxA := int32(-1), int32(-1)
	for k, i := range state {
		maxS = max(maxS, i, next[k])
		maxA = max(maxA, action[k])
	}
	s.States, s.Actions = max(s.States, int(maxS)+1), max(s.Actions, int(maxA)+1)
	s.Hist.Add(state, action)
	if counts == nil {
		s.IntSum = addSat(s.IntSum, uint64(len(state)))
		return
	}
	for _, c := range counts {
		switch {
		case s.Fractional:
		case c != math.Trunc(c) || c > 1<<53:
			s.Fractional = true
		default:
			s.IntSum = addSat(s.IntSum, uint64(c))
		}
	}
}

func addSat(a, b uint64) uint64 {
	if a+b < a {
		return math.MaxUint64
	}
	return a + b
}

// Merge adds the summary of the rows that follow s's.
func (s *Summary) Merge(o *Summary) {
	s.Rows += o.Rows
	s.States, s.Actions = max(s.States, o.States), max(s.Actions, o.Actions)
	s.Fractional = s.Fractional || o.Fractional
	s.IntSum = addSat(s.IntSum, o.IntSum)
	s.CRC = s.CRC.Then(o.CRC)
	s.Hist.Merge(&o.Hist)
}

// Combinable reports whether any order of summing the counts gives the
// same bits: every count an integer and their sum at most 2^53, so
// every partial sum is an exact float64.
func (s *Summary) Combinable() bool { return !s.Fractional && s.IntSum <= 1<<53 }

// Hist is a coarse histogram of transitions by (action, state): Bins[a][b]
// counts the transitions of action a from the states [b·2^Shift,
// (b+1)·2^Shift). It keeps at most HistCells bins in all (and
// HistBins per action), widening the bins as states and actions grow.
type Hist struct {
	Shift uint8     `json:"shift"`
	Bins  [][]int64 `json:"bins"`
}

// Limits of a Hist.
const (
	HistBins  = 256
	HistCells = 1 << 14
)

// binsPerAction is how many bins each of u actions may have.
func binsPerAction(u int) int {
	b := HistBins
	for b > 1 && b*u > HistCells {
		b /= 2
	}
	return b
}

// Add counts the transitions of states from actions.
func (h *Hist) Add(states, actions []int32) {
	for k, i := range states {
		a := int(actions[k])
		if a >= len(h.Bins) {
			h.grow(a + 1)
		}
		b := int(i >> h.Shift)
		if b >= len(h.Bins[a]) {
			h.fit(a, b)
			b = int(i >> h.Shift)
		}
		h.Bins[a][b]++
	}
}

// grow makes room for u actions, widening the bins to keep within the
// cells.
func (h *Hist) grow(u int) {
	h.Bins = append(h.Bins, make([][]int64, u-len(h.Bins))...)
	for per := binsPerAction(u); h.widest() > per; {
		h.coarsen()
	}
}

// widest returns the most bins any action has.
func (h *Hist) widest() int {
	w := 0
	for _, b := range h.Bins {
		w = max(w, len(b))
	}
	return w
}

// fit makes bin b of action a exist, widening bins as needed.
func (h *Hist) fit(a, b int) {
	per := binsPerAction(len(h.Bins))
	for b >= per {
		h.coarsen()
		b >>= 1
	}
	if b >= len(h.Bins[a]) {
		h.Bins[a] = append(h.Bins[a], make([]int64, b+1-len(h.Bins[a]))...)
	}
}

// coarsen doubles the width of the bins.
func (h *Hist) coarsen() {
	h.Shift++
	for a, bins := range h.Bins {
		out := bins[:(len(bins)+1)/2]
		for k := range out {
			v := bins[2*k]
			if 2*k+1 < len(bins) {
				v += bins[2*k+1]
			}
			out[k] = v
		}
		h.Bins[a] = out
	}
}

// Merge adds the counts of o.
func (h *Hist) Merge(o *Hist) {
	if len(o.Bins) > len(h.Bins) {
		h.grow(len(o.Bins))
	}
	for h.Shift < o.Shift {
		h.coarsen()
	}
	for a, bins := range o.Bins {
		for b, v := range bins {
			if v == 0 {
				continue
			}
			k := b >> (h.Shift - o.Shift)
			if k >= len(h.Bins[a]) {
				h.fit(a, k)
				k = b >> (h.Shift - o.Shift)
			}
			h.Bins[a][k] += v
		}
	}
}

// Total returns the transitions of action a.
func (h *Hist) Total(a int) int64 {
	if a >= len(h.Bins) {
		return 0
	}
	t := int64(0)
	for _, v := range h.Bins[a] {
		t += v
	}
	return t
}

// Bucket is the rows [RowLo, RowHi) of an action: what one reducer of a
// distributed count holds, so that every row's transitions meet on one
// worker.
type Bucket struct {
	Action  int `json:"action"`
	RowLo   int `json:"row_lo"`
	RowHi   int `json:"row_hi"`
	Reducer int `json:"reducer"`
}

// Router finds the bucket of a transition: buckets of each action in row
// order, covering [0, n).
type Router struct {
	first []int // index of action a's first bucket (len u + 1)
	lo    []int32
}

// NewRouter returns the router of buckets, sorted by (action, RowLo) and
// covering the rows [0, n) of each of the u actions that have any.
func NewRouter(buckets []Bucket, u int) *Router {
	r := &Router{first: make([]int, u+1), lo: make([]int32, len(buckets))}
	k := 0
	for a := range u {
		r.first[a] = k
		for k < len(buckets) && buckets[k].Action == a {
			r.lo[k] = int32(buckets[k].RowLo)
			k++
		}
	}
	r.first[u] = k
	return r
}

// Bucket returns the index of the bucket of state i of action a, or −1
// when action a has none.
func (r *Router) Bucket(a, i int32) int {
	lo, hi := r.first[a], r.first[a+1]
	if lo == hi {
		return -1
	}
	// The last bucket whose first row is ≤ i.
	k, found := slices.BinarySearch(r.lo[lo:hi], i)
	if !found {
		k--
	}
	return lo + max(k, 0)
}
