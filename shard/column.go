package shard

import (
	"runtime"
	"unsafe"
)

// column is a growable array of T for the long-lived arrays of a Table.
// Once it holds more than offHeapMin bytes it lives outside the Go heap
// (an anonymous mapping, see mapColumn), where growing moves page tables
// instead of copying (mremap on Linux) and memory given back leaves the
// process at once: arrays on the Go heap would keep each old copy resident
// until a collection (the heap grows to twice what is live, GOGC=100), so
// a table of B bytes would cost up to 2B. Room beyond the length is
// mapped but not touched, so it costs address space, not memory.
//
// Slices of a column (s[lo:hi]) are valid while the column is reachable
// and until it next grows or is freed.
type column[T int32 | int64 | float64] struct {
	s  []T
	m  *mapping // nil while s is Go memory
	cl runtime.Cleanup
}

// mapping is a column's off-heap memory (its own object, so that the
// cleanup that unmaps it does not keep the column alive).
type mapping struct{ mem []byte }

// offHeapMin is the size from which a column lives outside the Go heap:
// smaller ones are cheaper as Go memory (a mapping takes whole pages, and
// a table of many actions has many small columns).
const offHeapMin = 256 << 10

func sizeOf[T any]() int {
	var zero T
	return int(unsafe.Sizeof(zero))
}

// resize sets the length to n, keeping the first min(n, len) elements
// (elements past the old length are zero); room grows by a quarter at
// least, so that growing one element at a time costs O(1) amortized.
func (c *column[T]) resize(n int) {
	if n <= cap(c.s) {
		if n > len(c.s) {
			clear(c.s[len(c.s):n])
		}
		c.s = c.s[:n]
		return
	}
	room := max(n, cap(c.s)+cap(c.s)/4, 16)
	size := sizeOf[T]()
	if room*size < offHeapMin {
		s := make([]T, n, room)
		copy(s, c.s)
		c.s = s
		return
	}
	old := len(c.s)
	if c.m == nil {
		mem, ok := mapColumn(room * size)
		if !ok {
			s := make([]T, n, room)
			copy(s, c.s)
			c.s = s
			return
		}
		m := &mapping{mem: mem}
		s := unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(mem))), room)
		copy(s, c.s)
		c.s, c.m = s[:n], m
		c.cl = runtime.AddCleanup(c, func(m *mapping) { unmapColumn(m.mem) }, m)
		return
	}
	mem, ok := remapColumn(c.m.mem, room*size)
	if !ok {
		// Mapping elsewhere failed: copy into a new mapping.
		fresh, ok := mapColumn(room * size)
		if !ok {
			panic("shard: out of address space for a count table column")
		}
		copy(fresh, c.m.mem[:old*size])
		unmapColumn(c.m.mem)
		mem = fresh
	}
	c.m.mem = mem
	s := unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(mem))), room)
	clear(s[old:n]) // fresh pages are zero; a remapped tail may not be
	c.s = s[:n]
}

// free gives the column's memory back; the column is empty afterwards.
func (c *column[T]) free() {
	if c.m != nil {
		c.cl.Stop()
		unmapColumn(c.m.mem)
		c.m = nil
	}
	c.s = nil
}

// bytes is the memory the column's elements take (its length, not its
// untouched room).
func (c *column[T]) bytes() int64 { return int64(len(c.s)) * int64(sizeOf[T]()) }
