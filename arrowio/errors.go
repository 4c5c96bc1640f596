package arrowio

import (
	"encoding/json"
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

// inputErrorJSON is an InputError on the wire: the underlying error as
// its message.
type inputErrorJSON struct {
	File   string `json:"file,omitempty"`
	Row    int    `json:"row,omitempty"`
	Column string `json:"column,omitempty"`
	Value  string `json:"value,omitempty"`
	Reason string `json:"reason,omitempty"`
	Err    string `json:"err,omitempty"`
}

// MarshalJSON encodes e with its underlying error as its message (so a
// worker's data error reaches a coordinator with every field, and the
// same Error text).
func (e *InputError) MarshalJSON() ([]byte, error) {
	j := inputErrorJSON{File: e.File, Row: e.Row, Column: e.Column, Value: e.Value, Reason: e.Reason}
	if e.Err != nil {
		j.Err = e.Err.Error()
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes what MarshalJSON encodes; the underlying error
// comes back as an error with its message.
func (e *InputError) UnmarshalJSON(b []byte) error {
	var j inputErrorJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*e = InputError{File: j.File, Row: j.Row, Column: j.Column, Value: j.Value, Reason: j.Reason}
	if j.Err != "" {
		e.Err = remoteError(j.Err)
	}
	return nil
}

// remoteError is an underlying error that came as its message.
type remoteError string

func (e remoteError) Error() string { return string(e) }
