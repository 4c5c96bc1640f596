package arrowio

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The Go Arrow library decodes IPC metadata (flatbuffers) without
// verifying it: a corrupt vector length becomes a make() of that length,
// which the runtime cannot survive when it is terabytes, and a cycle of
// nested fields recurses until the stack is exhausted. Before any metadata
// reaches it, fbVerifier checks every table, vector and string that the
// library reads against the bounds of the buffer (what flatbuffers'
// Verifier does in C++), with limits on nesting and on the number of
// tables. The layouts follow Arrow's format/Message.fbs, Schema.fbs and
// File.fbs.

var errFlatbuffer = errors.New("corrupt Arrow IPC metadata")

const (
	fbMaxDepth = 64 // nesting of fields (children of children ...)
)

type fbVerifier struct {
	b      []byte
	budget int // tables still allowed
}

func newFBVerifier(b []byte) *fbVerifier {
	return &fbVerifier{b: b, budget: len(b)/4 + 1}
}

func (v *fbVerifier) fail(what string) error {
	return fmt.Errorf("%w: %s out of bounds", errFlatbuffer, what)
}

func (v *fbVerifier) u16(p int) int { return int(binary.LittleEndian.Uint16(v.b[p:])) }
func (v *fbVerifier) u32(p int) int64 {
	return int64(binary.LittleEndian.Uint32(v.b[p:]))
}

// in reports whether [p, p+n) lies in the buffer.
func (v *fbVerifier) in(p, n int64) bool { return p >= 0 && n >= 0 && p+n <= int64(len(v.b)) }

// fbTable is a verified table: its position, vtable and inline size.
type fbTable struct {
	v         *fbVerifier
	pos, vt   int
	nfields   int
	inlineLen int
}

// table checks the table at pos.
func (v *fbVerifier) table(pos int64) (fbTable, error) {
	if v.budget--; v.budget < 0 {
		return fbTable{}, fmt.Errorf("%w: too many tables", errFlatbuffer)
	}
	if !v.in(pos, 4) {
		return fbTable{}, v.fail("table")
	}
	vt := pos - int64(int32(binary.LittleEndian.Uint32(v.b[pos:])))
	if !v.in(vt, 4) {
		return fbTable{}, v.fail("vtable")
	}
	vtLen, inline := v.u16(int(vt)), v.u16(int(vt)+2)
	if vtLen < 4 || vtLen%2 != 0 || !v.in(vt, int64(vtLen)) || inline < 4 || !v.in(pos, int64(inline)) {
		return fbTable{}, v.fail("vtable")
	}
	return fbTable{v: v, pos: int(pos), vt: int(vt), nfields: (vtLen - 4) / 2, inlineLen: inline}, nil
}

// root checks the root table of the buffer.
func (v *fbVerifier) root() (fbTable, error) {
	if !v.in(0, 4) {
		return fbTable{}, v.fail("root")
	}
	return v.table(v.u32(0))
}

// field returns the position of field i, or -1 when it is absent, after
// checking that its size bytes lie inside the table.
func (t fbTable) field(i, size int) (int, error) {
	if i >= t.nfields {
		return -1, nil
	}
	off := t.v.u16(t.vt + 4 + 2*i)
	if off == 0 {
		return -1, nil
	}
	if off+size > t.inlineLen {
		return -1, t.v.fail("field")
	}
	return t.pos + off, nil
}

func (t fbTable) scalars(sizes ...int) error {
	for i, s := range sizes {
		if _, err := t.field(i, s); err != nil {
			return err
		}
	}
	return nil
}

// u8 returns the byte field i (0 when absent).
func (t fbTable) u8(i int) (byte, error) {
	p, err := t.field(i, 1)
	if err != nil || p < 0 {
		return 0, err
	}
	return t.v.b[p], nil
}

// ref follows the offset in field i: the position it points to, or -1.
func (t fbTable) ref(i int) (int64, error) {
	p, err := t.field(i, 4)
	if err != nil || p < 0 {
		return -1, err
	}
	return int64(p) + t.v.u32(p), nil
}

// vector checks the vector in field i with elements of elem bytes and
// returns the position of its first element and its length (-1, 0 when
// absent).
func (t fbTable) vector(i, elem int) (int64, int64, error) {
	p, err := t.ref(i)
	if err != nil || p < 0 {
		return -1, 0, err
	}
	if !t.v.in(p, 4) {
		return -1, 0, t.v.fail("vector")
	}
	n := t.v.u32(int(p))
	if !t.v.in(p+4, n*int64(elem)) {
		return -1, 0, t.v.fail("vector")
	}
	return p + 4, n, nil
}

func (t fbTable) str(i int) error {
	p, n, err := t.vector(i, 1)
	if err == nil && p >= 0 && !t.v.in(p, n+1) { // NUL terminator
		err = t.v.fail("string")
	}
	return err
}

// sub checks the table in field i with check.
func (t fbTable) sub(i int, check func(fbTable) error) error {
	p, err := t.ref(i)
	if err != nil || p < 0 {
		return err
	}
	s, err := t.v.table(p)
	if err != nil {
		return err
	}
	return check(s)
}

// tables checks each table of the vector of tables in field i.
func (t fbTable) tables(i int, check func(fbTable) error) error {
	p, n, err := t.vector(i, 4)
	if err != nil || p < 0 {
		return err
	}
	for k := range n {
		e := p + 4*k
		s, err := t.v.table(e + t.v.u32(int(e)))
		if err != nil {
			return err
		}
		if err := check(s); err != nil {
			return err
		}
	}
	return nil
}

func fbKeyValues(t fbTable, i int) error {
	return t.tables(i, func(kv fbTable) error {
		if err := kv.str(0); err != nil {
			return err
		}
		return kv.str(1)
	})
}

// Message: version short, header_type ubyte, header union, bodyLength
// long, custom_metadata [KeyValue].
func verifyMessage(b []byte) error {
	v := newFBVerifier(b)
	t, err := v.root()
	if err != nil {
		return err
	}
	if err := t.scalars(2, 1, 4, 8); err != nil {
		return err
	}
	if err := fbKeyValues(t, 4); err != nil {
		return err
	}
	ht, err := t.u8(1)
	if err != nil {
		return err
	}
	var check func(fbTable) error
	switch ht {
	case 1:
		check = fbSchema
	case 2:
		check = fbDictionaryBatch
	case 3:
		check = fbRecordBatch
	default:
		return fmt.Errorf("%w: unsupported message type %d", errFlatbuffer, ht)
	}
	if p, err := t.ref(2); err != nil || p < 0 {
		if err == nil {
			err = fmt.Errorf("%w: message without header", errFlatbuffer)
		}
		return err
	}
	return t.sub(2, check)
}

// Footer: version short, schema Schema, dictionaries [Block],
// recordBatches [Block], custom_metadata [KeyValue]; a Block is 24 bytes.
// verifyFooter returns the number of record batches it lists.
func verifyFooter(b []byte) (int, error) {
	v := newFBVerifier(b)
	t, err := v.root()
	if err != nil {
		return 0, err
	}
	if err := t.scalars(2); err != nil {
		return 0, err
	}
	if err := t.sub(1, fbSchema); err != nil {
		return 0, err
	}
	if _, _, err := t.vector(2, 24); err != nil {
		return 0, err
	}
	_, n, err := t.vector(3, 24)
	if err != nil {
		return 0, err
	}
	return int(n), fbKeyValues(t, 4)
}

// Schema: endianness short, fields [Field], custom_metadata [KeyValue],
// features [long].
func fbSchema(t fbTable) error {
	if err := t.scalars(2); err != nil {
		return err
	}
	if err := t.tables(1, func(f fbTable) error { return fbField(f, 0) }); err != nil {
		return err
	}
	if err := fbKeyValues(t, 2); err != nil {
		return err
	}
	_, _, err := t.vector(3, 8)
	return err
}

// Field: name string, nullable bool, type_type ubyte, type union,
// dictionary DictionaryEncoding, children [Field], custom_metadata
// [KeyValue].
func fbField(t fbTable, depth int) error {
	if depth > fbMaxDepth {
		return fmt.Errorf("%w: fields nested deeper than %d", errFlatbuffer, fbMaxDepth)
	}
	if err := t.str(0); err != nil {
		return err
	}
	if err := t.scalars(4, 1, 1); err != nil {
		return err
	}
	tt, err := t.u8(2)
	if err != nil {
		return err
	}
	if err := t.sub(3, func(s fbTable) error { return fbType(s, tt) }); err != nil {
		return err
	}
	// DictionaryEncoding: id long, indexType Int, isOrdered bool,
	// dictionaryKind short.
	if err := t.sub(4, func(d fbTable) error {
		if err := d.scalars(8, 4, 1, 2); err != nil {
			return err
		}
		return d.sub(1, func(s fbTable) error { return fbType(s, 2) })
	}); err != nil {
		return err
	}
	if err := t.tables(5, func(c fbTable) error { return fbField(c, depth+1) }); err != nil {
		return err
	}
	return fbKeyValues(t, 6)
}

// fbType checks a table of the Type union (Schema.fbs).
func fbType(t fbTable, typ byte) error {
	switch typ {
	case 2: // Int: bitWidth int, is_signed bool
		return t.scalars(4, 1)
	case 3, 8, 11, 18: // FloatingPoint, Date, Interval, Duration: short
		return t.scalars(2)
	case 7: // Decimal: precision, scale, bitWidth int
		return t.scalars(4, 4, 4)
	case 9: // Time: unit short, bitWidth int
		return t.scalars(2, 4)
	case 10: // Timestamp: unit short, timezone string
		if err := t.scalars(2); err != nil {
			return err
		}
		return t.str(1)
	case 14: // Union: mode short, typeIds [int]
		if err := t.scalars(2); err != nil {
			return err
		}
		_, _, err := t.vector(1, 4)
		return err
	case 15, 16: // FixedSizeBinary, FixedSizeList: int
		return t.scalars(4)
	case 17: // Map: keysSorted bool
		return t.scalars(1)
	}
	if typ > 26 {
		return fmt.Errorf("%w: unknown type %d", errFlatbuffer, typ)
	}
	return nil // types without fields
}

// RecordBatch: length long, nodes [FieldNode] (16 bytes), buffers
// [Buffer] (16 bytes), compression BodyCompression (codec byte, method
// byte), variadicBufferCounts [long].
func fbRecordBatch(t fbTable) error {
	if err := t.scalars(8); err != nil {
		return err
	}
	for _, i := range []int{1, 2} {
		if _, _, err := t.vector(i, 16); err != nil {
			return err
		}
	}
	if err := t.sub(3, func(c fbTable) error { return c.scalars(1, 1) }); err != nil {
		return err
	}
	_, _, err := t.vector(4, 8)
	return err
}

// DictionaryBatch: id long, data RecordBatch, isDelta bool.
func fbDictionaryBatch(t fbTable) error {
	if err := t.scalars(8, 4, 1); err != nil {
		return err
	}
	return t.sub(1, fbRecordBatch)
}

// ipcBlock is a Block of an IPC file's footer: a message's offset, the
// length of its prefix and metadata, and the length of its body.
type ipcBlock struct {
	offset, meta, body int64
}

// footerBlocks verifies a file footer and returns the number of its
// dictionary blocks and its record batch blocks.
func footerBlocks(b []byte) (dicts int, blocks []ipcBlock, err error) {
	if _, err := verifyFooter(b); err != nil {
		return 0, nil, err
	}
	t, err := newFBVerifier(b).root()
	if err != nil {
		return 0, nil, err
	}
	_, nd, err := t.vector(2, 24)
	if err != nil {
		return 0, nil, err
	}
	p, n, err := t.vector(3, 24)
	if err != nil {
		return 0, nil, err
	}
	for k := range n {
		e := b[p+24*k:]
		blocks = append(blocks, ipcBlock{
			offset: int64(binary.LittleEndian.Uint64(e[0:])),
			meta:   int64(int32(binary.LittleEndian.Uint32(e[8:]))),
			body:   int64(binary.LittleEndian.Uint64(e[16:])),
		})
	}
	return int(nd), blocks, nil
}
