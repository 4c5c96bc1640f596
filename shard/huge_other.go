//go:build !linux

package shard

// adviseHuge is a no-op where transparent huge pages cannot be asked for.
func adviseHuge[T any](x []T) {}
