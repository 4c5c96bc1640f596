package arrowio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
)

var (
	wantS = []int32{0, 1, 2, 3, 1}
	wantA = []int32{0, 1, 0, 1, 0}
	wantN = []int32{1, 2, 3, 0, 1}
	wantC = []float64{1, 2, 0.5, 3, 1}
)

const sampleCSV = "state,action,next_state,count,episode\n0,0,1,1,0\n1,1,2,2,0\n2,0,3,0.5,0\n3,1,0,3,1\n1,0,1,1,1\n"

// sampleRecord is the sample data as Arrow, with mixed column types and
// extra columns that the reader ignores.
func sampleRecord(mem memory.Allocator) arrow.Record {
	eb := array.NewStringBuilder(mem)
	defer eb.Release()
	eb.AppendValues([]string{"a", "b", "c", "d", "e"}, nil)
	return record(
		col{"note", eb.NewArray()},
		col{"state", i32(mem, wantS...)},
		col{"action", i32(mem, wantA...)},
		col{"next_state", i32(mem, wantN...)},
		col{"count", f64(mem, wantC...)},
	)
}

func checkSample(t *testing.T, got *collected) {
	t.Helper()
	if !reflect.DeepEqual(got.s, wantS) || !reflect.DeepEqual(got.a, wantA) ||
		!reflect.DeepEqual(got.n, wantN) || !reflect.DeepEqual(got.c, wantC) {
		t.Errorf("got s=%v a=%v n=%v c=%v", got.s, got.a, got.n, got.c)
	}
}

// sampleFiles returns the sample data in every format, by file name.
func sampleFiles(t *testing.T) map[string][]byte {
	rec := sampleRecord(memory.NewGoAllocator())
	defer rec.Release()
	return map[string][]byte{
		"t.csv":     []byte(sampleCSV),
		"t.arrow":   encodeRecords(t, FormatArrowFile, rec),
		"t.arrows":  encodeRecords(t, FormatArrowStream, rec),
		"t.parquet": encodeRecords(t, FormatParquet, rec),
	}
}

func TestScanFormats(t *testing.T) {
	for name, data := range sampleFiles(t) {
		t.Run(name, func(t *testing.T) {
			mem := checkedMem(t)
			// By extension, by magic bytes (no extension) and by name.
			for _, p := range []string{writeFile(t, name, data), writeFile(t, "noext", data)} {
				got, err := scanAll(context.Background(), p, ReadOptions{Alloc: mem})
				if err != nil {
					t.Fatal(err)
				}
				checkSample(t, got)
			}
			got := &collected{}
			if err := ScanTransitionsReader(context.Background(), bytes.NewReader(data), name, "", ReadOptions{Alloc: mem}, got.add); err != nil {
				t.Fatal(err)
			}
			checkSample(t, got)
			// A reader without Len and without a name: detected by magic.
			got = &collected{}
			if err := ScanTransitionsReader(context.Background(), struct{ *bytes.Reader }{bytes.NewReader(data)}, "payload", "", ReadOptions{Alloc: mem}, got.add); err != nil {
				t.Fatal(err)
			}
			checkSample(t, got)
		})
	}
}

func TestScanBatchRows(t *testing.T) {
	mem := memory.NewGoAllocator()
	// Two record batches of 5 rows, read in batches of 2: row numbers run on.
	r1, r2 := sampleRecord(mem), sampleRecord(mem)
	defer r1.Release()
	defer r2.Release()
	for _, format := range []string{FormatArrowStream, FormatParquet} {
		p := writeFile(t, "t."+format, encodeRecords(t, format, r1, r2))
		got, err := scanAll(context.Background(), p, ReadOptions{BatchRows: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.s) != 10 || !reflect.DeepEqual(got.s[5:], wantS) {
			t.Errorf("%s: states %v", format, got.s)
		}
		for k, f := range got.first[1:] {
			if f <= got.first[k] || f > got.first[k]+2 {
				t.Errorf("%s: first rows %v", format, got.first)
			}
		}
	}
	p := writeFile(t, "t.csv", []byte(sampleCSV))
	got, err := scanAll(context.Background(), p, ReadOptions{BatchRows: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.first, []int{1, 3, 5}) {
		t.Errorf("csv first rows %v", got.first)
	}
	checkSample(t, got)
}

func TestScanColumnTypes(t *testing.T) {
	mem := checkedMem(t)
	build := func(b array.Builder, vals ...float64) arrow.Array {
		defer b.Release()
		for _, v := range vals {
			switch b := b.(type) {
			case *array.Int8Builder:
				b.Append(int8(v))
			case *array.Uint16Builder:
				b.Append(uint16(v))
			case *array.Int64Builder:
				b.Append(int64(v))
			case *array.Uint64Builder:
				b.Append(uint64(v))
			case *array.Float32Builder:
				b.Append(float32(v))
			case *array.Float64Builder:
				b.Append(v)
			}
		}
		return b.NewArray()
	}
	rec := record(
		col{"s", build(array.NewInt8Builder(mem), 0, 1, 2, 3, 1)},
		col{"a", build(array.NewUint16Builder(mem), 0, 1, 0, 1, 0)},
		col{"n", build(array.NewFloat32Builder(mem), 1, 2, 3, 0, 1)},
		col{"w", build(array.NewUint64Builder(mem), 1, 2, 7, 3, 1)},
	)
	defer rec.Release()
	for _, format := range []string{FormatArrowFile, FormatParquet} {
		p := writeFile(t, "t", encodeRecords(t, format, rec))
		got, err := scanAll(context.Background(), p, ReadOptions{Format: format, StateCol: "s", ActionCol: "a", NextCol: "n", CountCol: "w", Alloc: mem})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.s, wantS) || !reflect.DeepEqual(got.n, wantN) || !reflect.DeepEqual(got.c, []float64{1, 2, 7, 3, 1}) {
			t.Errorf("%s: got %+v", format, got)
		}
	}
}

func TestScanNoCountColumn(t *testing.T) {
	p := writeFile(t, "t.csv", []byte("next_state,state,action\n1,0,0\n2,1,1\n"))
	got, err := scanAll(context.Background(), p, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.c, []float64{1, 1}) || !reflect.DeepEqual(got.n, []int32{1, 2}) {
		t.Errorf("got %+v", got)
	}
	// Floats that hold integers, spaces and a byte order mark are fine.
	p = writeFile(t, "t.csv", []byte("\uFEFFstate, action ,next_state\n 3.0 ,1e0,2\n"))
	got, err = scanAll(context.Background(), p, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.s, []int32{3}) || !reflect.DeepEqual(got.a, []int32{1}) {
		t.Errorf("got %+v", got)
	}
}

// TestScanNoCount reads every format with ReadOptions.NoCount: the same
// indices, every batch's Count nil; Arrow and Parquet do not look at the
// count column at all (a bad or non-numeric one reads fine).
func TestScanNoCount(t *testing.T) {
	files := sampleFiles(t)
	mem := memory.NewGoAllocator()
	sb := array.NewStringBuilder(mem)
	sb.AppendValues([]string{"x", "y"}, nil)
	bad := []arrow.Record{
		record(col{"state", i32(mem, 0, 1)}, col{"action", i32(mem, 0, 0)}, col{"next_state", i32(mem, 1, 1)}, col{"count", f64(mem, 1, math.NaN())}),
		record(col{"state", i32(mem, 0, 1)}, col{"action", i32(mem, 0, 0)}, col{"next_state", i32(mem, 1, 1)}, col{"count", sb.NewArray()}),
	}
	sb.Release()
	for k, r := range bad {
		defer r.Release()
		for _, format := range []string{FormatArrowFile, FormatArrowStream, FormatParquet} {
			files[fmt.Sprintf("bad%d.%s", k, format)] = encodeRecords(t, format, r)
		}
	}
	for name, data := range files {
		t.Run(name, func(t *testing.T) {
			got := &collected{}
			err := ScanTransitions(context.Background(), writeFile(t, name, data), ReadOptions{NoCount: true, Alloc: checkedMem(t)},
				func(b *TransitionBatch) error {
					if b.Count != nil {
						t.Errorf("Count = %v, want nil", b.Count)
					}
					return got.add(b)
				})
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(name, "bad") {
				if !reflect.DeepEqual(got.s, []int32{0, 1}) || !reflect.DeepEqual(got.n, []int32{1, 1}) {
					t.Errorf("got s=%v n=%v", got.s, got.n)
				}
				return
			}
			if !reflect.DeepEqual(got.s, wantS) || !reflect.DeepEqual(got.a, wantA) || !reflect.DeepEqual(got.n, wantN) {
				t.Errorf("got s=%v a=%v n=%v", got.s, got.a, got.n)
			}
		})
	}
}

// wantInputError checks that err is one *InputError with the given row and
// column whose message contains each of parts.
func wantInputError(t *testing.T, err error, row int, column string, parts ...string) {
	t.Helper()
	var ie *InputError
	if !errors.As(err, &ie) {
		t.Fatalf("got %v (%T), want an *InputError", err, err)
	}
	if ie.Row != row || ie.Column != column {
		t.Errorf("got row %d column %q, want row %d column %q: %v", ie.Row, ie.Column, row, column, err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "arrowio: ") {
		t.Errorf("message %q lacks the arrowio: prefix", msg)
	}
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Errorf("message %q does not contain %q", msg, p)
		}
	}
}

func scanCSV(t *testing.T, text string, opts ReadOptions) error {
	t.Helper()
	p := writeFile(t, "data.csv", []byte(text))
	_, err := scanAll(context.Background(), p, opts)
	return err
}

func TestScanMissingFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nope.csv")
	_, err := scanAll(context.Background(), p, ReadOptions{})
	wantInputError(t, err, 0, "", "nope.csv", "cannot open")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%v is not fs.ErrNotExist", err)
	}
}

func TestScanMissingColumn(t *testing.T) {
	err := scanCSV(t, "s,action,next_state\n0,0,1\n", ReadOptions{})
	wantInputError(t, err, 0, "state", `column "state": no such column`, `"s", "action", "next_state"`)

	// A count column that was asked for must exist.
	err = scanCSV(t, "state,action,next_state\n0,0,1\n", ReadOptions{CountCol: "weight"})
	wantInputError(t, err, 0, "weight", "no such column")

	// The same for Arrow.
	mem := memory.NewGoAllocator()
	rec := record(col{"state", i32(mem, 0)}, col{"act", i32(mem, 0)}, col{"next_state", i32(mem, 1)})
	defer rec.Release()
	for _, format := range []string{FormatArrowFile, FormatParquet} {
		p := writeFile(t, "t."+format, encodeRecords(t, format, rec))
		_, err = scanAll(context.Background(), p, ReadOptions{})
		wantInputError(t, err, 0, "action", "no such column", `"state", "act", "next_state"`)
	}
}

func TestScanBadIndex(t *testing.T) {
	for _, tc := range []struct {
		name, text     string
		opts           ReadOptions
		row            int
		column, detail string
	}{
		{"fraction", "state,action,next_state\n0,0,1\n1.5,0,1\n", ReadOptions{}, 2, "state", `value "1.5" is not a non-negative integer`},
		{"word", "state,action,next_state\n0,x,1\n", ReadOptions{}, 1, "action", `value "x" is not a non-negative integer`},
		{"negative", "state,action,next_state\n0,0,-3\n", ReadOptions{}, 1, "next_state", `value "-3" is negative`},
		{"state range", "state,action,next_state\n0,0,1\n0,0,10\n", ReadOptions{States: 10}, 2, "next_state", `value "10" is out of range: must be < 10 (the number of states)`},
		{"action range", "state,action,next_state\n0,2,1\n", ReadOptions{Actions: 2}, 1, "action", `must be < 2 (the number of actions)`},
		{"int32", "state,action,next_state\n3000000000,0,1\n", ReadOptions{}, 1, "state", "too large"},
		{"empty", "state,action,next_state\n0,,1\n", ReadOptions{}, 1, "action", "value is empty"},
		{"nan", "state,action,next_state\nNaN,0,1\n", ReadOptions{}, 1, "state", "not a non-negative integer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := scanCSV(t, tc.text, tc.opts)
			wantInputError(t, err, tc.row, tc.column, "data.csv: ", tc.detail)
		})
	}
	err := scanCSV(t, "state,action,next_state\n0,0,1\n1.5,0,1\n", ReadOptions{})
	if got, want := err.Error(), `arrowio: `; !strings.HasPrefix(got, want) || !strings.HasSuffix(got, `data.csv: row 2, column "state": value "1.5" is not a non-negative integer`) {
		t.Errorf("message %q", got)
	}
}

func TestScanBadIndexArrow(t *testing.T) {
	mem := memory.NewGoAllocator()
	for _, tc := range []struct {
		name   string
		state  arrow.Array
		opts   ReadOptions
		row    int
		detail string
	}{
		{"fraction", f64(mem, 0, 2.5), ReadOptions{}, 2, `value "2.5" is not a non-negative integer`},
		{"infinite", f64(mem, math.Inf(1), 0), ReadOptions{}, 1, `value "+Inf" is not a non-negative integer`},
		{"negative", i32(mem, 0, -1), ReadOptions{}, 2, `value "-1" is negative`},
		{"range", i32(mem, 0, 7), ReadOptions{States: 7}, 2, `value "7" is out of range: must be < 7`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := record(col{"state", tc.state}, col{"action", i32(mem, 0, 0)}, col{"next_state", i32(mem, 1, 1)})
			defer rec.Release()
			for _, format := range []string{FormatArrowFile, FormatArrowStream, FormatParquet} {
				p := writeFile(t, "t."+format, encodeRecords(t, format, rec))
				_, err := scanAll(context.Background(), p, tc.opts)
				wantInputError(t, err, tc.row, "state", "t."+format, tc.detail)
			}
		})
	}
}

func TestScanBadCount(t *testing.T) {
	for _, tc := range []struct{ name, value, detail string }{
		{"nan", "NaN", `value "NaN" is not a finite positive number`},
		{"inf", "+Inf", `value "+Inf" is not a finite positive number`},
		{"negative", "-2", `value "-2" is not a finite positive number`},
		{"zero", "0", `value "0" is not a finite positive number`},
		{"word", "many", `value "many" is not a number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := scanCSV(t, "state,action,next_state,count\n0,0,1,1\n0,0,1,"+tc.value+"\n", ReadOptions{})
			wantInputError(t, err, 2, "count", tc.detail)
		})
	}
	mem := memory.NewGoAllocator()
	for _, c := range []float64{math.NaN(), math.Inf(-1), -1, 0} {
		rec := record(col{"state", i32(mem, 0, 1)}, col{"action", i32(mem, 0, 0)}, col{"next_state", i32(mem, 1, 1)}, col{"count", f64(mem, 1, c)})
		for _, format := range []string{FormatArrowStream, FormatParquet} {
			p := writeFile(t, "t."+format, encodeRecords(t, format, rec))
			_, err := scanAll(context.Background(), p, ReadOptions{})
			wantInputError(t, err, 2, "count", "is not a finite positive number")
		}
		rec.Release()
	}
}

func TestScanNulls(t *testing.T) {
	mem := memory.NewGoAllocator()
	b := array.NewInt32Builder(mem)
	b.AppendValues([]int32{0, 0, 1}, []bool{true, true, false})
	next := b.NewArray()
	b.Release()
	rec := record(col{"state", i32(mem, 0, 1, 2)}, col{"action", i32(mem, 0, 0, 0)}, col{"next_state", next})
	defer rec.Release()
	for _, format := range []string{FormatArrowFile, FormatArrowStream, FormatParquet} {
		p := writeFile(t, "t."+format, encodeRecords(t, format, rec))
		_, err := scanAll(context.Background(), p, ReadOptions{})
		wantInputError(t, err, 3, "next_state", "value is null")
	}
}

func TestScanWrongType(t *testing.T) {
	mem := memory.NewGoAllocator()
	sb := array.NewStringBuilder(mem)
	sb.AppendValues([]string{"x"}, nil)
	rec := record(col{"state", sb.NewArray()}, col{"action", i32(mem, 0)}, col{"next_state", i32(mem, 1)})
	sb.Release()
	defer rec.Release()
	for _, format := range []string{FormatArrowFile, FormatParquet} {
		p := writeFile(t, "t."+format, encodeRecords(t, format, rec))
		_, err := scanAll(context.Background(), p, ReadOptions{})
		wantInputError(t, err, 0, "state", "has type utf8: it holds string ids, not integer indices")
	}
	bb := array.NewBooleanBuilder(mem)
	bb.AppendValues([]bool{true}, nil)
	rec2 := record(col{"state", bb.NewArray()}, col{"action", i32(mem, 0)}, col{"next_state", i32(mem, 1)})
	bb.Release()
	defer rec2.Release()
	for _, format := range []string{FormatArrowFile, FormatParquet} {
		p := writeFile(t, "b."+format, encodeRecords(t, format, rec2))
		_, err := scanAll(context.Background(), p, ReadOptions{})
		wantInputError(t, err, 0, "state", "has type bool; want a numeric column (integer indices) or a string column (ids)")
	}
}

func TestScanNoRows(t *testing.T) {
	err := scanCSV(t, "state,action,next_state\n", ReadOptions{})
	wantInputError(t, err, 0, "", "data.csv: no data rows")
	err = scanCSV(t, "", ReadOptions{})
	wantInputError(t, err, 0, "", "empty file")

	mem := memory.NewGoAllocator()
	rec := record(col{"state", i32(mem)}, col{"action", i32(mem)}, col{"next_state", i32(mem)})
	defer rec.Release()
	for _, format := range []string{FormatArrowFile, FormatArrowStream, FormatParquet} {
		p := writeFile(t, "t."+format, encodeRecords(t, format, rec))
		_, err := scanAll(context.Background(), p, ReadOptions{})
		wantInputError(t, err, 0, "", "no data rows")
	}
}

func TestScanRaggedCSV(t *testing.T) {
	err := scanCSV(t, "state,action,next_state\n0,0,1\n1,1\n", ReadOptions{})
	wantInputError(t, err, 2, "", "row 2: has 2 fields but the header has 3")
	// Cut inside a quoted field.
	err = scanCSV(t, "state,action,next_state\n0,0,1\n1,1,\"2", ReadOptions{})
	wantInputError(t, err, 2, "", "malformed CSV")
	// Cut in the middle of the last line: a short row.
	full := sampleCSV
	err = scanCSV(t, full[:len(full)-5], ReadOptions{})
	wantInputError(t, err, 5, "", "has 3 fields but the header has 5")
}

// truncations returns prefixes of data cut at every position in a spread
// of sizes, the whole data excluded.
func truncations(data []byte) [][]byte {
	var out [][]byte
	for n := 0; n < len(data); n += 1 + len(data)/40 {
		out = append(out, data[:n])
	}
	return append(out, data[:len(data)-1])
}

func TestScanTruncatedArrow(t *testing.T) {
	mem := memory.NewGoAllocator()
	rec := sampleRecord(mem)
	defer rec.Release()
	for _, format := range []string{FormatArrowFile, FormatArrowStream, FormatParquet} {
		data := encodeRecords(t, format, rec, rec)
		for _, cut := range truncations(data) {
			err := ScanTransitionsReader(context.Background(), bytes.NewReader(cut), "t", format, ReadOptions{}, func(*TransitionBatch) error { return nil })
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Errorf("%s cut at %d of %d: got %v, want an *InputError", format, len(cut), len(data), err)
			}
		}
		// The same through a file (size from stat, reads through the OS).
		p := writeFile(t, "t."+format, data[:len(data)*2/3])
		_, err := scanAll(context.Background(), p, ReadOptions{})
		wantInputError(t, err, 0, "", "t."+format)
	}
}

func TestScanCorrupt(t *testing.T) {
	mem := memory.NewGoAllocator()
	rec := sampleRecord(mem)
	defer rec.Release()
	for _, format := range []string{FormatArrowFile, FormatArrowStream, FormatParquet} {
		data := encodeRecords(t, format, rec)
		bad := 0
		// Flip bytes all over: never a panic; an error, or rows that pass
		// validation.
		for i := 0; i < len(data); i += 1 + len(data)/400 {
			c := bytes.Clone(data)
			c[i] ^= 0xA5
			err := ScanTransitionsReader(context.Background(), bytes.NewReader(c), "t", format, ReadOptions{}, func(*TransitionBatch) error { return nil })
			if err != nil {
				var ie *InputError
				if !errors.As(err, &ie) {
					t.Errorf("%s: flip at %d: got %v (%T), want an *InputError", format, i, err, err)
				}
				bad++
			}
		}
		if bad == 0 {
			t.Errorf("%s: no corruption detected", format)
		}
	}
}

func TestScanCallbackAndContext(t *testing.T) {
	p := writeFile(t, "t.csv", []byte(sampleCSV))
	stop := errors.New("stop")
	err := ScanTransitions(context.Background(), p, ReadOptions{}, func(*TransitionBatch) error { return stop })
	if err != stop {
		t.Errorf("got %v, want the callback's error unchanged", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = ScanTransitions(ctx, p, ReadOptions{}, func(*TransitionBatch) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	mem := memory.NewGoAllocator()
	rec := sampleRecord(mem)
	defer rec.Release()
	err = ScanTransitionsReader(context.Background(), bytes.NewReader(encodeRecords(t, FormatArrowStream, rec)), "x", "arrows", ReadOptions{},
		func(*TransitionBatch) error { return stop })
	if err != stop {
		t.Errorf("got %v, want the callback's error unchanged", err)
	}
}

func TestScanBadFormat(t *testing.T) {
	p := writeFile(t, "t.csv", []byte(sampleCSV))
	if _, err := scanAll(context.Background(), p, ReadOptions{Format: "xlsx"}); err == nil || !strings.Contains(err.Error(), `unknown format "xlsx"`) {
		t.Errorf("got %v", err)
	}
	// A CSV file read as Arrow is corrupt Arrow, not a panic.
	_, err := scanAll(context.Background(), p, ReadOptions{Format: "arrow"})
	wantInputError(t, err, 0, "", "not an Arrow IPC file")
	if _, err := scanAll(context.Background(), t.TempDir(), ReadOptions{}); err == nil {
		t.Error("a directory scanned without error")
	}
}

func TestInputErrorUnwrap(t *testing.T) {
	inner := os.ErrPermission
	err := error(&InputError{File: "f", Reason: "cannot open", Err: inner})
	if !errors.Is(err, os.ErrPermission) {
		t.Error("Unwrap lost the cause")
	}
	if got := err.Error(); got != "arrowio: f: cannot open: permission denied" {
		t.Errorf("got %q", got)
	}
}

// TestScanSwap: a callback that takes every batch with Swap (handing the
// scan slices of its own, short and holding stale rows) keeps exactly the
// rows a copying callback sees, in every format, with and without counts.
func TestScanSwap(t *testing.T) {
	mem := memory.NewGoAllocator()
	r1, r2 := sampleRecord(mem), sampleRecord(mem)
	defer r1.Release()
	defer r2.Release()
	files := map[string][]byte{"t.csv": []byte(sampleCSV + strings.SplitN(sampleCSV, "\n", 2)[1])}
	for _, format := range []string{FormatArrowFile, FormatArrowStream, FormatParquet} {
		files["t."+format] = encodeRecords(t, format, r1, r2)
	}
	for name, data := range files {
		p := writeFile(t, name, data)
		for _, noCount := range []bool{false, true} {
			opts := ReadOptions{BatchRows: 2, NoCount: noCount}
			want, err := scanAll(context.Background(), p, opts)
			if err != nil {
				t.Fatal(err)
			}
			var kept []*TransitionBatch
			err = ScanTransitions(context.Background(), p, opts, func(b *TransitionBatch) error {
				stale := &TransitionBatch{State: []int32{-7}, Action: []int32{-7}, Next: []int32{-7}, Count: []float64{-7}, FirstRow: -7}
				b.Swap(stale)
				kept = append(kept, stale)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			got := &collected{}
			for _, b := range kept {
				if noCount && b.Count != nil {
					t.Errorf("%s: Count = %v, want nil", name, b.Count)
				}
				got.add(b)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s, NoCount %v: kept %+v, want %+v", name, noCount, got, want)
			}
		}
	}
}

// TestInRange checks the fast check of index columns against a bound,
// where the bitwise or of the values passes it and where only their
// largest does, and a copy of the values either way.
func TestInRange(t *testing.T) {
	for _, tc := range []struct {
		vals  []int32
		limit int64
		want  bool
	}{
		{[]int32{0, 1, 2, 3, 4, 5, 6}, 7, true},
		{[]int32{48, 17, 59, 3, 3}, 60, true}, // or 63 >= 60, largest 59
		{[]int32{48, 17, 60, 3, 3}, 60, false},
		{[]int32{1, 2, 3, 4, 5, 6, 7, -1}, 1 << 31, false},
		{[]int32{1<<31 - 1, 0}, 1 << 31, true},
		{nil, 1, true},
	} {
		dst := make([]int32, len(tc.vals)+3)
		if got := inRange(dst, tc.vals, tc.limit); got != tc.want || !reflect.DeepEqual(dst[:len(tc.vals)], append([]int32{}, tc.vals...)) {
			t.Errorf("inRange(%v, %d) = %v (copied %v), want %v", tc.vals, tc.limit, got, dst[:len(tc.vals)], tc.want)
		}
	}
}
