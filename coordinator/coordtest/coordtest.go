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
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
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

// SameModel fails t unless got is want bit for bit: every entry of D and
// K, the iteration count, the log-likelihood and the WKL (a distributed
// fit promises the local fit's bits).
func SameModel(t testing.TB, what string, got, want *factor.Model) {
	t.Helper()
	for b := range want.D {
		for k := range want.D[b] {
			if math.Float64bits(got.D[b][k]) != math.Float64bits(want.D[b][k]) {
				t.Fatalf("%s: D block %d entry %d = %v, local fit %v", what, b, k, got.D[b][k], want.D[b][k])
			}
		}
	}
	for b := range want.KT {
		for k := range want.KT[b] {
			if math.Float64bits(got.KT[b][k]) != math.Float64bits(want.KT[b][k]) {
				t.Fatalf("%s: K block %d entry %d = %v, local fit %v", what, b, k, got.KT[b][k], want.KT[b][k])
			}
		}
	}
	if got.Iteration != want.Iteration || math.Float64bits(got.LogLik) != math.Float64bits(want.LogLik) || math.Float64bits(got.WKL) != math.Float64bits(want.WKL) {
		t.Fatalf("%s: iteration %d loglik %v WKL %v, local fit %d %v %v", what, got.Iteration, got.LogLik, got.WKL, want.Iteration, want.LogLik, want.WKL)
	}
}

// OwnersData is count data of the owners exchange's tests: about 6·n·u
// transitions of n states and u actions (next states near the state,
// counts 1 to 3), cut into about per shards per action and each row
// range into q column cells (shard.SplitGrid), with several shards per
// action.
func OwnersData(t testing.TB, n, u int, seed uint64, per, q int) []*shard.Shard {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	var ct shard.Counter
	for range 6 * n * u {
		i, a := rng.IntN(n), rng.IntN(u)
		j := (i + rng.IntN(n/3+1)) % n
		if err := ct.Add(i, a, j, float64(1+rng.IntN(3))); err != nil {
			t.Fatal(err)
		}
	}
	shards, _ := shard.SplitGrid(ct.Matrices(u), n, 6*n/per, q)
	if len(shards) < 2*u {
		t.Fatalf("test data has %d shards, want several per action", len(shards))
	}
	return shards
}
