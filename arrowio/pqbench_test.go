package arrowio

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// benchParquet returns a Parquet file (pqarrow's writer, its defaults:
// dictionary pages, no compression) of rows transitions in row groups of
// 64 Ki rows: integer columns, or ids.
func benchParquet(b *testing.B, rows int, ids bool) []byte {
	mem := memory.NewGoAllocator()
	typ := arrow.DataType(arrow.PrimitiveTypes.Int32)
	if ids {
		typ = arrow.BinaryTypes.String
	}
	sc := arrow.NewSchema([]arrow.Field{{Name: "state", Type: typ}, {Name: "action", Type: typ},
		{Name: "next_state", Type: typ}, {Name: "count", Type: arrow.PrimitiveTypes.Float64}}, nil)
	var buf bytes.Buffer
	fw, err := pqarrow.NewFileWriter(sc, &buf, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps())
	if err != nil {
		b.Fatal(err)
	}
	rb := array.NewRecordBuilder(mem, sc)
	defer rb.Release()
	for lo := 0; lo < rows; lo += 1 << 16 {
		for r := lo; r < min(rows, lo+1<<16); r++ {
			for k, x := range []int{(r * 7919) % 5000, r % 4, (r*104729 + 13) % 5000} {
				if ids {
					rb.Field(k).(*array.StringBuilder).Append(fmt.Sprintf("id-%d", x))
				} else {
					rb.Field(k).(*array.Int32Builder).Append(int32(x))
				}
			}
			rb.Field(3).(*array.Float64Builder).Append(float64(1 + r%3))
		}
		rec := rb.NewRecord()
		err := fw.Write(rec)
		rec.Release()
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := fw.Close(); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// BenchmarkParquetScan times scanning a Parquet file of 1 Mi transitions:
// integer columns through pqColumns (the common case) and through the
// record reader (ReadOptions.libraryParquet), and ids (always the record
// reader).
func BenchmarkParquetScan(b *testing.B) {
	const rows = 1 << 20
	ints, ids := benchParquet(b, rows, false), benchParquet(b, rows, true)
	for _, c := range []struct {
		name    string
		data    []byte
		ids     bool
		records bool
	}{{"ints", ints, false, false}, {"ints-records", ints, false, true}, {"ids", ids, true, false}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				opts := ReadOptions{libraryParquet: c.records}
				if c.ids {
					opts.StateIDs, opts.ActionIDs = &shard.Vocab{}, &shard.Vocab{}
				}
				n := 0
				err := ScanTransitionsReader(context.Background(), bytes.NewReader(c.data), "b.parquet", FormatParquet, opts,
					func(tb *TransitionBatch) error { n += tb.Len(); return nil })
				if err != nil || n != rows {
					b.Fatal(err, n)
				}
			}
		})
	}
}

// BenchmarkParquetModel times writing and reading a Parquet model of
// 5000 states, 16 hidden states and 4 actions (5 MiB of values; writing
// is slow: see docs/formats.md).
func BenchmarkParquetModel(b *testing.B) {
	mf := &ModelFile{Model: factor.NewRandom(5000, 16, 4, factor.TieNone, 1)}
	encode := func() []byte {
		var buf bytes.Buffer
		if err := encodeModel(&buf, mf, ModelParquet, newConfig(nil)); err != nil {
			b.Fatal(err)
		}
		return buf.Bytes()
	}
	data := encode()
	b.Run("write", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			encode()
		}
	})
	b.Run("read", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := DecodeModel(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
