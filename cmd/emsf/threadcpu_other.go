//go:build !linux

package main

import "time"

// threadCPUTime returns 0: a thread's CPU time is read on Linux only.
func threadCPUTime() time.Duration { return 0 }
