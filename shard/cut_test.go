package shard

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/emsf/emsf/factor"
)

// blockOf returns a block of action a whose present rows are rows, row
// rows[r] holding nnz[r] nonzeros (columns 0, 1, …).
func blockOf(a int, rows []int32, nnz []int64) *factor.Block {
	b := &factor.Block{Action: a, Rows: rows, Ptr: []int64{0}}
	for _, x := range nnz {
		for c := range x {
			b.Cols = append(b.Cols, int32(c))
			b.Vals = append(b.Vals, 1)
		}
		b.Ptr = append(b.Ptr, int64(len(b.Cols)))
	}
	return b
}

// splitCuts returns the rows (positions among the present rows) at
// which Split starts each shard of a one-action matrix.
func splitCuts(nnz []int64, target int) []int {
	rows := make([]int32, len(nnz))
	for r := range rows {
		rows[r] = int32(r)
	}
	shards, _ := Split([]*factor.Block{blockOf(0, rows, nnz)}, len(nnz), target)
	var cuts []int
	for _, s := range shards {
		cuts = append(cuts, int(s.Block.Rows[0]))
	}
	return cuts
}

// chainCuts runs CutStep over nnz cut into runs at the set bits of mask
// (bit r: a run starts at row r+1) and returns the cuts as positions.
func chainCuts(nnz []int64, mask uint, target int) []int {
	var cuts []int
	carry := int64(0)
	lo := 0
	for r := 0; r <= len(nnz); r++ {
		if r == len(nnz) || (r > 0 && mask&(1<<(r-1)) != 0) {
			cs, out := CutStep(nnz[lo:r], carry, target)
			for _, c := range cs {
				cuts = append(cuts, lo+c)
			}
			carry, lo = out, r
		}
	}
	return cuts
}

// TestCutStepChainIsSplitExhaustive: for every row-nonzero vector of up
// to 7 rows over {1, 2, 3} and every target 1 … 7, and of 10 rows over
// {1, 2} at targets 1 … 4, every cut of the rows into runs (empty runs
// included, as a worker with no rows of a bucket sees) chains to Split's
// cuts.
func TestCutStepChainIsSplitExhaustive(t *testing.T) {
	check := func(nnz []int64, target int) {
		want := splitCuts(nnz, target)
		for mask := uint(0); mask < 1<<max(len(nnz)-1, 0); mask++ {
			if got := chainCuts(nnz, mask, target); !slices.Equal(got, want) {
				t.Fatalf("nnz %v, target %d, runs %b: cuts %v, Split %v", nnz, target, mask, got, want)
			}
		}
	}
	var walk func(nnz []int64, rows int, vals []int64, targets []int)
	walk = func(nnz []int64, rows int, vals []int64, targets []int) {
		if len(nnz) == rows {
			for _, tg := range targets {
				check(nnz, tg)
			}
			return
		}
		for _, v := range vals {
			walk(append(nnz, v), rows, vals, targets)
		}
	}
	for rows := 1; rows <= 7; rows++ {
		walk(nil, rows, []int64{1, 2, 3}, []int{1, 2, 3, 4, 5, 6, 7})
	}
	walk(nil, 10, []int64{1, 2}, []int{1, 2, 3, 4})
	// Empty runs anywhere (a bucket whose rows have no data).
	nnz := []int64{2, 1, 3, 1, 1}
	want := splitCuts(nnz, 3)
	cuts, carry := CutStep(nil, 0, 3)
	if cuts != nil || carry != 0 {
		t.Fatalf("empty run from nothing: %v, %d", cuts, carry)
	}
	c1, k1 := CutStep(nnz[:2], 0, 3)
	_, k2 := CutStep(nil, k1, 3)
	c3, _ := CutStep(nnz[2:], k2, 3)
	got := append(c1, addAll(c3, 2)...)
	if !slices.Equal(got, want) {
		t.Fatalf("with an empty run: %v, want %v", got, want)
	}
}

func addAll(xs []int, d int) []int {
	out := make([]int, len(xs))
	for k, x := range xs {
		out[k] = x + d
	}
	return out
}

// TestCutStepChainIsSplitRandom: large random matrices (rows longer than
// the target, runs of random lengths) chain to Split's cuts.
func TestCutStepChainIsSplitRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		rows := 1 + rng.IntN(3000)
		target := 1 + rng.IntN(200)
		nnz := make([]int64, rows)
		for r := range nnz {
			nnz[r] = 1 + rng.Int64N(int64(target)/4+1)
			if rng.IntN(50) == 0 {
				nnz[r] = int64(target) + rng.Int64N(100) // a row larger than the target
			}
		}
		want := splitCuts(nnz, target)
		var got []int
		carry := int64(0)
		for lo := 0; lo < rows; {
			hi := min(rows, lo+rng.IntN(300))
			cs, out := CutStep(nnz[lo:hi], carry, target)
			got = append(got, addAll(cs, lo)...)
			carry, lo = out, hi
		}
		if !slices.Equal(got, want) {
			t.Fatalf("rows %d, target %d: chain cuts differ from Split's (%d vs %d shards)", rows, target, len(got), len(want))
		}
	}
}

// TestRowLinesDataTerm: the lines of SplitGrid's shards fold (left to
// right, in shard order) to factor.DataTerm of their blocks bitwise, and
// count and checksum each shard's rows.
func TestRowLinesDataTerm(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	n, u := 61, 3
	mats := randomMats(t, rng, n, u, 9)
	for _, b := range mats {
		for q := range b.Vals {
			b.Vals[q] = rng.Float64()*3 + 0.01 // fractional counts
		}
	}
	for _, q := range []int{1, 2, 5} {
		rows, _ := Split(mats, n, 30)
		var lines []Line
		for _, rs := range rows {
			lines = append(lines, RowLines(rs, Cells(rs, n, q), "w")...)
		}
		grid, man := SplitGrid(mats, n, 30, q)
		if len(lines) != len(grid) {
			t.Fatalf("q=%d: %d lines, %d shards", q, len(lines), len(grid))
		}
		dt := 0.0
		for k, l := range lines {
			l.ID = k
			if l.Info != man.Shards[k] {
				t.Fatalf("q=%d: line %d info %+v, SplitGrid %+v", q, k, l.Info, man.Shards[k])
			}
			var rows []byte
			for _, i := range grid[k].Block.Rows {
				rows = binary.LittleEndian.AppendUint32(rows, uint32(i))
			}
			if crc := strconv.FormatUint(uint64(crc32.Checksum(rows, crc32.MakeTable(crc32.Castagnoli))), 16); l.Rows != len(grid[k].Block.Rows) || l.Holder != "w" || l.RowsCRC != crc {
				t.Fatalf("q=%d: line %d: %d rows (CRC %s, want %s), holder %q", q, k, l.Rows, l.RowsCRC, crc, l.Holder)
			}
			dt += l.DataTerm
		}
		if want := factor.DataTerm(Blocks(grid)); dt != want {
			t.Fatalf("q=%d: lines' data term %v, factor.DataTerm %v", q, dt, want)
		}
	}
}

// TestBlockRows: a row range of a block, indices not positions.
func TestBlockRows(t *testing.T) {
	b := blockOf(2, []int32{1, 4, 5, 9}, []int64{2, 1, 3, 1})
	got := BlockRows(b, 2, 6)
	if !slices.Equal(got.Rows, []int32{4, 5}) || !slices.Equal(got.Ptr, []int64{0, 1, 4}) || len(got.Cols) != 4 || got.Action != 2 {
		t.Fatalf("BlockRows = %+v", got)
	}
	if e := BlockRows(b, 6, 9); len(e.Rows) != 0 || !slices.Equal(e.Ptr, []int64{0}) {
		t.Fatalf("empty range = %+v", e)
	}
}
