package arrowio

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"
)

// col is a named column for building test records.
type col struct {
	name string
	arr  arrow.Array
}

// record builds a record from columns (it releases the arrays).
func record(cols ...col) arrow.Record {
	fields := make([]arrow.Field, len(cols))
	arrs := make([]arrow.Array, len(cols))
	for i, c := range cols {
		fields[i] = arrow.Field{Name: c.name, Type: c.arr.DataType(), Nullable: c.arr.NullN() > 0}
		arrs[i] = c.arr
	}
	rec := array.NewRecord(arrow.NewSchema(fields, nil), arrs, -1)
	for _, a := range arrs {
		a.Release()
	}
	return rec
}

func i32(mem memory.Allocator, v ...int32) arrow.Array {
	b := array.NewInt32Builder(mem)
	defer b.Release()
	b.AppendValues(v, nil)
	return b.NewArray()
}

func f64(mem memory.Allocator, v ...float64) arrow.Array {
	b := array.NewFloat64Builder(mem)
	defer b.Release()
	b.AppendValues(v, nil)
	return b.NewArray()
}

// encodeRecords writes records in format "arrow", "arrows" or "parquet".
func encodeRecords(t testing.TB, format string, recs ...arrow.Record) []byte {
	t.Helper()
	var buf bytes.Buffer
	sc := recs[0].Schema()
	var err error
	switch format {
	case FormatArrowFile:
		err = writeIPCFile(&buf, sc, memory.NewGoAllocator(), func(write func(arrow.Record) error) error {
			for _, r := range recs {
				if err := write(r); err != nil {
					return err
				}
			}
			return nil
		})
	case FormatArrowStream:
		w := ipc.NewWriter(&buf, ipc.WithSchema(sc))
		for _, r := range recs {
			if err = w.Write(r); err != nil {
				break
			}
		}
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	case FormatParquet:
		var fw *pqarrow.FileWriter
		fw, err = pqarrow.NewFileWriter(sc, &buf, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps())
		if err == nil {
			for _, r := range recs {
				if err = fw.Write(r); err != nil {
					break
				}
			}
			if cerr := fw.Close(); err == nil {
				err = cerr
			}
		}
	default:
		t.Fatalf("bad format %q", format)
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// collected is every row a scan delivered.
type collected struct {
	s, a, n []int32
	c       []float64
	first   []int
}

func scanAll(ctx context.Context, path string, opts ReadOptions) (*collected, error) {
	out := &collected{}
	err := ScanTransitions(ctx, path, opts, out.add)
	return out, err
}

func (out *collected) add(b *TransitionBatch) error {
	out.s = append(out.s, b.State...)
	out.a = append(out.a, b.Action...)
	out.n = append(out.n, b.Next...)
	out.c = append(out.c, b.Count...)
	out.first = append(out.first, b.FirstRow)
	return nil
}

func checkedMem(t *testing.T) *memory.CheckedAllocator {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	t.Cleanup(func() { mem.AssertSize(t, 0) })
	return mem
}
