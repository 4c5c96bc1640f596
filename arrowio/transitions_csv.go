package arrowio

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// csvSlow reads CSV with a header row through encoding/csv, row by row.
// Fields are trimmed of spaces; integers may be written as floats ("3.0",
// "1e3") when they are exact. It is the reference for the fast reader
// (csv), which hands it the input wherever the fast reader is unsure.
func (s *scan) csvSlow(ctx context.Context, r io.Reader) error {
	cr := newCSVReader(r)
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return &InputError{File: s.file, Reason: "empty file: no header row"}
	}
	if err != nil {
		return &InputError{File: s.file, Reason: "malformed CSV header", Err: err}
	}
	idx, err := s.csvHeader(header)
	if err != nil {
		return err
	}
	s.reset(1)
	return s.csvRecords(ctx, cr, idx, len(header), 0, 0)
}

func newCSVReader(r io.Reader) *csv.Reader {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1 // checked here, for a better message
	cr.ReuseRecord = true
	return cr
}

// csvHeader finds the columns to read in a CSV header: idx[k] is the field
// of column slot k, -1 for an absent optional count column.
func (s *scan) csvHeader(header []string) (idx [numCols]int, err error) {
	header = slices.Clone(header)
	for i, h := range header {
		header[i] = strings.TrimSpace(h)
	}
	header[0] = strings.TrimPrefix(header[0], "\uFEFF") // byte order mark
	for k := range numCols {
		idx[k] = slices.Index(header, s.names[k])
		if idx[k] < 0 && !(k == colCount && s.countOpt) {
			e := s.missingColumn(k, header)
			if d, ok := otherDelimiter(header, s.names[k]); ok {
				e.Reason += d.hint(s.file)
			}
			return idx, e
		}
	}
	return idx, nil
}

// delimiter is a field separator other than the comma that CSV-like
// files use.
type delimiter struct {
	sep  string
	name string // as the hint says it
	tr   string // as tr(1) writes it
}

var otherDelimiters = []delimiter{
	{";", "semicolons (';')", ";"},
	{"\t", "tabs", `\t`},
	{"|", "vertical bars ('|')", "|"},
}

// hint is what the error about the header of file says when the header
// is separated by d.
func (d delimiter) hint(file string) string {
	convert := fmt.Sprintf("convert the file, e.g. tr '%s' ',' < %s > converted.csv", d.tr, file)
	if file == stdinName {
		convert = fmt.Sprintf("pipe it through tr '%s' ','", d.tr)
	}
	return fmt.Sprintf("%s%s, not commas: emsf reads comma-separated values (%s)", hintPrefix, d.name, convert)
}

// hintPrefix starts every delimiter hint: an error that holds one gets no
// second (withDelimiterHint).
const hintPrefix = "; the header is separated by "

// withDelimiterHint adds the hint to err when it is about the header
// line (malformed: quotes that encoding/csv does not read when the
// separator is not a comma, "a";"b"; or without the columns asked for)
// and the line holds another separator and no comma, unless err holds a
// hint already (csvHeader's, from the fields).
func withDelimiterHint(err error, line []byte) error {
	var ie *InputError
	if !errors.As(err, &ie) || ie.Row != 0 || bytes.IndexByte(line, ',') >= 0 || strings.Contains(ie.Reason, hintPrefix) {
		return err
	}
	for _, d := range otherDelimiters {
		if bytes.Contains(line, []byte(d.sep)) {
			ie.Reason += d.hint(ie.File)
			return err
		}
	}
	return err
}

// otherDelimiter returns the separator other than the comma that the
// header of a file written with it shows: one of its fields, split at the
// separator, holds the column name looked for, or the header is one field
// that holds the separator.
func otherDelimiter(header []string, name string) (delimiter, bool) {
	for _, d := range otherDelimiters {
		for _, h := range header {
			if !strings.Contains(h, d.sep) {
				continue
			}
			for _, f := range strings.Split(h, d.sep) {
				if strings.TrimSpace(f) == name {
					return d, true
				}
			}
			if len(header) == 1 {
				return d, true
			}
		}
	}
	return delimiter{}, false
}

// csvRecords reads the data rows of cr into batches, after row data rows
// and line lines (those before cr's input, for the line numbers of
// encoding/csv's errors) and with s.b holding the rows not yet flushed.
func (s *scan) csvRecords(ctx context.Context, cr *csv.Reader, idx [numCols]int, fields, row, line int) error {
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		row++
		if err != nil {
			if pe, ok := err.(*csv.ParseError); ok {
				pe.StartLine += line
				pe.Line += line
			}
			return &InputError{File: s.file, Row: row, Reason: "malformed CSV", Err: err}
		}
		st, ac, nx, c, err := s.csvRow(row, rec, idx, fields)
		if err != nil {
			return err
		}
		if err := s.appendRow(ctx, st, ac, nx, c, row); err != nil {
			return err
		}
	}
	if err := s.flush(ctx); err != nil {
		return err
	}
	if row == 0 {
		return s.noRows()
	}
	return nil
}

// csvRow checks and converts the fields of data row row.
func (s *scan) csvRow(row int, rec []string, idx [numCols]int, fields int) (st, ac, nx int32, c float64, err error) {
	if len(rec) != fields {
		return 0, 0, 0, 0, &InputError{File: s.file, Row: row, Reason: fmt.Sprintf(
			"has %d fields but the header has %d (ragged or truncated row)", len(rec), fields)}
	}
	var v [colNext + 1]int32
	for k := range colNext + 1 {
		if v[k], err = s.parseIndex(row, k, rec[idx[k]]); err != nil {
			return 0, 0, 0, 0, err
		}
	}
	c = 1.0
	if idx[colCount] >= 0 {
		if c, err = s.parseCount(row, rec[idx[colCount]]); err != nil {
			return 0, 0, 0, 0, err
		}
	}
	return v[colState], v[colAction], v[colNext], c, nil
}

// appendRow adds data row row to the batch, flushing it when full.
func (s *scan) appendRow(ctx context.Context, st, ac, nx int32, c float64, row int) error {
	b := &s.b
	b.State = append(b.State, st)
	b.Action = append(b.Action, ac)
	b.Next = append(b.Next, nx)
	b.Count = append(b.Count, c)
	if b.Len() >= s.batchRows {
		if err := s.flush(ctx); err != nil {
			return err
		}
		s.reset(row + 1)
	}
	return nil
}

// appendRows adds the rows of the columns, data rows row+1 to
// row+len(st), to the batch as appendRow would one at a time: in runs up
// to the batch's end, flushing it when full. c nil is a count of 1 for
// every row. It returns the number of the last row added.
func (s *scan) appendRows(ctx context.Context, st, ac, nx []int32, c []float64, row int) (int, error) {
	b := &s.b
	for len(st) > 0 {
		m := min(len(st), s.batchRows-b.Len())
		if m == s.batchRows-b.Len() {
			// The batch fills: its columns' final size at once.
			b.State, b.Action, b.Next = slices.Grow(b.State, m), slices.Grow(b.Action, m), slices.Grow(b.Next, m)
		}
		b.State, b.Action, b.Next = append(b.State, st[:m]...), append(b.Action, ac[:m]...), append(b.Next, nx[:m]...)
		st, ac, nx = st[m:], ac[m:], nx[m:]
		n := len(b.Count)
		b.Count = slices.Grow(b.Count, m)[:n+m]
		if c != nil {
			copy(b.Count[n:], c[:m])
			c = c[m:]
		} else {
			for k := range b.Count[n:] {
				b.Count[n+k] = 1
			}
		}
		row += m
		if b.Len() >= s.batchRows {
			if err := s.flush(ctx); err != nil {
				return row, err
			}
			s.reset(row + 1)
		}
	}
	return row, nil
}

// parseIndex converts the field of index column k in data row row: an
// integer index, or with a vocabulary for the column an id, interned (so
// in a scan that reads ids only the reading goroutine may call it).
func (s *scan) parseIndex(row, k int, field string) (int32, error) {
	if s.ids[k] != nil {
		return s.intern(row, k, []byte(trimSpaceASCII(field)))
	}
	f := strings.TrimSpace(field)
	if f == "" {
		return 0, s.bad(row, k, "", reasonEmpty)
	}
	v, err := strconv.ParseInt(f, 10, 64)
	if err != nil {
		x, ferr := strconv.ParseFloat(f, 64)
		switch {
		case ferr != nil && !errors.Is(ferr, strconv.ErrRange):
			return 0, s.stringIDs(row, k, field, reasonStringID)
		case math.IsNaN(x), math.IsInf(x, 0), x != math.Trunc(x):
			return 0, s.bad(row, k, field, reasonNotInt)
		case x < 0:
			v = -1
		case x > math.MaxInt32:
			v = math.MaxInt32 + 1
		default:
			v = int64(x)
		}
	}
	if reason := s.indexReason(k, v); reason != "" {
		return 0, s.bad(row, k, field, reason)
	}
	return int32(v), nil
}

func (s *scan) parseCount(row int, field string) (float64, error) {
	f := strings.TrimSpace(field)
	if f == "" {
		return 0, s.bad(row, colCount, "", reasonEmpty)
	}
	c, err := strconv.ParseFloat(f, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, s.bad(row, colCount, field, "is not a number")
	}
	if !(c > 0) || math.IsInf(c, 0) {
		return 0, s.bad(row, colCount, field, reasonBadCount)
	}
	return c, nil
}
