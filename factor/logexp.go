package factor

import "math"

// logAll sets dst[q] = math.Log(src[q]) for q < len(src), bitwise: with
// AVX2 (amd64, not purego) four at a time by math.Log's own operations
// (logsAVX2), a group with a zero, negative, infinite or NaN value one by
// one with math.Log. SQUAREM under the prior takes every entry's
// logarithm three times a cycle (penaltyLogs, extrapolate): one by one,
// math.Log was 40 % of a default fit's time on the real-data benchmark.
func logAll(dst, src []float64) { apply4(dst, src, opLog) }

// expAll sets dst[q] = math.Exp(src[q]) for q < len(src), bitwise: with
// AVX2 and FMA (amd64, not purego) four at a time by math.Exp's own
// operations (expsAVX2), a group with a value math.Exp treats apart one
// by one with math.Exp.
func expAll(dst, src []float64) { apply4(dst, src, opExp) }

// The functions apply4 applies.
const (
	opLog = iota
	opExp
)

// apply4 sets dst[q] = f(src[q]) for q < len(src), f the function op:
// with its kernel (where the machine has it) on groups of eight
// (AVX-512: logsAVX512, expsAVX512) or four (AVX2) until the kernel
// stops before a group, that group with f alone, and so on; the tail
// with f alone. The kernels are called directly, never through a
// function value, so that dst and src do not escape: callers pass
// slices of arrays on their stacks. Every value is f's, whichever
// kernel takes it, so the width changes no bit. Eight lanes halve the
// time per value (BenchmarkLogExpKernels, one 128k-entry block on the
// AVX-512 machine of issue 28: log 0.23 → 0.12 ms, exp 0.24 → 0.13 ms).
func apply4(dst, src []float64, op int) {
	dst = dst[:len(src)]
	f, use, use8 := math.Log, useAVX2(), useLogAVX512()
	if op == opExp {
		f, use, use8 = math.Exp, useExpAVX2(), useExpAVX512()
	}
	q := 0
	for use8 && len(src)-q >= 8 {
		groups := (len(src) - q) / 8
		if op == opExp {
			q += 8 * expsAVX512(&dst[q], &src[q], groups)
		} else {
			q += 8 * logsAVX512(&dst[q], &src[q], groups)
		}
		if len(src)-q < 8 {
			break
		}
		for end := q + 8; q < end; q++ {
			dst[q] = f(src[q])
		}
	}
	for use && len(src)-q >= 4 {
		groups := (len(src) - q) / 4
		if op == opExp {
			q += 4 * expsAVX2(&dst[q], &src[q], groups)
		} else {
			q += 4 * logsAVX2(&dst[q], &src[q], groups)
		}
		if len(src)-q < 4 {
			break
		}
		for end := q + 4; q < end; q++ {
			dst[q] = f(src[q])
		}
	}
	for ; q < len(src); q++ {
		dst[q] = f(src[q])
	}
}
