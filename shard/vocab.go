package shard

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/maphash"
	"math"
	"slices"
	"unicode/utf8"
)

// MaxIDBytes is the longest id a Vocab holds, in bytes of UTF-8.
const MaxIDBytes = 256

// maxArena bounds the bytes of all ids of a Vocab (offsets are uint32).
const maxArena = math.MaxUint32

// Vocab is a vocabulary of user ids: the ids of states (or of actions) in
// index order, so that index i of the model is id ID(i). Batch commands
// build it as the sorted set of the ids in the data (bytewise order of
// their UTF-8): a function of the set only, so the indices do not depend
// on the order of rows, on how the input is split or on worker counts, and
// the vocabulary of a dataset split into parts is the k-way merge of the
// parts' sorted vocabularies (Merge). Growth appends (Intern), never
// renumbers: a model's indices stay valid.
//
// Memory is compact (spec ask-the-model §2.5): the ids' bytes in one arena,
// a uint32 offset per id, and an open-addressing table at load at most 3/4
// of 16-byte slots: 4 + 21 to 43 bytes per id beyond its bytes (the table
// doubles at load 3/4), against 50–70 for a map[string]int32. A slot holds the id's index, length and
// 24 bits of its hash, and the id itself when it has at most 8 bytes (an
// id holds no NUL, so zero padding is unambiguous), else its place in the
// arena. So a lookup reads one slot (one cache miss in a large
// vocabulary) for a short id, and the id's bytes besides for a long one;
// a probe that meets another id is refused on its tag and length. An
// index-only table made every lookup read the slot, the offset and the
// bytes: three misses, each a TLB miss too beyond a few MB
// (BenchmarkVocabIndex at 4·10^5 ids of 7 bytes: ≈ 600 ns a lookup then).
// The zero value is an empty vocabulary ready to use. A Vocab is not safe
// for concurrent use while it grows; lookups (Index, ID) may run
// concurrently once it no longer changes. A VocabView (View) is a
// snapshot of its ids that another goroutine may read while it grows.
type Vocab struct {
	arena []byte
	off   []uint32    // id i is arena[off[i]:off[i+1]]; len(off) = Len()+1 once non-empty
	table []vocabSlot // open addressing; len a power of two
	seed  maphash.Seed
	ready bool // seed set
}

// CheckID returns why id cannot be a user id, or "" when it can: ids are
// valid UTF-8, non-empty, at most MaxIDBytes bytes and hold no NUL byte
// (the vocabulary checksum ends each id with one).
func CheckID(id []byte) string {
	switch {
	case len(id) == 0:
		return "is an empty id"
	case len(id) > MaxIDBytes:
		return fmt.Sprintf("is not an id: %d bytes, the limit is %d", len(id), MaxIDBytes)
	case bytes.IndexByte(id, 0) >= 0:
		return "is not an id: it holds a NUL byte"
	case !utf8.Valid(id):
		return "is not an id: it is not valid UTF-8"
	}
	return ""
}

// NewVocab returns a vocabulary of ids, in that order; the ids must be
// distinct and pass CheckID.
func NewVocab(ids []string) (*Vocab, error) {
	v := &Vocab{}
	for i, id := range ids {
		if r := CheckID([]byte(id)); r != "" {
			return nil, fmt.Errorf("shard: vocabulary id %d %q %s", i, id, r)
		}
		k, err := v.Intern([]byte(id))
		if err != nil {
			return nil, err
		}
		if k != i {
			return nil, fmt.Errorf("shard: vocabulary id %d %q repeats id %d", i, id, k)
		}
	}
	return v, nil
}

// Len returns the number of ids.
func (v *Vocab) Len() int {
	if v == nil || len(v.off) == 0 {
		return 0
	}
	return len(v.off) - 1
}

// ID returns id i (a view into the vocabulary: do not modify it).
func (v *Vocab) ID(i int) []byte { return v.arena[v.off[i]:v.off[i+1]:v.off[i+1]] }

// String returns id i as a string.
func (v *Vocab) String(i int) string { return string(v.ID(i)) }

// VocabView is a snapshot of the first Len() ids of a Vocab: it never
// changes, and may be read on another goroutine while the Vocab grows.
// That holds because nothing writes bytes a view can see: Intern only
// appends to the arena and the offsets (past every view's length), and
// SortFrom, Clone and Merge build fresh arrays. A view taken before
// SortFrom therefore stays valid and keeps the numbering it was taken
// with (the ids in their order before the sort). The zero value is "no
// vocabulary" (Valid false). A view is three words and a flag: taking one
// allocates nothing.
type VocabView struct {
	arena []byte
	off   []uint32 // as Vocab.off, for the view's Len() ids
	valid bool
}

// View returns a snapshot of the ids v holds now: the zero view for a nil
// v, a valid one of Len 0 for an empty one.
func (v *Vocab) View() VocabView {
	if v == nil {
		return VocabView{}
	}
	// Capacities capped, so that nothing appended through a view could
	// reach the Vocab's spare room.
	return VocabView{arena: v.arena[:len(v.arena):len(v.arena)], off: v.off[:len(v.off):len(v.off)], valid: true}
}

// Valid reports whether the view is of a vocabulary (not the zero view).
func (v VocabView) Valid() bool { return v.valid }

// Len returns the number of ids in the view.
func (v VocabView) Len() int { return max(len(v.off)-1, 0) }

// ID returns id i, i < Len() (a view into the vocabulary's arena: do not
// modify it).
func (v VocabView) ID(i int) []byte { return v.arena[v.off[i]:v.off[i+1]:v.off[i+1]] }

// Bytes returns the memory the vocabulary holds, in bytes.
func (v *Vocab) Bytes() int {
	if v == nil {
		return 0
	}
	return cap(v.arena) + 4*cap(v.off) + 16*cap(v.table)
}

func (v *Vocab) hash(id []byte) uint64 {
	return maphash.Bytes(v.seed, id)
}

// vocabSlot is a slot of a Vocab's table: head is 0 when empty, else
// tag (24 bits of the id's hash) << 40 | (length−1) << 32 | index+1; id
// is the id's bytes little-endian, zero-padded, when it has at most 8,
// else its offset in the arena.
type vocabSlot struct{ head, id uint64 }

// shortID is the most bytes of an id kept in its slot.
const shortID = 8

// slotHead returns a slot's head for an id of hash h and length n at
// index i.
func slotHead(h uint64, n, i int) uint64 { return h>>40<<40 | uint64(n-1)<<32 | uint64(i+1) }

// packID returns the bytes of a short id as a slot holds them.
func packID(id []byte) uint64 {
	var b [shortID]byte
	copy(b[:], id)
	return binary.LittleEndian.Uint64(b[:])
}

// Index returns the index of id, and false when the vocabulary does not
// hold it.
func (v *Vocab) Index(id []byte) (int, bool) {
	if v == nil || len(v.table) == 0 || len(id) == 0 || len(id) > MaxIDBytes {
		return 0, false
	}
	mask := uint64(len(v.table) - 1)
	h := v.hash(id)
	want := slotHead(h, len(id), 0) &^ (1<<32 - 1)
	var packed uint64
	if len(id) <= shortID {
		packed = packID(id)
	}
	for p := h & mask; ; p = (p + 1) & mask {
		slot := &v.table[p]
		if slot.head == 0 {
			return 0, false
		}
		if slot.head&^(1<<32-1) != want {
			continue
		}
		if len(id) <= shortID && slot.id == packed || len(id) > shortID && bytes.Equal(v.arena[slot.id:slot.id+uint64(len(id))], id) {
			return int(uint32(slot.head)) - 1, true
		}
	}
}

// IndexString is Index for a string.
func (v *Vocab) IndexString(id string) (int, bool) {
	// The conversion does not allocate: Index does not keep id.
	return v.Index([]byte(id))
}

// ErrVocabFull is the error of an Intern past the vocabulary's limits:
// 2^31 − 1 ids or 4 GiB of id bytes.
var ErrVocabFull = errors.New("shard: vocabulary full (2^31-1 ids or 4 GiB of id bytes)")

// Intern returns the index of id, appending it when new. The caller checks
// the id (CheckID) first; Intern copies it.
func (v *Vocab) Intern(id []byte) (int, error) {
	if k, ok := v.Index(id); ok {
		return k, nil
	}
	n := v.Len()
	if n >= math.MaxInt32-1 || len(v.arena)+len(id) > maxArena {
		return 0, ErrVocabFull
	}
	if len(v.off) == 0 {
		v.off = append(v.off, 0)
	}
	v.arena = append(v.arena, id...)
	v.off = append(v.off, uint32(len(v.arena)))
	if 4*(n+1) > 3*len(v.table) {
		v.rehash(max(16, 2*len(v.table)))
	} else {
		v.insert(n)
	}
	return n, nil
}

// insert puts index i into the table (which has room and lacks it).
func (v *Vocab) insert(i int) {
	mask := uint64(len(v.table) - 1)
	id := v.ID(i)
	h := v.hash(id)
	p := h & mask
	for v.table[p].head != 0 {
		p = (p + 1) & mask
	}
	slot := vocabSlot{head: slotHead(h, len(id), i), id: uint64(v.off[i])}
	if len(id) <= shortID {
		slot.id = packID(id)
	}
	v.table[p] = slot
}

// rehash rebuilds the table with size slots (a power of two).
func (v *Vocab) rehash(size int) {
	if !v.ready {
		v.seed, v.ready = maphash.MakeSeed(), true
	}
	v.table = make([]vocabSlot, size)
	for i := range v.Len() {
		v.insert(i)
	}
}

// tableSize is the table size for n ids: the smallest power of two that
// keeps the load at most 3/4.
func tableSize(n int) int {
	size := 16
	for 4*n > 3*size {
		size *= 2
	}
	return size
}

// Clone returns a copy of v (nil for nil).
func (v *Vocab) Clone() *Vocab {
	if v == nil {
		return nil
	}
	return &Vocab{arena: slices.Clone(v.arena), off: slices.Clone(v.off), table: slices.Clone(v.table), seed: v.seed, ready: v.ready}
}

// Equal reports whether v and o hold the same ids in the same order.
func (v *Vocab) Equal(o *Vocab) bool {
	if v.Len() != o.Len() {
		return false
	}
	for i := range v.Len() {
		if !bytes.Equal(v.ID(i), o.ID(i)) {
			return false
		}
	}
	return true
}

// Sorted reports whether ids [from, Len) are in increasing bytewise order.
func (v *Vocab) Sorted(from int) bool {
	for i := from + 1; i < v.Len(); i++ {
		if bytes.Compare(v.ID(i-1), v.ID(i)) >= 0 {
			return false
		}
	}
	return true
}

// SortFrom puts ids [from, Len) in increasing bytewise order (those before
// from keep their indices) and returns perm, perm[old] = new index for
// every index (the identity below from), so that data counted with the
// old indices can be renumbered. A batch command interns ids as rows come
// (first seen, first numbered) and sorts once at the end: SortFrom(0) then
// gives the sorted set whatever the row order, and after a model's ids
// (warm start) SortFrom(model's Len) appends the new ids sorted among
// themselves. The ids are copied into fresh arrays, never rewritten in
// place: a VocabView taken before keeps the old numbering, still valid.
func (v *Vocab) SortFrom(from int) []int32 {
	n := v.Len()
	order := make([]int32, n-from) // new position → old index
	for k := range order {
		order[k] = int32(from + k)
	}
	slices.SortFunc(order, func(a, b int32) int { return bytes.Compare(v.ID(int(a)), v.ID(int(b))) })
	perm := make([]int32, n)
	for i := range from {
		perm[i] = int32(i)
	}
	for k, old := range order {
		perm[old] = int32(from + k)
	}
	if n > from {
		arena := make([]byte, v.off[from], len(v.arena))
		copy(arena, v.arena[:v.off[from]])
		off := make([]uint32, from+1, len(v.off))
		copy(off, v.off[:from+1])
		for _, old := range order {
			arena = append(arena, v.ID(int(old))...)
			off = append(off, uint32(len(arena)))
		}
		v.arena, v.off = arena, off
		v.rehash(tableSize(n))
	}
	return perm
}

// Merge returns the union of sorted vocabularies (each in increasing
// bytewise order, as SortFrom(0) leaves it), itself sorted: a k-way merge
// in which an id held by several parts appears once. The index of an id in
// the result is its index in the sorted vocabulary of all the parts' data,
// so a dataset split into parts (files, Parquet row groups, CSV byte
// ranges on cluster workers) gets the indices one read of it gives.
func Merge(parts ...*Vocab) (*Vocab, error) {
	for k, p := range parts {
		if !p.Sorted(0) {
			return nil, fmt.Errorf("shard: merge vocabularies: part %d is not sorted", k)
		}
	}
	out := &Vocab{}
	// A binary heap of the parts not exhausted, by their next id.
	pos := make([]int, len(parts))
	var h []int
	less := func(a, b int) bool { return bytes.Compare(parts[h[a]].ID(pos[h[a]]), parts[h[b]].ID(pos[h[b]])) < 0 }
	down := func(i int) {
		for {
			c := 2*i + 1
			if c >= len(h) {
				return
			}
			if c+1 < len(h) && less(c+1, c) {
				c++
			}
			if !less(c, i) {
				return
			}
			h[i], h[c] = h[c], h[i]
			i = c
		}
	}
	for k, p := range parts {
		if p.Len() > 0 {
			h = append(h, k)
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		down(i)
	}
	for len(h) > 0 {
		k := h[0]
		id := parts[k].ID(pos[k])
		if n := out.Len(); n == 0 || !bytes.Equal(out.ID(n-1), id) {
			if _, err := out.Intern(id); err != nil {
				return nil, err
			}
		}
		if pos[k]++; pos[k] == parts[k].Len() {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		down(0)
	}
	return out, nil
}

// Checksum returns the SHA-256 of the ids in index order, each as its
// UTF-8 bytes followed by a 0x00 byte (the model file's
// emsf.vocab_checksum).
func (v *Vocab) Checksum() [32]byte {
	var c VocabChecksum
	for i := range v.Len() {
		c.Add(v.ID(i))
	}
	return c.Sum()
}

// VocabChecksum is Vocab.Checksum taken as ids stream by, in index order
// (a vocabulary read in parts, never whole in memory). The zero value is
// ready to use.
type VocabChecksum struct{ h hash.Hash }

// Add takes the next id.
func (c *VocabChecksum) Add(id []byte) {
	if c.h == nil {
		c.h = sha256.New()
	}
	c.h.Write(id)
	c.h.Write([]byte{0})
}

// Sum is the checksum of the ids added so far.
func (c *VocabChecksum) Sum() [32]byte {
	if c.h == nil {
		c.h = sha256.New()
	}
	var sum [32]byte
	c.h.Sum(sum[:0])
	return sum
}

// Strings returns the ids as strings, in index order.
func (v *Vocab) Strings() []string {
	out := make([]string, v.Len())
	for i := range out {
		out[i] = v.String(i)
	}
	return out
}
