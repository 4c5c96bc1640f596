//go:build !amd64 || purego

package factor

import "unsafe"

// prefetch2 is a no-op where there is no assembly version; see
// prefetch_amd64.go.
func prefetch2(a, b unsafe.Pointer, n int) {}
