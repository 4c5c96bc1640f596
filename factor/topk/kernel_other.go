//go:build !amd64 || purego

package topk

// haveDots32 is false without the assembly.
func haveDots32() bool { return false }

func dots32AVX2(out, w, rows *float32, nrows, stride int) float32 {
	panic("topk: dots32AVX2 without AVX2")
}

// dots32 is the float32 kernel of the shadow scan (dots32Go here).
func dots32(out, w, rows []float32, nrows, stride int) float32 {
	return dots32Go(out, w, rows, nrows, stride)
}
