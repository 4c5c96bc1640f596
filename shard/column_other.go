//go:build !linux

package shard

// mapColumn declines: columns stay Go memory where the kernel cannot
// grow a mapping in place.
func mapColumn(size int) ([]byte, bool) { return nil, false }

func remapColumn(mem []byte, size int) ([]byte, bool) { return nil, false }

func unmapColumn(mem []byte) {}
