package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"strconv"
	"unsafe"

	"github.com/emsf/emsf/factor"
)

// The owners exchange on NATS (its messages and their meaning: package
// proto).

// OwnSubject is where worker id takes the owners exchange's requests
// (proto.Request, JSON; the reply is a proto.Reply).
func OwnSubject(prefix, id string) string { return prefix + ".own." + id }

// GatherSubject is where worker id serves rows of the K blocks it owns:
// the request's body is little-endian int32 column indices, its headers
// HeaderOwnJob, HeaderOwnBlock, HeaderOwnVersion, HeaderOwnEpoch and
// HeaderOwnFence (the epoch's token: a gather is fenced as every owners
// request is); the reply is the
// rows' float64 values (m per column, little-endian), or a reply with
// HeaderBlobError.
func GatherSubject(prefix, id string) string { return prefix + ".gather." + id }

// Gather request headers.
const (
	HeaderOwnJob     = "Emsf-Job"
	HeaderOwnBlock   = "Emsf-Block" // "kblock/c"
	HeaderOwnVersion = "Emsf-Version"
	HeaderOwnEpoch   = "Emsf-Epoch"
	HeaderOwnFence   = "Emsf-Fence"
)

// SliceName is the name under which the worker that computed shard s in
// iteration iter of an epoch serves the K̂ slice of column block c (on
// SliceSubject): a deterministic name, so that the coordinator never
// relays one reference per shard and block, ending in the epoch's slice
// key (proto.SliceKey), so that no one without the epoch's token can name
// it (or drop it). A shard that touches no column of the block serves an
// empty slice.
func SliceName(job string, epoch, iter, s, c int, key string) string {
	return job + "-" + strconv.Itoa(epoch) + "-" + strconv.Itoa(iter) + "-" + strconv.Itoa(s) + "-" + strconv.Itoa(c) + "-" + key
}

// SliceSubject is where worker id serves its K̂ slices.
func SliceSubject(prefix, id string) string { return BlobSubject(prefix, id+"-s") }

// DSliceName is the name under which the worker that computed shard s in
// iteration iter of an epoch serves its D̂ slice of row group g (the
// shard's rows in the group, their D̂ and x) for the group's owner (key:
// as SliceName's).
func DSliceName(job string, epoch, iter, s, g int, key string) string {
	return job + "-" + strconv.Itoa(epoch) + "-" + strconv.Itoa(iter) + "-" + strconv.Itoa(s) + "-d" + strconv.Itoa(g) + "-" + key
}

// PartialDigest is the CRC-32C (hex) of a task's partial p: its rows,
// D̂, x, columns, K̂^T, Y, Σx and log-likelihood, in that order, as
// little-endian bytes. Two workers that compute the same task give the
// same digest (the kernel is bitwise reproducible); a worker that
// computes something else gives another, whichever part differs.
func PartialDigest(p *factor.Partial) string {
	h := crc32.New(Castagnoli)
	ints := func(xs []int32) {
		var b [4]byte
		for _, x := range xs {
			binary.LittleEndian.PutUint32(b[:], uint32(x))
			h.Write(b[:])
		}
	}
	var b [8]byte
	scalar := func(v float64) {
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(v))
		h.Write(b[:])
	}
	ints(p.Rows)
	h.Write(FloatBytes(p.Dh))
	h.Write(FloatBytes(p.X))
	ints(p.Cols)
	h.Write(FloatBytes(p.KhT))
	h.Write(FloatBytes(p.Y))
	scalar(p.SumX)
	scalar(p.LogLik)
	return strconv.FormatUint(uint64(h.Sum32()), 16)
}

// FloatBytes views xs as its bytes (little-endian machines: see
// LittleEndian; elsewhere it copies).
func FloatBytes(xs []float64) []byte {
	if len(xs) == 0 {
		return []byte{}
	}
	if LittleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), 8*len(xs))
	}
	b := make([]byte, 8*len(xs))
	for k, v := range xs {
		binary.LittleEndian.PutUint64(b[8*k:], math.Float64bits(v))
	}
	return b
}

// ReadFloats fills xs from little-endian float64 bytes.
func ReadFloats(xs []float64, b []byte) error {
	if len(b) != 8*len(xs) {
		return fmt.Errorf("wire: %d bytes for %d float64 values", len(b), len(xs))
	}
	if LittleEndian && len(xs) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), 8*len(xs)), b)
		return nil
	}
	for k := range xs {
		xs[k] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*k:]))
	}
	return nil
}

// EncodeCols writes column indices as little-endian int32s.
func EncodeCols(cols []int32, buf []byte) []byte {
	buf = buf[:0]
	for _, j := range cols {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(j))
	}
	return buf
}

// DecodeCols reads column indices written by EncodeCols, each in [lo, hi).
func DecodeCols(b []byte, lo, hi int, into []int32) ([]int32, error) {
	if len(b)%4 != 0 {
		return nil, errors.New("wire: column list is not a multiple of 4 bytes")
	}
	into = into[:0]
	for k := 0; k < len(b); k += 4 {
		j := int32(binary.LittleEndian.Uint32(b[k:]))
		if int(j) < lo || int(j) >= hi {
			return nil, fmt.Errorf("wire: column %d outside [%d, %d)", j, lo, hi)
		}
		into = append(into, j)
	}
	return into, nil
}
