package shard

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/emsf/emsf/factor"
)

// TwoPass counts transitions that can be read twice (a file) without
// keeping them: the first pass (Hist) validates every transition and
// counts those of each (action, state); Plan sizes the arrays; the second
// pass (Fill) writes each transition's next state and count straight to
// its place among its state's, in arrival order; Matrices sums each row.
// Memory is the arrays of the result, a next state and a count a
// transition (no count when every count of the action is 1), plus a
// count per (action, state): about the size of the CSR, where a Counter
// holds the transitions and the CSR being built at once. The matrices are
// bitwise those of a Counter fed the same transitions.
//
// The zero value is ready for the first pass.
type TwoPass struct {
	acts     []*passAction
	maxS     int
	maxA     int
	total    int
	tooWide  bool
	filled   int
	planned  bool
	weighted bool
}

// passAction is one action's histogram, then its bucketed transitions.
//
// Fill places each transition in its group's run: a group is 1 << shift
// consecutive states. With shift 0 a group is a state, and each entry of
// js is a next state. Placing into one run per state writes to as many
// places in memory as there are states, a cache miss nearly every time
// past a few thousand states; with shift groupShift there are 64 times
// fewer runs to write to, and each entry holds the state's place in its
// group (6 bits, from bit 24 on) beside the next state (24 bits):
// Matrices sorts each group's run by state, stably, in a scratch buffer
// that stays in cache, before it sums the rows.
type passAction struct {
	hist     []int // by state: transitions in Hist; after Plan, the start of its run, and the end of the last
	next     []int // by group, after Plan: the next free position
	end      []int // by group, after Plan: the end of its run
	shift    uint  // log2 of the states in a group
	place    int32 // 1<<shift - 1: a state's place in its group is state & place
	states   uint32
	maxJ     uint32 // next states must be below (as packed)
	n        int
	weighted bool
	js       []int32
	cs       []float64
}

// Grouping of states in the second pass (see passAction): groups of
// 1 << groupShift states, their entries packed as place << groupBits |
// next state, for actions whose largest group run is at most maxGroupRun
// transitions (the size of Matrices' scratch) and whose next states are
// below 1 << groupBits.
const (
	groupShift  = 6
	groupBits   = 24
	maxGroupRun = 1 << 18
)

// Bounds on the histogram of TwoPass: with a state or an action above
// them, or more entries than transitions/histPerTransition (plus
// histSlack), it reports Fits false (the caller counts with a Counter).
const (
	maxPassStates     = 1 << 24
	maxPassActions    = 1 << 12
	histPerTransition = 4
	histSlack         = 1 << 16
)

// ErrInputChanged is the error of Fill and Matrices when the second pass
// did not see the transitions of the first.
var ErrInputChanged = errors.New("shard: the input changed between the two passes (the second read differs from the first)")

// Hist is the first pass over states[k] --actions[k]--> nexts[k] with
// count counts[k] (1 when counts is nil). At the first bad transition it
// stops and returns its index k and the error Counter.Add returns for it.
func (tp *TwoPass) Hist(states, actions, nexts []int32, counts []float64) (int, error) {
	maxS, maxA := int32(-1), int32(-1)
	done := 0
	defer func() {
		tp.maxS = max(tp.maxS, int(maxS)+1)
		tp.maxA = max(tp.maxA, int(maxA)+1)
		tp.total += done
	}()
	acts := tp.acts
	nexts, actions = nexts[:len(states)], actions[:len(states)]
	for k, i := range states {
		a, j, c := actions[k], nexts[k], 1.0
		if counts != nil {
			c = counts[k]
		}
		if i < 0 || a < 0 || j < 0 || !(c > 0) || math.IsInf(c, 0) {
			return k, check(int(i), int(a), int(j), c)
		}
		maxS = max(maxS, i, j)
		maxA = max(maxA, a)
		done++
		if tp.tooWide {
			continue
		}
		// The action's histogram is looked up for every transition: in
		// logs where actions alternate, remembering the last one's costs
		// a mispredicted branch most of the time.
		if int(a) >= len(acts) || acts[a] == nil || int(i) >= len(acts[a].hist) {
			if !tp.grow(a, i) {
				continue
			}
			acts = tp.acts
		}
		pa := acts[a]
		pa.hist[i]++
		pa.n++
		if c != 1 {
			pa.weighted = true
		}
	}
	return len(states), nil
}

// grow makes room in the histograms for state i of action a, or marks
// the TwoPass too wide for them (false).
func (tp *TwoPass) grow(a, i int32) bool {
	if a >= maxPassActions || i >= maxPassStates {
		tp.tooWide = true
		return false
	}
	for int(a) >= len(tp.acts) {
		tp.acts = append(tp.acts, nil)
	}
	if tp.acts[a] == nil {
		tp.acts[a] = &passAction{}
	}
	if pa := tp.acts[a]; int(i) >= len(pa.hist) {
		pa.hist = append(pa.hist, make([]int, int(i)+1-len(pa.hist))...)
	}
	return true
}

// Len returns the number of transitions of the first pass.
func (tp *TwoPass) Len() int { return tp.total }

// Dims returns the smallest n and u that hold every transition of the
// first pass.
func (tp *TwoPass) Dims() (n, u int) { return tp.maxS, tp.maxA }

// Weighted reports whether the first pass saw a count other than 1; if
// not, Fill ignores counts (they may be nil).
func (tp *TwoPass) Weighted() bool {
	for _, pa := range tp.acts {
		if pa != nil && pa.weighted {
			return true
		}
	}
	return false
}

// Fits reports whether the histogram stayed within bounds (see Plan).
func (tp *TwoPass) Fits() bool {
	if tp.tooWide {
		return false
	}
	entries := 0
	for _, pa := range tp.acts {
		if pa != nil {
			entries += len(pa.hist)
		}
	}
	return entries <= tp.total/histPerTransition+histSlack
}

// Plan ends the first pass and allocates the second's arrays. It panics
// unless Fits.
func (tp *TwoPass) Plan() {
	if !tp.Fits() {
		panic("shard: TwoPass.Plan without Fits")
	}
	for _, pa := range tp.acts {
		if pa == nil {
			continue
		}
		// hist becomes the start of each state's run (and the end).
		pa.hist = append(pa.hist, 0)
		pos := 0
		for i, c := range pa.hist {
			pa.hist[i] = pos
			pos += c
		}
		pa.shift = groupShift
		if tp.maxS > 1<<groupBits || largestGroupRun(pa.hist, groupShift) > maxGroupRun {
			pa.shift = 0
		}
		states := len(pa.hist) - 1
		groups := (states - 1 + 1<<pa.shift) >> pa.shift
		pa.next, pa.end = make([]int, groups), make([]int, groups)
		for g := range pa.next {
			pa.next[g] = pa.hist[g<<pa.shift]
			pa.end[g] = pa.hist[min((g+1)<<pa.shift, states)]
		}
		pa.states, pa.place, pa.maxJ = uint32(states), int32(1)<<pa.shift-1, math.MaxInt32+1
		if pa.shift > 0 {
			pa.maxJ = 1 << groupBits
		}
		pa.js = make([]int32, pa.n)
		adviseHuge(pa.js)
		populate(asBytes(pa.js))
		if pa.weighted {
			pa.cs = make([]float64, pa.n)
			adviseHuge(pa.cs)
		}
	}
	tp.planned = true
}

// asBytes returns the memory of x.
func asBytes[T any](x []T) []byte {
	if len(x) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), uintptr(len(x))*unsafe.Sizeof(zero))
}

// largestGroupRun returns the most transitions in a group of 1 << shift
// states, given the start of each state's run (and the end).
func largestGroupRun(start []int, shift uint) int {
	most, last := 0, len(start)-1
	for lo := 0; lo < last; lo += 1 << shift {
		hi := min(lo+1<<shift, last)
		most = max(most, start[hi]-start[lo])
	}
	return most
}

// Fill is the second pass: the same transitions as Hist's, in the same
// order (already validated). A transition the first pass did not count
// is ErrInputChanged.
func (tp *TwoPass) Fill(states, actions, nexts []int32, counts []float64) error {
	if !tp.planned {
		panic("shard: TwoPass.Fill before Plan")
	}
	nexts, actions = nexts[:len(states)], actions[:len(states)]
	for k, i := range states {
		a := actions[k]
		if uint32(a) >= uint32(len(tp.acts)) || tp.acts[a] == nil {
			return ErrInputChanged
		}
		pa := tp.acts[a] // looked up every time, as in Hist
		j := nexts[k]
		if uint32(i) >= pa.states || uint32(j) >= pa.maxJ {
			return ErrInputChanged
		}
		g := i >> pa.shift
		p := pa.next[g]
		if p >= pa.end[g] {
			return ErrInputChanged
		}
		pa.next[g] = p + 1
		pa.js[p] = (i&pa.place)<<groupBits | j
		if pa.cs != nil {
			c := 1.0
			if counts != nil {
				c = counts[k]
			}
			pa.cs[p] = c
		}
	}
	tp.filled += len(states)
	return nil
}

// Matrices returns the count matrix of every action a < u as one Block
// each, as Counter.Matrices does, after checking that the second pass
// filled exactly what the first counted (ErrInputChanged if not). It
// consumes the TwoPass.
func (tp *TwoPass) Matrices(u int) ([]*factor.Block, error) {
	if !tp.planned {
		panic("shard: TwoPass.Matrices before Plan")
	}
	if tp.filled != tp.total {
		return nil, fmt.Errorf("%w: %d transitions, then %d", ErrInputChanged, tp.total, tp.filled)
	}
	acts := tp.acts
	dense := tp.maxS <= maxDenseCols
	n := tp.maxS
	*tp = TwoPass{}
	out := make([]*factor.Block, u)
	var bad atomic.Bool
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(u, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			var sc rowScratch
			if dense {
				sc.n = n
			}
			for a := int(next.Add(1)) - 1; a < u; a = int(next.Add(1)) - 1 {
				var pa *passAction
				if a < len(acts) {
					pa, acts[a] = acts[a], nil
				}
				if pa == nil || pa.n == 0 {
					out[a] = &factor.Block{Action: a, Ptr: []int64{0}}
					continue
				}
				b, err := sc.groupBlock(a, pa)
				if err != nil {
					bad.Store(true)
					continue
				}
				out[a] = b
			}
		})
	}
	wg.Wait()
	if bad.Load() {
		return nil, ErrInputChanged
	}
	return out, nil
}

// groupBlock builds the CSR matrix of action a from its transitions as
// Fill placed them, or returns ErrInputChanged when a run is not exactly
// full (the second pass did not see the first's transitions).
func (sc *rowScratch) groupBlock(a int, pa *passAction) (*factor.Block, error) {
	start := pa.hist
	states := len(start) - 1
	b := &factor.Block{Action: a, Ptr: make([]int64, 1, states+1)}
	vals := pa.cs
	if vals == nil {
		vals = make([]float64, len(pa.js))
		adviseHuge(vals)
		populate(asBytes(vals))
	}
	out := 0
	for g, p := range pa.next {
		lo, hi := start[g<<pa.shift], pa.end[g]
		if p != hi {
			return nil, ErrInputChanged
		}
		if pa.shift == 0 {
			if hi > lo {
				b.Rows = append(b.Rows, int32(g))
				out = sc.sumRow(pa.js, pa.cs, lo, hi, pa.js, vals, out)
				b.Ptr = append(b.Ptr, int64(out))
			}
			continue
		}
		// Sort the group's run by state, stably, into the scratch: every
		// entry of it is read before the sums overwrite the run.
		first := g << pa.shift
		last := min(first+1<<pa.shift, states)
		js, cs := sc.groupScratch(hi-lo, pa.cs != nil)
		if !sortGroup(pa.js[lo:hi], js, start[first:last+1], lo) {
			return nil, ErrInputChanged
		}
		if cs != nil {
			sortGroupCounts(pa.js[lo:hi], pa.cs[lo:hi], cs, start[first:last+1], lo)
		}
		for i := first; i < last; i++ {
			if r0, r1 := start[i]-lo, start[i+1]-lo; r1 > r0 {
				b.Rows = append(b.Rows, int32(i))
				out = sc.sumRow(js, cs, r0, r1, pa.js, vals, out)
				b.Ptr = append(b.Ptr, int64(out))
			}
		}
	}
	b.Cols, b.Vals = shrink(pa.js, out), shrink(vals, out)
	return b, nil
}

// groupScratch returns scratch arrays of n next states and (with
// weighted) n counts, reused from call to call.
func (sc *rowScratch) groupScratch(n int, weighted bool) ([]int32, []float64) {
	if cap(sc.gjs) < n {
		sc.gjs = make([]int32, n)
	}
	if !weighted {
		return sc.gjs[:n], nil
	}
	if cap(sc.gcs) < n {
		sc.gcs = make([]float64, n)
	}
	return sc.gjs[:n], sc.gcs[:n]
}

// sortGroup writes the next states of a group's run (entries packed
// place << groupBits | next state) to js, sorted by place, stably: the
// run of the state at place s goes to [start[s]-lo, start[s+1]-lo). It
// reports false if a state has more transitions than its run holds.
func sortGroup(run, js []int32, start []int, lo int) bool {
	var pos, end [1 << groupShift]int
	for s := range len(start) - 1 {
		pos[s], end[s] = start[s]-lo, start[s+1]-lo
	}
	for _, e := range run {
		s := e >> groupBits & (1<<groupShift - 1)
		k := pos[s]
		if k >= end[s] {
			return false
		}
		pos[s] = k + 1
		js[k] = e & (1<<groupBits - 1)
	}
	return true
}

// sortGroupCounts moves the counts of a group's run as sortGroup moved
// its next states (which it checked).
func sortGroupCounts(run []int32, counts, cs []float64, start []int, lo int) {
	var pos [1 << groupShift]int
	for s := range len(start) - 1 {
		pos[s] = start[s] - lo
	}
	for q, e := range run {
		s := e >> groupBits & (1<<groupShift - 1)
		cs[pos[s]] = counts[q]
		pos[s]++
	}
}
