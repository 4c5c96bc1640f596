package factor

// hugeMin is the size from which bigFloats asks for huge pages: below a
// few huge pages there is nothing to gain.
const hugeMin = 8 << 20

// bigFloats returns a zeroed []float64 of length n for one of the big
// arrays of a fit (a model's D and K^T blocks, an accumulator's D̂ and
// K̂^T, the reduction's K̂ buffers). It is an ordinary Go slice, owned and
// freed by the garbage collector like any other; where the OS allows it,
// its whole 2 MiB pages are marked for transparent huge pages (see
// adviseHuge), because a pass reads rows of K^T and K̂^T at random: at
// n = 10^6, m = 32 each is 256 MB, and with 4 KiB pages nearly every row
// also misses the TLB and walks the page tables.
func bigFloats(n int) []float64 {
	x := make([]float64, n)
	if n*8 >= hugeMin {
		adviseHuge(x)
	}
	return x
}

// bigFloat32s is bigFloats for the float32 copy of K^T that a pass of a
// float32 model reads (Model.Precision).
func bigFloat32s(n int) []float32 {
	x := make([]float32, n)
	if n*4 >= hugeMin {
		adviseHuge(x)
	}
	return x
}

// cloneFloats returns a copy of x in memory from bigFloats.
func cloneFloats(x []float64) []float64 {
	c := bigFloats(len(x))
	copy(c, x)
	return c
}
