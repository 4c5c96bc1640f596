package arrowio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"
)

// The Arrow IPC framing (https://arrow.apache.org/docs/format/Columnar.html#encapsulated-message-format):
// a message is <0xFFFFFFFF> <int32 metadata length> <flatbuffer metadata,
// padded> <body>; the stream ends with <0xFFFFFFFF> <0x00000000>. A file
// is "ARROW1\0\0", the same stream, a footer, the footer's int32 length
// and "ARROW1".
const (
	contToken    = 0xFFFFFFFF
	maxMetaBytes = 64 << 20 // one message's flatbuffer metadata
	fileMagic    = "ARROW1"
	fileHead     = 8  // "ARROW1" padded to 8 bytes
	fileTail     = 10 // int32 footer length + "ARROW1"
)

var (
	errNoEOS     = errors.New("stream ends without the end-of-stream marker (truncated?)")
	errTruncated = errors.New("unexpected end of data (truncated?)")
)

// msgReader is an ipc.MessageReader that checks every declared length
// against the bytes left in the input (when known) and reads bodies of
// unknown-size inputs incrementally, so a corrupt or truncated input fails
// with an error instead of a huge allocation. Arrow's own message reader
// allocates whatever a length field says.
type msgReader struct {
	r       io.Reader
	remain  int64 // bytes left in r, or -1 when unknown
	needEOS bool  // a stream must end with the end-of-stream marker
	refs    atomic.Int64
	cur     *ipc.Message
	batches int // record batch messages read so far
	// reuse: the bodies of known-size inputs are read into one buffer,
	// which the next message overwrites (for readers that keep nothing
	// of a message once the next is asked for).
	reuse bool
	buf   []byte
	// ranges, when set (with reuse, on an input that is an io.ReaderAt
	// and io.Seeker), gives the parts of a record batch's body to read;
	// the rest of the buffer keeps whatever it held (flatRanges).
	ranges func(meta []byte, bodyLen int64) ([][2]int64, bool)
	// The current message's metadata and body, and whether the next
	// Message returns it again (unread).
	meta, body []byte
	again      bool
}

func newMsgReader(r io.Reader, size int64, needEOS bool) *msgReader {
	m := &msgReader{r: r, remain: size, needEOS: needEOS}
	m.refs.Store(1)
	return m
}

func (m *msgReader) Retain() { m.refs.Add(1) }

func (m *msgReader) Release() {
	if m.refs.Add(-1) == 0 && m.cur != nil {
		m.cur.Release()
		m.cur = nil
	}
}

// full reads len(p) bytes; running out of input is errTruncated (never
// io.EOF, which the IPC reader would take for a clean end).
func (m *msgReader) full(p []byte) error {
	if m.remain >= 0 && int64(len(p)) > m.remain {
		return errTruncated
	}
	n, err := io.ReadFull(m.r, p)
	if m.remain >= 0 {
		m.remain -= int64(n)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errTruncated
	}
	return err
}

// unread makes the next Message return the current message again.
func (m *msgReader) unread() { m.again = true }

func (m *msgReader) Message() (*ipc.Message, error) {
	if m.again {
		m.again = false
		return m.cur, nil
	}
	if m.cur != nil {
		m.cur.Release()
		m.cur = nil
	}
	var word [4]byte
	if m.remain == 0 {
		if m.needEOS {
			return nil, errNoEOS
		}
		return nil, io.EOF
	}
	n, err := io.ReadFull(m.r, word[:])
	if m.remain >= 0 {
		m.remain -= int64(n)
	}
	switch {
	case n == 0 && errors.Is(err, io.EOF):
		if m.needEOS {
			return nil, errNoEOS
		}
		return nil, io.EOF
	case err != nil:
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errTruncated
		}
		return nil, err
	}
	length := binary.LittleEndian.Uint32(word[:])
	if length == contToken {
		if err := m.full(word[:]); err != nil {
			return nil, err
		}
		length = binary.LittleEndian.Uint32(word[:])
	}
	if length == 0 { // end-of-stream marker
		return nil, io.EOF
	}
	if length > maxMetaBytes || (m.remain >= 0 && int64(length) > m.remain) {
		return nil, fmt.Errorf("message metadata length %d exceeds the input (corrupt or truncated)", length)
	}
	meta := make([]byte, length)
	if err := m.full(meta); err != nil {
		return nil, err
	}
	if err := verifyMessage(meta); err != nil {
		return nil, err
	}
	bodyLen, typ, err := peekMessage(meta)
	if err != nil {
		return nil, err
	}
	if bodyLen < 0 || (m.remain >= 0 && bodyLen > m.remain) || (m.remain < 0 && bodyLen > maxBufferCap) {
		return nil, fmt.Errorf("message body length %d exceeds the input (corrupt or truncated)", bodyLen)
	}
	var body []byte
	if m.remain >= 0 {
		if m.reuse {
			if int64(cap(m.buf)) < bodyLen {
				m.buf = make([]byte, bodyLen)
			}
			body = m.buf[:bodyLen]
		} else {
			body = make([]byte, bodyLen)
		}
		if err := m.readBody(meta, typ, body); err != nil {
			return nil, err
		}
	} else {
		// Unknown size: let memory grow with the bytes that actually arrive.
		var buf bytes.Buffer
		if _, err := io.CopyN(&buf, m.r, bodyLen); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, errTruncated
			}
			return nil, err
		}
		body = buf.Bytes()
	}
	if typ == ipc.MessageRecordBatch {
		m.batches++
	}
	m.meta, m.body = meta, body
	mb, bb := memory.NewBufferBytes(meta), memory.NewBufferBytes(body)
	m.cur = ipc.NewMessage(mb, bb)
	mb.Release()
	bb.Release()
	return m.cur, nil
}

// readBody reads a message body of known size: the parts that m.ranges
// names when it names them, else all of it.
func (m *msgReader) readBody(meta []byte, typ ipc.MessageType, body []byte) error {
	ra, okRA := m.r.(io.ReaderAt)
	sk, okSk := m.r.(io.Seeker)
	if m.ranges == nil || typ != ipc.MessageRecordBatch || !okRA || !okSk {
		return m.full(body)
	}
	ranges, ok := m.ranges(meta, int64(len(body)))
	if !ok {
		return m.full(body)
	}
	base, err := sk.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	for _, r := range ranges {
		if _, err := ra.ReadAt(body[r[0]:r[0]+r[1]], base+r[0]); err != nil {
			if errors.Is(err, io.EOF) {
				return errTruncated
			}
			return err
		}
	}
	if _, err := sk.Seek(int64(len(body)), io.SeekCurrent); err != nil {
		return err
	}
	m.remain -= int64(len(body))
	return nil
}

// peekMessage decodes the body length and type of a message from its
// flatbuffer metadata, turning a panic on garbage into an error.
func peekMessage(meta []byte) (bodyLen int64, typ ipc.MessageType, err error) {
	if len(meta) < 8 {
		return 0, 0, fmt.Errorf("message metadata of %d bytes is too short (corrupt)", len(meta))
	}
	defer catch(&err)
	msg := ipc.NewMessage(memory.NewBufferBytes(meta), memory.NewBufferBytes(nil))
	defer msg.Release()
	return msg.BodyLen(), msg.Type(), nil
}

// ipcSource is Arrow IPC data to read: a stream (r, with size bytes or -1
// when unknown) or a file (ra of size bytes).
type ipcSource struct {
	r    io.Reader
	ra   io.ReaderAt
	size int64
	file bool
	// transient: the callback keeps no record (nor any of its arrays)
	// past its return, so record batches of a flat schema are decoded
	// without copying from one reused body buffer (flatRecord).
	transient bool
	// fields, when set, returns the fields the callback reads (valid
	// after onSchema): with transient, a file's record batches of a flat
	// schema are then read only in the byte ranges of those fields'
	// buffers; the other columns' arrays hold stale bytes.
	fields func() []int
	// split, when set, is the byte range of a file whose record batches
	// are read: those whose midpoint lies in it (split.go).
	split *[2]int64
}

// readIPC calls onSchema once and then fn for every record batch of src, in
// order. fn must Retain a record it keeps. Decoding errors come back as
// *decodeError, errors of onSchema and fn unchanged. Files are read through their
// embedded stream (so both formats share the checked message reader), after
// checking the magic bytes, and the footer is cross-checked against the
// batches read.
func readIPC(src ipcSource, mem memory.Allocator, onSchema func(*arrow.Schema) error, fn func(arrow.Record) error) error {
	mem = capAllocator(mem, src.size)
	var mr *msgReader
	footerBatches := -1
	if src.file {
		n, start, end, err := checkFile(src.ra, src.size)
		if err != nil {
			return &decodeError{err}
		}
		footerBatches = n
		if src.split != nil {
			r, size, batches, err := fileSplit(src.ra, src.size, end, src.split[0], src.split[1])
			if err != nil {
				return err
			}
			footerBatches = batches
			mr = newMsgReader(r, size, false)
		} else {
			mr = newMsgReader(io.NewSectionReader(src.ra, start, end-start), end-start, false)
		}
	} else {
		mr = newMsgReader(src.r, src.size, true)
	}
	mr.reuse = src.transient
	rd, err := newIPCReader(mr, mem)
	if err != nil {
		mr.Release()
		return &decodeError{err}
	}
	defer rd.Release()
	if err := onSchema(rd.Schema()); err != nil {
		return err
	}
	flat := src.transient && flatSchema(rd.Schema())
	if flat && src.file && src.fields != nil {
		fields := src.fields()
		mr.ranges = func(meta []byte, bodyLen int64) ([][2]int64, bool) {
			return flatRanges(meta, bodyLen, fields)
		}
	}
	for {
		rec, owned, err := nextFlat(mr, rd, flat)
		if err != nil {
			return &decodeError{err}
		}
		if rec == nil {
			break
		}
		err = fn(rec)
		if owned {
			rec.Release()
		}
		if err != nil {
			return err
		}
	}
	if footerBatches >= 0 && footerBatches != mr.batches {
		return &decodeError{fmt.Errorf("corrupt file: footer lists %d record batches, the data holds %d", footerBatches, mr.batches)}
	}
	return nil
}

func newIPCReader(mr *msgReader, mem memory.Allocator) (rd *ipc.Reader, err error) {
	defer catch(&err)
	rd, err = ipc.NewReaderFromMessageReader(mr, ipc.WithAllocator(mem))
	if err != nil {
		return nil, err
	}
	return rd, nil
}

// nextFlat returns the next record of mr, nil at the end. With flat, a
// record batch that flatRecord decodes comes back owned (the caller
// releases it); anything else is decoded by rd, which owns it.
func nextFlat(mr *msgReader, rd *ipc.Reader, flat bool) (rec arrow.Record, owned bool, err error) {
	if flat {
		msg, err := mr.Message()
		switch {
		case errors.Is(err, io.EOF):
			return nil, false, nil
		case err != nil:
			return nil, false, err
		}
		if msg.Type() == ipc.MessageRecordBatch {
			rec, ok, err := flatRecord(rd.Schema(), mr.meta, mr.body)
			if err != nil || ok {
				return rec, ok, err
			}
		}
		mr.unread()
	}
	rec, err = nextRecord(rd)
	return rec, false, err
}

// nextRecord returns the next record (owned by rd), nil at the end.
func nextRecord(rd *ipc.Reader) (rec arrow.Record, err error) {
	defer catch(&err)
	if rd.Next() {
		return rd.Record(), nil
	}
	return nil, rd.Err()
}

// checkFile checks the head and tail of an Arrow IPC file and verifies its
// footer; it returns the number of record batches the footer lists and the
// byte range of the embedded stream. The footer's index of blocks is not
// used otherwise: the stream holds the same messages in order.
func checkFile(ra io.ReaderAt, size int64) (batches int, start, end int64, err error) {
	if size < fileHead+fileTail {
		return 0, 0, 0, fmt.Errorf("not an Arrow IPC file: %d bytes is too short (truncated?)", size)
	}
	var head [fileHead]byte
	var tail [fileTail]byte
	if _, err := ra.ReadAt(head[:], 0); err != nil {
		return 0, 0, 0, err
	}
	if _, err := ra.ReadAt(tail[:], size-fileTail); err != nil {
		return 0, 0, 0, err
	}
	if string(head[:len(fileMagic)]) != fileMagic {
		return 0, 0, 0, errors.New("not an Arrow IPC file: no ARROW1 magic at the start")
	}
	if string(tail[4:]) != fileMagic {
		return 0, 0, 0, errors.New("corrupt Arrow IPC file: no ARROW1 magic at the end (truncated?)")
	}
	footer := int64(binary.LittleEndian.Uint32(tail[:4]))
	end = size - fileTail - footer
	if footer <= 0 || end < fileHead {
		return 0, 0, 0, fmt.Errorf("corrupt Arrow IPC file: footer length %d does not fit in %d bytes", footer, size)
	}
	buf := make([]byte, footer)
	if _, err := ra.ReadAt(buf, end); err != nil {
		return 0, 0, 0, err
	}
	batches, err = verifyFooter(buf)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("corrupt Arrow IPC file footer: %w", err)
	}
	return batches, fileHead, end, nil
}

// fileSplit returns the stream of an IPC file's schema message and of
// its record batches whose midpoint lies in [off, stop), its size and the
// number of batches; footerAt is where the footer starts. A file with
// dictionary batches, or whose record batches do not follow the schema
// one after the other up to the end of the stream, is ErrReadWhole.
func fileSplit(ra io.ReaderAt, size, footerAt, off, stop int64) (io.Reader, int64, int, error) {
	footer := make([]byte, size-fileTail-footerAt)
	if _, err := ra.ReadAt(footer, footerAt); err != nil {
		return nil, 0, 0, &decodeError{err}
	}
	dicts, blocks, err := footerBlocks(footer)
	if err != nil {
		return nil, 0, 0, &decodeError{err}
	}
	if dicts > 0 {
		return nil, 0, 0, fmt.Errorf("%w: the file has dictionary batches", ErrReadWhole)
	}
	var prefix [8]byte
	if _, err := ra.ReadAt(prefix[:], fileHead); err != nil {
		return nil, 0, 0, &decodeError{err}
	}
	schemaLen := int64(4 + binary.LittleEndian.Uint32(prefix[:4]))
	if binary.LittleEndian.Uint32(prefix[:4]) == contToken {
		schemaLen = 8 + int64(binary.LittleEndian.Uint32(prefix[4:]))
	}
	sec := sections{ra: ra, parts: [][2]int64{{fileHead, schemaLen}}}
	at := fileHead + schemaLen
	batches := 0
	for _, b := range blocks {
		n := b.meta + b.body
		if b.offset != at || b.meta < 0 || b.body < 0 || n > footerAt-at {
			return nil, 0, 0, fmt.Errorf("%w: the record batches are not laid out one after the other", ErrReadWhole)
		}
		if mid := b.offset + n/2; mid >= off && mid < stop {
			sec.parts = append(sec.parts, [2]int64{b.offset, n})
			batches++
		}
		at += n
	}
	// What follows the last batch is the end-of-stream marker (or
	// nothing, from writers that leave it out).
	if rest := footerAt - at; rest != 0 && rest != 4 && rest != 8 {
		return nil, 0, 0, fmt.Errorf("%w: %d bytes between the last record batch and the footer", ErrReadWhole, rest)
	}
	return &sec, sec.size(), batches, nil
}

// sections reads parts (offset, length) of ra one after the other, as
// one input: an io.Reader, io.ReaderAt and io.Seeker.
type sections struct {
	ra    io.ReaderAt
	parts [][2]int64
	pos   int64
}

func (s *sections) size() int64 {
	n := int64(0)
	for _, p := range s.parts {
		n += p[1]
	}
	return n
}

func (s *sections) ReadAt(b []byte, off int64) (int, error) {
	done := 0
	for _, p := range s.parts {
		if len(b) == 0 {
			break
		}
		if off >= p[1] {
			off -= p[1]
			continue
		}
		n := min(int64(len(b)), p[1]-off)
		m, err := s.ra.ReadAt(b[:n], p[0]+off)
		done += m
		if err != nil && !(errors.Is(err, io.EOF) && int64(m) == n) {
			return done, err
		}
		b, off = b[n:], 0
	}
	if len(b) > 0 {
		return done, io.EOF
	}
	return done, nil
}

func (s *sections) Read(b []byte) (int, error) {
	n, err := s.ReadAt(b, s.pos)
	s.pos += int64(n)
	if n > 0 && errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

func (s *sections) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		off += s.pos
	case io.SeekEnd:
		off += s.size()
	}
	if off < 0 {
		return 0, errors.New("arrowio: seek before the start")
	}
	s.pos = off
	return off, nil
}
