package factor

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Tally counts transitions into count matrices C^a, one Block per action,
// for experiments and tests of modest size (24 bytes per transition until
// Blocks): duplicates (i, a, j) are summed in the order they were added,
// which is how the project's ingest (shard.Counter) sums them, so both
// give the same blocks bitwise. Large inputs go through package shard.
type Tally struct {
	ts []tallied
}

type tallied struct {
	a, i, j int32
	c       float64
}

// Add records count c of the transition i --a--> j. It returns an error
// for an index outside [0, 2^31−1] or a count that is not finite and > 0.
func (t *Tally) Add(i, a, j int, c float64) error {
	if i < 0 || a < 0 || j < 0 || i > math.MaxInt32 || a > math.MaxInt32 || j > math.MaxInt32 {
		return fmt.Errorf("factor: transition %d --%d--> %d: indices must be in [0, %d]", i, a, j, math.MaxInt32)
	}
	if !(c > 0) || math.IsInf(c, 0) {
		return fmt.Errorf("factor: transition %d --%d--> %d: count %v must be finite and > 0", i, a, j, c)
	}
	t.ts = append(t.ts, tallied{int32(a), int32(i), int32(j), c})
	return nil
}

// Len returns the number of transitions added.
func (t *Tally) Len() int { return len(t.ts) }

// Blocks returns the count matrices of actions 0 … u−1 (an action without
// transitions gives an empty block) and empties the tally. An action ≥ u
// is an error.
func (t *Tally) Blocks(u int) ([]*Block, error) {
	ts := t.ts
	t.ts = nil
	// Stable: duplicates keep the order they were added in.
	slices.SortStableFunc(ts, func(x, y tallied) int {
		return cmp.Or(cmp.Compare(x.a, y.a), cmp.Compare(x.i, y.i), cmp.Compare(x.j, y.j))
	})
	if len(ts) > 0 && int(ts[len(ts)-1].a) >= u {
		return nil, fmt.Errorf("factor: transition of action %d, the model has %d actions", ts[len(ts)-1].a, u)
	}
	out := make([]*Block, u)
	k := 0
	for a := range u {
		var rows, cols []int32
		var vals []float64
		for ; k < len(ts) && int(ts[k].a) == a; k++ {
			x := ts[k]
			if n := len(vals); n > 0 && rows[n-1] == x.i && cols[n-1] == x.j {
				vals[n-1] += x.c
				continue
			}
			rows, cols, vals = append(rows, x.i), append(cols, x.j), append(vals, x.c)
		}
		b, err := NewBlock(a, rows, cols, vals)
		if err != nil {
			return nil, err
		}
		out[a] = b
	}
	return out, nil
}
