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
	"path/filepath"
	"strings"

	"github.com/apache/arrow/go/v15/arrow/memory"

	"github.com/emsf/emsf/shard"
)

// Transition input formats, the values of ReadOptions.Format.
const (
	FormatCSV         = "csv"     // CSV with a header row
	FormatArrowFile   = "arrow"   // Arrow IPC file (also "feather", "ipc")
	FormatArrowStream = "arrows"  // Arrow IPC stream (also "stream")
	FormatParquet     = "parquet" // Parquet (also "pq")
)

// Default column names of transitions input.
const (
	DefaultStateCol  = "state"
	DefaultActionCol = "action"
	DefaultNextCol   = "next_state"
	DefaultCountCol  = "count"
)

// DefaultBatchRows is the default number of rows per TransitionBatch.
const DefaultBatchRows = 1 << 16

// ReadOptions configures ScanTransitions. The zero value reads the default
// columns of a file whose format is detected.
type ReadOptions struct {
	// Format is one of the Format constants; "" (default) detects it: by
	// extension (.csv; .arrow, .feather, .ipc: IPC file; .arrows, .stream:
	// IPC stream; .parquet, .pq), else by the first bytes ("ARROW1": IPC
	// file, "PAR1": Parquet, 0xFFFFFFFF: IPC stream), else CSV.
	Format string
	// Column names; "" means the default ("state", "action", "next_state",
	// "count"). The count column is optional when CountCol is "" (each row
	// then counts 1); a CountCol that is set must exist. Other columns
	// (such as "episode" and "step") are ignored.
	StateCol, ActionCol, NextCol, CountCol string
	// States and Actions, when > 0 (default 0: no bound), are the number of
	// states and actions: larger indices are an error. Indices must always
	// fit in an int32.
	States, Actions int
	// BatchRows is the most rows per batch (default DefaultBatchRows).
	BatchRows int
	// Alloc allocates Arrow buffers (default memory.NewGoAllocator()).
	Alloc memory.Allocator
	// Stdin is what ScanTransitions reads for the path StdinPath ("-")
	// (default os.Stdin).
	Stdin io.Reader
	// TempDir is where an Arrow IPC file or Parquet input that arrives
	// compressed or on standard input is copied for random access while
	// it is read (default "": os.TempDir()).
	TempDir string
	// NoCount delivers every batch with Count nil, as if the input had
	// no count column: for a second read of a file whose every count the
	// first read saw to be 1. Arrow and Parquet readers then neither read
	// nor check the count column (an Arrow IPC file's count buffers are
	// not even read from disk); the CSV reader still parses and checks it.
	NoCount bool
	// StateIDs and ActionIDs, when not nil, read the state and next_state
	// columns (ActionIDs: the action column) as user ids rather than
	// integer indices: CSV text (trimmed of spaces, as numbers are; "3" is
	// the id "3"), Arrow string, large string, binary or dictionary columns
	// of those, Parquet byte arrays. Each id is checked (shard.CheckID: a
	// bad one is a row error) and interned: the batch holds its index in
	// the vocabulary, which grows by the ids it does not hold yet, numbered
	// in row order as first seen (callers sort it at the end:
	// shard.Vocab.SortFrom). States and Actions do not bound them. When
	// nil (the default) the columns hold integer indices, and a column of
	// strings, or in CSV a value that is not a number, stops the scan
	// with a *StringIDsError. A vocabulary is grown by the scan's
	// goroutine only, in row order; each batch carries a snapshot of the
	// vocabularies that holds its ids (TransitionBatch.StateIDs,
	// ActionIDs).
	StateIDs, ActionIDs *shard.Vocab

	// chunkBytes is the size of the CSV chunks parsed in parallel
	// (default csvChunkBytes; tests make it small).
	chunkBytes int
	// libraryIPC: decode every Arrow record batch with the library,
	// never with flatRecord (tests compare the two).
	libraryIPC bool
	// libraryParquet: read Parquet with the record reader (pqread.go),
	// never with pqColumns (tests compare the two, and both with
	// pqarrow's record reader).
	libraryParquet bool
	// libraryPages: read Parquet's column chunks with parquet's column
	// chunk readers, never with pqPages (tests compare the two).
	libraryPages bool
	// handOvers, when not nil, counts the column chunks that pqPages
	// handed to parquet's reader (tests).
	handOvers *int
}

// TransitionBatch is a run of consecutive rows of transitions input. The
// slices have the same length. A scan reuses one batch: it is valid only
// during the callback, unless the callback takes its rows with Swap.
type TransitionBatch struct {
	State, Action, Next []int32
	// Count is the count column, or 1 for every row when there is none
	// (nil with ReadOptions.NoCount).
	Count []float64
	// FirstRow is the 1-based data row number of the batch's first row
	// (the header of a CSV file is not a data row).
	FirstRow int
	// StateIDs and ActionIDs are the scan's vocabularies
	// (ReadOptions.StateIDs, ActionIDs) as the batch is handed over: a
	// snapshot holding every id of its rows (StateIDs.ID(int(State[k]))
	// is row k's state id), which stays as it is while the scan grows the
	// vocabulary, so that a consumer on another goroutine may read it
	// (shard.VocabView). Zero views for columns of integers.
	StateIDs, ActionIDs shard.VocabView
}

// Len returns the number of rows in the batch.
func (b *TransitionBatch) Len() int { return len(b.State) }

// Swap exchanges the contents of b and o, views of the ids included. A
// scan's callback may swap the batch it is handed with one of its own to
// keep the rows past the call without copying them: the scan then fills
// o's former slices (growing them as needed) and never touches the slices
// it handed over again.
func (b *TransitionBatch) Swap(o *TransitionBatch) { *b, *o = *o, *b }

// NormalizeFormat returns the canonical name of a format name or alias, ""
// for "" (detect), and an error for an unknown name.
func NormalizeFormat(f string) (string, error) {
	switch strings.ToLower(f) {
	case "":
		return "", nil
	case "csv":
		return FormatCSV, nil
	case "arrow", "feather", "ipc", "file":
		return FormatArrowFile, nil
	case "arrows", "stream":
		return FormatArrowStream, nil
	case "parquet", "pq":
		return FormatParquet, nil
	}
	return "", fmt.Errorf("arrowio: unknown format %q (want csv, arrow, arrows or parquet)", f)
}

// formatFromName detects a format by file extension, "" if unknown.
func formatFromName(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".csv":
		return FormatCSV
	case ".arrow", ".feather", ".ipc":
		return FormatArrowFile
	case ".arrows", ".stream":
		return FormatArrowStream
	case ".parquet", ".pq":
		return FormatParquet
	}
	return ""
}

// formatFromMagic detects a format by the first bytes, CSV if unknown.
func formatFromMagic(head []byte) string {
	switch {
	case bytes.HasPrefix(head, []byte(fileMagic)):
		return FormatArrowFile
	case bytes.HasPrefix(head, []byte("PAR1")):
		return FormatParquet
	case bytes.HasPrefix(head, []byte{0xFF, 0xFF, 0xFF, 0xFF}):
		return FormatArrowStream
	}
	return FormatCSV
}

// DetectFormat returns the format ScanTransitions reads path in when no
// format is given: the content's magic bytes win over the extension (an
// Arrow or Parquet file named .csv, a CSV named .parquet). note is
// non-empty when the two disagree: a warning to show the user. A gzip file
// is looked at decompressed, its name without ".gz". Standard input
// (StdinPath) cannot be looked at without being consumed: its format is
// "" (ScanTransitions detects it from its first bytes).
func DetectFormat(path string) (format, note string, err error) {
	if path == StdinPath {
		return "", "", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", "", &InputError{File: path, Reason: "cannot open", Err: err}
	}
	defer f.Close()
	var head [64]byte
	n, _ := f.ReadAt(head[:], 0)
	name := path
	if isGzip(head[:n]) {
		zr, err := gzip.NewReader(f)
		n = 0
		if err == nil {
			n, _ = io.ReadFull(zr, head[:])
		}
		name = contentName(path)
	}
	format, note = detectFormat(name, head[:n])
	return format, note, nil
}

// DetectFormatBytes is DetectFormat for an input named name whose first
// bytes (up to 64) are head.
func DetectFormatBytes(name string, head []byte) (format, note string) {
	return detectFormat(name, head)
}

// detectFormat decides a file's format from its name and first bytes
// (see DetectFormat).
func detectFormat(name string, head []byte) (format, note string) {
	byName, byMagic := formatFromName(name), formatFromMagic(head)
	switch {
	case byName == "" || byName == byMagic:
		return byMagic, ""
	case byMagic != FormatCSV:
		// A binary format's magic bytes are proof.
		return byMagic, fmt.Sprintf("%s: the content is %s (by its first bytes), not %s as the name says: reading it as %s", name, byMagic, byName, byMagic)
	case (byName == FormatParquet || byName == FormatArrowFile) && looksLikeText(head):
		return FormatCSV, fmt.Sprintf("%s: the name says %s but the content looks like CSV text (no %s magic bytes): reading it as CSV", name, byName, byName)
	}
	// No magic and not text (a corrupt file), or an IPC stream whose
	// first bytes prove nothing: the name decides, and the reader says
	// what is wrong.
	return byName, ""
}

// looksLikeText reports whether head is printable text (a CSV header).
func looksLikeText(head []byte) bool {
	if len(head) == 0 {
		return false
	}
	for _, c := range head {
		if c < 0x20 && c != '\n' && c != '\r' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// ScanTransitions reads the transitions in the file at path and calls fn
// for each batch of rows, in file order, without holding the whole file in
// memory. Bad input stops the scan with an *InputError naming the file, row,
// column and value; an error returned by fn stops it and is returned as is.
// Batches already passed to fn stay passed: callers that must not act on
// partial input collect first and commit after a nil return.
//
// path StdinPath ("-") reads ReadOptions.Stdin. Standard input and a file
// whose first bytes are gzip's (whatever its name) are read front to back
// once: gzip data is decompressed as it is read, CSV and Arrow IPC streams
// are parsed as they arrive, and an Arrow IPC file or Parquet file is
// first copied to a temporary file (ReadOptions.TempDir) and removed after.
func ScanTransitions(ctx context.Context, path string, opts ReadOptions, fn func(b *TransitionBatch) error) error {
	if path == StdinPath {
		s, err := newScan(stdinName, opts, fn)
		if err != nil {
			return err
		}
		return s.sequential(ctx, cmpOr[io.Reader](opts.Stdin, os.Stdin), "")
	}
	s, err := newScan(path, opts, fn)
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return &InputError{File: path, Reason: "cannot open", Err: err}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return &InputError{File: path, Reason: "cannot stat", Err: err}
	}
	if st.IsDir() {
		return &InputError{File: path, Reason: "is a directory"}
	}
	return s.at(ctx, f, st.Size())
}

// at reads all of an input of size bytes from ra: gzip data (sniffed by
// its first bytes) as it is decompressed, anything else with random
// access.
func (s *scan) at(ctx context.Context, ra io.ReaderAt, size int64) error {
	var head [64]byte
	n, _ := ra.ReadAt(head[:], 0)
	if isGzip(head[:n]) {
		return s.sequential(ctx, io.NewSectionReader(ra, 0, size), s.file)
	}
	format := s.format
	if format == "" {
		format, _ = detectFormat(s.file, head[:n])
	}
	switch format {
	case FormatCSV:
		s.fitCSV(size)
		return s.csv(ctx, bufio.NewReaderSize(io.NewSectionReader(ra, 0, size), 1<<16))
	case FormatArrowFile:
		return s.ipc(ctx, ipcSource{ra: ra, size: size, file: true})
	case FormatArrowStream:
		return s.ipc(ctx, ipcSource{r: bufio.NewReaderSize(io.NewSectionReader(ra, 0, size), 1<<16), size: size})
	default:
		return s.parquet(ctx, io.NewSectionReader(ra, 0, size), size)
	}
}

// ScanTransitionsReader is ScanTransitions for a payload (for example a
// NATS message holding CSV or an Arrow IPC stream). name is used in errors
// and to detect the format by extension; format ("" = opts.Format, then
// detect) overrides opts.Format. CSV and IPC streams are read as they
// arrive; IPC files and Parquet (which need random access) are read into
// memory first. A payload is read as it is, never decompressed (a small
// compressed payload could expand without bound). When r has a Len() int method (bytes.Reader,
// bytes.Buffer, strings.Reader), declared lengths are checked against it.
func ScanTransitionsReader(ctx context.Context, r io.Reader, name, format string, opts ReadOptions, fn func(b *TransitionBatch) error) error {
	if format != "" {
		opts.Format = format
	}
	s, err := newScan(name, opts, fn)
	if err != nil {
		return err
	}
	size := int64(-1)
	if l, ok := r.(interface{ Len() int }); ok {
		size = int64(l.Len())
	}
	format = s.format
	if format == "" {
		br := bufio.NewReaderSize(r, 1<<16)
		head, _ := br.Peek(64)
		format, _ = detectFormat(name, head)
		r = br
	}
	switch format {
	case FormatCSV:
		return s.csv(ctx, r)
	case FormatArrowStream:
		return s.ipc(ctx, ipcSource{r: r, size: size})
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return &InputError{File: name, Reason: "cannot read", Err: err}
	}
	if format == FormatArrowFile {
		return s.ipc(ctx, ipcSource{ra: bytes.NewReader(data), size: int64(len(data)), file: true})
	}
	return s.parquet(ctx, bytes.NewReader(data), int64(len(data)))
}

// Column slots of a scan.
const (
	colState = iota
	colAction
	colNext
	colCount
	numCols
)

// scan is the state of one ScanTransitions call, shared by all formats.
type scan struct {
	file       string
	format     string
	names      [numCols]string
	countOpt   bool // the count column may be absent
	noCount    bool // ReadOptions.NoCount
	limit      [colNext + 1]int64
	bounded    [colNext + 1]bool
	ids        [colNext + 1]*shard.Vocab // the vocabulary of each index column, nil: integers
	batchRows  int
	chunkBytes int
	// sizedBatches and sizedChunks: batchRows and chunkBytes are the
	// defaults, which a CSV input of known size scales down (fitCSV).
	sizedBatches, sizedChunks bool
	libraryIPC                bool
	libraryParquet            bool
	libraryPages              bool
	handOvers                 *int
	tempDir                   string
	mem                       memory.Allocator
	fn                        func(*TransitionBatch) error
	b                         TransitionBatch
	rows                      int // data rows delivered so far
}

func newScan(file string, o ReadOptions, fn func(*TransitionBatch) error) (*scan, error) {
	format, err := NormalizeFormat(o.Format)
	if err != nil {
		return nil, err
	}
	s := &scan{file: file, format: format, fn: fn, batchRows: o.BatchRows, mem: o.Alloc}
	if s.batchRows <= 0 {
		s.batchRows, s.sizedBatches = DefaultBatchRows, true
	}
	s.chunkBytes = o.chunkBytes
	if s.chunkBytes <= 0 {
		s.chunkBytes, s.sizedChunks = csvChunkBytes, true
	}
	s.libraryIPC = o.libraryIPC
	s.libraryParquet = o.libraryParquet
	s.libraryPages, s.handOvers = o.libraryPages, o.handOvers
	s.tempDir = o.TempDir
	if s.mem == nil {
		s.mem = memory.NewGoAllocator()
	}
	s.names = [numCols]string{
		cmpOr(o.StateCol, DefaultStateCol), cmpOr(o.ActionCol, DefaultActionCol),
		cmpOr(o.NextCol, DefaultNextCol), cmpOr(o.CountCol, DefaultCountCol),
	}
	s.countOpt = o.CountCol == ""
	s.noCount = o.NoCount
	s.ids = [colNext + 1]*shard.Vocab{o.StateIDs, o.ActionIDs, o.StateIDs}
	for k, n := range []int{o.States, o.Actions, o.States} {
		s.limit[k] = 1 << 31 // indices are int32
		if n > 0 {
			s.limit[k] = int64(min(n, 1<<31))
			s.bounded[k] = true
		}
	}
	return s, nil
}

// The least CSV chunk and batch that fitCSV scales the defaults down to.
const (
	minSizedChunkBytes = 64 << 10
	minSizedBatchRows  = 4096
)

// fitCSV scales the CSV chunks and the batches that the caller left at
// their defaults (csvChunkBytes, DefaultBatchRows) to a CSV input of
// size bytes: a chunk at most a 16th of it, a batch at most size/256
// rows (a row is at least 6 bytes, "0,0,0\n", and about 8–12 in
// practice: a few dozen batches), never below minSizedChunkBytes and
// minSizedBatchRows. The defaults suit a large input, whose reading
// keeps several chunks (with their columns) and batches in flight, a few
// tens of MB; for an input of a few MB that is several times the input,
// and fresh memory is slow to touch where page faults are dear (a VM
// charging ~11 µs per 4 KiB page: a 3.5 MB file, 400 000 rows, read
// with about half the page faults; docs/quality.md, round 7). What the
// scan delivers does not change, only where its batches are cut.
func (s *scan) fitCSV(size int64) {
	if s.sizedChunks {
		s.chunkBytes = int(min(int64(s.chunkBytes), max(size/16, minSizedChunkBytes)))
	}
	if s.sizedBatches {
		s.batchRows = int(min(int64(s.batchRows), max(size/256, minSizedBatchRows)))
	}
}

func cmpOr[T comparable](s, def T) T {
	var zero T
	if s == zero {
		return def
	}
	return s
}

// missingColumn is the error for a column the input does not have.
func (s *scan) missingColumn(k int, present []string) *InputError {
	q := make([]string, len(present))
	for i, p := range present {
		q[i] = fmt.Sprintf("%q", p)
	}
	list := strings.Join(q, ", ")
	if list == "" {
		list = "none"
	}
	return &InputError{File: s.file, Column: s.names[k],
		Reason: fmt.Sprintf("no such column (columns present: %s)", list)}
}

// indexReason checks an index value (v < 0 for any negative value, v >
// MaxInt32 for any larger value) and returns why it is bad, or "".
func (s *scan) indexReason(k int, v int64) string {
	switch {
	case v < 0:
		return "is negative (indices start at 0)"
	case v >= s.limit[k] && s.bounded[k]:
		what := "states"
		if k == colAction {
			what = "actions"
		}
		return fmt.Sprintf("is out of range: must be < %d (the number of %s)", s.limit[k], what)
	case v >= s.limit[k]:
		return "is too large for an index (at most 2147483647)"
	}
	return ""
}

const (
	reasonNotInt   = "is not a non-negative integer"
	reasonStringID = reasonNotInt + " (it reads as a string id)"
	reasonBadCount = "is not a finite positive number"
	reasonNull     = "value is null"
	reasonEmpty    = "value is empty"
)

func (s *scan) bad(row, k int, value, reason string) *InputError {
	return &InputError{File: s.file, Row: row, Column: s.names[k], Value: value, Reason: reason}
}

// reset empties the batch, whose next row will be data row first.
func (s *scan) reset(first int) {
	b := &s.b
	b.State, b.Action, b.Next, b.Count = b.State[:0], b.Action[:0], b.Next[:0], b.Count[:0]
	b.FirstRow = first
}

// flush hands the batch to fn when it holds rows.
func (s *scan) flush(ctx context.Context) error {
	if s.b.Len() == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("arrowio: %s: %w", s.file, err)
	}
	s.rows += s.b.Len()
	// Every batch goes out here: the views are taken on the goroutine
	// that grows the vocabularies, after the batch's last id.
	s.b.StateIDs, s.b.ActionIDs = s.ids[colState].View(), s.ids[colAction].View()
	if s.noCount {
		counts := s.b.Count
		s.b.Count = nil
		defer func() { s.b.Count = counts }()
	}
	return s.fn(&s.b)
}

func (s *scan) noRows() error {
	return &InputError{File: s.file, Reason: "no data rows"}
}

// decodeError marks an error of the decoder (as opposed to one of a
// callback, which passes through unchanged).
type decodeError struct{ err error }

func (e *decodeError) Error() string { return e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }

func (s *scan) corrupt(what string, err error) error {
	var de *decodeError
	if !errors.As(err, &de) {
		return err
	}
	return &InputError{File: s.file,
		Reason: fmt.Sprintf("corrupt or truncated %s after %d good rows", what, s.rows), Err: de.err}
}
