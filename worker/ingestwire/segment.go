package ingestwire

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/emsf/emsf/factor"
)

// Segment is a run of transitions a mapper routed to one reducer, of one
// set, in arrival order: a reducer that counts a split's segments in
// sequence order, and the splits in order, sees every row's transitions
// in the order they arrive in the dataset.
type Segment struct {
	Set                 int
	Action, State, Next []int32
	// Count is nil when every count is 1.
	Count []float64
}

// Len returns the number of transitions.
func (s *Segment) Len() int { return len(s.State) }

// segHeader is a segment's header: u32 record length, u32 transitions,
// u8 set, u8 has counts, u16 zero.
const segHeader = 12

// SegmentSize returns the bytes of a segment of n transitions.
func SegmentSize(n int, counts bool) int {
	size := segHeader + 12*n
	if counts {
		size += 8 * n
	}
	return size
}

// AppendSegment appends the encoding of s to buf: its header, then the
// actions, states and next states (int32) and the counts (float64, when
// not all 1), little-endian.
func AppendSegment(buf []byte, s *Segment) []byte {
	n := s.Len()
	size := SegmentSize(n, s.Count != nil)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(size))
	buf = binary.LittleEndian.AppendUint32(buf, uint32(n))
	flag := byte(0)
	if s.Count != nil {
		flag = 1
	}
	buf = append(buf, byte(s.Set), flag, 0, 0)
	for _, col := range [][]int32{s.Action, s.State, s.Next} {
		for _, v := range col {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(v))
		}
	}
	for _, c := range s.Count {
		buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(c))
	}
	return buf
}

// DecodeSegments calls each for every segment encoded in data, in order;
// the segment and its slices are valid only during the call.
func DecodeSegments(data []byte, each func(*Segment) error) error {
	var s Segment
	for len(data) > 0 {
		if len(data) < segHeader {
			return fmt.Errorf("ingestwire: %d bytes left, short of a segment header", len(data))
		}
		size := int(binary.LittleEndian.Uint32(data))
		n := int(binary.LittleEndian.Uint32(data[4:]))
		counts := data[9] == 1
		if size < segHeader || size > len(data) || size != SegmentSize(n, counts) || data[8] > SetAll {
			return fmt.Errorf("ingestwire: corrupt segment: %d bytes for %d transitions of set %d", size, n, data[8])
		}
		s.Set = int(data[8])
		body := data[segHeader:size]
		for k, dst := range []*[]int32{&s.Action, &s.State, &s.Next} {
			*dst = growInt32(*dst, n)
			col := body[4*n*k:]
			for q := range *dst {
				(*dst)[q] = int32(binary.LittleEndian.Uint32(col[4*q:]))
			}
		}
		if counts {
			s.Count = growFloat(s.Count, n)
			col := body[12*n:]
			for q := range s.Count {
				s.Count[q] = math.Float64frombits(binary.LittleEndian.Uint64(col[8*q:]))
			}
		} else {
			s.Count = nil
		}
		if err := each(&s); err != nil {
			return err
		}
		data = data[size:]
	}
	return nil
}

func growInt32(x []int32, n int) []int32 {
	if cap(x) < n {
		return make([]int32, n)
	}
	return x[:n]
}

func growFloat(x []float64, n int) []float64 {
	if cap(x) < n {
		return make([]float64, n)
	}
	return x[:n]
}

// AppendRows appends the encoding of rows [a, e) (positions) of block b:
// u32 rows, then per row its index (int32) and nonzeros (u32), then the
// columns (int32) and values (float64) of all of them, little-endian.
func AppendRows(buf []byte, b *factor.Block, a, e int) []byte {
	buf = binary.LittleEndian.AppendUint32(buf, uint32(e-a))
	for r := a; r < e; r++ {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(b.Rows[r]))
		buf = binary.LittleEndian.AppendUint32(buf, uint32(b.Ptr[r+1]-b.Ptr[r]))
	}
	for _, c := range b.Cols[b.Ptr[a]:b.Ptr[e]] {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(c))
	}
	for _, v := range b.Vals[b.Ptr[a]:b.Ptr[e]] {
		buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(v))
	}
	return buf
}

// RowsSize returns the bytes AppendRows writes for rows of nnz nonzeros.
func RowsSize(rows, nnz int) int { return 4 + 8*rows + 12*nnz }

// DecodeRows appends the rows encoded in data (AppendRows) to block b.
func DecodeRows(b *factor.Block, data []byte) error {
	if len(data) < 4 {
		return fmt.Errorf("ingestwire: %d bytes, short of a rows header", len(data))
	}
	n := int(binary.LittleEndian.Uint32(data))
	if 4+8*n > len(data) {
		return fmt.Errorf("ingestwire: corrupt rows: %d rows in %d bytes", n, len(data))
	}
	nnz := 0
	for r := range n {
		nnz += int(binary.LittleEndian.Uint32(data[4+8*r+4:]))
	}
	if len(data) != RowsSize(n, nnz) {
		return fmt.Errorf("ingestwire: corrupt rows: %d rows of %d nonzeros in %d bytes", n, nnz, len(data))
	}
	if len(b.Ptr) == 0 {
		b.Ptr = []int64{0}
	}
	cols, vals := data[4+8*n:], data[4+8*n+4*nnz:]
	for r := range n {
		b.Rows = append(b.Rows, int32(binary.LittleEndian.Uint32(data[4+8*r:])))
		b.Ptr = append(b.Ptr, b.Ptr[len(b.Ptr)-1]+int64(binary.LittleEndian.Uint32(data[4+8*r+4:])))
	}
	for q := range nnz {
		b.Cols = append(b.Cols, int32(binary.LittleEndian.Uint32(cols[4*q:])))
		b.Vals = append(b.Vals, math.Float64frombits(binary.LittleEndian.Uint64(vals[8*q:])))
	}
	return nil
}
