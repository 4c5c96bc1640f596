package factor_test

import (
	"math"
	"slices"
	"testing"

	"github.com/emsf/emsf/factor"
)

// checkStart fails unless md is a start EM can leave: its rows
// stochastic (checkStochastic) and every entry positive and finite (EM
// never moves an entry away from 0).
func checkStart(t *testing.T, md *factor.Model) {
	t.Helper()
	checkStochastic(t, md, "start")
	for _, part := range [][][]float64{md.D, md.KT} {
		for b, x := range part {
			for q, v := range x {
				if !(v > 0) || math.IsInf(v, 0) {
					t.Fatalf("block %d entry %d: %v", b, q, v)
				}
			}
		}
	}
}

func TestNewSeededIsAStochasticStartOfItsSeed(t *testing.T) {
	const n, m, u = 300, 8, 2
	blocks := factor.RandomCounts(n, u, 6, 9, 3)
	md := factor.NewSeeded(n, m, u, factor.TieNone, blocks, 7, 1)
	checkStart(t, md)
	if md.Seed != 7 {
		t.Fatalf("seed %d recorded, want 7", md.Seed)
	}
	for _, w := range []int{2, 3, 8} {
		if other := factor.NewSeeded(n, m, u, factor.TieNone, blocks, 7, w); !other.Equal(md) {
			t.Fatalf("workers %d: another start than with 1 worker", w)
		}
	}
	if factor.NewSeeded(n, m, u, factor.TieNone, blocks, 8, 1).Equal(md) {
		t.Fatal("seeds 7 and 8 give the same start")
	}
	if factor.NewRandom(n, m, u, factor.TieNone, 7).Equal(md) {
		t.Fatal("the seeded start is factor.NewRandom's")
	}
	// Other tie modes start at random.
	for _, tie := range []factor.Tie{factor.TieSharedD, factor.TieSharedK} {
		if !factor.NewSeeded(n, m, u, tie, blocks, 7, 2).Equal(factor.NewRandom(n, m, u, tie, 7)) {
			t.Fatalf("tie %v: not factor.NewRandom's start", tie)
		}
	}
}

// TestNewSeededDrawsRowsOfTheData pins what the start is made of: with
// rows that each send nearly all their counts to a next state of their
// own, every row of K peaks at one of those next states, no two at the
// same (rows are drawn without replacement), and the row of D of a
// state peaks at the row of K drawn from that state, when it was drawn.
// With fewer rows than m, the rows of K left over are factor.NewRandom's, as are
// the rows of D without counts.
func TestNewSeededDrawsRowsOfTheData(t *testing.T) {
	const n, m = 40, 6
	for _, rows := range []int{12, 4} { // more rows than m, then fewer
		var rs, cs []int32
		var vs []float64
		for i := range rows {
			// Row i sends 1000 to state 20+i and 1 to state 0.
			rs = append(rs, int32(i), int32(i))
			cs = append(cs, 0, int32(20+i))
			vs = append(vs, 1, 1000)
		}
		b, err := factor.NewBlock(0, rs, cs, vs)
		if err != nil {
			t.Fatal(err)
		}
		md := factor.NewSeeded(n, m, 1, factor.TieNone, []*factor.Block{b}, 5, 2)
		checkStart(t, md)
		rnd := factor.NewRandom(n, m, 1, factor.TieNone, 5)
		kt, d := md.KT[0], md.D[0]
		drawn := map[int]int{} // the state each row of K was drawn from → row
		for l := range m {
			col := make([]float64, n)
			for j := range n {
				col[j] = kt[j*m+l]
			}
			peak := slices.Index(col, slices.Max(col))
			if l >= rows {
				for j := range n {
					if kt[j*m+l] != rnd.KT[0][j*m+l] {
						t.Fatalf("%d rows: row %d of K is not factor.NewRandom's", rows, l)
					}
				}
				continue
			}
			if peak < 20 || peak >= 20+rows {
				t.Fatalf("%d rows: row %d of K peaks at %d, not at a row's own next state", rows, l, peak)
			}
			if _, dup := drawn[peak-20]; dup {
				t.Fatalf("%d rows: state %d drawn twice", rows, peak-20)
			}
			drawn[peak-20] = l
		}
		if len(drawn) != min(rows, m) {
			t.Fatalf("%d rows: %d rows of K drawn from the data, want %d", rows, len(drawn), min(rows, m))
		}
		for i, l := range drawn {
			di := d[i*m : i*m+m]
			if k := slices.Index(di, slices.Max(di)); k != l {
				t.Fatalf("%d rows: row %d of D peaks at %d, want %d (the row of K drawn from it)", rows, i, k, l)
			}
		}
		for i := rows; i < n; i++ {
			if !slices.Equal(d[i*m:i*m+m], rnd.D[0][i*m:i*m+m]) {
				t.Fatalf("%d rows: row %d of D (no counts) is not factor.NewRandom's", rows, i)
			}
		}
	}
}

// TestNewSeededRowsAcrossBlocks: a row whose counts lie in two blocks
// (shards of one action) is one row of the data, as in one block.
func TestNewSeededRowsAcrossBlocks(t *testing.T) {
	const n, m = 30, 4
	one, err := factor.NewBlock(0, []int32{1, 1, 2, 5, 5}, []int32{3, 9, 4, 0, 7}, []float64{2, 5, 1, 3, 4})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := factor.NewBlock(0, []int32{1, 5}, []int32{3, 0}, []float64{2, 3})
	b, _ := factor.NewBlock(0, []int32{1, 2, 5}, []int32{9, 4, 7}, []float64{5, 1, 4})
	want := factor.NewSeeded(n, m, 1, factor.TieNone, []*factor.Block{one}, 11, 1)
	if got := factor.NewSeeded(n, m, 1, factor.TieNone, []*factor.Block{a, b}, 11, 2); !got.Equal(want) {
		t.Fatal("the rows split over two blocks give another start than in one")
	}
}
