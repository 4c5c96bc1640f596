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
