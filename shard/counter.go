package shard

import (
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/emsf/emsf/factor"
)

// Counter counts transitions into per-action sparse matrices. The zero
// value is ready to use.
//
// Transitions are kept as they arrive, split by action, in fixed-size
// chunks of (state, next state) pairs: 8 bytes a transition, plus 8 for
// its count only once a count other than 1 has been seen. Matrices then
// buckets each action's transitions by state with a counting sort (stable:
// a row's transitions stay in arrival order) and sums each row's
// duplicates in that order, so the counts are bitwise those of a stable
// sort by (action, state, next state) followed by a left-to-right sum.
// The full-size chunks live outside the Go heap where the platform allows
// (slab) and Matrices gives them back as it places them, so the log leaves
// the process while the CSR fills: the peak is about the CSR, not the CSR
// and the log.
type Counter struct {
	acts   []*actionLog         // by action, for actions < denseActions
	sparse map[int32]*actionLog // larger actions
	maxS   int
	maxA   int
	total  int
}

const (
	// chunkLen is the most transitions per chunk of an actionLog; its
	// first chunks hold minChunkLen, twice that, ... (chunkLenGrowth
	// sizes) up to chunkLen.
	chunkLen       = 1 << 16
	minChunkLen    = 1 << 8
	chunkLenGrowth = 8 // minChunkLen << chunkLenGrowth == chunkLen
	// denseActions bounds the actions kept in a slice (beyond: a map), so
	// that one stray huge action index costs no memory.
	denseActions = 1 << 16
)

// actionLog is one action's transitions in arrival order.
type actionLog struct {
	chunks []*chunk
	n      int
	maxI   int32
	// slab is the one that full-size chunks are being cut from,
	// slabChunks at a time: large enough for transparent huge pages, and
	// given back to the system as soon as its chunks are placed (slab).
	slab *slab
	tail *chunk // the last chunk
}

// slabChunks is the number of full-size chunks cut from one slab.
const slabChunks = 16

type chunk struct {
	i, j []int32
	c    []float64 // nil while every count of the chunk is 1
	s    *slab     // the slab i and j are cut from (nil: Go memory)
}

// add appends a transition to the log.
func (l *actionLog) add(i, j int32, c float64) {
	var ch *chunk
	if k := len(l.chunks); k > 0 && len(l.chunks[k-1].i) < cap(l.chunks[k-1].i) {
		ch = l.chunks[k-1]
	} else {
		// Chunks grow from minChunkLen to chunkLen, so that an action with
		// few transitions takes little memory.
		if k < chunkLenGrowth {
			size := minChunkLen << k
			ch = &chunk{i: make([]int32, 0, size), j: make([]int32, 0, size)}
		} else {
			if l.slab != nil {
				ch = l.slab.cut()
			}
			if ch == nil {
				l.slab = newSlab()
				ch = l.slab.cut()
			}
		}
		l.chunks = append(l.chunks, ch)
		l.tail = ch
	}
	if ch.c == nil && c != 1 {
		ch.c = make([]float64, len(ch.i), cap(ch.i))
		for k := range ch.c {
			ch.c[k] = 1
		}
	}
	ch.i = append(ch.i, i)
	ch.j = append(ch.j, j)
	if ch.c != nil {
		ch.c = append(ch.c, c)
	}
	l.maxI = max(l.maxI, i)
	l.n++
}

// log returns the log of action a, creating it.
func (ct *Counter) log(a int32) *actionLog {
	if a < denseActions {
		if int(a) >= len(ct.acts) {
			ct.acts = append(ct.acts, make([]*actionLog, int(a)+1-len(ct.acts))...)
		}
		if ct.acts[a] == nil {
			ct.acts[a] = &actionLog{}
		}
		return ct.acts[a]
	}
	if ct.sparse == nil {
		ct.sparse = map[int32]*actionLog{}
	}
	l := ct.sparse[a]
	if l == nil {
		l = &actionLog{}
		ct.sparse[a] = l
	}
	return l
}

// check returns why a transition cannot be counted, or nil.
func check(i, a, j int, c float64) error {
	if i < 0 || a < 0 || j < 0 || i > math.MaxInt32 || a > math.MaxInt32 || j > math.MaxInt32 {
		return fmt.Errorf("shard: transition %d --%d--> %d: indices must be in [0, %d]", i, a, j, math.MaxInt32)
	}
	if !(c > 0) || math.IsInf(c, 0) {
		return fmt.Errorf("shard: transition %d --%d--> %d: count %v must be finite and > 0", i, a, j, c)
	}
	return nil
}

// Add records count c of the transition i --a--> j. It returns an error for
// negative indices or a count that is not finite and > 0.
func (ct *Counter) Add(i, a, j int, c float64) error {
	if err := check(i, a, j, c); err != nil {
		return err
	}
	ct.log(int32(a)).add(int32(i), int32(j), c)
	ct.maxS = max(ct.maxS, i+1, j+1)
	ct.maxA = max(ct.maxA, a+1)
	ct.total++
	return nil
}

// AddBatch records the transitions states[k] --actions[k]--> nexts[k]
// with count counts[k] (1 when counts is nil), in order; the slices have
// the same length. At the first bad transition it stops and returns its
// index k and Add's error; the transitions before it are counted.
func (ct *Counter) AddBatch(states, actions, nexts []int32, counts []float64) (int, error) {
	var l *actionLog
	last := int32(-1)
	maxS, maxA := int32(-1), int32(-1)
	defer func() {
		ct.maxS = max(ct.maxS, int(maxS)+1)
		ct.maxA = max(ct.maxA, int(maxA)+1)
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
		if a != last {
			if int(a) < len(ct.acts) && ct.acts[a] != nil {
				l = ct.acts[a]
			} else {
				l = ct.log(a)
			}
			last = a
		}
		// The common case inline: a count of 1 into a chunk with room
		// and no counts.
		if ch := l.tail; ch != nil && c == 1 && ch.c == nil && len(ch.i) < cap(ch.i) {
			n := len(ch.i)
			ch.i, ch.j = ch.i[:n+1], ch.j[:n+1]
			ch.i[n], ch.j[n] = i, j
			l.maxI = max(l.maxI, i)
			l.n++
		} else {
			l.add(i, j, c)
		}
		maxS = max(maxS, i, j)
		maxA = max(maxA, a)
		ct.total++
	}
	return len(states), nil
}

// Len returns the number of transitions added.
func (ct *Counter) Len() int { return ct.total }

// Dims returns the smallest n and u that hold every transition added.
func (ct *Counter) Dims() (n, u int) { return ct.maxS, ct.maxA }

// Matrices returns the count matrix of every action a < u as one Block each
// (an action without data gives an empty Block), duplicates summed in
// arrival order. It consumes the counter.
func (ct *Counter) Matrices(u int) []*factor.Block {
	out := make([]*factor.Block, u)
	logs := make([]*actionLog, u)
	for a := range u {
		if a < len(ct.acts) {
			logs[a] = ct.acts[a]
		} else {
			logs[a] = ct.sparse[int32(a)]
		}
	}
	dense := ct.maxS <= maxDenseCols
	n := ct.maxS
	*ct = Counter{}
	// Actions are independent: count them on every core, each goroutine
	// taking the next action and freeing its log once counted.
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(u, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			var sc rowScratch
			if dense {
				sc.n = n
			}
			for a := int(next.Add(1)) - 1; a < u; a = int(next.Add(1)) - 1 {
				out[a] = logs[a].block(a, &sc)
				logs[a] = nil
			}
		})
	}
	wg.Wait()
	return out
}

// maxDenseCols bounds the number of states for which rows are summed in a
// dense accumulator (8 bytes a state) rather than by sorting.
const maxDenseCols = 1 << 22

// rowScratch is the scratch space of block: a dense accumulator over the
// columns (when n > 0) with a bitmap of the columns set, or sort keys.
type rowScratch struct {
	n    int
	acc  []float64
	set  []uint64
	keys []uint64
	vals []float64
	gjs  []int32   // TwoPass's group scratch (groupScratch)
	gcs  []float64 // its counts
}

// block builds the CSR matrix of action a from its log (nil: no data).
func (l *actionLog) block(a int, sc *rowScratch) *factor.Block {
	if l == nil || l.n == 0 {
		return &factor.Block{Action: a, Ptr: []int64{0}}
	}
	rows, start, js, cs := l.bucket()
	return sc.sumRows(a, rows, start, js, cs)
}

// sumRows builds the CSR matrix of action a from its transitions bucketed
// by state: rows are the distinct states ascending, start the start of
// each one's run in js (next states) and cs (counts; nil when every count
// is 1), in arrival order. It sums each row's duplicates in that order,
// writing the columns over js (and the sums over cs).
func (sc *rowScratch) sumRows(a int, rows []int32, start []int, js []int32, cs []float64) *factor.Block {
	b := &factor.Block{Action: a, Rows: rows, Ptr: make([]int64, len(rows)+1)}
	vals := cs
	if vals == nil {
		vals = make([]float64, len(js))
		adviseHuge(vals)
		populate(asBytes(vals))
	}
	out := 0
	for r := range rows {
		lo, hi := start[r], start[r+1]
		out = sc.sumRow(js, cs, lo, hi, js, vals, out)
		b.Ptr[r+1] = int64(out)
	}
	b.Cols, b.Vals = shrink(js, out), shrink(vals, out)
	return b
}

// shrink returns x[:n], copied when that frees much of x.
func shrink[T any](x []T, n int) []T {
	if n < len(x)/4*3 {
		return slices.Clone(x[:n])
	}
	return x[:n:n]
}

// bucket sorts the log by state, stably, and frees it: it returns the
// distinct states ascending, the start of each one's run (and the end of
// the last) in js and cs, and the next states and counts (cs nil when
// every count is 1) in that order.
func (l *actionLog) bucket() (rows []int32, start []int, js []int32, cs []float64) {
	js = make([]int32, l.n)
	adviseHuge(js)
	for _, ch := range l.chunks {
		if ch.c != nil {
			cs = make([]float64, l.n)
			adviseHuge(cs)
			break
		}
	}
	nr := int(l.maxI) + 1
	if nr > 2*l.n+1<<16 {
		return l.bucketSparse(js, cs)
	}
	// Counting sort: next[i] is where state i's next transition goes.
	next := make([]int, nr+1)
	for _, ch := range l.chunks {
		for _, i := range ch.i {
			next[i+1]++
		}
	}
	for i := range nr {
		if next[i+1] > 0 {
			rows = append(rows, int32(i))
			start = append(start, next[i])
		}
		next[i+1] += next[i]
	}
	start = append(start, l.n)
	// Place the log chunk after chunk, giving each slab back as soon as
	// its last chunk is placed: the log leaves memory while js fills.
	l.slab, l.tail = nil, nil
	for k, ch := range l.chunks {
		for q, i := range ch.i {
			p := next[i]
			next[i]++
			js[p] = ch.j[q]
			if cs != nil {
				cs[p] = 1
				if ch.c != nil {
					cs[p] = ch.c[q]
				}
			}
		}
		l.chunks[k] = nil
		if ch.s != nil && (k+1 == len(l.chunks) || l.chunks[k+1].s != ch.s) {
			ch.s.release()
		}
	}
	return rows, start, js, cs
}

// bucketSparse is bucket for states far more spread than transitions: it
// sorts (state, arrival) keys instead of counting into a table of every
// state.
func (l *actionLog) bucketSparse(js []int32, cs []float64) (rows []int32, start []int, _ []int32, _ []float64) {
	keys := make([]uint64, 0, l.n)
	for _, ch := range l.chunks {
		for _, i := range ch.i {
			keys = append(keys, uint64(i)<<32|uint64(len(keys)))
		}
	}
	slices.Sort(keys)
	// The log in arrival order, to gather from.
	flatJ := make([]int32, 0, l.n)
	var flatC []float64
	if cs != nil {
		flatC = make([]float64, 0, l.n)
	}
	for _, ch := range l.chunks {
		flatJ = append(flatJ, ch.j...)
		if cs != nil {
			if ch.c != nil {
				flatC = append(flatC, ch.c...)
			} else {
				for range ch.j {
					flatC = append(flatC, 1)
				}
			}
		}
	}
	l.slab, l.tail = nil, nil
	for k, ch := range l.chunks {
		l.chunks[k] = nil
		if ch.s != nil {
			ch.s.release()
		}
	}
	for p, key := range keys {
		k := int(uint32(key))
		js[p] = flatJ[k]
		if cs != nil {
			cs[p] = flatC[k]
		}
		if i := int32(key >> 32); len(rows) == 0 || rows[len(rows)-1] != i {
			rows = append(rows, i)
			start = append(start, p)
		}
	}
	return rows, append(start, l.n), js, cs
}

// sumRow sums the duplicates of one row, the entries [lo, hi) of js and cs
// (nil: counts of 1), in their order, and writes the row's distinct
// columns ascending with their sums to cols and vals from out on; it
// returns the new end. Writing may overlap the input (out <= lo): every
// input of the row is read before the first write.
func (sc *rowScratch) sumRow(js []int32, cs []float64, lo, hi int, cols []int32, vals []float64, out int) int {
	count := func(q int) float64 {
		if cs == nil {
			return 1
		}
		return cs[q]
	}
	if hi-lo == 1 {
		cols[out], vals[out] = js[lo], count(lo)
		return out + 1
	}
	jmin, jmax := js[lo], js[lo]
	for _, j := range js[lo+1 : hi] {
		jmin, jmax = min(jmin, j), max(jmax, j)
	}
	if sc.n > 0 && int(jmax-jmin)/64 <= 4*(hi-lo) {
		// Dense: accumulate by column, then read the set bits in order.
		if sc.acc == nil {
			sc.acc = make([]float64, sc.n)
			sc.set = make([]uint64, (sc.n+63)/64)
		}
		acc, set := sc.acc, sc.set
		if cs == nil {
			for _, j := range js[lo:hi] {
				w, bit := j>>6, uint64(1)<<(j&63)
				if set[w]&bit == 0 {
					set[w] |= bit
					acc[j] = 1
				} else {
					acc[j]++
				}
			}
		} else {
			for q, j := range js[lo:hi] {
				w, bit := j>>6, uint64(1)<<(j&63)
				if set[w]&bit == 0 {
					set[w] |= bit
					acc[j] = cs[lo+q]
				} else {
					acc[j] += cs[lo+q]
				}
			}
		}
		for w := jmin >> 6; w <= jmax>>6; w++ {
			for x := set[w]; x != 0; x &= x - 1 {
				j := w<<6 | int32(bits.TrailingZeros64(x))
				cols[out], vals[out] = j, acc[j]
				out++
			}
			set[w] = 0
		}
		return out
	}
	// Sparse: sort (column, arrival) keys; equal columns stay in arrival
	// order.
	sc.keys, sc.vals = sc.keys[:0], sc.vals[:0]
	for q := lo; q < hi; q++ {
		sc.keys = append(sc.keys, uint64(js[q])<<32|uint64(q-lo))
		sc.vals = append(sc.vals, count(q))
	}
	slices.Sort(sc.keys)
	first := out
	for _, key := range sc.keys {
		j, c := int32(key>>32), sc.vals[uint32(key)]
		if out > first && cols[out-1] == j {
			vals[out-1] += c
			continue
		}
		cols[out], vals[out] = j, c
		out++
	}
	return out
}

// Remap renumbers the transitions added so far: state (and next state) i
// becomes states[i], action a becomes actions[a] (nil: they keep their
// numbers). Both must be one-to-one over the indices added. Matrices
// afterwards is bitwise the Counter that was given the renumbered
// transitions in the same order: a row's duplicates are summed in
// arrival order whatever the numbering. Batch commands count rows with
// ids numbered as first seen and renumber once the vocabulary is sorted
// (Vocab.SortFrom).
func (ct *Counter) Remap(states, actions []int32) {
	logs := map[int32]*actionLog{}
	for a, l := range ct.acts {
		if l != nil {
			logs[int32(a)] = l
		}
	}
	for a, l := range ct.sparse {
		logs[a] = l
	}
	ct.acts, ct.sparse = nil, nil
	maxS, maxA := int32(-1), int32(-1)
	for a, l := range logs {
		l.maxI = 0
		for _, ch := range l.chunks {
			if states != nil {
				for k, i := range ch.i {
					ch.i[k] = states[i]
				}
				for k, j := range ch.j {
					ch.j[k] = states[j]
				}
			}
			for _, i := range ch.i {
				l.maxI = max(l.maxI, i)
			}
			for _, j := range ch.j {
				maxS = max(maxS, j)
			}
		}
		maxS = max(maxS, l.maxI)
		if actions != nil {
			a = actions[a]
		}
		maxA = max(maxA, a)
		if a < denseActions {
			if int(a) >= len(ct.acts) {
				ct.acts = append(ct.acts, make([]*actionLog, int(a)+1-len(ct.acts))...)
			}
			ct.acts[a] = l
		} else {
			if ct.sparse == nil {
				ct.sparse = map[int32]*actionLog{}
			}
			ct.sparse[a] = l
		}
	}
	ct.maxS, ct.maxA = int(maxS)+1, int(maxA)+1
}

// Union returns the count matrices of u actions that hold the nonzeros
// of every set of matrices, summed in set order: each (a, i, j) is the
// first set's count plus the next's, left to right (a Counter fed the
// sets' nonzeros in order).
func Union(u int, sets ...[]*factor.Block) []*factor.Block {
	var ct Counter
	for _, set := range sets {
		for _, b := range set {
			for r, i := range b.Rows {
				for q := b.Ptr[r]; q < b.Ptr[r+1]; q++ {
					// Counts of matrices are valid; Add cannot fail.
					_ = ct.Add(int(i), b.Action, int(b.Cols[q]), b.Vals[q])
				}
			}
		}
	}
	return ct.Matrices(u)
}
