package arrowio

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/metadata"
)

// ipc reads an Arrow IPC file or stream.
func (s *scan) ipc(ctx context.Context, src ipcSource) error {
	what := "Arrow IPC stream"
	if src.file {
		what = "Arrow IPC file"
	}
	var cols [numCols]int
	src.transient = !s.libraryIPC // record converts each record batch and keeps nothing
	src.fields = func() []int {
		var fs []int
		for _, c := range cols {
			if c >= 0 {
				fs = append(fs, c)
			}
		}
		return fs
	}
	err := readIPC(src, s.mem, func(sc *arrow.Schema) error {
		var err error
		cols, err = s.columns(sc)
		return err
	}, func(rec arrow.Record) error {
		return s.record(ctx, rec, cols)
	})
	if err != nil {
		return s.corrupt(what, err)
	}
	if s.rows == 0 && src.split == nil {
		return s.noRows()
	}
	return nil
}

// parquet reads a Parquet file of size bytes.
func (s *scan) parquet(ctx context.Context, ra parquet.ReaderAtSeeker, size int64) error {
	return s.parquetGroups(ctx, ra, size, nil)
}

// parquetSplit reads the row groups of a Parquet file of size bytes
// whose midpoint lies in [off, end) (see split.go).
func (s *scan) parquetSplit(ctx context.Context, ra io.ReaderAt, size, off, end int64) error {
	return s.parquetGroups(ctx, io.NewSectionReader(ra, 0, size), size, func(md *metadata.FileMetaData) []int {
		groups := []int{}
		for g := range len(md.RowGroups) {
			rg := md.RowGroup(g)
			if rg.NumColumns() == 0 {
				continue
			}
			cc, err := rg.ColumnChunk(0)
			if err != nil {
				continue
			}
			start := cc.DataPageOffset()
			if cc.HasDictionaryPage() && cc.DictionaryPageOffset() > 0 && cc.DictionaryPageOffset() < start {
				start = cc.DictionaryPageOffset()
			}
			total := int64(0)
			for c := range rg.NumColumns() {
				if cc, err := rg.ColumnChunk(c); err == nil {
					total += cc.TotalCompressedSize()
				}
			}
			if mid := start + total/2; mid >= off && mid < end {
				groups = append(groups, g)
			}
		}
		return groups
	})
}

// parquetGroups reads a Parquet file of size bytes: the row groups that
// pick returns (all when pick is nil).
func (s *scan) parquetGroups(ctx context.Context, ra parquet.ReaderAtSeeker, size int64, pick func(*metadata.FileMetaData) []int) error {
	mem := capAllocator(s.mem, size)
	f, err := openPQ(ra, size, mem, s.batchRows)
	if err != nil {
		return s.corrupt("Parquet file", err)
	}
	total := f.rdr.NumRows()
	var groups []int
	if pick != nil {
		groups = pick(f.rdr.MetaData())
		total = 0
		for _, g := range groups {
			total += f.rdr.MetaData().RowGroup(g).NumRows()
		}
	}
	leaves, err := s.leaves(f.man)
	if err != nil {
		return err
	}
	if kinds, ok := pqKinds(f.man, leaves); ok && !s.anyIDs() && !s.libraryParquet && (s.libraryPages || pqOptionalPages(f.rdr, ra, size, leaves, groups)) {
		err = s.pqColumns(ctx, f.rdr, ra, size, leaves, kinds, groups)
	} else {
		err = s.pqRecords(ctx, f, leaves, groups)
	}
	if err != nil {
		return err
	}
	if int64(s.rows) != total {
		return s.corrupt("Parquet file", &decodeError{fmt.Errorf("read %d rows, the metadata says %d", s.rows, total)})
	}
	if s.rows == 0 && pick == nil {
		return s.noRows()
	}
	return nil
}

// pqRecords reads the leaf columns leaves of f as record batches
// (pqread.go).
func (s *scan) pqRecords(ctx context.Context, f *pqFile, leaves, groups []int) error {
	if groups != nil && len(groups) == 0 {
		return nil
	}
	sc, err := f.schemaOf(leaves)
	if err != nil {
		return s.corrupt("Parquet file", &decodeError{err})
	}
	// The types first: the record reader reads only those the scan takes.
	cols, err := s.columns(sc)
	if err != nil {
		return err
	}
	rr, err := f.records(leaves, groups)
	if err != nil {
		return s.corrupt("Parquet file", err)
	}
	defer rr.release()
	for {
		rec, err := rr.next()
		if err != nil {
			return s.corrupt("Parquet file", &decodeError{err})
		}
		if rec == nil {
			return nil
		}
		if err := s.record(ctx, rec, cols); err != nil {
			return err
		}
	}
}

// leaves returns the Parquet leaf columns that hold the columns to read,
// refusing a column that has no Arrow type here (pqschema.go) or is a
// list by its Parquet type.
func (s *scan) leaves(m *pqManifest) ([]int, error) {
	var present []string
	for _, c := range m.cols {
		present = append(present, c.name)
	}
	var out []int
	for k := range numCols {
		if k == colCount && s.noCount {
			continue
		}
		var col *pqTop
		for i := range m.cols {
			if m.cols[i].name == s.names[k] {
				col = &m.cols[i]
				break
			}
		}
		switch {
		case col == nil && k == colCount && s.countOpt:
			continue
		case col == nil:
			return nil, s.missingColumn(k, present)
		case col.typ == nil || col.list:
			want := "a numeric column"
			if k <= colNext && s.ids[k] != nil {
				want = "a string column (ids)"
			} else if k <= colNext {
				want = "a numeric column (integer indices) or a string column (ids)"
			}
			return nil, &InputError{File: s.file, Column: s.names[k],
				Reason: fmt.Sprintf("has Parquet type %s; want %s", col.parquet, want)}
		}
		out = append(out, col.leaf)
	}
	return out, nil
}

// arrowSchemaKey is where Parquet writers store the Arrow schema (an IPC
// schema message, base64).
const arrowSchemaKey = "ARROW:schema"

// verifyStoredSchema checks the IPC message of a stored Arrow schema
// before the IPC reader decodes it (see fbVerifier).
func verifyStoredSchema(v *string) error {
	if v == nil {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(*v)
	if len(b) == 0 || err != nil {
		if b, err = base64.RawStdEncoding.DecodeString(*v); err != nil {
			return fmt.Errorf("%s is not base64: %w", arrowSchemaKey, err)
		}
	}
	mr := newMsgReader(bytes.NewReader(b), int64(len(b)), false)
	defer mr.Release()
	if _, err := mr.Message(); err != nil {
		return fmt.Errorf("%s: %w", arrowSchemaKey, err)
	}
	return nil
}

// columns finds the columns to read in an Arrow schema and checks their
// types: integer or float for indices (strings for ids: checkIDColumn),
// any numeric type for counts.
func (s *scan) columns(sc *arrow.Schema) (idx [numCols]int, err error) {
	for k := range numCols {
		if k == colCount && s.noCount {
			idx[k] = -1
			continue
		}
		is := sc.FieldIndices(s.names[k])
		if len(is) == 0 {
			if k == colCount && s.countOpt {
				idx[k] = -1
				continue
			}
			present := make([]string, sc.NumFields())
			for i, f := range sc.Fields() {
				present[i] = f.Name
			}
			return idx, s.missingColumn(k, present)
		}
		idx[k] = is[0]
		if k <= colNext {
			if err := s.checkIDColumn(k, sc.Field(is[0]).Type); err != nil {
				return idx, err
			}
		} else if !numeric(sc.Field(is[0]).Type) {
			return idx, &InputError{File: s.file, Column: s.names[k],
				Reason: fmt.Sprintf("has type %s; want a numeric column", sc.Field(is[0]).Type)}
		}
	}
	return idx, nil
}

func numeric(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64,
		arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64,
		arrow.FLOAT32, arrow.FLOAT64:
		return true
	}
	return false
}

// record converts one record batch, in chunks of at most batchRows rows.
func (s *scan) record(ctx context.Context, rec arrow.Record, cols [numCols]int) error {
	n := int(rec.NumRows())
	for lo := 0; lo < n; lo += s.batchRows {
		if err := s.convert(rec, cols, lo, min(n, lo+s.batchRows)); err != nil {
			return err
		}
		if err := s.flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// convert fills the batch with rows [lo, hi) of rec. The arrays come from
// the input: a panic on an inconsistent buffer is a decoding error.
func (s *scan) convert(rec arrow.Record, cols [numCols]int, lo, hi int) (err error) {
	defer catchDecode(&err)
	first := s.rows + 1
	s.reset(first)
	b := &s.b
	dst := [colNext + 1]*[]int32{&b.State, &b.Action, &b.Next}
	for k := range colNext + 1 {
		*dst[k] = grow(*dst[k], hi-lo)
		if s.ids[k] != nil {
			if err := s.idColumn(rec.Column(cols[k]), lo, hi, *dst[k], k, first); err != nil {
				return err
			}
			continue
		}
		if err := s.indexColumn(rec.Column(cols[k]), lo, hi, *dst[k], k, first); err != nil {
			return err
		}
	}
	if s.noCount {
		return nil // flush hands Count nil
	}
	b.Count = grow(b.Count, hi-lo)
	if cols[colCount] < 0 {
		for i := range b.Count {
			b.Count[i] = 1
		}
		return nil
	}
	return s.countColumn(rec.Column(cols[colCount]), lo, hi, b.Count, first)
}

func grow[T any](x []T, n int) []T {
	if cap(x) < n {
		return make([]T, n)
	}
	return x[:n]
}

type integer interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// indexColumn converts rows [lo, hi) of an index column into dst; first is
// the data row number of row lo.
func (s *scan) indexColumn(arr arrow.Array, lo, hi int, dst []int32, k, first int) error {
	switch a := arr.(type) {
	case *array.Int8:
		return indexInts(s, a, a.Int8Values(), lo, hi, dst, k, first)
	case *array.Int16:
		return indexInts(s, a, a.Int16Values(), lo, hi, dst, k, first)
	case *array.Int32:
		return indexInts(s, a, a.Int32Values(), lo, hi, dst, k, first)
	case *array.Int64:
		return indexInts(s, a, a.Int64Values(), lo, hi, dst, k, first)
	case *array.Uint8:
		return indexInts(s, a, a.Uint8Values(), lo, hi, dst, k, first)
	case *array.Uint16:
		return indexInts(s, a, a.Uint16Values(), lo, hi, dst, k, first)
	case *array.Uint32:
		return indexInts(s, a, a.Uint32Values(), lo, hi, dst, k, first)
	case *array.Uint64:
		return indexInts(s, a, a.Uint64Values(), lo, hi, dst, k, first)
	case *array.Float32:
		return indexFloats(s, a, a.Float32Values(), 32, lo, hi, dst, k, first)
	case *array.Float64:
		return indexFloats(s, a, a.Float64Values(), 64, lo, hi, dst, k, first)
	}
	return &InputError{File: s.file, Column: s.names[k],
		Reason: fmt.Sprintf("has type %s; want a numeric column", arr.DataType())}
}

func indexInts[T integer](s *scan, arr arrow.Array, vals []T, lo, hi int, dst []int32, k, first int) error {
	if len(vals) < hi {
		return s.shortColumn(k)
	}
	return indexValues(s, nullFunc(arr), vals, lo, hi, dst, k, first)
}

// nullFunc returns arr.IsNull, or nil when arr has no nulls.
func nullFunc(arr arrow.Array) func(int) bool {
	if arr.NullN() == 0 {
		return nil
	}
	return arr.IsNull
}

// indexValues converts vals[lo:hi] into dst; null (nil: no nulls) tells
// which rows are null. Every value before the first null must be in place
// (those after it are not looked at).
func indexValues[T integer](s *scan, null func(int) bool, vals []T, lo, hi int, dst []int32, k, first int) error {
	if v32, ok := any(vals).([]int32); ok && null == nil && inRange(dst, v32[lo:hi], s.limit[k]) {
		return nil
	}
	for i := lo; i < hi; i++ {
		if null != nil && null(i) {
			return s.bad(first+i-lo, k, "", reasonNull)
		}
		v := vals[i]
		var x int64
		switch {
		case v < 0:
			x = -1
		case uint64(v) > math.MaxInt32:
			x = math.MaxInt32 + 1
		default:
			x = int64(v)
		}
		if x < 0 || x >= s.limit[k] {
			return s.bad(first+i-lo, k, fmt.Sprint(v), s.indexReason(k, x))
		}
		dst[i-lo] = int32(x)
	}
	return nil
}

// inRange copies src to dst when every value v in it has 0 <= v < limit
// (the common case, checked in one branch-free pass); otherwise it
// reports false and the caller finds the first bad value.
func inRange(dst, src []int32, limit int64) bool {
	dst = dst[:len(src)]
	copy(dst, src)
	// As uint32s, negative values are above every limit. Four
	// accumulators, not one: the loop is then not one long chain of
	// dependent instructions (0.2 ns a value against 0.6). The bitwise or
	// of the values is at least their largest: when it is below the
	// limit (always, without a bound but the int32 one), so are they.
	var o0, o1, o2, o3 uint32
	x := dst
	for ; len(x) >= 4; x = x[4:] {
		o0, o1, o2, o3 = o0|uint32(x[0]), o1|uint32(x[1]), o2|uint32(x[2]), o3|uint32(x[3])
	}
	for _, v := range x {
		o0 |= uint32(v)
	}
	if int64(o0|o1|o2|o3) < limit {
		return true
	}
	var m0, m1, m2, m3 uint32
	for x = dst; len(x) >= 4; x = x[4:] {
		m0, m1, m2, m3 = max(m0, uint32(x[0])), max(m1, uint32(x[1])), max(m2, uint32(x[2])), max(m3, uint32(x[3]))
	}
	for _, v := range x {
		m0 = max(m0, uint32(v))
	}
	return int64(max(m0, m1, m2, m3)) < limit
}

func indexFloats[T float32 | float64](s *scan, arr arrow.Array, vals []T, bits, lo, hi int, dst []int32, k, first int) error {
	if len(vals) < hi {
		return s.shortColumn(k)
	}
	nulls := arr.NullN() > 0
	for i := lo; i < hi; i++ {
		if nulls && arr.IsNull(i) {
			return s.bad(first+i-lo, k, "", reasonNull)
		}
		v := float64(vals[i])
		var x int64
		switch {
		case v != math.Trunc(v) || math.IsNaN(v) || math.IsInf(v, 0):
			return s.bad(first+i-lo, k, strconv.FormatFloat(v, 'g', -1, bits), reasonNotInt)
		case v < 0:
			x = -1
		case v > math.MaxInt32:
			x = math.MaxInt32 + 1
		default:
			x = int64(v)
		}
		if x < 0 || x >= s.limit[k] {
			return s.bad(first+i-lo, k, strconv.FormatFloat(v, 'g', -1, bits), s.indexReason(k, x))
		}
		dst[i-lo] = int32(x)
	}
	return nil
}

// countColumn converts rows [lo, hi) of the count column into dst.
func (s *scan) countColumn(arr arrow.Array, lo, hi int, dst []float64, first int) error {
	switch a := arr.(type) {
	case *array.Int8:
		return counts(s, a, a.Int8Values(), 0, lo, hi, dst, first)
	case *array.Int16:
		return counts(s, a, a.Int16Values(), 0, lo, hi, dst, first)
	case *array.Int32:
		return counts(s, a, a.Int32Values(), 0, lo, hi, dst, first)
	case *array.Int64:
		return counts(s, a, a.Int64Values(), 0, lo, hi, dst, first)
	case *array.Uint8:
		return counts(s, a, a.Uint8Values(), 0, lo, hi, dst, first)
	case *array.Uint16:
		return counts(s, a, a.Uint16Values(), 0, lo, hi, dst, first)
	case *array.Uint32:
		return counts(s, a, a.Uint32Values(), 0, lo, hi, dst, first)
	case *array.Uint64:
		return counts(s, a, a.Uint64Values(), 0, lo, hi, dst, first)
	case *array.Float32:
		return counts(s, a, a.Float32Values(), 32, lo, hi, dst, first)
	case *array.Float64:
		return counts(s, a, a.Float64Values(), 64, lo, hi, dst, first)
	}
	return &InputError{File: s.file, Column: s.names[colCount],
		Reason: fmt.Sprintf("has type %s; want a numeric column", arr.DataType())}
}

// counts converts a numeric column; bits is 32 or 64 for floats (to print
// them as written), 0 for integers.
func counts[T integer | float32 | float64](s *scan, arr arrow.Array, vals []T, bits, lo, hi int, dst []float64, first int) error {
	if len(vals) < hi {
		return s.shortColumn(colCount)
	}
	return countValues(s, nullFunc(arr), vals, bits, lo, hi, dst, first)
}

// countValues is indexValues for the count column.
func countValues[T integer | float32 | float64](s *scan, null func(int) bool, vals []T, bits, lo, hi int, dst []float64, first int) error {
	if f64, ok := any(vals).([]float64); ok && null == nil && positive(dst, f64[lo:hi]) {
		return nil
	}
	for i := lo; i < hi; i++ {
		if null != nil && null(i) {
			return s.bad(first+i-lo, colCount, "", reasonNull)
		}
		c := float64(vals[i])
		if !(c > 0) || math.IsInf(c, 0) {
			v := fmt.Sprint(vals[i])
			if bits > 0 {
				v = strconv.FormatFloat(c, 'g', -1, bits)
			}
			return s.bad(first+i-lo, colCount, v, reasonBadCount)
		}
		dst[i-lo] = c
	}
	return nil
}

// positive copies src to dst when every count in it is positive and
// finite (the common case); otherwise it reports false and the caller
// finds the first bad count.
func positive(dst, src []float64) bool {
	dst = dst[:len(src)]
	copy(dst, src)
	for _, c := range dst {
		if !(c > 0 && c <= math.MaxFloat64) { // NaN too
			return false
		}
	}
	return true
}

func (s *scan) shortColumn(k int) error {
	return &InputError{File: s.file, Column: s.names[k], Reason: "column data is shorter than the record batch (corrupt)"}
}
