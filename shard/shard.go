// Package shard turns logged transitions into the sparse count matrices
// C^a of an MDP and splits them into shards: the units of work that local
// goroutines and cluster workers compute statistics for.
//
// Counting sums duplicate (state, action, next_state) triples, in the order
// they arrive (so the same transitions in the same order give bitwise the
// same counts, whatever file format they came from). Counter keeps each
// action's transitions in arrival order (8 bytes each; 16 once a count is
// not 1) and builds its CSR matrix without a comparison sort: a counting
// sort by state (stable, so each row's transitions stay in arrival
// order), then each row's duplicates summed left to right in a dense
// accumulator (or, for rows spread over many columns, after sorting
// (column, arrival) keys); actions are counted on every core. The log's
// large chunks live outside the Go heap (mmap'd slabs) and each slab is
// unmapped as soon as its transitions are placed, so the log leaves the
// process while the CSR fills instead of staying resident beside it (the
// Go runtime keeps freed heap spans). TwoPass
// counts an input that can be read twice without keeping it: a first read
// validates and counts each (action, state), a second puts each
// transition's next state and count straight into its row's place, in
// arrival order, so memory is about the size of the CSR and the matrices
// are bitwise a Counter's. Large count arrays ask the kernel for
// transparent huge pages (adviseHuge: on a virtual machine a first touch
// of each 4 KiB page is what filling them mostly costs). A shard holds the
// nonzeros of one action for a contiguous range of rows, sorted by (row,
// col); Split never cuts a row across shards, so the statistics of D's
// rows are complete in one shard, while SplitGrid cuts each row range
// further into column cells, whose rows of D̂ are summed over the cells
// of the range. The layout depends only on the data, the target shard
// size and the number of column cells, never on the number of workers,
// which is what makes fits bitwise reproducible across worker counts.
//
// The pure parts of a distributed count (cluster workers build the shards
// of a dataset, coordinator/ingest): Summary is a split's first-read
// summary (rows, largest indices, integrality, the fingerprint's CRCs,
// a coarse Hist of (action, state)), RowsCRC.Then rebuilds the dataset's
// fingerprint from the splits' CRCs (CRC32Combine, zlib's
// crc32_combine: Go's hash/crc32 has none); Bucket and Router route a
// transition to the worker that counts its (action, row range); CutStep
// is Split's greedy cut as a link of a carry chain over an action's
// buckets (the carry is the open shard's nonzeros), so that the cuts are
// Split's whatever the buckets; Cells is SplitGrid's column cut of one
// row shard; Line is a shard's manifest line with what a coordinator
// plans with instead of its nonzeros (present rows and their CRC, its
// term of factor.DataTerm, its holder); Union adds sets of matrices (the
// training and held-out parts) as loadData does.
//
// User ids (vocab.go): a Vocab numbers the ids that name states or
// actions (interned as rows come, sorted once at the end: SortFrom;
// Merge joins the sorted vocabularies of a dataset's parts). A VocabView
// is a snapshot of a Vocab's first ids that another goroutine may read
// while the Vocab grows: a scan hands one with each batch, so that the
// consumer of the batch, on a goroutine of its own, reads the ids of its
// rows. FingerprintHash (crc.go) is the training data's fingerprint: the
// CRC-32C and CRC-32 of its rows, where a group named by ids is hashed by
// the ids' bytes (AddIDRows), never by their indices, so that splits read
// with vocabularies of their own compose (RowsCRC.Then).
//
// The package is pure: no files, no logging, no networking.
package shard

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"slices"

	"github.com/emsf/emsf/factor"
)

// Info is one line of the shard manifest.
type Info struct {
	ID     int
	Action int
	// Rows [RowLo, RowHi) and columns [ColLo, ColHi) the shard covers.
	RowLo, RowHi int
	ColLo, ColHi int
	NNZ          int
	// Sum is Σ count over the shard, summed in storage order.
	Sum float64
	// Checksum is the hex SHA-256 of the shard's (row, col, count) triples
	// in little-endian binary, in storage order.
	Checksum string
	// Rows is the number of rows with a nonzero (the block's present
	// rows): the rows of D the shard reads and commits.
	Rows int
	// DataTerm is the shard's share of the data term (factor.DataTerms:
	// Σ c·log(c/x_i) over its nonzeros, x_i the total of row i over its
	// row range's cells); Describe fills it in. Whoever holds the lines
	// only gets the data term with factor.SumDataTerms, in shard order.
	DataTerm float64
}

// Shard is one shard: its manifest line and its nonzeros.
type Shard struct {
	Info
	Block *factor.Block
}

// Manifest describes a data set split into shards.
type Manifest struct {
	N, U   int
	NNZ    int
	Total  float64
	Shards []Info
}

// Checksum returns the checksum of a block as recorded in Info.Checksum.
func Checksum(b *factor.Block) string {
	h := sha256.New()
	var buf [16]byte
	for r, i := range b.Rows {
		for q := b.Ptr[r]; q < b.Ptr[r+1]; q++ {
			binary.LittleEndian.PutUint32(buf[0:], uint32(i))
			binary.LittleEndian.PutUint32(buf[4:], uint32(b.Cols[q]))
			binary.LittleEndian.PutUint64(buf[8:], math.Float64bits(b.Vals[q]))
			h.Write(buf[:])
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// DefaultTargetNNZ is the default number of nonzeros per shard.
const DefaultTargetNNZ = 1 << 17

// Split cuts each action's matrix into shards of whole rows with about
// target nonzeros each (a row with more than target nonzeros is a shard of
// its own). Shards are numbered in (action, row) order, the order in which
// the reduce order (Manifest.ReducePlan) visits them. n is the number of
// states (the column range).
func Split(mats []*factor.Block, n, target int) ([]*Shard, *Manifest) {
	if target < 1 {
		target = DefaultTargetNNZ
	}
	man := &Manifest{N: n, U: len(mats)}
	var out []*Shard
	for a, mat := range mats {
		r := 0
		for r < len(mat.Rows) {
			start := r
			lo := mat.Ptr[r]
			for r < len(mat.Rows) && (r == start || mat.Ptr[r+1]-lo <= int64(target)) {
				r++
			}
			hi := mat.Ptr[r]
			b := &factor.Block{
				Action: a,
				Rows:   mat.Rows[start:r],
				Ptr:    make([]int64, r-start+1),
				Cols:   mat.Cols[lo:hi],
				Vals:   mat.Vals[lo:hi],
			}
			for q := start; q <= r; q++ {
				b.Ptr[q-start] = mat.Ptr[q] - lo
			}
			rowHi := n
			if r < len(mat.Rows) {
				rowHi = int(mat.Rows[r])
			}
			rowLo := 0
			if len(out) > 0 && out[len(out)-1].Action == a {
				rowLo = out[len(out)-1].RowHi
			}
			sh := NewRowShard(len(out), b, rowLo, rowHi, n)
			out = append(out, sh)
			man.Shards = append(man.Shards, sh.Info)
			man.NNZ += sh.NNZ
			man.Total += sh.Sum
		}
	}
	return out, man
}

// NewRowShard returns shard id of rows [rowLo, rowHi) and every column
// [0, n), its nonzeros b, with its manifest line.
func NewRowShard(id int, b *factor.Block, rowLo, rowHi, n int) *Shard {
	return &Shard{Info: Info{ID: id, Action: b.Action, RowLo: rowLo, RowHi: rowHi,
		ColLo: 0, ColHi: n, NNZ: b.NNZ(), Sum: b.Sum(), Checksum: Checksum(b), Rows: len(b.Rows)}, Block: b}
}

// MaxColCells caps SplitGrid's column cells per row range.
const MaxColCells = 1024

// SplitGrid is Split with each row range cut further into q column
// cells: the columns [c·n/q, (c+1)·n/q) of the range's rows, c = 0 … q−1,
// each a shard of its own (Info.ColLo, ColHi) holding the rows that have
// a nonzero in it; cells without nonzeros are left out. Shards are
// numbered in (action, row range, column cell) order, so the cells of a
// row range are consecutive (RowGroups). The rows of D̂ of a range are
// then summed over its cells in that order (the canonical order adds the
// blocks' rows of D̂ left to right, factor.ReducePlan), which is what
// lets a cluster spread one action's data over a grid of nodes whose
// traffic falls as the grid grows (the owners exchange). q ≤ 1 is Split:
// the same shards, the same bits.
func SplitGrid(mats []*factor.Block, n, target, q int) ([]*Shard, *Manifest) {
	rows, man := Split(mats, n, target)
	if q <= 1 {
		return rows, man
	}
	man = &Manifest{N: n, U: len(mats)}
	var out []*Shard
	for _, rs := range rows {
		for _, sh := range Cells(rs, n, q) {
			sh.ID = len(out)
			out = append(out, sh)
			man.Shards = append(man.Shards, sh.Info)
			man.NNZ += sh.NNZ
			man.Total += sh.Sum
		}
	}
	return out, man
}

// Cells cuts the row shard rs into q column cells as SplitGrid does: the
// columns [c·n/q, (c+1)·n/q) of its rows, c = 0 … q−1 (q at most
// MaxColCells and n), each a shard of rs's row range, empty cells left
// out, in column order. The cells' IDs are rs's: the caller numbers them.
// q ≤ 1 returns rs itself.
func Cells(rs *Shard, n, q int) []*Shard {
	if q <= 1 {
		return []*Shard{rs}
	}
	q = min(q, MaxColCells, max(n, 1))
	b := rs.Block
	var out []*Shard
	for c := range q {
		lo, hi := int32(int64(c)*int64(n)/int64(q)), int32(int64(c+1)*int64(n)/int64(q))
		cell := &factor.Block{Action: b.Action, Ptr: []int64{0}}
		for r, i := range b.Rows {
			row := b.Cols[b.Ptr[r]:b.Ptr[r+1]]
			a, _ := slices.BinarySearch(row, lo)
			e, _ := slices.BinarySearch(row, hi)
			if a == e {
				continue
			}
			at := int(b.Ptr[r])
			cell.Rows = append(cell.Rows, i)
			cell.Cols = append(cell.Cols, row[a:e]...)
			cell.Vals = append(cell.Vals, b.Vals[at+a:at+e]...)
			cell.Ptr = append(cell.Ptr, int64(len(cell.Cols)))
		}
		if len(cell.Cols) == 0 {
			continue
		}
		out = append(out, &Shard{Info: Info{ID: rs.ID, Action: b.Action, RowLo: rs.RowLo, RowHi: rs.RowHi,
			ColLo: int(lo), ColHi: int(hi), NNZ: cell.NNZ(), Sum: cell.Sum(), Checksum: Checksum(cell), Rows: len(cell.Rows)}, Block: cell})
	}
	return out
}

// RowGroups returns the shards' row groups: runs of consecutive shards of
// one action and row range (SplitGrid's cells of one range; every shard
// of Split is a group of its own), as shard indices in order.
func RowGroups(infos []Info) [][]int {
	var out [][]int
	for k, in := range infos {
		if k > 0 {
			p := infos[k-1]
			if p.Action == in.Action && p.RowLo == in.RowLo && p.RowHi == in.RowHi {
				out[len(out)-1] = append(out[len(out)-1], k)
				continue
			}
		}
		out = append(out, []int{k})
	}
	return out
}

// ReducePlan returns the canonical reduce order of the manifest's shards
// (factor.PlanReduce): the same plan factor.Fit makes for their blocks.
func (m *Manifest) ReducePlan(tie factor.Tie, groupNNZ int) *factor.ReducePlan {
	actions, nnz := make([]int, len(m.Shards)), make([]int, len(m.Shards))
	for k, in := range m.Shards {
		actions[k], nnz[k] = in.Action, in.NNZ
	}
	return factor.PlanReduce(actions, nnz, tie, groupNNZ)
}

// Blocks returns the blocks of shards, in shard order.
func Blocks(shards []*Shard) []*factor.Block {
	out := make([]*factor.Block, len(shards))
	for k, s := range shards {
		out[k] = s.Block
	}
	return out
}

// Verify checks a shard's block against its manifest line: action, row
// range, nnz, Σcount and checksum.
func (s *Shard) Verify() error {
	b := s.Block
	if b.Action != s.Action {
		return fmt.Errorf("shard: shard %d: block is of action %d, manifest says %d", s.ID, b.Action, s.Action)
	}
	if len(b.Rows) > 0 && (int(b.Rows[0]) < s.RowLo || int(b.Rows[len(b.Rows)-1]) >= s.RowHi) {
		return fmt.Errorf("shard: shard %d: rows [%d, %d] outside [%d, %d)", s.ID, b.Rows[0], b.Rows[len(b.Rows)-1], s.RowLo, s.RowHi)
	}
	if s.ColLo != 0 || s.ColHi != 0 {
		for _, j := range b.Cols {
			if int(j) < s.ColLo || int(j) >= s.ColHi {
				return fmt.Errorf("shard: shard %d: column %d outside [%d, %d)", s.ID, j, s.ColLo, s.ColHi)
			}
		}
	}
	if b.NNZ() != s.NNZ {
		return fmt.Errorf("shard: shard %d: %d nonzeros, manifest says %d", s.ID, b.NNZ(), s.NNZ)
	}
	if sum := b.Sum(); sum != s.Sum {
		return fmt.Errorf("shard: shard %d: Σcount %v, manifest says %v", s.ID, sum, s.Sum)
	}
	if c := Checksum(b); c != s.Checksum {
		return fmt.Errorf("shard: shard %d: checksum %s, manifest says %s", s.ID, c, s.Checksum)
	}
	return nil
}
