//go:build amd64 && !purego

package topk

import "golang.org/x/sys/cpu"

// haveDots32 says whether dots32AVX2 may be used (AVX2 and FMA). Build
// with -tags purego to use the pure-Go kernel only.
func haveDots32() bool { return cpu.X86.HasAVX2 && cpu.X86.HasFMA }

// dots32AVX2 sets out[r] = Σ_c w[c]·rows[r·stride+c] in float32 for
// r < nrows (a positive multiple of 8), stride a positive multiple of 8
// (see kernel_amd64.s): eight rows at a time, each a chain of fused
// multiply-adds per lane, the lanes then added by a tree; it returns the
// largest out[r] (the scores are >= 0: 0 when all are).
//
//go:noescape
func dots32AVX2(out, w, rows *float32, nrows, stride int) float32

// dots32 is the float32 kernel of the shadow scan: dots32AVX2 where the
// CPU has it, else dots32Go. nrows and stride are multiples of 8. It
// returns the largest score (of non-negative w and rows).
func dots32(out, w, rows []float32, nrows, stride int) float32 {
	if haveDots32() && nrows > 0 {
		_ = out[nrows-1]
		_ = rows[nrows*stride-1]
		_ = w[stride-1]
		return dots32AVX2(&out[0], &w[0], &rows[0], nrows, stride)
	}
	return dots32Go(out, w, rows, nrows, stride)
}
