package shard

import (
	"runtime"
	"unsafe"
)

// slab is the memory that the full-size chunks of one actionLog are cut
// from: slabChunks chunks' states and next states, outside the Go heap
// where the platform allows (mapSlab), so that Matrices gives each slab
// back to the system as soon as its chunks are placed. Memory freed to
// the Go collector instead stays resident for a while (the runtime
// returns freed spans at its scavenger's pace), so the whole log would
// still be resident when the last matrix is built: the log and the CSR
// at once, ≈ 1.9× the CSR at the peak where this keeps it near 1×.
//
// A slab's arrays may be used only while the slab is reachable and not
// released: every chunk cut from it points to it.
type slab struct {
	i, j    []int32 // the part not cut yet
	mem     []byte  // nil once released
	unmap   func([]byte)
	cleanup runtime.Cleanup
}

// newSlab maps a slab of slabChunks chunks of chunkLen transitions.
func newSlab() *slab {
	const n = slabChunks * chunkLen
	mem, unmap := mapSlab(2 * n * 4)
	all := unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(mem))), 2*n)
	s := &slab{i: all[:n:n], j: all[n:], mem: mem, unmap: unmap}
	// A counter dropped before Matrices (a read that failed) gives its
	// slabs back when they are collected.
	s.cleanup = runtime.AddCleanup(s, unmap, mem)
	return s
}

// cut returns the next chunk of the slab (empty arrays of capacity
// chunkLen), or nil when the slab is used up.
func (s *slab) cut() *chunk {
	if len(s.i) < chunkLen {
		return nil
	}
	ch := &chunk{i: s.i[:0:chunkLen], j: s.j[:0:chunkLen], s: s}
	s.i, s.j = s.i[chunkLen:], s.j[chunkLen:]
	return ch
}

// release gives the slab's memory back to the system. Nothing cut from
// it may be used afterwards.
func (s *slab) release() {
	if s.mem == nil {
		return
	}
	s.cleanup.Stop()
	mem := s.mem
	s.i, s.j, s.mem = nil, nil, nil
	s.unmap(mem)
}
