//go:build !linux

package main

// hugeHeap does nothing outside Linux (see hugeheap_linux.go).
func hugeHeap(n int64) uintptr { return 0 }
