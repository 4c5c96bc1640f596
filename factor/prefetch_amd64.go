//go:build amd64 && !purego

package factor

import "unsafe"

// prefetch2 asks the CPU to bring the n bytes at a and at b into cache; it
// has no effect on results. The kernel calls it a few nonzeros ahead for
// the rows of K and K̂ it will gather, whose random addresses the hardware
// prefetcher cannot guess (DESIGN §8: the random gather dominates once K
// leaves L2).
//
//go:noescape
func prefetch2(a, b unsafe.Pointer, n int)
