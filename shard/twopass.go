package shard

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

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
type passAction struct {
	next     []int // by state: transitions in Hist; after Plan, the next free position
	end      []int // by state, after Plan: the end of its run (the start of the next state's)
	n        int
	weighted bool
	js       []int32
	cs       []float64
}

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
	var pa *passAction
	last := int32(-1)
	maxS, maxA := int32(-1), int32(-1)
	defer func() {
		tp.maxS = max(tp.maxS, int(maxS)+1)
		tp.maxA = max(tp.maxA, int(maxA)+1)
	}()
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
		tp.total++
		if tp.tooWide {
			continue
		}
		if a != last {
			if a >= maxPassActions {
				tp.tooWide = true
				continue
			}
			for int(a) >= len(tp.acts) {
				tp.acts = append(tp.acts, nil)
			}
			if tp.acts[a] == nil {
				tp.acts[a] = &passAction{}
			}
			pa, last = tp.acts[a], a
		}
		if int(i) >= len(pa.next) {
			if i >= maxPassStates {
				tp.tooWide = true
				continue
			}
			pa.next = append(pa.next, make([]int, int(i)+1-len(pa.next))...)
		}
		pa.next[i]++
		pa.n++
		if c != 1 {
			pa.weighted = true
		}
	}
	return len(states), nil
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
			entries += len(pa.next)
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
		pa.end = make([]int, len(pa.next))
		pos := 0
		for i, c := range pa.next {
			pa.next[i] = pos
			pos += c
			pa.end[i] = pos
		}
		pa.js = make([]int32, pa.n)
		adviseHuge(pa.js)
		if pa.weighted {
			pa.cs = make([]float64, pa.n)
			adviseHuge(pa.cs)
		}
	}
	tp.planned = true
}

// Fill is the second pass: the same transitions as Hist's, in the same
// order (already validated). A transition the first pass did not count
// is ErrInputChanged.
func (tp *TwoPass) Fill(states, actions, nexts []int32, counts []float64) error {
	if !tp.planned {
		panic("shard: TwoPass.Fill before Plan")
	}
	var pa *passAction
	last := int32(-1)
	nexts, actions = nexts[:len(states)], actions[:len(states)]
	for k, i := range states {
		a := actions[k]
		if a != last {
			if a < 0 || int(a) >= len(tp.acts) || tp.acts[a] == nil {
				return ErrInputChanged
			}
			pa, last = tp.acts[a], a
		}
		if i < 0 || int(i) >= len(pa.next) {
			return ErrInputChanged
		}
		p := pa.next[i]
		if p >= pa.end[i] {
			return ErrInputChanged
		}
		pa.next[i] = p + 1
		pa.js[p] = nexts[k]
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
				// Every run must be full: Fill never wrote past one.
				var rows []int32
				var start []int
				lo := 0
				for i, end := range pa.end {
					if pa.next[i] != end {
						bad.Store(true)
						break
					}
					if end > lo {
						rows = append(rows, int32(i))
						start = append(start, lo)
					}
					lo = end
				}
				if bad.Load() {
					continue
				}
				pa.next, pa.end = nil, nil
				out[a] = sc.sumRows(a, rows, append(start, pa.n), pa.js, pa.cs)
			}
		})
	}
	wg.Wait()
	if bad.Load() {
		return nil, ErrInputChanged
	}
	return out, nil
}
