//go:build !linux

package factor

// adviseHuge is a no-op where madvise(MADV_HUGEPAGE) is not available.
func adviseHuge[T float32 | float64](x []T) {}
