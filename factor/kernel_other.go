//go:build !amd64 || purego

package factor

func useAVX2() bool { return false }

func useAVX512() bool { return false }

func useLogAVX512() bool { return false }

func runAVX2(d, dh, kt, kh, sv *float64, cols *int32, vals *float64, gs *float64, n, mbytes int) {
	panic("factor: runAVX2 without AVX2")
}

// Without the assembly the prefetch hints are no-ops: they change no
// value, only when lines arrive.

func prefetchR(p *float64, bytes int) {}

func prefetchRW(r, w *float64, bytes int) {}

func prefetchW(w *float64, bytes int) {}

func prefetchR32(p *float32, bytes int) {}

func widenAVX2(dst *float64, src *float32, n int) {
	panic("factor: widenAVX2 without AVX2")
}

func round32AVX2(x *float64, x32 *float32, n int) {
	panic("factor: round32AVX2 without AVX2")
}

func commitAVX2(row, src, f *float64, n int, keep float64, each, floor int) {
	panic("factor: commitAVX2 without AVX2")
}

func runColsAVX2(a *colArgs) {
	panic("factor: runColsAVX2 without AVX2")
}

func useExpAVX2() bool { return false }

func expsAVX2(dst, src *float64, groups int) int {
	panic("factor: expsAVX2 without AVX2")
}

func logsAVX2(dst, src *float64, groups int) int {
	panic("factor: logsAVX2 without AVX2")
}

func logSumAVX512(ll *float64, gs, v *float64, groups int) int {
	panic("factor: logSumAVX512 without AVX-512")
}

func prefetchIdx(kt, kh *float64, idx *int32, n, mbytes int) {}

func ruleProbsAVX2(pr, gs, qs, x, cf *float64, off *int32, mass *float64, groups int, c *ruleConsts) int {
	panic("factor: ruleProbsAVX2 without AVX2")
}

func useExpAVX512() bool { return false }

func logsAVX512(dst, src *float64, groups int) int {
	panic("factor: logsAVX512 without AVX-512")
}

func expsAVX512(dst, src *float64, groups int) int {
	panic("factor: expsAVX512 without AVX-512")
}

func combineAVX512(out, a0, a1, a2, l0, l1 *float64, n int, c *float64) int {
	panic("factor: combineAVX512 without AVX-512")
}

func rowMaxSubAVX512(x, a2 *float64, n int) { panic("factor: rowMaxSubAVX512 without AVX-512") }

func rowSumDivAVX512(x, a2 *float64, n int) { panic("factor: rowSumDivAVX512 without AVX-512") }

func colMaxAVX512(mx, x, a2 *float64, rows, m int) {
	panic("factor: colMaxAVX512 without AVX-512")
}

func colSubAVX512(x, a2, mx *float64, rows, m int) { panic("factor: colSubAVX512 without AVX-512") }

func colSumAVX512(s, x, a2 *float64, rows, m int) { panic("factor: colSumAVX512 without AVX-512") }

func colDivAVX512(x, a2, s *float64, rows, m int) { panic("factor: colDivAVX512 without AVX-512") }

func useExtrapAVX512() bool { return false }

func divRowAVX512(row, h *float64, n int, add, s float64) {
	panic("factor: divRowAVX512 without AVX-512")
}

func mapKAVX512(kt, kh, base, den, q *float64, rows, m int, pk float64) {
	panic("factor: mapKAVX512 without AVX-512")
}

func logRowSumAVX512(dst, src, q *float64, rows, m int, t *float64) int {
	panic("factor: logRowSumAVX512 without AVX-512")
}

func lengthSumsAVX512(a0, a1, a2 *float64, n int, sums *float64) {
	panic("factor: lengthSumsAVX512 without AVX-512")
}
