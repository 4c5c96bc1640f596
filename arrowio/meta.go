package arrowio

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"

	"github.com/emsf/emsf/shard"
)

// Schema metadata keys shared by the shard, partial and model formats.
const (
	keyVersion = "emsf.format_version"
	keyKind    = "emsf.kind"
	// FormatVersion is the value of emsf.format_version this package
	// writes and the only one it reads.
	FormatVersion = "1"
)

// fmtFloat writes x so that parseFloat gives back the same float64 (the
// shortest decimal that round-trips; "NaN", "+Inf", "-Inf").
func fmtFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// metaWriter collects schema metadata in order.
type metaWriter struct{ keys, vals []string }

func (w *metaWriter) set(k, v string)     { w.keys = append(w.keys, k); w.vals = append(w.vals, v) }
func (w *metaWriter) int(k string, v int) { w.set(k, strconv.Itoa(v)) }
func (w *metaWriter) metadata() *arrow.Metadata {
	md := arrow.NewMetadata(w.keys, w.vals)
	return &md
}

// metaReader reads schema metadata, keeping the first error.
type metaReader struct {
	md  arrow.Metadata
	err error
}

func (r *metaReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *metaReader) str(k string) string {
	i := r.md.FindKey(k)
	if i < 0 {
		r.fail(fmt.Errorf("schema metadata has no %s", k))
		return ""
	}
	return r.md.Values()[i]
}

func (r *metaReader) int(k string) int {
	s := r.str(k)
	if r.err != nil {
		return 0
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		r.fail(fmt.Errorf("schema metadata %s = %q is not an integer", k, s))
	}
	return v
}

func (r *metaReader) uint64(k string) uint64 {
	s := r.str(k)
	if r.err != nil {
		return 0
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		r.fail(fmt.Errorf("schema metadata %s = %q is not an unsigned integer", k, s))
	}
	return v
}

func (r *metaReader) float(k string) float64 {
	s := r.str(k)
	if r.err != nil {
		return 0
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		r.fail(fmt.Errorf("schema metadata %s = %q is not a number", k, s))
	}
	return v
}

// header checks the format version and kind.
func (r *metaReader) header(kind string) { r.headerOf(kind, FormatVersion) }

// vocab records the vocabularies vs, named names (emsf.vocab and each
// one's checksum); none: nothing.
func (w *metaWriter) vocab(names []string, vs []*shard.Vocab) {
	if len(vs) == 0 {
		return
	}
	w.set(keyVocab, strings.Join(names, ","))
	for k, v := range vs {
		sum := v.Checksum()
		w.set(keyVocabSum+names[k], hex.EncodeToString(sum[:]))
	}
}

// headerOf checks the kind and that the format version is one of
// versions, and returns it.
func (r *metaReader) headerOf(kind string, versions ...string) string {
	v := r.str(keyVersion)
	if r.err == nil && !slices.Contains(versions, v) {
		r.fail(fmt.Errorf("%s is %q; this build reads version %s", keyVersion, v, strings.Join(versions, " or ")))
	}
	if k := r.str(keyKind); r.err == nil && k != kind {
		r.fail(fmt.Errorf("%s is %q, want %q", keyKind, k, kind))
	}
	return v
}

// checkFields checks that a schema has exactly the given columns.
func checkFields(sc *arrow.Schema, want ...arrow.Field) error {
	if sc.NumFields() != len(want) {
		return fmt.Errorf("schema has %d columns, want %d (%s)", sc.NumFields(), len(want), fieldList(want))
	}
	for i, w := range want {
		f := sc.Field(i)
		if f.Name != w.Name || !typeMatches(f.Type, w.Type) {
			return fmt.Errorf("column %d is %s %s, want %s %s", i, f.Name, f.Type, w.Name, w.Type)
		}
	}
	return nil
}

// typeMatches is arrow.TypeEqual, except that a fixed-size list matches
// any list of the same element type whatever the nullability of its
// elements (writers differ on it, and a Parquet file read without its
// stored Arrow schema gives a variable-size list; listRows checks the
// lengths).
func typeMatches(got, want arrow.DataType) bool {
	if w, ok := want.(*arrow.FixedSizeListType); ok {
		switch g := got.(type) {
		case *arrow.FixedSizeListType:
			return g.Len() == w.Len() && arrow.TypeEqual(g.Elem(), w.Elem())
		case *arrow.ListType:
			return arrow.TypeEqual(g.Elem(), w.Elem())
		case *arrow.LargeListType:
			return arrow.TypeEqual(g.Elem(), w.Elem())
		}
		return false
	}
	return arrow.TypeEqual(got, want)
}

func fieldList(fs []arrow.Field) string {
	var b bytes.Buffer
	for i, f := range fs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", f.Name, f.Type)
	}
	return b.String()
}

// posWriter is the io.WriteSeeker the IPC file writer needs: it only asks
// for its position.
type posWriter struct {
	w io.Writer
	n int64
}

func (p *posWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.n += int64(n)
	return n, err
}

func (p *posWriter) Seek(off int64, whence int) (int64, error) {
	if off == 0 && whence == io.SeekCurrent {
		return p.n, nil
	}
	return 0, errors.New("arrowio: posWriter only reports its position")
}

// writeIPCFile writes an Arrow IPC file of the records emit produces.
func writeIPCFile(w io.Writer, sc *arrow.Schema, mem memory.Allocator, emit func(write func(arrow.Record) error) error) error {
	fw, err := ipc.NewFileWriter(&posWriter{w: w}, ipc.WithSchema(sc), ipc.WithAllocator(mem))
	if err != nil {
		return err
	}
	if err := emit(fw.Write); err != nil {
		fw.Close()
		return err
	}
	return fw.Close()
}

// writeIPCStream writes an Arrow IPC stream of the records emit produces.
func writeIPCStream(w io.Writer, sc *arrow.Schema, mem memory.Allocator, emit func(write func(arrow.Record) error) error) error {
	sw := ipc.NewWriter(w, ipc.WithSchema(sc), ipc.WithAllocator(mem))
	if err := emit(sw.Write); err != nil {
		sw.Close()
		return err
	}
	return sw.Close()
}

// flushRecord writes the record rb has built (which resets rb).
func flushRecord(rb *array.RecordBuilder, write func(arrow.Record) error) error {
	rec := rb.NewRecord()
	defer rec.Release()
	return write(rec)
}

// noNulls returns an error if any column of rec has nulls (including the
// values of fixed-size lists).
func noNulls(rec arrow.Record) error { return noNullsIn(rec, int(rec.NumCols())) }

// noNullsIn is noNulls for the first k columns of rec (a record whose
// later columns may hold nulls: the id column of a model or counts file
// with a vocabulary).
func noNullsIn(rec arrow.Record, k int) error {
	for i, col := range rec.Columns()[:k] {
		if col.NullN() > 0 {
			return fmt.Errorf("column %s has %d nulls", rec.ColumnName(i), col.NullN())
		}
		if l, ok := col.(interface{ ListValues() arrow.Array }); ok && l.ListValues().NullN() > 0 {
			return fmt.Errorf("column %s has null list values", rec.ColumnName(i))
		}
	}
	return nil
}

// listRows returns the float64 values of a list column whose rows all
// hold m values (row i is out[i*m:(i+1)*m]), checking that they are all
// there and contiguous.
func listRows(col arrow.Array, m int) ([]float64, error) {
	l, ok := col.(interface {
		ListValues() arrow.Array
		ValueOffsets(int) (int64, int64)
	})
	if !ok {
		return nil, fmt.Errorf("column of type %s is not a list", col.DataType())
	}
	f, ok := l.ListValues().(interface{ Float64Values() []float64 })
	if !ok {
		return nil, fmt.Errorf("list values of type %s are not float64", l.ListValues().DataType())
	}
	vals := f.Float64Values()
	n := col.Len()
	if n == 0 {
		return nil, nil
	}
	if int64(n)*int64(m) > int64(len(vals)) {
		return nil, fmt.Errorf("list column holds %d values, %d rows of %d need more (corrupt)", len(vals), n, m)
	}
	lo, _ := l.ValueOffsets(0)
	next := lo
	for i := range n {
		start, end := l.ValueOffsets(i)
		if start != next || end-start != int64(m) {
			return nil, fmt.Errorf("list row %d holds values [%d, %d), want %d values from %d", i, start, end, m, next)
		}
		next = end
	}
	if lo < 0 || next > int64(len(vals)) {
		return nil, fmt.Errorf("list column holds %d values, its rows need [%d, %d) (corrupt)", len(vals), lo, next)
	}
	return vals[lo:next], nil
}

var errNaNBits = errors.New("bad float bits")

// fmtBits and parseBits write a float64 as its 16 hex digit IEEE 754 bits,
// which round-trips every value bitwise, NaN payloads included.
func fmtBits(x float64) string { return fmt.Sprintf("%016x", math.Float64bits(x)) }

func parseBits(s string) (float64, error) {
	if len(s) != 16 {
		return 0, errNaNBits
	}
	u, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, errNaNBits
	}
	return math.Float64frombits(u), nil
}
