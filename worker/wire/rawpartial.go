package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/emsf/emsf/factor"
)

// The raw partial is how a worker serves a partial too large for a reply
// message (a blob, see FetchBlob): rawHeader little-endian int64s (magic,
// action, m, rows, cols, nonzeros, the bits of SumX and of LogLik), then
// Rows and Cols as int32 (each padded to 8 bytes), then X, Dh, KhT and Y
// as float64, all little-endian. The coordinator reads it in place (the
// Partial's slices point into the fetched bytes): no decoding pass on the
// coordinator's critical path; Accumulator.Merge checks the values.

const rawPartialMagic = 0x31505241524d45 // "EMRARP1"

// RawPartialSize is the size of p as a raw partial.
func RawPartialSize(p *factor.Partial) int {
	return RawPartialSizeOf(len(p.Rows), len(p.Cols), len(p.Y))
}

// RawPartialSizeOf is the size of a raw partial with rows rows, cols
// columns and m hidden states.
func RawPartialSizeOf(rows, cols, m int) int {
	return rawHeader*8 + pad8(4*rows) + pad8(4*cols) + 8*(rows+rows*m+cols*m+m)
}

func pad8(n int) int { return (n + 7) &^ 7 }

// EncodeRawPartial writes p as a raw partial into buf (grown when too
// small) and returns it.
func EncodeRawPartial(p *factor.Partial, buf []byte) []byte {
	size := RawPartialSize(p)
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	hdr := [rawHeader]uint64{rawPartialMagic, uint64(p.Action), uint64(len(p.Y)), uint64(len(p.Rows)), uint64(len(p.Cols)),
		uint64(p.NNZ), math.Float64bits(p.SumX), math.Float64bits(p.LogLik)}
	for k, v := range hdr {
		binary.LittleEndian.PutUint64(buf[k*8:], v)
	}
	off := rawHeader * 8
	for _, idx := range [][]int32{p.Rows, p.Cols} {
		for k, v := range idx {
			binary.LittleEndian.PutUint32(buf[off+4*k:], uint32(v))
		}
		clear(buf[off+4*len(idx) : off+pad8(4*len(idx))])
		off += pad8(4 * len(idx))
	}
	for _, xs := range [][]float64{p.X, p.Dh, p.KhT, p.Y} {
		if LittleEndian && len(xs) > 0 {
			copy(buf[off:], unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), 8*len(xs)))
		} else {
			for k, v := range xs {
				binary.LittleEndian.PutUint64(buf[off+8*k:], math.Float64bits(v))
			}
		}
		off += 8 * len(xs)
	}
	return buf
}

// AlignedBuffer returns a byte slice of size bytes whose start is 8-byte
// aligned (for DecodeRawPartial).
func AlignedBuffer(size int) []byte {
	if size == 0 {
		return []byte{}
	}
	w := make([]float64, (size+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), size)
}

// DecodeRawPartial reads a raw partial. On little-endian machines with an
// 8-byte aligned data (see AlignedBuffer) the partial's slices share data's
// memory; otherwise they are copies.
func DecodeRawPartial(data []byte) (*factor.Partial, error) {
	if len(data) < rawHeader*8 {
		return nil, errors.New("wire: raw partial: short header")
	}
	var hdr [rawHeader]uint64
	for k := range hdr {
		hdr[k] = binary.LittleEndian.Uint64(data[k*8:])
	}
	if hdr[0] != rawPartialMagic {
		return nil, errors.New("wire: raw partial: bad magic")
	}
	const lim = 1 << 31
	for k, name := range []string{"action", "m", "rows", "cols", "nonzeros"} {
		if hdr[k+1] >= lim {
			return nil, fmt.Errorf("wire: raw partial: %s %d out of range", name, hdr[k+1])
		}
	}
	m, nr, nc := int(hdr[2]), int(hdr[3]), int(hdr[4])
	p := &factor.Partial{Action: int(hdr[1]), NNZ: int(hdr[5]), SumX: math.Float64frombits(hdr[6]), LogLik: math.Float64frombits(hdr[7])}
	want := rawHeader*8 + pad8(4*nr) + pad8(4*nc) + 8*(nr+(nr+nc)*m+m)
	if m < 1 || len(data) != want {
		return nil, fmt.Errorf("wire: raw partial: %d bytes for m=%d, %d rows, %d cols: want %d", len(data), m, nr, nc, want)
	}
	inPlace := LittleEndian && uintptr(unsafe.Pointer(&data[0]))%8 == 0
	off := rawHeader * 8
	ints := func(n int) []int32 {
		src := data[off : off+4*n]
		off += pad8(4 * n)
		if n == 0 {
			return []int32{}
		}
		if inPlace {
			return unsafe.Slice((*int32)(unsafe.Pointer(&src[0])), n)
		}
		out := make([]int32, n)
		for k := range out {
			out[k] = int32(binary.LittleEndian.Uint32(src[4*k:]))
		}
		return out
	}
	floats := func(n int) []float64 {
		src := data[off : off+8*n]
		off += 8 * n
		if n == 0 {
			return []float64{}
		}
		if inPlace {
			return unsafe.Slice((*float64)(unsafe.Pointer(&src[0])), n)
		}
		out := make([]float64, n)
		for k := range out {
			out[k] = math.Float64frombits(binary.LittleEndian.Uint64(src[8*k:]))
		}
		return out
	}
	p.Rows, p.Cols = ints(nr), ints(nc)
	p.X, p.Dh, p.KhT, p.Y = floats(nr), floats(nr*m), floats(nc*m), floats(m)
	return p, nil
}
