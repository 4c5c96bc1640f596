package arrowio

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"

	"github.com/emsf/emsf/shard"
)

// StringIDsError is the error of a scan that reads an index column as
// integers (ReadOptions.StateIDs or ActionIDs nil) and finds user ids: an
// Arrow or Parquet column of strings, or a CSV value that is not a number
// ("user42", "/cart"; "1.5" and "-3" are numbers, and stay the errors
// they are). A caller that accepts ids scans again with a vocabulary for
// the column (Actions says which: the action column, or the state and
// next_state columns, which share one vocabulary).
type StringIDsError struct {
	Input   *InputError
	Actions bool
}

func (e *StringIDsError) Error() string { return e.Input.Error() }
func (e *StringIDsError) Unwrap() error { return e.Input }

// reasonColumnIDs ends the reason of an Arrow or Parquet index column of
// strings.
const reasonColumnIDs = ": it holds string ids, not integer indices"

// IsStringIDs reports whether err says that an index column read as
// integers holds user ids: a StringIDsError, or the InputError it carries
// once it has crossed a wire (a worker's scan reported to a coordinator),
// which keeps its reason.
func IsStringIDs(err error) bool {
	var se *StringIDsError
	if errors.As(err, &se) {
		return true
	}
	var ie *InputError
	return errors.As(err, &ie) && (strings.HasSuffix(ie.Reason, reasonStringID[len(reasonNotInt):]) || strings.HasSuffix(ie.Reason, reasonColumnIDs))
}

// stringIDs is the StringIDsError of index column k, at a row and value
// (0 and "" for a column type).
func (s *scan) stringIDs(row, k int, value, reason string) *StringIDsError {
	return &StringIDsError{Input: &InputError{File: s.file, Row: row, Column: s.names[k], Value: shown(value), Reason: reason},
		Actions: k == colAction}
}

// anyIDs reports whether the scan reads any column as ids.
func (s *scan) anyIDs() bool { return s.ids[colState] != nil || s.ids[colAction] != nil }

// trimSpaceASCII trims the ASCII white space around a CSV id field (not
// Unicode spaces, which may be part of an id).
func trimSpaceASCII(f string) string {
	a, b := 0, len(f)
	for a < b && asciiSpace(f[a]) {
		a++
	}
	for b > a && asciiSpace(f[b-1]) {
		b--
	}
	return f[a:b]
}

// maxShown is the most bytes of a bad value an error quotes.
const maxShown = 80

// shown cuts a value to quote in an error to maxShown bytes (at a rune
// boundary when it is UTF-8), marking the cut.
func shown(v string) string {
	if len(v) <= maxShown {
		return v
	}
	cut := maxShown
	for cut > maxShown-utf8.UTFMax && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return v[:cut] + "…"
}

// intern checks id, the value of index column k (which has a vocabulary)
// in data row row, and returns its index, interning it when new.
func (s *scan) intern(row, k int, id []byte) (int32, error) {
	if r := shard.CheckID(id); r != "" {
		return 0, s.bad(row, k, shown(string(id)), r)
	}
	return s.internChecked(row, k, id)
}

// internChecked is intern for an id already checked.
func (s *scan) internChecked(row, k int, id []byte) (int32, error) {
	i, err := s.ids[k].Intern(id)
	if err != nil {
		return 0, &InputError{File: s.file, Row: row, Column: s.names[k], Reason: "cannot number this id", Err: err}
	}
	return int32(i), nil
}

// stringType reports whether an Arrow type holds ids: string, large
// string, binary, large binary, or a dictionary of one of those.
func stringType(t arrow.DataType) bool {
	if d, ok := t.(*arrow.DictionaryType); ok {
		t = d.ValueType
	}
	switch t.ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.BINARY, arrow.LARGE_BINARY:
		return true
	}
	return false
}

// checkIDColumn checks the type of index column k against the scan's
// mode: ids (a vocabulary) want a string type, integers a numeric one.
func (s *scan) checkIDColumn(k int, t arrow.DataType) error {
	switch {
	case s.ids[k] != nil && !stringType(t):
		return &InputError{File: s.file, Column: s.names[k],
			Reason: fmt.Sprintf("has type %s; it is read as ids, which want a string column (state and next_state hold ids of one kind)", t)}
	case s.ids[k] == nil && stringType(t):
		return s.stringIDs(0, k, "", fmt.Sprintf("has type %s%s", t, reasonColumnIDs))
	case s.ids[k] == nil && !numeric(t):
		return &InputError{File: s.file, Column: s.names[k],
			Reason: fmt.Sprintf("has type %s; want a numeric column (integer indices) or a string column (ids)", t)}
	}
	return nil
}

// idColumn converts rows [lo, hi) of an id column (string, binary or a
// dictionary of those) into dst, interning the ids; first is the data row
// number of row lo.
func (s *scan) idColumn(arr arrow.Array, lo, hi int, dst []int32, k, first int) error {
	switch a := arr.(type) {
	case *array.String:
		return idValues(s, a, a.ValueOffsets(), a.ValueBytes(), lo, hi, dst, k, first)
	case *array.LargeString:
		return idValues(s, a, a.ValueOffsets(), a.ValueBytes(), lo, hi, dst, k, first)
	case *array.Binary:
		return idValues(s, a, a.ValueOffsets(), a.ValueBytes(), lo, hi, dst, k, first)
	case *array.LargeBinary:
		return idValues(s, a, a.ValueOffsets(), a.ValueBytes(), lo, hi, dst, k, first)
	case *array.Dictionary:
		return s.idDictionary(a, lo, hi, dst, k, first)
	}
	return &InputError{File: s.file, Column: s.names[k],
		Reason: fmt.Sprintf("has type %s; want a string column (ids)", arr.DataType())}
}

// idValues interns the ids of rows [lo, hi) of a variable-length array
// given by its offsets and bytes.
func idValues[O int32 | int64](s *scan, arr arrow.Array, offs []O, data []byte, lo, hi int, dst []int32, k, first int) error {
	null := nullFunc(arr)
	if len(offs) < hi+1 {
		return s.shortColumn(k)
	}
	for i := lo; i < hi; i++ {
		if null != nil && null(i) {
			return s.bad(first+i-lo, k, "", reasonNull)
		}
		a, b := offs[i], offs[i+1]
		if a < 0 || a > b || int64(b) > int64(len(data)) {
			return s.shortColumn(k)
		}
		x, err := s.intern(first+i-lo, k, data[a:b])
		if err != nil {
			return err
		}
		dst[i-lo] = x
	}
	return nil
}

// idDictionary interns the ids of rows [lo, hi) of a dictionary array:
// each dictionary entry is checked and interned once, when a row first
// uses it (so the numbering is that of the rows, and an entry no row uses
// is never looked at).
func (s *scan) idDictionary(a *array.Dictionary, lo, hi int, dst []int32, k, first int) error {
	dict := a.Dictionary()
	var value func(int) []byte
	switch d := dict.(type) {
	case *array.String:
		value = func(i int) []byte { return []byte(d.Value(i)) }
	case *array.LargeString:
		value = func(i int) []byte { return []byte(d.Value(i)) }
	case *array.Binary:
		value = d.Value
	case *array.LargeBinary:
		value = d.Value
	default:
		return &InputError{File: s.file, Column: s.names[k],
			Reason: fmt.Sprintf("has type %s; want a dictionary of strings (ids)", a.DataType())}
	}
	memo := make([]int32, dict.Len()) // entry → index + 1; 0: not interned yet
	null := nullFunc(a)
	for i := lo; i < hi; i++ {
		if null != nil && null(i) {
			return s.bad(first+i-lo, k, "", reasonNull)
		}
		e := a.GetValueIndex(i)
		if e < 0 || e >= len(memo) {
			return s.shortColumn(k)
		}
		if memo[e] == 0 {
			if dict.IsNull(e) {
				return s.bad(first+i-lo, k, "", reasonNull)
			}
			x, err := s.intern(first+i-lo, k, value(e))
			if err != nil {
				return err
			}
			memo[e] = x + 1
		}
		dst[i-lo] = memo[e] - 1
	}
	return nil
}

// ScanAutoIDs calls scan with opts, and again with a fresh vocabulary for
// the column group a *StringIDsError names (the state columns, the action
// column), until it succeeds or fails otherwise: columns that hold
// integers are read as integers, columns that hold ids as ids (a CSV
// column whose later rows turn to ids is read again). It returns the
// options of the last call, whose vocabularies scan filled.
func ScanAutoIDs(opts ReadOptions, scan func(ReadOptions) error) (ReadOptions, error) {
	for {
		err := scan(opts)
		var se *StringIDsError
		if !errors.As(err, &se) {
			return opts, err
		}
		switch {
		case se.Actions && opts.ActionIDs == nil:
			opts.ActionIDs = &shard.Vocab{}
		case !se.Actions && opts.StateIDs == nil:
			opts.StateIDs = &shard.Vocab{}
		default:
			return opts, err // cannot happen: a column read as ids raises none
		}
		// The vocabularies of the failed read are dropped: fresh ones.
		opts.StateIDs, opts.ActionIDs = fresh(opts.StateIDs), fresh(opts.ActionIDs)
	}
}

func fresh(v *shard.Vocab) *shard.Vocab {
	if v == nil {
		return nil
	}
	return &shard.Vocab{}
}
