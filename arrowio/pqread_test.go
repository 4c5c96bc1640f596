package arrowio

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/decimal128"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/compress"
	"github.com/apache/arrow/go/v15/parquet/file"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"

	"github.com/emsf/emsf/shard"
)

// pqarrow is the oracle of the Parquet reader and writer (pqread.go,
// pqschema.go, pqwrite.go): the tests here write random files with it
// and read them with both, and read the files of the new writer with it.
// The reader reads fewer types than pqarrow, and applies no stored Arrow
// schema: where it reads a column, the values are pqarrow's (as the type
// readType says); where it does not, it refuses the column by name.

// pqarrowRecords reads data with pqarrow's record reader as the scan and
// the model readers did: the leaf columns leaves and row groups groups
// (all when nil) in batches of batch rows. It returns the schema and
// every record, or the first error.
func pqarrowRecords(data []byte, batch int, leaves, groups []int) (sc *arrow.Schema, recs []arrow.Record, err error) {
	defer catch(&err)
	rdr, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		return nil, nil, err
	}
	fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{BatchSize: int64(batch)}, memory.NewGoAllocator())
	if err != nil {
		return nil, nil, err
	}
	rr, err := fr.GetRecordReader(context.Background(), leaves, groups)
	if err != nil {
		return nil, nil, err
	}
	defer rr.Release()
	for rr.Next() {
		rec := rr.Record()
		rec.Retain()
		recs = append(recs, rec)
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		releaseRecords(recs)
		return nil, nil, err
	}
	return rr.Schema(), recs, nil
}

// ourRecords is pqarrowRecords with the reader of pqread.go.
func ourRecords(data []byte, mem memory.Allocator, batch int, leaves, groups []int) (sc *arrow.Schema, recs []arrow.Record, err error) {
	f, err := openPQ(bytes.NewReader(data), int64(len(data)), mem, batch)
	if err != nil {
		return nil, nil, err
	}
	rr, err := f.records(leaves, groups)
	if err != nil {
		return nil, nil, err
	}
	defer rr.release()
	for {
		rec, err := rr.next()
		if err != nil {
			releaseRecords(recs)
			return nil, nil, err
		}
		if rec == nil {
			return rr.schema(), recs, nil
		}
		rec.Retain()
		recs = append(recs, rec)
	}
}

func releaseRecords(recs []arrow.Record) {
	for _, r := range recs {
		r.Release()
	}
}

// pqTypes are the Arrow types of the random columns: every type the
// reader reads (as readType says), and lists it does not read.
var pqTypes = []arrow.DataType{
	arrow.PrimitiveTypes.Int8, arrow.PrimitiveTypes.Int16, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64,
	arrow.PrimitiveTypes.Uint8, arrow.PrimitiveTypes.Uint16, arrow.PrimitiveTypes.Uint32, arrow.PrimitiveTypes.Uint64,
	arrow.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Float64,
	arrow.BinaryTypes.String, arrow.BinaryTypes.Binary, arrow.BinaryTypes.LargeString, arrow.BinaryTypes.LargeBinary,
	&arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String},
	arrow.ListOf(arrow.PrimitiveTypes.Float64), arrow.ListOfNonNullable(arrow.PrimitiveTypes.Float64),
	arrow.FixedSizeListOf(3, arrow.PrimitiveTypes.Float64),
	arrow.ListOf(arrow.PrimitiveTypes.Int16), arrow.ListOf(arrow.BinaryTypes.String),
}

// randomArray returns n random values of type t; nulls is the share of
// null slots (of rows, and of a list's elements).
func randomArray(rng *rand.Rand, mem memory.Allocator, t arrow.DataType, n int, nulls float64) arrow.Array {
	b := array.NewBuilder(mem, t)
	defer b.Release()
	small := rng.IntN(2) == 0 // few distinct values: dictionary pages
	for range n {
		if rng.Float64() < nulls {
			b.AppendNull()
			continue
		}
		appendRandom(rng, b, small, nulls)
	}
	return b.NewArray()
}

func appendRandom(rng *rand.Rand, b array.Builder, small bool, nulls float64) {
	x := rng.Int64()
	if small {
		x = rng.Int64N(5) - 2
	}
	str := fmt.Sprintf("id%d", x)
	switch b := b.(type) {
	case *array.Int8Builder:
		b.Append(int8(x))
	case *array.Int16Builder:
		b.Append(int16(x))
	case *array.Int32Builder:
		b.Append(int32(x))
	case *array.Int64Builder:
		b.Append(x)
	case *array.Uint8Builder:
		b.Append(uint8(x))
	case *array.Uint16Builder:
		b.Append(uint16(x))
	case *array.Uint32Builder:
		b.Append(uint32(x))
	case *array.Uint64Builder:
		b.Append(uint64(x))
	case *array.Float32Builder:
		b.Append(float32(x) / 3)
	case *array.Float64Builder:
		b.Append(float64(x) / 7)
	case *array.StringBuilder:
		b.Append(str)
	case *array.LargeStringBuilder:
		b.Append(str)
	case *array.BinaryBuilder:
		b.Append([]byte(str))
	case *array.BinaryDictionaryBuilder:
		if err := b.AppendString(str); err != nil {
			panic(err)
		}
	case *array.ListBuilder:
		b.Append(true)
		for range rng.IntN(4) {
			if rng.Float64() < nulls && b.Type().(*arrow.ListType).ElemField().Nullable {
				b.ValueBuilder().AppendNull()
				continue
			}
			appendRandom(rng, b.ValueBuilder(), small, 0)
		}
	case *array.FixedSizeListBuilder:
		b.Append(true)
		for range int(b.Type().(*arrow.FixedSizeListType).Len()) {
			if rng.Float64() < nulls {
				b.ValueBuilder().AppendNull()
				continue
			}
			appendRandom(rng, b.ValueBuilder(), small, 0)
		}
	default:
		panic(fmt.Sprintf("no random values of %T", b))
	}
}

// randomParquet writes a random Parquet file with pqarrow: the columns
// fields (nullable ones with nulls at a random rate), rows rows in
// records of random sizes, random writer properties (compression,
// dictionary, page size and version, row group length), written as a row
// group per record or buffered, with or without the stored schema.
func randomParquet(t *testing.T, rng *rand.Rand, fields []arrow.Field, rows int, cols func(k int, n int) arrow.Array) ([]byte, string) {
	t.Helper()
	codecs := []compress.Compression{compress.Codecs.Uncompressed, compress.Codecs.Snappy, compress.Codecs.Gzip, compress.Codecs.Zstd, compress.Codecs.Brotli}
	codec := codecs[rng.IntN(len(codecs))]
	dict := rng.IntN(2) == 0
	pageSize := []int64{64, 512, 1 << 20}[rng.IntN(3)]
	groupRows := []int64{7, 100, 64 << 20}[rng.IntN(3)]
	v2 := rng.IntN(3) == 0
	store := rng.IntN(2) == 0
	buffered := rng.IntN(2) == 0
	props := []parquet.WriterProperty{parquet.WithCompression(codec), parquet.WithDictionaryDefault(dict),
		parquet.WithDataPageSize(pageSize), parquet.WithDictionaryPageSizeLimit(pageSize), parquet.WithMaxRowGroupLength(groupRows),
		parquet.WithBatchSize(int64(1 + rng.IntN(64)))}
	if v2 {
		props = append(props, parquet.WithDataPageVersion(parquet.DataPageV2))
	}
	what := fmt.Sprintf("%d rows, codec %v, dictionary %v, pages %d, row groups %d, v2 %v, stored schema %v, buffered %v",
		rows, codec, dict, pageSize, groupRows, v2, store, buffered)
	sc := arrow.NewSchema(fields, nil)
	var aprops []pqarrow.WriterOption
	if store {
		aprops = append(aprops, pqarrow.WithStoreSchema())
	}
	var buf bytes.Buffer
	fw, err := pqarrow.NewFileWriter(sc, &buf, parquet.NewWriterProperties(props...), pqarrow.NewArrowWriterProperties(aprops...))
	if err != nil {
		t.Fatal(err)
	}
	for left := rows; left > 0 || rows == 0; {
		n := min(left, 1+rng.IntN(max(rows/2, 1)))
		arrs := make([]arrow.Array, len(fields))
		for k := range fields {
			arrs[k] = cols(k, n)
		}
		rec := array.NewRecord(sc, arrs, int64(n))
		releaseAll(arrs)
		if buffered {
			err = fw.WriteBuffered(rec)
		} else {
			err = fw.Write(rec)
		}
		rec.Release()
		if err != nil {
			// pqarrow writes no list whose null rows hide elements
			// ("lists with non-zero length null components are not
			// supported"): no file then.
			return nil, what
		}
		left -= n
		if rows == 0 {
			break
		}
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), what
}

// sameRecords reports how two reads differ ("" when they do not): the
// same error text, or the same schema and records, value for value.
func sameRecords(sc1 *arrow.Schema, r1 []arrow.Record, err1 error, sc2 *arrow.Schema, r2 []arrow.Record, err2 error) string {
	switch {
	case (err1 == nil) != (err2 == nil):
		return fmt.Sprintf("errors %v and %v", err1, err2)
	case err1 != nil:
		if err1.Error() != err2.Error() {
			return fmt.Sprintf("errors %q and %q", err1, err2)
		}
		return ""
	case !sc1.Equal(sc2) || sc1.String() != sc2.String():
		return fmt.Sprintf("schemas\n%s\nand\n%s", sc1, sc2)
	case len(r1) != len(r2):
		return fmt.Sprintf("%d and %d records", len(r1), len(r2))
	}
	for i := range r1 {
		if !array.RecordEqual(r1[i], r2[i]) {
			return fmt.Sprintf("record %d:\n%v\nand\n%v", i, r1[i], r2[i])
		}
		for c := range int(r1[i].NumCols()) {
			if !arrow.TypeEqual(r1[i].Column(c).DataType(), r2[i].Column(c).DataType()) {
				return fmt.Sprintf("record %d column %d: types %s and %s", i, c, r1[i].Column(c).DataType(), r2[i].Column(c).DataType())
			}
		}
	}
	return ""
}

// TestParquetReaderMatchesPqarrow reads random files written by pqarrow
// (every column type the reader reads, lists it refuses, nulls,
// dictionary pages or not, compression codecs, row group and page sizes,
// page versions, the stored schema or not) with pqarrow's record reader
// and with pqread.go's, in random batch sizes, all columns or some, all
// row groups or some: the reader refuses the files where it should, by
// the column's name; on the others the records (value for value) and
// errors are pqarrow's, the schema as readType says.
func TestParquetReaderMatchesPqarrow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	files := 200
	if testing.Short() {
		files = 40
	}
	skipped := 0
	outcomes := map[bool]int{} // read without error or not
	defer func() {
		if skipped > files/4 {
			t.Errorf("pqarrow wrote only %d of %d files", files-skipped, files)
		}
		t.Logf("%d files not written, %d read, %d refused", skipped, outcomes[true], outcomes[false])
	}()
	for i := range files {
		fields := make([]arrow.Field, 1+rng.IntN(5))
		nulls := make([]float64, len(fields))
		for k := range fields {
			typ := pqTypes[rng.IntN(len(pqTypes))]
			fields[k] = arrow.Field{Name: fmt.Sprintf("c%d", k), Type: typ, Nullable: rng.IntN(2) == 0}
			if fields[k].Nullable {
				nulls[k] = []float64{0, 0.1, 0.5, 1}[rng.IntN(4)]
			}
		}
		rows := []int{0, 1, 5, 50, 500}[rng.IntN(5)]
		mem := memory.NewGoAllocator()
		data, what := randomParquet(t, rng, fields, rows, func(k, n int) arrow.Array {
			return randomArray(rng, mem, fields[k].Type, n, nulls[k])
		})
		if data == nil {
			skipped++
			continue
		}
		batch := 1 + rng.IntN(max(2*rows, 1))
		var leaves, groups []int
		if rng.IntN(3) == 0 {
			md, err := file.NewParquetReader(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			for c := range md.MetaData().Schema.NumColumns() {
				if rng.IntN(2) == 0 {
					leaves = append(leaves, c)
				}
			}
			if len(leaves) == 0 {
				leaves = []int{0}
			}
			for g := range md.NumRowGroups() {
				if rng.IntN(2) == 0 {
					groups = append(groups, g)
				}
			}
		}
		checked := memory.NewCheckedAllocator(memory.NewGoAllocator())
		sc1, r1, err1 := pqarrowRecords(data, batch, leaves, groups)
		sc2, r2, err2 := ourRecords(data, checked, batch, leaves, groups)
		var table arrow.Table
		if err1 != nil && err2 == nil {
			table = pqarrowTable(data, leaves, groups)
		}
		diff := sameRead(selectedFields(t, data, fields, leaves), table, sc1, r1, err1, sc2, r2, err2)
		if table != nil {
			table.Release()
		}
		if diff != "" {
			t.Fatalf("file %d (%v; %s; batch %d, leaves %v, groups %v): pqarrow and pqread differ: %s", i, fields, what, batch, leaves, groups, diff)
		}
		releaseRecords(r1)
		releaseRecords(r2)
		checked.AssertSize(t, 0)
		outcomes[err2 == nil]++
	}
}

// readType is the type the reader reads a column written as t as (nil:
// refused): integers, floats, strings and binary as themselves, large
// and dictionary strings as strings, large binary as binary, lists and
// fixed-size lists of float64 as lists.
func readType(t arrow.DataType) arrow.DataType {
	switch t.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64,
		arrow.FLOAT32, arrow.FLOAT64, arrow.STRING, arrow.BINARY:
		return t
	case arrow.LARGE_STRING:
		return arrow.BinaryTypes.String
	case arrow.LARGE_BINARY:
		return arrow.BinaryTypes.Binary
	case arrow.DICTIONARY:
		return readType(t.(*arrow.DictionaryType).ValueType)
	case arrow.LIST, arrow.FIXED_SIZE_LIST:
		if t.(arrow.ListLikeType).Elem().ID() == arrow.FLOAT64 {
			return arrow.ListOf(arrow.PrimitiveTypes.Float64)
		}
	}
	return nil
}

// selectedFields returns the fields of the top-level columns that hold
// the leaf columns leaves (all when nil), in the order they first hold
// one.
func selectedFields(t *testing.T, data []byte, fields []arrow.Field, leaves []int) []arrow.Field {
	t.Helper()
	if leaves == nil {
		return fields
	}
	rdr, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	sc := rdr.MetaData().Schema
	var out []arrow.Field
	seen := map[int]bool{}
	for _, leaf := range leaves {
		k := sc.Root().FieldIndexByField(sc.ColumnRoot(leaf))
		if !seen[k] {
			seen[k] = true
			out = append(out, fields[k])
		}
	}
	return out
}

// sameRead reports how the reader's read of the columns fields differs
// from pqarrow's ("" when it does not): a refusal that names the first
// column it does not read; else the same error text, or the schema of
// readType and the same records, value for value (as JSON). Where
// pqarrow's record reader fails on what the reader reads, the values are
// those of pqarrow's table (nil: none).
func sameRead(fields []arrow.Field, table arrow.Table, sc1 *arrow.Schema, r1 []arrow.Record, err1 error, sc2 *arrow.Schema, r2 []arrow.Record, err2 error) string {
	want := make([]arrow.Field, len(fields))
	for i, f := range fields {
		if readType(f.Type) == nil {
			if msg := fmt.Sprintf("column %q has Parquet type", f.Name); err2 == nil || !strings.Contains(err2.Error(), msg) {
				return fmt.Sprintf("error %v, want one with %s", err2, msg)
			}
			return ""
		}
		want[i] = arrow.Field{Name: f.Name, Type: readType(f.Type), Nullable: f.Nullable}
	}
	switch {
	case err1 != nil && err2 == nil && strings.Contains(err1.Error(), "expected all lists to be of size"):
		// pqarrow does not read the null rows of a fixed-size list (as
		// empty lists); the reader reads them as null lists, the others
		// as lists of the size.
		return fixedSizeRows(fields, r2)
	case err1 != nil && err2 == nil && errors.Is(err1, arrow.ErrNotImplemented) && table != nil:
		// pqarrow's record reader reads no dictionary that changes
		// within a batch; its table reader does.
		return sameValues(table, r2)
	case err1 != nil && err2 == nil && strings.Contains(err1.Error(), "expected all lists to be of size"):
		// pqarrow does not read the null rows of a fixed-size list (as
		// empty lists); the reader reads them as null lists, the others
		// as lists of the size.
		return fixedSizeRows(fields, r2)
	case err1 != nil && err2 == nil && errors.Is(err1, arrow.ErrNotImplemented) && table != nil:
		// pqarrow's record reader reads no dictionary that changes
		// within a batch; its table reader does.
		return sameValues(table, r2)
	case (err1 == nil) != (err2 == nil):
		return fmt.Sprintf("errors %v and %v", err1, err2)
	case err1 != nil:
		if err1.Error() != err2.Error() {
			return fmt.Sprintf("errors %q and %q", err1, err2)
		}
		return ""
	case !sc2.Equal(arrow.NewSchema(want, nil)):
		return fmt.Sprintf("schema\n%s\nwant\n%s", sc2, arrow.NewSchema(want, nil))
	case sc1.NumFields() != sc2.NumFields():
		return fmt.Sprintf("%d and %d fields", sc1.NumFields(), sc2.NumFields())
	case len(r1) != len(r2):
		return fmt.Sprintf("%d and %d records", len(r1), len(r2))
	}
	for i := range r1 {
		for c := range int(r1[i].NumCols()) {
			a1, a2 := r1[i].Column(c), r2[i].Column(c)
			if !arrow.TypeEqual(a2.DataType(), want[c].Type) {
				return fmt.Sprintf("record %d column %d: type %s, want %s", i, c, a2.DataType(), want[c].Type)
			}
			j1, e1 := json.Marshal(a1)
			j2, e2 := json.Marshal(a2)
			if e1 != nil || e2 != nil || a1.Len() != a2.Len() || a1.NullN() != a2.NullN() || !bytes.Equal(j1, j2) {
				return fmt.Sprintf("record %d column %d:\n%s (%d nulls, %v)\nand\n%s (%d nulls, %v)", i, c, j1, a1.NullN(), e1, j2, a2.NullN(), e2)
			}
		}
	}
	return ""
}

// pqScanTypes are the types of the random transitions columns: those the
// scan reads and some it refuses.
var pqScanTypes = []arrow.DataType{
	arrow.PrimitiveTypes.Int8, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Uint16,
	arrow.PrimitiveTypes.Uint64, arrow.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Float64,
	arrow.BinaryTypes.String, arrow.BinaryTypes.LargeString, arrow.BinaryTypes.Binary,
	&arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int16, ValueType: arrow.BinaryTypes.String},
	arrow.FixedWidthTypes.Boolean, arrow.FixedWidthTypes.Date32, arrow.FixedWidthTypes.Timestamp_ms,
	&arrow.Decimal128Type{Precision: 9, Scale: 0}, arrow.ListOf(arrow.PrimitiveTypes.Int32),
	arrow.StructOf(arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Int32}),
}

// randomScanColumn returns n values of type t for transitions: indices
// below 6 (numbers or their ids; counts from 1), a bad value at rate bad
// (negative, fractional, too large, an id that is no id), nulls at rate
// nulls.
func randomScanColumn(rng *rand.Rand, mem memory.Allocator, t arrow.DataType, n int, nulls, bad float64, count bool) arrow.Array {
	b := array.NewBuilder(mem, t)
	defer b.Release()
	for range n {
		if rng.Float64() < nulls {
			b.AppendNull()
			continue
		}
		x := rng.IntN(6) + btoi(count) // a count of 0 is bad
		odd := rng.Float64() < bad
		switch b := b.(type) {
		case *array.Int8Builder:
			b.Append(int8(x - 7*btoi(odd)))
		case *array.Int32Builder:
			b.Append(int32(x - 7*btoi(odd)))
		case *array.Int64Builder:
			b.Append(int64(x) + (1<<40)*int64(btoi(odd)))
		case *array.Uint16Builder:
			b.Append(uint16(x))
		case *array.Uint64Builder:
			b.Append(uint64(x) + (1<<63)*uint64(btoi(odd)))
		case *array.Float32Builder:
			b.Append(float32(x) + 0.5*float32(btoi(odd)))
		case *array.Float64Builder:
			b.Append(float64(x) + 0.25*float64(btoi(odd)))
		case *array.StringBuilder:
			b.Append(scanID(x, odd))
		case *array.LargeStringBuilder:
			b.Append(scanID(x, odd))
		case *array.BinaryBuilder:
			b.Append([]byte(scanID(x, odd)))
		case *array.BinaryDictionaryBuilder:
			if err := b.AppendString(scanID(x, odd)); err != nil {
				panic(err)
			}
		case *array.BooleanBuilder:
			b.Append(x%2 == 0)
		case *array.Date32Builder:
			b.Append(arrow.Date32(x))
		case *array.TimestampBuilder:
			b.Append(arrow.Timestamp(x))
		case *array.Decimal128Builder:
			b.Append(decimal128.FromI64(int64(x)))
		case *array.ListBuilder:
			b.Append(true)
			b.ValueBuilder().(*array.Int32Builder).Append(int32(x))
		case *array.StructBuilder:
			b.Append(true)
			b.FieldBuilder(0).(*array.Int32Builder).Append(int32(x))
		default:
			panic(fmt.Sprintf("no random values of %T", b))
		}
	}
	return b.NewArray()
}

func scanID(x int, bad bool) string {
	if bad {
		return "" // not an id
	}
	return fmt.Sprintf("s%d", x)
}

// scanPqarrow scans Parquet data as the scan did with pqarrow's record
// reader (the path ReadOptions.libraryParquet chose before pqread.go):
// the oracle of TestParquetScanMatchesPqarrow.
func scanPqarrow(data []byte, opts ReadOptions, fn func(*TransitionBatch) error) error {
	return scanPqarrowBatch(data, opts, 0, fn)
}

// scanPqarrowBatch is scanPqarrow with pqarrow's record reader reading
// batches of pqBatch rows (0: the scan's batch rows): of 1 row, it reads
// the dictionaries that change within a batch, on which a longer batch
// fails (arrow.ErrNotImplemented).
func scanPqarrowBatch(data []byte, opts ReadOptions, pqBatch int, fn func(*TransitionBatch) error) error {
	s, err := newScan("t.parquet", opts, fn)
	if err != nil {
		return err
	}
	var fr *pqarrow.FileReader
	var total int64
	err = func() (err error) {
		defer catch(&err)
		mem := capAllocator(s.mem, int64(len(data)))
		props := parquet.NewReaderProperties(mem)
		props.BufferedStreamEnabled = true
		props.BufferSize = min(1<<20, max(int64(len(data)), 16<<10))
		rdr, err := file.NewParquetReader(bytes.NewReader(data), file.WithReadProps(props))
		if err != nil {
			return err
		}
		for _, kv := range rdr.MetaData().KeyValueMetadata() {
			if kv.Key == arrowSchemaKey {
				if err := verifyStoredSchema(kv.Value); err != nil {
					return err
				}
			}
		}
		total = rdr.NumRows()
		if pqBatch == 0 {
			pqBatch = s.batchRows
		}
		fr, err = pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{BatchSize: int64(pqBatch)}, mem)
		return err
	}()
	if err != nil {
		return s.corrupt("Parquet file", &decodeError{err})
	}
	var present []string
	for _, f := range fr.Manifest.Fields {
		present = append(present, f.Field.Name)
	}
	var leaves []int
	for k := range numCols {
		if k == colCount && s.noCount {
			continue
		}
		found := false
		for _, f := range fr.Manifest.Fields {
			if f.Field.Name != s.names[k] {
				continue
			}
			// pqarrow's manifest gives a group field ColIndex 0, so
			// that IsLeaf is true and the old scan read leaf 0 for it
			// ("no such column", or a type error on leaf 0's field);
			// the new scan refuses it here, as the old one meant to.
			if len(f.Children) > 0 {
				return &InputError{File: s.file, Column: s.names[k], Reason: fmt.Sprintf("has type %s; want a numeric column", f.Field.Type)}
			}
			leaves, found = append(leaves, f.ColIndex), true
			break
		}
		if !found && !(k == colCount && s.countOpt) {
			return s.missingColumn(k, present)
		}
	}
	var rr pqarrow.RecordReader
	err = func() (err error) {
		defer catch(&err)
		rr, err = fr.GetRecordReader(context.Background(), leaves, nil)
		return err
	}()
	if err != nil {
		return s.corrupt("Parquet file", &decodeError{err})
	}
	defer rr.Release()
	cols, err := s.columns(rr.Schema())
	if err != nil {
		return err
	}
	for {
		var rec arrow.Record
		err := func() (err error) {
			defer catch(&err)
			if rr.Next() {
				rec = rr.Record()
				return nil
			}
			if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			return nil
		}()
		if err != nil {
			return s.corrupt("Parquet file", &decodeError{err})
		}
		if rec == nil {
			break
		}
		if err := s.record(context.Background(), rec, cols); err != nil {
			return err
		}
	}
	if int64(s.rows) != total {
		return s.corrupt("Parquet file", &decodeError{fmt.Errorf("read %d rows, the metadata says %d", s.rows, total)})
	}
	if s.rows == 0 {
		return s.noRows()
	}
	return nil
}

// dictionaryUTF8 is how Arrow prints a dictionary of strings.
var dictionaryUTF8 = regexp.MustCompile(`dictionary<values=utf8, indices=[a-z0-9]+, ordered=(true|false)>`)

// sameScanError reports whether the scan's error err is pqarrow's
// wantErr: the same text, but for the types pqarrow read from a stored
// Arrow schema (large and dictionary strings, large binary, where the
// scan names the type); or a refusal by Parquet type where pqarrow failed
// too, of a column the scan does not read when its written fields are
// known.
func sameScanError(err, wantErr error, fields []arrow.Field) bool {
	var ie *InputError
	if errors.As(err, &ie) && strings.Contains(ie.Reason, "has Parquet type") {
		if wantErr == nil {
			return false
		}
		for _, f := range fields {
			if f.Name == ie.Column {
				_, list := readType(f.Type).(*arrow.ListType)
				return readType(f.Type) == nil || list
			}
		}
		return fields == nil
	}
	if (err == nil) != (wantErr == nil) {
		return false
	}
	if err == nil {
		return true
	}
	want := dictionaryUTF8.ReplaceAllString(wantErr.Error(), "utf8")
	want = strings.NewReplacer("large_utf8", "utf8", "large_binary", "binary").Replace(want)
	return err.Error() == want
}

// pqarrowTable reads the leaf columns leaves (all when nil) of the row
// groups groups (all when nil) as a table with pqarrow, nil on error.
func pqarrowTable(data []byte, leaves, groups []int) (tbl arrow.Table) {
	defer func() {
		if recover() != nil {
			tbl = nil
		}
	}()
	rdr, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		return nil
	}
	fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{}, memory.NewGoAllocator())
	if err != nil {
		return nil
	}
	if groups == nil {
		for g := range rdr.NumRowGroups() {
			groups = append(groups, g)
		}
	}
	tbl, err = fr.ReadRowGroups(context.Background(), leaves, groups)
	if err != nil {
		return nil
	}
	return tbl
}

// sameValues reports how the values of recs differ from table's, column
// by column, as JSON ("" when they do not).
func sameValues(table arrow.Table, recs []arrow.Record) string {
	for c := range int(table.NumCols()) {
		var want, got []any
		for _, chunk := range table.Column(c).Data().Chunks() {
			want = append(want, jsonValues(chunk)...)
		}
		for _, rec := range recs {
			got = append(got, jsonValues(rec.Column(c))...)
		}
		if !reflect.DeepEqual(got, want) {
			return fmt.Sprintf("column %d: %v, want %v", c, got, want)
		}
	}
	return ""
}

func jsonValues(a arrow.Array) []any {
	b, err := json.Marshal(a)
	if err != nil {
		return []any{err.Error()}
	}
	var out []any
	if err := json.Unmarshal(b, &out); err != nil {
		return []any{err.Error()}
	}
	return out
}

// fixedSizeRows reports a row of recs in a column of fields written as a
// fixed-size list that is not null and of its size, or null and empty
// ("" when there is none).
func fixedSizeRows(fields []arrow.Field, recs []arrow.Record) string {
	for i, rec := range recs {
		for c, f := range fields {
			fsl, ok := f.Type.(*arrow.FixedSizeListType)
			if !ok {
				continue
			}
			l := rec.Column(c).(*array.List)
			for r := range l.Len() {
				start, end := l.ValueOffsets(r)
				if want := int64(fsl.Len()) * int64(btoi(l.IsValid(r))); end-start != want {
					return fmt.Sprintf("record %d column %d row %d: %d values, want %d", i, c, r, end-start, want)
				}
			}
		}
	}
	return ""
}

// TestParquetScanMatchesPqarrow scans random transitions files (index
// and count columns of types the scan reads and of types it refuses,
// nested ones too, ids or integers, nulls, bad values, other columns)
// as the scan did with pqarrow's record reader and as it does now, with
// pqColumns where it can and with the record reader of pqread.go: the
// rows, batches and error messages are the same (as sameScanError says).
func TestParquetScanMatchesPqarrow(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	files := 200
	if testing.Short() {
		files = 40
	}
	names := []string{"state", "action", "next_state", "count", "episode"}
	skipped := 0
	outcomes := map[bool]int{} // read without error or not
	defer func() {
		if skipped > files/4 {
			t.Errorf("pqarrow wrote only %d of %d files", files-skipped, files)
		}
		t.Logf("%d files not written, %d read, %d refused", skipped, outcomes[true], outcomes[false])
	}()
	for i := range files {
		ids := rng.IntN(2) == 0
		var fields []arrow.Field
		var nulls, bad []float64
		for k, name := range names {
			if k >= colCount && rng.IntN(3) == 0 {
				continue // no count or no extra column
			}
			// Mostly the types the scan reads, as the options want them.
			var typ arrow.DataType
			switch {
			case rng.IntN(6) == 0:
				typ = pqScanTypes[rng.IntN(len(pqScanTypes))]
			case k <= colNext && ids:
				typ = pqScanTypes[7+rng.IntN(4)]
			default:
				typ = pqScanTypes[rng.IntN(7)]
			}
			f := arrow.Field{Name: name, Type: typ, Nullable: rng.IntN(2) == 0}
			fields = append(fields, f)
			nulls = append(nulls, []float64{0, 0, 0.01, 0.5}[rng.IntN(4)]*float64(btoi(f.Nullable)))
			bad = append(bad, []float64{0, 0, 0.01}[rng.IntN(3)])
		}
		rng.Shuffle(len(fields), func(a, b int) {
			fields[a], fields[b] = fields[b], fields[a]
			nulls[a], nulls[b] = nulls[b], nulls[a]
			bad[a], bad[b] = bad[b], bad[a]
		})
		rows := []int{0, 1, 20, 300, 300}[rng.IntN(5)]
		mem := memory.NewGoAllocator()
		data, what := randomParquet(t, rng, fields, rows, func(k, n int) arrow.Array {
			return randomScanColumn(rng, mem, fields[k].Type, n, nulls[k], bad[k], fields[k].Name == "count")
		})
		if data == nil {
			skipped++
			continue
		}
		opts := ReadOptions{BatchRows: 1 + rng.IntN(max(2*rows, 1)), NoCount: rng.IntN(4) == 0}
		newOpts := func() ReadOptions {
			o := opts
			if ids {
				o.StateIDs, o.ActionIDs = &shard.Vocab{}, &shard.Vocab{}
			}
			return o
		}
		want := &collected{}
		wantOpts := newOpts()
		wantErr := scanPqarrow(data, wantOpts, want.add)
		same := func(err error, got *collected) bool {
			return sameScanError(err, wantErr, fields) && reflect.DeepEqual(got, want)
		}
		fallback := errors.Is(wantErr, arrow.ErrNotImplemented)
		if fallback {
			// A dictionary that changes within a batch: pqarrow reads
			// it in batches of a row, which the scan hands on as they
			// are: the same rows in other batches, or an error (maybe
			// another: the scan checks a batch column by column).
			want, wantOpts = &collected{}, newOpts()
			wantErr = scanPqarrowBatch(data, wantOpts, 1, want.add)
			same = func(err error, got *collected) bool {
				if err != nil || wantErr != nil {
					return err != nil && wantErr != nil
				}
				return reflect.DeepEqual([]any{got.s, got.a, got.n, got.c}, []any{want.s, want.a, want.n, want.c})
			}
		}
		for _, library := range []bool{false, true} {
			got := &collected{}
			o := newOpts()
			o.libraryParquet = library
			o.Alloc = memory.NewCheckedAllocator(memory.NewGoAllocator())
			err := ScanTransitionsReader(context.Background(), bytes.NewReader(data), "t.parquet", FormatParquet, o, got.add)
			o.Alloc.(*memory.CheckedAllocator).AssertSize(t, 0)
			if !same(err, got) {
				t.Fatalf("file %d (%v; %s; %+v, ids %v, record reader %v):\npqarrow: %v\npqread:  %v (or other rows)", i, fields, what, opts, ids, library, wantErr, err)
			}
			if library {
				outcomes[err == nil]++
			}
			if ids && !(fallback && err != nil) && (!o.StateIDs.Equal(wantOpts.StateIDs) || !o.ActionIDs.Equal(wantOpts.ActionIDs)) {
				t.Fatalf("file %d: vocabularies %v and %v, pqarrow %v and %v", i, o.StateIDs.Strings(), o.ActionIDs.Strings(), wantOpts.StateIDs.Strings(), wantOpts.ActionIDs.Strings())
			}
		}
	}
}

// TestParquetCorruptScanMatchesPqarrow scans files with a few random
// bytes overwritten (footer, page headers, levels, values; plain and
// dictionary pages, nulls) through the record reader and through the
// old pqarrow path: the same rows, and the same error, word for word
// (as sameScanError says).
func TestParquetCorruptScanMatchesPqarrow(t *testing.T) {
	mem := memory.NewGoAllocator()
	sizes := []int{30, 7, 100}
	seeds := [][]byte{
		encodeParquet(t, pqTestRecords(mem, sizes, "float64", false, nil)),
		encodeParquet(t, pqTestRecords(mem, sizes, "", true, nil), parquet.WithDictionaryDefault(false)),
		encodeParquet(t, pqTestRecords(mem, sizes, "int64", false, func(k, r int, s, a, n *int64, c *float64, null *bool) {
			*null = k == 2 && r > 40
		}), parquet.WithDataPageSize(64), parquet.WithDictionaryPageSizeLimit(64)),
	}
	rng := rand.New(rand.NewPCG(11, 12))
	files := 600
	if testing.Short() {
		files = 100
	}
	failed := 0
	for i := range files {
		data := bytes.Clone(seeds[i%len(seeds)])
		for range 1 + rng.IntN(3) {
			data[rng.IntN(len(data))] = byte(rng.IntN(256))
		}
		got, want := &collected{}, &collected{}
		err := ScanTransitionsReader(context.Background(), bytes.NewReader(data), "t.parquet", FormatParquet,
			ReadOptions{BatchRows: 3, libraryParquet: true}, got.add)
		wantErr := scanPqarrow(data, ReadOptions{BatchRows: 3}, want.add)
		if !sameScanError(err, wantErr, nil) || !reflect.DeepEqual(got, want) {
			t.Fatalf("file %d:\npqarrow: %v\npqread:  %v (or other rows)", i, wantErr, err)
		}
		if err != nil {
			failed++
		}
	}
	if failed == 0 || failed == files {
		t.Errorf("%d of %d corrupt files failed: the test does not test both", failed, files)
	}
}

// pqarrowFile writes rec as Parquet with pqarrow, which writes the types
// emsf does not read.
func pqarrowFile(t *testing.T, rec arrow.Record) []byte {
	t.Helper()
	var buf bytes.Buffer
	fw, err := pqarrow.NewFileWriter(rec.Schema(), &buf, parquet.NewWriterProperties(), pqarrow.NewArrowWriterProperties())
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestParquetRefusedColumns checks that a column emsf does not read is
// refused with its name and Parquet type: by the scan, as an index or as
// the count, and by the record reader; the other columns of the file
// still read.
func TestParquetRefusedColumns(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	cases := []struct {
		typ     arrow.DataType
		parquet string
	}{
		{arrow.StructOf(arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Int32}), "group (struct)"},
		{arrow.MapOf(arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int32), "group (Map)"},
		{arrow.ListOf(arrow.PrimitiveTypes.Int32), "group (List) of INT32 (Int(bitWidth=32, isSigned=true))"},
		{arrow.ListOf(arrow.PrimitiveTypes.Float64), "group (List) of DOUBLE"}, // read for models, not by the scan
		{arrow.ListOf(arrow.ListOf(arrow.PrimitiveTypes.Float64)), "group (List)"},
		{arrow.FixedWidthTypes.Date32, "INT32 (Date)"},
		{arrow.FixedWidthTypes.Timestamp_ms, "INT64 (Timestamp(isAdjustedToUTC=true, timeUnit=milliseconds, is_from_converted_type=false, force_set_converted_type=false))"},
		{&arrow.Decimal128Type{Precision: 9, Scale: 0}, "FIXED_LEN_BYTE_ARRAY(4) (Decimal(precision=9, scale=0))"},
		{&arrow.FixedSizeBinaryType{ByteWidth: 3}, "FIXED_LEN_BYTE_ARRAY(3)"},
		{arrow.FixedWidthTypes.Float16, "FIXED_LEN_BYTE_ARRAY(2) (Float16)"},
	}
	for _, c := range cases {
		for k, name := range []string{"state", "count"} {
			odd := array.MakeArrayOfNull(mem, c.typ, 2)
			cols := []col{{"state", i32(mem, 0, 1)}, {"action", i32(mem, 0, 0)}, {"next_state", i32(mem, 1, 0)}, {"count", i32(mem, 1, 1)}}
			cols[3*k].arr.Release()
			cols[3*k].arr = odd
			rec := record(cols...)
			data := pqarrowFile(t, rec)
			rec.Release()
			want := fmt.Sprintf("has Parquet type %s; want a numeric column", c.parquet)
			if name == "state" {
				want += " (integer indices) or a string column (ids)"
			}
			for _, library := range []bool{false, true} {
				err := ScanTransitionsReader(context.Background(), bytes.NewReader(data), "t.parquet", FormatParquet, ReadOptions{libraryParquet: library}, func(*TransitionBatch) error { return nil })
				wantInputError(t, err, 0, name, want)
			}
			want = fmt.Sprintf("column %q has Parquet type %s, which emsf does not read", name, c.parquet)
			_, recs, err := ourRecords(data, mem, 10, nil, nil)
			releaseRecords(recs)
			if _, list := readType(c.typ).(*arrow.ListType); list && err != nil {
				t.Errorf("%s: record reader: %v", c.typ, err) // a model's values
			} else if !list && (err == nil || err.Error() != want) {
				t.Errorf("%s: record reader: %v, want %s", c.typ, err, want)
			}
			// The other columns read.
			rdr, err := file.NewParquetReader(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			other := 0 // state's leaf
			if name == "state" {
				other = rdr.MetaData().Schema.NumColumns() - 1 // count's
			}
			_, recs, err = ourRecords(data, mem, 10, []int{other}, nil)
			if err != nil || len(recs) != 1 || recs[0].NumRows() != 2 {
				t.Errorf("%s: another column: %v, %d records", c.typ, err, len(recs))
			}
			releaseRecords(recs)
		}
	}
}
