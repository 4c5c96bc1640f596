package arrowio

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func gzipBytes(t testing.TB, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// checkTempEmpty fails when dir (a scan's TempDir) holds anything: a
// temporary copy left behind.
func checkTempEmpty(t *testing.T, dir string) {
	t.Helper()
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

// Every format reads the same compressed (named .gz, or not: sniffed) and
// from standard input, plain or compressed; the formats that need random
// access go through a temporary copy that is removed.
func TestScanGzipAndStdin(t *testing.T) {
	for name, data := range sampleFiles(t) {
		t.Run(name, func(t *testing.T) {
			mem := checkedMem(t)
			tmp := t.TempDir()
			opts := ReadOptions{Alloc: mem, TempDir: tmp}
			gz := gzipBytes(t, data)
			for _, p := range []string{writeFile(t, name+".gz", gz), writeFile(t, "noext", gz), writeFile(t, name, gz)} {
				got, err := scanAll(context.Background(), p, opts)
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				checkSample(t, got)
				checkTempEmpty(t, tmp)
				format, _, err := DetectFormat(p)
				if want, _ := detectFormat(name, data); err != nil || format != want {
					t.Errorf("DetectFormat(%s) = %q, %v; want %q", p, format, err, want)
				}
				if !IsGzipFile(p) {
					t.Errorf("IsGzipFile(%s) = false", p)
				}
			}
			for _, in := range [][]byte{data, gz} {
				o := opts
				o.Stdin = struct{ *bytes.Reader }{bytes.NewReader(in)} // no Len: a pipe
				got, err := scanAll(context.Background(), StdinPath, o)
				if err != nil {
					t.Fatal(err)
				}
				checkSample(t, got)
				checkTempEmpty(t, tmp)
			}
			if IsGzipFile(writeFile(t, name, data)) {
				t.Error("IsGzipFile of plain data = true")
			}
		})
	}
}

// The batches and rows of a compressed input are those of the plain one,
// for a CSV long enough to take several chunks and batches.
func TestScanGzipSameBatches(t *testing.T) {
	var b strings.Builder
	b.WriteString("state,action,next_state,count\n")
	for i := range 5000 {
		b.WriteString(strings.Join([]string{strconv.Itoa(i % 97), strconv.Itoa(i % 3), strconv.Itoa((i * 7) % 101), "1.5"}, ","))
		b.WriteString("\n")
	}
	plain := []byte(b.String())
	opts := ReadOptions{BatchRows: 700, chunkBytes: 4096}
	want, err := scanAll(context.Background(), writeFile(t, "t.csv", plain), opts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := scanAll(context.Background(), writeFile(t, "t.csv.gz", gzipBytes(t, plain)), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Error("the compressed CSV reads differently from the plain one")
	}
	// Two gzip members (cat a.gz b.gz) read as their concatenation.
	half := bytes.IndexByte(plain[len(plain)/2:], '\n') + len(plain)/2 + 1
	two := append(gzipBytes(t, plain[:half]), gzipBytes(t, plain[half:])...)
	got, err = scanAll(context.Background(), writeFile(t, "two.csv.gz", two), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Error("a two-member gzip CSV reads differently from the plain one")
	}
}

// Damaged compressed data fails with one error that names the file and
// says gzip, never a parse error of the bytes it garbled, and leaves no
// temporary copy.
func TestScanGzipCorrupt(t *testing.T) {
	for name, data := range sampleFiles(t) {
		t.Run(name, func(t *testing.T) {
			tmp := t.TempDir()
			gz := gzipBytes(t, data)
			flipped := bytes.Clone(gz)
			flipped[len(flipped)-5] ^= 0xff // the CRC-32 or length of the trailer
			for what, bad := range map[string][]byte{
				"truncated": gz[:len(gz)-9],
				"checksum":  flipped,
				"header":    gz[:5],
			} {
				p := writeFile(t, name+".gz", bad)
				_, err := scanAll(context.Background(), p, ReadOptions{TempDir: tmp})
				if err == nil {
					t.Fatalf("%s: no error", what)
				}
				wantInputError(t, err, rowOf(err), "", p, "gzip")
				checkTempEmpty(t, tmp)
			}
		})
	}
}

// rowOf is the row an *InputError names (0 if none).
func rowOf(err error) int {
	if ie, ok := err.(*InputError); ok {
		return ie.Row
	}
	return 0
}

// A CSV written with another separator gets a hint that names it.
func TestScanCSVDelimiterHint(t *testing.T) {
	for _, tc := range []struct {
		text, want string
	}{
		{"state;action;next_state\n0;0;1\n", "separated by semicolons (';'), not commas"},
		{"state\taction\tnext_state\n0\t0\t1\n", `separated by tabs, not commas: emsf reads comma-separated values (convert the file, e.g. tr '\t' ','`},
		{"state|action|next_state\n0|0|1\n", "vertical bars"},
		{"id;state;action;next_state\n", "semicolons"},
		// A quote sends the header to encoding/csv, which reads it as
		// one field: the hint is said once, not by both readers.
		{"\"state;action;next_state\"\n0;0;1\n", "semicolons"},
	} {
		err := scanCSV(t, tc.text, ReadOptions{})
		wantInputError(t, err, 0, "state", "no such column", tc.want)
		if k := strings.Count(err.Error(), "separated by"); k != 1 {
			t.Errorf("%q: the hint %d times: %v", tc.text, k, err)
		}
	}
	// Quoted: encoding/csv cannot read the header at all.
	err := scanCSV(t, "\"state\";\"action\";\"next_state\"\n", ReadOptions{})
	wantInputError(t, err, 0, "", "malformed CSV header", "separated by semicolons")
	// From standard input, the hint says how to pipe it.
	_, err = scanAll(context.Background(), StdinPath, ReadOptions{Stdin: strings.NewReader("state;action;next_state\n0;0;1\n")})
	wantInputError(t, err, 0, "state", "arrowio: stdin: ", "pipe it through tr ';' ','")
	// A comma-separated header that lacks a column gets no hint, even
	// with a semicolon in another field.
	err = scanCSV(t, "s,action,next_state,note;x\n0,0,1,a\n", ReadOptions{})
	if strings.Contains(err.Error(), "separated by") {
		t.Errorf("hint for a comma-separated header: %v", err)
	}
}

// Standard input that is not there, or empty, is one clear error.
func TestScanStdinEmpty(t *testing.T) {
	_, err := scanAll(context.Background(), StdinPath, ReadOptions{Stdin: strings.NewReader("")})
	wantInputError(t, err, 0, "", "arrowio: stdin: ", "empty")
	format, note, err := DetectFormat(StdinPath)
	if format != "" || note != "" || err != nil {
		t.Errorf("DetectFormat(stdin) = %q, %q, %v: it must not read standard input", format, note, err)
	}
}

// A Parquet file on standard input cannot be copied when the temporary
// folder is missing: the error says why and what to do.
func TestScanSpoolError(t *testing.T) {
	data := sampleFiles(t)["t.parquet"]
	_, err := scanAll(context.Background(), StdinPath, ReadOptions{Stdin: bytes.NewReader(data), TempDir: "/nonexistent/emsf"})
	wantInputError(t, err, 0, "", "arrowio: stdin: is a Parquet file, which is read with random access", "TMPDIR")
}
