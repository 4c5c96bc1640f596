package factor

import "math"

// logAll sets dst[q] = math.Log(src[q]) for q < len(src), bitwise: with
// AVX2 (amd64, not purego) four at a time by math.Log's own operations
// (logsAVX2), a group with a zero, negative, infinite or NaN value one by
// one with math.Log. SQUAREM under the prior takes every entry's
// logarithm three times a cycle (penaltyLogs, extrapolate): one by one,
// math.Log was 40 % of a default fit's time on the real-data benchmark.
func logAll(dst, src []float64) { apply4(dst, src, useAVX2(), logsAVX2, math.Log) }

// expAll sets dst[q] = math.Exp(src[q]) for q < len(src), bitwise: with
// AVX2 and FMA (amd64, not purego) four at a time by math.Exp's own
// operations (expsAVX2), a group with a value math.Exp treats apart one
// by one with math.Exp.
func expAll(dst, src []float64) { apply4(dst, src, useExpAVX2(), expsAVX2, math.Exp) }

// apply4 sets dst[q] = f(src[q]) for q < len(src): with vec (when use)
// on groups of four until it stops before a group, that group with f,
// and so on; the tail and every value without use with f.
func apply4(dst, src []float64, use bool, vec func(dst, src *float64, groups int) int, f func(float64) float64) {
	dst = dst[:len(src)]
	q := 0
	if use {
		for len(src)-q >= 4 {
			q += 4 * vec(&dst[q], &src[q], (len(src)-q)/4)
			if len(src)-q < 4 {
				break
			}
			for end := q + 4; q < end; q++ {
				dst[q] = f(src[q])
			}
		}
	}
	for ; q < len(src); q++ {
		dst[q] = f(src[q])
	}
}
