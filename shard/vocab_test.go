package shard

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestCheckID(t *testing.T) {
	for _, c := range []struct {
		id   string
		want string // substring of the reason, "" when valid
	}{
		{"user42", ""},
		{"/cart", ""},
		{"é", ""},
		{"3", ""},
		{strings.Repeat("x", MaxIDBytes), ""},
		{"", "empty"},
		{strings.Repeat("x", MaxIDBytes+1), "257 bytes"},
		{"a\x00b", "NUL"},
		{"\xff", "UTF-8"},
	} {
		got := CheckID([]byte(c.id))
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("CheckID(%q) = %q, want %q", c.id, got, c.want)
		}
	}
}

// randomIDs returns n distinct ids, some sharing prefixes, some multi-byte.
func randomIDs(rng *rand.Rand, n int) []string {
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		var b strings.Builder
		for range 1 + rng.IntN(6) {
			b.WriteRune([]rune("ab/_é0Z€")[rng.IntN(8)])
		}
		if id := b.String(); !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// TestVocabSortedSetIsOrderFree: interning rows in any order, then
// SortFrom(0), gives the sorted set of ids; the merge of the sorted
// vocabularies of any split of the rows gives the same; perm maps every
// first-seen index to the index of the same id.
func TestVocabSortedSetIsOrderFree(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 50 {
		ids := randomIDs(rng, 1+rng.IntN(300))
		want := slices.Clone(ids)
		slices.Sort(want) // Go string order is bytewise
		rows := make([]string, 3*len(ids))
		for k := range rows {
			rows[k] = ids[k%len(ids)]
		}
		rng.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })

		var v Vocab
		first := make([]int, len(rows))
		for k, r := range rows {
			var err error
			if first[k], err = v.Intern([]byte(r)); err != nil {
				t.Fatal(err)
			}
		}
		perm := v.SortFrom(0)
		if got := v.Strings(); !slices.Equal(got, want) {
			t.Fatalf("trial %d: sorted vocabulary %q, want %q", trial, got, want)
		}
		for k, r := range rows {
			if v.String(int(perm[first[k]])) != r {
				t.Fatalf("trial %d: row %d id %q: perm sends first-seen %d to %d = %q", trial, k, r, first[k], perm[first[k]], v.String(int(perm[first[k]])))
			}
			if i, ok := v.IndexString(r); !ok || i != int(perm[first[k]]) {
				t.Fatalf("trial %d: Index(%q) = %d, %v after sorting", trial, r, i, ok)
			}
		}

		// Split the rows into parts at random cuts; each part's sorted
		// vocabulary, merged, is the whole's.
		var parts []*Vocab
		for lo := 0; lo < len(rows); {
			hi := min(len(rows), lo+1+rng.IntN(len(rows)))
			p := &Vocab{}
			for _, r := range rows[lo:hi] {
				if _, err := p.Intern([]byte(r)); err != nil {
					t.Fatal(err)
				}
			}
			p.SortFrom(0)
			parts = append(parts, p)
			lo = hi
		}
		merged, err := Merge(parts...)
		if err != nil {
			t.Fatal(err)
		}
		if !merged.Equal(&v) {
			t.Fatalf("trial %d: merge of %d parts = %q, want %q", trial, len(parts), merged.Strings(), want)
		}
	}
}

// TestVocabSortFromKeepsPrefix: a warm start keeps the model's ids and
// appends the new ones sorted among themselves.
func TestVocabSortFromKeepsPrefix(t *testing.T) {
	v, err := NewVocab([]string{"m", "b", "x"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"z", "b", "a", "y", "m", "c"} {
		if _, err := v.Intern([]byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	// First seen: m b x | z a y c
	perm := v.SortFrom(3)
	if got, want := v.Strings(), []string{"m", "b", "x", "a", "c", "y", "z"}; !slices.Equal(got, want) {
		t.Fatalf("vocabulary %q, want %q", got, want)
	}
	if want := []int32{0, 1, 2, 6, 3, 5, 4}; !slices.Equal(perm, want) {
		t.Fatalf("perm %v, want %v", perm, want)
	}
}

func TestVocabGrowsPastRehash(t *testing.T) {
	var v Vocab
	const n = 100000
	for i := range n {
		k, err := v.Intern(fmt.Appendf(nil, "s%d", i))
		if err != nil || k != i {
			t.Fatalf("Intern(s%d) = %d, %v", i, k, err)
		}
	}
	for i := range n {
		if k, ok := v.IndexString(fmt.Sprintf("s%d", i)); !ok || k != i {
			t.Fatalf("Index(s%d) = %d, %v", i, k, ok)
		}
	}
	if _, ok := v.IndexString("s100000"); ok {
		t.Fatal("an id never interned is found")
	}
	// Compact: the ids' bytes, 4 bytes of offset and at most 16/0.375
	// bytes of table per id (16-byte slots; the table doubles at load
	// 3/4).
	idBytes := len(v.arena)
	if per := float64(v.Bytes()-cap(v.arena)) / n; per > 4*1.3+16/0.375+1 {
		t.Errorf("%.1f bytes per id beyond the %d bytes of ids", per, idBytes)
	}
	c := v.Clone()
	if _, err := c.Intern([]byte("new")); err != nil {
		t.Fatal(err)
	}
	if _, ok := v.IndexString("new"); ok || v.Len() != n {
		t.Fatal("Clone shares state with the original")
	}
}

func TestVocabChecksum(t *testing.T) {
	v, err := NewVocab([]string{"a", "bc"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := v.Checksum(), sha256.Sum256([]byte("a\x00bc\x00")); got != want {
		t.Fatalf("checksum %x, want %x", got, want)
	}
	if _, err := NewVocab([]string{"a", "a"}); err == nil || !strings.Contains(err.Error(), "repeats") {
		t.Fatalf("duplicate ids: %v", err)
	}
	if _, err := NewVocab([]string{"a", ""}); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty id: %v", err)
	}
	if _, err := Merge(v, &Vocab{}); err != nil {
		t.Fatal(err)
	}
	u, _ := NewVocab([]string{"b", "a"})
	if _, err := Merge(v, u); err == nil {
		t.Fatal("merge of an unsorted part succeeded")
	}
}

// TestCounterRemapIsDirectCount: counting rows numbered as first seen and
// renumbering once sorted gives bitwise the matrices of counting the rows
// numbered by the sorted vocabulary from the start.
func TestCounterRemapIsDirectCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	states := randomIDs(rng, 200)
	actions := []string{"right", "left", "up"}
	type row struct {
		s, a, n string
		c       float64
	}
	rows := make([]row, 20000)
	for k := range rows {
		c := 1.0
		if rng.IntN(4) == 0 {
			c = 0.1 + rng.Float64()
		}
		rows[k] = row{states[rng.IntN(len(states))], actions[rng.IntN(3)], states[rng.IntN(len(states))], c}
	}
	var sv, av Vocab
	var first Counter
	for _, r := range rows {
		i, _ := sv.Intern([]byte(r.s))
		a, _ := av.Intern([]byte(r.a))
		j, _ := sv.Intern([]byte(r.n))
		if err := first.Add(i, a, j, r.c); err != nil {
			t.Fatal(err)
		}
	}
	first.Remap(sv.SortFrom(0), av.SortFrom(0))
	var direct Counter
	for _, r := range rows {
		i, _ := sv.IndexString(r.s)
		a, _ := av.IndexString(r.a)
		j, _ := sv.IndexString(r.n)
		if err := direct.Add(i, a, j, r.c); err != nil {
			t.Fatal(err)
		}
	}
	n1, u1 := first.Dims()
	n2, u2 := direct.Dims()
	if n1 != n2 || u1 != u2 {
		t.Fatalf("dims after remap %d×%d, direct %d×%d", n1, u1, n2, u2)
	}
	got, want := first.Matrices(u1), direct.Matrices(u2)
	for a := range want {
		g, w := got[a], want[a]
		if !slices.Equal(g.Rows, w.Rows) || !slices.Equal(g.Ptr, w.Ptr) || !slices.Equal(g.Cols, w.Cols) || !slices.Equal(g.Vals, w.Vals) {
			t.Fatalf("action %d: remapped counts differ from direct counts", a)
		}
	}
}

// TestVocabView: the zero view of a nil vocabulary, an empty valid one of
// an empty vocabulary; a view keeps the ids it was taken with while the
// vocabulary grows past it (appends, rehashes) and after SortFrom, which
// renumbers the vocabulary but not the view.
func TestVocabView(t *testing.T) {
	if w := (*Vocab)(nil).View(); w.Valid() || w.Len() != 0 {
		t.Fatalf("nil vocabulary: view valid %v, Len %d; want the zero view", w.Valid(), w.Len())
	}
	if (VocabView{}).Valid() {
		t.Fatal("the zero view is valid")
	}
	var v Vocab
	if w := v.View(); !w.Valid() || w.Len() != 0 {
		t.Fatalf("empty vocabulary: view valid %v, Len %d; want valid, 0", w.Valid(), w.Len())
	}
	first := []string{"m", "b", "x"}
	for _, id := range first {
		if _, err := v.Intern([]byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	w := v.View()
	grown := slices.Clone(first)
	for k := range 100 {
		id := fmt.Sprintf("id%d", k)
		if _, err := v.Intern([]byte(id)); err != nil {
			t.Fatal(err)
		}
		grown = append(grown, id)
	}
	w2 := v.View() // shares the vocabulary's arrays until SortFrom
	v.SortFrom(0)
	if _, err := v.Intern([]byte("after")); err != nil {
		t.Fatal(err)
	}
	viewIDs := func(w VocabView) []string {
		var out []string
		for i := range w.Len() {
			out = append(out, string(w.ID(i)))
		}
		return out
	}
	if got := viewIDs(w); !slices.Equal(got, first) {
		t.Fatalf("view taken at %q reads %q after growth and SortFrom", first, got)
	}
	if got := viewIDs(w2); !slices.Equal(got, grown) {
		t.Fatalf("view taken before SortFrom reads %q after it, want %q (the numbering it was taken with)", got, grown)
	}
	if got, want := viewIDs(v.View()), v.Strings(); !slices.Equal(got, want) || len(got) != 104 {
		t.Fatalf("a view taken now reads %q, the vocabulary %q", got, want)
	}
	// A scan takes one per batch: it must cost no allocation.
	if a := testing.AllocsPerRun(100, func() { w = v.View() }); a != 0 {
		t.Fatalf("View allocates %v times", a)
	}
}

// TestVocabViewWhileGrowing: views read on one goroutine while the
// vocabulary grows on another (appends into spare capacity, reallocation,
// rehashes) hold their ids. Under -race (CI) the race detector would flag
// a view that shared memory the growth writes.
func TestVocabViewWhileGrowing(t *testing.T) {
	const n, every = 10000, 50
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("id-%d-%s", i, strings.Repeat("z", i%13))
	}
	views := make(chan VocabView, 4)
	var v Vocab
	var growErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(views)
		for i, id := range ids {
			if _, growErr = v.Intern([]byte(id)); growErr != nil {
				return
			}
			if i%every == 0 {
				views <- v.View()
			}
		}
	})
	seen := 0
	for w := range views {
		seen++
		if w.Len()%every != 1 {
			t.Errorf("view of %d ids, want one every %d interns", w.Len(), every)
		}
		for i := range w.Len() {
			if string(w.ID(i)) != ids[i] {
				t.Fatalf("view of %d ids: id %d is %q, want %q", w.Len(), i, w.ID(i), ids[i])
			}
		}
	}
	wg.Wait()
	if growErr != nil {
		t.Fatal(growErr)
	}
	if seen != n/every {
		t.Fatalf("%d views, want %d", seen, n/every)
	}
}

// BenchmarkVocabIndex: lookups of ids held by a vocabulary of n ids of
// 7 bytes ("s" and six digits, as `emsf gen --string-ids` writes them),
// in random order: at n = 4·10^5 the table, the offsets and the arena are
// beyond the caches, and each probe's reads are the cost.
func BenchmarkVocabIndex(b *testing.B) {
	for _, n := range []int{1 << 10, 400_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			v := &Vocab{}
			ids := make([][]byte, n)
			for i := range n {
				ids[i] = fmt.Appendf(nil, "s%06d", i)
				if _, err := v.Intern(ids[i]); err != nil {
					b.Fatal(err)
				}
			}
			// The queries in random order, read one after the other from
			// one buffer, as a reader's batch holds them.
			rng := rand.New(rand.NewPCG(1, 2))
			const queries = 1 << 16
			var stream []byte
			for range queries {
				stream = append(stream, ids[rng.IntN(n)]...)
			}
			b.ResetTimer()
			for k := range b.N {
				q := 7 * (k & (queries - 1))
				if _, ok := v.Index(stream[q : q+7]); !ok {
					b.Fatal("missing")
				}
			}
		})
	}
}
