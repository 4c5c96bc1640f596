package arrowio

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"

	"github.com/emsf/emsf/shard"
)

// slowScan reads CSV text with encoding/csv alone (csvSlow), the
// reference that the fast reader must match row for row and error for
// error.
func slowScan(text string, opts ReadOptions) (*collected, error) {
	out := &collected{}
	s, err := newScan("data.csv", opts, out.add)
	if err != nil {
		return nil, err
	}
	// The header line's error carries the hint about another separator,
	// as the reader gives it (withDelimiterHint, on the line the reader's
	// buffer holds).
	line, _, _ := strings.Cut(text[:min(len(text), 1<<16)], "\n")
	return out, withDelimiterHint(s.csvSlow(context.Background(), strings.NewReader(text)), []byte(strings.TrimSuffix(line, "\r")))
}

// fastScan reads CSV text with the fast reader in chunks of chunk bytes.
func fastScan(text string, opts ReadOptions, chunk int) (*collected, error) {
	out := &collected{}
	opts.chunkBytes = chunk
	err := ScanTransitionsReader(context.Background(), strings.NewReader(text), "data.csv", "csv", opts, out.add)
	return out, err
}

// sameScan fails unless the fast reader gives what encoding/csv gives, for
// chunks of every size from a few bytes (rows split across chunks) up.
func sameScan(t *testing.T, text string, opts ReadOptions) {
	t.Helper()
	want, werr := slowScan(text, opts)
	for _, chunk := range []int{1, 7, 64, 1000, 1 << 20} {
		got, gerr := fastScan(text, opts, chunk)
		if fmt.Sprint(gerr) != fmt.Sprint(werr) {
			t.Fatalf("chunk %d: error %v, want %v\ninput %q", chunk, gerr, werr, text)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("chunk %d: rows differ\ngot  %+v\nwant %+v\ninput %q", chunk, got, want, text)
		}
	}
}

func TestCSVFastMatchesEncodingCSV(t *testing.T) {
	for _, text := range []string{
		sampleCSV,
		"state,action,next_state\n",                         // header only
		"state,action,next_state",                           // header only, no newline
		"state,action,next_state\n0,0,1",                    // last line without newline
		"state,action,next_state\r\n0,0,1\r\n1,0,2\r\n",     // CRLF
		"state,action,next_state\r\n0,0,1\r\n1,0,2\r",       // last \r before EOF
		"state,action,next_state\n\n0,0,1\n\r\n\n1,0,2\n\n", // empty lines
		"state,action,next_state\n0,\"0\",1\n1,0,2\n",       // quoted field
		"state,action,next_state\n0,0,1\n\"1\n\",0,2\n",     // quoted newline
		"state,action,next_state\n0,0,1\n1,0,\"2\n",         // unterminated quote
		"state,action,next_state\n0,0,1\n1,0\"x,2\n",        // bare quote
		"state,action,next_state\n0,0,1\n1,0,2\r3\n",        // lone \r in a field
		"\"state\",action,next_state\n0,0,1\n",              // quoted header
		"\nstate,action,next_state\n0,0,1\n",                // empty line before the header
		"\uFEFFstate, action ,next_state\n 3 ,1e0,2\n4,0,3.0\n",
		"state,action,next_state,count\n0,0,1,0.5\n0,0,1,2.25\n0,0,1,1e-3\n0,0,1,000.10\n0,0,1,.5\n0,0,1,5.\n",
		"state,action,next_state,count\n0,0,1,1234567890123456\n0,0,1,0.000000000000001\n",
		"state,action,next_state\n0,0,1\n1,1\n2,0,1\n",                            // ragged
		"state,action,next_state\n0,0,1\n1,x,2,3\n",                               // ragged and bad
		"state,action,next_state\n0,0,1\n1.5,0,1\n",                               // fraction
		"state,action,next_state\n0000000001,0,1\n",                               // 10 digits
		"state,action,next_state\n3000000000,0,1\n",                               // too large
		"state,action,next_state\n0,0,-1\n",                                       // negative
		"next_state,state,action\nx,y,0\n",                                        // first bad column slot wins
		"state,action,next_state,count\n0,0,1,0\n",                                // zero count
		"state,action,next_state,state\n0,0,1,5\n",                                // duplicate header
		"state,state,action,next_state\n1,2,0,1\n",                                // duplicate header
		"state,action,next_state\n0,0,1\n" + strings.Repeat("9", 3000) + ",0,1\n", // long line
	} {
		sameScan(t, text, ReadOptions{BatchRows: 3})
	}
	sameScan(t, "state,action,next_state\n0,0,1\n0,0,10\n", ReadOptions{States: 10})
	sameScan(t, "state,action,next_state\n0,2,1\n", ReadOptions{Actions: 2})
	sameScan(t, "s,a,n,w\n0,0,1,2\n", ReadOptions{StateCol: "s", ActionCol: "a", NextCol: "n", CountCol: "w"})
}

// randomCSV is CSV text of random transitions with the quirks the reader
// accepts: extra and reordered columns, spaces, floats that hold integers,
// fractional counts, CRLF, empty lines, now and then a quoted field, and
// (when bad) one bad value.
func randomCSV(rng *rand.Rand, rows int, bad bool) string {
	var b strings.Builder
	crlf := rng.IntN(3) == 0
	nl := "\n"
	if crlf {
		nl = "\r\n"
	}
	b.WriteString("episode,next_state,count,state,action" + nl)
	badRow := -1
	if bad {
		badRow = rng.IntN(rows)
	}
	for r := range rows {
		field := func(v int) string {
			switch rng.IntN(40) {
			case 0:
				return fmt.Sprintf(" %d ", v)
			case 1:
				return fmt.Sprintf("%d.0", v)
			case 2:
				return fmt.Sprintf("\"%d\"", v)
			case 3:
				return fmt.Sprintf("00%d", v)
			}
			return fmt.Sprint(v)
		}
		count := []string{"1", "1", "1", "0.1", "0.2", "0.3", "2.5", "1e-2", "3"}[rng.IntN(9)]
		fields := []string{fmt.Sprint(r), field(rng.IntN(20)), count, field(rng.IntN(20)), field(rng.IntN(3))}
		if r == badRow {
			fields[1+2*rng.IntN(2)] = []string{"-1", "x", "", "1.5", "NaN"}[rng.IntN(5)]
		}
		b.WriteString(strings.Join(fields, ","))
		if r < rows-1 || rng.IntN(2) == 0 {
			b.WriteString(nl)
		}
		if rng.IntN(50) == 0 {
			b.WriteString(nl)
		}
	}
	return b.String()
}

func TestCSVFastRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for k := range 60 {
		text, opts := randomCSV(rng, 1+rng.IntN(300), k%3 == 2), ReadOptions{BatchRows: 1 + rng.IntN(50)}
		sameScan(t, text, opts)
		// Without a count column (the chunks then keep none): the
		// column renamed, so it is read as any other extra column.
		sameScan(t, strings.Replace(text, "count", "weight", 1), opts)
	}
}

// TestEveryFormatSameMatrices writes random weighted transitions with
// duplicates as CSV, Arrow IPC file and stream and Parquet, and checks
// that each reads back to bitwise the same rows, and so the same CSR
// matrices, as encoding/csv reads the CSV.
func TestEveryFormatSameMatrices(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const rows = 5000
	mem := memory.NewGoAllocator()
	sbp, abp, nbp, cbp := array.NewInt32Builder(mem), array.NewInt32Builder(mem), array.NewInt32Builder(mem), array.NewFloat64Builder(mem)
	var text strings.Builder
	text.WriteString("state,action,next_state,count\n")
	for range rows {
		s, a, n := int32(rng.IntN(30)), int32(rng.IntN(3)), int32(rng.IntN(30))
		c := []float64{1, 0.1, 0.2, 0.3, 2.5}[rng.IntN(5)]
		fmt.Fprintf(&text, "%d,%d,%d,%v\n", s, a, n, c)
		sbp.Append(s)
		abp.Append(a)
		nbp.Append(n)
		cbp.Append(c)
	}
	rec := record(col{"state", sbp.NewArray()}, col{"action", abp.NewArray()}, col{"next_state", nbp.NewArray()}, col{"count", cbp.NewArray()})
	defer rec.Release()
	for _, b := range []array.Builder{sbp, abp, nbp, cbp} {
		b.Release()
	}
	want, err := slowScan(text.String(), ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantM := matrices(want)
	files := map[string][]byte{"t.csv": []byte(text.String())}
	for _, f := range []string{FormatArrowFile, FormatArrowStream, FormatParquet} {
		files["t."+f] = encodeRecords(t, f, []arrow.Record{rec}...)
	}
	for name, data := range files {
		got, err := scanAll(context.Background(), writeFile(t, name, data), ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.s, want.s) || !reflect.DeepEqual(got.a, want.a) || !reflect.DeepEqual(got.n, want.n) || !reflect.DeepEqual(got.c, want.c) {
			t.Fatalf("%s: rows differ from encoding/csv's", name)
		}
		if gotM := matrices(got); !reflect.DeepEqual(gotM, wantM) {
			t.Fatalf("%s: matrices differ", name)
		}
	}
	if !bytes.Contains(files["t.csv"], []byte("0.1")) {
		t.Fatal("no fractional counts in the data")
	}
}

func matrices(c *collected) any {
	var ct shard.Counter
	if _, err := ct.AddBatch(c.s, c.a, c.n, c.c); err != nil {
		panic(err)
	}
	_, u := ct.Dims()
	return ct.Matrices(u)
}

// FuzzCSVFastMatchesEncodingCSV checks on any input that the fast reader
// gives the rows and the error that encoding/csv alone gives.
func FuzzCSVFastMatchesEncodingCSV(f *testing.F) {
	for _, s := range []string{
		sampleCSV,
		"state,action,next_state\r\n0,0,1\r\n\r\n1,0,2\r",
		"next_state,count,state,action\n1,2.5,0,0\n3,1e3,2,1\n4,0.25,\"5\",0\n",
		"state,action,next_state\n1,0,1\n2,0\n",
		"state,action,next_state,count\n0,0,1,000.10\n0,0,1,5.\n",
		";\"0", // a malformed header with a semicolon: the hint on both readers
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sameScan(t, string(data), ReadOptions{BatchRows: 2, States: 1000, Actions: 50})
	})
}

// TestCSVBatchesFitTheFile pins fitCSV: a CSV file of a few MB is
// delivered in batches of at most size/256 rows (not DefaultBatchRows),
// the same rows in the same order as with the defaults; a BatchRows the
// caller sets is kept; a file far larger than the defaults keeps them.
func TestCSVBatchesFitTheFile(t *testing.T) {
	var b strings.Builder
	b.WriteString("state,action,next_state\n")
	rng := rand.New(rand.NewPCG(7, 7))
	for range 150_000 {
		fmt.Fprintf(&b, "%d,%d,%d\n", rng.IntN(5000), rng.IntN(3), rng.IntN(5000))
	}
	path := writeFile(t, "mid.csv", []byte(b.String()))
	size := len(b.String())
	sizes := func(opts ReadOptions) (*collected, []int) {
		t.Helper()
		var lens []int
		out := &collected{}
		err := ScanTransitions(context.Background(), path, opts, func(tb *TransitionBatch) error {
			lens = append(lens, tb.Len())
			return out.add(tb)
		})
		if err != nil {
			t.Fatal(err)
		}
		return out, lens
	}
	got, lens := sizes(ReadOptions{})
	limit := max(size/256, minSizedBatchRows)
	if limit >= DefaultBatchRows {
		t.Fatalf("the test file (%d bytes) is too large to scale the batches", size)
	}
	for k, n := range lens {
		if n > limit {
			t.Fatalf("batch %d holds %d rows, want at most %d (a %d-byte file)", k, n, limit, size)
		}
	}
	if len(got.s) != 150_000 {
		t.Fatalf("%d rows, want 150000", len(got.s))
	}
	// The same rows as read in one batch: only the cuts differ.
	want, _ := sizes(ReadOptions{BatchRows: 1 << 20})
	if !reflect.DeepEqual(got.s, want.s) || !reflect.DeepEqual(got.a, want.a) || !reflect.DeepEqual(got.n, want.n) || !reflect.DeepEqual(got.c, want.c) {
		t.Fatal("the rows differ from one batch's")
	}
	if _, lens := sizes(ReadOptions{BatchRows: 50_000}); lens[0] != 50_000 {
		t.Fatalf("BatchRows 50000 gave a first batch of %d rows", lens[0])
	}
	s := &scan{batchRows: DefaultBatchRows, chunkBytes: csvChunkBytes, sizedBatches: true, sizedChunks: true}
	s.fitCSV(1 << 30)
	if s.batchRows != DefaultBatchRows || s.chunkBytes != csvChunkBytes {
		t.Fatalf("a 1 GiB file: batches of %d rows and chunks of %d bytes, want the defaults", s.batchRows, s.chunkBytes)
	}
	s.fitCSV(100)
	if s.batchRows != minSizedBatchRows || s.chunkBytes != minSizedChunkBytes {
		t.Fatalf("a 100-byte file: batches of %d rows and chunks of %d bytes, want %d and %d", s.batchRows, s.chunkBytes, minSizedBatchRows, minSizedChunkBytes)
	}
}
