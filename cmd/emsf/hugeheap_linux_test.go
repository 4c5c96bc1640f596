package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestHugeHeap: the region hugeHeap returns lies in a mapping marked for
// huge pages (VmFlags "hg") that is still there after the collection
// that freed it.
func TestHugeHeap(t *testing.T) {
	if m := thpMode(); m != "madvise" {
		t.Skipf("transparent huge pages are %q here, not madvise: hugeHeap asks for nothing", m)
	}
	base := hugeHeap(hugeHeapMin)
	if base == 0 {
		t.Fatal("hugeHeap granted nothing under madvise")
	}
	flags, ok := vmaFlags(t, base)
	if !ok {
		t.Fatalf("no mapping holds %#x", base)
	}
	if !strings.Contains(" "+flags+" ", " hg ") {
		t.Errorf("the mapping of %#x has VmFlags %q, without hg", base, flags)
	}
	if hugeHeap(0) != 0 {
		t.Error("hugeHeap(0) asked for a region")
	}
}

// vmaFlags returns the VmFlags of the mapping of this process that holds
// addr (/proc/self/smaps).
func vmaFlags(t *testing.T, addr uintptr) (string, bool) {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if lo, hi, ok := mappingRange(line); ok {
			in = addr >= lo && addr < hi
			continue
		}
		if v, ok := strings.CutPrefix(line, "VmFlags:"); ok && in {
			return strings.TrimSpace(v), true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return "", false
}

// mappingRange parses the address range of a smaps header line
// ("7f00-7f80 rw-p ...").
func mappingRange(line string) (lo, hi uintptr, ok bool) {
	r, _, _ := strings.Cut(line, " ")
	a, b, ok := strings.Cut(r, "-")
	if !ok {
		return 0, 0, false
	}
	x, err1 := strconv.ParseUint(a, 16, 64)
	y, err2 := strconv.ParseUint(b, 16, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return uintptr(x), uintptr(y), true
}

func TestSelectedMode(t *testing.T) {
	for in, want := range map[string]string{
		"always [madvise] never\n": "madvise",
		"[always] madvise never":   "always",
		"always madvise [never]":   "never",
		"always madvise never":     "",
		"":                         "",
	} {
		if got := selectedMode(in); got != want {
			t.Errorf("selectedMode(%q) = %q, want %q", in, got, want)
		}
	}
}
