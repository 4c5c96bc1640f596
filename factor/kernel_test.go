package factor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"
)

// TestKernelAVX2MatchesPureGo: the AVX2 kernel computes bitwise what the
// pure-Go kernel computes, for orders that are and are not multiples of 4,
// with and without the log-likelihood.
func TestKernelAVX2MatchesPureGo(t *testing.T) {
	if !useAVX2() {
		t.Log("no AVX2 on this machine (or -tags purego): both paths are the pure-Go kernel")
	}
	for _, tc := range []struct{ n, m, perRow int }{
		{50, 4, 7}, {300, 8, 20}, {3000, 32, 30}, {700, 12, 9}, {200, 5, 11}, {9000, 64, 5},
		{30, 32, 25}, {16, 8, 16}, {40, 16, 3}, // dense columns: groups of 4, pairs and singles
	} {
		blocks := RandomCounts(tc.n, 2, tc.perRow, 4, uint64(tc.n))
		md := NewRandom(tc.n, tc.m, 2, TieSharedK, 7)
		for _, withLL := range []bool{false, true} {
			for _, b := range blocks {
				var fast, slow Partial
				slowS := Scratch{pureGo: true}
				if err := Compute(md, b, new(Scratch), &fast, withLL); err != nil {
					t.Fatal(err)
				}
				if err := Compute(md, b, &slowS, &slow, withLL); err != nil {
					t.Fatal(err)
				}
				for name, pair := range map[string][2][]float64{
					"Dh": {fast.Dh, slow.Dh}, "X": {fast.X, slow.X}, "KhT": {fast.KhT, slow.KhT}, "Y": {fast.Y, slow.Y},
				} {
					if !bitsEqual(pair[0], pair[1]) {
						t.Fatalf("n=%d m=%d loglik=%v: %s differs between AVX2 and pure Go", tc.n, tc.m, withLL, name)
					}
				}
				if math.Float64bits(fast.LogLik) != math.Float64bits(slow.LogLik) || fast.SumX != slow.SumX {
					t.Fatalf("n=%d m=%d: loglik %v vs %v, SumX %v vs %v", tc.n, tc.m, fast.LogLik, slow.LogLik, fast.SumX, slow.SumX)
				}
			}
		}
	}
}

func bitsEqual(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

// TestMergeComputedRejectsNonFiniteY: the cheap check of locally computed
// partials catches a non-finite weight through Y (see checkComputed).
func TestMergeComputedRejectsNonFiniteY(t *testing.T) {
	md := NewRandom(20, 4, 1, TieNone, 3)
	b := RandomCounts(20, 1, 5, 3, 3)[0]
	var p Partial
	if err := Compute(md, b, new(Scratch), &p, false); err != nil {
		t.Fatal(err)
	}
	if err := checkComputed(&p); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []float64{math.Inf(1), math.NaN(), -1} {
		p.Y[2] = bad
		if err := checkComputed(&p); err == nil {
			t.Errorf("mergeComputed accepted Y[2] = %v", bad)
		}
	}
}

// TestComputeStreamedMatchesCompute: a pass whose rows of K arrive in
// chunks while it runs gives bitwise the partial of Compute (both
// kernels), and an error of avail stops it.
func TestComputeStreamedMatchesCompute(t *testing.T) {
	const n, m = 2000, 32
	blocks := RandomCounts(n, 2, 25, 4, 3)
	md := NewRandom(n, m, 2, TieNone, 5)
	for _, pureGo := range []bool{false, true} {
		for _, chunk := range []int{1, 7, 512, n} {
			for _, b := range blocks {
				var want, got Partial
				if err := Compute(md, b, &Scratch{pureGo: pureGo}, &want, true); err != nil {
					t.Fatal(err)
				}
				have, calls := 0, 0
				avail := func(j int) (int, error) {
					calls++
					if j < have {
						t.Fatalf("avail(%d) called with %d rows in place", j, have)
					}
					for have <= j {
						have = min(have+chunk, n)
					}
					return have, nil
				}
				if err := ComputeStreamed(md, b, &Scratch{pureGo: pureGo}, &got, true, avail); err != nil {
					t.Fatal(err)
				}
				if calls == 0 {
					t.Fatal("avail never called")
				}
				for name, pair := range map[string][2][]float64{
					"Dh": {want.Dh, got.Dh}, "X": {want.X, got.X}, "KhT": {want.KhT, got.KhT}, "Y": {want.Y, got.Y},
				} {
					if !bitsEqual(pair[0], pair[1]) {
						t.Fatalf("pureGo=%v chunk=%d: %s differs from Compute", pureGo, chunk, name)
					}
				}
				if math.Float64bits(want.LogLik) != math.Float64bits(got.LogLik) || want.SumX != got.SumX {
					t.Fatalf("pureGo=%v chunk=%d: loglik %v vs %v", pureGo, chunk, got.LogLik, want.LogLik)
				}
			}
		}
	}
	var p Partial
	boom := errors.New("boom")
	err := ComputeStreamed(md, blocks[0], new(Scratch), &p, false, func(int) (int, error) { return 0, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want %v", err, boom)
	}
	err = ComputeStreamed(md, blocks[0], new(Scratch), &p, false, func(j int) (int, error) { return j, nil })
	if err == nil {
		t.Fatal("avail that returns too few rows: no error")
	}
}

// TestCommitRowDerivesCommit: the rows of D a worker derives from its own
// partial with CommitRow are bitwise the rows Accumulator.Commit writes
// when that partial is the only one touching them.
func TestCommitRowDerivesCommit(t *testing.T) {
	const n, m = 500, 16
	blocks := RandomCounts(n, 1, 20, 4, 9)
	for _, alpha := range []float64{1, 0.3} {
		md := NewRandom(n, m, 1, TieNone, 2)
		b := blocks[0]
		var p Partial
		if err := Compute(md, b, new(Scratch), &p, false); err != nil {
			t.Fatal(err)
		}
		derived := append([]float64(nil), md.D[0]...)
		for r, i := range p.Rows {
			CommitRow(derived[int(i)*m:int(i)*m+m], p.Dh[r*m:r*m+m], p.X[r], alpha)
		}
		acc := NewAccumulator(md)
		if err := acc.Merge(&p); err != nil {
			t.Fatal(err)
		}
		acc.Commit(md, alpha, 0)
		if !bitsEqual(derived, md.D[0]) {
			t.Fatalf("alpha=%v: derived rows differ from the committed ones", alpha)
		}
	}
}

// TestMergeCheckedSplitsMerge: CheckPartialValues then MergeChecked
// accepts and sums what Merge does, and between them they reject what
// Merge rejects (bad values; bad dimensions).
func TestMergeCheckedSplitsMerge(t *testing.T) {
	md := NewRandom(30, 4, 1, TieNone, 3)
	b := RandomCounts(30, 1, 5, 3, 4)[0]
	var p Partial
	if err := Compute(md, b, new(Scratch), &p, true); err != nil {
		t.Fatal(err)
	}
	a1, a2 := NewAccumulator(md), NewAccumulator(md)
	if err := a1.Merge(&p); err != nil {
		t.Fatal(err)
	}
	if err := CheckPartialValues(&p); err != nil {
		t.Fatal(err)
	}
	if err := a2.MergeChecked(&p); err != nil {
		t.Fatal(err)
	}
	if !bitsEqual(a1.Dh[0], a2.Dh[0]) || !bitsEqual(a1.KhT[0], a2.KhT[0]) || !bitsEqual(a1.Y[0], a2.Y[0]) || a1.SumX != a2.SumX {
		t.Fatal("MergeChecked sums differ from Merge's")
	}
	bad := p
	bad.KhT = append([]float64(nil), p.KhT...)
	bad.KhT[3] = math.NaN()
	if err := CheckPartialValues(&bad); err == nil {
		t.Error("CheckPartialValues accepted a NaN")
	}
	short := p
	short.Dh = p.Dh[:len(p.Dh)-1]
	if err := a2.MergeChecked(&short); err == nil {
		t.Error("MergeChecked accepted a partial with a short Dh")
	}
}

// TestFusedPassMatchesMerge: a pass that adds each block's K̂ rows
// straight into the reduction (compute with a destination: one goroutine,
// or the pipeline over column ranges on 2 and 3) gives bitwise the
// accumulator of computing every partial and merging it through the
// Reducer, with the AVX2 and the pure-Go kernel, in every tie mode, for
// orders that are and are not multiples of 4, with one reduction group
// per tree (the accumulator's own arrays; the pipeline) and with many
// (pooled buffers; partials merged on 2 and 3), partials merged where the
// pipeline could run (mergePartials), and with columns of one
// and of several nonzeros per block.
func TestFusedPassMatchesMerge(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		n, m, perRow, blockNNZ int
		gaps                   bool // every fifth state without data
		// cells: each block cut into three column cells (as
		// shard.SplitGrid), blocks that share their rows of D̂ whatever
		// the tie (Passer.direct).
		cells bool
	}{
		{60, 5, 7, 28, false, false}, {300, 8, 20, 740, false, false}, {2000, 32, 9, 1350, false, false}, {500, 12, 40, 20000, false, false},
		{300, 8, 20, 740, true, false}, {2000, 32, 9, 1350, true, false},
		// Mostly one term per column in a block: the row pass's case.
		{1500, 8, 3, 250, false, false}, {1200, 7, 4, 200, true, false},
		{1500, 8, 3, 250, false, true}, {300, 8, 20, 740, true, true},
	} {
		mats := RandomCounts(tc.n, 2, tc.perRow, 5, uint64(tc.n))
		var blocks []*Block
		for _, mat := range mats {
			if tc.gaps {
				// Blocks whose rows are not consecutive states.
				mat = withoutTerms(t, mat, func(i, _ int32) bool { return i%5 == 3 })
			}
			for _, b := range splitBlock(mat, tc.blockNNZ) {
				if !tc.cells {
					blocks = append(blocks, b)
					continue
				}
				for c := range 3 {
					cell := withoutTerms(t, b, func(_, j int32) bool { return int(j)*3/tc.n != c })
					if cell.NNZ() > 0 {
						blocks = append(blocks, cell)
					}
				}
			}
		}
		for _, tie := range []Tie{TieNone, TieSharedK, TieSharedD} {
			md := NewRandom(tc.n, tc.m, 2, tie, 3)
			orig := md.Clone()
			for _, groupNNZ := range []int{0, 50} {
				want := NewAccumulator(md)
				var r Reducer
				r.Reset(want, PlanBlocks(blocks, tie, groupNNZ))
				for k := r.Next(); k >= 0; k = r.Next() {
					var p Partial
					if err := Compute(md, blocks[k], new(Scratch), &p, true); err != nil {
						t.Fatal(err)
					}
					if err := r.Merge(&p); err != nil {
						t.Fatal(err)
					}
				}
				if !r.Done() {
					t.Fatal("reducer not done after every block")
				}
				for _, run := range []struct {
					workers       int
					pureGo, merge bool
					share         []float64 // the pipeline's first column shares
					rows          int8      // Scratch.rows: the row or the column pass
					noDirect      bool      // Passer.noDirect
				}{
					{1, false, false, nil, rowsNever, false}, {1, true, false, nil, rowsNever, false}, {2, false, false, nil, rowsNever, false},
					{3, false, false, nil, rowsNever, false}, {2, false, true, nil, rowsNever, false},
					{2, false, false, []float64{0.97, 0.03}, rowsNever, false}, {2, false, false, []float64{0.01, 0.99}, rowsNever, false},
					{3, false, false, []float64{0.1, 0.05, 0.85}, rowsNever, false}, {3, false, false, []float64{0.6, 0.3, 0.1}, rowsNever, false},
					{1, false, false, nil, rowsForce, false}, {1, true, false, nil, rowsForce, false},
					{3, false, false, []float64{0.1, 0.05, 0.85}, rowsForce, false}, {2, false, false, nil, rowsForce, false},
					{1, false, false, nil, rowsForce, true}, {2, false, false, nil, rowsForce, true},
				} {
					ps := Passer{GroupNNZ: groupNNZ, scratch: []Scratch{{pureGo: run.pureGo}}, mergePartials: run.merge, rows: run.rows, noDirect: run.noDirect}
					if run.share != nil {
						// Skewed splits (the balance moves them after the
						// first pass): the sums are the same for any.
						ps.bal = stageBalance{n: tc.n, share: slices.Clone(run.share)}
					}
					acc := NewAccumulator(md)
					// Twice: the second pass reuses the Passer's buffers.
					for range 2 {
						if err := ps.Pass(ctx, md, blocks, acc, run.workers, true); err != nil {
							t.Fatal(err)
						}
					}
					name := fmt.Sprintf("n=%d m=%d cells=%v %v groupNNZ=%d workers=%d pureGo=%v merge=%v share=%v rows=%d noDirect=%v", tc.n, tc.m, tc.cells, tie, groupNNZ, run.workers, run.pureGo, run.merge, run.share, run.rows, run.noDirect)
					for b := range acc.KhT {
						if !bitsEqual(acc.KhT[b], want.KhT[b]) || !bitsEqual(acc.Y[b], want.Y[b]) {
							t.Fatalf("%s: K block %d differs from the merged partials'", name, b)
						}
					}
					for b := range acc.Dh {
						if !bitsEqual(acc.Dh[b], want.Dh[b]) || !bitsEqual(acc.X[b], want.X[b]) {
							t.Fatalf("%s: D block %d differs from the merged partials'", name, b)
						}
					}
					if !bitsEqual([]float64{acc.LogLik, acc.SumX}, []float64{want.LogLik, want.SumX}) || acc.NNZ != want.NNZ {
						t.Fatalf("%s: scalars %v %v %d, want %v %v %d", name, acc.LogLik, acc.SumX, acc.NNZ, want.LogLik, want.SumX, want.NNZ)
					}
					// A pass reads the model; it never writes it.
					if !md.Equal(orig) {
						t.Fatalf("%s: the pass changed the model", name)
					}
				}
			}
		}
	}
}

// TestPipelineErrors: a pipelined pass returns a block's TransitionError
// and a cancelled context's error, and a later pass with the same Passer
// runs normally (no stage left behind holding a slot).
func TestPipelineErrors(t *testing.T) {
	mat := RandomCounts(300, 1, 9, 5, 11)[0]
	blocks := splitBlock(mat, 200)
	md := NewRandom(300, 8, 1, TieNone, 4)
	bad := md.Clone()
	// Every transition from two rows r0 < r1 of a block has g = 0, where
	// r1's smallest column is below r0's and above the block's smallest.
	// The error names r1's first term, the first bad one in column
	// order: row order would name r0's, and a check of g left at zero
	// the block's first term in column order.
	b := blocks[len(blocks)/2]
	first := func(r int) int32 { return b.Cols[b.Ptr[r]] }
	cmin := slices.Min(b.Cols)
	r0, r1 := -1, -1
	for a := range b.Rows {
		for c := a + 1; c < len(b.Rows) && r0 < 0; c++ {
			if first(a) > first(c) && first(c) > cmin {
				r0, r1 = a, c
			}
		}
	}
	if r0 < 0 {
		t.Fatal("no two rows of the block tell the orders apart")
	}
	for _, r := range []int{r0, r1} {
		i := int(b.Rows[r])
		clear(bad.D[0][i*8 : i*8+8])
	}
	want := TransitionError{Action: b.Action, From: int(b.Rows[r1]), To: int(b.Cols[b.Ptr[r1]]), Count: b.Vals[b.Ptr[r1]]}
	for _, run := range []struct {
		workers int
		rows    int8
		ll      bool
	}{{2, rowsNever, false}, {3, rowsNever, true}, {1, rowsForce, false}, {1, rowsForce, true}, {2, rowsForce, false}, {3, rowsForce, false}, {3, rowsForce, true}} {
		workers := run.workers
		ps := Passer{rows: run.rows}
		acc := NewAccumulator(md)
		var te *TransitionError
		if err := ps.Pass(context.Background(), bad, blocks, acc, workers, run.ll); !errors.As(err, &te) || *te != want {
			t.Fatalf("%d workers, rows %d, loglik %v: pass over zero rows of D: %v, want %v", workers, run.rows, run.ll, err, &want)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := ps.Pass(ctx, md, blocks, acc, workers, false); !errors.Is(err, context.Canceled) {
			t.Fatalf("%d workers: cancelled pass: %v", workers, err)
		}
		if err := ps.Pass(context.Background(), md, blocks, acc, workers, true); err != nil {
			t.Fatalf("%d workers: pass after errors: %v", workers, err)
		}
		if err := CheckSumX(acc.SumX, TotalCount(blocks)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestColArgsLayout: kernel_amd64.s reads colArgs' fields at the offsets
// it defines (CA_*); a field moved in Go must move there too.
func TestColArgsLayout(t *testing.T) {
	var a colArgs
	for name, got := range map[string][2]uintptr{
		"kt": {unsafe.Offsetof(a.kt), 0}, "kh": {unsafe.Offsetof(a.kh), 8}, "dl": {unsafe.Offsetof(a.dl), 16},
		"dhl": {unsafe.Offsetof(a.dhl), 24}, "sv": {unsafe.Offsetof(a.sv), 32}, "col": {unsafe.Offsetof(a.col), 40},
		"cols": {unsafe.Offsetof(a.cols), 48}, "ptr": {unsafe.Offsetof(a.ptr), 56}, "rows": {unsafe.Offsetof(a.rows), 64},
		"vals": {unsafe.Offsetof(a.vals), 72}, "gs": {unsafe.Offsetof(a.gs), 80}, "c0": {unsafe.Offsetof(a.c0), 88},
		"c1": {unsafe.Offsetof(a.c1), 96}, "mbytes": {unsafe.Offsetof(a.mbytes), 104}, "fused": {unsafe.Offsetof(a.fused), 112},
		"ahead": {unsafe.Offsetof(a.ahead), 120}, "z512": {unsafe.Offsetof(a.z512), 128},
		"kt32": {unsafe.Offsetof(a.kt32), 136}, "k": {unsafe.Offsetof(a.k), 144},
	} {
		if got[0] != got[1] {
			t.Errorf("colArgs.%s at offset %d, kernel_amd64.s reads %d", name, got[0], got[1])
		}
	}
}

// TestLogSumMatchesMathLog: logSum's eight-lane logarithms are bitwise
// math.Log's, over random g of every magnitude, subnormals, powers of two,
// both sides of √2/2 and groups holding +Inf (which math.Log returns as
// it is); each log is checked alone (a one-hot v) and in long sums.
func TestLogSumMatchesMathLog(t *testing.T) {
	if !useLogAVX512() {
		t.Log("no AVX-512 on this machine (or -tags purego): logSum takes its logarithms with logAll (AVX2) or one by one")
	}
	r := rand.New(rand.NewPCG(5, 6))
	special := []float64{math.SmallestNonzeroFloat64, 1e-310, math.MaxFloat64, 1, 2, 0.5, 0.25, 3,
		math.Sqrt2 / 2, math.Nextafter(math.Sqrt2/2, 1), math.Nextafter(math.Sqrt2/2, 0), 0x1p-1022,
		math.Nextafter(1, 2), math.Nextafter(1, 0), math.Inf(1), 1e300, 1e-300}
	var g []float64
	g = append(g, special...)
	for range 5000 {
		switch r.IntN(3) {
		case 0:
			g = append(g, r.Float64()) // (0, 1)
		case 1:
			g = append(g, math.Float64frombits(r.Uint64()>>1)) // any positive bits
		default:
			g = append(g, math.Ldexp(r.Float64()+0.5, r.IntN(200)-100))
		}
	}
	g = slices.DeleteFunc(g, func(x float64) bool { return math.IsNaN(x) || !(x > 0) })
	scalar := func(g, v []float64) float64 {
		ll := 0.0
		for q := range g {
			ll += float64(v[q] * math.Log(g[q]))
		}
		return ll
	}
	// Each logarithm alone: v one-hot in a group of eight.
	for i, x := range g {
		grp := make([]float64, 16)
		v := make([]float64, 16)
		for l := range grp {
			grp[l] = 1.5
		}
		grp[i%8] = x
		v[i%8] = 1
		if got, want := logSum(0, grp, v, false), math.Log(x); math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("log(%v) = %v (%#x), math.Log gives %v (%#x)", x, got, math.Float64bits(got), want, math.Float64bits(want))
		}
	}
	// Long sums, with counts, at every offset.
	v := make([]float64, len(g))
	for q := range v {
		v[q] = float64(1 + r.IntN(9))
	}
	for _, off := range []int{0, 1, 7, 8, 13} {
		if got, want := logSum(0, g[off:], v[off:], false), scalar(g[off:], v[off:]); math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("offset %d: sum %v, scalar %v", off, got, want)
		}
	}
}

// TestCommitEntriesAVX2: the AVX2 commit of a row (commitAVX2) is
// bitwise the scalar commitEntry loop, for rows of D (one factor) and of
// K (a factor per entry, zeros keeping their entry), plain EM (keep 0)
// and learning rates below 1 (the floor), on random magnitudes, zeros,
// subnormals, entries that fall below EntryFloor and non-finite values.
func TestCommitEntriesAVX2(t *testing.T) {
	if !useAVX2() {
		t.Log("no AVX2 on this machine (or -tags purego): both paths are Go")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	val := func(k int) float64 {
		switch k % 9 {
		case 0:
			return 0
		case 1:
			return EntryFloor * rng.Float64() * 2
		case 2:
			return math.Ldexp(rng.Float64(), -1060) // subnormal
		case 3:
			return math.Ldexp(rng.Float64(), -140-rng.IntN(40))
		case 4:
			if rng.IntN(50) == 0 {
				return []float64{math.Inf(1), math.NaN()}[rng.IntN(2)]
			}
		}
		return math.Ldexp(rng.Float64(), -rng.IntN(60))
	}
	const n = 4096
	row, src, f := make([]float64, n), make([]float64, n), make([]float64, n)
	for k := range row {
		row[k], src[k], f[k] = val(k), val(k+rng.IntN(9)), val(k+rng.IntN(9))
	}
	floors := 0
	for _, keep := range []float64{0, 0.5, 0.999, 1 - 1e-12} {
		for _, each := range []bool{false, true} {
			for _, m := range []int{4, 8, 32, 12, 64} {
				fast, slow := slices.Clone(row), slices.Clone(row)
				for lo := 0; lo+m <= n; lo += m {
					fl := f[lo:]
					if !each {
						fl = f[lo : lo+1]
					}
					commitEntries(fast[lo:lo+m], src[lo:lo+m], fl, keep, each, false)
					commitEntries(slow[lo:lo+m], src[lo:lo+m], fl, keep, each, true)
				}
				for k := range fast {
					if math.Float64bits(fast[k]) != math.Float64bits(slow[k]) {
						t.Fatalf("keep %v each %v m %d: entry %d (v %v, src %v, f %v): AVX2 %v, scalar %v",
							keep, each, m, k, row[k], src[k], f[k], fast[k], slow[k])
					}
					if slow[k] == EntryFloor && row[k] != EntryFloor {
						floors++
					}
				}
			}
		}
	}
	if floors == 0 {
		t.Fatal("no entry was floored: the cases miss the floor")
	}
}

// TestCommitWorkersBitwise: a commit split among goroutines
// (CommitWorkers) writes bitwise the model one goroutine writes, for tie
// modes with several D and K blocks, learning rates below 1, float32
// models and a model large enough that the rows are really split.
func TestCommitWorkersBitwise(t *testing.T) {
	const n, m, u = 2500, 32, 2 // n·m ≥ commitParallelMin
	if n*m < commitParallelMin {
		t.Fatalf("n·m = %d: below commitParallelMin, the split is never taken", n*m)
	}
	for _, tie := range []Tie{TieNone, TieSharedD, TieSharedK} {
		for _, prec := range []Precision{Float64, Float32} {
			for _, alpha := range []float64{1, 0.4} {
				blocks := RandomCounts(n, u, 15, 4, 5)
				md := NewRandom(n, m, u, tie, 6)
				md.SetPrecision(prec)
				acc := NewAccumulator(md)
				if err := Pass(context.Background(), md, blocks, acc, 1, true); err != nil {
					t.Fatal(err)
				}
				want := md.Clone()
				acc.Commit(want, alpha, 0)
				for _, w := range []int{2, 3, 7} {
					got := md.Clone()
					acc.CommitWorkers(got, alpha, 0, w)
					for b := range want.D {
						if !bitsEqual(got.D[b], want.D[b]) {
							t.Fatalf("tie %v %v alpha %v workers %d: D block %d differs", tie, prec, alpha, w, b)
						}
					}
					for b := range want.KT {
						if !bitsEqual(got.KT[b], want.KT[b]) {
							t.Fatalf("tie %v %v alpha %v workers %d: K block %d differs", tie, prec, alpha, w, b)
						}
						if prec == Float32 && !slices.Equal(got.kt32[b], want.kt32[b]) {
							t.Fatalf("tie %v alpha %v workers %d: float32 K block %d differs", tie, alpha, w, b)
						}
					}
				}
			}
		}
	}
}

// TestStageBalance: the pipeline's column shares start equal, move
// towards the stage that was faster per column, halfway each pass, keep
// every stage a floor, and give splits that ascend from 0 to n.
func TestStageBalance(t *testing.T) {
	var b stageBalance
	split := b.splits(1000, 2)
	if !slices.Equal(split, []int32{0, 500, 1000}) {
		t.Fatalf("first splits %v, want [0 500 1000]", split)
	}
	// Stage 0 took three times as long for its half: its rate is 3x, so
	// balanced it would have a quarter; halfway from a half is 3/8.
	b.update(split, []time.Duration{3 * time.Millisecond, time.Millisecond})
	if math.Abs(b.share[0]-0.375) > 1e-12 || math.Abs(b.share[0]+b.share[1]-1) > 1e-12 {
		t.Fatalf("shares %v after a 3:1 pass, want [0.375 0.625]", b.share)
	}
	if split = b.splits(1000, 2); !slices.Equal(split, []int32{0, 375, 1000}) {
		t.Fatalf("splits %v, want [0 375 1000]", split)
	}
	// A stage that takes forever keeps a floor of a tenth of an equal share.
	for range 40 {
		b.update(b.splits(1000, 2), []time.Duration{time.Hour, time.Nanosecond})
	}
	if b.share[0] < 0.045 || b.share[0] > 0.06 {
		t.Fatalf("share %v of a stage 10^12 times slower, want about the floor 0.05", b.share[0])
	}
	// No measure (a stage with no time or no columns) changes nothing.
	before := slices.Clone(b.share)
	b.update(b.splits(1000, 2), []time.Duration{0, time.Second})
	if !slices.Equal(b.share, before) {
		t.Fatalf("shares moved without a measure: %v -> %v", before, b.share)
	}
	// Three stages; a new n or stage count starts equal again.
	split = b.splits(10, 3)
	if !slices.Equal(split, []int32{0, 3, 6, 10}) {
		t.Fatalf("splits for n = 10, 3 stages: %v", split)
	}
}

// TestPassDirect pins which blocks sum their rows of D̂ straight into the
// accumulator (Passer.direct): those that are the first in the plan's
// order to touch each of their rows within their D block.
func TestPassDirect(t *testing.T) {
	block := func(action int, rows ...int32) *Block {
		b := &Block{Action: action, Rows: rows, Ptr: make([]int64, len(rows)+1)}
		for r := range rows {
			b.Cols, b.Vals = append(b.Cols, 0), append(b.Vals, 1)
			b.Ptr[r+1] = int64(r + 1)
		}
		return b
	}
	// Action 0: rows {0, 1}, {2, 64}, {1, 3}; action 1: {0}, {5}.
	blocks := []*Block{block(0, 0, 1), block(0, 2, 64), block(0, 1, 3), block(1, 0), block(1, 5)}
	for _, tc := range []struct {
		tie  Tie
		want []bool // by block
	}{
		{TieNone, []bool{true, true, false, true, true}},
		{TieSharedK, []bool{true, true, false, true, true}},
		{TieSharedD, []bool{true, true, false, false, true}}, // one D: action 1's row 0 was action 0's
	} {
		md := NewRandom(70, 2, 2, tc.tie, 1)
		plan := PlanBlocks(blocks, tc.tie, 0)
		var ps Passer
		for range 2 { // the second reuses the working memory
			ps.direct(md, blocks, plan)
			fresh := ps.fresh
			for pos, k := range plan.Order {
				if fresh[pos] != tc.want[k] {
					t.Fatalf("%v: block %d (position %d): fresh %v, want %v", tc.tie, k, pos, fresh[pos], tc.want[k])
				}
			}
		}
		ps.noDirect = true
		ps.direct(md, blocks, plan)
		if slices.Contains(ps.fresh, true) {
			t.Fatalf("%v: noDirect, yet a block is fresh", tc.tie)
		}
	}
}

// withoutTerms returns b without its terms (i, j) for which drop(i, j)
// holds (and without rows left empty).
func withoutTerms(t *testing.T, b *Block, drop func(i, j int32) bool) *Block {
	t.Helper()
	var rows, cols []int32
	var vals []float64
	for r, i := range b.Rows {
		for q := b.Ptr[r]; q < b.Ptr[r+1]; q++ {
			if !drop(i, b.Cols[q]) {
				rows, cols, vals = append(rows, i), append(cols, b.Cols[q]), append(vals, b.Vals[q])
			}
		}
	}
	out, err := NewBlock(b.Action, rows, cols, vals)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestUseRows pins when a fused pass runs row by row: K beyond the
// caches (rowsMinBytes), a block that touches at most a quarter of K's
// rows with at most 1.5 terms per touched column, and a destination
// that takes rows without recording them; Scratch.rows overrides the
// choice.
func TestUseRows(t *testing.T) {
	md := NewRandom(300, 8, 1, TieNone, 1)
	bottom, recorded := &kSum{bottom: true}, &kSum{}
	big := rowsMinBytes / (8 * md.M) // n at which K is rowsMinBytes
	for _, tc := range []struct {
		n, cols, terms int
		rows           int8
		dst            *kSum
		want           bool
	}{
		{big, 100, 150, rowsAuto, bottom, true},
		{big, big / 4, big / 4, rowsAuto, bottom, true},
		{big - 1, 100, 150, rowsAuto, bottom, false},         // K fits the caches
		{big, 100, 151, rowsAuto, bottom, false},             // 1.51 terms per column
		{big, big/4 + 1, big/4 + 1, rowsAuto, bottom, false}, // a quarter of K's rows and one more
		{big, 100, 150, rowsAuto, recorded, false},           // a tree's later group
		{big, 100, 150, rowsAuto, nil, false},                // no destination: a partial
		{big - 1, 100, 400, rowsForce, bottom, true},         // forced
		{big, 100, 150, rowsNever, bottom, false},            // forced off
		{big, 100, 150, rowsForce, recorded, false},          // never where rows are recorded
		{big, 0, 0, rowsForce, bottom, false},                // an empty block
	} {
		md.N = tc.n
		ci := &colIndex{cols: make([]int32, tc.cols), vals: make([]float64, tc.terms)}
		if got := useRows(md, ci, &Scratch{rows: tc.rows}, tc.dst); got != tc.want {
			t.Errorf("n=%d cols=%d terms=%d rows=%d recorded=%v: useRows %v, want %v", tc.n, tc.cols, tc.terms, tc.rows, tc.dst != nil && !tc.dst.bottom, got, tc.want)
		}
	}
	// A float32 model too (the row pass reads K^T, which holds the same
	// values as its float32 copy).
	md.N = 300
	md32 := md.Clone()
	md32.SetPrecision(Float32)
	md32.ensure32()
	md32.N = big
	ci := &colIndex{cols: make([]int32, 100), vals: make([]float64, 150)}
	if !useRows(md32, ci, &Scratch{}, bottom) {
		t.Error("useRows chose the column pass for a float32 model")
	}
}

// TestAccumulatorReset checks that reset zeroes every sum whether it
// clears D̂ and K̂ on one goroutine or cuts them into parts (big enough
// for resetParMin, with a length the goroutines do not divide).
func TestAccumulatorReset(t *testing.T) {
	n := resetParMin/(2*8*4) + 3 // m = 4, u = 2 with TieSharedK: two D̂ and one K̂ of n·m
	for _, workers := range []int{1, 2, 3} {
		a := NewAccumulator(&Model{N: n, M: 4, U: 2, Tie: TieSharedK})
		for _, x := range slices.Concat(a.Dh, a.KhT, a.X, a.Y) {
			for k := range x {
				x[k] = float64(k + 1)
			}
		}
		a.LogLik, a.SumX, a.NNZ = 1, 2, 3
		a.reset(workers)
		for name, xs := range map[string][][]float64{"Dh": a.Dh, "KhT": a.KhT, "X": a.X, "Y": a.Y} {
			for b, x := range xs {
				if k := slices.IndexFunc(x, func(v float64) bool { return v != 0 }); k >= 0 {
					t.Fatalf("workers %d: %s[%d][%d] = %v after reset", workers, name, b, k, x[k])
				}
			}
		}
		if a.LogLik != 0 || a.SumX != 0 || a.NNZ != 0 {
			t.Fatalf("workers %d: scalars %v %v %d after reset", workers, a.LogLik, a.SumX, a.NNZ)
		}
	}
}
