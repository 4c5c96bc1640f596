package arrowio

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"strconv"
	"unsafe"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/file"
	"github.com/apache/arrow/go/v15/parquet/metadata"
	"github.com/apache/arrow/go/v15/parquet/schema"
)

// pqWriter writes Arrow record batches as Parquet over parquet/file (see
// pqread.go for why not pqarrow), in the layout that files written by
// pqarrow's FileWriter have, which emsf's earlier files have and other
// Arrow readers expect: the Parquet schema of pqSchemaOf, the schema
// metadata as the file's key-value metadata, and, when asked, the Arrow
// schema stored under ARROW:schema (encodeStoredSchema). It writes the columns emsf writes: integers, floats, strings and
// binary, flat or as the elements of a list or fixed-size list, nulls
// allowed (TestParquetWriterMatchesPqarrow reads its files with pqarrow).
type pqWriter struct {
	sc      *arrow.Schema
	fw      *file.Writer
	serial  file.SerialRowGroupWriter   // the row group being written (Write)
	buf     file.BufferedRowGroupWriter // or buffered (WriteBuffered)
	maxRows int64
	closed  bool
}

// newPQWriter starts a Parquet file of schema sc on w with props; store
// stores the Arrow schema too.
func newPQWriter(w io.Writer, sc *arrow.Schema, props *parquet.WriterProperties, store bool) (*pqWriter, error) {
	root, err := pqSchemaOf(sc, props)
	if err != nil {
		return nil, err
	}
	meta := make(metadata.KeyValueMetadata, 0)
	md := sc.Metadata()
	for i, k := range md.Keys() {
		meta.Append(k, md.Values()[i])
	}
	if store {
		v, err := encodeStoredSchema(sc, props.Allocator())
		if err != nil {
			return nil, err
		}
		meta.Append(arrowSchemaKey, v)
	}
	fw := file.NewParquetWriter(w, root, file.WithWriterProps(props), file.WithWriteMetadata(meta))
	return &pqWriter{sc: sc, fw: fw, maxRows: props.MaxRowGroupLength()}, nil
}

// encodeStoredSchema is the value of arrowSchemaKey for sc: an IPC
// stream holding only the schema message (no record batch), base64 with
// padding.
func encodeStoredSchema(sc *arrow.Schema, mem memory.Allocator) (string, error) {
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(sc), ipc.WithAllocator(mem))
	if err := w.Close(); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// pqSchemaOf is the Parquet schema of files of Arrow schema sc, for the
// types pqWriter writes: a column per field (pqNode).
func pqSchemaOf(sc *arrow.Schema, props *parquet.WriterProperties) (*schema.GroupNode, error) {
	nodes := make(schema.FieldList, 0, sc.NumFields())
	for _, f := range sc.Fields() {
		n, err := pqNode(f.Name, f)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	return schema.NewGroupNode(props.RootName(), props.RootRepetition(), nodes, -1)
}

func pqRepetition(nullable bool) parquet.Repetition {
	if nullable {
		return parquet.Repetitions.Optional
	}
	return parquet.Repetitions.Required
}

// pqNode is the Parquet column of an Arrow field: integers as INT32 or
// INT64 annotated with their width and sign, floats as FLOAT or DOUBLE,
// strings and binary as BYTE_ARRAY (annotated STRING for strings), a
// list or fixed-size list as the three-level LIST group whose element
// (optional, named after the field) is the column of the list's element
// type; optional when the field is nullable.
func pqNode(name string, f arrow.Field) (schema.Node, error) {
	var logical schema.LogicalType = schema.NoLogicalType{}
	var typ parquet.Type
	switch f.Type.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.UINT8, arrow.UINT16, arrow.UINT32:
		typ = parquet.Types.Int32
		bits := f.Type.(arrow.FixedWidthDataType).BitWidth()
		logical = schema.NewIntLogicalType(int8(bits), !arrow.IsUnsignedInteger(f.Type.ID()))
	case arrow.INT64, arrow.UINT64:
		typ = parquet.Types.Int64
		logical = schema.NewIntLogicalType(64, f.Type.ID() == arrow.INT64)
	case arrow.FLOAT32:
		typ = parquet.Types.Float
	case arrow.FLOAT64:
		typ = parquet.Types.Double
	case arrow.STRING, arrow.LARGE_STRING:
		logical = schema.StringLogicalType{}
		typ = parquet.Types.ByteArray
	case arrow.BINARY, arrow.LARGE_BINARY:
		typ = parquet.Types.ByteArray
	case arrow.LIST, arrow.FIXED_SIZE_LIST:
		elem := f.Type.(arrow.ListLikeType).Elem()
		if elem.ID() == arrow.LIST || elem.ID() == arrow.FIXED_SIZE_LIST {
			return nil, fmt.Errorf("column %s: lists of lists are not written to Parquet", f.Name)
		}
		child, err := pqNode(name, arrow.Field{Name: name, Type: elem, Nullable: true})
		if err != nil {
			return nil, err
		}
		return schema.ListOf(child, pqRepetition(f.Nullable), -1)
	default:
		return nil, fmt.Errorf("column %s: type %s is not written to Parquet", f.Name, f.Type)
	}
	return schema.NewPrimitiveNodeLogical(name, pqRepetition(f.Nullable), logical, typ, -1, pqFieldID(f.Metadata))
}

// pqFieldID is the Parquet field id a field's metadata asks for
// (PARQUET:field_id, a non-negative int32), -1 for none.
func pqFieldID(md arrow.Metadata) int32 {
	i := md.FindKey("PARQUET:field_id")
	if i < 0 {
		return -1
	}
	id, err := strconv.ParseInt(md.Values()[i], 10, 32)
	if err != nil || id < 0 {
		return -1
	}
	return int32(id)
}

// Write writes rec as a row group of its own (several when it has more
// rows than the properties' row group length): the row groups of files
// written with pqarrow's Write.
func (w *pqWriter) Write(rec arrow.Record) error {
	if !rec.Schema().Equal(w.sc) {
		return fmt.Errorf("record schema does not match writer's. \nrecord: %s\nwriter: %s", rec.Schema(), w.sc)
	}
	for lo := int64(0); lo < rec.NumRows() || lo == 0; lo += w.maxRows {
		hi := min(rec.NumRows(), lo+w.maxRows)
		if w.serial != nil {
			if err := w.serial.Close(); err != nil {
				return err
			}
		}
		w.serial = w.fw.AppendRowGroup()
		for c := range int(rec.NumCols()) {
			cw, err := w.serial.NextColumn()
			if err != nil {
				return err
			}
			if err := pqWriteColumn(cw, rec.Column(c), int(lo), int(hi)); err != nil {
				return fmt.Errorf("column %s: %w", rec.ColumnName(c), err)
			}
		}
		if hi == rec.NumRows() {
			break
		}
	}
	return nil
}

// WriteBuffered adds rec to the row group being written, starting a new
// one when it reaches the properties' row group length: the row groups of
// files written with pqarrow's WriteBuffered.
func (w *pqWriter) WriteBuffered(rec arrow.Record) error {
	if !rec.Schema().Equal(w.sc) {
		return fmt.Errorf("record schema does not match writer's. \nrecord: %s\nwriter: %s", rec.Schema(), w.sc)
	}
	if w.buf == nil {
		w.buf = w.fw.AppendBufferedRowGroup()
	}
	cur, err := w.buf.NumRows()
	if err != nil {
		return err
	}
	for lo := int64(0); lo < rec.NumRows(); {
		if int64(cur) == w.maxRows {
			w.buf = w.fw.AppendBufferedRowGroup()
			cur = 0
		}
		hi := min(rec.NumRows(), lo+w.maxRows-int64(cur))
		for c := range int(rec.NumCols()) {
			cw, err := w.buf.Column(c)
			if err != nil {
				return err
			}
			if err := pqWriteColumn(cw, rec.Column(c), int(lo), int(hi)); err != nil {
				return fmt.Errorf("column %s: %w", rec.ColumnName(c), err)
			}
		}
		cur += int(hi - lo)
		lo = hi
	}
	return nil
}

// Close finishes the file (its footer); it does not close the writer the
// file went to.
func (w *pqWriter) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	if w.serial != nil {
		if err := w.serial.Close(); err != nil {
			return err
		}
	}
	if w.buf != nil {
		if err := w.buf.Close(); err != nil {
			return err
		}
	}
	return w.fw.Close()
}

// pqWriteColumn writes rows [lo, hi) of arr to cw: definition levels
// where the column allows nulls, repetition levels for a list's elements,
// and the values that are present, densely.
func pqWriteColumn(cw file.ColumnChunkWriter, arr arrow.Array, lo, hi int) error {
	maxDef := cw.Descr().MaxDefinitionLevel()
	var defs, reps []int16
	var rows []int // indices of the values written, in arr or in a list's elements
	values := arr
	switch a := arr.(type) {
	case array.ListLike:
		// A nullable list of nullable elements (the only lists emsf
		// writes: a model's values): null list maxDef-3, empty list
		// maxDef-2, null element maxDef-1, element maxDef.
		if maxDef != 3 {
			return fmt.Errorf("a list column with definition levels up to %d; want a nullable list of nullable elements (3)", maxDef)
		}
		values = a.ListValues()
		for i := lo; i < hi; i++ {
			if a.IsNull(i) {
				defs, reps = append(defs, maxDef-3), append(reps, 0)
				continue
			}
			start, end := a.ValueOffsets(i)
			if start == end {
				defs, reps = append(defs, maxDef-2), append(reps, 0)
				continue
			}
			for k := start; k < end; k++ {
				rep := int16(1)
				if k == start {
					rep = 0
				}
				reps = append(reps, rep)
				if values.IsNull(int(k)) {
					defs = append(defs, maxDef-1)
					continue
				}
				defs = append(defs, maxDef)
				rows = append(rows, int(k))
			}
		}
	default:
		if maxDef > 0 {
			defs = make([]int16, 0, hi-lo)
		}
		for i := lo; i < hi; i++ {
			if maxDef > 0 {
				if arr.IsNull(i) {
					defs = append(defs, 0)
					continue
				}
				defs = append(defs, 1)
			} else if arr.IsNull(i) {
				return fmt.Errorf("row %d is null in a column that allows none", i)
			}
			rows = append(rows, i)
		}
	}
	var err error
	switch wr := cw.(type) {
	case *file.Int32ColumnChunkWriter:
		v := make([]int32, len(rows))
		switch a := values.(type) {
		case *array.Int8:
			gather(v, a.Int8Values(), rows)
		case *array.Int16:
			gather(v, a.Int16Values(), rows)
		case *array.Int32:
			gather(v, a.Int32Values(), rows)
		case *array.Uint8:
			gather(v, a.Uint8Values(), rows)
		case *array.Uint16:
			gather(v, a.Uint16Values(), rows)
		case *array.Uint32:
			gather(v, a.Uint32Values(), rows)
		default:
			return fmt.Errorf("type mismatch, column is int32, array is %s", values.DataType())
		}
		_, err = wr.WriteBatch(v, defs, reps)
	case *file.Int64ColumnChunkWriter:
		v := make([]int64, len(rows))
		switch a := values.(type) {
		case *array.Int64:
			gather(v, a.Int64Values(), rows)
		case *array.Uint64:
			gather(v, a.Uint64Values(), rows)
		default:
			return fmt.Errorf("type mismatch, column is int64, array is %s", values.DataType())
		}
		_, err = wr.WriteBatch(v, defs, reps)
	case *file.Float32ColumnChunkWriter:
		a, ok := values.(*array.Float32)
		if !ok {
			return fmt.Errorf("type mismatch, column is float, array is %s", values.DataType())
		}
		v := make([]float32, len(rows))
		gather(v, a.Float32Values(), rows)
		_, err = wr.WriteBatch(v, defs, reps)
	case *file.Float64ColumnChunkWriter:
		a, ok := values.(*array.Float64)
		if !ok {
			return fmt.Errorf("type mismatch, column is double, array is %s", values.DataType())
		}
		v := make([]float64, len(rows))
		gather(v, a.Float64Values(), rows)
		_, err = wr.WriteBatch(v, defs, reps)
	case *file.ByteArrayColumnChunkWriter:
		v := make([]parquet.ByteArray, len(rows))
		switch a := values.(type) {
		case *array.String:
			for j, i := range rows {
				s := a.Value(i)
				v[j] = unsafe.Slice(unsafe.StringData(s), len(s))
			}
		case *array.LargeString:
			for j, i := range rows {
				s := a.Value(i)
				v[j] = unsafe.Slice(unsafe.StringData(s), len(s))
			}
		case *array.Binary:
			for j, i := range rows {
				v[j] = a.Value(i)
			}
		case *array.LargeBinary:
			for j, i := range rows {
				v[j] = a.Value(i)
			}
		default:
			return fmt.Errorf("type mismatch, column is byte_array, array is %s", values.DataType())
		}
		_, err = wr.WriteBatch(v, defs, reps)
	default:
		return fmt.Errorf("no writer for a column of %s", values.DataType())
	}
	return err
}

// gather sets dst[j] to src[rows[j]], converted.
func gather[D int32 | int64 | float32 | float64, S int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64 | float32 | float64](dst []D, src []S, rows []int) {
	for j, i := range rows {
		dst[j] = D(src[i])
	}
}
