package arrowio

import (
	"context"
	"fmt"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
)

// rowSeg is a range of states [lo, hi) of one block: rows a model file or
// a part must hold, in this order.
type rowSeg struct {
	modelBlock
	lo, hi int
}

// rowCursor walks the rows a file must hold, in order: segments of
// consecutive states. It is how the streaming readers (a part, a model
// file being split) check the row order without holding the rows.
type rowCursor struct {
	m     int
	batch int // rows per record batch to read (Parquet)
	// ids: the file has the id column (some segment is a vocabulary,
	// isIDs), whose rows come after every block's.
	ids   bool
	segs  []rowSeg
	seg   int   // the current segment
	state int   // the state of the next row
	row   int64 // rows read
	total int64 // rows expected
}

func newRowCursor(n, m int, segs []rowSeg) *rowCursor {
	c := &rowCursor{m: m, batch: modelBatchRows(n, m, modelBatchBytes), segs: segs}
	for _, s := range segs {
		c.total += int64(s.hi - s.lo)
		c.ids = c.ids || isIDs(s.factor)
	}
	if len(segs) > 0 {
		c.state = segs[0].lo
	}
	return c
}

// record checks rec's rows against the expected ones and hands them to fn
// in runs of consecutive states of one segment.
func (c *rowCursor) record(rec arrow.Record, fn func(seg, state int, vals []float64) error, idFn func(seg, state int, id []byte) error) error {
	names, ok := rec.Column(0).(*array.String)
	if !ok {
		return fmt.Errorf("factor column has type %s", rec.Column(0).DataType())
	}
	if c.ids {
		// The block rows, then the vocabularies' rows (after every block).
		k := 0
		for k < int(rec.NumRows()) && !isIDs(names.Value(k)) {
			k++
		}
		if k > 0 {
			blk := rec.NewSlice(0, int64(k))
			defer blk.Release()
			if n := blk.Column(4).NullN(); n != k {
				return fmt.Errorf("row %d: a row of a block with an id", c.row+1)
			}
			if err := c.blockRows(blk, fn); err != nil {
				return err
			}
		}
		if k < int(rec.NumRows()) {
			rest := rec.NewSlice(int64(k), rec.NumRows())
			defer rest.Release()
			return c.idRows(rest, idFn)
		}
		return nil
	}
	return c.blockRows(rec, fn)
}

// idRows checks and hands on the rows of vocabularies: factor and
// consecutive states of the current segment, action −1, values null, an
// id.
func (c *rowCursor) idRows(rec arrow.Record, idFn func(seg, state int, id []byte) error) error {
	names := rec.Column(0).(*array.String)
	actions := rec.Column(1).(*array.Int32)
	states := rec.Column(2).(*array.Int32)
	vals, ids := rec.Column(3), rec.Column(4).(*array.String)
	for i := range int(rec.NumRows()) {
		if c.seg == len(c.segs) {
			return fmt.Errorf("more than the %d rows expected", c.total)
		}
		s := c.segs[c.seg]
		if !isIDs(s.factor) || names.Value(i) != s.factor || !actions.IsValid(i) || actions.Value(i) != -1 || !states.IsValid(i) ||
			int(states.Value(i)) != c.state || vals.IsValid(i) || !ids.IsValid(i) {
			return fmt.Errorf("row %d is %s action %d state %d, want %s action %d state %d with an id and no values (the row order of a model file)",
				c.row+1, names.Value(i), actions.Value(i), states.Value(i), s.factor, s.action, c.state)
		}
		if err := idFn(c.seg, c.state, ids.ValueBytes()[ids.ValueOffset(i):ids.ValueOffset(i+1)]); err != nil {
			return err
		}
		c.row++
		c.state++
		if c.state == s.hi {
			if c.seg++; c.seg < len(c.segs) {
				c.state = c.segs[c.seg].lo
			}
		}
	}
	return nil
}

// blockRows checks and hands on rows of blocks (no nulls but the id
// column's).
func (c *rowCursor) blockRows(rec arrow.Record, fn func(seg, state int, vals []float64) error) error {
	if err := noNullsIn(rec, 4); err != nil {
		return err
	}
	names := rec.Column(0).(*array.String)
	actions := rec.Column(1).(*array.Int32).Int32Values()
	states := rec.Column(2).(*array.Int32).Int32Values()
	vals, err := listRows(rec.Column(3), c.m)
	if err != nil {
		return err
	}
	rows := int(rec.NumRows())
	for i := 0; i < rows; {
		if c.seg == len(c.segs) {
			return fmt.Errorf("more than the %d rows expected", c.total)
		}
		s := c.segs[c.seg]
		if isIDs(s.factor) {
			return fmt.Errorf("row %d is %s action %d state %d, want %s action -1 state %d with an id (the row order of a model file)",
				c.row+1, names.Value(i), actions[i], states[i], s.factor, c.state)
		}
		j := i
		for j < rows && c.state+(j-i) < s.hi && int(states[j]) == c.state+(j-i) && actions[j] == s.action && names.Value(j) == s.factor {
			j++
		}
		if j == i {
			return fmt.Errorf("row %d is %s action %d state %d, want %s action %d state %d (the row order of a model file)",
				c.row+1, names.Value(i), actions[i], states[i], s.factor, s.action, c.state)
		}
		if err := fn(c.seg, c.state, vals[i*c.m:j*c.m]); err != nil {
			return err
		}
		c.row += int64(j - i)
		c.state += j - i
		i = j
		if c.state == s.hi {
			if c.seg++; c.seg < len(c.segs) {
				c.state = c.segs[c.seg].lo
			}
		}
	}
	return nil
}

// end checks that every expected row came.
func (c *rowCursor) end() error {
	if c.row != c.total {
		return fmt.Errorf("%d rows, want %d", c.row, c.total)
	}
	return nil
}

// scanModelFile streams a file in the model schema (Arrow IPC file or
// Parquet, by its magic bytes): meta gets the schema metadata and returns
// the rows the file must hold; rows gets them in runs, one record batch in
// memory at a time.
func scanModelFile(ctx context.Context, ra parquet.ReaderAtSeeker, size int64, mem memory.Allocator,
	meta func(arrow.Metadata) (*rowCursor, error), rows func(seg, state int, vals []float64) error, ids func(seg, state int, id []byte) error) error {
	var head [8]byte
	n, _ := ra.ReadAt(head[:], 0)
	var cur *rowCursor
	schema := func(sc *arrow.Schema, kv arrow.Metadata) error {
		c, err := meta(kv)
		if err != nil {
			return err
		}
		cur = c
		return checkFields(sc, modelFields(c.m, c.ids)...)
	}
	record := guard(func(rec arrow.Record) error { return cur.record(rec, rows, ids) })
	switch formatFromMagic(head[:n]) {
	case FormatArrowFile:
		err := readIPC(ipcSource{ra: ra, size: size, file: true}, mem,
			func(sc *arrow.Schema) error { return schema(sc, sc.Metadata()) }, record)
		if err != nil {
			return err
		}
	case FormatParquet:
		mem = capAllocator(mem, size)
		f, err := openPQ(ra, size, mem, 1)
		if err != nil {
			return err
		}
		// The schema metadata is in the file's key-value metadata.
		sc, err := f.schemaOf(nil)
		if err != nil {
			return err
		}
		kv := f.md
		if err := schema(arrow.NewSchema(sc.Fields(), &kv), kv); err != nil {
			return err
		}
		f.batch = int64(cur.batch)
		rr, err := f.records(nil, nil)
		if err != nil {
			return err
		}
		defer rr.release()
		for {
			rec, err := rr.next()
			if err != nil {
				return err
			}
			if rec == nil {
				break
			}
			if err := record(rec); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("neither an Arrow IPC file nor Parquet")
	}
	return cur.end()
}
