package arrowio

import (
	"context"
	"fmt"
	"io"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/file"
	"github.com/apache/arrow/go/v15/parquet/schema"
)

// The record reader (pqread.go, as pqarrow's before it) builds an Arrow
// array of every column of every batch in freshly allocated and zeroed
// buffers, through converters for dictionary-encoded pages: for the
// transitions scan, which converts each batch to int32 columns and keeps
// nothing, that was most of the cost of reading Parquet
// (docs/benchmarks.md, section Ingest, round 4: 10M rows in ≈ 0.26 s
// where the column chunk readers take ≈ 0.06 s). pqColumns reads the
// common case with parquet's column chunk readers, straight into the
// batch: every column read is flat (not repeated, at most optional), the
// indices are INT32 or INT64 and the count DOUBLE, INT32 or INT64, each
// without a logical type or with the signed integer one of its width,
// and the record reader reads them as the Arrow types of the same width.
// Batches, values, row numbers and errors are those of the record reader
// (TestParquetColumnsMatchLibrary); any other file goes to the record
// reader.

// pqKind is the physical type pqColumns reads a column as.
type pqKind int

const (
	pqInt32 pqKind = iota
	pqInt64
	pqDouble
)

// pqKinds returns how pqColumns reads each of the leaf columns leaves
// (state, action, next state, then the count if read), or false when it
// cannot read them all.
func pqKinds(m *pqManifest, leaves []int) ([]pqKind, bool) {
	sc := m.descr
	kinds := make([]pqKind, len(leaves))
	for k, leaf := range leaves {
		var arrowType arrow.Type = -1
		for _, c := range m.cols {
			if c.leaf == leaf && !c.list && c.typ != nil {
				arrowType = c.typ.ID()
				break
			}
		}
		if leaf < 0 || leaf >= sc.NumColumns() {
			return nil, false
		}
		c := sc.Column(leaf)
		if c.MaxRepetitionLevel() != 0 || c.MaxDefinitionLevel() > 1 {
			return nil, false
		}
		width := map[parquet.Type]int8{parquet.Types.Int32: 32, parquet.Types.Int64: 64}[c.PhysicalType()]
		switch lt := c.LogicalType().(type) {
		case schema.NoLogicalType, nil:
		case *schema.IntLogicalType:
			if !lt.IsSigned() || lt.BitWidth() != width {
				return nil, false
			}
		default:
			return nil, false
		}
		switch {
		case c.PhysicalType() == parquet.Types.Int32 && arrowType == arrow.INT32:
			kinds[k] = pqInt32
		case c.PhysicalType() == parquet.Types.Int64 && arrowType == arrow.INT64:
			kinds[k] = pqInt64
		case c.PhysicalType() == parquet.Types.Double && arrowType == arrow.FLOAT64 && k == colCount:
			kinds[k] = pqDouble
		default:
			return nil, false
		}
	}
	return kinds, true
}

// pqOptionalPages reports whether pqPages reads every page of every chunk
// of the optional columns among leaves, by their headers (see
// errOptionalPage): pqColumns reads a file only then.
func pqOptionalPages(rdr *file.Reader, ra io.ReaderAt, size int64, leaves, groups []int) bool {
	md := rdr.MetaData()
	for _, leaf := range leaves {
		c := md.Schema.Column(leaf)
		if c.MaxDefinitionLevel() == 0 {
			continue
		}
		for _, g := range rowGroups(rdr, groups) {
			start, end, values, ok := pqChunk(md, rdr.RowGroup(g), leaf, size)
			if !ok {
				return false
			}
			if c.PhysicalType() == parquet.Types.Int32 {
				ok = newPQPages[int32](ra, start, end, values, true, nil).pages()
			} else {
				ok = newPQPages[int64](ra, start, end, values, true, nil).pages() // int64 or double: 8 bytes
			}
			if !ok {
				return false
			}
		}
	}
	return true
}

// pqColumn is one column that pqColumns reads: its values for the batch
// being read (int32 index columns go straight to the batch), its
// definition levels when it is optional, and the row of the batch's first
// null (-1: none yet).
type pqColumn struct {
	kind pqKind
	cr   pqReader // of the row group being read
	i32  []int32
	i64  []int64
	f64  []float64
	def  []int16
	null int
	leaf int
}

// pqReader reads one column chunk: parquet's typed column chunk reader,
// or pqPages.
type pqReader interface {
	HasNext() bool
	Err() error
}

// pqColumns reads the leaf columns leaves of rdr (state, action, next
// state and, if read, count, in that order), of kinds as pqKinds says,
// into batches of s.batchRows rows across row groups, as the record
// reader cuts them.
func (s *scan) pqColumns(ctx context.Context, rdr *file.Reader, ra io.ReaderAt, size int64, leaves []int, kinds []pqKind, groups []int) error {
	cols := make([]pqColumn, len(leaves))
	for k := range cols {
		c := &cols[k]
		c.kind, c.leaf = kinds[k], leaves[k]
		switch {
		case k <= colNext && c.kind == pqInt32:
			// read straight into the batch
		case c.kind == pqInt32:
			c.i32 = make([]int32, s.batchRows)
		case c.kind == pqInt64:
			c.i64 = make([]int64, s.batchRows)
		case k == colCount:
			// read straight into the batch
		}
		if rdr.MetaData().Schema.Column(c.leaf).MaxDefinitionLevel() > 0 {
			c.def = make([]int16, s.batchRows)
		}
	}
	n := 0 // rows in the batch
	s.pqBatch(cols, n)
	for _, g := range rowGroups(rdr, groups) {
		rg := rdr.RowGroup(g)
		for k := range cols {
			if err := s.pqOpen(&cols[k], rdr, rg, ra, size); err != nil {
				return s.corrupt("Parquet file", err)
			}
		}
		for left := rg.NumRows(); left > 0; {
			m := int(min(left, int64(s.batchRows-n)))
			for k := range cols {
				if err := s.pqRead(&cols[k], k, n, m); err != nil {
					return s.corrupt("Parquet file", err)
				}
			}
			n += m
			left -= int64(m)
			if left == 0 {
				for k := range cols {
					if err := pqEnd(&cols[k], rg.NumRows()); err != nil {
						return s.corrupt("Parquet file", err)
					}
				}
			}
			if n == s.batchRows {
				if err := s.pqFlush(ctx, cols, n); err != nil {
					return err
				}
				n = 0
				s.pqBatch(cols, n)
			}
		}
	}
	if n > 0 {
		return s.pqFlush(ctx, cols, n)
	}
	return nil
}

// pqOpen readies column c of row group rg for reading: with pqPages
// where it reads the chunk, else with parquet's reader. Errors come back
// as *decodeError.
func (s *scan) pqOpen(c *pqColumn, rdr *file.Reader, rg *file.RowGroupReader, ra io.ReaderAt, size int64) error {
	lib := func() (file.ColumnChunkReader, error) { return pqColumnReader(rg, c.leaf) }
	start, end, values, ok := pqChunk(rdr.MetaData(), rg, c.leaf, size)
	if !ok || s.libraryPages {
		cr, err := lib()
		c.cr = cr
		return err
	}
	if s.handOvers != nil {
		open := lib
		lib = func() (file.ColumnChunkReader, error) {
			*s.handOvers++
			return open()
		}
	}
	optional := c.def != nil
	switch c.kind {
	case pqInt32:
		c.cr = newPQPages(ra, start, end, values, optional, pqOpenLibrary[int32](lib))
	case pqInt64:
		c.cr = newPQPages(ra, start, end, values, optional, pqOpenLibrary[int64](lib))
	default:
		c.cr = newPQPages(ra, start, end, values, optional, pqOpenLibrary[float64](lib))
	}
	return nil
}

// pqOpenLibrary returns a function that opens parquet's reader of a chunk
// of T values with open.
func pqOpenLibrary[T pqValue](open func() (file.ColumnChunkReader, error)) func() (pqLibrary[T], error) {
	return func() (pqLibrary[T], error) {
		cr, err := open()
		if err != nil {
			return nil, err
		}
		lib, ok := cr.(pqLibrary[T])
		if !ok {
			return nil, &decodeError{fmt.Errorf("column %s: parquet reads it as %s", cr.Descriptor().Name(), cr.Type())}
		}
		return lib, nil
	}
}

// pqColumnReader opens column leaf of a row group. Errors come back as
// *decodeError.
func pqColumnReader(rg *file.RowGroupReader, leaf int) (cr file.ColumnChunkReader, err error) {
	defer catchDecode(&err)
	if cr, err = rg.Column(leaf); err != nil {
		return nil, &decodeError{err}
	}
	return cr, nil
}

// pqEnd checks that column c has no values past the rows of its row
// group, which also lets its reader release its last page. Errors come
// back as *decodeError.
func pqEnd(c *pqColumn, rows int64) (err error) {
	defer catchDecode(&err)
	if c.null >= 0 {
		return nil // the batch stops at the null
	}
	if c.cr.HasNext() {
		return &decodeError{fmt.Errorf("column %d has more values than the %d rows of its row group", c.leaf, rows)}
	}
	if err := c.cr.Err(); err != nil {
		return &decodeError{err}
	}
	return nil
}

// pqBatch readies the batch and the columns for the rows of a new batch.
func (s *scan) pqBatch(cols []pqColumn, n int) {
	s.reset(s.rows + 1)
	b := &s.b
	b.State, b.Action, b.Next = grow(b.State, s.batchRows), grow(b.Action, s.batchRows), grow(b.Next, s.batchRows)
	if !s.noCount {
		b.Count = grow(b.Count, s.batchRows)
	}
	for k := range cols {
		cols[k].null = -1
	}
}

// pqRead reads the next m rows of column k into rows [n, n+m) of the
// batch. After a null it reads nothing more of the batch: the batch's
// conversion stops there, if not before. Errors come back as
// *decodeError.
func (s *scan) pqRead(c *pqColumn, k, n, m int) (err error) {
	defer catchDecode(&err)
	if c.null >= 0 {
		return nil
	}
	for m > 0 {
		var def []int16
		if c.def != nil {
			def = c.def[n : n+m]
		}
		var levels int64
		var values int
		switch {
		case c.kind == pqInt32:
			dst := c.i32
			if k <= colNext {
				dst = *[colNext + 1]*[]int32{&s.b.State, &s.b.Action, &s.b.Next}[k]
			}
			levels, values, err = c.cr.(pqBatches[int32]).ReadBatch(int64(m), dst[n:n+m], def, nil)
		case c.kind == pqInt64:
			levels, values, err = c.cr.(pqBatches[int64]).ReadBatch(int64(m), c.i64[n:n+m], def, nil)
		default:
			levels, values, err = c.cr.(pqBatches[float64]).ReadBatch(int64(m), s.b.Count[n:n+m], def, nil)
		}
		if err != nil {
			return &decodeError{err}
		}
		if levels <= 0 {
			return &decodeError{fmt.Errorf("column %d ends before the %d rows of its row group", c.leaf, m)}
		}
		if values < int(levels) {
			// A null: the values after it are not in their rows' places.
			for q, d := range def[:levels] {
				if d == 0 {
					c.null = n + q
					return nil
				}
			}
		}
		n += int(levels)
		m -= int(levels)
	}
	return nil
}

// pqFlush converts the n rows of the batch read into cols, as convert
// does a record's, and hands the batch on.
func (s *scan) pqFlush(ctx context.Context, cols []pqColumn, n int) error {
	first := s.rows + 1
	b := &s.b
	dst := [colNext + 1]*[]int32{&b.State, &b.Action, &b.Next}
	for k := range colNext + 1 {
		*dst[k] = (*dst[k])[:n]
		if err := pqConvert(s, &cols[k], n, first, func(null func(int) bool) error {
			if cols[k].kind == pqInt64 {
				return indexValues(s, null, cols[k].i64, 0, n, *dst[k], k, first)
			}
			return indexValues(s, null, *dst[k], 0, n, *dst[k], k, first)
		}); err != nil {
			return err
		}
	}
	switch {
	case s.noCount:
	case len(cols) <= colCount:
		b.Count = b.Count[:n]
		for i := range b.Count {
			b.Count[i] = 1
		}
	default:
		b.Count = b.Count[:n]
		c := &cols[colCount]
		if err := pqConvert(s, c, n, first, func(null func(int) bool) error {
			switch c.kind {
			case pqInt32:
				return countValues(s, null, c.i32, 0, 0, n, b.Count, first)
			case pqInt64:
				return countValues(s, null, c.i64, 0, 0, n, b.Count, first)
			}
			return countValues(s, null, b.Count, 64, 0, n, b.Count, first)
		}); err != nil {
			return err
		}
	}
	return s.flush(ctx)
}

// pqConvert runs convert with the column's nulls.
func pqConvert(s *scan, c *pqColumn, n, first int, convert func(null func(int) bool) error) error {
	if c.null < 0 {
		return convert(nil)
	}
	null := c.null
	return convert(func(i int) bool { return i >= null })
}

// rowGroups returns groups, or every row group of rdr when it is nil.
func rowGroups(rdr *file.Reader, groups []int) []int {
	if groups != nil {
		return groups
	}
	all := make([]int, rdr.NumRowGroups())
	for g := range all {
		all[g] = g
	}
	return all
}
