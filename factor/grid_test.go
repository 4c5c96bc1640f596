package factor

import (
	"context"
	"math"
	"strings"
	"testing"
)

// cutColumns cuts each block into q blocks by column ranges [c·n/q,
// (c+1)·n/q) (the cells of shard.SplitGrid), leaving out empty ones: a
// row's D̂ is then the sum of several blocks' partial rows.
func cutColumns(blocks []*Block, n, q int) []*Block {
	var out []*Block
	for _, b := range blocks {
		for c := range q {
			lo, hi := int32(c*n/q), int32((c+1)*n/q)
			cell := &Block{Action: b.Action, Ptr: []int64{0}}
			for r, i := range b.Rows {
				for x := b.Ptr[r]; x < b.Ptr[r+1]; x++ {
					if j := b.Cols[x]; j >= lo && j < hi {
						if len(cell.Rows) == 0 || cell.Rows[len(cell.Rows)-1] != i {
							if len(cell.Rows) > 0 {
								cell.Ptr = append(cell.Ptr, int64(len(cell.Cols)))
							}
							cell.Rows = append(cell.Rows, i)
						}
						cell.Cols, cell.Vals = append(cell.Cols, j), append(cell.Vals, b.Vals[x])
					}
				}
			}
			if len(cell.Cols) > 0 {
				cell.Ptr = append(cell.Ptr, int64(len(cell.Cols)))
				out = append(out, cell)
			}
		}
	}
	return out
}

// TestPassColumnCells: blocks whose rows of D̂ are split over several
// blocks (column cells) give bitwise the same pass on any number of
// goroutines, on each pass path (one goroutine fused, partials merged,
// the pipeline), every tie mode and group size; and the sums are those
// of the uncut blocks up to rounding (each row's terms regrouped).
func TestPassColumnCells(t *testing.T) {
	for _, tie := range []Tie{TieNone, TieSharedK, TieSharedD} {
		for _, groupNNZ := range []int{20, 0} {
			blocks, md := treeCase(t, 11, tie)
			whole := NewAccumulator(md)
			if err := (&Passer{GroupNNZ: groupNNZ}).Pass(context.Background(), md, blocks, whole, 1, true); err != nil {
				t.Fatal(err)
			}
			cells := cutColumns(blocks, md.N, 3)
			if len(cells) <= len(blocks) {
				t.Fatal("test wants blocks cut into several cells")
			}
			var want *Accumulator
			for _, w := range []int{1, 2, 3, 8} {
				for _, pipe := range []bool{false, true} {
					acc := NewAccumulator(md)
					ps := Passer{GroupNNZ: groupNNZ, mergePartials: !pipe}
					if err := ps.Pass(context.Background(), md, cells, acc, w, true); err != nil {
						t.Fatal(err)
					}
					if want == nil {
						want = acc
						for b := range acc.Dh {
							for k, v := range acc.Dh[b] {
								if d := math.Abs(v - whole.Dh[b][k]); d > 1e-12*math.Max(1, math.Abs(v)) {
									t.Fatalf("%v: D̂[%d][%d] = %v in cells, %v whole", tie, b, k, v, whole.Dh[b][k])
								}
							}
						}
						if acc.SumX != whole.SumX || acc.NNZ != whole.NNZ {
							t.Fatalf("%v: Σx %v, nnz %d in cells; %v, %d whole", tie, acc.SumX, acc.NNZ, whole.SumX, whole.NNZ)
						}
						continue
					}
					for b := range acc.KhT {
						if !sameBits(acc.KhT[b], want.KhT[b]) || !sameBits(acc.Y[b], want.Y[b]) {
							t.Fatalf("%v, group %d, %d workers, pipeline %v: K block %d differs", tie, groupNNZ, w, pipe, b)
						}
					}
					for b := range acc.Dh {
						if !sameBits(acc.Dh[b], want.Dh[b]) || !sameBits(acc.X[b], want.X[b]) {
							t.Fatalf("%v, group %d, %d workers, pipeline %v: D block %d differs", tie, groupNNZ, w, pipe, b)
						}
					}
					if !sameBits([]float64{acc.LogLik, acc.SumX}, []float64{want.LogLik, want.SumX}) {
						t.Fatalf("%v, group %d, %d workers, pipeline %v: scalars differ", tie, groupNNZ, w, pipe)
					}
				}
			}
		}
	}
}

// TestDataTermColumnCells: with rows cut across blocks (column cells) the
// data term Σ c·log(c/x_i) still uses each row's whole total x_i: the
// cells' value equals the uncut blocks' up to rounding (a per-cell row
// total would make it larger), and the uncut blocks keep their bits.
func TestDataTermColumnCells(t *testing.T) {
	blocks, md := treeCase(t, 13, TieNone)
	whole := DataTerm(blocks)
	var perBlock float64
	for _, b := range blocks {
		perBlock += b.DataTerm()
	}
	if whole != perBlock {
		t.Fatalf("uncut blocks: DataTerm %v, the blocks' sum %v", whole, perBlock)
	}
	cells := cutColumns(blocks, md.N, 3)
	got := DataTerm(cells)
	if d := math.Abs(got - whole); d > 1e-12*math.Abs(whole) {
		t.Fatalf("column cells: DataTerm %v, uncut %v", got, whole)
	}
	var naive float64
	for _, b := range cells {
		naive += b.DataTerm()
	}
	if math.Abs(naive-whole) < 1e-6*math.Abs(whole) {
		t.Fatal("test data does not split rows enough to tell per-cell totals from whole-row ones")
	}
}

// TestDataTermShares: DataTerm is the left fold of the blocks' shares
// (DataTerms), bitwise, with and without column cells; and a Loop told
// the data's sums (LoopHooks.Sums) instead of its blocks fits bitwise as
// one given the blocks: a coordinator that holds only shard metadata
// runs the same loop.
func TestDataTermShares(t *testing.T) {
	blocks, md := treeCase(t, 13, TieNone)
	for _, bs := range [][]*Block{blocks, cutColumns(blocks, md.N, 3)} {
		terms := DataTerms(bs)
		if len(terms) != len(bs) {
			t.Fatalf("%d shares of %d blocks", len(terms), len(bs))
		}
		if a, b := DataTerm(bs), SumDataTerms(terms); math.Float64bits(a) != math.Float64bits(b) {
			t.Fatalf("DataTerm %v, the fold of its shares %v", a, b)
		}
	}
	fit := func(hooks LoopHooks, bs []*Block) *Model {
		m := md.Clone()
		stepper := &localStepper{blocks: blocks, workers: 1}
		if _, err := Loop(context.Background(), m, bs, stepper, FitOptions{Converger: Converger{MaxIter: 3}}, hooks); err != nil {
			t.Fatal(err)
		}
		return m
	}
	want := fit(LoopHooks{}, blocks)
	got := fit(LoopHooks{Sums: &DataSums{Total: TotalCount(blocks), DataTerm: SumDataTerms(DataTerms(blocks))}}, nil)
	if math.Float64bits(got.WKL) != math.Float64bits(want.WKL) || math.Float64bits(got.LogLik) != math.Float64bits(want.LogLik) {
		t.Fatalf("with sums: loglik %v WKL %v, with blocks %v %v", got.LogLik, got.WKL, want.LogLik, want.WKL)
	}
	if _, err := Loop(context.Background(), md.Clone(), nil, &localStepper{blocks: blocks, workers: 1}, FitOptions{Converger: Converger{MaxIter: 1}},
		LoopHooks{Sums: &DataSums{Total: 0}}); err == nil || !strings.Contains(err.Error(), "no data") {
		t.Fatalf("sums of no data: %v", err)
	}
}
