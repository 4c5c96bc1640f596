package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/emsf/emsf/arrowio"
)

func TestScanPipelined(t *testing.T) {
	var text strings.Builder
	text.WriteString("state,action,next_state,count\n")
	for k := range 1000 {
		fmt.Fprintf(&text, "%d,%d,%d,%d\n", k, k%3, k+1, 1+k%5)
	}
	p := writeFile(t, t.TempDir(), "t.csv", text.String())
	opts := arrowio.ReadOptions{BatchRows: 7}
	row := 0
	err := scanPipelined(context.Background(), srcOf(t, p), opts, func(b *arrowio.TransitionBatch) error {
		if b.FirstRow != row+1 {
			return fmt.Errorf("batch at row %d after %d rows", b.FirstRow, row)
		}
		for k := range b.State {
			if int(b.State[k]) != row || int(b.Next[k]) != row+1 || b.Count[k] != float64(1+row%5) {
				return fmt.Errorf("row %d: %d %d %v", row+1, b.State[k], b.Next[k], b.Count[k])
			}
			row++
		}
		return nil
	})
	if err != nil || row != 1000 {
		t.Fatalf("scanPipelined: %v after %d rows", err, row)
	}
	// An error of fn comes back as is and stops the reading.
	stop := errors.New("stop")
	calls := 0
	err = scanPipelined(context.Background(), srcOf(t, p), opts, func(*arrowio.TransitionBatch) error {
		calls++
		if calls == 3 {
			return stop
		}
		return nil
	})
	if err != stop || calls != 3 {
		t.Fatalf("got %v after %d calls, want the callback's error after 3", err, calls)
	}
	// Several consumers: each sees every row, in order, at once with the
	// others.
	var rows [3]int
	consumer := func(k int) func(*arrowio.TransitionBatch) error {
		return func(b *arrowio.TransitionBatch) error {
			for q := range b.State {
				if int(b.State[q]) != rows[k] {
					return fmt.Errorf("consumer %d: row %d is state %d", k, rows[k]+1, b.State[q])
				}
				rows[k]++
			}
			return nil
		}
	}
	err = scanPipelined(context.Background(), srcOf(t, p), opts, consumer(0), consumer(1), consumer(2))
	if err != nil || rows != [3]int{1000, 1000, 1000} {
		t.Fatalf("three consumers: %v after %v rows", err, rows)
	}
	// An error of a consumer other than the first comes back too.
	rows = [3]int{}
	err = scanPipelined(context.Background(), srcOf(t, p), opts, consumer(0), func(*arrowio.TransitionBatch) error { return stop })
	if err != stop {
		t.Fatalf("got %v, want the second consumer's error", err)
	}
	// A bad row is the reader's error.
	bad := writeFile(t, t.TempDir(), "bad.csv", "state,action,next_state\n0,0,1\n0,x,1\n")
	err = scanPipelined(context.Background(), srcOf(t, bad), opts, func(*arrowio.TransitionBatch) error { return nil })
	if err == nil || !strings.Contains(err.Error(), `row 2, column "action": value "x"`) {
		t.Fatalf("got %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = scanPipelined(ctx, srcOf(t, p), opts, func(*arrowio.TransitionBatch) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// srcOf lists the dataset of path.
func srcOf(t *testing.T, path string) *dataSource {
	t.Helper()
	src, err := (&inputFlags{input: path}).open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return src
}
