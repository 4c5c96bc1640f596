package shard

import (
	"errors"
	"math"
	"testing"
)

// Counts that would overflow (two rows of 1e308 sum to +Inf) or pass 2^53
// are refused one row at a time; the table is left as it was and stays
// usable.
func TestTableCountLimit(t *testing.T) {
	var tab Table
	if err := tab.Add(0, 0, 1, 3); err != nil {
		t.Fatal(err)
	}
	for _, c := range []float64{1e308, math.MaxFloat64, MaxCount} {
		if err := tab.Add(0, 0, 1, c); !errors.Is(err, ErrCountLimit) {
			t.Errorf("Add count %v: %v, want ErrCountLimit", c, err)
		}
	}
	if err := tab.Add(2, 0, 1, MaxCount-3); err != nil {
		t.Fatalf("a count up to the limit: %v", err)
	}
	if err := tab.Add(2, 0, 1, 1); !errors.Is(err, ErrCountLimit) {
		t.Errorf("one more past the limit: %v", err)
	}
	tab.Merge()
	if all, _ := tab.Added(); tab.Sum() != MaxCount || all != 2 || tab.NNZ() != 2 {
		t.Fatalf("after the refusals: sum %v, rows %d, nnz %d", tab.Sum(), all, tab.NNZ())
	}
	if _, err := Restore(tab.Entries(), 2, 2); err != nil {
		t.Fatalf("a table at the limit does not restore: %v", err)
	}
	over := []TableEntry{{State: 0, Next: 1, Count: math.MaxFloat64, Pending: 0}, {State: 1, Next: 1, Count: math.MaxFloat64}}
	if _, err := Restore(over, 2, 0); err == nil {
		t.Error("Restore accepted a total count of +Inf")
	}
}
