package arrowio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"

	"github.com/emsf/emsf/shard"
)

// idScan is what a scan with vocabularies delivered: the rows and the
// vocabularies' ids in index order.
type idScan struct {
	rows            *collected
	states, actions []string
}

// withIDs returns opts with fresh vocabularies for the state columns
// (states) and the action column (actions).
func withIDs(opts ReadOptions, states, actions bool) ReadOptions {
	opts.StateIDs, opts.ActionIDs = nil, nil
	if states {
		opts.StateIDs = &shard.Vocab{}
	}
	if actions {
		opts.ActionIDs = &shard.Vocab{}
	}
	return opts
}

func (o ReadOptions) vocabs(rows *collected) *idScan {
	return &idScan{rows: rows, states: o.StateIDs.Strings(), actions: o.ActionIDs.Strings()}
}

// sameIDScan fails unless the fast reader gives what encoding/csv gives,
// rows, errors and vocabularies, for chunks of every size.
func sameIDScan(t *testing.T, text string, opts ReadOptions, states, actions bool) *idScan {
	t.Helper()
	wo := withIDs(opts, states, actions)
	rows, werr := slowScan(text, wo)
	want := wo.vocabs(rows)
	for _, chunk := range []int{1, 7, 64, 1000, 1 << 20} {
		o := withIDs(opts, states, actions)
		rows, gerr := fastScan(text, o, chunk)
		if fmt.Sprint(gerr) != fmt.Sprint(werr) {
			t.Fatalf("chunk %d: error %v, want %v\ninput %q", chunk, gerr, werr, text)
		}
		if got := o.vocabs(rows); werr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("chunk %d: rows or ids differ\ngot  %+v %q %q\nwant %+v %q %q\ninput %q", chunk,
				got.rows, got.states, got.actions, want.rows, want.states, want.actions, text)
		}
	}
	if werr != nil {
		return nil
	}
	return want
}

func TestCSVIDsFastMatchesEncodingCSV(t *testing.T) {
	long := strings.Repeat("x", shard.MaxIDBytes)
	for _, text := range []string{
		"state,action,next_state\nuser42,left,/cart\n/cart,right,user42\nuser7,left,/cart\n",
		"state,action,next_state\n a , b ,c\n",                // spaces around ids are trimmed
		"state,action,next_state\n\"a,b\",x,\" c \"\nd,x,a\n", // quoted ids, a comma inside
		"state,action,next_state\r\né,→,日本\r\n3,0,1\r\n",      // multi-byte ids, CRLF, digits as ids
		"state,action,next_state,count\ns,a,t,2.5\nt,a,s,1\n", // counts
		"state,action,next_state\n" + long + ",a,b\n",         // the longest id
		"state,action,next_state\n" + long + "y,a,b\n",        // one byte too long
		"state,action,next_state\na,,b\n",                     // empty id
		"state,action,next_state\na, ,b\n",                    // blank id
		"state,action,next_state\na,x,b\nc,x\n",               // ragged
		"state,action,next_state\na,x,\xff\xfe\n",             // not UTF-8
		"state,action,next_state\na,x,b\x00c\n",               // NUL
		"state,action,next_state\na,x,b\nc,x,\"d\n",           // unterminated quote
		"state,action,next_state,count\na,x,b,0\n",            // bad count
		"next_state,state,action\n\xff,,x\n",                  // first bad column slot wins
		"state,action,next_state\na,x,b\n\na,y,c\n\n",         // empty lines
		"state,action,next_state\na\u00a0,x,b\n",              // a Unicode space is part of the id
	} {
		sameIDScan(t, text, ReadOptions{BatchRows: 2}, true, true)
	}
	// States as ids, actions as integers, and the other way round.
	got := sameIDScan(t, "state,action,next_state\nb,1,a\na,0,c\n", ReadOptions{}, true, false)
	if want := []int32{1, 0}; !slices.Equal(got.rows.a, want) || !slices.Equal(got.states, []string{"b", "a", "c"}) {
		t.Fatalf("mixed: actions %v states %q", got.rows.a, got.states)
	}
	sameIDScan(t, "state,action,next_state\nb,1,a\n", ReadOptions{}, true, false)
	sameIDScan(t, "state,action,next_state\nb,x,a\n", ReadOptions{}, true, false) // action "x" is not an integer
	sameIDScan(t, "state,action,next_state\n0,left,1\n", ReadOptions{}, false, true)
}

// TestCSVIDsRandom: random rows of ids with the reader's quirks read as a
// direct reading of the same rows says, for every chunk size.
func TestCSVIDsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 40 {
		pool := []string{"user42", "/cart", "é", "3", "a b", "x,y", "left", "right", "日本", "s08"}
		var b strings.Builder
		b.WriteString("step,state,action,next_state,count\n")
		var want [][3]string
		for r := range 1 + rng.IntN(200) {
			var row [3]string
			fields := make([]string, 3)
			for k := range 3 {
				row[k] = pool[rng.IntN(len(pool))]
				fields[k] = row[k]
				switch {
				case strings.Contains(row[k], ","):
					fields[k] = `"` + row[k] + `"`
				case rng.IntN(20) == 0:
					fields[k] = "  " + row[k] + " "
				}
			}
			want = append(want, row)
			fmt.Fprintf(&b, "%d,%s,%s,%s,%d\n", r, fields[0], fields[1], fields[2], 1+rng.IntN(3))
		}
		got := sameIDScan(t, b.String(), ReadOptions{BatchRows: 1 + rng.IntN(50)}, true, true)
		for r, row := range want {
			if got.states[got.rows.s[r]] != row[0] || got.actions[got.rows.a[r]] != row[1] || got.states[got.rows.n[r]] != row[2] {
				t.Fatalf("trial %d row %d: read %q %q %q, want %q", trial, r+1,
					got.states[got.rows.s[r]], got.actions[got.rows.a[r]], got.states[got.rows.n[r]], row)
			}
		}
	}
}

// idRecord is the record of rows (state, action, next) with the state
// columns as the given Arrow type and the action column as strings.
func idRecord(t *testing.T, mem memory.Allocator, kind string, rows [][3]string) arrow.Record {
	t.Helper()
	strs := func(k int) arrow.Array {
		switch kind {
		case "dictionary":
			// Built outside mem: arrow-go v15's dictionary builder leaks a
			// buffer to its allocator (GetDictArrayData).
			mem := memory.NewGoAllocator()
			dt := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int16, ValueType: arrow.BinaryTypes.String}
			b := array.NewDictionaryBuilder(mem, dt).(*array.BinaryDictionaryBuilder)
			defer b.Release()
			for _, r := range rows {
				if err := b.AppendString(r[k]); err != nil {
					t.Fatal(err)
				}
			}
			return b.NewArray()
		case "large":
			b := array.NewLargeStringBuilder(mem)
			defer b.Release()
			for _, r := range rows {
				b.Append(r[k])
			}
			return b.NewArray()
		case "binary":
			b := array.NewBinaryBuilder(mem, arrow.BinaryTypes.Binary)
			defer b.Release()
			for _, r := range rows {
				b.Append([]byte(r[k]))
			}
			return b.NewArray()
		}
		b := array.NewStringBuilder(mem)
		defer b.Release()
		for _, r := range rows {
			b.Append(r[k])
		}
		return b.NewArray()
	}
	return record(col{"state", strs(0)}, col{"action", strs(1)}, col{"next_state", strs(2)})
}

// TestScanIDsEveryFormat: the same rows of ids read from CSV, Arrow IPC
// files and streams (string, large string, binary and dictionary
// columns) and Parquet give the same indices and vocabularies.
func TestScanIDsEveryFormat(t *testing.T) {
	rows := [][3]string{{"b", "go", "a"}, {"a", "stop", "c"}, {"c", "go", "b"}, {"b", "go", "b"}, {"日本", "stop", "a"}}
	var csv strings.Builder
	csv.WriteString("state,action,next_state\n")
	for _, r := range rows {
		fmt.Fprintf(&csv, "%s,%s,%s\n", r[0], r[1], r[2])
	}
	want := sameIDScan(t, csv.String(), ReadOptions{BatchRows: 2}, true, true)
	for _, kind := range []string{"string", "large", "binary", "dictionary"} {
		for _, format := range []string{FormatArrowFile, FormatArrowStream, FormatParquet} {
			if format == FormatParquet && kind == "large" {
				continue // pqarrow stores it as a plain string
			}
			mem := checkedMem(t)
			rec := idRecord(t, mem, kind, rows)
			data := encodeRecords(t, format, rec)
			rec.Release()
			path := writeFile(t, "t."+format, data)
			o := withIDs(ReadOptions{BatchRows: 2, Alloc: mem}, true, true)
			got, err := scanAll(context.Background(), path, o)
			if err != nil {
				t.Fatalf("%s %s: %v", kind, format, err)
			}
			if g := o.vocabs(got); !reflect.DeepEqual(g, want) {
				t.Fatalf("%s %s: got %+v %q %q, want %+v %q %q", kind, format, g.rows, g.states, g.actions, want.rows, want.states, want.actions)
			}
		}
	}
}

// TestStringIDsError: a scan of integers that meets ids says so with a
// *StringIDsError naming the column (so a caller can read ids instead);
// numbers that are not indices stay the errors they were; a column of
// numbers read as ids is refused.
func TestStringIDsError(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		text    string
		actions bool
		row     int
		msg     string
	}{
		{"state,action,next_state\nuser1,0,1\n", false, 1, `row 1, column "state": value "user1" is not a non-negative integer (it reads as a string id)`},
		{"state,action,next_state\n0,0,1\n1,0,/cart\n", false, 2, `column "next_state": value "/cart"`},
		{"state,action,next_state\n0,left,1\n", true, 1, `column "action": value "left"`},
	} {
		_, err := fastScan(c.text, ReadOptions{}, 1<<20)
		var se *StringIDsError
		if !errors.As(err, &se) || se.Actions != c.actions || se.Input.Row != c.row || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: error %v (%T), want a StringIDsError at row %d, actions %v, saying %q", c.text, err, err, c.row, c.actions, c.msg)
		}
	}
	for _, text := range []string{"state,action,next_state\n1.5,0,1\n", "state,action,next_state\n-1,0,1\n", "state,action,next_state\nNaN,0,1\n"} {
		_, err := fastScan(text, ReadOptions{}, 1<<20)
		var se *StringIDsError
		if err == nil || errors.As(err, &se) {
			t.Errorf("%q: error %v, want a plain InputError", text, err)
		}
	}
	mem := checkedMem(t)
	rec := idRecord(t, mem, "dictionary", [][3]string{{"a", "b", "c"}})
	path := writeFile(t, "t.arrow", encodeRecords(t, FormatArrowFile, rec))
	rec.Release()
	_, err := scanAll(ctx, path, ReadOptions{Alloc: mem})
	var se *StringIDsError
	if !errors.As(err, &se) || se.Actions || !strings.Contains(err.Error(), `column "state": has type dictionary`) {
		t.Errorf("Arrow dictionary column read as integers: %v", err)
	}
	rec = record(col{"state", i32(mem, 1)}, col{"action", i32(mem, 0)}, col{"next_state", i32(mem, 2)})
	path = writeFile(t, "n.arrow", encodeRecords(t, FormatArrowFile, rec))
	rec.Release()
	if _, err := scanAll(ctx, path, withIDs(ReadOptions{Alloc: mem}, true, false)); err == nil || !strings.Contains(err.Error(), "read as ids, which want a string column") {
		t.Errorf("integer column read as ids: %v", err)
	}
}

// TestTransitionWriterIDs: transitions written with ids (quoted in CSV
// where need be) read back as the same ids, in every format.
func TestTransitionWriterIDs(t *testing.T) {
	states, err := shard.NewVocab([]string{"user42", "/cart", `say "hi", then`, "日本"})
	if err != nil {
		t.Fatal(err)
	}
	actions, err := shard.NewVocab([]string{"left", "right,up"})
	if err != nil {
		t.Fatal(err)
	}
	rows := [][3]int{{0, 1, 2}, {2, 0, 3}, {3, 1, 0}, {1, 0, 1}}
	for _, format := range []string{"csv", "arrow", "parquet"} {
		path := filepath.Join(t.TempDir(), "t."+format)
		w, err := NewTransitionWriterIDs(path, "", states, actions)
		if err != nil {
			t.Fatal(err)
		}
		for k, r := range rows {
			if err := w.Write(r[0], r[1], r[2], 1, 0, int64(k)); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		o := withIDs(ReadOptions{}, true, true)
		got, err := scanAll(context.Background(), path, o)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		for k, r := range rows {
			if o.StateIDs.String(int(got.s[k])) != states.String(r[0]) || o.ActionIDs.String(int(got.a[k])) != actions.String(r[1]) ||
				o.StateIDs.String(int(got.n[k])) != states.String(r[2]) {
				t.Fatalf("%s row %d: read %q %q %q", format, k+1, o.StateIDs.String(int(got.s[k])), o.ActionIDs.String(int(got.a[k])), o.StateIDs.String(int(got.n[k])))
			}
		}
	}
}

// TestScanAutoIDs: columns of integers are read as integers and columns
// of ids as ids, also when the ids start late in the file (the scan is
// read again, with fresh vocabularies); an error that is not about ids
// ends it.
func TestScanAutoIDs(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		text             string
		states, actions  []string // nil: read as integers
		wantS, wantA, wn []int32
		calls            int
	}{
		{"state,action,next_state\n0,0,1\n1,1,0\n", nil, nil, []int32{0, 1}, []int32{0, 1}, []int32{1, 0}, 1},
		{"state,action,next_state\n5,left,1\n1,right,5\n", nil, []string{"left", "right"}, []int32{5, 1}, []int32{0, 1}, []int32{1, 5}, 2},
		{"state,action,next_state\n7,0,3\n3,1,/cart\n", []string{"7", "3", "/cart"}, nil, []int32{0, 1}, []int32{0, 1}, []int32{1, 2}, 2},
		{"state,action,next_state\n7,0,3\n3,up,/cart\n", []string{"7", "3", "/cart"}, []string{"0", "up"}, []int32{0, 1}, []int32{0, 1}, []int32{1, 2}, 3},
	} {
		path := writeFile(t, "t.csv", []byte(c.text))
		var rows *collected
		calls := 0
		opts, err := ScanAutoIDs(ReadOptions{}, func(o ReadOptions) error {
			calls++
			var err error
			rows, err = scanAll(ctx, path, o)
			return err
		})
		if err != nil {
			t.Fatalf("%q: %v", c.text, err)
		}
		if calls != c.calls || !slices.Equal(opts.StateIDs.Strings(), c.states) || !slices.Equal(opts.ActionIDs.Strings(), c.actions) ||
			(opts.StateIDs == nil) != (c.states == nil) || (opts.ActionIDs == nil) != (c.actions == nil) {
			t.Errorf("%q: %d scans, states %q (%v), actions %q (%v); want %d, %q, %q", c.text, calls,
				opts.StateIDs.Strings(), opts.StateIDs != nil, opts.ActionIDs.Strings(), opts.ActionIDs != nil, c.calls, c.states, c.actions)
		}
		if !slices.Equal(rows.s, c.wantS) || !slices.Equal(rows.a, c.wantA) || !slices.Equal(rows.n, c.wn) {
			t.Errorf("%q: rows %v %v %v, want %v %v %v", c.text, rows.s, rows.a, rows.n, c.wantS, c.wantA, c.wn)
		}
	}
	path := writeFile(t, "bad.csv", []byte("state,action,next_state\nx,0,1\n-1,0,1\n"))
	calls := 0
	_, err := ScanAutoIDs(ReadOptions{}, func(o ReadOptions) error { calls++; _, err := scanAll(ctx, path, o); return err })
	if err != nil || calls != 2 {
		t.Errorf("ids with a -1 among them: %v after %d scans, want the ids read (-1 is an id there)", err, calls)
	}
	path = writeFile(t, "bad2.csv", []byte("state,action,next_state\n0,0,1.5\n"))
	calls = 0
	_, err = ScanAutoIDs(ReadOptions{}, func(o ReadOptions) error { calls++; _, err := scanAll(ctx, path, o); return err })
	var se *StringIDsError
	if err == nil || errors.As(err, &se) || calls != 1 {
		t.Errorf("a number that is not an index: %v after %d scans, want a plain error after 1", err, calls)
	}
}

// viewRows keeps every batch a scan hands over (by Swap, as a pipelined
// consumer does) so that its rows are read through the batch's views of
// the ids after the scan has grown the vocabularies further.
type viewRows struct{ batches []TransitionBatch }

func (v *viewRows) add(b *TransitionBatch) error {
	var kept TransitionBatch
	b.Swap(&kept)
	v.batches = append(v.batches, kept)
	return nil
}

// text returns the rows read: each group's id through the batch's view,
// or its index where the view is zero. It fails unless every batch has
// valid views for exactly the groups named (states, actions).
func (v *viewRows) text(t *testing.T, what string, states, actions bool) [][3]string {
	t.Helper()
	name := func(w shard.VocabView, i int32) string {
		if !w.Valid() {
			return strconv.Itoa(int(i))
		}
		return string(w.ID(int(i)))
	}
	var out [][3]string
	for _, b := range v.batches {
		if b.StateIDs.Valid() != states || b.ActionIDs.Valid() != actions {
			t.Fatalf("%s: batch at row %d: views valid %v %v, want %v %v", what, b.FirstRow, b.StateIDs.Valid(), b.ActionIDs.Valid(), states, actions)
		}
		for k := range b.State {
			out = append(out, [3]string{name(b.StateIDs, b.State[k]), name(b.ActionIDs, b.Action[k]), name(b.StateIDs, b.Next[k])})
		}
	}
	return out
}

// checkViews fails unless a scan's batches, read through their views,
// are rows.
func checkViews(t *testing.T, what string, got *viewRows, rows [][3]string, states, actions bool) {
	t.Helper()
	if g := got.text(t, what, states, actions); !slices.Equal(g, rows) {
		t.Fatalf("%s: rows through the views\n%q\nwant\n%q", what, g, rows)
	}
}

// idCSV is rows as CSV; an id with a comma is quoted (and from there on
// the reader is encoding/csv).
func idCSV(rows [][3]string) []byte {
	var b strings.Builder
	b.WriteString("state,action,next_state\n")
	for _, r := range rows {
		f := r
		for k := range f {
			if strings.Contains(f[k], ",") {
				f[k] = `"` + f[k] + `"`
			}
		}
		fmt.Fprintf(&b, "%s,%s,%s\n", f[0], f[1], f[2])
	}
	return []byte(b.String())
}

// TestScanIDViews: every batch of every reader (CSV through the fast
// reader and encoding/csv, Arrow IPC file and stream and Parquet with
// string, large string, binary and dictionary columns; ScanTransitions,
// ScanTransitionsReader and ScanSplit) carries views of the vocabularies
// whose ID(State[k]) is row k's id text, still so after the scan (batches
// kept by Swap while the vocabularies grew); zero views for integers.
func TestScanIDViews(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	pool := []string{"user42", "/cart", "é", "3", "a b", "日本", strings.Repeat("L", shard.MaxIDBytes)}
	var rows [][3]string
	for range 60 {
		rows = append(rows, [3]string{pool[rng.IntN(len(pool))], []string{"go", "stop", "wait"}[rng.IntN(3)], pool[rng.IntN(len(pool))]})
	}
	ctx := context.Background()
	quoted := slices.Clone(rows)
	quoted[40][2] = "x,y" // rows 41 on are read by encoding/csv
	csv := idCSV(quoted)
	path := writeFile(t, "t.csv", csv)
	opts := ReadOptions{BatchRows: 3}
	scans := map[string]func(o ReadOptions, v *viewRows) error{
		"csv file": func(o ReadOptions, v *viewRows) error { return ScanTransitions(ctx, path, o, v.add) },
		"csv payload": func(o ReadOptions, v *viewRows) error {
			o.chunkBytes = 64
			return ScanTransitionsReader(ctx, bytes.NewReader(csv), "t.csv", "", o, v.add)
		},
		"csv encoding/csv": func(o ReadOptions, v *viewRows) error {
			s, err := newScan("t.csv", o, v.add)
			if err != nil {
				return err
			}
			return s.csvSlow(ctx, bytes.NewReader(csv))
		},
	}
	for what, scan := range scans {
		var got viewRows
		if err := scan(withIDs(opts, true, true), &got); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		checkViews(t, what, &got, quoted, true, true)
	}
	for _, kind := range []string{"string", "large", "binary", "dictionary"} {
		for _, format := range []string{FormatArrowFile, FormatArrowStream, FormatParquet} {
			if format == FormatParquet && kind == "large" {
				continue // pqarrow stores it as a plain string
			}
			mem := checkedMem(t)
			cut := 25 // two record batches or row groups
			if kind == "dictionary" && format == FormatArrowFile {
				cut = 0 // an IPC file holds one dictionary per field
			}
			var recs []arrow.Record
			for _, part := range [][][3]string{rows[:cut], rows[cut:]} {
				if len(part) > 0 {
					recs = append(recs, idRecord(t, mem, kind, part))
				}
			}
			data := encodeRecords(t, format, recs...)
			for _, r := range recs {
				r.Release()
			}
			what := kind + " " + format
			var got viewRows
			if err := ScanTransitions(ctx, writeFile(t, "t."+format, data), withIDs(ReadOptions{BatchRows: 4, Alloc: mem}, true, true), got.add); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			checkViews(t, what, &got, rows, true, true)
			got = viewRows{}
			if err := ScanTransitionsReader(ctx, bytes.NewReader(data), "t."+format, "", withIDs(ReadOptions{Alloc: mem}, true, true), got.add); err != nil {
				t.Fatalf("%s payload: %v", what, err)
			}
			checkViews(t, what+" payload", &got, rows, true, true)
			if format == FormatArrowStream || cut == 0 {
				continue // a stream, or an IPC file of dictionaries, is read whole
			}
			// Splits, each read with vocabularies of its own (as cluster
			// workers read them).
			got = viewRows{}
			f := DataFile{Name: "t." + format, Size: int64(len(data)), Format: format}
			for _, sp := range []Split{{Offset: 0, Length: f.Size / 2}, {Ordinal: 1, Offset: f.Size / 2, Length: f.Size - f.Size/2}} {
				if err := ScanSplit(ctx, bytes.NewReader(data), f, sp, withIDs(ReadOptions{BatchRows: 4, Alloc: mem}, true, true), got.add); err != nil {
					t.Fatalf("%s split %d: %v", what, sp.Ordinal, err)
				}
			}
			checkViews(t, what+" splits", &got, rows, true, true)
		}
	}
	// CSV splits (the quoted id makes encoding/csv read a split whole:
	// the plain rows here).
	plain := idCSV(rows)
	f := DataFile{Name: "t.csv", Size: int64(len(plain)), Format: FormatCSV}
	var got viewRows
	for k, cut := range []int64{0, f.Size / 3, 2 * f.Size / 3, f.Size} {
		if k == 0 {
			continue
		}
		prev := []int64{0, f.Size / 3, 2 * f.Size / 3}[k-1]
		sp := Split{Ordinal: k - 1, Offset: prev, Length: cut - prev}
		if err := ScanSplit(ctx, bytes.NewReader(plain), f, sp, withIDs(opts, true, true), got.add); err != nil {
			t.Fatalf("csv split %d: %v", k-1, err)
		}
	}
	checkViews(t, "csv splits", &got, rows, true, true)

	// States named by ids, actions by integers: the action view is zero.
	mixed := [][3]string{{"b", "1", "a"}, {"a", "0", "c"}, {"c", "1", "b"}, {"d", "2", "a"}}
	got = viewRows{}
	if err := ScanTransitionsReader(ctx, bytes.NewReader(idCSV(mixed)), "t.csv", "", withIDs(opts, true, false), got.add); err != nil {
		t.Fatal(err)
	}
	checkViews(t, "csv, integer actions", &got, mixed, true, false)
	// Integers: both views zero, in every format.
	ints := [][3]string{{"0", "1", "2"}, {"2", "0", "1"}, {"1", "1", "0"}, {"0", "0", "0"}}
	for _, format := range []string{FormatCSV, FormatArrowFile, FormatArrowStream, FormatParquet} {
		mem := memory.NewGoAllocator()
		col3 := func(k int) arrow.Array {
			var v []int32
			for _, r := range ints {
				x, _ := strconv.Atoi(r[k])
				v = append(v, int32(x))
			}
			return i32(mem, v...)
		}
		data := idCSV(ints)
		if format != FormatCSV {
			rec := record(col{"state", col3(0)}, col{"action", col3(1)}, col{"next_state", col3(2)})
			data = encodeRecords(t, format, rec)
			rec.Release()
		}
		got = viewRows{}
		if err := ScanTransitionsReader(ctx, bytes.NewReader(data), "t."+format, "", opts, got.add); err != nil {
			t.Fatalf("%s integers: %v", format, err)
		}
		checkViews(t, format+" integers", &got, ints, false, false)
	}
}
