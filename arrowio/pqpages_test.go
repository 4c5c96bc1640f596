package arrowio

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/compress"
)

// pagesWays reads Parquet data with pqPages and with parquet's column
// chunk readers, checks that both give the same rows and the same error
// (where pqPages stops at a page of an optional column, or with corrupt,
// that both fail),
// and returns the number of chunks pqPages handed to parquet's reader and
// the error.
func pagesWays(t *testing.T, what string, data []byte, opts ReadOptions, corrupt bool) (int, error) {
	t.Helper()
	var got [2]*collected
	var errs [2]error
	handOvers := 0
	for k, library := range []bool{false, true} {
		o := opts
		o.libraryPages = library
		if !library {
			o.handOvers = &handOvers
		}
		got[k] = &collected{}
		errs[k] = ScanTransitionsReader(context.Background(), bytes.NewReader(data), "t", FormatParquet, o, got[k].add)
	}
	if errs[0] != nil && (corrupt || strings.Contains(errs[0].Error(), errOptionalPage.Error())) {
		// pqPages did not hand the chunk over (see errOptionalPage), or
		// a corrupt file whose optional columns it does not read went to
		// pqarrow's record reader, whose errors are its own.
		if errs[1] == nil {
			t.Errorf("%s: pqPages: %v; parquet: no error", what, errs[0])
		}
		return handOvers, errs[0]
	}
	if fmt.Sprint(errs[0]) != fmt.Sprint(errs[1]) {
		t.Errorf("%s: pqPages: %v; parquet: %v", what, errs[0], errs[1])
	}
	if !reflect.DeepEqual(got[0], got[1]) {
		t.Errorf("%s: pqPages and parquet read different rows (%d and %d batches)", what, len(got[0].first), len(got[1].first))
	}
	return handOvers, errs[0]
}

// TestParquetPagesMatchLibrary checks that Parquet pages read by pqPages
// give the rows and errors of parquet's column chunk readers: dictionary
// and plain pages, a dictionary that falls back to plain pages part way,
// indices 1 to 17 bits wide, many pages and row groups, nulls, int64
// indices and every count type, bad values; that it reads every
// uncompressed version 1 page itself; that compressed chunks and version
// 2 pages go to parquet; and that on corrupt bytes anywhere in the pages
// both give the same rows and the same error.
func TestParquetPagesMatchLibrary(t *testing.T) {
	mem := checkedMem(t)
	sizes := []int{300, 7, 1000, 1, 64}
	wide := func(k, r int, s, a, n *int64, c *float64, null *bool) {
		*s, *n = int64(r*7919%70001), int64((r*104729+k)%65537)
	}
	type layout struct {
		props  []parquet.WriterProperty
		mutate func(k, r int, s, a, n *int64, c *float64, null *bool)
		pages  bool // pqPages reads every chunk itself
	}
	layouts := map[string]layout{
		"dictionary":        {nil, nil, true},
		"plain":             {[]parquet.WriterProperty{parquet.WithDictionaryDefault(false)}, nil, true},
		"small pages":       {[]parquet.WriterProperty{parquet.WithDataPageSize(64), parquet.WithDictionaryPageSizeLimit(64)}, nil, true},
		"wide indices":      {nil, wide, true},
		"wide, small pages": {[]parquet.WriterProperty{parquet.WithDataPageSize(300), parquet.WithDictionaryPageSizeLimit(2000)}, wide, true},
		"row groups of 50":  {[]parquet.WriterProperty{parquet.WithMaxRowGroupLength(50)}, nil, true},
		"snappy":            {[]parquet.WriterProperty{parquet.WithCompression(compress.Codecs.Snappy)}, nil, false},
		"data page v2":      {[]parquet.WriterProperty{parquet.WithDataPageVersion(parquet.DataPageV2)}, nil, false},
	}
	for name, l := range layouts {
		alloc := memory.Allocator(mem)
		if name == "data page v2" {
			alloc = nil // see TestParquetColumnsMatchLibrary
		}
		counts := []string{"float64", ""}
		if name == "dictionary" || name == "plain" {
			counts = []string{"float64", "int32", "int64", ""}
		}
		for _, count := range counts {
			what := fmt.Sprintf("%s, count %q", name, count)
			data := encodeParquet(t, pqTestRecords(mem, sizes, count, false, l.mutate), l.props...)
			for _, opts := range []ReadOptions{{BatchRows: 7}, {NoCount: true, BatchRows: 333}} {
				opts.Alloc = alloc
				handOvers, err := pagesWays(t, what, data, opts, false)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if l.pages && handOvers != 0 {
					t.Errorf("%s: pqPages handed %d chunks to parquet", what, handOvers)
				}
			}
		}
		for bname, mutate := range map[string]func(k, r int, s, a, n *int64, c *float64, null *bool){
			"null next": func(k, r int, s, a, n *int64, c *float64, null *bool) { *null = *null || k == 2 && r == 500 },
			"a run of nulls": func(k, r int, s, a, n *int64, c *float64, null *bool) {
				*null = *null || k == 2 && r >= 400 && r < 450
			},
			"negative": func(k, r int, s, a, n *int64, c *float64, null *bool) {
				if k == 4 && r == 3 {
					*s = -4
				}
			},
			"count": func(k, r int, s, a, n *int64, c *float64, null *bool) {
				if k == 1 && r == 6 {
					*c = 0
				}
			},
		} {
			data := encodeParquet(t, pqTestRecords(mem, sizes, "int64", false, mutate), l.props...)
			for _, opts := range []ReadOptions{{BatchRows: 100}} {
				opts.Alloc, opts.States = alloc, 60
				if _, err := pagesWays(t, name+" "+bname, data, opts, false); err == nil {
					t.Errorf("%s %s: no error", name, bname)
				}
			}
		}
	}

	// Corrupt bytes in the pages (everything before the footer).
	for _, name := range []string{"dictionary", "plain", "wide, small pages"} {
		l := layouts[name]
		good := encodeParquet(t, pqTestRecords(mem, sizes, "float64", false, l.mutate), l.props...)
		footer := int(binary.LittleEndian.Uint32(good[len(good)-8:]))
		pages := len(good) - 8 - footer
		rng := rand.New(rand.NewSource(int64(len(name))))
		for i := 4; i < pages; i += 1 + pages/200 {
			c := bytes.Clone(good)
			x := byte(0xA5)
			if i%2 == 1 {
				x = 1 << rng.Intn(8)
			}
			c[i] ^= x
			pagesWays(t, fmt.Sprintf("%s: byte %d ^ %#x", name, i, x), c, ReadOptions{BatchRows: 100}, true)
		}
	}
}

// hybridRun is a run of the RLE / bit-packed hybrid: n copies of value,
// or the bit-packed values (a multiple of 8 of them).
type hybridRun struct {
	n      int
	value  uint64
	packed []uint64
}

// encodeHybrid writes runs in the hybrid encoding with values w bits wide.
func encodeHybrid(w int, runs ...hybridRun) []byte {
	var b []byte
	for _, r := range runs {
		if r.packed == nil {
			b = binary.AppendUvarint(b, uint64(r.n)<<1)
			for k := range (w + 7) / 8 {
				b = append(b, byte(r.value>>(8*k)))
			}
			continue
		}
		b = binary.AppendUvarint(b, uint64(len(r.packed)/8)<<1|1)
		bits := make([]byte, len(r.packed)*w/8)
		for i, v := range r.packed {
			for k := range w {
				if v>>k&1 == 1 {
					bit := i*w + k
					bits[bit/8] |= 1 << (bit % 8)
				}
			}
		}
		b = append(b, bits...)
	}
	return b
}

// TestHybridSpecExample pins the bit order of bit-packed runs with the
// example of Parquet's encoding specification: 0 to 7 in 3 bits are the
// bytes 10001000 11000110 11111010.
func TestHybridSpecExample(t *testing.T) {
	data := append([]byte{1<<1 | 1}, 0b10001000, 0b11000110, 0b11111010)
	if enc := encodeHybrid(3, hybridRun{packed: []uint64{0, 1, 2, 3, 4, 5, 6, 7}}); !bytes.Equal(enc, data) {
		t.Fatalf("encodeHybrid: %08b, want %08b", enc, data)
	}
	dict := []int32{10, 11, 12, 13, 14, 15, 16, 17}
	p := &pqPages[int32]{width: 4, byDict: true, dict: dict, idx: pqHybrid{b: data, width: 3}}
	got := make([]int32, 8)
	if !p.values(got) || !reflect.DeepEqual(got, dict) {
		t.Fatalf("got %v, want %v", got, dict)
	}
}

// TestHybridDecode decodes runs of every width from 1 to 32 bits, in
// reads of many sizes (so that a read starts and ends anywhere in a group
// of 8), against the values encoded; and checks that a run cut short, an
// empty run and an index outside the dictionary fail.
func TestHybridDecode(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for w := 1; w <= 32; w++ {
		dictLen := min(1<<w, 5000)
		dict := make([]int64, dictLen)
		for i := range dict {
			dict[i] = rng.Int63()
		}
		var runs []hybridRun
		var want []int64
		for range 12 {
			if rng.Intn(3) == 0 {
				r := hybridRun{n: 1 + rng.Intn(30), value: uint64(rng.Intn(dictLen))}
				runs = append(runs, r)
				for range r.n {
					want = append(want, dict[r.value])
				}
				continue
			}
			r := hybridRun{packed: make([]uint64, 8*(1+rng.Intn(9)))}
			for i := range r.packed {
				r.packed[i] = uint64(rng.Intn(dictLen))
				want = append(want, dict[r.packed[i]])
			}
			runs = append(runs, r)
		}
		data := encodeHybrid(w, runs...)
		for _, step := range []int{1, 3, 8, 13, 64, len(want)} {
			p := &pqPages[int64]{width: 8, byDict: true, dict: dict, idx: pqHybrid{b: data, width: uint(w)}}
			got := make([]int64, len(want))
			for i := 0; i < len(want); i += step {
				if !p.values(got[i:min(i+step, len(want))]) {
					t.Fatalf("width %d, reads of %d: failed at value %d", w, step, i)
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("width %d, reads of %d: wrong values", w, step)
			}
			if p.values(make([]int64, 1)) {
				t.Fatalf("width %d: a value past the end", w)
			}
		}
		// Every cut of the encoding short of its end fails before the
		// values it lacks, and never panics.
		for cut := 0; cut < len(data); cut += 1 + len(data)/40 {
			p := &pqPages[int64]{width: 8, byDict: true, dict: dict, idx: pqHybrid{b: data[:cut], width: uint(w)}}
			if p.values(make([]int64, len(want))) {
				t.Fatalf("width %d: %d of %d bytes decoded all values", w, cut, len(data))
			}
		}
		// An index outside the dictionary, bit-packed or repeated.
		for _, r := range []hybridRun{{n: 3, value: uint64(dictLen)}, {packed: []uint64{0, 0, 0, 0, 0, 0, 0, uint64(dictLen)}}} {
			if dictLen == 1<<w {
				break // no index outside the dictionary fits in w bits
			}
			p := &pqPages[int64]{width: 8, byDict: true, dict: dict, idx: pqHybrid{b: encodeHybrid(w, r), width: uint(w)}}
			if p.values(make([]int64, 8)) {
				t.Fatalf("width %d: index %d of a dictionary of %d read", w, dictLen, dictLen)
			}
		}
	}
	// Empty runs end the data, as in parquet.
	for _, data := range [][]byte{{0}, {1}} {
		p := &pqPages[int32]{width: 4, byDict: true, dict: []int32{5}, idx: pqHybrid{b: data, width: 1}}
		if p.values(make([]int32, 1)) {
			t.Fatalf("empty run %v read", data)
		}
	}
}

// TestParsePageHeader parses a page header written by hand in Thrift's
// compact protocol, with a field pqPages does not know (a struct holding
// a list) to skip; and checks that every shorter prefix, a repeated field
// and a field of the wrong type are refused.
func TestParsePageHeader(t *testing.T) {
	hdr := []byte{
		0x15, 0x00, // 1: type i32 = 0 (DATA_PAGE)
		0x15, 0xc8, 0x01, // 2: uncompressed_page_size = 100
		0x15, 0xc8, 0x01, // 3: compressed_page_size = 100
		0x2c,       // 5: data_page_header
		0x15, 0x14, // 1: num_values = 10
		0x15, 0x10, // 2: encoding = 8 (RLE_DICTIONARY)
		0x15, 0x06, // 3: definition_level_encoding = 3 (RLE)
		0x15, 0x06, // 4: repetition_level_encoding = 3
		0x1c,             // 5: statistics (skipped)
		0x18, 0x02, 1, 2, // 1: binary of 2 bytes
		0x19, 0x25, 0x02, 0x04, // 2: list of 2 i32
		0x00, // end of statistics
		0x00, // end of data_page_header
		0x00, // end of PageHeader
	}
	h, n, ok := pqParsePageHeader(append(bytes.Clone(hdr), 0xee, 0xee))
	want := pqPageHeader{typ: 0, uncompressed: 100, compressed: 100, dataV1: true, values: 10, encoding: 8, defEncoding: 3}
	if !ok || n != len(hdr) || h != want {
		t.Fatalf("got %+v, %d, %v; want %+v, %d", h, n, ok, want, len(hdr))
	}
	for cut := range len(hdr) {
		if _, _, ok := pqParsePageHeader(hdr[:cut]); ok {
			t.Fatalf("a header cut to %d of %d bytes parsed", cut, len(hdr))
		}
	}
	repeated := append([]byte{0x15, 0x00, 0x05, 0x02, 0x00}, hdr[2:]...) // type twice
	if _, _, ok := pqParsePageHeader(repeated); ok {
		t.Fatal("a repeated field parsed")
	}
	wrongType := bytes.Clone(hdr)
	wrongType[0] = 0x16 // type as i64
	if _, _, ok := pqParsePageHeader(wrongType); ok {
		t.Fatal("an i64 page type parsed")
	}
}

// pageHeader writes a PageHeader in Thrift's compact protocol: a data
// page (version 1) header when typ is 0, else a dictionary page header
// (typ 2) or a bare header of another type.
func pageHeader(typ, uncompressed, compressed, values, encoding, defEncoding int32) []byte {
	zz := func(b []byte, v int32) []byte { return binary.AppendUvarint(b, uint64(uint32(v<<1^v>>31))) }
	b := zz([]byte{0x15}, typ)
	b = zz(append(b, 0x15), uncompressed)
	b = zz(append(b, 0x15), compressed)
	switch typ {
	case pqDataPage:
		b = append(b, 0x2c) // 5: data_page_header
		b = zz(append(b, 0x15), values)
		b = zz(append(b, 0x15), encoding)
		b = zz(append(b, 0x15), defEncoding)
		b = zz(append(b, 0x15), pqRLE)
		b = append(b, 0)
	case pqDictionaryPage:
		b = append(b, 0x4c) // 7: dictionary_page_header
		b = zz(append(b, 0x15), values)
		b = zz(append(b, 0x15), encoding)
		b = append(b, 0)
	}
	return append(b, 0)
}

// page is a page's header and body.
func page(typ, values, encoding, defEncoding int32, body []byte) []byte {
	return append(pageHeader(typ, int32(len(body)), int32(len(body)), values, encoding, defEncoding), body...)
}

// fakeLibrary stands in for parquet's reader in TestPagesHandOver: it
// records what pqPages skipped and reads nothing.
type fakeLibrary struct {
	skipped, skips int64
}

func (f *fakeLibrary) ReadBatch(int64, []int32, []int16, []int16) (int64, int, error) {
	return 0, 0, nil
}
func (f *fakeLibrary) Skip(n int64) (int64, error) { f.skipped = n; return min(n, f.skips), nil }
func (f *fakeLibrary) HasNext() bool               { return false }
func (f *fakeLibrary) Err() error                  { return nil }

// TestPagesHandOver reads column chunks written by hand and checks where
// pqPages stops reading them itself: at the first page it does not read as
// parquet would. Chunks hold an optional int32 column of 3 values a page
// (definition levels 1, 0, 1: two values, 7 and 9) after a dictionary of
// [7, 8, 9]. An optional column is never handed to parquet's reader (it
// loops forever on levels cut short): the read fails there with
// errOptionalPage. A required one is handed over (see the end), and
// pqOptionalPages's walk over the headers accepts only chunks of pages
// pqPages reads.
func TestPagesHandOver(t *testing.T) {
	le := func(v ...int32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, uint32(x))
		}
		return b
	}
	defs := func(levels ...uint64) []byte {
		d := encodeHybrid(1, hybridRun{packed: append(levels, make([]uint64, 8-len(levels))...)})
		return append(binary.LittleEndian.AppendUint32(nil, uint32(len(d))), d...)
	}
	dict := page(pqDictionaryPage, 3, pqPlain, 0, le(7, 8, 9))
	plain := page(pqDataPage, 3, pqPlain, pqRLE, append(defs(1, 0, 1), le(7, 9)...))
	byDict := page(pqDataPage, 3, pqRLEDictionary, pqRLE,
		append(defs(1, 0, 1), append([]byte{2}, encodeHybrid(2, hybridRun{packed: []uint64{0, 2, 0, 0, 0, 0, 0, 0}})...)...))
	cat := func(pages ...[]byte) []byte { return bytes.Join(pages, nil) }
	for _, c := range []struct {
		name  string
		chunk []byte
		read  int64 // levels pqPages reads before it stops (-1: never)
	}{
		{"clean", cat(dict, byDict, plain, byDict), -1},
		{"two dictionaries", cat(dict, dict, byDict), 0},
		{"a dictionary after data", cat(dict, byDict, dict, byDict), 3},
		{"a first dictionary after data", cat(plain, dict, byDict), 3},
		{"indices without a dictionary", cat(plain, byDict), 3},
		{"an index page", cat(dict, byDict, page(1, 0, 0, 0, nil), byDict), 3},
		{"a version 2 data page", cat(dict, byDict, page(3, 3, pqPlain, pqRLE, le(7, 9)), byDict), 3},
		{"sizes that differ", cat(dict, byDict, pageHeader(pqDataPage, int32(len(plain)), int32(len(plain))-1, 3, pqPlain, pqRLE), plain[len(pageHeader(pqDataPage, int32(len(plain)), int32(len(plain)), 3, pqPlain, pqRLE)):], byDict), 3},
		{"bit-packed levels", cat(dict, page(pqDataPage, 3, pqPlain, 4, append(defs(1, 0, 1), le(7, 9)...)), byDict), 0},
		{"a page of no values", cat(dict, page(pqDataPage, 0, pqPlain, pqRLE, defs()), byDict, plain, byDict), 0},
		{"bit width 0", cat(dict, page(pqDataPage, 3, pqRLEDictionary, pqRLE, append(defs(1, 0, 1), 0, 4, 0))), 0},
		{"bit width 33", cat(dict, page(pqDataPage, 3, pqRLEDictionary, pqRLE, append(defs(1, 0, 1), 33, 4, 0, 0, 0, 0, 0))), 0},
		{"a level of 2", cat(dict, page(pqDataPage, 3, pqPlain, pqRLE, append(append(binary.LittleEndian.AppendUint32(nil, 2), 6, 2), le(7, 9, 9, 9, 9, 9)...))), 0},
		{"plain values cut short", cat(dict, byDict, page(pqDataPage, 3, pqPlain, pqRLE, append(defs(1, 0, 1), le(7)...))), 3},
		{"a body past the chunk", cat(dict, byDict, plain)[:len(cat(dict, byDict, plain))-1], 3},
		{"a header cut short", cat(dict, byDict, plain[:5]), 3},
	} {
		lib := &fakeLibrary{skips: 1 << 40}
		handed := false
		p := newPQPages(bytes.NewReader(c.chunk), 0, int64(len(c.chunk)), 9, true, func() (pqLibrary[int32], error) {
			handed = true
			return lib, nil
		})
		values, def := make([]int32, 9), make([]int16, 9)
		levels, n, err := p.ReadBatch(9, values, def, nil)
		if c.read < 0 {
			want := []int32{7, 9, 7, 9, 7, 9}
			if handed || err != nil || levels != 9 || !reflect.DeepEqual(values[:n], want) || !reflect.DeepEqual(def, []int16{1, 0, 1, 1, 0, 1, 1, 0, 1}) {
				t.Errorf("%s: handed over %v, %d levels, values %v, levels %v, %v", c.name, handed, levels, values[:n], def, err)
			}
			if p.HasNext() || p.Err() != nil {
				t.Errorf("%s: values past the chunk's 9", c.name)
			}
			continue
		}
		if handed || !errors.Is(err, errOptionalPage) || levels != c.read {
			t.Errorf("%s: handed over %v, %d levels, error %v; want errOptionalPage after %d", c.name, handed, levels, err, c.read)
		}
	}

	// A required column: handed over after the levels read, and an error
	// when parquet's reader skips fewer.
	dictR := page(pqDictionaryPage, 3, pqPlain, 0, le(7, 8, 9))
	byDictR := page(pqDataPage, 2, pqRLEDictionary, pqRLE, append([]byte{2}, encodeHybrid(2, hybridRun{packed: []uint64{0, 2, 0, 0, 0, 0, 0, 0}})...))
	for _, skips := range []int64{1 << 40, 1} {
		lib := &fakeLibrary{skips: skips}
		chunk := cat(dictR, byDictR, dictR, byDictR)
		p := newPQPages(bytes.NewReader(chunk), 0, int64(len(chunk)), 4, false, func() (pqLibrary[int32], error) { return lib, nil })
		values := make([]int32, 4)
		levels, n, err := p.ReadBatch(4, values, nil, nil)
		if lib.skipped != 2 || levels != 2 || n != 2 || values[0] != 7 || values[1] != 9 || (err != nil) != (skips == 1) {
			t.Errorf("required, Skip skips %d: skipped %d, %d levels, values %v, error %v", skips, lib.skipped, levels, values[:n], err)
		}
	}

	// The walk over the headers.
	for _, c := range []struct {
		chunk []byte
		want  bool
	}{
		{cat(dict, byDict, plain, byDict), true},
		{cat(byDict, plain, byDict), false},
		{cat(dict, byDict, plain), false}, // 6 of the 9 values
		{cat(dict, dict, byDict, plain, byDict), false},
		{cat(dict, byDict, page(3, 3, pqPlain, pqRLE, le(7, 9)), byDict), false},
		{cat(dict, byDict, page(pqDataPage, 3, pqPlain, 4, append(defs(1, 0, 1), le(7, 9)...)), byDict), false},
	} {
		p := &pqPages[int32]{ra: bytes.NewReader(c.chunk), end: int64(len(c.chunk)), left: 9, width: 4, optional: true}
		if p.pages() != c.want {
			t.Errorf("walk over %d bytes: %v, want %v", len(c.chunk), !c.want, c.want)
		}
	}
}

// BenchmarkDictionaryIndices decodes 1Mi bit-packed dictionary indices of
// 14 bits (a dictionary of 10 000 states) into int32 values, 64Ki a call.
func BenchmarkDictionaryIndices(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	dict := make([]int32, 10000)
	packed := make([]uint64, 1<<20)
	for i := range packed {
		packed[i] = uint64(rng.Intn(len(dict)))
	}
	data := encodeHybrid(14, hybridRun{packed: packed})
	dst := make([]int32, 1<<16)
	b.SetBytes(int64(len(packed)))
	for b.Loop() {
		p := &pqPages[int32]{width: 4, byDict: true, dict: dict, idx: pqHybrid{b: data, width: 14}}
		for range len(packed) / len(dst) {
			if !p.values(dst) {
				b.Fatal("decoding failed")
			}
		}
	}
}
