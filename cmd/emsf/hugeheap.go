package main

import (
	"github.com/emsf/emsf/arrowio"
)

// Transparent huge pages for a local fit's heap.
//
// A fresh 4 KiB page of memory costs 11–14 µs on the virtual machines we
// measure (scripts/machine_floor.py), and a default fit of a 3.5 MB CSV
// touches ~5 000 of them: a quarter of its wall time goes to page
// faults. Linux backs a region with 2 MiB pages where the process asks
// (madvise(MADV_HUGEPAGE) under transparent_hugepage "madvise", the usual
// default); Go's runtime asks for none on its heap. hugeHeap asks for
// them on a region of the heap the fit then allocates from; with it, that
// fit faults ~2 400 times instead and runs in 0.17 s instead of 0.22 s,
// and the medium job of issue 28 in 12.9 s instead of 15.9 s, its peak
// RSS 3 % higher (docs/quality.md, round 8). Only local fits ask (not
// workers, the service or a cluster's coordinator, whose memory budgets
// are proved with 4 KiB pages), and never a test calling run.

// Bounds of the heap region hugeHeap asks huge pages for.
const (
	hugeHeapMin      = 64 << 20
	hugeHeapMax      = 4 << 30
	hugeHeapPerInput = 8 // bytes of heap per byte of input, about what a fit's peak RSS is
)

// hugeHeapBytes is the size of the region to ask huge pages for, for a
// fit of input (format as --input-format): hugeHeapPerInput times the
// size of its files, within [hugeHeapMin, hugeHeapMax] and at most half
// of mem (the machine's memory, 0 when unknown); hugeHeapMin when the
// input is not local files (standard input, NATS).
func hugeHeapBytes(input, format string, mem int64) int64 {
	size := int64(0)
	if files, err := arrowio.ListDataset(input, format); err == nil {
		for _, f := range files {
			size += f.Size
		}
	}
	n := min(max(hugeHeapPerInput*size, hugeHeapMin), hugeHeapMax)
	if mem > 0 {
		n = min(n, mem/2)
	}
	return n
}
