package arrowio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/compress"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"
)

// pqTestRecords returns record batches of the given sizes: state int32,
// action int64 (or uint16 with smallAction, which pqColumns leaves to
// pqarrow), next_state int32 with nulls allowed, the count as count
// ("float64", "int32", "int64" or "" for none) and an unused int64
// column. mutate, when not nil, changes row r of batch k.
func pqTestRecords(mem memory.Allocator, sizes []int, count string, smallAction bool, mutate func(k, r int, s, a, n *int64, c *float64, null *bool)) []arrow.Record {
	var out []arrow.Record
	for k, size := range sizes {
		eb, sb, nb := array.NewInt64Builder(mem), array.NewInt32Builder(mem), array.NewInt32Builder(mem)
		var ab array.Builder = array.NewInt64Builder(mem)
		if smallAction {
			ab = array.NewUint16Builder(mem)
		}
		builders := []array.Builder{eb, sb, ab, nb}
		names := []string{"episode", "state", "action", "next_state"}
		var cb array.Builder
		switch count {
		case "float64":
			cb = array.NewFloat64Builder(mem)
		case "int32":
			cb = array.NewInt32Builder(mem)
		case "int64":
			cb = array.NewInt64Builder(mem)
		}
		if cb != nil {
			builders, names = append(builders, cb), append(names, "count")
		}
		for r := range size {
			s, a, n, c, null := int64((r*7+k)%50), int64(r%3), int64((r*13+k)%50), float64(1+r%4), false
			if count == "float64" {
				c /= 2
			}
			if mutate != nil {
				mutate(k, r, &s, &a, &n, &c, &null)
			}
			eb.Append(int64(r))
			sb.Append(int32(s))
			if smallAction {
				ab.(*array.Uint16Builder).Append(uint16(a))
			} else {
				ab.(*array.Int64Builder).Append(a)
			}
			if null {
				nb.AppendNull()
			} else {
				nb.Append(int32(n))
			}
			switch b := cb.(type) {
			case *array.Float64Builder:
				b.Append(c)
			case *array.Int32Builder:
				b.Append(int32(c))
			case *array.Int64Builder:
				b.Append(int64(c))
			}
		}
		fields := make([]arrow.Field, len(names))
		arrs := make([]arrow.Array, len(names))
		for i, b := range builders {
			arrs[i] = b.NewArray()
			fields[i] = arrow.Field{Name: names[i], Type: arrs[i].DataType(), Nullable: names[i] == "next_state"}
			b.Release()
		}
		out = append(out, array.NewRecord(arrow.NewSchema(fields, nil), arrs, -1))
		for _, a := range arrs {
			a.Release()
		}
	}
	return out
}

// encodeParquet writes recs as Parquet, a row group each, with props.
func encodeParquet(t testing.TB, recs []arrow.Record, props ...parquet.WriterProperty) []byte {
	t.Helper()
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	var buf bytes.Buffer
	fw, err := pqarrow.NewFileWriter(recs[0].Schema(), &buf, parquet.NewWriterProperties(props...), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := fw.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readsColumns reports whether the scan reads data with pqColumns.
func readsColumns(t *testing.T, data []byte, opts ReadOptions) bool {
	t.Helper()
	s, err := newScan("t.parquet", opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := openPQ(bytes.NewReader(data), int64(len(data)), memory.NewGoAllocator(), s.batchRows)
	if err != nil {
		t.Fatal(err)
	}
	leaves, err := s.leaves(f.man)
	if err != nil {
		t.Fatal(err)
	}
	_, ok := pqKinds(f.man, leaves)
	return ok
}

// TestParquetColumnsMatchLibrary checks that Parquet read with the column
// chunk readers (pqColumns) gives the batches (cut across row groups as
// pqarrow cuts them), values and errors of pqarrow's record reader: on
// each column type it reads, dictionary and plain pages, pages of a few
// values, compressed pages, nulls, bad values, without a count column and
// without reading it, and on corrupt bytes; and that the files it leaves
// to pqarrow read the same too.
func TestParquetColumnsMatchLibrary(t *testing.T) {
	mem := checkedMem(t)
	sizes := []int{300, 7, 1000, 1, 64}
	layouts := map[string][]parquet.WriterProperty{
		"dictionary":   nil,
		"plain":        {parquet.WithDictionaryDefault(false)},
		"small pages":  {parquet.WithDataPageSize(64), parquet.WithDictionaryPageSizeLimit(64)},
		"snappy":       {parquet.WithCompression(compress.Codecs.Snappy)},
		"data page v2": {parquet.WithDataPageVersion(parquet.DataPageV2)},
	}
	for name, props := range layouts {
		// Pages of version 2 that a reader stops in the middle of leak
		// (pqarrow's in batches of 1 row, and both readers' at a bad
		// value): no checked allocator there.
		alloc := memory.Allocator(mem)
		if name == "data page v2" {
			alloc = nil
		}
		for _, count := range []string{"float64", "int32", "int64", ""} {
			what := fmt.Sprintf("%s, count %q", name, count)
			good := encodeParquet(t, pqTestRecords(mem, sizes, count, false, nil), props...)
			if !readsColumns(t, good, ReadOptions{}) {
				t.Fatalf("%s: not read with pqColumns", what)
			}
			for _, opts := range []ReadOptions{{BatchRows: 100}, {BatchRows: 1}, {}, {NoCount: true, BatchRows: 333}} {
				opts.Alloc = alloc
				if err := bothWays(t, what+" good", FormatParquet, good, opts, false); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			}
		}
		bad := map[string]func(k, r int, s, a, n *int64, c *float64, null *bool){
			"null next": func(k, r int, s, a, n *int64, c *float64, null *bool) { *null = *null || k == 2 && r == 500 },
			"null next, later a bad state": func(k, r int, s, a, n *int64, c *float64, null *bool) {
				*null = *null || k == 2 && r == 10
				if k == 2 && r == 900 {
					*s = -1
				}
			},
			"negative": func(k, r int, s, a, n *int64, c *float64, null *bool) {
				if k == 4 && r == 3 {
					*s = -4
				}
			},
			"large action": func(k, r int, s, a, n *int64, c *float64, null *bool) {
				if k == 2 && r == 999 {
					*a = 1 << 40
				}
			},
			"past --states": func(k, r int, s, a, n *int64, c *float64, null *bool) {
				if k == 0 && r == 299 {
					*n = 61
				}
			},
			"count": func(k, r int, s, a, n *int64, c *float64, null *bool) {
				if k == 1 && r == 6 {
					*c = 0
				}
			},
		}
		for bname, mutate := range bad {
			for _, count := range []string{"float64", "int64"} {
				data := encodeParquet(t, pqTestRecords(mem, sizes, count, false, mutate), props...)
				for _, opts := range []ReadOptions{{BatchRows: 100}, {}} {
					opts.Alloc, opts.States = alloc, 60
					if err := bothWays(t, name+" "+bname, FormatParquet, data, opts, false); err == nil {
						t.Errorf("%s %s: no error", name, bname)
					}
				}
			}
		}
	}
	// A column pqColumns leaves to pqarrow (uint16): the same either way.
	data := encodeParquet(t, pqTestRecords(mem, sizes, "float64", true, nil))
	if readsColumns(t, data, ReadOptions{}) {
		t.Fatal("a uint16 column read with pqColumns")
	}
	if err := bothWays(t, "uint16 action", FormatParquet, data, ReadOptions{Alloc: mem}, false); err != nil {
		t.Fatal(err)
	}
	// Corrupt bytes: never a panic; the same rows either way, or an
	// *InputError either way (pqColumns stops at the first batch with a
	// column that ends early, pqarrow may deliver rows before it notices).
	good := encodeParquet(t, pqTestRecords(mem, sizes, "float64", false, nil))
	for i := 0; i < len(good); i += 1 + len(good)/300 {
		c := bytes.Clone(good)
		c[i] ^= 0xA5
		var got [2]*collected
		var errs [2]error
		for k, library := range []bool{false, true} {
			got[k] = &collected{}
			errs[k] = ScanTransitionsReader(context.Background(), bytes.NewReader(c), "t", FormatParquet,
				ReadOptions{libraryParquet: library}, got[k].add)
		}
		var ie *InputError
		switch {
		case (errs[0] == nil) != (errs[1] == nil):
			t.Errorf("flip at %d: pqColumns: %v; pqarrow: %v", i, errs[0], errs[1])
		case errs[0] != nil && (!errors.As(errs[0], &ie) || !errors.As(errs[1], &ie)):
			t.Errorf("flip at %d: pqColumns: %v; pqarrow: %v; want *InputErrors", i, errs[0], errs[1])
		case errs[0] == nil && !reflect.DeepEqual(got[0], got[1]):
			t.Errorf("flip at %d: pqColumns and pqarrow read different rows", i)
		}
	}
}
