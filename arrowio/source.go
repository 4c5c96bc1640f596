package arrowio

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Inputs that are not plain files: standard input and gzip-compressed
// data. Both are read front to back once. CSV and Arrow IPC streams are
// parsed as they arrive; an Arrow IPC file or a Parquet file (whose
// footer comes last: they need random access) is first copied to a
// temporary file (ReadOptions.TempDir), read from there and removed.

// StdinPath is the path that names standard input (ReadOptions.Stdin) in
// ScanTransitions; its errors name it "stdin".
const StdinPath = "-"

// stdinName is the file name errors give standard input.
const stdinName = "stdin"

// gzipMagic are the first bytes of gzip data (RFC 1952).
var gzipMagic = []byte{0x1f, 0x8b}

// isGzip reports whether head starts like gzip data. No transitions
// format starts so: a CSV header is text, and the Arrow and Parquet
// formats have magic bytes of their own.
func isGzip(head []byte) bool { return bytes.HasPrefix(head, gzipMagic) }

// contentName is the name that says a compressed input's format by its
// extension: "t.csv.gz" holds "t.csv".
func contentName(name string) string {
	if n := len(name) - len(".gz"); n > 0 && strings.EqualFold(name[n:], ".gz") {
		return name[:n]
	}
	return name
}

// gzipError is a failure of the gzip decompressor: corrupt or truncated
// compressed data. It deliberately does not unwrap (a truncated stream
// fails with io.ErrUnexpectedEOF, which readers of plain input take for a
// short last read, not for damage).
type gzipError struct{ err error }

func (e *gzipError) Error() string { return "corrupt or truncated gzip data: " + e.err.Error() }

// gzipReader marks the decompressor's errors as gzipError.
type gzipReader struct{ zr *gzip.Reader }

func (g gzipReader) Read(p []byte) (int, error) {
	n, err := g.zr.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = &gzipError{err}
	}
	return n, err
}

// IsGzipFile reports whether the file at path holds gzip-compressed data
// (by its first bytes; standard input and unreadable files: false).
func IsGzipFile(path string) bool {
	if path == StdinPath {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var head [2]byte
	n, _ := io.ReadFull(f, head[:])
	return isGzip(head[:n])
}

// sequential reads a front-to-back input: standard input (name
// "stdin", with no extension to go by) or an opened gzip file (name its
// path). gzip data is decompressed (standard input is sniffed for it).
func (s *scan) sequential(ctx context.Context, r io.Reader, name string) error {
	br := bufio.NewReaderSize(r, 1<<16)
	head, err := br.Peek(64)
	if err != nil && !errors.Is(err, io.EOF) {
		return &InputError{File: s.file, Reason: "cannot read", Err: err}
	}
	compressed := isGzip(head)
	if compressed {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return &InputError{File: s.file, Reason: "not readable as gzip data (its first bytes say gzip)", Err: err}
		}
		defer zr.Close()
		br = bufio.NewReaderSize(gzipReader{zr}, 1<<16)
		if head, err = br.Peek(64); err != nil && !errors.Is(err, io.EOF) {
			return &InputError{File: s.file, Reason: "cannot read", Err: err}
		}
		name = contentName(name)
	}
	format := s.format
	if format == "" {
		format, _ = detectFormat(name, head)
	}
	switch format {
	case FormatCSV:
		err = s.csv(ctx, br)
	case FormatArrowStream:
		err = s.ipc(ctx, ipcSource{r: br, size: -1})
	default:
		err = s.spooled(ctx, br, format)
	}
	if err == nil && compressed {
		// An IPC stream ends at its end-of-stream marker: read the rest,
		// so that the gzip trailer's checksum and length are checked.
		if _, derr := io.Copy(io.Discard, br); derr != nil {
			err = &InputError{File: s.file, Reason: fmt.Sprintf("after %d good rows", s.rows), Err: derr}
		}
	}
	return err
}

// spooled reads an Arrow IPC file or Parquet input that arrives as a
// stream: it copies it to a temporary file, reads that and removes it.
func (s *scan) spooled(ctx context.Context, r io.Reader, format string) error {
	what := "an Arrow IPC file"
	if format == FormatParquet {
		what = "a Parquet file"
	}
	tmp, err := os.CreateTemp(s.tempDir, "emsf-input-*")
	if err != nil {
		return &InputError{File: s.file, Reason: fmt.Sprintf(
			"is %s, which is read with random access: cannot create the temporary copy (set TMPDIR, or decompress it first)", what), Err: err}
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	size, err := io.Copy(tmp, contextReader{ctx, r})
	if err != nil {
		var ge *gzipError
		if errors.As(err, &ge) || ctx.Err() != nil {
			return &InputError{File: s.file, Reason: "cannot read", Err: err}
		}
		return &InputError{File: s.file, Reason: fmt.Sprintf("is %s, which is read with random access: cannot copy it to %s", what, tmp.Name()), Err: err}
	}
	if format == FormatArrowFile {
		return s.ipc(ctx, ipcSource{ra: tmp, size: size, file: true})
	}
	return s.parquet(ctx, tmp, size)
}

// contextReader stops reading once ctx is done.
type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
