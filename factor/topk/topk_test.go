package topk

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// oracle is the answer by definition: every item scored with Dot (plus the
// extra coordinate), sorted by score descending then item ascending.
func oracle(items []float64, extra []float64, n, m int, w []float64, k int) []Hit {
	all := make([]Hit, n)
	for j := range n {
		v := Dot(w[:m], items[j*m:(j+1)*m])
		if extra != nil {
			v += float64(w[m] * extra[j])
		}
		all[j] = Hit{j, v}
	}
	slices.SortStableFunc(all, func(a, b Hit) int {
		switch {
		case a.Score > b.Score:
			return -1
		case a.Score < b.Score:
			return 1
		}
		return 0
	})
	return all[:min(k, n)]
}

// normalize makes x sum to 1.
func normalize(x []float64) {
	s := 0.0
	for _, v := range x {
		s += v
	}
	for i := range x {
		x[i] /= s
	}
}

// regime draws the n×m items (rows of K^T: each column of K^T, i.e. each
// row of K, sums to 1) of a kind of model.
func regime(rng *rand.Rand, kind string, n, m int) []float64 {
	kt := make([]float64, n*m)
	row := make([]float64, n)
	for l := range m {
		clear(row)
		switch kind {
		case "local": // row l of K on a window of about 2n/m states
			lo, w := l*n/m, max(1, 2*n/m)
			for x := range w {
				row[(lo+x)%n] = rng.ExpFloat64()
			}
		case "dense":
			for j := range row {
				row[j] = rng.ExpFloat64()
			}
		case "sparse":
			for j := range row {
				if rng.IntN(5) == 0 {
					row[j] = rng.ExpFloat64()
				}
			}
			row[rng.IntN(n)] += 1
		case "ties": // few distinct values: many exact ties
			for j := range row {
				row[j] = float64(1 + rng.IntN(3))
			}
		case "uniform":
			for j := range row {
				row[j] = 1
			}
		case "tiny": // below float32's normal range after normalize's scale
			for j := range row {
				row[j] = rng.ExpFloat64()
			}
		}
		normalize(row)
		if kind == "tiny" {
			for j := range row {
				row[j] *= 1e-40
			}
		}
		for j, v := range row {
			kt[j*m+l] = v
		}
	}
	return kt
}

// query draws a D row: concentrated on a few hidden states, spread, or
// with zeros.
func query(rng *rand.Rand, kind string, m int) []float64 {
	w := make([]float64, m)
	switch kind {
	case "few":
		for range 1 + rng.IntN(3) {
			w[rng.IntN(m)] = rng.ExpFloat64()
		}
	case "spread":
		for l := range w {
			w[l] = rng.ExpFloat64()
		}
	case "one":
		w[rng.IntN(m)] = 1
	case "zero":
		return w
	}
	normalize(w)
	return w
}

// TestTopKMatchesOracle: on every kind of model and query, any k, list
// depth and budget, with and without the 8-bit shadow (so that the
// threshold algorithm, its early stop, the depth bound, the exact scan
// and the shadow scan all run), the answer is bitwise the oracle's.
func TestTopKMatchesOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var s Searcher
	var counts [3]int // answered by the lists, by the exact scan, by the shadow scan
	for trial := range 400 {
		n, m := 1+rng.IntN(300), 1+rng.IntN(12)
		kinds := []string{"local", "dense", "sparse", "ties", "uniform", "tiny"}
		kind := kinds[rng.IntN(len(kinds))]
		items := regime(rng, kind, n, m)
		var extra []float64
		if rng.IntN(4) == 0 {
			extra = make([]float64, n)
			for j := range extra {
				extra[j] = rng.Float64() / float64(n)
			}
		}
		depth := []int{0, 1, 3, 1 + rng.IntN(n)}[rng.IntN(4)]
		ix, err := NewIndex(items, n, m, extra, depth, 1+rng.IntN(3), QuantizedShadow(rng.IntN(2) == 0))
		if err != nil {
			t.Fatal(err)
		}
		for range 10 {
			w := query(rng, []string{"few", "spread", "one", "zero"}[rng.IntN(4)], m)
			if extra != nil {
				lambda := rng.Float64()
				for l := range w {
					w[l] *= lambda
				}
				w = append(w, 1-lambda)
			}
			k := []int{1, 2, 10, 1 + rng.IntN(n+5)}[rng.IntN(4)]
			budget := []int{0, 1, 1 + rng.IntN(3*n)}[rng.IntN(3)]
			got, st := ix.TopK(Query{W: w, K: k, Budget: budget}, &s, nil)
			want := oracle(items, extra, n, m, w, k)
			if !slices.Equal(got, want) {
				t.Fatalf("trial %d (%s, n=%d m=%d depth=%d k=%d budget=%d, stats %+v):\ngot  %v\nwant %v", trial, kind, n, m, ix.Depth(), k, budget, st, got, want)
			}
			switch {
			case st.Shadow:
				counts[2]++
			case st.Scanned:
				counts[1]++
			default:
				counts[0]++
			}
		}
	}
	if counts[0] < 500 || counts[1] < 300 || counts[2] < 300 {
		t.Errorf("answered %d queries by the lists, %d by the exact scan and %d by the shadow scan: the test must exercise all three", counts[0], counts[1], counts[2])
	}
}

// TestSkipListsIsSafe: a query that TopK sends to the scan without
// reading the lists (Stats.Skipped: k above its budget) is one the lists
// would not have proved within its budget (run again with readLists, it
// scans too), and its answer is the oracle's, on random models of every
// kind with budgets around k. (Skipping at 2k > budget makes it fail.)
func TestSkipListsIsSafe(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	var s Searcher
	skipped, proved := 0, 0
	for trial := range 300 {
		n, m := 8+rng.IntN(400), 1+rng.IntN(12)
		kinds := []string{"local", "dense", "sparse", "ties", "uniform", "tiny"}
		kind := kinds[rng.IntN(len(kinds))]
		items := regime(rng, kind, n, m)
		depth := []int{0, 1, 3, 1 + rng.IntN(n)}[rng.IntN(4)]
		ix, err := NewIndex(items, n, m, nil, depth, 1, QuantizedShadow(rng.IntN(2) == 0))
		if err != nil {
			t.Fatal(err)
		}
		for range 10 {
			w := query(rng, []string{"few", "spread", "one"}[rng.IntN(3)], m)
			k := []int{1, 2, 10}[rng.IntN(3)]
			budget := 1 + rng.IntN(2*k+2)
			q := Query{W: w, K: k, Budget: budget}
			got, st := ix.TopK(q, &s, nil)
			if want := oracle(items, nil, n, m, w, k); !slices.Equal(got, want) {
				t.Fatalf("trial %d (%s, n=%d m=%d depth=%d k=%d budget=%d, stats %+v):\ngot  %v\nwant %v", trial, kind, n, m, ix.Depth(), k, budget, st, got, want)
			}
			ix.readLists = true
			_, read := ix.TopK(q, &s, nil)
			ix.readLists = false
			if st.Skipped {
				skipped++
				if !read.Scanned {
					t.Fatalf("trial %d (%s, n=%d m=%d depth=%d k=%d budget=%d): the lists were skipped, but reading them proves the answer (%+v)", trial, kind, n, m, ix.Depth(), k, budget, read)
				}
			}
			if !read.Scanned {
				proved++
			}
		}
	}
	if skipped < 300 || proved < 30 {
		t.Errorf("%d queries skipped the lists, %d were proved by them: the test must exercise both", skipped, proved)
	}
}

// TestTopKTies: items with equal scores are answered smallest index first,
// also when the tie straddles the k-th place and the lists give the larger
// index first.
func TestTopKTies(t *testing.T) {
	const n, m = 50, 2
	items := make([]float64, n*m)
	for j := range n {
		items[j*m] = 0.01 // coordinate 0: all equal
		items[j*m+1] = 0
	}
	items[49*m], items[7*m] = 0.02, 0.02 // two tied best ones, larger index first in no list order
	ix, err := NewIndex(items, n, m, nil, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := ix.TopK(Query{W: []float64{1, 0}, K: 3}, nil, nil)
	want := []Hit{{7, 0.02}, {49, 0.02}, {0, 0.01}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestTopKReadsLittle: on a model of local dynamics (each row of K on a
// window of states, D rows on a few hidden states) the lists answer
// without the scan after reading a small part of them: the point of the
// index. The budget is n here: at n = 20 000 the default (n/128 lines of
// random reads, 52 to 156 items) prefers the scan for a query that needs
// more, and the test then checks that the lists' phase stays within it.
func TestTopKReadsLittle(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n, m = 20000, 32
	items := regime(rng, "local", n, m)
	ix, err := NewIndex(items, n, m, nil, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	var s Searcher
	scored := 0
	for range 200 {
		w := query(rng, "few", m)
		got, st := ix.TopK(Query{W: w, K: 10, Budget: n}, &s, nil)
		if st.Scanned {
			t.Fatalf("a concentrated query on a local model was scanned: %+v", st)
		}
		want := oracle(items, nil, n, m, w, 10)
		if !slices.Equal(got, want) {
			t.Fatal("wrong answer")
		}
		scored += st.Scored
		got, st = ix.TopK(Query{W: w, K: 10}, &s, nil)
		if !slices.Equal(got, want) {
			t.Fatal("wrong answer with the default budget")
		}
		if st.Scanned && st.Scored-n > n/128+batch {
			t.Fatalf("scanned after scoring %d items through the lists, above the default budget %d (+ a batch): %+v", st.Scored-n, n/128, st)
		}
	}
	if mean := float64(scored) / 200; mean > n/20 {
		t.Errorf("scored %.0f items a query on average, want well under n/20 = %d", mean, n/20)
	}
}

// TestTopKCustomScore: a custom score (here a smoothed probability computed
// another way) decides the answer, and the index's extra coordinate bounds
// it.
func TestTopKCustomScore(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const n, m = 400, 6
	items := regime(rng, "sparse", n, m)
	q := make([]float64, n)
	for j := range q {
		q[j] = rng.Float64()
	}
	normalize(q)
	ix, err := NewIndex(items, n, m, q, 30, 1)
	if err != nil {
		t.Fatal(err)
	}
	const lambda = 0.9
	for range 50 {
		d := query(rng, "few", m)
		smoothed := func(j int) float64 { return lambda*Dot(d, items[j*m:(j+1)*m]) + (1-lambda)*q[j] }
		w := append(slices.Clone(d), 1-lambda)
		for l := range m {
			w[l] *= lambda
		}
		got, _ := ix.TopK(Query{W: w, K: 5, Score: smoothed}, nil, nil)
		all := make([]Hit, n)
		for j := range all {
			all[j] = Hit{j, smoothed(j)}
		}
		slices.SortStableFunc(all, func(a, b Hit) int {
			if a.Score > b.Score {
				return -1
			}
			if a.Score < b.Score {
				return 1
			}
			return 0
		})
		if !slices.Equal(got, all[:5]) {
			t.Fatalf("got %v, want %v", got, all[:5])
		}
	}
}

func TestNewIndexRejectsBadValues(t *testing.T) {
	for _, v := range []float64{-1, math.NaN(), math.Inf(1)} {
		if _, err := NewIndex([]float64{0.5, v}, 2, 1, nil, 0, 1); err == nil {
			t.Errorf("value %v accepted", v)
		}
	}
}

// TestTopKSeenSetGrows: queries that score more items than the seen set
// first holds (it doubles, keeping the query's items) answer as the
// oracle does, and the next queries on the same Searcher start empty.
func TestTopKSeenSetGrows(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const n, m = 6000, 3
	items := regime(rng, "dense", n, m)
	ix, err := NewIndex(items, n, m, nil, n, 1)
	if err != nil {
		t.Fatal(err)
	}
	var s Searcher
	most := 0
	for trial := range 40 {
		w := query(rng, "spread", m)
		k := []int{1, 10, 600, 2000}[trial%4]
		got, st := ix.TopK(Query{W: w, K: k, Budget: 2 * n}, &s, nil)
		if want := oracle(items, nil, n, m, w, k); !slices.Equal(got, want) {
			t.Fatalf("trial %d (k=%d, stats %+v): the answer differs from the oracle's", trial, k, st)
		}
		most = max(most, st.Scored)
	}
	if most <= minSeen {
		t.Fatalf("no query scored more than %d items (most %d): the seen set never grew", minSeen, most)
	}
}

// TestDefaultBudgetByLines: the default budget is n/128 lines of random
// reads: a query whose weights' coordinates lie on one line of a row gets
// four times the items of one that reads all four lines (m = 32), never
// fewer than 1024; the extra coordinate is a line of its own.
func TestDefaultBudgetByLines(t *testing.T) {
	const m = 32
	ix := &Index{m: m}
	all := make([]int, m)
	for l := range all {
		all[l] = l
	}
	for _, c := range []struct {
		act   []int
		lines int
	}{
		{[]int{3}, 1}, {[]int{0, 7}, 1}, {[]int{7, 8}, 2}, {[]int{1, 9, 17, 25}, 4},
		{all, 4}, {[]int{31, m}, 2}, {append(slices.Clone(all), m), 5},
	} {
		if got := ix.lines(c.act); got != c.lines {
			t.Errorf("lines(%v) = %d, want %d", c.act, got, c.lines)
		}
	}
	for _, c := range [][3]int{{1_000_000, 1, 7812}, {1_000_000, 4, 1953}, {1_000_000, 0, 7812}, {100_000, 4, 195}, {50, 1, 16}} {
		if got := DefaultBudget(c[0], c[1]); got != c[2] {
			t.Errorf("DefaultBudget(%d, %d) = %d, want %d", c[0], c[1], got, c[2])
		}
	}
}
