//go:build amd64 && !purego

package factor

import "golang.org/x/sys/cpu"

// useAVX2 says whether runAVX2 may be used. Build with -tags purego to
// use the pure-Go kernel only.
func useAVX2() bool { return cpu.X86.HasAVX2 }

// useAVX512 says whether the kernel may scatter with AVX-512 (eight
// elements an instruction instead of four; elementwise, so the same bits).
func useAVX512() bool { return cpu.X86.HasAVX512F && cpu.X86.HasAVX2 }

// useLogAVX512 says whether logSumAVX512 may be used (it converts
// integers with AVX-512DQ).
func useLogAVX512() bool { return cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ }

// runAVX2 is the AVX2 version of the inner loop of Compute over one column;
// see kernel_amd64.s. It computes bitwise what prodSum and scatter compute.
//
//go:noescape
func runAVX2(d, dh, kt, kh, sv *float64, cols *int32, vals *float64, gs *float64, n, mbytes int)

// runColsAVX2 runs the columns at positions [a.c0, a.c1) of a block's
// pass with runAVX2's kernel, as runColumns does column by column (see
// kernel_amd64.s): without a Go call per column, which at n = 10^6 (about
// one term per column) cost as much as the kernel itself.
//
//go:noescape
func runColsAVX2(a *colArgs)

// prefetchR, prefetchRW and prefetchW hint rows of the big arrays into the
// cache ahead of their use (see kernel_amd64.s); they change no value.
// Go has no prefetch intrinsic, and at n = 10^6 every row of K and K̂ a
// pass touches is a DRAM miss: issued a few columns early, the misses
// overlap instead of queueing one after another.

//go:noescape
func prefetchR(p *float64, bytes int)

//go:noescape
func prefetchRW(r, w *float64, bytes int)

//go:noescape
func prefetchW(w *float64, bytes int)

// prefetchIdx hints, for each of the n indices at idx, that row of kt for
// reading and that row of kh for writing (mbytes each): the rows of K and
// K̂ of the next terms of a row-major pass (rowpass.go).
//
//go:noescape
func prefetchIdx(kt, kh *float64, idx *int32, n, mbytes int)

// prefetchR32 is prefetchR for a row of a float32 model's copy of K^T.
//
//go:noescape
func prefetchR32(p *float32, bytes int)

// widenAVX2 sets dst[l] = float64(src[l]) for l < n, n a positive
// multiple of 4: widen, in AVX2 (see kernel_amd64.s).
//
//go:noescape
func widenAVX2(dst *float64, src *float32, n int)

// round32AVX2 is round32Row in AVX2 for n a positive multiple of 4 (see
// kernel_amd64.s); x32 may be nil.
//
//go:noescape
func round32AVX2(x *float64, x32 *float32, n int)

// commitAVX2 is commitEntry over n entries of a row, n a positive
// multiple of 4, in AVX2 (see kernel_amd64.s): f holds one factor per
// entry (each = 1; an entry whose factor is 0 keeps its value) or one
// for all (each = 0); floor = 1 applies EntryFloor.
//
//go:noescape
func commitAVX2(row, src, f *float64, n int, keep float64, each, floor int)

// logSumAVX512 adds v[q]·log(gs[q]) to *ll for q < 8·groups in order,
// with math.Log's own operations eight lanes at a time (see
// kernel_amd64.s), stopping before a group with an infinite or NaN g; it
// returns the number of groups done. Every g must be positive.
//
//go:noescape
func logSumAVX512(ll *float64, gs, v *float64, groups int) int

// logsAVX2 sets dst[q] = math.Log(src[q]) for q < 4·groups, with
// math.Log's own operations four lanes at a time (see kernel_amd64.s),
// stopping before a group with a lane that is zero, negative, infinite
// or NaN; it returns the number of groups done.
//
//go:noescape
func logsAVX2(dst, src *float64, groups int) int

// useExpAVX2 says whether expsAVX2 may be used: it follows math.Exp's
// path for machines with FMA, which math.Exp takes with AVX and FMA.
func useExpAVX2() bool { return cpu.X86.HasAVX2 && cpu.X86.HasAVX && cpu.X86.HasFMA }

// expsAVX2 sets dst[q] = math.Exp(src[q]) for q < 4·groups, with
// math.Exp's own operations (its FMA path) four lanes at a time (see
// kernel_amd64.s), stopping before a group with a lane that math.Exp
// treats apart (not finite, overflow, underflow, a subnormal result); it
// returns the number of groups done.
//
//go:noescape
func expsAVX2(dst, src *float64, groups int) int

// ruleProbsAVX2 is ruleProbs' loop over groups of four nonzeros in AVX2
// (see kernel_amd64.s), bitwise; it stops before a group with a value
// not > 0 and returns the number of groups done.
//
//go:noescape
func ruleProbsAVX2(pr, gs, qs, x, cf *float64, off *int32, mass *float64, groups int, c *ruleConsts) int

// useExpAVX512 says whether expsAVX512 may be used: AVX-512F, and FMA
// with AVX for math.Exp's path that expsAVX512 follows.
func useExpAVX512() bool { return cpu.X86.HasAVX512F && useExpAVX2() }

// logsAVX512 is logsAVX2 eight lanes at a time (see kernel_amd64.s):
// dst[q] = math.Log(src[q]) for q < 8·groups, bitwise, stopping before a
// group with a lane that is zero, negative, infinite or NaN; it returns
// the number of groups done. It needs AVX-512F and DQ (useLogAVX512).
//
//go:noescape
func logsAVX512(dst, src *float64, groups int) int

// expsAVX512 is expsAVX2 eight lanes at a time (see kernel_amd64.s):
// dst[q] = math.Exp(src[q]) for q < 8·groups, bitwise, stopping before a
// group with a lane that math.Exp treats apart; it returns the number of
// groups done. It needs useExpAVX512.
//
//go:noescape
func expsAVX512(dst, src *float64, groups int) int

// The kernels of extrapolate in AVX-512F (see kernel_amd64.s, where each
// is described): n and m positive multiples of 8. Each computes bitwise
// what the scalar loop it replaces computes (extrapolate's pure-Go path,
// which runs without AVX-512, with -tags purego, or for m not a multiple
// of 8).

//go:noescape
func combineAVX512(out, a0, a1, a2, l0, l1 *float64, n int, c *float64) int

//go:noescape
func rowMaxSubAVX512(x, a2 *float64, n int)

//go:noescape
func rowSumDivAVX512(x, a2 *float64, n int)

//go:noescape
func colMaxAVX512(mx, x, a2 *float64, rows, m int)

//go:noescape
func colSubAVX512(x, a2, mx *float64, rows, m int)

//go:noescape
func colSumAVX512(s, x, a2 *float64, rows, m int)

//go:noescape
func colDivAVX512(x, a2, s *float64, rows, m int)

// useExtrapAVX512 says whether extrapolate's kernels may be used: they
// take byte masks (AVX-512DQ) and count with POPCNT.
func useExtrapAVX512() bool {
	return cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasPOPCNT
}

// divRowAVX512 and mapKAVX512 are mapCommit's loops in AVX-512F (see
// kernel_amd64.s), bitwise.

//go:noescape
func divRowAVX512(row, h *float64, n int, add, s float64)

//go:noescape
func mapKAVX512(kt, kh, base, den, q *float64, rows, m int, pk float64)

// logRowSumAVX512 is penaltyLogs' logarithms and sum over rows of a
// block in AVX-512F and DQ (see kernel_amd64.s), bitwise; it stops
// before a row with a special entry and returns the number of rows done.
//
//go:noescape
func logRowSumAVX512(dst, src, q *float64, rows, m int, t *float64) int

// lengthSumsAVX512 is squaremLength's loop in AVX-512F (see
// kernel_amd64.s), bitwise.
//
//go:noescape
func lengthSumsAVX512(a0, a1, a2 *float64, n int, sums *float64)
