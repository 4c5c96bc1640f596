package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/emsf/emsf/factor"
)

// The raw model is how the coordinator serves a model version to the
// workers each iteration (a blob, see FetchBlob): a header of rawHeader
// little-endian int64s (magic, N, M, U, Tie, number of D blocks, number
// of K blocks, 0) and then the float64 values of the D blocks and the KT
// blocks, little-endian, in the order of factor.Model. Unlike the Arrow
// model file (which is what the Object Store keeps for resume) it is a
// single copy to write and to read, into a model the worker keeps.

const (
	rawMagic  = 0x31574152464d45 // "EMFRAW1"
	rawHeader = 8
)

// RawHeaderBytes is the size of a raw model's header.
const RawHeaderBytes = rawHeader * 8

// LittleEndian reports whether this machine stores numbers little-endian
// (then raw models and partials are read and written in place).
var LittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// EncodeRawModel returns md as a raw model and a model that shares the
// raw model's memory (a snapshot of md that stays valid while the bytes
// do).
func EncodeRawModel(md *factor.Model) ([]byte, *factor.Model) {
	nd, nk := len(md.D), len(md.KT)
	nm := md.N * md.M
	words := make([]float64, rawHeader+(nd+nk)*nm)
	hdr := [rawHeader]int64{rawMagic, int64(md.N), int64(md.M), int64(md.U), int64(md.Tie), int64(nd), int64(nk), 0}
	for k, v := range hdr {
		words[k] = float64frombits(uint64(v))
	}
	snap := &factor.Model{N: md.N, M: md.M, U: md.U, Tie: md.Tie, Iteration: md.Iteration, LogLik: md.LogLik, WKL: md.WKL, Seed: md.Seed}
	off := rawHeader
	for _, d := range md.D {
		dst := words[off : off+nm : off+nm]
		copy(dst, d)
		snap.D = append(snap.D, dst)
		off += nm
	}
	for _, kt := range md.KT {
		dst := words[off : off+nm : off+nm]
		copy(dst, kt)
		snap.KT = append(snap.KT, dst)
		off += nm
	}
	data := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	if !LittleEndian {
		for k, w := range words {
			binary.LittleEndian.PutUint64(data[k*8:], *(*uint64)(unsafe.Pointer(&w)))
		}
		// The snapshot must hold values, not swapped bytes.
		snap = nil
	}
	return data, snap
}

func float64frombits(b uint64) float64 { return *(*float64)(unsafe.Pointer(&b)) }

// DecodeRawModel reads a raw model into into when it has the same shape
// (overwriting it), else into a new model. It checks the header and the
// size; the caller validates the values.
func DecodeRawModel(data []byte, into *factor.Model) (*factor.Model, error) {
	sh, err := ParseRawHeader(data)
	if err != nil {
		return nil, err
	}
	if want := sh.Size(); len(data) != want {
		return nil, fmt.Errorf("wire: raw model: %d bytes, want %d", len(data), want)
	}
	md := sh.Model(into)
	nm := sh.N * sh.M
	off := rawHeader * 8
	for _, blocks := range [][][]float64{md.D, md.KT} {
		for _, b := range blocks {
			src := data[off : off+nm*8]
			if LittleEndian {
				copy(unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), nm*8), src)
			} else {
				for k := range b {
					b[k] = float64frombits(binary.LittleEndian.Uint64(src[k*8:]))
				}
			}
			off += nm * 8
		}
	}
	return md, nil
}

// RawShape is the shape a raw model's header gives: N, M, U and Tie of
// the model and its numbers of D and K blocks.
type RawShape struct {
	N, M, U, ND, NK int
	Tie             factor.Tie
}

// ParseRawHeader reads and checks the header of a raw model (its first
// RawHeaderBytes bytes).
func ParseRawHeader(data []byte) (RawShape, error) {
	if len(data) < rawHeader*8 {
		return RawShape{}, errors.New("wire: raw model: short header")
	}
	var hdr [rawHeader]int64
	for k := range hdr {
		hdr[k] = int64(binary.LittleEndian.Uint64(data[k*8:]))
	}
	n, m, u, tie, nd, nk := hdr[1], hdr[2], hdr[3], factor.Tie(hdr[4]), hdr[5], hdr[6]
	switch {
	case hdr[0] != rawMagic:
		return RawShape{}, errors.New("wire: raw model: bad magic")
	case n < 1 || m < 1 || u < 1 || n > 1<<31 || m > 1<<20 || u > 1<<20:
		return RawShape{}, fmt.Errorf("wire: raw model: bad shape n=%d m=%d u=%d", n, m, u)
	case !validTie(tie) || nd != int64(factor.NumD(int(u), tie)) || nk != int64(factor.NumK(int(u), tie)):
		return RawShape{}, fmt.Errorf("wire: raw model: %d D and %d K blocks do not fit u=%d tie=%v", nd, nk, u, tie)
	}
	return RawShape{N: int(n), M: int(m), U: int(u), ND: int(nd), NK: int(nk), Tie: tie}, nil
}

// Size is the byte size of a raw model of this shape.
func (sh RawShape) Size() int { return (rawHeader + (sh.ND+sh.NK)*sh.N*sh.M) * 8 }

// DOffset and KOffset are the byte offsets of D block b and K block b.
func (sh RawShape) DOffset(b int) int { return (rawHeader + b*sh.N*sh.M) * 8 }
func (sh RawShape) KOffset(b int) int { return (rawHeader + (sh.ND+b)*sh.N*sh.M) * 8 }

// Model returns into when it has this shape, else a new model.
func (sh RawShape) Model(into *factor.Model) *factor.Model {
	if into == nil || into.N != sh.N || into.M != sh.M || into.U != sh.U || into.Tie != sh.Tie {
		return factor.NewModel(sh.N, sh.M, sh.U, sh.Tie)
	}
	return into
}

// RawModelParts returns the byte offset of the K blocks in a raw model
// (EncodeRawModel) and the CRC-32C (hex) of each K block and of each given
// row range [lo, hi) of each D block, for TaskRequest.KCRCs and DCRC.
func RawModelParts(data []byte, dRanges []RowRange) (kOffset int, kCRCs, dCRCs []string, err error) {
	sh, err := ParseRawHeader(data)
	if err != nil {
		return 0, nil, nil, err
	}
	if len(data) != sh.Size() {
		return 0, nil, nil, fmt.Errorf("wire: raw model: %d bytes, want %d", len(data), sh.Size())
	}
	nm := sh.N * sh.M * 8
	for b := range sh.NK {
		kCRCs = append(kCRCs, CRC(data[sh.KOffset(b):sh.KOffset(b)+nm]))
	}
	for _, r := range dRanges {
		if r.Block < 0 || r.Block >= sh.ND || r.Lo < 0 || r.Lo > r.Hi || r.Hi > sh.N {
			return 0, nil, nil, fmt.Errorf("wire: raw model: rows [%d, %d) of D block %d out of range", r.Lo, r.Hi, r.Block)
		}
		at := sh.DOffset(r.Block)
		dCRCs = append(dCRCs, CRC(data[at+r.Lo*sh.M*8:at+r.Hi*sh.M*8]))
	}
	return sh.KOffset(0), kCRCs, dCRCs, nil
}

// RowRange is rows [Lo, Hi) of D block Block.
type RowRange struct{ Block, Lo, Hi int }

// RawDigest is the digest of a served raw model: its CRC-32C (which
// guards the transfer) and a nonce that makes every served version a
// different cache key.
func RawDigest(data []byte, nonce string) string { return "raw-" + CRC(data) + "-" + nonce }

// CheckRawDigest checks data against a RawDigest.
func CheckRawDigest(data []byte, digest string) error {
	rest, ok := strings.CutPrefix(digest, "raw-")
	crc, _, ok2 := strings.Cut(rest, "-")
	if !ok || !ok2 {
		return fmt.Errorf("wire: raw model digest %q is malformed", digest)
	}
	if got := CRC(data); got != crc {
		return fmt.Errorf("wire: raw model has CRC %s, digest %s says %s", got, digest, crc)
	}
	return nil
}

func validTie(t factor.Tie) bool {
	p, err := factor.ParseTie(t.String())
	return err == nil && p == t
}
