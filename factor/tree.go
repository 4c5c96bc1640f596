package factor

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
)

// ReduceOrder names the canonical order in which this package sums the
// statistics of a pass (recorded in model metadata as reduce_order). See
// ReducePlan.
const ReduceOrder = "tree-v1"

// DefaultGroupNNZ is the default target number of nonzeros per reduction
// group. The trade-off: a tree of G groups costs a local pass log2 G dense
// n×m buffers of K̂ beside the accumulator's (the pending subtrees; each
// group touches most columns once it holds more nonzeros than n, so
// sparse buffers would not help), while a cluster wants G ≥ the number of
// nodes that hold one K block's shards, so that each node pre-sums its
// groups into few pieces. 2^25 keeps G = 1 (no extra buffer, the fit's
// peak within 1.5× its arrays) up to 33M nonzeros per K block, the size
// one machine fits (docs/benchmarks.md), gives G = 32 groups per action
// at 10^9 nonzeros, and reaches MaxGroups at 8.6·10^9.
const DefaultGroupNNZ = 1 << 25

// MaxGroups caps the number of reduction groups of one tree.
const MaxGroups = 256

// ReducePlan is the canonical order of the sums of a pass ("tree-v1"):
//
//   - The blocks are visited in Order: by K block (Model.KBlock of their
//     action) ascending, then in block (shard) order.
//   - The blocks of each K block are cut into G = 2^k contiguous
//     reduction groups balanced by nonzeros, G = the next power of two of
//     ⌈nnz/GroupNNZ⌉, at most MaxGroups (groups may be empty).
//   - A group's value (its K̂ rows, Y, loglik, Σx, nnz) is the left fold of
//     its blocks' partials, starting from zero; the K block's value is the
//     balanced binary tree over its groups (node = left child + right
//     child). So a node holding an aligned dyadic range of groups can sum
//     its subtree and send one partial (see DyadicPieces).
//   - The accumulator's K̂ and Y of a K block are its tree's root; LogLik,
//     SumX and NNZ are the left fold of the roots' in K block order.
//   - D̂ and x are added in Order: a row of one action's D is complete in
//     one block, so without TieSharedD there is nothing to sum; with
//     TieSharedD row i of D̂ is the left fold over actions ascending of
//     each action's (complete) row.
//
// The plan depends only on the blocks' actions and nonzero counts, the
// tie mode and GroupNNZ: never on the number of workers, which is what
// keeps a fit bitwise the same on any number of goroutines or nodes.
type ReducePlan struct {
	GroupNNZ int
	// Order lists block indices in reduce order.
	Order []int
	Trees []ReduceTree
}

// ReduceTree is the tree of one K block.
type ReduceTree struct {
	KBlock int
	// Start[g] is the position in ReducePlan.Order of group g's first
	// block; Start[G] is one past the tree's last.
	Start []int
}

// Groups returns G, the number of leaves of the tree.
func (t *ReduceTree) Groups() int { return len(t.Start) - 1 }

// PlanReduce returns the plan for blocks with the given actions and
// nonzero counts (index k = block k) of a model with tie mode tie.
// groupNNZ < 1 means DefaultGroupNNZ.
func PlanReduce(actions, nnz []int, tie Tie, groupNNZ int) *ReducePlan {
	if len(actions) != len(nnz) {
		panic("factor: PlanReduce: actions and nnz differ in length")
	}
	if groupNNZ < 1 {
		groupNNZ = DefaultGroupNNZ
	}
	kblock := func(a int) int {
		if tie == TieSharedK {
			return 0
		}
		return a
	}
	pl := &ReducePlan{GroupNNZ: groupNNZ, Order: make([]int, len(actions))}
	for k := range pl.Order {
		pl.Order[k] = k
	}
	slices.SortStableFunc(pl.Order, func(x, y int) int { return cmp.Compare(kblock(actions[x]), kblock(actions[y])) })
	for lo := 0; lo < len(pl.Order); {
		b := kblock(actions[pl.Order[lo]])
		hi, total := lo, 0
		for ; hi < len(pl.Order) && kblock(actions[pl.Order[hi]]) == b; hi++ {
			total += nnz[pl.Order[hi]]
		}
		g := 1
		if want := (total + groupNNZ - 1) / groupNNZ; want > 1 {
			g = 1 << bits.Len(uint(want-1))
		}
		g = min(g, MaxGroups)
		// A block belongs to the group where its first nonzero falls:
		// ⌊G·(nonzeros before it)/nnz⌋.
		t := ReduceTree{KBlock: b, Start: make([]int, g+1)}
		before, grp := 0, 0
		for pos := lo; pos < hi; pos++ {
			at := 0
			if total > 0 {
				at = int(int64(g) * int64(before) / int64(total))
			}
			for grp < at {
				grp++
				t.Start[grp] = pos
			}
			before += nnz[pl.Order[pos]]
		}
		for grp < g {
			grp++
			t.Start[grp] = hi
		}
		t.Start[0] = lo
		pl.Trees = append(pl.Trees, t)
		lo = hi
	}
	return pl
}

// Only returns the plan of the trees of pl whose K block keep accepts:
// their blocks in the same order, their groups the same, so each tree's
// sums are bitwise pl's (a pass of some actions only: ActionFilter).
func (pl *ReducePlan) Only(keep func(kblock int) bool) *ReducePlan {
	out := &ReducePlan{GroupNNZ: pl.GroupNNZ}
	for _, t := range pl.Trees {
		if !keep(t.KBlock) {
			continue
		}
		lo, hi := t.Start[0], t.Start[len(t.Start)-1]
		nt := ReduceTree{KBlock: t.KBlock, Start: make([]int, len(t.Start))}
		for g, st := range t.Start {
			nt.Start[g] = st - lo + len(out.Order)
		}
		out.Order = append(out.Order, pl.Order[lo:hi]...)
		out.Trees = append(out.Trees, nt)
	}
	return out
}

// PlanBlocks is PlanReduce for blocks in memory.
func PlanBlocks(blocks []*Block, tie Tie, groupNNZ int) *ReducePlan {
	actions, nnz := make([]int, len(blocks)), make([]int, len(blocks))
	for k, b := range blocks {
		actions[k], nnz[k] = b.Action, b.NNZ()
	}
	return PlanReduce(actions, nnz, tie, groupNNZ)
}

// Piece is the aligned dyadic range of groups [Lo, Lo+2^Level): one node
// of a reduction tree.
type Piece struct{ Lo, Level int }

// Hi returns one past the piece's last group.
func (p Piece) Hi() int { return p.Lo + 1<<p.Level }

// DyadicPieces splits the contiguous range of groups [lo, hi) of a tree
// with G groups into the fewest aligned dyadic pieces, left to right (at
// most 2·log2 G): a node that holds [lo, hi) sends one partial per piece.
func DyadicPieces(lo, hi, groups int) []Piece {
	if lo < 0 || hi > groups || lo > hi || groups < 1 || groups&(groups-1) != 0 {
		panic(fmt.Sprintf("factor: DyadicPieces(%d, %d, %d): bad range", lo, hi, groups))
	}
	var out []Piece
	for lo < hi {
		lv := bits.TrailingZeros(uint(lo | groups)) // largest alignment of lo
		for lo+1<<lv > hi {
			lv--
		}
		out = append(out, Piece{lo, lv})
		lo += 1 << lv
	}
	return out
}

// TreeFold folds the nodes of a balanced binary tree over G = 2^k groups
// into its root. Pieces (leaves or pre-summed subtrees) are pushed left
// to right; two siblings are combined as soon as both are there, so at
// most k+1 values are held, and the root is bitwise the same however the
// groups were cut into pieces. combine(left, right) returns left+right;
// it may reuse either argument's memory.
type TreeFold[T any] struct {
	groups  int
	next    int
	stack   []treeNode[T]
	combine func(left, right T) T
}

type treeNode[T any] struct {
	level int
	v     T
}

// NewTreeFold returns a fold over groups leaves (a power of two).
func NewTreeFold[T any](groups int, combine func(left, right T) T) *TreeFold[T] {
	t := &TreeFold[T]{combine: combine}
	t.Reset(groups)
	return t
}

// Reset starts a new fold over groups leaves, dropping held values.
func (t *TreeFold[T]) Reset(groups int) {
	if groups < 1 || groups&(groups-1) != 0 {
		panic(fmt.Sprintf("factor: TreeFold over %d groups: want a power of two", groups))
	}
	t.groups, t.next = groups, 0
	clear(t.stack)
	t.stack = t.stack[:0]
}

// Next returns the first group not yet pushed.
func (t *TreeFold[T]) Next() int { return t.next }

// Push adds the value of piece p, which must start at Next and be
// aligned.
func (t *TreeFold[T]) Push(p Piece, v T) error {
	if p.Level < 0 || p.Level > 30 || p.Lo != t.next || p.Lo&(1<<p.Level-1) != 0 || p.Hi() > t.groups {
		return fmt.Errorf("factor: tree piece at group %d of level %d is not the aligned next piece (next group %d of %d)", p.Lo, p.Level, t.next, t.groups)
	}
	// Pieces are pushed left to right and aligned, so the stack holds the
	// binary decomposition of [0, next): levels strictly decreasing. Two
	// equal levels on top are siblings.
	t.stack = append(t.stack, treeNode[T]{p.Level, v})
	t.next = p.Hi()
	for n := len(t.stack); n >= 2 && t.stack[n-2].level == t.stack[n-1].level; n-- {
		l, r := t.stack[n-2], t.stack[n-1]
		t.stack[n-2] = treeNode[T]{l.level + 1, t.combine(l.v, r.v)}
		var zero T
		t.stack[n-1].v = zero
		t.stack = t.stack[:n-1]
	}
	return nil
}

// Root returns the root once every group was pushed.
func (t *TreeFold[T]) Root() (T, bool) {
	if t.next != t.groups || len(t.stack) != 1 {
		var zero T
		return zero, false
	}
	return t.stack[0].v, true
}
