package shard

import "golang.org/x/sys/unix"

// mapColumn maps size bytes of fresh zeroed memory outside the Go heap.
func mapColumn(size int) ([]byte, bool) {
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	return mem, err == nil
}

// remapColumn grows a mapping of mapColumn to size bytes, moving it (its
// page tables, not its contents) when it cannot grow in place.
func remapColumn(mem []byte, size int) ([]byte, bool) {
	out, err := unix.Mremap(mem, size, unix.MREMAP_MAYMOVE)
	return out, err == nil
}

// unmapColumn gives a mapping of mapColumn back to the system.
func unmapColumn(mem []byte) { _ = unix.Munmap(mem) } // fails only for a bad range, which mem is not
