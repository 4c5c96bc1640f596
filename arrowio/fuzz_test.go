package arrowio

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
)

// checkFuzzScan reads data and checks that the scan either fails with an
// arrowio error or delivers only valid rows.
func checkFuzzScan(t *testing.T, data []byte, name, format string) {
	checkFuzzScanWith(t, func(opts ReadOptions, fn func(*TransitionBatch) error) error {
		return ScanTransitionsReader(context.Background(), bytes.NewReader(data), name, format, opts, fn)
	})
}

// checkFuzzScanWith is checkFuzzScan of the scan that scan runs.
func checkFuzzScanWith(t *testing.T, scan func(ReadOptions, func(*TransitionBatch) error) error) {
	opts := ReadOptions{BatchRows: 3, States: 1000, Actions: 50}
	rows := 0
	err := scan(opts, func(b *TransitionBatch) error {
		n := b.Len()
		if len(b.Action) != n || len(b.Next) != n || len(b.Count) != n || n == 0 || n > opts.BatchRows {
			t.Fatalf("batch of inconsistent lengths %d %d %d %d", n, len(b.Action), len(b.Next), len(b.Count))
		}
		if b.FirstRow != rows+1 {
			t.Fatalf("batch starts at row %d after %d rows", b.FirstRow, rows)
		}
		for i := range n {
			if b.State[i] < 0 || b.State[i] >= 1000 || b.Next[i] < 0 || b.Next[i] >= 1000 || b.Action[i] < 0 || b.Action[i] >= 50 {
				t.Fatalf("row %d: index out of range", b.FirstRow+i)
			}
			if c := b.Count[i]; !(c > 0) || math.IsInf(c, 0) {
				t.Fatalf("row %d: count %v", b.FirstRow+i, c)
			}
		}
		rows += n
		return nil
	})
	if err != nil {
		var ie *InputError
		if !errors.As(err, &ie) || !strings.HasPrefix(err.Error(), "arrowio: ") {
			t.Fatalf("error %v (%T) is not an *InputError", err, err)
		}
		return
	}
	if rows == 0 {
		t.Fatal("no rows and no error")
	}
}

func FuzzScanCSV(f *testing.F) {
	for _, s := range []string{
		sampleCSV,
		"state,action,next_state\n0,0,1\n",
		"next_state,count,state,action\n1,2.5,0,0\n3,1e3,2,1\n",
		"state,action,next_state\n1.5,0,1\n",
		"state,action,next_state,count\n0,0,1,NaN\n",
		"state,action,next_state\n\"0\",\"1\",\"2\"\n3,4\n",
		"\uFEFFstate;action;next_state\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFuzzScan(t, data, "fuzz.csv", FormatCSV)
	})
}

func FuzzScanArrowStream(f *testing.F) {
	mem := memory.NewGoAllocator()
	rec := sampleRecord(mem)
	defer rec.Release()
	f.Add(encodeRecords(f, FormatArrowStream, rec, rec))
	nb := array.NewInt32Builder(mem)
	nb.AppendValues([]int32{0, 1}, []bool{true, false})
	withNull := record(col{"state", i32(mem, 0, 1)}, col{"action", i32(mem, 0, 0)}, col{"next_state", nb.NewArray()}, col{"count", f64(mem, 1, 2)})
	nb.Release()
	defer withNull.Release()
	f.Add(encodeRecords(f, FormatArrowStream, withNull))
	empty := record(col{"state", i32(mem)}, col{"action", i32(mem)}, col{"next_state", i32(mem)})
	defer empty.Release()
	f.Add(encodeRecords(f, FormatArrowStream, empty))
	f.Add([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFuzzScan(t, data, "fuzz.arrows", FormatArrowStream)
	})
}

// FuzzScanParquet checks that a Parquet scan fails with an arrowio error
// or delivers only valid rows, in bounded time (its first find: parquet's
// column chunk reader looped forever on definition levels cut short; see
// errOptionalPage; the seed testdata/fuzz/FuzzScanParquet/ae2b7ef6b55fb1e3
// is that file), and that pqColumns, the record reader (pqread.go) and
// the scan's old path through pqarrow's record reader all fail or give
// the same rows.
func FuzzScanParquet(f *testing.F) {
	mem := memory.NewGoAllocator()
	sizes := []int{30, 7, 100}
	f.Add(encodeParquet(f, pqTestRecords(mem, sizes, "float64", false, nil)))
	f.Add(encodeParquet(f, pqTestRecords(mem, sizes, "", false, nil), parquet.WithDictionaryDefault(false)))
	f.Add(encodeParquet(f, pqTestRecords(mem, sizes, "int64", false, func(k, r int, s, a, n *int64, c *float64, null *bool) {
		*null = k == 2 && r > 40
	}), parquet.WithDataPageSize(64), parquet.WithDictionaryPageSizeLimit(64)))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFuzzScan(t, data, "fuzz.parquet", FormatParquet)
		var got [2]*collected
		var errs [2]error
		for k, library := range []bool{false, true} {
			got[k] = &collected{}
			errs[k] = ScanTransitionsReader(context.Background(), bytes.NewReader(data), "fuzz.parquet", FormatParquet,
				ReadOptions{BatchRows: 3, libraryParquet: library}, got[k].add)
		}
		if (errs[0] == nil) != (errs[1] == nil) || errs[0] == nil && !reflect.DeepEqual(got[0], got[1]) {
			t.Fatalf("pqColumns: %v; record reader: %v (or different rows)", errs[0], errs[1])
		}
		want := &collected{}
		wantErr := scanPqarrow(data, ReadOptions{BatchRows: 3}, want.add)
		if (errs[1] == nil) != (wantErr == nil) || wantErr == nil && !reflect.DeepEqual(got[1], want) {
			t.Fatalf("record reader: %v; pqarrow: %v (or different rows)", errs[1], wantErr)
		}
	})
}

// FuzzScanStdin reads standard input that may be gzip-compressed data of
// any format (detected from its first bytes, decompressed, an IPC file or
// Parquet copied to a temporary file): the path of `--input -` and of
// compressed files.
func FuzzScanStdin(f *testing.F) {
	mem := memory.NewGoAllocator()
	rec := sampleRecord(mem)
	defer rec.Release()
	for _, data := range [][]byte{
		[]byte(sampleCSV),
		encodeRecords(f, FormatArrowStream, rec),
		encodeRecords(f, FormatArrowFile, rec),
		encodeRecords(f, FormatParquet, rec),
	} {
		gz := gzipBytes(f, data)
		f.Add(data)
		f.Add(gz)
		f.Add(gz[:len(gz)/2])
		f.Add(append(bytes.Clone(gz), 0x1f, 0x8b, 8))
	}
	f.Add([]byte{0x1f, 0x8b})
	f.Add([]byte("state;action;next_state\n0;0;1\n"))
	tmp := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFuzzScanWith(t, func(opts ReadOptions, fn func(*TransitionBatch) error) error {
			opts.Stdin, opts.TempDir = bytes.NewReader(data), tmp
			return ScanTransitions(context.Background(), StdinPath, opts, fn)
		})
		if left, _ := os.ReadDir(tmp); len(left) > 0 {
			t.Fatalf("temporary files left: %v", left)
		}
	})
}
