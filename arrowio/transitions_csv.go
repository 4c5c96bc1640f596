package arrowio

import (
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

// csv reads CSV with a header row. Fields are trimmed of spaces; integers
// may be written as floats ("3.0", "1e3") when they are exact.
func (s *scan) csv(ctx context.Context, r io.Reader) error {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1 // checked here, for a better message
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return &InputError{File: s.file, Reason: "empty file: no header row"}
	}
	if err != nil {
		return &InputError{File: s.file, Reason: "malformed CSV header", Err: err}
	}
	header = slices.Clone(header)
	for i, h := range header {
		header[i] = strings.TrimSpace(h)
	}
	header[0] = strings.TrimPrefix(header[0], "\uFEFF") // byte order mark
	var idx [numCols]int
	for k := range numCols {
		idx[k] = slices.Index(header, s.names[k])
		if idx[k] < 0 && !(k == colCount && s.countOpt) {
			return s.missingColumn(k, header)
		}
	}
	row := 0
	s.reset(1)
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		row++
		if err != nil {
			return &InputError{File: s.file, Row: row, Reason: "malformed CSV", Err: err}
		}
		if len(rec) != len(header) {
			return &InputError{File: s.file, Row: row, Reason: fmt.Sprintf(
				"has %d fields but the header has %d (ragged or truncated row)", len(rec), len(header))}
		}
		var v [colNext + 1]int32
		for k := range colNext + 1 {
			x, err := s.parseIndex(row, k, rec[idx[k]])
			if err != nil {
				return err
			}
			v[k] = x
		}
		c := 1.0
		if idx[colCount] >= 0 {
			if c, err = s.parseCount(row, rec[idx[colCount]]); err != nil {
				return err
			}
		}
		b := &s.b
		b.State = append(b.State, v[colState])
		b.Action = append(b.Action, v[colAction])
		b.Next = append(b.Next, v[colNext])
		b.Count = append(b.Count, c)
		if b.Len() >= s.batchRows {
			if err := s.flush(ctx); err != nil {
				return err
			}
			s.reset(row + 1)
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

func (s *scan) parseIndex(row, k int, field string) (int32, error) {
	f := strings.TrimSpace(field)
	if f == "" {
		return 0, s.bad(row, k, "", reasonEmpty)
	}
	v, err := strconv.ParseInt(f, 10, 64)
	if err != nil {
		x, ferr := strconv.ParseFloat(f, 64)
		switch {
		case ferr != nil && !errors.Is(ferr, strconv.ErrRange), math.IsNaN(x), math.IsInf(x, 0), x != math.Trunc(x):
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
