package arrowio

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/bitutil"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/file"
)

// Parquet is read into Arrow record batches over arrow-go's parquet/file,
// not its parquet/pqarrow, whose dependencies (arrow/compute,
// arrow/flight, gRPC, protobuf) slowed the start of every emsf process
// (see the package doc). emsf reads the top-level columns that
// pqschema.go gives an Arrow type: each with parquet's record reader,
// which decodes the pages (dictionary pages included), cuts the rows at
// repetition level 0 and spaces the values of an optional column out to
// its rows with a validity bitmap; what is left here is to wrap its
// buffers as Arrow arrays and, for a list, to turn the levels into
// offsets. The transitions scan and the model readers check the Arrow
// types before they read (a BOOLEAN column is refused there); a column
// without one is refused by name and Parquet type.

// pqFile is an open Parquet file.
type pqFile struct {
	rdr   *file.Reader
	man   *pqManifest
	md    arrow.Metadata // the key-value metadata but the stored Arrow schema
	mem   memory.Allocator
	batch int64 // rows a record batch
}

// openPQ opens a Parquet file of size bytes, to read in batches of
// batchRows rows. Decoding errors come back as *decodeError.
func openPQ(ra parquet.ReaderAtSeeker, size int64, mem memory.Allocator, batchRows int) (f *pqFile, err error) {
	err = func() (err error) {
		defer catch(&err)
		// Stream each column chunk through a buffer instead of reading it
		// whole: memory is then one buffer per column, whatever the size
		// of the row groups; no larger than the file (the reader grows it
		// if a page header needs more).
		props := parquet.NewReaderProperties(mem)
		props.BufferedStreamEnabled = true
		props.BufferSize = min(1<<20, max(size, 16<<10))
		rdr, err := file.NewParquetReader(ra, file.WithReadProps(props))
		if err != nil {
			return err
		}
		var keys, vals []string
		for _, kv := range rdr.MetaData().KeyValueMetadata() {
			if kv.Key == arrowSchemaKey {
				if err := verifyStoredSchema(kv.Value); err != nil {
					return err
				}
				continue
			}
			if kv.Value != nil {
				keys, vals = append(keys, kv.Key), append(vals, *kv.Value)
			}
		}
		f = &pqFile{rdr: rdr, man: newPQManifest(rdr.MetaData().Schema), md: arrow.NewMetadata(keys, vals),
			mem: mem, batch: int64(batchRows)}
		return nil
	}()
	if err != nil {
		return nil, &decodeError{err}
	}
	return f, nil
}

// columnsOf returns the top-level columns that hold the leaf columns
// leaves (all when nil), in the order they first hold one.
func (f *pqFile) columnsOf(leaves []int) ([]int, error) {
	sc := f.man.descr
	if leaves == nil {
		out := make([]int, len(f.man.cols))
		for i := range out {
			out[i] = i
		}
		return out, nil
	}
	var out []int
	seen := map[int]bool{}
	for _, leaf := range leaves {
		if leaf < 0 || leaf >= sc.NumColumns() {
			return nil, fmt.Errorf("no leaf column %d: the file has %d", leaf, sc.NumColumns())
		}
		top := sc.Root().FieldIndexByField(sc.ColumnRoot(leaf))
		if top < 0 {
			return nil, fmt.Errorf("leaf column %d is in no top-level column", leaf)
		}
		if !seen[top] {
			seen[top] = true
			out = append(out, top)
		}
	}
	return out, nil
}

// schemaOf returns the Arrow schema of the record batches that
// records(leaves, …) reads, or the error of its first column that emsf
// does not read.
func (f *pqFile) schemaOf(leaves []int) (*arrow.Schema, error) {
	sc, _, err := f.schemaAndColumns(leaves)
	return sc, err
}

func (f *pqFile) schemaAndColumns(leaves []int) (*arrow.Schema, []int, error) {
	idx, err := f.columnsOf(leaves)
	if err != nil {
		return nil, nil, err
	}
	fields := make([]arrow.Field, len(idx))
	for i, k := range idx {
		c := &f.man.cols[k]
		if c.typ == nil {
			return nil, nil, c.refused()
		}
		fields[i] = arrow.Field{Name: c.name, Type: c.typ, Nullable: c.nullable}
	}
	return arrow.NewSchema(fields, nil), idx, nil
}

// records returns a reader of the record batches of the top-level
// columns that hold the leaf columns leaves (all when nil), over the row
// groups groups (all when nil). Errors come back as *decodeError.
func (f *pqFile) records(leaves, groups []int) (rr *pqRecords, err error) {
	err = func() (err error) {
		defer catch(&err)
		for _, g := range groups {
			if g < 0 || g >= f.rdr.NumRowGroups() {
				return fmt.Errorf("no row group %d: the file has %d", g, f.rdr.NumRowGroups())
			}
		}
		if groups == nil {
			groups = make([]int, f.rdr.NumRowGroups())
			for g := range groups {
				groups[g] = g
			}
		}
		sc, idx, err := f.schemaAndColumns(leaves)
		if err != nil {
			return err
		}
		if len(idx) == 0 {
			return errors.New("no columns to read")
		}
		rr = &pqRecords{sc: sc, batch: f.batch}
		for _, k := range idx {
			cr, err := f.columnReader(&f.man.cols[k], groups)
			if err != nil {
				rr.release()
				return err
			}
			rr.cols = append(rr.cols, cr)
		}
		return nil
	}()
	if err != nil {
		return nil, &decodeError{err}
	}
	return rr, nil
}

// pqRecords reads record batches of batch rows (the last one shorter),
// across row groups.
type pqRecords struct {
	sc    *arrow.Schema
	cols  []*pqColumnStream
	batch int64
	cur   arrow.Record
}

func (r *pqRecords) schema() *arrow.Schema { return r.sc }

// next returns the next record batch (owned by r, valid until the next
// call), nil at the end: when a column has no rows left. A decoder's
// panic is an error.
func (r *pqRecords) next() (rec arrow.Record, err error) {
	defer catch(&err)
	if r.cur != nil {
		r.cur.Release()
		r.cur = nil
	}
	arrs := make([]arrow.Array, 0, len(r.cols))
	defer func() { releaseAll(arrs) }()
	for _, cr := range r.cols {
		a, err := cr.read(r.batch)
		if err != nil {
			return nil, err
		}
		arrs = append(arrs, a)
		if a.Len() == 0 {
			return nil, nil
		}
	}
	r.cur = array.NewRecord(r.sc, arrs, -1) // panics when the lengths differ
	return r.cur, nil
}

func (r *pqRecords) release() {
	if r.cur != nil {
		r.cur.Release()
		r.cur = nil
	}
	for _, cr := range r.cols {
		cr.release()
	}
	r.cols = nil
}

func releaseAll(arrs []arrow.Array) {
	for _, a := range arrs {
		if a != nil {
			a.Release()
		}
	}
}

// pqColumnStream reads a top-level column, one row group after the other.
type pqColumnStream struct {
	col    *pqTop
	rdr    *file.Reader
	mem    memory.Allocator
	groups []int // row groups not started yet
	rr     file.RecordReader
	pages  *pqHeldPages // of the row group being read
}

func (f *pqFile) columnReader(c *pqTop, groups []int) (*pqColumnStream, error) {
	if c.typ == nil || c.typ.ID() == arrow.BOOL {
		return nil, c.refused()
	}
	descr := f.man.descr.Column(c.leaf)
	levels := file.LevelInfo{NullSlotUsage: 1, DefLevel: descr.MaxDefinitionLevel(), RepLevel: descr.MaxRepetitionLevel()}
	if c.list {
		// A list's elements, null or not, have a slot among the values
		// from the definition level of the repeated group on.
		levels.RepeatedAncestorDefLevel = pqListLevel(c) + 1
	}
	cr := &pqColumnStream{col: c, rdr: f.rdr, mem: f.mem, groups: groups,
		rr: file.NewRecordReader(descr, levels, c.typ, f.mem, f.rdr.BufferPool())}
	if err := cr.nextRowGroup(); err != nil {
		cr.release()
		return nil, err
	}
	return cr, nil
}

// pqListLevel is the definition level of a list that is there (empty or
// not): 1 when it is optional, 0 when required.
func pqListLevel(c *pqTop) int16 { return int16(btoi(c.nullable)) }

// pqHeldPages is a page reader that knows the page it handed out last:
// parquet's page reader releases a page only when it reads the next one,
// so a column left before its end (a scan that stops at a bad row, a
// record batch that ends in the middle of a page) would otherwise hold
// its last page's buffer from the allocator for good.
type pqHeldPages struct {
	file.PageReader
	cur file.Page
}

func (p *pqHeldPages) Next() bool {
	p.cur = nil // the reader releases it
	return p.PageReader.Next()
}

func (p *pqHeldPages) Page() file.Page {
	p.cur = p.PageReader.Page()
	return p.cur
}

// close releases the page handed out last; the reader is not used after.
func (p *pqHeldPages) close() {
	if p.cur != nil {
		p.cur.Release()
		p.cur = nil
	}
}

// nextRowGroup points the record reader at the next row group's chunk
// of the column, or at nothing when none is left.
func (cr *pqColumnStream) nextRowGroup() error {
	if cr.pages != nil {
		cr.pages.close()
		cr.pages = nil
	}
	if len(cr.groups) == 0 {
		cr.rr.SetPageReader(nil)
		return nil
	}
	pr, err := cr.rdr.RowGroup(cr.groups[0]).GetColumnPageReader(cr.col.leaf)
	if err != nil {
		return err
	}
	cr.groups = cr.groups[1:]
	cr.pages = &pqHeldPages{PageReader: pr}
	cr.rr.SetPageReader(cr.pages)
	return nil
}

// read returns the next n rows of the column (fewer at its end) as an
// array of the column's type.
func (cr *pqColumnStream) read(n int64) (arrow.Array, error) {
	cr.rr.Reset()
	if err := cr.rr.Reserve(n); err != nil {
		return nil, err
	}
	for n > 0 && cr.rr.HasMore() {
		got, err := cr.rr.ReadRecords(n)
		if err != nil {
			return nil, err
		}
		if got == 0 { // the row group is done
			if err := cr.nextRowGroup(); err != nil {
				return nil, err
			}
		}
		n -= got
	}
	if cr.col.list {
		return cr.listArray()
	}
	return cr.valuesArray(cr.col.typ)
}

// valuesArray wraps the values the record reader read (and its validity
// bitmap) as an array of type t.
func (cr *pqColumnStream) valuesArray(t arrow.DataType) (arrow.Array, error) {
	if br, ok := cr.rr.(file.BinaryRecordReader); ok {
		// Byte arrays go to an Arrow builder of type t as they are read.
		chunks := br.GetBuilderChunks()
		defer releaseAll(chunks)
		if len(chunks) != 1 {
			return nil, fmt.Errorf("column %q: %d chunks of byte arrays, want 1", cr.col.name, len(chunks))
		}
		return array.MakeFromData(chunks[0].Data()), nil // a *array.String when t is string
	}
	n := cr.rr.ValuesWritten()
	valid, values := cr.rr.ReleaseValidBits(), cr.rr.ReleaseValues()
	defer func() {
		for _, b := range []*memory.Buffer{valid, values} {
			if b != nil {
				b.Release()
			}
		}
	}()
	// INT32 holds the integers of 32 bits and less, INT64 those of 64:
	// only those of 8 and 16 bits need a copy.
	switch t.ID() {
	case arrow.INT8:
		values = narrowInts[int8](cr.mem, values, n)
	case arrow.UINT8:
		values = narrowInts[uint8](cr.mem, values, n)
	case arrow.INT16:
		values = narrowInts[int16](cr.mem, values, n)
	case arrow.UINT16:
		values = narrowInts[uint16](cr.mem, values, n)
	}
	data := array.NewData(t, n, []*memory.Buffer{valid, values}, nil, int(cr.rr.NullCount()), 0)
	defer data.Release()
	return array.MakeFromData(data), nil
}

// narrowInts converts the first n int32 values of src to T in a new
// buffer, as Go converts them, and releases src.
func narrowInts[T int8 | uint8 | int16 | uint16](mem memory.Allocator, src *memory.Buffer, n int) *memory.Buffer {
	defer src.Release()
	from := arrow.Int32Traits.CastFromBytes(src.Bytes())[:n]
	var zero T
	dst := memory.NewResizableBuffer(mem)
	dst.Resize(n * int(unsafe.Sizeof(zero)))
	to := unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(dst.Bytes()))), n)
	for i, v := range from {
		to[i] = T(v)
	}
	return dst
}

// listArray builds the list<float64> array of the rows read from their
// levels: repetition level 0 starts a row; a definition level below the
// list's is a null row, the list's own an empty one, and every level
// above it an element (null or a value) with its slot among the values.
func (cr *pqColumnStream) listArray() (arrow.Array, error) {
	nlevels := int(cr.rr.LevelsPos())
	def, rep := cr.rr.DefLevels()[:nlevels], cr.rr.RepLevels()[:nlevels]
	if nlevels > 0 && rep[0] != 0 {
		return nil, fmt.Errorf("column %q: the rows read start with repetition level %d", cr.col.name, rep[0])
	}
	rows := 0
	for _, r := range rep {
		if r == 0 {
			rows++
		}
	}
	offsets := memory.NewResizableBuffer(cr.mem)
	defer offsets.Release()
	offsets.Resize(arrow.Int32Traits.BytesRequired(rows + 1))
	offs := arrow.Int32Traits.CastFromBytes(offsets.Bytes())
	var valid *memory.Buffer
	if cr.col.nullable {
		valid = memory.NewResizableBuffer(cr.mem)
		defer valid.Release()
		valid.Resize(int(bitutil.BytesForBits(int64(rows))))
		clear(valid.Bytes())
	}
	there := pqListLevel(cr.col)
	row, elems, nulls := -1, int32(0), 0
	for i, d := range def {
		if rep[i] == 0 {
			row++
			offs[row] = elems
			switch {
			case d >= there && valid != nil:
				bitutil.SetBit(valid.Bytes(), row)
			case d < there:
				nulls++
			}
		}
		if d > there {
			elems++
		}
	}
	offs[rows] = elems
	if int(elems) != cr.rr.ValuesWritten() {
		return nil, fmt.Errorf("column %q: the levels give %d list elements, %d values were read", cr.col.name, elems, cr.rr.ValuesWritten())
	}
	values, err := cr.valuesArray(arrow.PrimitiveTypes.Float64)
	if err != nil {
		return nil, err
	}
	defer values.Release()
	buffers := []*memory.Buffer{nil, offsets}
	if nulls > 0 {
		buffers[0] = valid
	}
	data := array.NewData(cr.col.typ, rows, buffers, []arrow.ArrayData{values.Data()}, nulls, 0)
	defer data.Release()
	return array.MakeFromData(data), nil
}

func (cr *pqColumnStream) release() {
	if cr.pages != nil {
		cr.pages.close()
		cr.pages = nil
	}
	if cr.rr != nil {
		cr.rr.Release()
		cr.rr = nil
	}
}
