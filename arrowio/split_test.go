package arrowio

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"
)

// readSplits reads the splits of data (a file of format) cut at cuts and
// returns the rows in order, each split's batches renumbered to file
// rows, and the first error in split order (a *SplitRowError turned into
// the file's row), or whether some split said ErrReadWhole.
func readSplits(t *testing.T, data []byte, format string, cuts []int64, opts ReadOptions) (out *collected, err error, whole bool) {
	t.Helper()
	f := DataFile{Name: splitFileName(format), Size: int64(len(data)), Format: format}
	out = &collected{}
	cuts = append(append([]int64{0}, cuts...), int64(len(data)))
	rows := 0
	for k := 1; k < len(cuts); k++ {
		sp := Split{Ordinal: k - 1, Offset: cuts[k-1], Length: cuts[k] - cuts[k-1]}
		base := rows
		n := 0
		serr := ScanSplit(context.Background(), bytes.NewReader(data), f, sp, opts, func(b *TransitionBatch) error {
			if b.FirstRow != n+1 {
				t.Fatalf("split %d: batch at row %d after %d rows", k-1, b.FirstRow, n)
			}
			n += b.Len()
			return out.add(b)
		})
		rows += n
		var sre *SplitRowError
		switch {
		case serr == nil:
		case errors.Is(serr, ErrReadWhole):
			whole = true
		case errors.As(serr, &sre):
			if err == nil {
				e := *sre.InputError
				e.Row += base
				err = &e
			}
		default:
			t.Fatalf("split %d: %v", k-1, serr)
		}
	}
	return out, err, whole
}

// splitFileName is the name the tests' whole-file reads give a file of
// format, and so what readSplits names it: one name per test process
// (errors name the file, and are compared), apart from another
// process's (two runs of the package's tests at once removed each
// other's file).
func splitFileName(format string) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("emsf-split-test-%d.%s", os.Getpid(), format))
}

// wholeFile reads data as the file splitFileName(format), whole.
func wholeFile(t *testing.T, data []byte, format string) (*collected, error) {
	t.Helper()
	path := splitFileName(format)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	out := &collected{}
	err := ScanTransitions(context.Background(), path, ReadOptions{}, out.add)
	return out, err
}

func sameRows(t *testing.T, what string, got, want *collected) {
	t.Helper()
	if !slices.Equal(got.s, want.s) || !slices.Equal(got.a, want.a) || !slices.Equal(got.n, want.n) || !slices.Equal(got.c, want.c) {
		t.Fatalf("%s: %d rows, want %d (or different values)", what, len(got.s), len(want.s))
	}
}

// plainCSV returns a CSV file of rows: CRLF or LF line ends, blank
// lines, an optional last line end, a count column or none.
func plainCSV(rng *rand.Rand, rows int) string {
	var b strings.Builder
	eol := "\n"
	if rng.IntN(3) == 0 {
		eol = "\r\n"
	}
	count := rng.IntN(2) == 0
	b.WriteString("state,action,next_state")
	if count {
		b.WriteString(",count")
	}
	b.WriteString(eol)
	for r := range rows {
		if rng.IntN(8) == 0 {
			b.WriteString(eol) // a blank line
		}
		fmt.Fprintf(&b, "%d,%d,%d", rng.IntN(1000), rng.IntN(3), rng.IntN(1000))
		if count {
			fmt.Fprintf(&b, ",%d.%d", 1+rng.IntN(9), rng.IntN(10))
		}
		if r < rows-1 || rng.IntN(2) == 0 {
			b.WriteString(eol)
		}
	}
	return b.String()
}

// TestCSVSplitsEveryOffset: random CSV files cut in two at every byte
// offset and in several at random ones read the rows of the whole file,
// each once, in order.
func TestCSVSplitsEveryOffset(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 10 {
		rows := []int{0, 1, 2, 5, 20}[trial%5]
		data := []byte(plainCSV(rng, rows))
		want, err := wholeFile(t, data, FormatCSV)
		if rows == 0 {
			if err == nil || !strings.Contains(err.Error(), "no data rows") {
				t.Fatalf("header only: %v", err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
		for c := int64(0); c <= int64(len(data)); c++ {
			got, err, whole := readSplits(t, data, FormatCSV, []int64{c}, ReadOptions{chunkBytes: 7})
			if err != nil || whole {
				t.Fatalf("trial %d, cut at %d: %v (whole %v)", trial, c, err, whole)
			}
			sameRows(t, fmt.Sprintf("trial %d, cut at %d", trial, c), got, want)
		}
		for range 5 {
			var cuts []int64
			for range 1 + rng.IntN(6) {
				cuts = append(cuts, rng.Int64N(int64(len(data))+1))
			}
			slices.Sort(cuts)
			got, err, whole := readSplits(t, data, FormatCSV, cuts, ReadOptions{})
			if err != nil || whole {
				t.Fatalf("trial %d, cuts %v: %v (whole %v)", trial, cuts, err, whole)
			}
			sameRows(t, fmt.Sprintf("trial %d, cuts %v", trial, cuts), got, want)
		}
	}
}

// TestCSVSplitErrorsAreLocal: a bad row in any split is, with the rows
// of the earlier splits added, field for field the error of a read of the
// whole file; of two bad rows the first wins; a quote or a lone carriage
// return makes some split say ErrReadWhole.
func TestCSVSplitErrorsAreLocal(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 20 {
		lines := strings.Split(strings.TrimRight(plainCSV(rng, 30), "\r\n"), "\n")
		bad := []string{"1,x,3", "-1,0,2", "1,2", "1,0,2,9,9", "1.5,0,2", ",0,1"}
		k := 1 + rng.IntN(len(lines)-1)
		for !strings.Contains(lines[k], ",") { // not a blank line
			k = 1 + rng.IntN(len(lines)-1)
		}
		lines[k] = strings.Split(bad[rng.IntN(len(bad))], ",")[0] + strings.TrimSuffix(lines[k][strings.IndexByte(lines[k], ','):], "\r")
		if rng.IntN(2) == 0 {
			lines[k] = bad[rng.IntN(len(bad))]
		}
		if rng.IntN(3) == 0 { // a second bad row later
			j := k + rng.IntN(len(lines)-k)
			lines[j] = "7,y,7"
		}
		data := []byte(strings.Join(lines, "\n") + "\n")
		_, want := wholeFile(t, data, FormatCSV)
		var wantIE *InputError
		if !errors.As(want, &wantIE) {
			// The change was harmless (a count column cut, say): no error.
			continue
		}
		for c := int64(0); c <= int64(len(data)); c += 1 + rng.Int64N(9) {
			_, err, whole := readSplits(t, data, FormatCSV, []int64{c, min(int64(len(data)), c+rng.Int64N(40))}, ReadOptions{})
			if whole {
				t.Fatalf("trial %d: ErrReadWhole without a quote", trial)
			}
			var ie *InputError
			if !errors.As(err, &ie) || !reflect.DeepEqual(*ie, *wantIE) || ie.Error() != want.Error() {
				t.Fatalf("trial %d, cut %d: split error %v, whole-file error %v", trial, c, err, want)
			}
		}
	}
	for _, text := range []string{
		"state,action,next_state\n1,0,2\n\"3\",0,1\n4,0,5\n",
		"state,action,next_state\n1,0,2\n3,0\r,1\n4,0,5\n",
		"state,\"action\",next_state\n1,0,2\n3,0,1\n",
		"state,action,next_state\n1,0,2\n\"3\n4\",0,1\n4,0,5\n",
	} {
		data := []byte(text)
		for c := int64(0); c <= int64(len(data)); c++ {
			if _, _, whole := readSplits(t, data, FormatCSV, []int64{c}, ReadOptions{}); !whole {
				t.Fatalf("%q cut at %d: no split said ErrReadWhole", text, c)
			}
		}
	}
}

// TestCSVSplitsRandomQuirks: csvfast_test's random CSV (spaces, floats,
// quoted fields now and then, a bad value) cut at random offsets: either
// some split says ErrReadWhole (a quote or carriage return somewhere), or
// the splits read the rows and the error of the whole file.
func TestCSVSplitsRandomQuirks(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	wholes := 0
	for trial := range 100 {
		data := []byte(randomCSV(rng, 1+rng.IntN(60), rng.IntN(2) == 0))
		want, wantErr := wholeFile(t, data, FormatCSV)
		var cuts []int64
		for range 1 + rng.IntN(5) {
			cuts = append(cuts, rng.Int64N(int64(len(data))+1))
		}
		slices.Sort(cuts)
		got, err, whole := readSplits(t, data, FormatCSV, cuts, ReadOptions{chunkBytes: 1 + rng.IntN(64)})
		if whole {
			wholes++
			continue
		}
		if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("trial %d, cuts %v: error %v, whole file %v", trial, cuts, err, wantErr)
		}
		if err == nil {
			sameRows(t, fmt.Sprintf("trial %d", trial), got, want)
		}
	}
	if wholes == 0 || wholes == 100 {
		t.Fatalf("%d of 100 trials read whole: the test does not see both cases", wholes)
	}
}

// encodeBatches writes n rows of random transitions in record batches
// (Arrow IPC file) or row groups (Parquet) of at most per rows.
func encodeBatches(t *testing.T, rng *rand.Rand, format string, n, per int) ([]byte, *collected) {
	t.Helper()
	mem := memory.NewGoAllocator()
	want := &collected{}
	var recs []arrow.Record
	for lo := 0; lo < n; lo += per {
		m := min(per, n-lo)
		s, a, x, c := make([]int32, m), make([]int32, m), make([]int32, m), make([]float64, m)
		for k := range m {
			s[k], a[k], x[k], c[k] = rng.Int32N(50), rng.Int32N(3), rng.Int32N(50), float64(1+rng.IntN(4))/2
		}
		want.s, want.a, want.n, want.c = append(want.s, s...), append(want.a, a...), append(want.n, x...), append(want.c, c...)
		recs = append(recs, record(col{"state", i32(mem, s...)}, col{"action", i32(mem, a...)}, col{"next_state", i32(mem, x...)}, col{"count", f64(mem, c...)}))
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	if format != FormatParquet {
		return encodeRecords(t, format, recs...), want
	}
	var buf bytes.Buffer
	fw, err := pqarrow.NewFileWriter(recs[0].Schema(), &buf, parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(int64(per))), pqarrow.DefaultWriterProps())
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
	return buf.Bytes(), want
}

// TestBinarySplitsEveryOffset: Arrow IPC files and Parquet files of many
// small record batches or row groups, cut in two at every byte offset and
// in several at random ones, read every row once, in order.
func TestBinarySplitsEveryOffset(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, format := range []string{FormatArrowFile, FormatParquet} {
		for _, shape := range [][2]int{{1, 1}, {40, 7}, {100, 10}} {
			data, want := encodeBatches(t, rng, format, shape[0], shape[1])
			whole, err := wholeFile(t, data, format)
			if err != nil {
				t.Fatal(err)
			}
			sameRows(t, format+" whole", whole, want)
			step := int64(1)
			if format == FormatParquet || shape[0] == 100 {
				// Opening a Parquet file costs milliseconds (its reader's
				// buffers): every offset would take minutes under -race.
				step = 1 + int64(len(data))/120
			}
			for c := int64(0); c <= int64(len(data)); c += step {
				got, err, rw := readSplits(t, data, format, []int64{c}, ReadOptions{BatchRows: 3})
				if err != nil || rw {
					t.Fatalf("%s %v cut at %d: %v (whole %v)", format, shape, c, err, rw)
				}
				sameRows(t, fmt.Sprintf("%s %v cut at %d", format, shape, c), got, want)
			}
			for range 10 {
				var cuts []int64
				for range 1 + rng.IntN(8) {
					cuts = append(cuts, rng.Int64N(int64(len(data))+1))
				}
				slices.Sort(cuts)
				got, err, rw := readSplits(t, data, format, cuts, ReadOptions{})
				if err != nil || rw {
					t.Fatalf("%s cuts %v: %v (whole %v)", format, cuts, err, rw)
				}
				sameRows(t, fmt.Sprintf("%s cuts %v", format, cuts), got, want)
			}
		}
	}
}

// TestBinarySplitErrors: a bad value in an Arrow IPC file split is the
// whole file's error once rows are added; in a Parquet split, and for a
// corrupt file, the split says ErrReadWhole.
func TestBinarySplitErrors(t *testing.T) {
	mem := memory.NewGoAllocator()
	var recs []arrow.Record
	for b := range 5 {
		s := []int32{1, 2, 3, 4}
		if b == 3 {
			s[2] = -5
		}
		recs = append(recs, record(col{"state", i32(mem, s...)}, col{"action", i32(mem, 0, 0, 0, 0)}, col{"next_state", i32(mem, 1, 1, 1, 1)}))
	}
	for _, format := range []string{FormatArrowFile, FormatParquet} {
		data := encodeRecords(t, format, recs...)
		_, want := wholeFile(t, data, format)
		if want == nil {
			t.Fatal("no error reading the whole file")
		}
		sawWhole := false
		step := int64(1)
		if format == FormatParquet {
			step = 1 + int64(len(data))/60
		}
		for c := int64(0); c <= int64(len(data)); c += step {
			_, err, whole := readSplits(t, data, format, []int64{c}, ReadOptions{})
			if whole {
				sawWhole = true
				continue
			}
			if format == FormatParquet {
				t.Fatalf("parquet cut at %d: %v, want ErrReadWhole", c, err)
			}
			if err == nil || err.Error() != want.Error() {
				t.Fatalf("%s cut at %d: %v, want %v", format, c, err, want)
			}
		}
		if format == FormatParquet && !sawWhole {
			t.Fatal("parquet: no ErrReadWhole")
		}
		// Truncated: some split says ErrReadWhole, or reads.
		trunc := data[:len(data)-3]
		if _, err, whole := readSplits(t, trunc, format, []int64{int64(len(trunc) / 2)}, ReadOptions{}); !whole {
			t.Fatalf("%s truncated: %v, want ErrReadWhole", format, err)
		}
	}
	for _, r := range recs {
		r.Release()
	}
}

// TestPlanSplits: byte ranges covering each file once, the last of a
// file up to 1.1 times the size, streams and small files whole.
func TestPlanSplits(t *testing.T) {
	files := []DataFile{
		{Name: "a.csv", Size: 1000, Format: FormatCSV},
		{Name: "b.arrows", Size: 5000, Format: FormatArrowStream},
		{Name: "c.parquet", Size: 105, Format: FormatParquet},
		{Name: "d.arrow", Size: 321, Format: FormatArrowFile},
		{Name: "e.csv", Size: 5000, Format: FormatCSV, Stream: true},
	}
	got := PlanSplits(files, 100)
	covered := map[int]int64{}
	for k, sp := range got {
		if sp.Ordinal != k {
			t.Fatalf("split %d has ordinal %d", k, sp.Ordinal)
		}
		if sp.Offset != covered[sp.File] {
			t.Fatalf("split %+v does not follow %d", sp, covered[sp.File])
		}
		covered[sp.File] += sp.Length
		if k > 0 && got[k-1].File > sp.File {
			t.Fatal("files out of order")
		}
	}
	for k, f := range files {
		if covered[k] != f.Size {
			t.Fatalf("file %s covered %d of %d", f.Name, covered[k], f.Size)
		}
	}
	count := func(file int) (n int, whole bool) {
		for _, sp := range got {
			if sp.File == file {
				n++
				whole = sp.Whole
			}
		}
		return n, whole
	}
	for file, want := range []int{10, 1, 1, 4, 1} {
		if n, whole := count(file); n != want || whole != (want == 1) {
			t.Fatalf("file %d: %d splits (whole %v), want %d", file, n, whole, want)
		}
	}
	re := ReadWhole(got, 0, 1000)
	if re[0] != (Split{Ordinal: 0, File: 0, Length: 1000, Whole: true}) || len(re) != len(got)-9 || re[1].Ordinal != 1 || re[1].File != 1 {
		t.Fatalf("ReadWhole: %+v", re[:3])
	}
}

// TestListDataset: a directory's data files and a glob's matches, sorted
// by path bytes, with formats; hidden and _ files left out.
func TestListDataset(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"b.csv", "a.csv", "B.csv", "_SUCCESS", ".crc", "c.parquet"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("state,action,next_state\n1,0,1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	files, err := ListDataset(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f.Name)+":"+f.Format)
		if f.Size != 30 || f.ModTime == 0 {
			t.Fatalf("%+v", f)
		}
	}
	// c.parquet holds CSV text: its content decides.
	if want := []string{"B.csv:csv", "a.csv:csv", "b.csv:csv", "c.parquet:csv"}; !slices.Equal(names, want) {
		t.Fatalf("directory: %v, want %v", names, want)
	}
	files, err = ListDataset(filepath.Join(dir, "*.csv"), "csv")
	if err != nil || len(files) != 3 || files[0].Name != filepath.Join(dir, "B.csv") {
		t.Fatalf("glob: %+v, %v", files, err)
	}
	for _, bad := range []string{filepath.Join(dir, "*.nothing"), filepath.Join(dir, "missing.csv"), filepath.Join(dir, "sub")} {
		if _, err := ListDataset(bad, ""); err == nil {
			t.Fatalf("%s: no error", bad)
		}
	}
	if err := CheckFile(files[0]); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files[0].Name, []byte("state,action,next_state\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckFile(files[0]); err == nil || !strings.Contains(err.Error(), "B.csv") {
		t.Fatalf("changed file: %v", err)
	}
}

// TestInputErrorJSON: an InputError crosses JSON with every field and
// the same text.
func TestInputErrorJSON(t *testing.T) {
	for _, e := range []*InputError{
		{File: "a.csv", Row: 7, Column: "state", Value: "x", Reason: reasonNotInt},
		{File: "b.parquet", Reason: "corrupt", Err: errors.New("page header: unexpected EOF")},
	} {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var got InputError
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if got.File != e.File || got.Row != e.Row || got.Column != e.Column || got.Value != e.Value || got.Reason != e.Reason || got.Error() != e.Error() {
			t.Fatalf("%v came back as %v", e, &got)
		}
	}
}
