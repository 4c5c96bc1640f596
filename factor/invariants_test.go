package factor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// Property tests of the invariants of DESIGN §2 on random data.

// ivTriple is one observed transition i --a--> j with count c.
type ivTriple struct {
	a, i, j int
	c       float64
}

// ivBlocks turns triples into blocks of at most rowsPerBlock rows each
// (duplicates summed, in the order given), ordered by action then row:
// the layout of a shard plan with small shards.
func ivBlocks(t testing.TB, u int, ts []ivTriple, rowsPerBlock int) []*Block {
	t.Helper()
	ts = slices.Clone(ts)
	slices.SortStableFunc(ts, func(p, q ivTriple) int {
		return cmp.Or(cmp.Compare(p.a, q.a), cmp.Compare(p.i, q.i), cmp.Compare(p.j, q.j))
	})
	var merged []ivTriple
	for _, tr := range ts {
		if k := len(merged) - 1; k >= 0 && merged[k].a == tr.a && merged[k].i == tr.i && merged[k].j == tr.j {
			merged[k].c += tr.c
			continue
		}
		merged = append(merged, tr)
	}
	var blocks []*Block
	for lo := 0; lo < len(merged); {
		a := merged[lo].a
		hi, rows := lo, 0
		for hi < len(merged) && merged[hi].a == a {
			if hi == lo || merged[hi].i != merged[hi-1].i {
				if rows == rowsPerBlock {
					break
				}
				rows++
			}
			hi++
		}
		var r, c []int32
		var v []float64
		for _, tr := range merged[lo:hi] {
			r, c, v = append(r, int32(tr.i)), append(c, int32(tr.j)), append(v, tr.c)
		}
		b, err := NewBlock(a, r, c, v)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, b)
		lo = hi
	}
	if u > 0 {
		for _, b := range blocks {
			if b.Action >= u {
				t.Fatalf("triple action %d >= u = %d", b.Action, u)
			}
		}
	}
	return blocks
}

// ivDraw returns an index drawn from the unnormalised weights w.
func ivDraw(rng *rand.Rand, w []float64) int {
	s := 0.0
	for _, v := range w {
		s += v
	}
	x := rng.Float64() * s
	for k, v := range w {
		if x < v {
			return k
		}
		x -= v
	}
	for k := len(w) - 1; k >= 0; k-- {
		if w[k] > 0 {
			return k
		}
	}
	panic("ivDraw: all weights zero")
}

// ivSample draws count transitions from the model: action a from actions,
// state i from states (both uniform), hidden l ~ D^a_i, next j ~ K^a_l
// (emsf-ijcai2015 Def. 4). Counts are 1 or, with weighted, in (0.5, 3.5).
// Every sampled transition has positive probability, even under masks.
func ivSample(rng *rand.Rand, md *Model, count int, actions, states []int, weighted bool) []ivTriple {
	m := md.M
	ts := make([]ivTriple, 0, count)
	krow := make([]float64, md.N)
	for range count {
		a := actions[rng.IntN(len(actions))]
		i := states[rng.IntN(len(states))]
		l := ivDraw(rng, md.DRow(a, i))
		kt := md.KT[md.KBlock(a)]
		for j := range krow {
			krow[j] = kt[j*m+l]
		}
		j := ivDraw(rng, krow)
		c := 1.0
		if weighted {
			c = 0.5 + 3*rng.Float64()
		}
		ts = append(ts, ivTriple{a, i, j, c})
	}
	return ts
}

// ivCase is one random problem.
type ivCase struct {
	name    string
	n, m, u int
	tie     Tie
	seed    uint64
	// visited is the fraction of states with data; noDataAction, if >= 0,
	// is an action that never appears in the data.
	visited      float64
	noDataAction int
	weighted     bool
}

func ivCases() []ivCase {
	var cs []ivCase
	shapes := []struct {
		n, m, u      int
		visited      float64
		noDataAction int
		weighted     bool
	}{
		{7, 1, 1, 1, -1, false},
		{12, 3, 2, 0.7, -1, true},
		{20, 5, 3, 0.6, 2, false},
		{33, 6, 2, 0.8, -1, true},
		{16, 8, 1, 0.5, -1, false},
	}
	for k, s := range shapes {
		for _, tie := range []Tie{TieNone, TieSharedK, TieSharedD} {
			if s.u == 1 && tie != TieNone {
				continue
			}
			cs = append(cs, ivCase{
				name: fmt.Sprintf("n%d_m%d_u%d_%s", s.n, s.m, s.u, tie),
				n:    s.n, m: s.m, u: s.u, tie: tie, seed: uint64(100 + 7*k + int(tie)),
				visited: s.visited, noDataAction: s.noDataAction, weighted: s.weighted,
			})
		}
	}
	return cs
}

// data returns the blocks of the case: transitions sampled from a random
// "true" model of the same shape (seed+1), split into blocks of up to
// rowsPerBlock rows, plus the initial model (seed) and the states and actions with data.
func (c ivCase) data(t testing.TB, count, rowsPerBlock int) (md *Model, blocks []*Block, states, actions []int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(c.seed, 1))
	truth := NewRandom(c.n, c.m, c.u, c.tie, c.seed+1)
	for i := 0; i < c.n; i++ {
		if i == 0 || rng.Float64() < c.visited {
			states = append(states, i)
		}
	}
	for a := 0; a < c.u; a++ {
		if a != c.noDataAction {
			actions = append(actions, a)
		}
	}
	ts := ivSample(rng, truth, count, actions, states, c.weighted)
	return NewRandom(c.n, c.m, c.u, c.tie, c.seed), ivBlocks(t, c.u, ts, rowsPerBlock), states, actions
}

// ivCheckStochastic fails unless every row of D and K is >= 0 and sums to
// 1 within 1e-12 (DESIGN §2 invariant 1; rows are sums of m ≤ 8 or n ≤ 33
// terms of at most 1, each rounding ≤ 1.1e-16, so 1e-12 is generous).
func ivCheckStochastic(t *testing.T, md *Model, when string) {
	t.Helper()
	n, m := md.N, md.M
	for b, d := range md.D {
		for i := 0; i < n; i++ {
			s := 0.0
			for _, v := range d[i*m : i*m+m] {
				if !(v >= 0) {
					t.Fatalf("%s: D block %d row %d has entry %v", when, b, i, v)
				}
				s += v
			}
			if math.Abs(s-1) > 1e-12 {
				t.Fatalf("%s: D block %d row %d sums to %.17g", when, b, i, s)
			}
		}
	}
	for b, kt := range md.KT {
		sums := make([]float64, m)
		for j := 0; j < n; j++ {
			for l, v := range kt[j*m : j*m+m] {
				if !(v >= 0) {
					t.Fatalf("%s: K block %d [%d,%d] = %v", when, b, l, j, v)
				}
				sums[l] += v
			}
		}
		for l, s := range sums {
			if math.Abs(s-1) > 1e-12 {
				t.Fatalf("%s: K block %d row %d sums to %.17g", when, b, l, s)
			}
		}
	}
}

// TestInvariantsRandom runs 30 EM iterations (α = 1) on every random case
// and checks after every pass and commit: rows stochastic and non-negative
// (invariant 1), loglik non-decreasing (invariant 2), Σx = N (invariant 3),
// rows without data unchanged bitwise.
func TestInvariantsRandom(t *testing.T) {
	for _, c := range ivCases() {
		t.Run(c.name, func(t *testing.T) {
			md, blocks, _, _ := c.data(t, 40*c.n, 3)
			init := md.Clone()
			total := TotalCount(blocks)
			nnz := 0
			for _, b := range blocks {
				nnz += b.NNZ()
			}
			seen := ivSeenRows(md, blocks)
			acc := NewAccumulator(md)
			dataTerm := DataTerm(blocks)
			prev := math.Inf(-1)
			ivCheckStochastic(t, md, "init")
			for it := 1; it <= 30; it++ {
				if err := Pass(context.Background(), md, blocks, acc, 1, true); err != nil {
					t.Fatal(err)
				}
				// Invariant 3: every count seen exactly once.
				if err := CheckSumX(acc.SumX, total); err != nil {
					t.Fatalf("iteration %d: %v", it, err)
				}
				sx := 0.0
				for _, x := range acc.X {
					for _, v := range x {
						sx += v
					}
				}
				if math.Abs(sx-total) > 1e-12*total || acc.NNZ != nnz {
					t.Fatalf("iteration %d: Σx over rows = %v, NNZ = %d; want %v, %d", it, sx, acc.NNZ, total, nnz)
				}
				// Invariant 2: EM never decreases the likelihood. The
				// computed loglik is a sum of ~nnz terms, each rounded, so it
				// carries a relative error of order nnz·1.1e-16 ≈ 1e-13;
				// near convergence the true increase can be smaller than
				// that, so a decrease within 1e-9·|L| is rounding, not a
				// bug.
				if acc.LogLik < prev-1e-9*math.Abs(prev) {
					t.Fatalf("iteration %d: loglik fell from %.17g to %.17g", it, prev, acc.LogLik)
				}
				prev = acc.LogLik
				acc.Commit(md, 1, dataTerm)
				ivCheckStochastic(t, md, fmt.Sprintf("iteration %d", it))
			}
			// Rows with no data keep their values bitwise.
			m := md.M
			for b, d := range md.D {
				for i := 0; i < md.N; i++ {
					if seen[b][i] {
						continue
					}
					for l := 0; l < m; l++ {
						if math.Float64bits(d[i*m+l]) != math.Float64bits(init.D[b][i*m+l]) {
							t.Fatalf("D block %d row %d has no data but changed", b, i)
						}
					}
				}
			}
			if c.noDataAction >= 0 && c.tie != TieSharedK {
				a := c.noDataAction
				for k, v := range md.KT[a] {
					if math.Float64bits(v) != math.Float64bits(init.KT[a][k]) {
						t.Fatalf("K of action %d has no data but changed at %d", a, k)
					}
				}
			}
		})
	}
}

// ivSeenRows reports, per D block, which rows have data in some block.
func ivSeenRows(md *Model, blocks []*Block) [][]bool {
	seen := make([][]bool, len(md.D))
	for b := range seen {
		seen[b] = make([]bool, md.N)
	}
	for _, bl := range blocks {
		for _, i := range bl.Rows {
			seen[md.DBlock(bl.Action)][i] = true
		}
	}
	return seen
}

// TestInvariantWorkersBitwise: the same blocks give a bitwise-identical
// model after 5 iterations with 1, 2 and 7 workers (invariant 4).
func TestInvariantWorkersBitwise(t *testing.T) {
	for _, c := range ivCases() {
		t.Run(c.name, func(t *testing.T) {
			md0, blocks, _, _ := c.data(t, 30*c.n, 1)
			if len(blocks) < 7 {
				t.Fatalf("only %d blocks: the test needs many small ones", len(blocks))
			}
			var ref *Model
			for _, w := range []int{1, 2, 7} {
				md := md0.Clone()
				res, err := Fit(context.Background(), md, blocks, FitOptions{Workers: w, Converger: Converger{MaxIter: 5}})
				if err != nil {
					t.Fatal(err)
				}
				if res.Iterations != 5 || res.Status != IterationLimit {
					t.Fatalf("workers %d: %d iterations, status %v", w, res.Iterations, res.Status)
				}
				if ref == nil {
					ref = md
					continue
				}
				if !md.Equal(ref) || math.Float64bits(md.LogLik) != math.Float64bits(ref.LogLik) {
					t.Fatalf("workers %d: model differs from workers 1 (loglik %.17g vs %.17g)", w, md.LogLik, ref.LogLik)
				}
			}
		})
	}
}

// ivMask zeroes entries of md at random (each D and K row keeps at least one
// nonzero) and renormalises, returning md.
func ivMask(rng *rand.Rand, md *Model, frac float64) *Model {
	n, m := md.N, md.M
	for _, d := range md.D {
		for i := 0; i < n; i++ {
			keep := rng.IntN(m)
			for l := 0; l < m; l++ {
				if l != keep && rng.Float64() < frac {
					d[i*m+l] = 0
				}
			}
		}
		normalizeRows(d, n, m)
	}
	for _, kt := range md.KT {
		for l := 0; l < m; l++ {
			keep := rng.IntN(n)
			for j := 0; j < n; j++ {
				if j != keep && rng.Float64() < frac {
					kt[j*m+l] = 0
				}
			}
		}
		normalizeCols(kt, n, m)
	}
	return md
}

// TestInvariantMasks: entries zero at init stay exactly zero, with α = 1
// and α < 1; a hidden state that no D row can reach (y = 0) keeps its K
// row bitwise.
func TestInvariantMasks(t *testing.T) {
	for _, c := range ivCases() {
		if c.m < 3 {
			continue
		}
		for _, alpha := range []float64{1, 0.4} {
			t.Run(fmt.Sprintf("%s_alpha%v", c.name, alpha), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(c.seed, 2))
				md := ivMask(rng, NewRandom(c.n, c.m, c.u, c.tie, c.seed), 0.4)
				// Hidden state m-1 unreachable: column m-1 of every D zero.
				dead := c.m - 1
				for _, d := range md.D {
					for i := 0; i < c.n; i++ {
						d[i*c.m+dead] = 0
						if slices.Max(d[i*c.m:i*c.m+c.m]) == 0 {
							d[i*c.m] = 1
						}
					}
					normalizeRows(d, c.n, c.m)
				}
				var states, actions []int
				for i := 0; i < c.n; i++ {
					states = append(states, i)
				}
				for a := 0; a < c.u; a++ {
					actions = append(actions, a)
				}
				// Data from the masked model: every transition is possible.
				blocks := ivBlocks(t, c.u, ivSample(rng, md, 30*c.n, actions, states, c.weighted), 4)
				init := md.Clone()
				res, err := Fit(context.Background(), md, blocks, FitOptions{Alpha: alpha, Workers: 2, Converger: Converger{MaxIter: 10}})
				if err != nil {
					t.Fatal(err)
				}
				if res.Iterations != 10 {
					t.Fatalf("%d iterations", res.Iterations)
				}
				ivCheckStochastic(t, md, "after fit")
				for b := range md.D {
					for k, v := range init.D[b] {
						if v == 0 && md.D[b][k] != 0 {
							t.Fatalf("D block %d entry %d was 0, is %v", b, k, md.D[b][k])
						}
					}
				}
				for b := range md.KT {
					for k, v := range init.KT[b] {
						if v == 0 && md.KT[b][k] != 0 {
							t.Fatalf("K block %d entry %d was 0, is %v", b, k, md.KT[b][k])
						}
					}
					for j := 0; j < c.n; j++ {
						k := j*c.m + dead
						if math.Float64bits(md.KT[b][k]) != math.Float64bits(init.KT[b][k]) {
							t.Fatalf("K block %d row %d (y = 0) changed at column %d", b, dead, j)
						}
					}
				}
			})
		}
	}
}

// TestInvariantAlphaStochastic: commits with α < 1 (incremental-emsf
// eq. 13) keep every row stochastic, after every commit.
func TestInvariantAlphaStochastic(t *testing.T) {
	for _, c := range ivCases() {
		t.Run(c.name, func(t *testing.T) {
			md, blocks, _, _ := c.data(t, 20*c.n, 2)
			acc := NewAccumulator(md)
			for it, alpha := range []float64{0.1, 0.5, 0.9, 0.25, 1e-3, 0.999} {
				if err := Pass(context.Background(), md, blocks, acc, 3, false); err != nil {
					t.Fatal(err)
				}
				acc.Commit(md, alpha, 0)
				ivCheckStochastic(t, md, fmt.Sprintf("commit %d (α = %v)", it, alpha))
			}
		})
	}
}

// TestInvariantTransitionError: a masked model that gives probability 0 to
// an observed transition fails with a *TransitionError naming it, leaves
// the model unchanged (no NaN), for 1 and 2 workers.
func TestInvariantTransitionError(t *testing.T) {
	// n = 4, m = 2: state 0 reaches only hidden state 0, whose K row gives
	// state 3 probability 0; (0 → 3) is observed.
	md := NewModel(4, 2, 1, TieNone)
	copy(md.D[0], []float64{1, 0, 0.5, 0.5, 0.5, 0.5, 0, 1})
	copy(md.KT[0], []float64{
		1. / 3, 0.25,
		1. / 3, 0.25,
		1. / 3, 0.25,
		0, 0.25,
	})
	if err := md.Validate(); err != nil {
		t.Fatal(err)
	}
	var ts []ivTriple
	for i := 0; i < 4; i++ {
		for j := 0; j < 4; j++ {
			ts = append(ts, ivTriple{0, i, j, 1})
		}
	}
	// {2, 1} has more blocks than Pass's window of 2·workers partials: an
	// early error return must cancel the workers waiting for a slot.
	for _, tc := range []struct{ workers, rowsPerBlock int }{{1, 1}, {1, 4}, {2, 4}, {2, 1}} {
		w := tc.workers
		blocks := ivBlocks(t, 1, ts, tc.rowsPerBlock)
		if tc.rowsPerBlock == 1 {
			for range 3 {
				blocks = append(blocks, blocks[1:4]...)
			}
		}
		fit := md.Clone()
		_, err := Fit(context.Background(), fit, blocks, FitOptions{Workers: w, Converger: Converger{MaxIter: 3}})
		var te *TransitionError
		if !errors.As(err, &te) {
			t.Fatalf("workers %d: error %v, want *TransitionError", w, err)
		}
		if te.Action != 0 || te.From != 0 || te.To != 3 || te.Count != 1 {
			t.Errorf("workers %d: error names %+v, want 0 --0--> 3 count 1", w, *te)
		}
		if !fit.Equal(md) {
			t.Errorf("workers %d: model changed by a failed pass", w)
		}
		for _, d := range fit.D {
			for _, v := range d {
				if math.IsNaN(v) {
					t.Fatalf("workers %d: NaN in D", w)
				}
			}
		}
	}
	blocks := ivBlocks(t, 1, ts, 1)
	_, _, err := LogLikelihood(md, blocks)
	var te *TransitionError
	if !errors.As(err, &te) || te.From != 0 || te.To != 3 {
		t.Errorf("LogLikelihood error %v, want *TransitionError 0 → 3", err)
	}
}

// TestMergeRejects: Merge refuses a partial with NaN or negative values,
// wrong dimensions, out-of-order or out-of-range indices, or SumX ≠ Σ X,
// and leaves the accumulator unchanged.
func TestMergeRejects(t *testing.T) {
	md := NewRandom(6, 3, 2, TieNone, 5)
	b, err := NewBlock(1, []int32{1, 1, 3, 4}, []int32{0, 5, 2, 2}, []float64{2, 1, 4, 1.5})
	if err != nil {
		t.Fatal(err)
	}
	var s Scratch
	var good Partial
	if err := Compute(md, b, &s, &good, true); err != nil {
		t.Fatal(err)
	}
	clone := func() *Partial {
		p := good
		p.Rows, p.Dh, p.X = slices.Clone(good.Rows), slices.Clone(good.Dh), slices.Clone(good.X)
		p.Cols, p.KhT, p.Y = slices.Clone(good.Cols), slices.Clone(good.KhT), slices.Clone(good.Y)
		return &p
	}
	cases := []struct {
		name string
		edit func(p *Partial)
	}{
		{"NaN in Dh", func(p *Partial) { p.Dh[1] = math.NaN() }},
		{"NaN in KhT", func(p *Partial) { p.KhT[0] = math.NaN() }},
		{"NaN in Y", func(p *Partial) { p.Y[2] = math.NaN() }},
		{"Inf in X", func(p *Partial) { p.X[0] = math.Inf(1); p.SumX = math.Inf(1) }},
		{"negative Dh", func(p *Partial) { p.Dh[0] = -1e-300 }},
		{"negative X", func(p *Partial) { p.SumX -= 2 * p.X[1]; p.X[1] = -p.X[1] }},
		{"negative KhT", func(p *Partial) { p.KhT[2] = -0.5 }},
		{"short Dh", func(p *Partial) { p.Dh = p.Dh[:len(p.Dh)-1] }},
		{"short X", func(p *Partial) { p.X = p.X[:1] }},
		{"long KhT", func(p *Partial) { p.KhT = append(p.KhT, 0) }},
		{"short Y", func(p *Partial) { p.Y = p.Y[:2] }},
		{"rows out of order", func(p *Partial) { p.Rows[0], p.Rows[1] = p.Rows[1], p.Rows[0] }},
		{"duplicate row", func(p *Partial) { p.Rows[1] = p.Rows[0] }},
		{"row out of range", func(p *Partial) { p.Rows[2] = 6 }},
		{"negative row", func(p *Partial) { p.Rows[0] = -1 }},
		{"cols out of order", func(p *Partial) { p.Cols[0], p.Cols[1] = p.Cols[1], p.Cols[0] }},
		{"col out of range", func(p *Partial) { p.Cols[len(p.Cols)-1] = 99 }},
		{"action out of range", func(p *Partial) { p.Action = 2 }},
		{"SumX too big", func(p *Partial) { p.SumX = math.Nextafter(p.SumX, math.Inf(1)) }},
		{"SumX zero", func(p *Partial) { p.SumX = 0 }},
		{"infinite loglik", func(p *Partial) { p.LogLik = math.Inf(-1) }},
	}
	acc := NewAccumulator(md)
	if err := acc.Merge(clone()); err != nil {
		t.Fatalf("good partial rejected: %v", err)
	}
	before := ivAccClone(acc)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := clone()
			tc.edit(p)
			if err := acc.Merge(p); err == nil {
				t.Fatal("Merge accepted the partial")
			}
			if !ivAccEqual(acc, before) {
				t.Fatal("a rejected Merge changed the accumulator")
			}
		})
	}
	// A partial with NaN loglik (not computed) is accepted; the sum is NaN.
	p := clone()
	p.LogLik = math.NaN()
	if err := acc.Merge(p); err != nil || !math.IsNaN(acc.LogLik) {
		t.Errorf("partial without loglik: err %v, acc loglik %v", err, acc.LogLik)
	}
}

func ivAccClone(a *Accumulator) *Accumulator {
	c := *a
	cl := func(xs [][]float64) [][]float64 {
		out := make([][]float64, len(xs))
		for k := range xs {
			out[k] = slices.Clone(xs[k])
		}
		return out
	}
	c.Dh, c.X, c.KhT, c.Y = cl(a.Dh), cl(a.X), cl(a.KhT), cl(a.Y)
	return &c
}

func ivAccEqual(a, b *Accumulator) bool {
	eq := func(x, y [][]float64) bool {
		for k := range x {
			for q := range x[k] {
				if math.Float64bits(x[k][q]) != math.Float64bits(y[k][q]) {
					return false
				}
			}
		}
		return true
	}
	return eq(a.Dh, b.Dh) && eq(a.X, b.X) && eq(a.KhT, b.KhT) && eq(a.Y, b.Y) &&
		math.Float64bits(a.LogLik) == math.Float64bits(b.LogLik) && a.SumX == b.SumX && a.NNZ == b.NNZ
}

// TestComputeAfterTransitionErrorLeavesScratchClean: a Scratch reused after
// a failed Compute gives the same partial as a fresh one.
func TestComputeAfterTransitionErrorLeavesScratchClean(t *testing.T) {
	md := NewModel(3, 2, 1, TieNone)
	copy(md.D[0], []float64{1, 0, 0.5, 0.5, 0, 1})
	copy(md.KT[0], []float64{0.5, 0.2, 0.5, 0.3, 0, 0.5})
	if err := md.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := ivBlocks(t, 1, []ivTriple{{0, 0, 1, 1}, {0, 0, 2, 1}}, 1)[0] // 0 → 2 has probability 0
	good := ivBlocks(t, 1, []ivTriple{{0, 1, 1, 2}, {0, 1, 2, 1}}, 1)[0]
	var s Scratch
	var p, want Partial
	var te *TransitionError
	if err := Compute(md, bad, &s, &p, true); !errors.As(err, &te) {
		t.Fatalf("Compute on the masked transition: %v, want *TransitionError", err)
	}
	if err := Compute(md, good, &s, &p, true); err != nil {
		t.Fatal(err)
	}
	if err := Compute(md, good, new(Scratch), &want, true); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Cols, want.Cols) || !slices.Equal(p.KhT, want.KhT) {
		t.Fatalf("reused scratch: cols %v KhT %v; fresh: cols %v KhT %v", p.Cols, p.KhT, want.Cols, want.KhT)
	}
}
