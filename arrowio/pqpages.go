package arrowio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"unsafe"

	"github.com/apache/arrow/go/v15/parquet/compress"
	"github.com/apache/arrow/go/v15/parquet/file"
	"github.com/apache/arrow/go/v15/parquet/metadata"
)

// parquet's column chunk reader copies every page twice, even an
// uncompressed one (from its buffered stream into a decompression buffer,
// then into a freshly allocated page buffer), and decodes dictionary
// indices through converters: after the fingerprint moved to hardware CRCs
// that was most of what a Parquet read paid beyond an Arrow IPC read
// (docs/benchmarks.md, ingest round 6). pqPages reads the pages of one
// uncompressed column chunk itself: each page with one pread into a
// buffer it reuses, PLAIN values and RLE_DICTIONARY indices decoded
// straight into the batch.
//
// It reads only what it is sure parquet reads the same way: a dictionary
// page (PLAIN) first if any, then version 1 data pages of PLAIN or
// dictionary values, definition levels (if any) in RLE, each page's
// compressed and uncompressed sizes equal, every run whole, every index in
// the dictionary. On anything else, from a page type it does not read to
// a corrupt byte, it hands the chunk to parquet's column chunk reader,
// which skips the values already read and goes on from there: what parquet
// makes of the rest, values or error, is then what the scan gets
// (TestParquetPagesMatchLibrary compares the two on good, odd and corrupt
// files).

// Parquet's page types and encodings (parquet.thrift).
const (
	pqDataPage       = 0
	pqDictionaryPage = 2

	pqPlain               = 0
	pqPlainDictionary     = 2
	pqRLE                 = 3
	pqRLEDictionary       = 8
	pqMaxPageHeaderLength = 64 << 10
)

// pqValue is a physical type pqPages decodes.
type pqValue interface{ int32 | int64 | float64 }

// errOptionalPage is the error of a page of an optional column that
// pqPages cannot read: it never hands such a chunk over, since parquet's
// column chunk reader loops forever on definition levels that end early.
// pqColumns reads a file with optional columns only when pqPages reads
// each of their pages by its header (pqOptionalPages); the record reader
// (pqread.go, over parquet's record readers), which stops there with an
// error, reads the others.
var errOptionalPage = errors.New("parquet: corrupt page in a column that allows nulls (definition levels or values cut short, a level other than 0 and 1, or an index outside the dictionary)")

// pqBatches reads a column chunk of T values in batches, as parquet's
// typed column chunk reader does (pqPages too).
type pqBatches[T pqValue] interface {
	ReadBatch(batchSize int64, values []T, defLvls, repLvls []int16) (total int64, valuesRead int, err error)
}

// pqLibrary is parquet's typed column chunk reader of T.
type pqLibrary[T pqValue] interface {
	pqBatches[T]
	Skip(nvalues int64) (int64, error)
	HasNext() bool
	Err() error
}

// pqChunk says where a column chunk's pages lie, or false when pqPages
// must leave it to parquet (compressed, encrypted, or from a writer whose
// sizes parquet pads). Corrupt metadata that makes parquet panic is left
// to parquet's reader too, which reports it.
func pqChunk(md *metadata.FileMetaData, rg *file.RowGroupReader, leaf int, size int64) (start, end, values int64, ok bool) {
	defer func() {
		if recover() != nil {
			start, end, values, ok = 0, 0, 0, false
		}
	}()
	col, err := rg.MetaData().ColumnChunk(leaf)
	if err != nil || col.CryptoMetadata() != nil || col.Compression() != compress.Codecs.Uncompressed {
		return 0, 0, 0, false
	}
	if md.WriterVersion().LessThan(metadata.Parquet816FixedVersion) {
		return 0, 0, 0, false
	}
	start = col.DataPageOffset()
	if col.HasDictionaryPage() && col.DictionaryPageOffset() > 0 && start > col.DictionaryPageOffset() {
		start = col.DictionaryPageOffset()
	}
	n := col.TotalCompressedSize()
	if start < 0 || n < 0 || start > size || n > size-start {
		return 0, 0, 0, false
	}
	return start, start + n, col.NumValues(), true
}

// pqPages reads one column chunk of T values (see above). open opens
// parquet's reader of the same chunk, for the hand-over.
type pqPages[T pqValue] struct {
	ra       io.ReaderAt
	off, end int64 // the next page header, the chunk's end
	left     int64 // values the chunk's metadata promises beyond the pages read
	width    int   // bytes a value
	optional bool  // definition levels (max 1) precede the values
	open     func() (pqLibrary[T], error)
	lib      pqLibrary[T] // after the hand-over
	read     int64        // levels handed out
	dict     []T
	hasDict  bool
	data     bool   // a data page was read
	hdr, buf []byte // reused
	// the page being read
	n      int      // levels left in it
	defs   pqHybrid // its definition levels, when optional
	plain  []byte   // its PLAIN values
	idx    pqHybrid // or its dictionary indices
	byDict bool
}

func newPQPages[T pqValue](ra io.ReaderAt, start, end, values int64, optional bool, open func() (pqLibrary[T], error)) *pqPages[T] {
	var zero T
	width := 4
	switch any(zero).(type) {
	case int64, float64:
		width = 8
	}
	return &pqPages[T]{ra: ra, off: start, end: end, left: values, width: width, optional: optional, open: open}
}

// ReadBatch reads up to m levels into def (when optional) and their
// non-null values into values, as parquet's column chunk reader's
// ReadBatch does (repetition levels: none).
func (p *pqPages[T]) ReadBatch(m int64, values []T, def, _ []int16) (levels int64, n int, err error) {
	if p.lib == nil {
		for levels < m {
			if p.n == 0 {
				ok, end := p.page()
				if end {
					return levels, n, nil
				}
				if !ok {
					break
				}
			}
			k := int(min(m-levels, int64(p.n)))
			nv := k
			if p.optional {
				if nv = p.levels(def[levels : levels+int64(k)]); nv < 0 {
					break
				}
			}
			if !p.values(values[n : n+nv]) {
				break
			}
			levels += int64(k)
			n += nv
			p.n -= k
			p.read += int64(k)
		}
		if levels == m {
			return levels, n, nil
		}
		if err := p.stop(); err != nil {
			return levels, n, err
		}
	}
	if def != nil {
		def = def[levels:]
	}
	l, v, err := p.lib.ReadBatch(m-levels, values[n:], def, nil)
	return levels + l, n + v, err
}

// HasNext reports whether the chunk has values left, as parquet's
// reader does.
func (p *pqPages[T]) HasNext() bool {
	if p.lib == nil {
		if p.n > 0 {
			return true
		}
		ok, end := p.page()
		if end {
			return false
		}
		if ok {
			return true
		}
		p.stop()
	}
	return p.lib.HasNext()
}

// Err is the error that ended the chunk, if any.
func (p *pqPages[T]) Err() error {
	if p.lib == nil {
		return nil
	}
	return p.lib.Err()
}

// stop ends pqPages's reading of the chunk at a page it does not read: a
// required column goes on with parquet's reader (p.lib), an optional one
// fails with errOptionalPage. It returns the error that ends the chunk
// there, which p.lib then reports too.
func (p *pqPages[T]) stop() error {
	err := errOptionalPage
	if !p.optional {
		err = p.handOver()
	}
	if err != nil {
		p.lib = pqFailed[T]{err}
	}
	return err
}

// handOver opens parquet's reader of the chunk into p.lib and skips the
// levels already read.
func (p *pqPages[T]) handOver() error {
	lib, err := p.open()
	if err != nil {
		return err
	}
	if p.read > 0 {
		skipped, err := lib.Skip(p.read)
		if err != nil {
			return err
		}
		if skipped != p.read {
			return fmt.Errorf("parquet: column chunk has %d values where its pages were read to %d", skipped, p.read)
		}
	}
	p.lib = lib
	return nil
}

// pqFailed is a hand-over that failed.
type pqFailed[T pqValue] struct{ err error }

func (f pqFailed[T]) ReadBatch(int64, []T, []int16, []int16) (int64, int, error) { return 0, 0, f.err }
func (f pqFailed[T]) Skip(int64) (int64, error)                                  { return 0, f.err }
func (f pqFailed[T]) HasNext() bool                                              { return false }
func (f pqFailed[T]) Err() error                                                 { return f.err }

// page reads the next data page (a dictionary page before it, if first).
// end: the chunk's metadata promises no more values; !ok: a page pqPages
// does not read.
func (p *pqPages[T]) page() (ok, end bool) {
	for {
		if p.left <= 0 {
			return false, true
		}
		h, body, ok := p.next()
		if !ok {
			return false, false
		}
		switch p.kind(h) {
		case pqDictionaryPage:
			p.dict = pqPlainValues(make([]T, h.values), body)
			p.hasDict = true
		case pqDataPage:
			p.data = true
			p.left -= int64(h.values)
			if p.optional {
				if len(body) < 4 {
					return false, false
				}
				l := binary.LittleEndian.Uint32(body)
				if uint64(l) > uint64(len(body)-4) {
					return false, false
				}
				p.defs = pqHybrid{b: body[4 : 4+l], width: 1}
				body = body[4+l:]
			}
			switch {
			case h.encoding == pqPlain:
				p.plain, p.byDict = body, false
			case len(body) > 0 && body[0] > 0 && body[0] <= 32:
				p.idx, p.byDict = pqHybrid{b: body[1:], width: uint(body[0])}, true
			default:
				return false, false
			}
			p.n = int(h.values)
			return true, false
		default:
			return false, false
		}
	}
}

// kind says how pqPages reads the page of header h, whose body it has
// checked to be h.compressed bytes: as the chunk's dictionary
// (pqDictionaryPage), as a data page (pqDataPage), or not (-1).
func (p *pqPages[T]) kind(h pqPageHeader) int {
	switch {
	case h.typ == pqDictionaryPage && h.dict && !p.hasDict && !p.data &&
		(h.encoding == pqPlain || h.encoding == pqPlainDictionary) && int64(h.compressed) == int64(h.values)*int64(p.width):
		return pqDictionaryPage
	case h.typ == pqDataPage && h.dataV1 && h.values > 0 && (!p.optional || h.defEncoding == pqRLE) &&
		(h.encoding == pqPlain || (h.encoding == pqPlainDictionary || h.encoding == pqRLEDictionary) && p.hasDict):
		return pqDataPage
	}
	return -1
}

// pages reports whether pqPages reads every page of the chunk by kind,
// from their headers alone (a run of preads of a few hundred bytes).
func (p *pqPages[T]) pages() bool {
	for p.left > 0 {
		h, ok := p.header()
		if !ok || h.compressed != h.uncompressed || h.compressed < 0 || int64(h.compressed) > p.end-p.off {
			return false
		}
		switch p.kind(h) {
		case pqDictionaryPage:
			p.hasDict = true
		case pqDataPage:
			p.data = true
			p.left -= int64(h.values)
		default:
			return false
		}
		p.off += int64(h.compressed)
	}
	return true
}

// next reads the next page's header and body.
func (p *pqPages[T]) next() (h pqPageHeader, body []byte, ok bool) {
	if h, ok = p.header(); !ok {
		return h, nil, false
	}
	if h.compressed != h.uncompressed || h.compressed < 0 || int64(h.compressed) > p.end-p.off {
		return h, nil, false
	}
	p.buf = grow(p.buf, int(h.compressed))
	if !readAt(p.ra, p.buf, p.off) {
		return h, nil, false
	}
	p.off += int64(h.compressed)
	return h, p.buf, true
}

// header reads the next page's header.
func (p *pqPages[T]) header() (h pqPageHeader, ok bool) {
	left := p.end - p.off
	for size := int64(256); ; size = pqMaxPageHeaderLength {
		size = min(size, left)
		if size <= 0 {
			return h, false
		}
		p.hdr = grow(p.hdr, int(size))
		if !readAt(p.ra, p.hdr, p.off) {
			return h, false
		}
		var n int
		if h, n, ok = pqParsePageHeader(p.hdr); ok {
			p.off += int64(n)
			return h, true
		}
		if size == pqMaxPageHeaderLength || size == left {
			return h, false
		}
	}
}

// readAt fills b from ra at off.
func readAt(ra io.ReaderAt, b []byte, off int64) bool {
	n, err := ra.ReadAt(b, off)
	return n == len(b) && (err == nil || err == io.EOF)
}

// levels decodes len(def) definition levels, each 0 or 1, and returns how
// many are 1 (-1: the levels end or hold another value).
func (p *pqPages[T]) levels(def []int16) int {
	ones := 0
	for i := 0; i < len(def); {
		if p.defs.rep == 0 && p.defs.lit == 0 && !p.defs.next() {
			return -1
		}
		if p.defs.rep > 0 {
			if p.defs.val > 1 {
				return -1
			}
			t := min(p.defs.rep, len(def)-i)
			for j := range t {
				def[i+j] = int16(p.defs.val)
			}
			ones += t * int(p.defs.val)
			p.defs.rep -= t
			i += t
			continue
		}
		t := min(p.defs.lit, len(def)-i)
		for j := range t {
			v := p.defs.literal()
			def[i+j] = int16(v)
			ones += int(v)
		}
		p.defs.lit -= t
		i += t
	}
	return ones
}

// values decodes len(dst) values of the page, false when it has fewer or
// an index outside the dictionary.
func (p *pqPages[T]) values(dst []T) bool {
	if !p.byDict {
		if len(p.plain) < len(dst)*p.width {
			return false
		}
		pqPlainValues(dst, p.plain)
		p.plain = p.plain[len(dst)*p.width:]
		return true
	}
	d := &p.idx
	dict := p.dict
	for i := 0; i < len(dst); {
		if d.rep == 0 && d.lit == 0 && !d.next() {
			return false
		}
		if d.rep > 0 {
			if d.val >= uint64(len(dict)) {
				return false
			}
			t := min(d.rep, len(dst)-i)
			v := dict[d.val]
			for j := range t {
				dst[i+j] = v
			}
			d.rep -= t
			i += t
			continue
		}
		t := min(d.lit, len(dst)-i)
		if !pqLiterals(dst[i:i+t], dict, d.b, d.bit, int(d.width), d.lit, &d.bit) {
			return false
		}
		d.lit -= t
		i += t
	}
	return true
}

// pqPlainValues decodes len(dst) PLAIN values from b (little-endian).
func pqPlainValues[T pqValue](dst []T, b []byte) []T {
	switch d := any(dst).(type) {
	case []int32:
		b = b[:4*len(d)]
		for i := range d {
			d[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case []int64:
		b = b[:8*len(d)]
		for i := range d {
			d[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
	case []float64:
		b = b[:8*len(d)]
		for i := range d {
			d[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
	}
	return dst
}

// pqHybrid decodes Parquet's RLE / bit-packed hybrid of values width bits
// wide, runs whole: a run is read only when all its bytes are there.
type pqHybrid struct {
	b     []byte
	width uint
	pos   int    // the next run's header in b
	rep   int    // values left in the repeated run
	val   uint64 // its value
	lit   int    // values left in the bit-packed run
	bit   int    // the next bit-packed value's first bit in b
}

// next starts the next run, false at the end of b or at a run that is
// empty, too long or not whole.
func (d *pqHybrid) next() bool {
	h, n := binary.Uvarint(d.b[d.pos:])
	if n <= 0 {
		return false
	}
	d.pos += n
	count := h >> 1
	if h&1 == 1 {
		if count == 0 || count > math.MaxInt32/8 {
			return false
		}
		bytes := count * uint64(d.width)
		if bytes > uint64(len(d.b)-d.pos) {
			return false
		}
		d.lit, d.bit = int(count)*8, 8*d.pos
		d.pos += int(bytes)
		return true
	}
	if count == 0 || count > math.MaxInt32 {
		return false
	}
	nb := int(d.width+7) / 8
	if nb > len(d.b)-d.pos {
		return false
	}
	d.val = 0
	for k := range nb {
		d.val |= uint64(d.b[d.pos+k]) << (8 * k)
	}
	d.pos += nb
	d.rep = int(count)
	return true
}

// literal returns the next bit-packed value.
func (d *pqHybrid) literal() uint64 {
	v := pqWord(d.b, d.bit>>3) >> (d.bit & 7) & (1<<d.width - 1)
	d.bit += int(d.width)
	return v
}

// pqWord returns the 8 bytes of b at i, little-endian, zeros past its end.
func pqWord(b []byte, i int) uint64 {
	if i+8 <= len(b) {
		return binary.LittleEndian.Uint64(b[i:])
	}
	var w uint64
	for k := 0; i+k < len(b) && k < 8; k++ {
		w |= uint64(b[i+k]) << (8 * k)
	}
	return w
}

// pqSlow is pqLiterals one index at a time; it returns the next index's
// first bit.
func pqSlow[T pqValue](dst, dict []T, b []byte, bit, w int) (int, bool) {
	mask := uint64(1)<<w - 1
	for i := range dst {
		v := pqWord(b, bit>>3) >> (bit & 7) & mask
		if v >= uint64(len(dict)) {
			return bit, false
		}
		dst[i] = dict[v]
		bit += w
	}
	return bit, true
}

// pqLiterals decodes len(dst) bit-packed indices of w bits from bit bit
// of b into their values in dict, false at an index outside dict; it
// stores the next index's first bit in *next. lit is how many values the
// run has left from bit: the run's groups of 8 values start every w bytes
// from its end.
func pqLiterals[T pqValue](dst, dict []T, b []byte, bit, w, lit int, next *int) bool {
	mask := uint64(1)<<w - 1
	n := uint64(len(dict))
	i := min(lit%8, len(dst)) // up to the next group
	bit, ok := pqSlow(dst[:i], dict, b, bit, w)
	if !ok {
		return false
	}
	// Whole groups with 8-byte loads while they stay inside b (the test
	// below: the last load starts at byte 7w/8 of the group's w); each
	// value is at the same offset in every group. No bounds checks: the
	// loads stay inside b, and the indices are checked against the
	// dictionary's length before their values are read.
	a1, a2, a3, a4, a5, a6, a7 := uintptr(w>>3), uintptr(2*w>>3), uintptr(3*w>>3), uintptr(4*w>>3), uintptr(5*w>>3), uintptr(6*w>>3), uintptr(7*w>>3)
	s1, s2, s3, s4, s5, s6, s7 := w&7, 2*w&7, 3*w&7, 4*w&7, 5*w&7, 6*w&7, 7*w&7
	if len(b) >= 8 && len(dict) > 0 {
		base, d0 := unsafe.Pointer(unsafe.SliceData(b)), unsafe.Pointer(unsafe.SliceData(dict))
		size := unsafe.Sizeof(dict[0])
		for ; i+8 <= len(dst) && bit>>3+w+8 <= len(b); i += 8 {
			g := unsafe.Add(base, bit>>3)
			v0 := pqLoad(g, 0) & mask
			v1 := pqLoad(g, a1) >> s1 & mask
			v2 := pqLoad(g, a2) >> s2 & mask
			v3 := pqLoad(g, a3) >> s3 & mask
			v4 := pqLoad(g, a4) >> s4 & mask
			v5 := pqLoad(g, a5) >> s5 & mask
			v6 := pqLoad(g, a6) >> s6 & mask
			v7 := pqLoad(g, a7) >> s7 & mask
			if max(v0, v1, v2, v3, v4, v5, v6, v7) >= n {
				return false
			}
			o := dst[i : i+8 : i+8]
			o[0], o[1] = *(*T)(unsafe.Add(d0, uintptr(v0)*size)), *(*T)(unsafe.Add(d0, uintptr(v1)*size))
			o[2], o[3] = *(*T)(unsafe.Add(d0, uintptr(v2)*size)), *(*T)(unsafe.Add(d0, uintptr(v3)*size))
			o[4], o[5] = *(*T)(unsafe.Add(d0, uintptr(v4)*size)), *(*T)(unsafe.Add(d0, uintptr(v5)*size))
			o[6], o[7] = *(*T)(unsafe.Add(d0, uintptr(v6)*size)), *(*T)(unsafe.Add(d0, uintptr(v7)*size))
			bit += 8 * w
		}
	}
	if bit, ok = pqSlow(dst[i:], dict, b, bit, w); !ok {
		return false
	}
	*next = bit
	return true
}

// pqLoad returns the 8 bytes at p+off, little-endian.
func pqLoad(p unsafe.Pointer, off uintptr) uint64 {
	return binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(p, off))[:])
}

// pqPageHeader is what pqPages reads of a page header (parquet.thrift's
// PageHeader, DataPageHeader and DictionaryPageHeader).
type pqPageHeader struct {
	typ, uncompressed, compressed int32
	dataV1, dict                  bool // the data page or dictionary page header was there
	values, encoding, defEncoding int32
}

// pqParsePageHeader parses a PageHeader in Thrift's compact protocol from
// the start of b and returns its length, false when b does not hold one
// whole with the fields pqPages needs once each in their types.
func pqParsePageHeader(b []byte) (h pqPageHeader, n int, ok bool) {
	r := thriftCompact{b: b}
	var seen uint32
	ok = r.fields(0, func(id int16, typ byte) bool {
		if !tcOnce(&seen, id, 8) {
			return false
		}
		switch id {
		case 1, 2, 3:
			v, ok := r.i32(typ)
			*[...]*int32{&h.typ, &h.uncompressed, &h.compressed}[id-1] = v
			return ok
		case 5:
			h.dataV1 = true
			return r.subHeader(typ, &h.values, &h.encoding, &h.defEncoding, true)
		case 7:
			h.dict = true
			return r.subHeader(typ, &h.values, &h.encoding, nil, false)
		}
		return r.skip(typ, 0)
	})
	if !ok || seen&0b1110 != 0b1110 {
		return h, 0, false
	}
	return h, r.pos, true
}

// thriftCompact reads Thrift's compact protocol from b, with bounds.
type thriftCompact struct {
	b   []byte
	pos int
}

// Thrift compact types.
const (
	tcTrue   = 1
	tcFalse  = 2
	tcByte   = 3
	tcI16    = 4
	tcI32    = 5
	tcI64    = 6
	tcDouble = 7
	tcBinary = 8
	tcList   = 9
	tcSet    = 10
	tcMap    = 11
	tcStruct = 12
	// tcMaxDepth bounds the nesting of skipped values.
	tcMaxDepth = 32
)

// fields reads a struct's fields up to its stop, calling field for each.
func (r *thriftCompact) fields(depth int, field func(id int16, typ byte) bool) bool {
	if depth > tcMaxDepth {
		return false
	}
	var id int16
	for {
		if r.pos >= len(r.b) {
			return false
		}
		c := r.b[r.pos]
		r.pos++
		if c == 0 {
			return true
		}
		if delta := int16(c >> 4); delta != 0 {
			id += delta
		} else {
			v, ok := r.varint()
			if !ok || v < math.MinInt16 || v > math.MaxInt16 {
				return false
			}
			id = int16(v)
		}
		if !field(id, c&0x0f) {
			return false
		}
	}
}

// subHeader reads a DataPageHeader (v1) or DictionaryPageHeader: num
// values, encoding and, for a data page, the definition levels' encoding.
func (r *thriftCompact) subHeader(typ byte, values, encoding, defEncoding *int32, data bool) bool {
	if typ != tcStruct {
		return false
	}
	var seen uint32
	ok := r.fields(1, func(id int16, typ byte) bool {
		if !tcOnce(&seen, id, 5) {
			return false
		}
		switch {
		case id == 1 || id == 2 || id == 3 && data:
			v, ok := r.i32(typ)
			*[...]*int32{values, encoding, defEncoding}[id-1] = v
			return ok
		case id == 4 && data:
			_, ok := r.i32(typ)
			return ok
		}
		return r.skip(typ, 1)
	})
	want := uint32(0b110)
	if data {
		want = 0b11110
	}
	return ok && seen&want == want
}

// tcOnce records field id (of the ids 1 to max that a struct reader
// reads) in seen, false when it was there already.
func tcOnce(seen *uint32, id, max int16) bool {
	if id < 1 || id > max {
		return true
	}
	if *seen&(1<<id) != 0 {
		return false
	}
	*seen |= 1 << id
	return true
}

// i32 reads an i32 value.
func (r *thriftCompact) i32(typ byte) (int32, bool) {
	if typ != tcI32 {
		return 0, false
	}
	v, ok := r.varint()
	if !ok || v < math.MinInt32 || v > math.MaxInt32 {
		return 0, false
	}
	return int32(v), true
}

// varint reads a zigzag varint.
func (r *thriftCompact) varint() (int64, bool) {
	u, n := binary.Uvarint(r.b[r.pos:])
	if n <= 0 {
		return 0, false
	}
	r.pos += n
	return int64(u>>1) ^ -int64(u&1), true
}

// size reads a length or count.
func (r *thriftCompact) size() (int, bool) {
	u, n := binary.Uvarint(r.b[r.pos:])
	if n <= 0 || u > uint64(len(r.b)) {
		return 0, false
	}
	r.pos += n
	return int(u), true
}

// skip skips a value of type typ.
func (r *thriftCompact) skip(typ byte, depth int) bool {
	if depth > tcMaxDepth {
		return false
	}
	switch typ {
	case tcTrue, tcFalse:
		return true
	case tcByte:
		r.pos++
		return r.pos <= len(r.b)
	case tcI16, tcI32, tcI64:
		_, ok := r.varint()
		return ok
	case tcDouble:
		r.pos += 8
		return r.pos <= len(r.b)
	case tcBinary:
		n, ok := r.size()
		if !ok || n > len(r.b)-r.pos {
			return false
		}
		r.pos += n
		return true
	case tcList, tcSet:
		if r.pos >= len(r.b) {
			return false
		}
		c := r.b[r.pos]
		r.pos++
		n := int(c >> 4)
		if n == 15 {
			var ok bool
			if n, ok = r.size(); !ok {
				return false
			}
		}
		return r.skipN(n, c&0x0f, depth)
	case tcMap:
		n, ok := r.size()
		if !ok {
			return false
		}
		if n == 0 {
			return true
		}
		if r.pos >= len(r.b) {
			return false
		}
		kv := r.b[r.pos]
		r.pos++
		for range n {
			if !r.skip(kv>>4, depth+1) || !r.skip(kv&0x0f, depth+1) {
				return false
			}
		}
		return true
	case tcStruct:
		return r.fields(depth+1, func(_ int16, typ byte) bool { return r.skip(typ, depth+1) })
	}
	return false
}

// skipN skips n values of type typ (in a list or set, booleans are a
// byte each).
func (r *thriftCompact) skipN(n int, typ byte, depth int) bool {
	for range n {
		if typ == tcTrue || typ == tcFalse {
			typ = tcByte
		}
		if !r.skip(typ, depth+1) {
			return false
		}
	}
	return true
}
