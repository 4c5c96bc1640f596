package arrowio

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
)

// A dataset is read in splits, each by one reader on its own, so that a
// cluster reads it in parallel; the rows of the splits in order are the
// rows of the files in order, each read once, whatever the cut
// (PlanSplits, ScanSplit). The rules, per format, are those of Hadoop's
// LineRecordReader and parquet-mr:
//
//   - CSV: a split is a byte range of the file, and its rows are the lines
//     that start in it (a split not at the start of the file skips the
//     rest of a line begun before it; every split reads through the line
//     that crosses its end). The header, the file's first line, is read
//     by every split. A file with a quote or a carriage return that is not
//     part of a CRLF line end anywhere cannot be cut (a quoted field may
//     hold a line end): its splits fail with ErrReadWhole and it is read
//     whole.
//   - Parquet: a split reads the row groups whose midpoint (their first
//     column chunk's first page, plus half their compressed size) lies in
//     its byte range.
//   - Arrow IPC file: a split reads the record batches whose midpoint lies
//     in its byte range, as listed in the footer; a file with dictionary
//     batches, or whose record batches are not laid out one after the
//     other from the schema to the footer, is read whole.
//   - Arrow IPC streams and objects of the Object Store (DataFile.Stream)
//     are read whole.
//
// A split's batches number rows from 1 at the split's first row
// (TransitionBatch.FirstRow): a reader adds the rows of the file's earlier
// splits to get the file's row numbers. A bad row of a CSV or Arrow IPC
// file split is a *SplitRowError whose Row counts that way; it is exactly
// the error a read of the whole file gives once the rows before are
// added. Any other error of a split that is not the whole file (a bad
// row of Parquet, whose whole-file batches span row groups and so may
// meet another bad value first; a corrupt file; a bad header) is
// ErrReadWhole: the file is then read whole, which gives the error a
// local read gives.

// DefaultSplitBytes is the default size of a split.
const DefaultSplitBytes = 64 << 20

// Split is a part of a dataset that one reader reads on its own.
type Split struct {
	// Ordinal is the split's position in the dataset: splits in ordinal
	// order are the files in order, each from its start to its end.
	Ordinal int `json:"ordinal"`
	// File is the index of the split's file in the dataset.
	File int `json:"file"`
	// Offset and Length are the split's byte range of the file.
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
	// Whole: the split is the whole file, read as ScanTransitions reads
	// it.
	Whole bool `json:"whole,omitempty"`
}

// PlanSplits cuts the files of a dataset into splits of about splitBytes
// bytes (DefaultSplitBytes when < 1; the last of a file up to 1.1 times
// that), from names and sizes only: no file is opened. A file that cannot
// be cut (an IPC stream, an object), or that makes one split, is one
// whole split.
func PlanSplits(files []DataFile, splitBytes int64) []Split {
	if splitBytes < 1 {
		splitBytes = DefaultSplitBytes
	}
	var out []Split
	for k, f := range files {
		cuttable := !f.Stream && (f.Format == FormatCSV || f.Format == FormatParquet || f.Format == FormatArrowFile)
		if !cuttable || f.Size <= splitBytes+splitBytes/10 {
			out = append(out, Split{Ordinal: len(out), File: k, Length: f.Size, Whole: true})
			continue
		}
		for off := int64(0); off < f.Size; {
			n := splitBytes
			if f.Size-off <= splitBytes+splitBytes/10 {
				n = f.Size - off
			}
			out = append(out, Split{Ordinal: len(out), File: k, Offset: off, Length: n})
			off += n
		}
	}
	return out
}

// ReadWhole returns splits with file's splits replaced by one whole
// split, ordinals renumbered.
func ReadWhole(splits []Split, file int, size int64) []Split {
	out := make([]Split, 0, len(splits))
	for _, sp := range splits {
		switch {
		case sp.File != file:
			out = append(out, sp)
		case len(out) == 0 || out[len(out)-1].File != file:
			out = append(out, Split{File: file, Length: size, Whole: true})
		}
	}
	for k := range out {
		out[k].Ordinal = k
	}
	return out
}

// ErrReadWhole is the error of a split that must be read with the whole
// of its file: the file cannot be cut (see above), or the split met an
// error that only a read of the whole file gives exactly.
var ErrReadWhole = errors.New("arrowio: the split is read with its whole file")

// SplitRowError is a bad row of a split: the error a read of the whole
// file gives, but with Row counted from the split's first row.
type SplitRowError struct {
	*InputError
	// ids is the *StringIDsError the row error is, if it is one.
	ids *StringIDsError
}

func (e *SplitRowError) Unwrap() []error {
	if e.ids != nil {
		return []error{e.InputError, e.ids}
	}
	return []error{e.InputError}
}

// callbackError carries an error of ScanSplit's callback through the
// readers unchanged.
type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }

// ScanSplit reads split sp of file f, which ra reads (f.Size bytes), and
// calls fn for each batch of its rows, in order; rows are numbered from
// the split's first row. A whole split is read as ScanTransitions reads a
// file. See the comment above for the errors: fn's come back unchanged.
func ScanSplit(ctx context.Context, ra io.ReaderAt, f DataFile, sp Split, opts ReadOptions, fn func(*TransitionBatch) error) error {
	opts.Format = f.Format
	if sp.Whole {
		s, err := newScan(f.Name, opts, fn)
		if err != nil {
			return err
		}
		return s.at(ctx, ra, f.Size)
	}
	s, err := newScan(f.Name, opts, func(b *TransitionBatch) error {
		if err := fn(b); err != nil {
			return &callbackError{err}
		}
		return nil
	})
	if err != nil {
		return err
	}
	end := min(f.Size, sp.Offset+sp.Length)
	switch {
	case f.Stream:
		err = fmt.Errorf("%w: %s is read from its start", ErrReadWhole, f.Name)
	case f.Format == FormatCSV:
		err = s.csvSplit(ctx, ra, f.Size, sp.Offset, end)
	case f.Format == FormatArrowFile:
		err = s.ipc(ctx, ipcSource{ra: ra, size: f.Size, file: true, split: &[2]int64{sp.Offset, end}})
	case f.Format == FormatParquet:
		err = s.parquetSplit(ctx, ra, f.Size, sp.Offset, end)
	default:
		err = fmt.Errorf("%w: %s: format %s is read whole", ErrReadWhole, f.Name, f.Format)
	}
	var ce *callbackError
	var ie *InputError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce):
		return ce.err
	case errors.Is(err, ErrReadWhole):
		return err
	case errors.As(err, &ie) && ie.Row > 0 && (f.Format == FormatCSV || f.Format == FormatArrowFile):
		var se *StringIDsError
		errors.As(err, &se)
		return &SplitRowError{InputError: ie, ids: se}
	}
	return fmt.Errorf("%w: %s: %w", ErrReadWhole, f.Name, err)
}

// csvSplit reads the lines of a CSV file of size bytes that start in
// [off, end) (see above).
func (s *scan) csvSplit(ctx context.Context, ra io.ReaderAt, size, off, end int64) error {
	p, head, err := s.csvHead(newBufReader(io.NewSectionReader(ra, 0, size)))
	if err != nil {
		return fmt.Errorf("%w: %s: header: %w", ErrReadWhole, s.file, err)
	}
	if len(head) == 0 || head[len(head)-1] != '\n' {
		return nil // a header and nothing else
	}
	h := int64(len(head))
	start := max(off, h)
	if start > h {
		var prev [1]byte
		if _, err := ra.ReadAt(prev[:], start-1); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrReadWhole, s.file, err)
		}
		if prev[0] != '\n' {
			nl, err := nextNewline(ra, start, size)
			if err != nil {
				return fmt.Errorf("%w: %s: %w", ErrReadWhole, s.file, err)
			}
			start = nl + 1
		}
	}
	if start >= end {
		return nil
	}
	stop, err := nextNewline(ra, end-1, size)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrReadWhole, s.file, err)
	}
	p.split = true
	s.chunkBytes = min(s.chunkBytes, int(stop-start)+1) // no larger chunk buffers than the split
	s.reset(1)
	return p.run(ctx, newBufReader(io.NewSectionReader(ra, start, min(stop+1, size)-start)))
}

// nextNewline returns the position of the first '\n' at or after pos in
// the input of size bytes, or size − 1 when there is none (the last line
// has no line end).
func nextNewline(ra io.ReaderAt, pos, size int64) (int64, error) {
	var buf [4096]byte
	for pos < size {
		n, err := ra.ReadAt(buf[:min(int64(len(buf)), size-pos)], pos)
		if k := slices.Index(buf[:n], '\n'); k >= 0 {
			return pos + int64(k), nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if n == 0 {
			break
		}
		pos += int64(n)
	}
	return size - 1, nil
}

func newBufReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, 1<<16) }
