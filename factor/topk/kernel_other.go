//go:build !amd64 || purego

package topk

// haveAVX2 is false without the assembly.
func haveAVX2() bool { return false }

// dots32 is the float32 kernel of ScanFloat32 (dots32Go here).
func dots32(out, w, rows []float32, nrows, stride int) float32 {
	return dots32Go(out, w, rows, nrows, stride)
}

// dots8 is the 8-bit shadow's kernel (dots8Go here).
func dots8(out []float32, w []int16, codes []uint8, scales []float32, unit, h float32, nrows, stride int) float32 {
	return dots8Go(out, w, codes, scales, unit, h, nrows, stride)
}
