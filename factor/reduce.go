package factor

import "fmt"

// Reducer folds the partials of one pass into an Accumulator in the
// canonical order of a ReducePlan ("tree-v1"): the caller merges the
// partial of block Next() until Done. Each partial is folded as soon as it
// is merged, so a pass holds no partial per block: beside the accumulator
// the Reducer holds at most log2 G dense n×m buffers of K̂ (the pending
// subtrees of the current tree), reused across passes. The zero value is
// not usable; call Reset.
type Reducer struct {
	acc  *Accumulator
	plan *ReducePlan
	pos  int // next position in plan.Order
	tree int // current tree
	grp  int // current group of the tree
	fold *TreeFold[*kSum]
	leaf *kSum // the current group's left fold; nil while empty
	// bottom[b] is K block b's sums in the accumulator's own arrays: the
	// leftmost leaf of a tree, into which its root is folded.
	bottom []*kSum
	pool   []*kSum
}

// kSum is one node of a reduction tree: K̂ rows (dense, zero outside
// cols), Y and the scalars. cols lists the columns with any term, so that
// combining and clearing cost what was added, not n·m.
type kSum struct {
	kh, y  []float64
	ll, sx float64
	nnz    int
	cols   []int32
	mark   []uint64
	// bottom: kh and y are an accumulator's arrays.
	bottom bool
}

func newKSum(n, m int, kh, y []float64) *kSum {
	bottom := kh != nil
	if !bottom {
		kh, y = bigFloats(n*m), make([]float64, m)
	}
	return &kSum{kh: kh, y: y, mark: make([]uint64, (n+63)/64), bottom: bottom}
}

// touch records that row j of s.kh has terms. The accumulator's own
// arrays (bottom) need no record: they are always the left operand of a
// combine and are cleared whole by Accumulator.Reset.
func (s *kSum) touch(j int32) {
	if s.bottom {
		return
	}
	if w, b := j>>6, uint64(1)<<(j&63); s.mark[w]&b == 0 {
		s.mark[w] |= b
		s.cols = append(s.cols, j)
	}
}

func (s *kSum) addCols(cols []int32, kh []float64, m int) {
	for c, j := range cols {
		if a := c + prefetchAhead; a < len(cols) {
			prefetchW(&s.kh[int(cols[a])*m], m*8)
		}
		s.touch(j)
		addTo(s.kh[int(j)*m:int(j)*m+m], kh[c*m:c*m+m])
	}
}

// addPartial adds p's K̂ rows, Y and scalars.
func (s *kSum) addPartial(p *Partial, m int) {
	s.addCols(p.Cols, p.KhT, m)
	s.addScalars(p.Y, p.LogLik, p.SumX, p.NNZ)
}

func (s *kSum) addScalars(y []float64, ll, sx float64, nnz int) {
	for l, v := range y {
		s.y[l] += v
	}
	s.ll += ll
	s.sx += sx
	s.nnz += nnz
}

// addSum adds o (a right sibling) to s.
func (s *kSum) addSum(o *kSum, m int) {
	for _, j := range o.cols {
		s.touch(j)
		addTo(s.kh[int(j)*m:int(j)*m+m], o.kh[int(j)*m:int(j)*m+m])
	}
	s.addScalars(o.y, o.ll, o.sx, o.nnz)
}

// reset zeroes s; clearArrays false leaves kh and y to the caller.
func (s *kSum) reset(m int, clearArrays bool) {
	for _, j := range s.cols {
		s.mark[j>>6] = 0
		if clearArrays {
			clear(s.kh[int(j)*m : int(j)*m+m])
		}
	}
	if clearArrays {
		clear(s.y)
	}
	s.cols = s.cols[:0]
	s.ll, s.sx, s.nnz = 0, 0, 0
}

// Reset zeroes acc and starts a pass in the order of plan (from
// PlanReduce for the pass's blocks and acc's shape).
func (r *Reducer) Reset(acc *Accumulator, plan *ReducePlan) { r.reset(acc, plan, 1) }

// reset is Reset zeroing acc's big arrays on workers goroutines.
func (r *Reducer) reset(acc *Accumulator, plan *ReducePlan, workers int) {
	acc.reset(workers)
	if r.acc != acc || len(r.bottom) != len(acc.KhT) {
		r.bottom = make([]*kSum, len(acc.KhT))
		for b := range r.bottom {
			r.bottom[b] = newKSum(acc.N, acc.M, acc.KhT[b], acc.Y[b])
		}
	} else {
		for _, s := range r.bottom {
			s.reset(acc.M, false) // acc.Reset cleared the arrays
		}
	}
	if len(r.pool) > 0 && len(r.pool[0].kh) != acc.N*acc.M {
		r.pool = nil
	}
	// A pass that stopped midway leaves buffers in its fold: back to the
	// pool (the accumulator's own are not the pool's).
	if r.leaf != nil && !r.leaf.bottom {
		r.put(r.leaf)
	}
	if r.fold != nil {
		for _, nd := range r.fold.stack {
			if nd.v != nil && !nd.v.bottom {
				r.put(nd.v)
			}
		}
		r.fold.Reset(1)
	}
	r.acc, r.plan = acc, plan
	r.pos, r.tree, r.leaf = 0, 0, nil
	r.startTree()
}

func (r *Reducer) get() *kSum {
	if k := len(r.pool); k > 0 {
		s := r.pool[k-1]
		r.pool = r.pool[:k-1]
		return s
	}
	return newKSum(r.acc.N, r.acc.M, nil, nil)
}

func (r *Reducer) put(s *kSum) {
	s.reset(r.acc.M, true)
	r.pool = append(r.pool, s)
}

func (r *Reducer) combine(left, right *kSum) *kSum {
	switch {
	case right == nil: // an empty subtree adds nothing: x + 0 = x
		return left
	case left == nil:
		return right
	}
	left.addSum(right, r.acc.M)
	r.put(right)
	return left
}

// startTree begins the current tree (if any) and settles empty groups.
func (r *Reducer) startTree() {
	for r.tree < len(r.plan.Trees) {
		t := &r.plan.Trees[r.tree]
		if r.fold == nil {
			r.fold = NewTreeFold(t.Groups(), r.combine)
		} else {
			r.fold.Reset(t.Groups())
		}
		r.grp = 0
		r.leaf = r.bottom[t.KBlock]
		if !r.settle() {
			return
		}
	}
}

// settle pushes the groups that end before the next position and, when
// the tree is complete, folds its root into the accumulator's scalars and
// returns true.
func (r *Reducer) settle() bool {
	t := &r.plan.Trees[r.tree]
	for r.grp < t.Groups() && t.Start[r.grp+1] <= r.pos {
		if err := r.fold.Push(Piece{r.grp, 0}, r.leaf); err != nil {
			panic(err) // pieces are pushed in order by construction
		}
		r.leaf = nil
		r.grp++
	}
	if r.grp < t.Groups() {
		return false
	}
	root, _ := r.fold.Root()
	// The leftmost leaf is the accumulator's array and every combine
	// keeps the left operand, so the root's K̂ and Y are in place.
	a := r.acc
	a.LogLik += root.ll
	a.SumX += root.sx
	a.NNZ += root.nnz
	a.addK(t.KBlock, root.ll, root.sx, root.nnz)
	r.tree++
	return true
}

// Next returns the index of the block whose partial is merged next, or -1
// when the pass is complete.
func (r *Reducer) Next() int {
	if r.pos >= len(r.plan.Order) {
		return -1
	}
	return r.plan.Order[r.pos]
}

// Done reports whether every block's partial was merged.
func (r *Reducer) Done() bool { return r.pos >= len(r.plan.Order) && r.tree >= len(r.plan.Trees) }

// Merge checks p as Accumulator.Merge does and folds it as the partial of
// block Next().
func (r *Reducer) Merge(p *Partial) error {
	if err := r.acc.check(p); err != nil {
		return err
	}
	return r.add(p)
}

// MergeChecked is Merge for a partial whose values CheckPartialValues
// accepted: it checks dimensions and indices only.
func (r *Reducer) MergeChecked(p *Partial) error {
	if err := r.acc.checkShape(p); err != nil {
		return err
	}
	return r.add(p)
}

// mergeComputed is Merge for a partial Compute produced in this process
// (see checkComputed).
func (r *Reducer) mergeComputed(p *Partial) error {
	if err := checkComputed(p); err != nil {
		return err
	}
	return r.add(p)
}

func (r *Reducer) add(p *Partial) error {
	leaf, err := r.dest(p.Action)
	if err != nil {
		return err
	}
	leaf.addCols(p.Cols, p.KhT, r.acc.M)
	r.finish(p, leaf, true)
	return nil
}

// dest returns the sums into which the K̂ rows of block Next(), of the
// given action, are folded: the current group's left fold (the
// accumulator's own arrays in a tree's first group).
func (r *Reducer) dest(action int) (*kSum, error) {
	if r.pos >= len(r.plan.Order) {
		return nil, fmt.Errorf("factor: partial of action %d merged after the pass was complete", action)
	}
	t := &r.plan.Trees[r.tree]
	if r.acc.Tie != TieSharedK && action != t.KBlock {
		return nil, fmt.Errorf("factor: partial of action %d merged where block %d (K block %d) is due", action, r.Next(), t.KBlock)
	}
	if r.leaf == nil {
		r.leaf = r.get()
	}
	return r.leaf, nil
}

// finish folds the rest of p (x, Y, the scalars and, with dh, rows of
// D̂) after its K̂ rows went into leaf (from dest), and moves to the next
// block.
func (r *Reducer) finish(p *Partial, leaf *kSum, dh bool) {
	r.acc.addRows(p, dh)
	leaf.addScalars(p.Y, p.LogLik, p.SumX, p.NNZ)
	r.pos++
	if r.settle() {
		r.startTree()
	}
}
