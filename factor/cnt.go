package factor

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// CNT is the counting estimate of the transition matrices, the baseline
// "CNT" of emsf-ijcai2015 §5 (Fig. 2): the maximum-likelihood estimate
// P̂ of incremental-emsf eq. 8,
//
//	P̂^a_ij = C^a_ij / x^a_i,   x^a_i = Σ_j C^a_ij,
//
// or, with additive smoothing β > 0 (Laplace's rule for β = 1),
//
//	P̂^a_ij = (C^a_ij + β) / (x^a_i + n·β).
//
// A row never seen (x^a_i = 0) is uniform, 1/n: the papers leave it open,
// and it is the value of the smoothed rule for every β > 0. With β = 0 a
// transition that was never observed from a seen row has probability 0, so
// the held-out log-likelihood of plain CNT is usually a *TransitionError;
// use β > 0 to compare held-out log-likelihoods.
//
// Storage is sparse: O(u·n + nnz).
type CNT struct {
	n, u int
	beta float64
	// Per action: row i has columns cols[a][ptr[a][i]:ptr[a][i+1]]
	// (ascending) with counts cnt[a][...]; x[a][i] is the row total.
	// Actions without data have nil slices.
	ptr  [][]int64
	cols [][]int32
	cnt  [][]float64
	x    [][]float64
}

// NewCNT counts the nonzeros of the blocks into the estimate of an MDP with
// n states and u actions, with additive smoothing beta ≥ 0 (0 is the plain
// maximum-likelihood estimate). Counts of the same (action, i, j) in
// different blocks are added in block order. It returns an error for a
// block out of shape, a count that is not finite and positive, or a bad
// beta.
func NewCNT(n, u int, blocks []*Block, beta float64) (*CNT, error) {
	if n < 1 || u < 1 {
		panic(fmt.Sprintf("factor: NewCNT: bad shape n=%d u=%d", n, u))
	}
	if !(beta >= 0) || math.IsInf(beta, 0) {
		return nil, fmt.Errorf("factor: CNT smoothing %v must be finite and >= 0", beta)
	}
	type entry struct {
		i, j int32
		c    float64
	}
	// Each action's entries at their final size: growing them by append
	// copies them and touches up to twice the memory, and fresh memory
	// is slow to touch (a page fault per 4 KiB).
	size := make([]int, u)
	for _, b := range blocks {
		if b.Action >= 0 && b.Action < u { // else CheckShape's error below
			size[b.Action] += len(b.Vals)
		}
	}
	per := make([][]entry, u)
	for a := range per {
		per[a] = make([]entry, 0, size[a])
	}
	for k, b := range blocks {
		if err := b.CheckShape(n, u); err != nil {
			return nil, fmt.Errorf("factor: block %d: %w", k, err)
		}
		for r, i := range b.Rows {
			for q := b.Ptr[r]; q < b.Ptr[r+1]; q++ {
				c := b.Vals[q]
				if !(c > 0) || math.IsInf(c, 0) {
					return nil, fmt.Errorf("factor: block %d: count %v of %d --%d--> %d must be finite and > 0",
						k, c, i, b.Action, b.Cols[q])
				}
				per[b.Action] = append(per[b.Action], entry{i, b.Cols[q], c})
			}
		}
	}
	e := &CNT{n: n, u: u, beta: beta,
		ptr: make([][]int64, u), cols: make([][]int32, u), cnt: make([][]float64, u), x: make([][]float64, u)}
	for a, es := range per {
		if len(es) == 0 {
			continue
		}
		// Stable: duplicates stay in block order, so their sum is deterministic.
		slices.SortStableFunc(es, func(p, q entry) int {
			return cmp.Or(cmp.Compare(p.i, q.i), cmp.Compare(p.j, q.j))
		})
		ptr := make([]int64, n+1)
		x := make([]float64, n)
		// Room for every entry: fewer when some repeat (a pair in
		// several blocks).
		cols, cnt := make([]int32, 0, len(es)), make([]float64, 0, len(es))
		for k, en := range es {
			if k > 0 && en.i == es[k-1].i && en.j == es[k-1].j {
				cnt[len(cnt)-1] += en.c
			} else {
				cols = append(cols, en.j)
				cnt = append(cnt, en.c)
				ptr[en.i+1]++
			}
			x[en.i] += en.c
		}
		for i := 0; i < n; i++ {
			ptr[i+1] += ptr[i]
		}
		e.ptr[a], e.cols[a], e.cnt[a], e.x[a] = ptr, cols, cnt, x
	}
	return e, nil
}

// States returns n.
func (e *CNT) States() int { return e.n }

// Actions returns u.
func (e *CNT) Actions() int { return e.u }

// Smoothing returns β.
func (e *CNT) Smoothing() float64 { return e.beta }

// RowTotal returns x^a_i = Σ_j C^a_ij, the number of visits of (i, a).
func (e *CNT) RowTotal(a, i int) float64 {
	if e.x[a] == nil {
		return 0
	}
	return e.x[a][i]
}

// Prob returns P̂^a_ij (see CNT).
func (e *CNT) Prob(a, i, j int) float64 {
	if j < 0 || j >= e.n {
		panic(fmt.Sprintf("factor: CNT.Prob: state %d out of range [0, %d)", j, e.n))
	}
	x := e.RowTotal(a, i)
	if x == 0 {
		return 1 / float64(e.n)
	}
	lo, hi := e.ptr[a][i], e.ptr[a][i+1]
	c := 0.0
	if q, ok := slices.BinarySearch(e.cols[a][lo:hi], int32(j)); ok {
		c = e.cnt[a][lo+int64(q)]
	}
	return (c + e.beta) / (x + float64(e.n)*e.beta)
}

// Row sets dst[j] = P̂^a_ij for every state j; len(dst) must be n.
func (e *CNT) Row(a, i int, dst []float64) {
	if len(dst) != e.n {
		panic(fmt.Sprintf("factor: CNT.Row: len(dst) = %d, want n = %d", len(dst), e.n))
	}
	x := e.RowTotal(a, i)
	if x == 0 {
		for j := range dst {
			dst[j] = 1 / float64(e.n)
		}
		return
	}
	den := x + float64(e.n)*e.beta
	base := e.beta / den
	for j := range dst {
		dst[j] = base
	}
	lo, hi := e.ptr[a][i], e.ptr[a][i+1]
	for q := lo; q < hi; q++ {
		dst[e.cols[a][q]] = (e.cnt[a][q] + e.beta) / den
	}
}
