package shard

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"strconv"

	"github.com/emsf/emsf/factor"
)

// CutStep is Split's greedy cut over a run of consecutive rows of one
// action, as one link of a chain: rowNNZ are the nonzeros of each row
// that has any, in row order, and carry the nonzeros of the shard still
// open before the first of them (0: none, at the action's first row). It
// returns the indices into rowNNZ of the rows that start a new shard and
// the carry after the last row. Chained over the runs of an action in
// order (each run's carry the next one's), the cuts are Split's for any
// cut of the rows into runs: a shard takes rows while its nonzeros stay
// ≤ target, and always its first row (target < 1 means
// DefaultTargetNNZ). The carry is all a run needs from the runs before
// it, which is what lets the rows of an action be counted on different
// workers and still be cut as one matrix is.
func CutStep(rowNNZ []int64, carry int64, target int) (cuts []int, out int64) {
	if target < 1 {
		target = DefaultTargetNNZ
	}
	for r, x := range rowNNZ {
		if carry == 0 || carry+x > int64(target) {
			cuts = append(cuts, r)
			carry = x
			continue
		}
		carry += x
	}
	return cuts, carry
}

// Line is a shard's line in the manifest of a distributed build: its
// manifest line and what a coordinator plans the fit with instead of the
// shard's nonzeros, computed by the worker that holds it.
type Line struct {
	Info
	// Rows is the number of rows with a nonzero in the shard, RowsCRC the
	// CRC-32C of those rows' indices (int32 little-endian, ascending), in
	// hex as the owners exchange writes CRCs: what the coordinator places
	// rows of D by.
	Rows    int
	RowsCRC string
	// DataTerm is the shard's term of factor.DataTerm: Σ c·log(c/x_i)
	// over its nonzeros in storage order, x_i the total of row i over the
	// shard's row range (all its column cells). factor.DataTerm of the
	// shards is the left fold of the lines' terms in shard order.
	DataTerm float64
	// Holder is the id of the worker that holds the shard.
	Holder string
}

// RowLines returns the lines of the shards cells, the column cells of
// the row shard rs (Cells; rs alone when not cut), held by holder.
func RowLines(rs *Shard, cells []*Shard, holder string) []Line {
	// Row totals over the whole range, each a left fold in column order:
	// the order factor.DataTerm sums them in (over the cells in order).
	b := rs.Block
	x := make([]float64, len(b.Rows))
	for r := range b.Rows {
		t := 0.0
		for _, c := range b.Vals[b.Ptr[r]:b.Ptr[r+1]] {
			t += c
		}
		x[r] = t
	}
	out := make([]Line, len(cells))
	for k, cell := range cells {
		cb := cell.Block
		dt := 0.0
		r := 0 // rs's row of cell row q (cells keep rs's rows in order)
		var rows []byte
		for q, i := range cb.Rows {
			for b.Rows[r] != i {
				r++
			}
			for _, c := range cb.Vals[cb.Ptr[q]:cb.Ptr[q+1]] {
				dt += c * math.Log(c/x[r])
			}
			rows = binary.LittleEndian.AppendUint32(rows, uint32(i))
		}
		out[k] = Line{Info: cell.Info, Rows: len(cb.Rows), RowsCRC: strconv.FormatUint(uint64(crc32.Checksum(rows, castagnoli)), 16), DataTerm: dt, Holder: holder}
	}
	return out
}

// BlockRows returns rows [lo, hi) of b (row indices, not positions) as a
// block sharing b's arrays.
func BlockRows(b *factor.Block, lo, hi int32) *factor.Block {
	a, e := factor.SliceColumns(b.Rows, int(lo), int(hi))
	p, q := b.Ptr[a], b.Ptr[e]
	out := &factor.Block{Action: b.Action, Rows: b.Rows[a:e], Ptr: make([]int64, e-a+1), Cols: b.Cols[p:q], Vals: b.Vals[p:q]}
	for r := a; r <= e; r++ {
		out.Ptr[r-a] = b.Ptr[r] - p
	}
	return out
}
