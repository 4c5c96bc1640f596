package main

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"unsafe"
)

// hugeHeap asks the kernel to back the next n bytes of the Go heap with
// transparent huge pages, and returns where that region starts (0 when
// it did not ask). It allocates one
// object of n bytes: the runtime maps fresh address space for it with a
// single mmap, and memory fresh from the OS is not touched (not zeroed)
// by the allocation, so it costs no page. madvise(MADV_HUGEPAGE) marks that
// mapping; dropping the object and collecting gives its pages back to the
// heap, which allocates from them next, and the mapping keeps the mark
// (the runtime never maps heap memory again; scavenging it with
// MADV_DONTNEED keeps the mark too). Nothing depends on it: with another
// runtime or kernel the fit only runs as it did without.
//
// It does nothing for a region of more than a quarter of the address
// space (a 32-bit process), where huge pages are off ("never") or already on for
// every mapping ("always"), under GODEBUG=disablethp=1 (Go's own switch
// against huge pages on the heap), or with a soft memory limit set
// (GOMEMLIMIT): the free region would count against it.
func hugeHeap(n int64) uintptr {
	if n <= 0 || n > math.MaxInt/4 || thpMode() != "madvise" || strings.Contains(os.Getenv("GODEBUG"), "disablethp=1") ||
		debug.SetMemoryLimit(-1) != math.MaxInt64 {
		return 0
	}
	b := make([]byte, n)
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	err := syscall.Madvise(b, syscall.MADV_HUGEPAGE)
	b = nil
	runtime.GC()
	if err != nil {
		return 0
	}
	return base
}

// thpMode is the system's transparent huge page mode (always, madvise
// or never), "" when unknown.
func thpMode() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return ""
	}
	return selectedMode(string(b))
}

// selectedMode is the bracketed word of a sysfs choice ("always
// [madvise] never" → "madvise"), "" when there is none.
func selectedMode(s string) string {
	_, rest, ok := strings.Cut(s, "[")
	mode, _, ok2 := strings.Cut(rest, "]")
	if !ok || !ok2 {
		return ""
	}
	return mode
}
