package arrowio

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"
)

// flatRecords returns record batches of a flat schema (every column a
// fixed-width primitive) of the given sizes: the index columns as int32,
// uint16 and int64, a float64 count, and unused int64, date32 and bool
// columns with nulls. mutate, when not nil, changes row r of batch k.
func flatRecords(mem memory.Allocator, sizes []int, mutate func(k, r int, s, a, n *int64, c *float64, null *bool)) []arrow.Record {
	var out []arrow.Record
	for k, size := range sizes {
		sb, ab, nb := array.NewInt32Builder(mem), array.NewUint16Builder(mem), array.NewInt64Builder(mem)
		cb, eb := array.NewFloat64Builder(mem), array.NewInt64Builder(mem)
		db, bb := array.NewDate32Builder(mem), array.NewBooleanBuilder(mem)
		for r := range size {
			s, a, n, c, null := int64((r*7+k)%50), int64(r%3), int64((r*13+k)%50), float64(1+r%4)/2, false
			if mutate != nil {
				mutate(k, r, &s, &a, &n, &c, &null)
			}
			sb.Append(int32(s))
			ab.Append(uint16(a))
			if null {
				nb.AppendNull()
			} else {
				nb.Append(n)
			}
			cb.Append(c)
			eb.Append(int64(r))
			if r%5 == 0 {
				db.AppendNull()
				bb.AppendNull()
			} else {
				db.Append(arrow.Date32(r))
				bb.Append(r%2 == 0)
			}
		}
		names := []string{"episode", "state", "action", "day", "next_state", "flag", "count"}
		builders := []array.Builder{eb, sb, ab, db, nb, bb, cb}
		fields := make([]arrow.Field, len(names))
		arrs := make([]arrow.Array, len(names))
		for i, b := range builders {
			arrs[i] = b.NewArray()
			fields[i] = arrow.Field{Name: names[i], Type: arrs[i].DataType(), Nullable: true}
			b.Release()
		}
		out = append(out, array.NewRecord(arrow.NewSchema(fields, nil), arrs, -1))
		for _, a := range arrs {
			a.Release()
		}
	}
	return out
}

// bothWays scans data with flatRecord or pqColumns and with the library
// alone and fails unless both give the same batches and the same error (for
// corrupt input, where the two word the cause differently: an error
// either way, after the same number of good rows).
func bothWays(t *testing.T, what, format string, data []byte, opts ReadOptions, corrupt bool) error {
	t.Helper()
	scan := func(library bool) (*collected, error) {
		o := opts
		o.libraryIPC, o.libraryParquet = library, library
		got := &collected{}
		err := ScanTransitionsReader(context.Background(), bytes.NewReader(data), "t", format, o, got.add)
		return got, err
	}
	flat, ferr := scan(false)
	lib, lerr := scan(true)
	same := fmt.Sprint(ferr) == fmt.Sprint(lerr)
	if corrupt && ferr != nil && lerr != nil {
		fs, _, _ := strings.Cut(ferr.Error(), "good rows")
		ls, _, _ := strings.Cut(lerr.Error(), "good rows")
		same = fs == ls
	}
	if !same {
		t.Errorf("%s: flatRecord: %v; the library: %v", what, ferr, lerr)
	}
	if ferr == nil && !reflect.DeepEqual(flat, lib) {
		t.Errorf("%s: flatRecord and the library read different rows", what)
	}
	return ferr
}

// TestFlatRecordMatchesLibrary checks that record batches decoded
// without copying (flatRecord, a reused body buffer) give the batches
// and errors of the Arrow library's reader, on good input, bad values,
// compressed batches (which go to the library) and corrupt bytes.
func TestFlatRecordMatchesLibrary(t *testing.T) {
	mem := checkedMem(t)
	sizes := []int{300, 7, 1000, 1, 64}
	encode := func(format string, recs []arrow.Record, opts ...ipc.Option) []byte {
		defer func() {
			for _, r := range recs {
				r.Release()
			}
		}()
		if len(opts) > 0 {
			var buf bytes.Buffer
			w := ipc.NewWriter(&buf, append(opts, ipc.WithSchema(recs[0].Schema()))...)
			for _, r := range recs {
				if err := w.Write(r); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			return buf.Bytes()
		}
		return encodeRecords(t, format, recs...)
	}
	for _, format := range []string{FormatArrowFile, FormatArrowStream} {
		good := encode(format, flatRecords(mem, sizes, nil))
		if err := bothWays(t, format+" good", format, good, ReadOptions{Alloc: mem, BatchRows: 100}, false); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		bad := map[string]func(k, r int, s, a, n *int64, c *float64, null *bool){
			"null next": func(k, r int, s, a, n *int64, c *float64, null *bool) { *null = *null || k == 2 && r == 500 },
			"negative": func(k, r int, s, a, n *int64, c *float64, null *bool) {
				if k == 4 && r == 3 {
					*s = -4
				}
			},
			"large": func(k, r int, s, a, n *int64, c *float64, null *bool) {
				if k == 2 && r == 999 {
					*n = 1 << 40
				}
			},
			"count": func(k, r int, s, a, n *int64, c *float64, null *bool) {
				if k == 1 && r == 6 {
					*c = 0
				}
			},
		}
		for name, mutate := range bad {
			data := encode(format, flatRecords(mem, sizes, mutate))
			if err := bothWays(t, format+" "+name, format, data, ReadOptions{Alloc: mem, States: 60}, false); err == nil {
				t.Errorf("%s %s: no error", format, name)
			}
		}
		// Corrupt bytes: an error after as many good rows, or the same
		// rows, either way. (The library leaks buffers when it fails in
		// the middle of a record batch: no checked allocator here.)
		for i := 0; i < len(good); i += 1 + len(good)/300 {
			c := bytes.Clone(good)
			c[i] ^= 0xA5
			bothWays(t, fmt.Sprintf("%s flip at %d", format, i), format, c, ReadOptions{}, true)
		}
	}
	// Compressed batches are the library's: same rows through both.
	for _, opt := range []ipc.Option{ipc.WithLZ4(), ipc.WithZstd()} {
		data := encode(FormatArrowStream, flatRecords(mem, sizes, nil), opt)
		if err := bothWays(t, "compressed", FormatArrowStream, data, ReadOptions{Alloc: mem}, false); err != nil {
			t.Fatal(err)
		}
	}
}
