package factor

import (
	"context"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestDyadicPieces(t *testing.T) {
	for _, g := range []int{1, 2, 4, 8, 16, 32, 64} {
		maxPieces := max(1, 2*bits.TrailingZeros(uint(g)))
		for lo := 0; lo <= g; lo++ {
			for hi := lo; hi <= g; hi++ {
				ps := DyadicPieces(lo, hi, g)
				at := lo
				for _, p := range ps {
					if p.Lo != at || p.Lo%(1<<p.Level) != 0 || p.Hi() > hi {
						t.Fatalf("G=%d [%d,%d): piece %+v is not the aligned next piece (at %d): %v", g, lo, hi, p, at, ps)
					}
					at = p.Hi()
				}
				if at != hi || len(ps) > maxPieces {
					t.Fatalf("G=%d [%d,%d): pieces %v cover up to %d, %d pieces (max %d)", g, lo, hi, ps, at, len(ps), maxPieces)
				}
			}
		}
	}
	// An aligned dyadic range is one piece: what a node holding a subtree sends.
	if ps := DyadicPieces(8, 16, 16); len(ps) != 1 || ps[0] != (Piece{8, 3}) {
		t.Errorf("DyadicPieces(8, 16, 16) = %v, want one piece", ps)
	}
}

func TestTreeFoldOrder(t *testing.T) {
	// The root of 4 leaves is (a+b)+(c+d), pushed one by one or as
	// pieces: values chosen so that the left fold ((a+b)+c)+d differs.
	a, b, c, d := 1.0, 1e-16, 1e-16, 1e-16
	want := (a + b) + (c + d)
	if want == ((a+b)+c)+d {
		t.Fatal("test values do not tell the orders apart")
	}
	add := func(l, r float64) float64 { return l + r }
	for _, pieces := range [][]Piece{
		{{0, 0}, {1, 0}, {2, 0}, {3, 0}},
		{{0, 1}, {2, 0}, {3, 0}},
		{{0, 0}, {1, 0}, {2, 1}},
		{{0, 2}},
	} {
		leaf := []float64{a, b, c, d}
		tf := NewTreeFold(4, add)
		for _, p := range pieces {
			v := 0.0
			if p.Level == 0 {
				v = leaf[p.Lo]
			} else {
				sub := NewTreeFold(1<<p.Level, add)
				for g := p.Lo; g < p.Hi(); g++ {
					if err := sub.Push(Piece{g - p.Lo, 0}, leaf[g]); err != nil {
						t.Fatal(err)
					}
				}
				v, _ = sub.Root()
			}
			if err := tf.Push(p, v); err != nil {
				t.Fatal(err)
			}
			if len(tf.stack) > 3 {
				t.Fatalf("stack holds %d values, want at most log2 G + 1 = 3", len(tf.stack))
			}
		}
		if got, ok := tf.Root(); !ok || got != want {
			t.Errorf("pieces %v: root %v (%v), want %v", pieces, got, ok, want)
		}
	}
	tf := NewTreeFold(4, add)
	for _, bad := range []Piece{{1, 0}, {0, 3}, {0, -1}} {
		if err := tf.Push(bad, 1); err == nil {
			t.Errorf("Push(%+v) on an empty fold of 4 accepted", bad)
		}
	}
	if err := tf.Push(Piece{0, 0}, 1); err != nil {
		t.Fatal(err)
	}
	if err := tf.Push(Piece{1, 1}, 1); err == nil {
		t.Error("Push of the unaligned piece [1, 3) accepted")
	}
}

func TestPlanReduce(t *testing.T) {
	// Action 1 has 10 blocks of 100 nonzeros, action 0 two of 50;
	// blocks interleaved by action to check the order.
	var actions, nnz []int
	for k := range 10 {
		actions, nnz = append(actions, 1), append(nnz, 100)
		if k%5 == 0 {
			actions, nnz = append(actions, 0), append(nnz, 50)
		}
	}
	pl := PlanReduce(actions, nnz, TieNone, 300)
	if len(pl.Trees) != 2 || pl.Trees[0].KBlock != 0 || pl.Trees[1].KBlock != 1 {
		t.Fatalf("trees %+v, want one per action", pl.Trees)
	}
	if g := pl.Trees[0].Groups(); g != 1 {
		t.Errorf("action 0 (100 nonzeros, 300 per group): G = %d, want 1", g)
	}
	// 1000 nonzeros / 300 → 4 groups, cut where blocks start at
	// k·250: blocks 0-2 | 3-4 | 5-7 | 8-9 (starting at 0, 300, 500, 800).
	if got, want := pl.Trees[1].Start, []int{2, 5, 7, 10, 12}; !slices.Equal(got, want) {
		t.Errorf("action 1 group starts %v, want %v", got, want)
	}
	for pos, k := range pl.Order {
		if (pos < 2) != (actions[k] == 0) || (pos > 0 && actions[k] == actions[pl.Order[pos-1]] && k < pl.Order[pos-1]) {
			t.Fatalf("order %v is not by K block, then block", pl.Order)
		}
	}
	if sk := PlanReduce(actions, nnz, TieSharedK, 300); len(sk.Trees) != 1 || sk.Trees[0].Groups() != 4 || !slices.IsSorted(sk.Order) {
		t.Errorf("shared K: %+v, want one tree of 4 groups over all blocks in order", sk)
	}
	if big := PlanReduce([]int{0}, []int{1 << 30}, TieNone, 1); big.Trees[0].Groups() != MaxGroups {
		t.Errorf("G = %d, want the cap %d", big.Trees[0].Groups(), MaxGroups)
	}
}

// treeCase returns random blocks (two actions, many small blocks) and a
// model for the property tests.
func treeCase(t *testing.T, seed uint64, tie Tie) ([]*Block, *Model) {
	t.Helper()
	const n = 60
	var blocks []*Block
	for _, mat := range RandomCounts(n, 2, 7, 5, seed) {
		// Blocks of 4 rows.
		for r := 0; r < len(mat.Rows); r += 4 {
			hi := min(r+4, len(mat.Rows))
			lo := mat.Ptr[r]
			b := &Block{Action: mat.Action, Rows: mat.Rows[r:hi], Cols: mat.Cols[lo:mat.Ptr[hi]], Vals: mat.Vals[lo:mat.Ptr[hi]]}
			for q := r; q <= hi; q++ {
				b.Ptr = append(b.Ptr, mat.Ptr[q]-lo)
			}
			blocks = append(blocks, b)
		}
	}
	return blocks, NewRandom(n, 5, 2, tie, seed)
}

func sameBits(a, b []float64) bool {
	return slices.EqualFunc(a, b, func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) })
}

// TestTreeAnyPartition: the K̂, Y and scalars of one tree are bitwise the
// same when nodes holding contiguous ranges of groups (P = 1..8, random
// cuts) pre-sum their dyadic pieces and the pieces arrive in any order
// (held until their turn, then folded in tree order), as when one
// process folds every partial.
func TestTreeAnyPartition(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		blocks, md := treeCase(t, seed, TieNone)
		const groupNNZ = 20 // ≈ 210 nonzeros per action: 16 groups
		plan := PlanBlocks(blocks, md.Tie, groupNNZ)
		acc := NewAccumulator(md)
		var ps Passer
		ps.GroupNNZ = groupNNZ
		if err := ps.Pass(context.Background(), md, blocks, acc, 1, true); err != nil {
			t.Fatal(err)
		}
		n, m := md.N, md.M
		parts := make([]Partial, len(blocks))
		for k, b := range blocks {
			if err := Compute(md, b, new(Scratch), &parts[k], true); err != nil {
				t.Fatal(err)
			}
		}
		combine := func(l, r *kSum) *kSum { l.addSum(r, m); return l }
		rng := rand.New(rand.NewPCG(seed, 99))
		var roots [][3]float64 // per tree, from P = 1
		for _, tr := range plan.Trees {
			g := tr.Groups()
			if g < 8 {
				t.Fatalf("tree of K block %d has %d groups; the test wants several", tr.KBlock, g)
			}
			// leaf returns a fresh group value: the left fold of its blocks.
			leaf := func(grp int) *kSum {
				s := newKSum(n, m, nil, nil)
				for pos := tr.Start[grp]; pos < tr.Start[grp+1]; pos++ {
					s.addPartial(&parts[plan.Order[pos]], m)
				}
				return s
			}
			for p := 1; p <= 8; p++ {
				cuts := []int{0, g}
				for len(cuts) < p+1 {
					if c := rng.IntN(g + 1); !slices.Contains(cuts, c) {
						cuts = append(cuts, c)
					}
				}
				slices.Sort(cuts)
				// Each node sends one value per dyadic piece of its range.
				type msg struct {
					p Piece
					v *kSum
				}
				var msgs []msg
				for k := 0; k < p; k++ {
					for _, pc := range DyadicPieces(cuts[k], cuts[k+1], g) {
						sub := NewTreeFold(1<<pc.Level, combine)
						for grp := pc.Lo; grp < pc.Hi(); grp++ {
							if err := sub.Push(Piece{grp - pc.Lo, 0}, leaf(grp)); err != nil {
								t.Fatal(err)
							}
						}
						v, _ := sub.Root()
						msgs = append(msgs, msg{pc, v})
					}
				}
				rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
				owner := NewTreeFold(g, combine)
				held := map[int]msg{}
				for _, mg := range msgs {
					held[mg.p.Lo] = mg
					for {
						h, ok := held[owner.Next()]
						if !ok {
							break
						}
						delete(held, h.p.Lo)
						if err := owner.Push(h.p, h.v); err != nil {
							t.Fatal(err)
						}
					}
				}
				root, ok := owner.Root()
				if !ok {
					t.Fatal("owner's fold incomplete")
				}
				b := tr.KBlock
				if !sameBits(root.kh, acc.KhT[b]) || !sameBits(root.y, acc.Y[b]) {
					t.Fatalf("seed %d, K block %d, P=%d (cuts %v): K̂ or Y differs from the local fold", seed, b, p, cuts)
				}
				rs := [3]float64{root.ll, root.sx, float64(root.nnz)}
				if p == 1 {
					roots = append(roots, rs)
				} else if !sameBits(rs[:], roots[len(roots)-1][:]) {
					t.Fatalf("seed %d, K block %d, P=%d (cuts %v): scalars %v, want %v", seed, b, p, cuts, rs, roots[len(roots)-1])
				}
			}
		}
		// The accumulator's scalars are the left fold of the roots'.
		var ll, sx float64
		for _, rs := range roots {
			ll += rs[0]
			sx += rs[1]
		}
		if !sameBits([]float64{ll, sx}, []float64{acc.LogLik, acc.SumX}) {
			t.Fatalf("seed %d: accumulator loglik, Σx %v, %v; fold of the roots %v, %v", seed, acc.LogLik, acc.SumX, ll, sx)
		}
	}
}

// TestPassTreeWorkers: passes with 1, 2, 3 and 8 goroutines give bitwise
// the same accumulator under a plan with several groups, in every tie
// mode, and its scalars are the left fold of the trees' roots.
func TestPassTreeWorkers(t *testing.T) {
	for _, tie := range []Tie{TieNone, TieSharedK, TieSharedD} {
		blocks, md := treeCase(t, 5, tie)
		var want *Accumulator
		for _, w := range []int{1, 2, 3, 8} {
			acc := NewAccumulator(md)
			ps := Passer{GroupNNZ: 20}
			// Twice with the same Passer: its buffers are reused.
			for range 2 {
				if err := ps.Pass(context.Background(), md, blocks, acc, w, true); err != nil {
					t.Fatal(err)
				}
			}
			if want == nil {
				want = acc
				if err := CheckSumX(acc.SumX, TotalCount(blocks)); err != nil {
					t.Fatal(err)
				}
				continue
			}
			for b := range acc.KhT {
				if !sameBits(acc.KhT[b], want.KhT[b]) || !sameBits(acc.Y[b], want.Y[b]) {
					t.Fatalf("%v, %d workers: K block %d differs from 1 worker's", tie, w, b)
				}
			}
			for b := range acc.Dh {
				if !sameBits(acc.Dh[b], want.Dh[b]) || !sameBits(acc.X[b], want.X[b]) {
					t.Fatalf("%v, %d workers: D block %d differs from 1 worker's", tie, w, b)
				}
			}
			if !sameBits([]float64{acc.LogLik, acc.SumX}, []float64{want.LogLik, want.SumX}) || acc.NNZ != want.NNZ {
				t.Fatalf("%v, %d workers: scalars differ", tie, w)
			}
		}
	}
}

// TestReducerRejectsWrongBlock: a partial of another K block than the
// one due is an error, and nothing changes.
func TestReducerRejectsWrongBlock(t *testing.T) {
	blocks, md := treeCase(t, 6, TieNone)
	plan := PlanBlocks(blocks, md.Tie, 0)
	acc := NewAccumulator(md)
	var r Reducer
	r.Reset(acc, plan)
	last := blocks[plan.Order[len(plan.Order)-1]]
	var p Partial
	if err := Compute(md, last, new(Scratch), &p, true); err != nil {
		t.Fatal(err)
	}
	if blocks[r.Next()].Action == last.Action {
		t.Fatal("test wants blocks of two actions")
	}
	if err := r.Merge(&p); err == nil {
		t.Fatal("partial of action 1 merged where action 0 is due")
	}
	if acc.NNZ != 0 || r.Next() != plan.Order[0] {
		t.Fatal("rejected partial changed the reducer")
	}
}

// TestPlanOnly: the plan of some K blocks' trees (ReducePlan.Only) is
// the plan of those blocks alone: the same trees, groups and order, its
// block indices those of the whole plan.
func TestPlanOnly(t *testing.T) {
	blocks, _ := treeCase(t, 3, TieNone)
	blocks = append(blocks, RandomCounts(40, 3, 4, 5, 9)...)
	plan := PlanBlocks(blocks, TieNone, 20)
	for _, keep := range [][]bool{{true, false, true}, {false, true, false}, {false, false, true}, {true, true, true}, {false, false, false}} {
		var sub []*Block
		var idx []int
		for k, b := range blocks {
			if keep[b.Action] {
				sub, idx = append(sub, b), append(idx, k)
			}
		}
		want := PlanBlocks(sub, TieNone, 20)
		for pos, k := range want.Order {
			want.Order[pos] = idx[k]
		}
		got := plan.Only(func(kb int) bool { return keep[kb] })
		if !slices.Equal(got.Order, want.Order) || got.GroupNNZ != want.GroupNNZ || len(got.Trees) != len(want.Trees) {
			t.Fatalf("keep %v: plan %+v, want %+v", keep, got, want)
		}
		for i := range got.Trees {
			if got.Trees[i].KBlock != want.Trees[i].KBlock || !slices.Equal(got.Trees[i].Start, want.Trees[i].Start) {
				t.Fatalf("keep %v: tree %d %+v, want %+v", keep, i, got.Trees[i], want.Trees[i])
			}
		}
	}
}
