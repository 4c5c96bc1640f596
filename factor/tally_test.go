package factor_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// TestTallyIsShardCounter: factor.Tally gives bitwise the blocks of the
// ingest's shard.Counter on random transitions with fractional counts and
// many duplicates (their sums depend on the order they are added in), and
// refuses bad transitions.
func TestTallyIsShardCounter(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n, u = 40, 3
	var tl factor.Tally
	var ct shard.Counter
	for range 5000 {
		i, a, j := rng.IntN(n), rng.IntN(u-1), rng.IntN(n/4) // action u−1 has no data
		c := rng.Float64()*3 + 0.1
		if err := tl.Add(i, a, j, c); err != nil {
			t.Fatal(err)
		}
		if err := ct.Add(i, a, j, c); err != nil {
			t.Fatal(err)
		}
	}
	got, err := tl.Blocks(u)
	if err != nil {
		t.Fatal(err)
	}
	want := ct.Matrices(u)
	for a := range u {
		g, w := got[a], want[a]
		if g.Action != w.Action || !slices.Equal(g.Rows, w.Rows) || !slices.Equal(g.Ptr, w.Ptr) || !slices.Equal(g.Cols, w.Cols) {
			t.Fatalf("action %d: tally %d rows %d nonzeros, counter %d %d", a, len(g.Rows), g.NNZ(), len(w.Rows), w.NNZ())
		}
		for k := range w.Vals {
			if math.Float64bits(g.Vals[k]) != math.Float64bits(w.Vals[k]) {
				t.Fatalf("action %d nonzero %d: tally %v, counter %v", a, k, g.Vals[k], w.Vals[k])
			}
		}
	}
	if tl.Len() != 0 {
		t.Fatalf("tally holds %d transitions after Blocks", tl.Len())
	}
	for _, c := range []struct {
		i, a, j int
		c       float64
		want    string
	}{{-1, 0, 0, 1, "indices"}, {0, 0, math.MaxInt32 + 1, 1, "indices"}, {0, 0, 0, 0, "count 0"}, {0, 0, 0, math.Inf(1), "count +Inf"}, {0, 0, 0, math.NaN(), "count NaN"}} {
		if err := tl.Add(c.i, c.a, c.j, c.c); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Add(%d, %d, %d, %v): %v, want an error naming %q", c.i, c.a, c.j, c.c, err, c.want)
		}
	}
	if err := tl.Add(0, 5, 0, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := tl.Blocks(u); err == nil || !strings.Contains(err.Error(), "action 5") {
		t.Fatalf("an action past u: %v", err)
	}
}
