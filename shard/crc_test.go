package shard

import (
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestCRC32CombineMatchesSequential: for both polynomials, random byte
// strings cut at random places (empty pieces, one byte, lengths around
// powers of two), the combined CRC equals the CRC of the whole string.
func TestCRC32CombineMatchesSequential(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, poly := range []uint32{crc32.IEEE, crc32.Castagnoli} {
		tab := crc32.MakeTable(poly)
		for _, n := range []int{0, 1, 2, 7, 8, 63, 64, 65, 255, 256, 257, 1023, 1024, 1025, 4096, 65537} {
			data := make([]byte, n)
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			want := crc32.Checksum(data, tab)
			for range 8 {
				// Cut into 1-5 pieces.
				cuts := []int{0}
				for range rng.IntN(5) {
					cuts = append(cuts, rng.IntN(n+1))
				}
				cuts = append(cuts, n)
				slices.Sort(cuts)
				crc := uint32(0)
				for k := 1; k < len(cuts); k++ {
					piece := data[cuts[k-1]:cuts[k]]
					crc = CRC32Combine(poly, crc, crc32.Checksum(piece, tab), int64(len(piece)))
				}
				if crc != want {
					t.Fatalf("poly %#x, n=%d, cuts %v: combined %#08x, sequential %#08x", poly, n, cuts, crc, want)
				}
			}
		}
	}
}

// TestRowsCRCThen: RowsCRC.Then over the pieces of a transition stream
// is the FingerprintHash of the whole stream, and Fingerprint formats it.
func TestRowsCRCThen(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const rows = 1000
	st, ac, nx := make([]int32, rows), make([]int32, rows), make([]int32, rows)
	cs := make([]float64, rows)
	for k := range rows {
		st[k], ac[k], nx[k], cs[k] = rng.Int32N(100), rng.Int32N(3), rng.Int32N(100), float64(rng.IntN(4))+0.5
	}
	var whole FingerprintHash
	whole.Add(st, ac, nx, cs)
	var acc RowsCRC
	for lo := 0; lo < rows; {
		hi := min(rows, lo+rng.IntN(200))
		var h FingerprintHash
		h.Add(st[lo:hi], ac[lo:hi], nx[lo:hi], cs[lo:hi])
		acc = acc.Then(h.Sum())
		lo = hi
	}
	if acc != whole.Sum() {
		t.Fatalf("combined %+v, whole %+v", acc, whole.Sum())
	}
	if acc.Len != rows*FingerprintRowBytes {
		t.Fatalf("Len %d, want %d", acc.Len, rows*FingerprintRowBytes)
	}
	var ones, explicit FingerprintHash
	ones.Add(st, ac, nx, nil)
	for k := range cs {
		cs[k] = 1
	}
	explicit.Add(st, ac, nx, cs)
	if ones.Sum() != explicit.Sum() {
		t.Fatal("nil counts hash differently from counts of 1")
	}
	if f := (RowsCRC{C: 0xdeadbeef, I: 0x1}).Fingerprint(); f != "crc32c-ieee:deadbeef00000001" {
		t.Fatalf("Fingerprint = %q", f)
	}
}
