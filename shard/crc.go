package shard

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
)

// CRC32Combine returns the CRC-32 of the concatenation A·B of two byte
// strings, given crc1 = CRC(A), crc2 = CRC(B) and len2 = len(B), for the
// reflected polynomial poly (crc32.IEEE or crc32.Castagnoli, as Go's
// hash/crc32 writes them): what crc32.Update(crc1, table, B) returns,
// without B. It is zlib's crc32_combine (madler/zlib crc32.c, 1.2.12 on):
// CRC(A·B) = CRC(A)·x^(8·len2) mod p ⊕ CRC(B), the power found by
// squaring in O(log len2) products of polynomials mod p. Go's hash/crc32
// has none.
func CRC32Combine(poly, crc1, crc2 uint32, len2 int64) uint32 {
	if len2 <= 0 {
		return crc1 ^ crc2 // CRC of the empty string is 0
	}
	return multModP(poly, x2nModP(poly, uint64(len2), 3), crc1) ^ crc2
}

// multModP returns a(x)·b(x) mod p(x), in the reflected representation
// (the bit 1<<31 is x^0). a must not be 0.
func multModP(poly, a, b uint32) uint32 {
	m := uint32(1) << 31
	p := uint32(0)
	for {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				return p
			}
		}
		m >>= 1
		if b&1 != 0 {
			b = b>>1 ^ poly
		} else {
			b >>= 1
		}
	}
}

// x2nModP returns x^(n·2^k) mod p(x).
func x2nModP(poly uint32, n uint64, k uint) uint32 {
	// x^(2^k) for k = 0, 1, …: squares of x, from x^1.
	var x2n [32]uint32
	x2n[0] = 1 << 30
	for i := 1; i < len(x2n); i++ {
		x2n[i] = multModP(poly, x2n[i-1], x2n[i-1])
	}
	p := uint32(1) << 31 // x^0
	for ; n != 0; n >>= 1 {
		if n&1 != 0 {
			p = multModP(poly, x2n[k&31], p)
		}
		k++
	}
	return p
}

// RowsCRC is the CRC-32C and the CRC-32 (IEEE) of Len bytes: of a run of
// transitions in the fingerprint's rows (FingerprintHash: 20 bytes each,
// or more for rows named by ids).
type RowsCRC struct {
	C, I uint32
	Len  int64
}

// Then returns the RowsCRC of the bytes of r followed by those of q.
func (r RowsCRC) Then(q RowsCRC) RowsCRC {
	return RowsCRC{C: CRC32Combine(crc32.Castagnoli, r.C, q.C, q.Len), I: CRC32Combine(crc32.IEEE, r.I, q.I, q.Len), Len: r.Len + q.Len}
}

// Fingerprint is the training-data fingerprint written into models:
// "crc32c-ieee:" and the two CRCs in 16 hex digits (docs/formats.md).
func (r RowsCRC) Fingerprint() string { return fmt.Sprintf("crc32c-ieee:%08x%08x", r.C, r.I) }

// FingerprintRowBytes is the size of a transition's row of integer data
// in the fingerprint: state, action and next state as uint32 and the
// count's float64 bits, little-endian.
const FingerprintRowBytes = 20

// castagnoli is the CRC-32C table (hardware-accelerated where the CPU
// has it).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// FingerprintHash computes the fingerprint of transitions while they
// stream: the CRC-32C and CRC-32 (IEEE) of their rows, in order (20 bytes
// each for integer data: Add; ids in place of indices: AddIDRows). Both
// run in hardware (SSE 4.2, PCLMULQDQ). The zero value is ready.
type FingerprintHash struct {
	crc  RowsCRC
	rows []byte // the rows' bytes, reused
}

// Add hashes the transitions state[k] --action[k]--> next[k] with count
// counts[k] (1 for each when counts is nil), k = 0 … len(state)−1.
func (f *FingerprintHash) Add(state, action, next []int32, counts []float64) {
	n := len(state)
	buf := slices.Grow(f.rows[:0], FingerprintRowBytes*n)[:FingerprintRowBytes*n]
	for k := range n {
		r := buf[FingerprintRowBytes*k : FingerprintRowBytes*k+FingerprintRowBytes]
		binary.LittleEndian.PutUint32(r[0:], uint32(state[k]))
		binary.LittleEndian.PutUint32(r[4:], uint32(action[k]))
		binary.LittleEndian.PutUint32(r[8:], uint32(next[k]))
		binary.LittleEndian.PutUint64(r[12:], math.Float64bits(rowCount(counts, k)))
	}
	f.update(buf)
	f.rows = buf
}

// idRowsChunk is the most bytes of rows AddIDRows gathers before it
// hashes them (its buffer stays about this size, whatever the ids' length).
const idRowsChunk = 1 << 20

// AddIDRows hashes rows as Add does, except that a group with a valid
// view (states: state and next; actions: action) is hashed by its ids in
// place of the uint32 index: the id's UTF-8 bytes, then one 0x00 byte. An
// id holds no NUL (CheckID), so the rows stay unambiguous. The bytes are
// those of the ids, whatever index a read gave them: the fingerprint of
// data named by ids does not depend on the vocabulary's numbering, and
// the RowsCRCs of splits read with vocabularies of their own compose
// (RowsCRC.Then). With both views zero it is Add, bitwise.
func (f *FingerprintHash) AddIDRows(state, action, next []int32, counts []float64, states, actions VocabView) {
	if !states.Valid() && !actions.Valid() {
		f.Add(state, action, next, counts)
		return
	}
	// Rows go into a buffer with room for one more row past limit (up to
	// idRowsChunk, or 64 bytes a row of the batch if less), hashed
	// whenever they reach limit.
	if size := maxIDRowBytes + min(idRowsChunk, 64*len(state)); cap(f.rows) < size {
		f.rows = make([]byte, size)
	}
	buf := f.rows[:cap(f.rows)]
	limit := len(buf) - maxIDRowBytes
	p := 0
	sv, av := states.Valid(), actions.Valid()
	sa, so, aa, ao := states.arena, states.off, actions.arena, actions.off
	// put writes index i of a group at p: its id and a 0x00 when the
	// group has a view (a, o), else its uint32.
	put := func(valid bool, a []byte, o []uint32, i int32) {
		if valid {
			p += copy(buf[p:], a[o[i]:o[i+1]])
			buf[p] = 0
			p++
		} else {
			binary.LittleEndian.PutUint32(buf[p:], uint32(i))
			p += 4
		}
	}
	for k := range state {
		put(sv, sa, so, state[k])
		put(av, aa, ao, action[k])
		put(sv, sa, so, next[k])
		binary.LittleEndian.PutUint64(buf[p:], math.Float64bits(rowCount(counts, k)))
		p += 8
		if p >= limit {
			f.update(buf[:p])
			p = 0
		}
	}
	f.update(buf[:p])
}

// maxIDRowBytes is the most bytes of a row of AddIDRows: three ids of
// MaxIDBytes and their 0x00, and the count.
const maxIDRowBytes = 3*(MaxIDBytes+1) + 8

// rowCount is row k's count: counts[k], or 1 when counts is nil.
func rowCount(counts []float64, k int) float64 {
	if counts == nil {
		return 1
	}
	return counts[k]
}

// update hashes b after what was hashed so far.
func (f *FingerprintHash) update(b []byte) {
	f.crc.C = crc32.Update(f.crc.C, castagnoli, b)
	f.crc.I = crc32.Update(f.crc.I, crc32.IEEETable, b)
	f.crc.Len += int64(len(b))
}

// Sum returns the CRCs of the rows hashed so far.
func (f *FingerprintHash) Sum() RowsCRC { return f.crc }
