//go:build amd64 && !purego

package topk

import "golang.org/x/sys/cpu"

// haveAVX2 says whether the assembly kernels may be used (AVX2 and FMA).
// Build with -tags purego to use the pure-Go kernels only.
func haveAVX2() bool { return cpu.X86.HasAVX2 && cpu.X86.HasFMA }

// dots32AVX2 sets out[r] = Σ_c w[c]·rows[r·stride+c] in float32 for
// r < nrows (a positive multiple of 8), stride a positive multiple of 8
// (see kernel_amd64.s): eight rows at a time, each a chain of fused
// multiply-adds per lane, the lanes then added by a tree; it returns the
// largest out[r] (the scores are >= 0: 0 when all are).
//
//go:noescape
func dots32AVX2(out, w, rows *float32, nrows, stride int) float32

// dots32 is the float32 kernel of ScanFloat32: dots32AVX2 where the CPU
// has it, else dots32Go. nrows and stride are multiples of 8. It returns
// the largest score (of non-negative w and rows).
func dots32(out, w, rows []float32, nrows, stride int) float32 {
	if haveAVX2() && nrows > 0 {
		_ = out[nrows-1]
		_ = rows[nrows*stride-1]
		_ = w[stride-1]
		return dots32AVX2(&out[0], &w[0], &rows[0], nrows, stride)
	}
	return dots32Go(out, w, rows, nrows, stride)
}

// dots8AVX2 sets out[r] = (float32(Σ_c w[c]·codes[r·stride+c])·unit +
// h)·scales[r] for r < nrows (a positive multiple of 8), stride a
// positive multiple of 16 (see kernel_amd64.s), the integer sums below
// 2^31, and returns the largest out[r].
//
//go:noescape
func dots8AVX2(out *float32, w *int16, codes *uint8, scales *float32, unit, h float32, nrows, stride int) float32

// dots8 is the 8-bit shadow's kernel: dots8AVX2 where the CPU has it,
// else dots8Go. nrows is a multiple of 8, stride of 16. It returns the
// largest output (of non-negative w, unit, h and scales: 0 when all are
// 0).
func dots8(out []float32, w []int16, codes []uint8, scales []float32, unit, h float32, nrows, stride int) float32 {
	if haveAVX2() && nrows > 0 {
		_ = out[nrows-1]
		_ = codes[nrows*stride-1]
		_ = scales[nrows-1]
		_ = w[stride-1]
		return dots8AVX2(&out[0], &w[0], &codes[0], &scales[0], unit, h, nrows, stride)
	}
	return dots8Go(out, w, codes, scales, unit, h, nrows, stride)
}
