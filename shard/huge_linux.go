package shard

import (
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page on linux/amd64 and arm64
// (with 4 KiB base pages).
const hugePage = 2 << 20

// adviseHuge asks the kernel to back the whole huge pages inside x's
// backing array with transparent huge pages when they are first touched
// (madvise MADV_HUGEPAGE; a hint, ignored where THP is off). On a virtual
// machine a first touch of a 4 KiB page can cost microseconds; one fault
// per 2 MiB instead makes filling a fresh array of counts several times
// faster (measured in docs/benchmarks.md, section Ingest). Arrays under
// two huge pages are left alone.
func adviseHuge[T any](x []T) {
	var zero T
	n := uintptr(cap(x)) * unsafe.Sizeof(zero)
	if n < 2*hugePage {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x[:cap(x)]))), n)
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	beg := (p+hugePage-1)&^(hugePage-1) - p
	end := (p+n)&^(hugePage-1) - p
	if beg < end {
		_ = syscall.Madvise(b[beg:end], syscall.MADV_HUGEPAGE) // a hint: an error changes nothing
	}
}

// mapSlab returns size bytes of fresh zeroed memory outside the Go heap
// (an anonymous mmap advised for huge pages) and the function that
// unmaps it, or Go memory and a no-op where mmap fails. Memory unmapped
// leaves the process at once, where the Go runtime would keep freed
// spans (see slab).
func mapSlab(size int) (mem []byte, unmap func([]byte)) {
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, size), func([]byte) {}
	}
	// The whole mapping, not only its aligned huge pages (adviseHuge):
	// it is ours alone, and one flag over all of it lets the kernel merge
	// neighbouring slabs into one mapping instead of three apiece (a log
	// of 10^9 transitions takes a thousand slabs).
	_ = syscall.Madvise(mem, syscall.MADV_HUGEPAGE)      // a hint: an error changes nothing
	return mem, func(m []byte) { _ = syscall.Munmap(m) } // only fails for a bad range, which m is not
}

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14).
const madvPopulateWrite = 23

// populate faults in the pages of mem that lie wholly inside it, writable,
// without changing their contents (madvise MADV_POPULATE_WRITE; a hint:
// older kernels refuse it and the pages are faulted in when first
// written, as without it). One call instead of a fault a page (or huge
// page) as the array is first written: on this VM that took a tenth off
// the CPU of an Arrow ingest (docs/benchmarks.md, Ingest, round 4).
// Below hugePage bytes it does nothing: few faults to save.
func populate(mem []byte) {
	if len(mem) < hugePage {
		return
	}
	const page = 4 << 10
	p := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	beg := (p+page-1)&^(page-1) - p
	end := (p+uintptr(len(mem)))&^(page-1) - p // > beg: mem spans pages
	_ = syscall.Madvise(mem[beg:end], madvPopulateWrite)
}
