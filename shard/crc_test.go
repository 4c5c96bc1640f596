package shard

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
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

// idRowsExample is a 3-row example of AddIDRows: ids of several lengths
// (one of 2-byte UTF-8), a repeated id, a non-unit count.
func idRowsExample(t *testing.T) (st, ac, nx []int32, cs []float64, states, actions *Vocab) {
	t.Helper()
	states, err := NewVocab([]string{"s0", "longer-state", "é"})
	if err != nil {
		t.Fatal(err)
	}
	if actions, err = NewVocab([]string{"go", "stay"}); err != nil {
		t.Fatal(err)
	}
	return []int32{0, 2, 1}, []int32{1, 0, 1}, []int32{1, 1, 2}, []float64{1, 2.5, 1e-9}, states, actions
}

// TestAddIDRowsBytes: AddIDRows hashes, per row, each group named by ids
// as the id's bytes and a 0x00, else the uint32 index, then the count's
// float64 bits: checked against crc32 (Castagnoli and IEEE) of bytes
// written out by hand, for ids on states only, actions only, both; with
// counts nil the count is 1.
func TestAddIDRowsBytes(t *testing.T) {
	st, ac, nx, cs, states, actions := idRowsExample(t)
	u32 := func(i uint32) string { return string(binary.LittleEndian.AppendUint32(nil, i)) }
	f64 := func(c float64) string { return string(binary.LittleEndian.AppendUint64(nil, math.Float64bits(c))) }
	cases := []struct {
		name            string
		states, actions VocabView
		counts          []float64
		want            string
	}{
		{"states", states.View(), VocabView{}, cs,
			"s0\x00" + u32(1) + "longer-state\x00" + f64(1) +
				"é\x00" + u32(0) + "longer-state\x00" + f64(2.5) +
				"longer-state\x00" + u32(1) + "é\x00" + f64(1e-9)},
		{"actions", VocabView{}, actions.View(), cs,
			u32(0) + "stay\x00" + u32(1) + f64(1) +
				u32(2) + "go\x00" + u32(1) + f64(2.5) +
				u32(1) + "stay\x00" + u32(2) + f64(1e-9)},
		{"both", states.View(), actions.View(), cs,
			"s0\x00stay\x00longer-state\x00" + f64(1) +
				"é\x00go\x00longer-state\x00" + f64(2.5) +
				"longer-state\x00stay\x00é\x00" + f64(1e-9)},
		{"both, no counts", states.View(), actions.View(), nil,
			"s0\x00stay\x00longer-state\x00" + f64(1) +
				"é\x00go\x00longer-state\x00" + f64(1) +
				"longer-state\x00stay\x00é\x00" + f64(1)},
	}
	for _, c := range cases {
		var h FingerprintHash
		h.AddIDRows(st, ac, nx, c.counts, c.states, c.actions)
		raw := []byte(c.want)
		want := RowsCRC{C: crc32.Checksum(raw, crc32.MakeTable(crc32.Castagnoli)), I: crc32.ChecksumIEEE(raw), Len: int64(len(raw))}
		if got := h.Sum(); got != want {
			t.Errorf("%s: %+v, want %+v (the CRCs of %q)", c.name, got, want, raw)
		}
	}
}

// TestAddIDRowsZeroViewsIsAdd: with both views zero AddIDRows is Add,
// bitwise, batch after batch (with and without counts).
func TestAddIDRowsZeroViewsIsAdd(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var a, b FingerprintHash
	for batch := range 20 {
		n := rng.IntN(300)
		st, ac, nx, cs := make([]int32, n), make([]int32, n), make([]int32, n), make([]float64, n)
		for k := range n {
			st[k], ac[k], nx[k], cs[k] = rng.Int32(), rng.Int32N(5), rng.Int32(), rng.Float64()*10
		}
		if batch%3 == 0 {
			cs = nil
		}
		a.Add(st, ac, nx, cs)
		b.AddIDRows(st, ac, nx, cs, VocabView{}, VocabView{})
		if a.Sum() != b.Sum() {
			t.Fatalf("batch %d: AddIDRows %+v, Add %+v", batch, b.Sum(), a.Sum())
		}
	}
}

// TestAddIDRowsSplits: random rows named by ids, hashed whole, equal the
// RowsCRC.Then of their two parts cut anywhere, each part read with a
// vocabulary of its own (numbered as that part first sees its ids, so
// the indices differ between the parts and from the whole); and
// hashed across batches (buffers past idRowsChunk included) as whole.
func TestAddIDRowsSplits(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const rows = 300
	type row struct{ s, a, s2 string }
	data := make([]row, rows)
	name := func(p string, k int) string { return p + strings.Repeat("x", rng.IntN(20)) + fmt.Sprint(k) }
	for k := range data {
		data[k] = row{name("s", rng.IntN(40)), name("a", rng.IntN(4)), name("s", rng.IntN(40))}
	}
	cs := make([]float64, rows)
	for k := range cs {
		cs[k] = float64(rng.IntN(4)) + 0.5
	}
	// read numbers rows [lo, hi) as a scan would: ids interned as first
	// seen (actions named by ids only when ids is set).
	read := func(lo, hi int, ids bool) RowsCRC {
		var sv, av Vocab
		intern := func(v *Vocab, id string) int32 {
			i, err := v.Intern([]byte(id))
			if err != nil {
				t.Fatal(err)
			}
			return int32(i)
		}
		var st, ac, nx []int32
		for _, r := range data[lo:hi] {
			st, nx = append(st, intern(&sv, r.s)), append(nx, intern(&sv, r.s2))
			ac = append(ac, int32(len(r.a)))
			if ids {
				ac[len(ac)-1] = intern(&av, r.a)
			}
		}
		actions := VocabView{}
		if ids {
			actions = av.View()
		}
		var h FingerprintHash
		h.AddIDRows(st, ac, nx, cs[lo:hi], sv.View(), actions)
		return h.Sum()
	}
	for _, ids := range []bool{false, true} {
		whole := read(0, rows, ids)
		for cut := 0; cut <= rows; cut += 1 + rng.IntN(17) {
			if got := read(0, cut, ids).Then(read(cut, rows, ids)); got != whole {
				t.Fatalf("action ids %v, cut at %d: %+v, whole %+v", ids, cut, got, whole)
			}
		}
	}
	// Batches whose buffer passes idRowsChunk hash as one batch.
	long := strings.Repeat("y", MaxIDBytes-8)
	v, err := NewVocab([]string{long + "0", long + "1"})
	if err != nil {
		t.Fatal(err)
	}
	n := 2*idRowsChunk/(2*MaxIDBytes) + 7
	st, ac, nx := make([]int32, n), make([]int32, n), make([]int32, n)
	for k := range n {
		st[k], ac[k], nx[k] = int32(k%2), int32(k%3), int32(k/2%2)
	}
	var one, many FingerprintHash
	one.AddIDRows(st, ac, nx, nil, v.View(), VocabView{})
	for lo := 0; lo < n; lo += 1000 {
		hi := min(n, lo+1000)
		many.AddIDRows(st[lo:hi], ac[lo:hi], nx[lo:hi], nil, v.View(), VocabView{})
	}
	rowBytes := 2*(len(long)+1+1) + 4 + 8 // two ids and their 0x00, the action, the count
	if one.Sum() != many.Sum() || one.Sum().Len != int64(n*rowBytes) {
		t.Fatalf("one batch %+v, many %+v, want Len %d", one.Sum(), many.Sum(), n*rowBytes)
	}
}

// BenchmarkFingerprintHash: a batch of 65536 rows (DefaultBatchRows)
// hashed as integers (Add, 20 bytes a row) and named by ids on states and
// actions (AddIDRows): ids of 6 and 25 bytes among 10^4 states, and of 8
// bytes among 2^20 states (the vocabulary's offsets and bytes no longer
// in cache). b.SetBytes counts rows × 20, so MB/s compare per row.
func BenchmarkFingerprintHash(b *testing.B) {
	const rows = 1 << 16
	rng := rand.New(rand.NewPCG(1, 2))
	batch := func(n int32) (st, ac, nx []int32) {
		st, ac, nx = make([]int32, rows), make([]int32, rows), make([]int32, rows)
		for k := range rows {
			st[k], ac[k], nx[k] = rng.Int32N(n), rng.Int32N(4), rng.Int32N(n)
		}
		return st, ac, nx
	}
	vocab := func(n int, format string) VocabView {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf(format, i)
		}
		v, err := NewVocab(ids)
		if err != nil {
			b.Fatal(err)
		}
		return v.View()
	}
	b.Run("integers", func(b *testing.B) {
		st, ac, nx := batch(10000)
		b.SetBytes(rows * FingerprintRowBytes)
		var h FingerprintHash
		for b.Loop() {
			h.Add(st, ac, nx, nil)
		}
	})
	for _, c := range []struct {
		format string
		n      int
	}{{"s%05d", 10000}, {"https://example.com/%05d", 10000}, {"s%07d", 1 << 20}} {
		b.Run(fmt.Sprintf("ids of %d bytes, %d states", len(fmt.Sprintf(c.format, 0)), c.n), func(b *testing.B) {
			st, ac, nx := batch(int32(c.n))
			states, actions := vocab(c.n, c.format), vocab(4, "a%d")
			b.SetBytes(rows * FingerprintRowBytes)
			var h FingerprintHash
			for b.Loop() {
				h.AddIDRows(st, ac, nx, nil, states, actions)
			}
		})
	}
}
