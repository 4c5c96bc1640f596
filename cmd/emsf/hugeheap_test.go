package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestHugeHeapBytes: the region is hugeHeapPerInput times the input's
// bytes, within its bounds and half the machine's memory; the least for
// input that is not local files.
func TestHugeHeapBytes(t *testing.T) {
	dir := t.TempDir()
	sized := func(name string, size int64) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, size); err != nil { // sparse
			t.Fatal(err)
		}
		return p
	}
	small := sized("small.csv", 1<<20)
	mid := sized("mid.csv", 100<<20)
	big := sized("big.csv", 1<<30)
	parts := filepath.Join(dir, "parts")
	if err := os.Mkdir(parts, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a.csv", "b.csv"} {
		if err := os.Rename(sized(name, 50<<20), filepath.Join(parts, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		input string
		mem   int64
		want  int64
	}{
		{small, 0, hugeHeapMin},
		{mid, 0, 800 << 20},
		{parts, 0, 800 << 20},
		{filepath.Join(parts, "*.csv"), 0, 800 << 20},
		{big, 0, hugeHeapMax},
		{mid, 1 << 30, 512 << 20},
		{"-", 0, hugeHeapMin},
		{filepath.Join(dir, "missing.csv"), 0, hugeHeapMin},
		{"nats-obj://bucket/name", 0, hugeHeapMin},
	} {
		if got := hugeHeapBytes(c.input, "csv", c.mem); got != c.want {
			t.Errorf("hugeHeapBytes(%s, mem %d) = %d, want %d", c.input, c.mem, got, c.want)
		}
	}
}
