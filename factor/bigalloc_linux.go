package factor

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// adviseHuge marks the 2 MiB-aligned pages inside x for transparent huge
// pages (MADV_HUGEPAGE: what THP's default "madvise" mode waits for), and
// asks the kernel to collapse those already faulted in as 4 KiB pages
// (MADV_COLLAPSE, Linux ≥ 6.1; memory the Go heap reuses was). Both are
// hints about memory the Go heap owns: they change no value, and an
// error (no THP, an older kernel, no huge page free) leaves x on small
// pages, so it is ignored.
func adviseHuge[T float32 | float64](x []T) {
	const huge = 2 << 20
	start := uintptr(unsafe.Pointer(unsafe.SliceData(x)))
	size := int(unsafe.Sizeof(*new(T)))
	end := start + uintptr(len(x)*size)
	lo := (start + huge - 1) &^ (huge - 1)
	hi := end &^ (huge - 1)
	if hi <= lo {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), len(x)*size)[lo-start : hi-start]
	if unix.Madvise(b, unix.MADV_HUGEPAGE) != nil {
		return
	}
	_ = unix.Madvise(b, unix.MADV_COLLAPSE)
}
