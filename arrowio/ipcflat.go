package arrowio

import (
	"fmt"
	"unsafe"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/endian"
	"github.com/apache/arrow/go/v15/arrow/memory"
)

// The Go Arrow IPC reader copies every buffer of a record batch, those of
// columns nobody reads included, into fresh memory. For the transitions
// scan, whose callback keeps no record, flatRecord decodes the common case
// without a copy: a schema of fixed-width primitive columns (two buffers
// each: validity and values), native byte order, no body compression. Its
// arrays are built exactly as the library's loader builds them
// (loadPrimitive: a validity buffer only when the null count is not 0, a
// values buffer only when the length is not 0, then array.MakeFromData and
// array.NewRecord), but their buffers are slices of the message body. Any
// other record batch goes to the library.

// flatSchema reports whether every field of sc is a fixed-width primitive
// that flatRecord decodes, in native byte order.
func flatSchema(sc *arrow.Schema) bool {
	if sc.Endianness() != endian.NativeEndian {
		return false
	}
	for _, f := range sc.Fields() {
		switch f.Type.ID() {
		case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64,
			arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64,
			arrow.FLOAT16, arrow.FLOAT32, arrow.FLOAT64, arrow.BOOL,
			arrow.DATE32, arrow.DATE64, arrow.TIME32, arrow.TIME64,
			arrow.TIMESTAMP, arrow.DURATION:
		default:
			return false
		}
	}
	return true
}

// flatRecord decodes the record batch message meta (verified by
// verifyMessage) with body, for a schema that flatSchema accepts. ok is
// false when the batch is compressed: the library must decode it. The
// record's buffers alias body.
func flatRecord(sc *arrow.Schema, meta, body []byte) (rec arrow.Record, ok bool, err error) {
	defer catch(&err)
	v := newFBVerifier(meta)
	msg, err := v.root()
	if err != nil {
		return nil, false, err
	}
	p, err := msg.ref(2)
	if err != nil || p < 0 {
		return nil, false, fmt.Errorf("%w: message without header", errFlatbuffer)
	}
	rb, err := v.table(p)
	if err != nil {
		return nil, false, err
	}
	if c, err := rb.ref(3); err != nil || c >= 0 {
		return nil, false, err // compressed: the library's
	}
	rows, err := rb.i64(0)
	if err != nil {
		return nil, false, err
	}
	nodes, nn, err := rb.vector(1, 16)
	if err != nil {
		return nil, false, err
	}
	bufs, nb, err := rb.vector(2, 16)
	if err != nil {
		return nil, false, err
	}
	// buffer returns buffer i of the message, as the library's
	// ipcSource.buffer would (an empty buffer for length 0).
	buffer := func(i int64) *memory.Buffer {
		if i >= nb {
			panic("arrow/ipc: buffer index out of bound")
		}
		off, n := v.i64at(bufs+16*i), v.i64at(bufs+16*i+8)
		if off < 0 || n < 0 || off > int64(len(body)) || n > int64(len(body))-off {
			panic(fmt.Sprintf("arrow/ipc: buffer %d at [%d, %d+%d) is outside the message body of %d bytes", i, off, off, n, len(body)))
		}
		if n == 0 {
			return memory.NewBufferBytes(nil)
		}
		b := body[off : off+n : off+n] // capacity n: the arrays must not see past the buffer
		if uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
			// The format aligns buffers to 8 bytes; a misaligned one
			// (a corrupt offset) is copied, as the library copies all.
			b = append(make([]byte, 0, n), b...)
		}
		return memory.NewBufferBytes(b)
	}
	cols := make([]arrow.Array, sc.NumFields())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	for i, f := range sc.Fields() {
		if int64(i) >= nn {
			panic("arrow/ipc: field metadata out of bound")
		}
		length, nulls := v.i64at(nodes+16*int64(i)), v.i64at(nodes+16*int64(i)+8)
		var validity, values *memory.Buffer
		if nulls != 0 {
			validity = buffer(2 * int64(i))
		}
		if length != 0 {
			values = buffer(2*int64(i) + 1)
		}
		data := array.NewData(f.Type, int(length), []*memory.Buffer{validity, values}, nil, int(nulls), 0)
		cols[i] = array.MakeFromData(data)
		data.Release()
	}
	return array.NewRecord(sc, cols, rows), true, nil
}

// flatRanges returns the byte ranges [offset, offset+length) of a record
// batch's body (of bodyLen bytes) that hold the buffers flatRecord loads for
// the given fields (a flat schema's field i has buffers 2i, validity, and
// 2i+1, values). ok is false when the body must be read whole: a compressed
// batch, or metadata that does not describe buffers inside the body (then
// flatRecord reports it).
func flatRanges(meta []byte, bodyLen int64, fields []int) (ranges [][2]int64, ok bool) {
	defer func() {
		if recover() != nil {
			ranges, ok = nil, false
		}
	}()
	v := newFBVerifier(meta)
	msg, err := v.root()
	if err != nil {
		return nil, false
	}
	p, err := msg.ref(2)
	if err != nil || p < 0 {
		return nil, false
	}
	rb, err := v.table(p)
	if err != nil {
		return nil, false
	}
	if c, err := rb.ref(3); err != nil || c >= 0 {
		return nil, false
	}
	nodes, nn, err := rb.vector(1, 16)
	if err != nil {
		return nil, false
	}
	bufs, nb, err := rb.vector(2, 16)
	if err != nil {
		return nil, false
	}
	add := func(i int64) bool {
		if i >= nb {
			return false
		}
		off, n := v.i64at(bufs+16*i), v.i64at(bufs+16*i+8)
		if off < 0 || n < 0 || off > bodyLen || n > bodyLen-off {
			return false
		}
		ranges = append(ranges, [2]int64{off, n})
		return true
	}
	for _, f := range fields {
		i := int64(f)
		if i >= nn {
			return nil, false
		}
		length, nulls := v.i64at(nodes+16*i), v.i64at(nodes+16*i+8)
		if nulls != 0 && !add(2*i) || length != 0 && !add(2*i+1) {
			return nil, false
		}
	}
	return ranges, true
}

// i64at returns the little-endian int64 at p, which the caller has
// checked lies in the buffer.
func (v *fbVerifier) i64at(p int64) int64 {
	return int64(uint64(v.u32(int(p))) | uint64(v.u32(int(p)+4))<<32)
}

// i64 returns the int64 field i (0 when absent).
func (t fbTable) i64(i int) (int64, error) {
	p, err := t.field(i, 8)
	if err != nil || p < 0 {
		return 0, err
	}
	return t.v.i64at(int64(p)), nil
}
