//go:build !linux

package shard

// adviseHuge is a no-op where transparent huge pages cannot be asked for.
func adviseHuge[T any](x []T) {}

// mapSlab returns size bytes of Go memory: without mmap, freed memory
// leaves the process when the Go runtime returns it.
func mapSlab(size int) (mem []byte, unmap func([]byte)) {
	return make([]byte, size), func([]byte) {}
}

// populate is a no-op where the kernel cannot be asked to back memory
// ahead of its first write.
func populate(mem []byte) {}
