package arrowio

import (
	"fmt"
	"strings"
)

// InputError reports bad transitions input: one error naming the file, the
// 1-based data row (0 when it is not about one row; the header of a CSV
// file is not a data row), the column and the offending value.
type InputError struct {
	File   string
	Row    int
	Column string
	Value  string
	Reason string
	// Err is the underlying error, if any (an *fs.PathError, a
	// *csv.ParseError, an Arrow or Parquet decoding error).
	Err error
}

// Error reads like
//
//	arrowio: data.csv: row 17, column "state": value "1.5" is not a non-negative integer
func (e *InputError) Error() string {
	var b strings.Builder
	b.WriteString("arrowio: ")
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Row > 0 {
		fmt.Fprintf(&b, "row %d", e.Row)
		if e.Column != "" {
			b.WriteString(", ")
		} else {
			b.WriteString(": ")
		}
	}
	if e.Column != "" {
		fmt.Fprintf(&b, "column %q: ", e.Column)
	}
	if e.Value != "" {
		fmt.Fprintf(&b, "value %q ", e.Value)
	}
	b.WriteString(e.Reason)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *InputError) Unwrap() error { return e.Err }
