// Package coordtest holds the helpers that the tests of the coordinator,
// its service and the emsf command share, as net/http/httptest does for
// net/http.
//
// Tests never sleep and hope: they wait on a condition (a status field, a
// counter, a file) with a deadline generous enough that a loaded machine
// (go test -race ./... on two busy cores) never reaches it while the code
// is correct; only a broken program does.
package coordtest

import (
	"testing"
	"time"
)

// Patience is the deadline for a condition that holds within milliseconds
// on an idle machine.
const Patience = 2 * time.Minute

// Poll is how often CheckFor calls its condition.
const Poll = 20 * time.Millisecond

// CheckFor calls f every Poll until it returns nil, and fails the test
// with f's last error when d passes first.
func CheckFor(t testing.TB, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", d, err)
		}
		time.Sleep(Poll)
	}
}
