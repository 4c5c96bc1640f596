package arrowio

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

const kindShard = "shard"

// Shard schema metadata keys (besides emsf.format_version and emsf.kind).
const (
	keyShardID   = "emsf.id"
	keyAction    = "emsf.action"
	keyRowLo     = "emsf.row_lo"
	keyRowHi     = "emsf.row_hi"
	keyColLo     = "emsf.col_lo"
	keyColHi     = "emsf.col_hi"
	keyNNZ       = "emsf.nnz"
	keySum       = "emsf.sum"
	keyChecksum  = "emsf.checksum"
	shardMaxRows = 1 << 20 // rows per record batch
)

var shardFields = []arrow.Field{
	{Name: "row", Type: arrow.PrimitiveTypes.Int32},
	{Name: "col", Type: arrow.PrimitiveTypes.Int32},
	{Name: "count", Type: arrow.PrimitiveTypes.Float64},
}

// EncodeShard returns s as an Arrow IPC file: columns row int32, col int32,
// count float64 sorted by (row, col), and the manifest line in the schema
// metadata. It checks s against its manifest line first (Shard.Verify).
func EncodeShard(s *shard.Shard, opts ...Option) ([]byte, error) {
	var buf bytes.Buffer
	if err := encodeShard(&buf, s, newConfig(opts).mem, shardMaxRows); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteShardFile writes s to path atomically (see EncodeShard).
func WriteShardFile(path string, s *shard.Shard, opts ...Option) error {
	mem := newConfig(opts).mem
	return writeAtomic(path, func(f *os.File) error {
		w := bufio.NewWriterSize(f, 1<<20)
		if err := encodeShard(w, s, mem, shardMaxRows); err != nil {
			return err
		}
		return w.Flush()
	})
}

func encodeShard(w io.Writer, s *shard.Shard, mem memory.Allocator, maxRows int64) error {
	if err := checkBlock(s); err != nil {
		return fmt.Errorf("arrowio: encode shard %d: %w", s.ID, err)
	}
	if err := s.Verify(); err != nil {
		return fmt.Errorf("arrowio: encode shard %d: %w", s.ID, err)
	}
	var mw metaWriter
	mw.set(keyVersion, FormatVersion)
	mw.set(keyKind, kindShard)
	mw.int(keyShardID, s.ID)
	mw.int(keyAction, s.Action)
	mw.int(keyRowLo, s.RowLo)
	mw.int(keyRowHi, s.RowHi)
	mw.int(keyColLo, s.ColLo)
	mw.int(keyColHi, s.ColHi)
	mw.int(keyNNZ, s.NNZ)
	mw.set(keySum, fmtFloat(s.Sum))
	mw.set(keyChecksum, s.Checksum)
	sc := arrow.NewSchema(shardFields, mw.metadata())
	b := s.Block
	err := writeIPCFile(w, sc, mem, func(write func(arrow.Record) error) error {
		rb := array.NewRecordBuilder(mem, sc)
		defer rb.Release()
		rows := rb.Field(0).(*array.Int32Builder)
		cols := rb.Field(1).(*array.Int32Builder)
		vals := rb.Field(2).(*array.Float64Builder)
		if len(b.Rows) == 0 {
			return flushRecord(rb, write)
		}
		// One batch per run of whole rows of at most maxRows nonzeros
		// (a longer row is a batch of its own).
		for r := 0; r < len(b.Rows); {
			start := r
			lo := b.Ptr[r]
			for r < len(b.Rows) && (r == start || b.Ptr[r+1]-lo <= maxRows) {
				r++
			}
			hi := b.Ptr[r]
			rows.Reserve(int(hi - lo))
			for q := start; q < r; q++ {
				for range b.Ptr[q+1] - b.Ptr[q] {
					rows.UnsafeAppend(b.Rows[q])
				}
			}
			cols.AppendValues(b.Cols[lo:hi], nil)
			vals.AppendValues(b.Vals[lo:hi], nil)
			if err := flushRecord(rb, write); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("arrowio: encode shard %d: %w", s.ID, err)
	}
	return nil
}

// checkBlock checks the CSR structure of a shard's block, so that Verify
// and the encoder can index it safely.
func checkBlock(s *shard.Shard) error {
	b := s.Block
	if b == nil {
		return fmt.Errorf("shard has no block")
	}
	if len(b.Ptr) != len(b.Rows)+1 || b.Ptr[0] != 0 || b.Ptr[len(b.Rows)] != int64(len(b.Cols)) || len(b.Cols) != len(b.Vals) {
		return fmt.Errorf("block has inconsistent CSR lengths (rows %d, ptr %d, cols %d, vals %d)",
			len(b.Rows), len(b.Ptr), len(b.Cols), len(b.Vals))
	}
	for r := range b.Rows {
		if b.Ptr[r] > b.Ptr[r+1] {
			return fmt.Errorf("block row pointers decrease at row %d", r)
		}
	}
	return nil
}

// DecodeShard reads a shard written by EncodeShard: it builds the CSR
// block once and checks it against the manifest line in the metadata
// (sorted, distinct, positive counts, ranges, nnz, Σcount, checksum).
func DecodeShard(data []byte, opts ...Option) (*shard.Shard, error) {
	s, err := decodeShard(data, newConfig(opts).mem)
	if err != nil {
		return nil, fmt.Errorf("arrowio: decode shard: %w", err)
	}
	return s, nil
}

// ReadShardFile reads a shard file written by WriteShardFile.
func ReadShardFile(path string, opts ...Option) (*shard.Shard, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("arrowio: read shard: %w", err)
	}
	s, err := decodeShard(data, newConfig(opts).mem)
	if err != nil {
		return nil, fmt.Errorf("arrowio: read shard %s: %w", path, err)
	}
	return s, nil
}

func decodeShard(data []byte, mem memory.Allocator) (*shard.Shard, error) {
	var info shard.Info
	var rows, cols []int32
	var vals []float64
	err := readIPC(ipcSource{ra: bytes.NewReader(data), size: int64(len(data)), file: true}, mem,
		func(sc *arrow.Schema) error {
			if err := checkFields(sc, shardFields...); err != nil {
				return err
			}
			mr := metaReader{md: sc.Metadata()}
			mr.header(kindShard)
			info = shard.Info{
				ID: mr.int(keyShardID), Action: mr.int(keyAction),
				RowLo: mr.int(keyRowLo), RowHi: mr.int(keyRowHi),
				ColLo: mr.int(keyColLo), ColHi: mr.int(keyColHi),
				NNZ: mr.int(keyNNZ), Sum: mr.float(keySum), Checksum: mr.str(keyChecksum),
			}
			if mr.err != nil {
				return mr.err
			}
			if info.NNZ < 0 || info.Action < 0 {
				return fmt.Errorf("metadata has nnz %d, action %d", info.NNZ, info.Action)
			}
			// Each nonzero takes 16 bytes of the file: do not trust nnz further.
			n := min(info.NNZ, len(data)/16)
			rows, cols, vals = make([]int32, 0, n), make([]int32, 0, n), make([]float64, 0, n)
			return nil
		},
		guard(func(rec arrow.Record) error {
			if err := noNulls(rec); err != nil {
				return err
			}
			rows = append(rows, rec.Column(0).(*array.Int32).Int32Values()...)
			cols = append(cols, rec.Column(1).(*array.Int32).Int32Values()...)
			vals = append(vals, rec.Column(2).(*array.Float64).Float64Values()...)
			return nil
		}))
	if err != nil {
		return nil, err
	}
	if len(rows) != info.NNZ {
		return nil, fmt.Errorf("shard %d: %d nonzeros, metadata says %d", info.ID, len(rows), info.NNZ)
	}
	for k, c := range cols {
		if int(c) < info.ColLo || int(c) >= info.ColHi {
			return nil, fmt.Errorf("shard %d: entry %d has column %d outside [%d, %d)", info.ID, k, c, info.ColLo, info.ColHi)
		}
	}
	b, err := factor.NewBlock(info.Action, rows, cols, vals)
	if err != nil {
		return nil, fmt.Errorf("shard %d: %w", info.ID, err)
	}
	info.Rows = len(b.Rows)
	s := &shard.Shard{Info: info, Block: b}
	if err := s.Verify(); err != nil {
		return nil, err
	}
	return s, nil
}
